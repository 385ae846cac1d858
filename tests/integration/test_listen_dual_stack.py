"""Listeners on the IPv6 wildcard: ``[::]`` takes IPv4 clients on every listener, as gRPC's
dual-stack socket does."""

from __future__ import annotations

import socket
import urllib.request

import pytest

from tests.integration.conftest import StartServer
from tests.integration.otlp_support import PROTOBUF, refund_request


def _ipv6_available() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_available(), reason="no IPv6 on this host")
def test_the_ipv6_wildcard_serves_otlp_http_to_ipv4_clients_as_grpc_does(
    start_server: StartServer,
) -> None:
    """``listen.*`` takes ``[IPv6]:PORT`` (docs/configuration.md), and ``[::]`` is the
    usual spelling of "every interface" (the gRPC listener, the Collector and most servers
    take it dual-stack on Linux). ``listeners.listening_socket`` binds the OTLP/HTTP and metrics
    listeners with ``socket.create_server(family=AF_INET6)``, which sets IPV6_V6ONLY: on
    ``[::]:4318`` every IPv4 client (most clusters' pod network, kubelet's probes on the pod
    IP, Prometheus) is refused, while ``[::]:4317`` serves them. One spelling, two answers."""
    server = start_server(listen__http="[::]:0", listen__grpc="[::]:0", listen__metrics="[::]:0")
    grpc_port = int(server.address("grpc").rsplit(":", 1)[1])
    http_port = int(server.address("http").rsplit(":", 1)[1])
    socket.create_connection(("127.0.0.1", grpc_port), timeout=5).close()  # gRPC: dual-stack

    url = f"http://127.0.0.1:{http_port}/v1/traces"
    request = urllib.request.Request(
        url, refund_request().SerializeToString(), {"Content-Type": PROTOBUF}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200
    assert server.sample("toolwatch_spans_received_total", {"transport": "http"}) == 6


@pytest.mark.skipif(not _ipv6_available(), reason="no IPv6 on this host")
def test_the_metrics_listener_on_the_ipv6_wildcard_serves_ipv4_and_ipv6(
    start_server: StartServer,
) -> None:
    server = start_server(listen__metrics="[::]:0")
    port = int(server.address("metrics").rsplit(":", 1)[1])
    for host in ("127.0.0.1", "[::1]"):
        with urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=10) as answer:
            assert answer.status == 200
