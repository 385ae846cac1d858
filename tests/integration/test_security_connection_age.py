"""Connections to the OTLP listeners and the metrics listener are closed at
``ingest.max_connection_age_seconds``, so that a client certificate is checked again, against
the client CA served then, within that age of a rotation (``toolwatch.connection_age``).

gRPC ages a connection by its own clock (real time: a bound of 3 s here, waited for as the
channel's connection going away); the HTTP listeners by the server's clock (a
``ManualClock``, moved)."""

from __future__ import annotations

import http.client
import os
import ssl
import threading
from pathlib import Path

import grpc
import pytest
import trustme
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from tests.integration.conftest import RunningServer, StartServer
from tests.integration.pki_support import Pki
from tests.integration.security_support import client_context, tls

_EMPTY_EXPORT = trace_service_pb2.ExportTraceServiceRequest()
#: A connection of its own per channel: none shared with another channel of the test.
_OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]
#: Real seconds for gRPC, whose connection age is its own: long enough for the steps a test
#: takes on a connection before it (a few exports and a reload), short enough to wait for.
_GRPC_AGE = 3
#: How long a test waits for gRPC to close a connection of ``_GRPC_AGE`` (it spreads the age
#: ±10%): never reached unless the connection stays open.
_CLOSED_WITHIN = 15.0
_HTTP_AGE = 60


def _export(channel: grpc.Channel) -> grpc.StatusCode:
    stub = trace_service_pb2_grpc.TraceServiceStub(channel)  # type: ignore[no-untyped-call]
    try:
        stub.Export(_EMPTY_EXPORT, timeout=10)
    except grpc.RpcError as error:
        code: grpc.StatusCode = error.code()
        return code
    return grpc.StatusCode.OK


def _connection_closed(channel: grpc.Channel) -> threading.Event:
    """Set once the channel, having been connected, no longer is: its connection closed."""
    closed = threading.Event()
    connected = threading.Event()

    def watch(state: grpc.ChannelConnectivity) -> None:
        if state is grpc.ChannelConnectivity.READY:
            connected.set()
        elif connected.is_set():
            closed.set()

    channel.subscribe(watch)
    return closed


def _server_trusting_a_rotatable_client_ca(
    start_server: StartServer, pki: Pki, tmp_path: Path, age: float
) -> tuple[RunningServer, Path]:
    client_ca = tmp_path / "client-ca.pem"
    client_ca.write_bytes(pki.read("client_ca"))
    server = start_server(
        **tls(pki),
        security__tls__client_ca_file=str(client_ca),
        security__tls__reload_seconds=30,
        ingest__max_connection_age_seconds=age,
    )
    return server, client_ca


def _take_the_client_ca_out(server: RunningServer, client_ca: Path) -> None:
    """Replace the client CA with another (as a Secret update does) and let both gRPC and the
    HTTPS listeners take it."""
    staged = client_ca.with_suffix(".new")
    trustme.CA().cert_pem.write_to_path(str(staged))
    os.replace(staged, client_ca)
    server.clock.advance(30)
    server.call(server.app.tick)


def test_a_grpc_connection_opened_before_its_client_ca_was_taken_out_is_refused_at_its_age(
    start_server: StartServer, pki: Pki, tmp_path: Path
) -> None:
    """Was: a gRPC connection opened before its client CA was taken out of
    ``tls.client_ca_file`` was served for as long as the client kept it (OTLP exporters keep
    one for days); only new connections were refused. Now: it is served until it is
    ``ingest.max_connection_age_seconds`` old, then closed (GOAWAY), and the client's next
    call, on a new connection, is refused at the handshake."""
    server, client_ca = _server_trusting_a_rotatable_client_ca(
        start_server, pki, tmp_path, _GRPC_AGE
    )
    target = server.address("grpc")
    credentials = grpc.ssl_channel_credentials(
        pki.read("ca"), pki.read("client_key"), pki.read("client_cert")
    )
    with grpc.secure_channel(target, credentials, _OWN_CONNECTION) as connected:
        closed = _connection_closed(connected)
        assert _export(connected) == grpc.StatusCode.OK

        _take_the_client_ca_out(server, client_ca)
        with grpc.secure_channel(target, credentials, _OWN_CONNECTION) as fresh:
            assert _export(fresh) == grpc.StatusCode.UNAVAILABLE  # the handshake fails
        assert _export(connected) == grpc.StatusCode.OK  # its connection is not that old yet

        assert closed.wait(_CLOSED_WITHIN)
        assert _export(connected) == grpc.StatusCode.UNAVAILABLE


def test_a_grpc_client_connects_again_at_the_age_and_goes_on_exporting(
    start_server: StartServer,
) -> None:
    """The age closes connections, not clients out: a client whose connection was closed
    exports on a new one (plaintext too: the bound is every OTLP/gRPC connection's)."""
    server = start_server(ingest__max_connection_age_seconds=_GRPC_AGE)
    with grpc.insecure_channel(server.address("grpc"), _OWN_CONNECTION) as channel:
        closed = _connection_closed(channel)
        assert _export(channel) == grpc.StatusCode.OK
        assert closed.wait(_CLOSED_WITHIN)
        assert _export(channel) == grpc.StatusCode.OK
    assert server.sample("toolwatch_auth_failures_total", {"listener": "grpc"}) == 0


def _request(listener: str) -> tuple[str, str, bytes | None, dict[str, str]]:
    """A request the listener answers 200: an empty export, or a scrape."""
    if listener == "http":
        body = _EMPTY_EXPORT.SerializeToString()
        return "POST", "/v1/traces", body, {"Content-Type": "application/x-protobuf"}
    return "GET", "/metrics", None, {}


def _connection(server: RunningServer, listener: str, pki: Pki) -> http.client.HTTPSConnection:
    host, _, port = server.address(listener).rpartition(":")
    return http.client.HTTPSConnection(
        host, int(port), context=client_context(pki, client=True), timeout=10
    )


@pytest.mark.parametrize("listener", ["http", "metrics"])
def test_an_https_connection_opened_before_its_client_ca_was_taken_out_is_refused_at_its_age(
    start_server: StartServer, pki: Pki, tmp_path: Path, listener: str
) -> None:
    """Was: an OTLP/HTTP (or metrics) connection kept alive was served after its client CA
    was taken out, for as long as requests came within ``ingest.idle_timeout_seconds``. Now:
    the first answer once it is ``ingest.max_connection_age_seconds`` old (counted from its
    first request) is sent ``Connection: close`` and the connection closed, and the client's
    next request, on a new connection, is refused at the handshake."""
    server, client_ca = _server_trusting_a_rotatable_client_ca(
        start_server, pki, tmp_path, _HTTP_AGE
    )
    method, path, body, headers = _request(listener)
    connection = _connection(server, listener, pki)
    try:
        connection.request(method, path, body, headers)
        first = connection.getresponse()
        first.read()
        assert (first.status, first.will_close) == (200, False)

        _take_the_client_ca_out(server, client_ca)  # 30 s on
        connection.request(method, path, body, headers)
        younger = connection.getresponse()
        younger.read()
        assert (younger.status, younger.will_close) == (200, False)

        server.clock.advance(_HTTP_AGE - 30)
        connection.request(method, path, body, headers)
        last = connection.getresponse()
        last.read()
        assert (last.status, last.will_close, last.getheader("Connection")) == (
            200,
            True,
            "close",
        )

        with pytest.raises((ssl.SSLError, ConnectionError)):  # a new connection, refused
            connection.request(method, path, body, headers)
            connection.getresponse()
    finally:
        connection.close()


def test_a_refusal_past_the_age_closes_the_connection_too(
    start_server: StartServer, pki: Pki
) -> None:
    """Every answer counts, aiohttp's own (a 404 for a path not served) included."""
    server = start_server(**tls(pki, mutual=True), ingest__max_connection_age_seconds=_HTTP_AGE)
    connection = _connection(server, "metrics", pki)
    try:
        connection.request("GET", "/healthz")
        first = connection.getresponse()
        assert (first.status, first.read(), first.will_close) == (200, b"ok\n", False)
        server.clock.advance(_HTTP_AGE)
        connection.request("GET", "/not-served")
        missing = connection.getresponse()
        missing.read()
        assert (missing.status, missing.will_close) == (404, True)
    finally:
        connection.close()
