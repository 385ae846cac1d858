"""TLS, mutual TLS and bearer tokens on every listener, through real clients (the SDK's OTLP
exporters, grpc, urllib, ``toolwatch tail``), with certificates made at run time (trustme).
Also: argument values stay out of metric labels, the findings log and the stream."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import io
import json
import logging
import os
import re
import socket
import ssl
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import trustme
from google.rpc import code_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpExporter,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from prometheus_client.parser import text_string_to_metric_families

from tests.certificates import (
    alt_names,
    client_certificate,
    install_certificate,
    not_after,
    not_before,
    with_edi_party_name,
    write_client_certificate,
)
from tests.integration import agents
from tests.integration.conftest import RunningServer
from tests.integration.test_stream import make_finding, make_trace
from toolwatch.config import ConfigError, load_config
from toolwatch.sinks.findings import REDACTED
from toolwatch.tail import run_tail
from toolwatch.tail_access import StreamAccess
from toolwatch.tail_exits import EXIT_USAGE

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "s3cret-token"
AUTH_FAILURES = "toolwatch_auth_failures_total"
RELOAD_FAILURES = "toolwatch_security_reload_failures_total"
CERTIFICATE_EXPIRY = "toolwatch_tls_certificate_expiry_timestamp_seconds"
CERTIFICATE_NOT_BEFORE = "toolwatch_tls_certificate_not_before_timestamp_seconds"
DAY = datetime.timedelta(days=1)
Start = Callable[..., RunningServer]


@dataclass(frozen=True)
class Pki:
    """PEM files: a server certificate for 127.0.0.1 and two client certificates, one
    signed by the CA the server trusts for clients and one by a stranger."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_ca: Path
    client_cert: Path
    client_key: Path
    rogue_cert: Path
    rogue_key: Path
    named_cert: Path
    named_key: Path
    token_file: Path
    clients: trustme.CA  # the client CA, to issue more client certificates

    def client_files(self, directory: Path, cert: bytes, key: bytes) -> tuple[Path, Path]:
        """``cert`` and ``key`` (PEM) written to ``directory``, for clients that read files."""
        paths = directory / "client-cert.pem", directory / "client-key.pem"
        paths[0].write_bytes(cert)
        paths[1].write_bytes(key)
        return paths

    def read(self, name: str) -> bytes:
        path: Path = getattr(self, name)
        return path.read_bytes()


def _write_leaf(cert: trustme.LeafCert, cert_path: Path, key_path: Path) -> None:
    for pem in cert.cert_chain_pems:
        pem.write_to_path(str(cert_path), append=True)
    cert.private_key_pem.write_to_path(str(key_path))


#: The names of the client certificate ``named`` (the Collector's, as a cluster's CA would
#: issue it, SPIFFE ID and all; and an IP address, which names no client).
NAMED_CN = "otel-collector"
NAMED_DNS = "otel-collector.observability.svc"
NAMED_SPIFFE = "spiffe://cluster.local/ns/observability/sa/otel-collector"
NAMED_EMAIL = "collector@example.com"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def make_pki(d: Path) -> Pki:
    """The certificates of ``Pki``, made in the directory ``d``."""
    server_ca, client_ca, rogue_ca = trustme.CA(), trustme.CA(), trustme.CA()
    server_ca.cert_pem.write_to_path(str(d / "ca.pem"))
    client_ca.cert_pem.write_to_path(str(d / "client-ca.pem"))
    _write_leaf(server_ca.issue_cert("127.0.0.1", "localhost"), d / "server.pem", d / "server.key")
    _write_leaf(client_ca.issue_cert("agent.example"), d / "client.pem", d / "client.key")
    _write_leaf(rogue_ca.issue_cert("agent.example"), d / "rogue.pem", d / "rogue.key")
    write_client_certificate(
        client_ca,
        d / "named.pem",
        d / "named.key",
        [NAMED_CN],
        alt_names(f"dns:{NAMED_DNS}", f"uri:{NAMED_SPIFFE}", f"email:{NAMED_EMAIL}", "ip:10.1.2.3"),
    )
    (d / "tokens").write_text(TOKEN + "\n")
    return Pki(
        ca=d / "ca.pem",
        server_cert=d / "server.pem",
        server_key=d / "server.key",
        client_ca=d / "client-ca.pem",
        client_cert=d / "client.pem",
        client_key=d / "client.key",
        rogue_cert=d / "rogue.pem",
        rogue_key=d / "rogue.key",
        named_cert=d / "named.pem",
        named_key=d / "named.key",
        token_file=d / "tokens",
        clients=client_ca,
    )


@pytest.fixture(autouse=True)
def _no_ca_bundle_override(monkeypatch: pytest.MonkeyPatch) -> None:
    # requests lets these variables override Session.verify, where the OTLP/HTTP exporter
    # puts certificate_file (psf/requests#3829): the test CA would be ignored.
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)


def tls(pki: Pki, mutual: bool = False, **more: Any) -> dict[str, Any]:
    """``start_server`` overrides turning TLS (and optionally mTLS) on."""
    settings = {
        "security__tls__cert_file": str(pki.server_cert),
        "security__tls__key_file": str(pki.server_key),
        **more,
    }
    if mutual:
        settings["security__tls__client_ca_file"] = str(pki.client_ca)
    return settings


def auth(token_file: Path, **more: Any) -> dict[str, Any]:
    return {"security__auth__bearer_token_file": str(token_file), **more}


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def grpc_credentials(pki: Pki, client: str | None = None) -> grpc.ChannelCredentials:
    """Trusts the server's CA; ``client`` ("client", "named" or "rogue") presents that
    certificate."""
    if client is None:
        return grpc.ssl_channel_credentials(pki.read("ca"))
    return grpc.ssl_channel_credentials(
        pki.read("ca"), pki.read(f"{client}_key"), pki.read(f"{client}_cert")
    )


def send_grpc(
    server: RunningServer,
    spans: Sequence[ReadableSpan],
    credentials: grpc.ChannelCredentials | None = None,
    token: str | None = None,
) -> SpanExportResult:
    exporter = GrpcExporter(
        endpoint=server.address("grpc"),
        insecure=credentials is None,
        credentials=credentials,
        headers={"authorization": f"Bearer {token}"} if token else None,
        timeout=10,
    )
    try:
        return exporter.export(spans)
    finally:
        exporter.shutdown()


def send_http(
    server: RunningServer,
    spans: Sequence[ReadableSpan],
    pki: Pki | None = None,
    client: bool | str = False,
    token: str | None = None,
) -> SpanExportResult:
    """``client``: present the client certificate (``True``), or the one named ("named")."""
    scheme = "https" if pki else "http"
    who = "client" if client is True else client
    exporter = HttpExporter(
        endpoint=f"{scheme}://{server.address('http')}/v1/traces",
        certificate_file=str(pki.ca) if pki else None,
        client_certificate_file=str(getattr(pki, f"{who}_cert")) if pki and who else None,
        client_key_file=str(getattr(pki, f"{who}_key")) if pki and who else None,
        headers={"authorization": f"Bearer {token}"} if token else None,
        timeout=10,
    )
    try:
        return exporter.export(spans)
    finally:
        exporter.shutdown()  # type: ignore[no-untyped-call]


def raw_export(
    server: RunningServer,
    credentials: grpc.ChannelCredentials | None = None,
    metadata: tuple[tuple[str, str], ...] = (),
) -> grpc.StatusCode:
    """One empty Export call with a plain grpc client; returns the status code. Asserts
    that an UNAUTHENTICATED or PERMISSION_DENIED answer carries no detail."""
    target = server.address("grpc")
    channel = (
        grpc.secure_channel(target, credentials)
        if credentials is not None
        else grpc.insecure_channel(target)
    )
    with channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)  # type: ignore[no-untyped-call]
        request = trace_service_pb2.ExportTraceServiceRequest()
        try:
            stub.Export(request, metadata=metadata, timeout=10)
        except grpc.RpcError as error:
            code: grpc.StatusCode = error.code()
            if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
                assert not error.details()
            return code
    return grpc.StatusCode.OK


def health_check(target: str, credentials: grpc.ChannelCredentials | None) -> Any:
    channel = (
        grpc.secure_channel(target, credentials)
        if credentials is not None
        else grpc.insecure_channel(target)
    )
    with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return stub.Check(health_pb2.HealthCheckRequest(), timeout=10).status


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    headers: dict[str, str]
    body: bytes


def http_get(url: str, context: ssl.SSLContext | None, token: str | None = None) -> HttpAnswer:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return HttpAnswer(response.status, dict(response.headers), response.read())
    except urllib.error.HTTPError as error:
        return HttpAnswer(error.code, dict(error.headers), error.read())


def post_traces(server: RunningServer, context: ssl.SSLContext, token: str | None) -> HttpAnswer:
    request = urllib.request.Request(
        f"https://{server.address('http')}/v1/traces",
        data=trace_service_pb2.ExportTraceServiceRequest().SerializeToString(),
        headers={"Content-Type": "application/x-protobuf"},
    )
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return HttpAnswer(response.status, dict(response.headers), response.read())
    except urllib.error.HTTPError as error:
        return HttpAnswer(error.code, dict(error.headers), error.read())


def client_context(pki: Pki, client: bool | str = False) -> ssl.SSLContext:
    """Trusts the server's CA; ``client``: presents the client certificate (``True``), or
    the one named ("named", "rogue")."""
    context = ssl.create_default_context(cafile=str(pki.ca))
    if client:
        who = "client" if client is True else client
        context.load_cert_chain(getattr(pki, f"{who}_cert"), getattr(pki, f"{who}_key"))
    return context


def refund_spans() -> tuple[ReadableSpan, ...]:
    return agents.record(agents.refund_run(), "genai")


def assert_one_refund_trace(server: RunningServer) -> None:
    assert server.settle() == 1
    [trace] = server.tooltraces()
    assert [c["tool_name"] for c in trace["calls"]] == ["lookup_order", "issue_refund"]


# -- TLS --------------------------------------------------------------------------------------


def test_otlp_grpc_over_tls_builds_the_tooltrace(start_server: Start, pki: Pki) -> None:
    server = start_server(**tls(pki))
    assert send_grpc(server, refund_spans(), grpc_credentials(pki)) is SpanExportResult.SUCCESS
    assert_one_refund_trace(server)


def test_plaintext_to_a_tls_grpc_port_fails(start_server: Start, pki: Pki) -> None:
    server = start_server(**tls(pki))
    assert raw_export(server) == grpc.StatusCode.UNAVAILABLE
    assert server.sample("toolwatch_spans_received_total", {"transport": "grpc"}) == 0


def test_otlp_http_over_tls_builds_the_tooltrace(start_server: Start, pki: Pki) -> None:
    server = start_server(**tls(pki))
    assert send_http(server, refund_spans(), pki) is SpanExportResult.SUCCESS
    assert_one_refund_trace(server)


@pytest.mark.parametrize("secure", [True, False], ids=["tls", "plaintext"])
@pytest.mark.parametrize("listener", ["grpc", "http", "metrics", "stream"])
def test_a_handshake_that_never_finishes_is_closed_at_the_idle_timeout(
    start_server: Start, pki: Pki, listener: str, secure: bool
) -> None:
    """A client that opens connections and never finishes the handshake (no ClientHello; on
    gRPC, no HTTP/2 preface) must not hold them for asyncio's 60 s or gRPC's 120: closed at
    ingest.idle_timeout_seconds. Real time is the point: 0.5 s."""
    server = start_server(**(tls(pki) if secure else {}), ingest__idle_timeout_seconds=0.5)
    host, port = server.address(listener).rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as client:
        client.sendall(b"\x16\x03\x01" if secure else b"")  # a TLS record's start, or nothing
        with contextlib.suppress(ConnectionResetError):  # aborted rather than closed: as good
            while client.recv(100):  # gRPC sends its HTTP/2 settings first
                pass  # closed by the server, before the 10 s timeout


def test_mutual_tls_grpc_needs_a_certificate_signed_by_the_client_ca(
    start_server: Start, pki: Pki
) -> None:
    server = start_server(**tls(pki, mutual=True))
    assert raw_export(server, grpc_credentials(pki)) == grpc.StatusCode.UNAVAILABLE
    assert raw_export(server, grpc_credentials(pki, "rogue")) == grpc.StatusCode.UNAVAILABLE
    result = send_grpc(server, refund_spans(), grpc_credentials(pki, "client"))
    assert result is SpanExportResult.SUCCESS
    assert_one_refund_trace(server)


def test_mutual_tls_http_needs_a_client_certificate(start_server: Start, pki: Pki) -> None:
    server = start_server(**tls(pki, mutual=True))
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        post_traces(server, client_context(pki), token=None)
    assert post_traces(server, client_context(pki, client=True), token=None).status == 200
    assert send_http(server, refund_spans(), pki, client=True) is SpanExportResult.SUCCESS
    assert_one_refund_trace(server)


def test_mutual_tls_metrics_lets_probes_in_without_a_client_certificate(
    start_server: Start, pki: Pki
) -> None:
    """Kubelet's HTTPS probes send no client certificate: on the metrics listener the
    handshake succeeds without one, and only /healthz and /readyz answer."""
    server = start_server(**tls(pki, mutual=True))
    base = f"https://{server.address('metrics')}"
    anonymous, agent = client_context(pki), client_context(pki, client=True)
    assert [http_get(f"{base}{path}", anonymous).status for path in ("/healthz", "/readyz")] == [
        200,
        200,
    ]
    refused = http_get(f"{base}/metrics", anonymous)
    assert (refused.status, refused.body) == (403, b"")
    assert server.sample(AUTH_FAILURES, {"listener": "metrics"}) == 1

    scraped = http_get(f"{base}/metrics", agent)
    assert scraped.status == 200
    assert b"toolwatch_build_info" in scraped.body
    rogue = client_context(pki)
    rogue.load_cert_chain(pki.rogue_cert, pki.rogue_key)
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        http_get(f"{base}/healthz", rogue)  # a certificate the client CA did not sign
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        post_traces(server, anonymous, token=None)  # OTLP/HTTP still requires one


def test_metrics_over_tls_and_token_while_probes_stay_open(start_server: Start, pki: Pki) -> None:
    listeners = ["grpc", "http", "metrics", "stream"]
    server = start_server(**tls(pki), **auth(pki.token_file, security__auth__listeners=listeners))
    base, context = f"https://{server.address('metrics')}", client_context(pki)

    refused = http_get(f"{base}/metrics", context)
    assert (refused.status, refused.headers["WWW-Authenticate"], refused.body) == (
        401,
        'Bearer realm="toolwatch"',
        b"",
    )
    scraped = http_get(f"{base}/metrics", context, TOKEN)
    assert scraped.status == 200
    assert b'toolwatch_auth_failures_total{listener="metrics"} 1.0' in scraped.body
    assert http_get(f"{base}/healthz", context).body == b"ok\n"
    assert http_get(f"{base}/readyz", context).body == b"ready\n"
    with pytest.raises((urllib.error.URLError, ConnectionError)):  # plaintext to a TLS port
        http_get(f"http://{server.address('metrics')}/healthz", None)


def _image_health_check(address: str) -> subprocess.CompletedProcess[str]:
    """The Dockerfile's HEALTHCHECK command, run as the image runs it, against ``address``
    instead of its port 9464 (which may be taken here)."""
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    healthcheck = text.partition("\nHEALTHCHECK ")[2]
    command = json.loads(re.findall(r"^\s*CMD (\[.*\])$", healthcheck, re.MULTILINE)[0])
    assert command[0] == "python" and any("127.0.0.1:9464" in arg for arg in command), command
    args = [arg.replace("127.0.0.1:9464", address) for arg in command[1:]]
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=30, check=False
    )


@pytest.mark.parametrize("security", ["none", "tls", "mutual tls"])
def test_the_image_health_check_passes_with_and_without_tls_on_metrics(
    start_server: Start, pki: Pki, caplog: pytest.LogCaptureFixture, security: str
) -> None:
    """--tls-cert puts TLS on the metrics listener too: a check asking plain HTTP left a
    correctly configured container unhealthy. With a client CA, probes need no certificate."""
    overrides = tls(pki, mutual=security == "mutual tls") if security != "none" else {}
    server = start_server(**overrides)
    assert server.app.config.security.uses_tls("metrics") is (security != "none")
    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        done = _image_health_check(server.address("metrics"))
    assert done.returncode == 0, done.stderr
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO] == []


def test_the_image_health_check_fails_where_nothing_listens() -> None:
    with socket.socket() as bound:  # bound, not listening: connections are refused
        bound.bind(("127.0.0.1", 0))
        done = _image_health_check(f"127.0.0.1:{bound.getsockname()[1]}")
    assert done.returncode == 1
    assert "ConnectionRefusedError" in done.stderr


# -- bearer tokens ------------------------------------------------------------------------------


def test_grpc_without_the_right_token_is_unauthenticated_and_counted(
    start_server: Start, pki: Pki
) -> None:
    server = start_server(**tls(pki), **auth(pki.token_file))
    credentials = grpc_credentials(pki)
    assert raw_export(server, credentials) == grpc.StatusCode.UNAUTHENTICATED
    assert raw_export(server, credentials, bearer("wrong")) == grpc.StatusCode.UNAUTHENTICATED
    assert raw_export(server, credentials, (("authorization", TOKEN),)) == (
        grpc.StatusCode.UNAUTHENTICATED
    )
    assert server.sample(AUTH_FAILURES, {"listener": "grpc"}) == 3
    assert server.sample("toolwatch_spans_received_total", {"transport": "grpc"}) == 0
    # kubelet gRPC probes send no token: the health service stays open.
    status = health_check(server.address("grpc"), credentials)
    assert status == health_pb2.HealthCheckResponse.SERVING

    result = send_grpc(server, refund_spans(), credentials, token=TOKEN)
    assert result is SpanExportResult.SUCCESS
    assert_one_refund_trace(server)
    assert server.sample(AUTH_FAILURES, {"listener": "grpc"}) == 3


def health_watch(
    target: str, credentials: grpc.ChannelCredentials, metadata: tuple[tuple[str, str], ...] = ()
) -> grpc.StatusCode | int:
    """The first status a health ``Watch`` stream sends, or the code that refused it."""
    with grpc.secure_channel(target, credentials) as channel:
        stream = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(), metadata=metadata, timeout=10
        )
        try:
            status: int = next(stream).status
        except grpc.RpcError as error:
            code: grpc.StatusCode = error.code()
            return code
        stream.cancel()
        return status


def test_a_health_watch_stream_needs_a_token_where_check_does_not(
    start_server: Start, pki: Pki
) -> None:
    """A Watch lasts as long as its caller likes: open to anyone who can connect, any number
    of them could be held. Probes call Check."""
    server = start_server(**tls(pki), **auth(pki.token_file))
    credentials, target = grpc_credentials(pki), server.address("grpc")

    assert health_watch(target, credentials) == grpc.StatusCode.UNAUTHENTICATED
    assert server.sample(AUTH_FAILURES, {"listener": "grpc"}) == 1
    assert health_watch(target, credentials, bearer(TOKEN)) == (
        health_pb2.HealthCheckResponse.SERVING
    )
    assert health_check(target, credentials) == health_pb2.HealthCheckResponse.SERVING
    assert server.sample(AUTH_FAILURES, {"listener": "grpc"}) == 1


def test_http_without_the_right_token_is_401_and_counted(start_server: Start, pki: Pki) -> None:
    server = start_server(**tls(pki), **auth(pki.token_file))
    context = client_context(pki)
    # The last two go out as bytes that are not UTF-8 (http.client writes latin-1). OTLP:
    # the body of every error answer is a google.rpc.Status; this one says only its code.
    unauthenticated = status_pb2.Status(code=code_pb2.UNAUTHENTICATED).SerializeToString()
    for token in (None, "wrong", "s3cr\xe9t", "\xff\xfe"):
        answer = post_traces(server, context, token)
        assert (answer.status, answer.headers["WWW-Authenticate"], answer.body) == (
            401,
            'Bearer realm="toolwatch"',
            unauthenticated,
        )
        assert answer.headers["Content-Type"] == "application/x-protobuf"
    assert server.sample(AUTH_FAILURES, {"listener": "http"}) == 4
    assert send_http(server, refund_spans(), pki) is SpanExportResult.FAILURE

    assert send_http(server, refund_spans(), pki, token=TOKEN) is SpanExportResult.SUCCESS
    assert_one_refund_trace(server)
    assert server.sample(AUTH_FAILURES, {"listener": "http"}) == 5


def test_a_rotated_token_file_applies_after_reload_seconds(
    start_server: Start, tmp_path: Path
) -> None:
    token_file = tmp_path / "tokens"
    token_file.write_text("old-token\n")
    server = start_server(**auth(token_file, security__auth__reload_seconds=30))
    assert raw_export(server, metadata=bearer("old-token")) == grpc.StatusCode.OK

    staging = tmp_path / "tokens.new"
    staging.write_text("new-token\n")
    os.replace(staging, token_file)
    server.clock.advance(29)
    assert raw_export(server, metadata=bearer("old-token")) == grpc.StatusCode.OK
    assert raw_export(server, metadata=bearer("new-token")) == grpc.StatusCode.UNAUTHENTICATED

    server.clock.advance(1)
    assert raw_export(server, metadata=bearer("new-token")) == grpc.StatusCode.OK
    assert raw_export(server, metadata=bearer("old-token")) == grpc.StatusCode.UNAUTHENTICATED
    assert server.sample(AUTH_FAILURES, {"listener": "grpc"}) == 2


def _trusted_by(server: RunningServer, ca: trustme.CA) -> tuple[bool, bool]:
    """Whether a new gRPC connection and a new HTTPS connection trusting only ``ca`` get a
    certificate it signed."""
    pem = ca.cert_pem.bytes()
    # A fresh connection every time: no subchannel shared with an earlier channel.
    options = [("grpc.use_local_subchannel_pool", 1)]
    with grpc.secure_channel(
        server.address("grpc"), grpc.ssl_channel_credentials(pem), options
    ) as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)  # type: ignore[no-untyped-call]
        try:
            stub.Export(trace_service_pb2.ExportTraceServiceRequest(), timeout=10)
            grpc_ok = True
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.UNAVAILABLE  # the handshake failed
            grpc_ok = False
    context = ssl.create_default_context(cadata=pem.decode())
    try:
        https_ok = http_get(f"https://{server.address('metrics')}/healthz", context).status == 200
    except urllib.error.URLError as error:
        assert isinstance(error.reason, ssl.SSLCertVerificationError)
        https_ok = False
    return grpc_ok, https_ok


def serving_certificate(
    start_server: Start, tmp_path: Path, ca: trustme.CA
) -> tuple[RunningServer, Path, Path]:
    """A server serving TLS from files ``ca`` issued, looked at every 30 s of its clock, and
    the certificate's and key's paths for a rotation."""
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    install_certificate(ca, cert, key)
    server = start_server(
        security__tls__cert_file=str(cert),
        security__tls__key_file=str(key),
        security__tls__reload_seconds=30,
    )
    return server, cert, key


def test_a_rotated_certificate_is_served_to_new_connections_without_a_restart(
    start_server: Start, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first, second, third = trustme.CA(), trustme.CA(), trustme.CA()
    server, cert, key = serving_certificate(start_server, tmp_path, first)
    assert _trusted_by(server, first) == (True, True)
    assert _trusted_by(server, second) == (False, False)

    install_certificate(second, cert, key)
    server.clock.advance(29)  # not looked at yet
    server.call(server.app.tick)
    assert _trusted_by(server, first) == (True, True)

    server.clock.advance(1)
    server.call(server.app.tick)
    assert _trusted_by(server, second) == (True, True)
    assert _trusted_by(server, first) == (False, False)

    # Half a rotation (a new certificate, the old key) does not load: the last good set stays.
    install_certificate(third, cert, key, key=False)
    server.clock.advance(30)
    with caplog.at_level(logging.ERROR, logger="toolwatch"):
        server.call(server.app.tick)
    assert _trusted_by(server, second) == (True, True)
    assert _trusted_by(server, third) == (False, False)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors and all(e.startswith("keeping the previous TLS certificate") for e in errors)


def test_a_rotation_to_an_expired_certificate_keeps_the_valid_one(
    start_server: Start, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """OpenSSL loads an expired certificate (a restored backup, a renewal job that wrote the
    old file): taken, it failed every new OTLP, metrics and stream handshake, while the log
    said "reloaded" and no reload failure was counted. Judged on the real clock."""
    ca = trustme.CA()
    server, cert, key = serving_certificate(start_server, tmp_path, ca)
    now = datetime.datetime.now(datetime.UTC)
    install_certificate(ca, cert, key, not_before=now - 30 * DAY, not_after=now - DAY)
    server.clock.advance(30)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="toolwatch"):
        server.call(server.app.tick)  # the look at the files (gRPC's next handshake looks too)

    assert _trusted_by(server, ca) == (True, True)
    assert server.sample(RELOAD_FAILURES, {"file": "certificate"}) == 1
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert len(said) == 1 and said[0][0] == "ERROR"
    assert said[0][1].startswith(
        f"keeping the previous TLS certificate: {cert}: the certificate expired at"
    )


def _scraped_dates(
    server: RunningServer, ca: trustme.CA, pki: Pki
) -> dict[str, tuple[float | None, float]]:
    """``toolwatch_tls_certificate_{not_before,expiry}_timestamp_seconds`` by file, as
    (notBefore, notAfter), read from a scrape of the real /metrics over mutual TLS (a new
    connection: the certificate served now)."""
    context = ssl.create_default_context(cadata=ca.cert_pem.bytes().decode())
    context.load_cert_chain(pki.client_cert, pki.client_key)
    scraped = http_get(f"https://{server.address('metrics')}/metrics", context)
    assert scraped.status == 200
    families = {f.name: f for f in text_string_to_metric_families(scraped.body.decode())}
    by_file = [
        {sample.labels["file"]: sample.value for sample in families[name].samples}
        for name in (CERTIFICATE_NOT_BEFORE, CERTIFICATE_EXPIRY)
    ]
    return {file: (by_file[0].get(file), at) for file, at in by_file[1].items()}


def _dates(pem: bytes) -> tuple[float, float]:
    return not_before(pem), not_after(pem)


def test_metrics_say_when_the_served_certificate_and_client_ca_are_valid(
    start_server: Start, pki: Pki, tmp_path: Path
) -> None:
    """The notBefore and notAfter of the certificate served now, as the real exposition reads,
    at start-up and after a rotation; the client CA's beside them."""
    ca = trustme.CA()
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    install_certificate(ca, cert, key, not_before=now - 30 * DAY, not_after=now + 60 * DAY)
    server = start_server(
        security__tls__cert_file=str(cert),
        security__tls__key_file=str(key),
        security__tls__client_ca_file=str(pki.client_ca),
        security__tls__reload_seconds=30,
    )
    client_ca = _dates(pki.read("client_ca"))
    started = _dates(cert.read_bytes())
    assert started == ((now - 30 * DAY).timestamp(), (now + 60 * DAY).timestamp())
    assert _scraped_dates(server, ca, pki) == {"certificate": started, "client_ca": client_ca}

    install_certificate(ca, cert, key, not_before=now, not_after=now + 90 * DAY)  # renewed
    server.clock.advance(30)
    server.call(server.app.tick)
    renewed = _dates(cert.read_bytes())
    assert renewed == (now.timestamp(), (now + 90 * DAY).timestamp())
    assert _scraped_dates(server, ca, pki) == {"certificate": renewed, "client_ca": client_ca}


def test_plaintext_metrics_have_no_certificate_dates(start_server: Start) -> None:
    server = start_server()
    with urllib.request.urlopen(f"http://{server.address('metrics')}/metrics", timeout=10) as r:
        text = r.read().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    declared = [families[name].samples for name in (CERTIFICATE_EXPIRY, CERTIFICATE_NOT_BEFORE)]
    assert declared == [[], []]  # declared, no series


def test_a_certificate_expiring_within_14_days_is_warned_of_at_start_up(
    start_server: Start, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    ends = datetime.datetime.now(datetime.UTC).replace(microsecond=0) + 10 * DAY
    install_certificate(trustme.CA(), cert, key, not_after=ends)
    with caplog.at_level(logging.WARNING, logger="toolwatch"):
        start_server(security__tls__cert_file=str(cert), security__tls__key_file=str(key))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    expected = (
        f"security.tls.cert_file {cert}: the certificate expires at"
        f" {ends:%Y-%m-%d %H:%M:%S} UTC, in 9 days 23 hours"
    )
    assert [w for w in warnings if w.startswith(expected)] == [
        f"{expected}: every client refuses it from then on; renew it (toolwatch takes the"
        " renewed file within tls.reload_seconds, without a restart)"
    ]


def test_a_fresh_day_long_certificate_is_not_warned_of_at_start_up(
    start_server: Start, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A mesh's certificate, for a day: under 14 days from the start, warned of only with less
    than a third of its lifetime left."""
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    hour = datetime.timedelta(hours=1)
    install_certificate(trustme.CA(), cert, key, not_before=now - hour, not_after=now + 23 * hour)
    with caplog.at_level(logging.WARNING, logger="toolwatch"):
        start_server(security__tls__cert_file=str(cert), security__tls__key_file=str(key))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [w for w in warnings if w.startswith("security.tls.cert_file")] == []


def test_a_rotated_client_ca_admits_the_clients_it_signed(
    start_server: Start, pki: Pki, tmp_path: Path
) -> None:
    client_ca = tmp_path / "client-ca.pem"
    client_ca.write_bytes(pki.read("client_ca"))
    server = start_server(
        **tls(pki),
        security__tls__client_ca_file=str(client_ca),
        security__tls__reload_seconds=30,
    )
    new_ca = trustme.CA()
    cert, key = tmp_path / "agent.pem", tmp_path / "agent.key"
    _write_leaf(new_ca.issue_cert("agent.example"), cert, key)
    agent = grpc.ssl_channel_credentials(pki.read("ca"), key.read_bytes(), cert.read_bytes())
    assert raw_export(server, agent) == grpc.StatusCode.UNAVAILABLE

    staged = tmp_path / "client-ca.new"
    new_ca.cert_pem.write_to_path(str(staged))
    os.replace(staged, client_ca)
    server.clock.advance(30)
    assert raw_export(server, agent) == grpc.StatusCode.OK
    assert raw_export(server, grpc_credentials(pki, "client")) == grpc.StatusCode.UNAVAILABLE


@dataclass
class Scrape:
    version: str | None
    resumed: bool
    reply: bytes
    session: ssl.SSLSession | None


def scrape_once(
    server: RunningServer, context: ssl.SSLContext, session: ssl.SSLSession | None = None
) -> Scrape:
    """One GET /metrics on its own connection, offering ``session`` for resumption."""
    host, _, port = server.address("metrics").rpartition(":")
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host, session=session) as conn,
    ):
        conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: toolwatch\r\nConnection: close\r\n\r\n")
        reply = conn.recv(12)  # TLS 1.3: a refused certificate shows here, after the handshake
        return Scrape(conn.version(), conn.session_reused, reply, conn.session)


def test_a_client_whose_ca_was_taken_out_cannot_resume_its_session(
    start_server: Start, pki: Pki, tmp_path: Path
) -> None:
    """A resumed session skips the client certificate's check. TLS 1.2 resumed by session id
    from the cache of the context the listener started with, which a rotation cannot reach:
    with a client CA the HTTPS listeners speak TLS 1.3 only, and issue no tickets."""
    client_ca = tmp_path / "client-ca.pem"
    client_ca.write_bytes(pki.read("client_ca"))
    server = start_server(
        **tls(pki),
        security__tls__client_ca_file=str(client_ca),
        security__tls__reload_seconds=30,
    )
    tls12 = client_context(pki, client=True)
    tls12.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(ssl.SSLError):
        scrape_once(server, tls12)

    agent = client_context(pki, client=True)
    first = scrape_once(server, agent)
    assert (first.version, first.resumed, first.reply) == ("TLSv1.3", False, b"HTTP/1.1 200")
    again = scrape_once(server, agent, first.session)
    assert (again.resumed, again.reply) == (False, b"HTTP/1.1 200")  # a full handshake

    staged = tmp_path / "client-ca.new"
    trustme.CA().cert_pem.write_to_path(str(staged))
    os.replace(staged, client_ca)
    server.clock.advance(30)
    server.call(server.app.tick)  # the reload
    try:  # TLS 1.3: the client has finished its handshake when the server refuses
        refused = scrape_once(server, agent, again.session).reply
    except (ssl.SSLError, ConnectionError) as error:
        refused = str(error).encode()
    assert not refused.startswith(b"HTTP")
    # A CA-less listener still speaks TLS 1.2 to the clients that need it.
    plain = start_server(**tls(pki))
    assert scrape_once(plain, tls12).reply == b"HTTP/1.1 200"


# -- the findings stream, and what findings show -----------------------------------------------


POLICY = {
    "policy__dangerous_tools": ["issue_refund"],
    "policy__verification_tools": ["lookup_order"],
    "policy__bindings": {"issue_refund.order_id": "lookup_order.order_id"},
}


@dataclass
class TailRun:
    code: int
    out: str
    err: str


def tail_during(
    server: RunningServer, act: Callable[[], None], access: StreamAccess, **options: Any
) -> TailRun:
    """Runs ``toolwatch tail`` on the server's stream in a thread; once it has subscribed,
    does ``act``, then ends the stream and returns what tail printed.
    The stream is ended even when ``act`` fails, so tail never outlives the test."""
    out, err = io.StringIO(), io.StringIO()
    codes: list[int] = []

    def tail() -> None:
        target = server.address("stream")
        codes.append(run_tail(target, out=out, err=err, access=access, **options))

    thread = threading.Thread(target=tail, daemon=True)
    thread.start()
    try:
        subscribed = server.app.broker.wait_for_subscribers(1)
        asyncio.run_coroutine_threadsafe(subscribed, server.loop).result(timeout=10)
        act()
    finally:
        server.call(server.app.broker.close)
        thread.join(timeout=10)
    return TailRun(codes[0], out.getvalue(), err.getvalue())


def tail_refused(server: RunningServer, access: StreamAccess, **options: Any) -> TailRun:
    """Runs ``toolwatch tail``, expecting it to give up on its own; ends the stream if it
    subscribed after all, so a regression fails instead of hanging."""
    out, err = io.StringIO(), io.StringIO()
    codes: list[int] = []

    def tail() -> None:
        target = server.address("stream")
        codes.append(run_tail(target, out=out, err=err, access=access, **options))

    thread = threading.Thread(target=tail, daemon=True)
    thread.start()
    thread.join(timeout=10)
    if thread.is_alive():
        server.call(server.app.broker.close)
        thread.join(timeout=10)
        pytest.fail(f"tail subscribed with {access}")
    return TailRun(codes[0], out.getvalue(), err.getvalue())


def unverified_refund(
    server: RunningServer,
    credentials: grpc.ChannelCredentials | None = None,
    token: str | None = None,
) -> Callable[[], None]:
    """Sends a refund without a lookup (a MISSING_VERIFICATION_STEP on order_id A-1001)."""

    def act() -> None:
        spans = agents.record(agents.unverified_refund_run(), "genai")
        assert send_grpc(server, spans, credentials, token) is SpanExportResult.SUCCESS
        assert server.settle() == 1

    return act


def missing_verification(lines: str) -> list[dict[str, Any]]:
    findings = [json.loads(line) for line in lines.splitlines()]
    return [f for f in findings if f["category"] == "MISSING_VERIFICATION_STEP"]


def test_tail_follows_a_stream_with_tls_and_a_token(start_server: Start, pki: Pki) -> None:
    server = start_server(**tls(pki), **auth(pki.token_file), **POLICY)
    access = StreamAccess(ca_file=pki.ca, bearer_token_file=pki.token_file)
    act = unverified_refund(server, grpc_credentials(pki), TOKEN)

    run = tail_during(server, act, access, as_json=True)

    assert run.code == 0
    [finding] = missing_verification(run.out)
    assert (finding["agent"], finding["tool"], finding["field"]) == (
        "refund-bot",
        "issue_refund",
        "order_id",
    )
    assert server.sample(AUTH_FAILURES, {"listener": "stream"}) == 0


def test_tail_without_tls_or_with_a_wrong_token_is_refused(
    start_server: Start, pki: Pki, tmp_path: Path
) -> None:
    server = start_server(**tls(pki), **auth(pki.token_file))
    wrong = tmp_path / "wrong-token"
    wrong.write_text("wrong-token\n")
    target = server.address("stream")

    access = StreamAccess(ca_file=pki.ca, bearer_token_file=wrong)
    for reconnect in (False, True):  # never subscribed in this run: the token is wrong
        refused = tail_refused(server, access, reconnect=reconnect)
        assert refused.code == 2
        said = f"toolwatch tail: {target} refused the bearer token (UNAUTHENTICATED)\n"
        assert refused.err == said
    assert server.sample(AUTH_FAILURES, {"listener": "stream"}) == 2

    plaintext = tail_refused(server, StreamAccess(bearer_token_file=pki.token_file))
    assert plaintext.code == 1
    assert f"cannot reach the findings stream at {target}" in plaintext.err


@dataclass
class Revocable:
    """A server's token file accepting ``leaked-token`` and ``kept-token``, and a tail
    holding the leaked one; ``revoke`` takes it out and lets ``reload_seconds`` pass."""

    tokens: Path
    access: StreamAccess

    def settings(self) -> dict[str, Any]:
        return auth(self.tokens, security__auth__reload_seconds=30)

    def revoke(self, server: RunningServer) -> None:
        self.tokens.write_text("kept-token\n")
        server.clock.advance(30)


def revocable(tmp_path: Path, pki: Pki) -> Revocable:
    tokens, leaked = tmp_path / "tokens", tmp_path / "leaked"
    tokens.write_text("leaked-token\nkept-token\n")
    leaked.write_text("leaked-token\n")
    return Revocable(tokens, StreamAccess(ca_file=pki.ca, bearer_token_file=leaked))


def until_unsubscribed(server: RunningServer) -> None:
    gone = server.app.broker.wait_for_subscribers(0)
    asyncio.run_coroutine_threadsafe(gone, server.loop).result(timeout=10)


def test_a_token_taken_out_of_the_file_ends_the_streams_it_opened(
    start_server: Start, pki: Pki, tmp_path: Path
) -> None:
    """Revoking a leaked token must stop the live feed it already holds, not only new calls:
    the stream is ended UNAUTHENTICATED before its next finding is written."""
    tokens = revocable(tmp_path, pki)
    server = start_server(**tls(pki), **tokens.settings(), **POLICY)
    send = unverified_refund(server, grpc_credentials(pki), "kept-token")

    def act() -> None:
        send()  # delivered: the token is still accepted
        tokens.revoke(server)
        send()  # not delivered: the stream ends before it

    run = tail_during(server, act, tokens.access, as_json=True)
    assert len(missing_verification(run.out)) == 1
    assert run.code == 1
    assert "no longer accepts the bearer token (UNAUTHENTICATED)" in run.err
    assert server.sample(AUTH_FAILURES, {"listener": "stream"}) == 1


def test_a_revoked_stream_that_no_finding_passes_is_ended_at_the_reload(
    start_server: Start, pki: Pki, tmp_path: Path
) -> None:
    """A stream whose filter matches nothing is never written to: it is ended when the
    server's tick reloads the token file, so a leaked token cannot keep the subscriber slots."""
    tokens = revocable(tmp_path, pki)
    server = start_server(**tls(pki), **tokens.settings())

    def act() -> None:
        tokens.revoke(server)
        server.call(server.app.tick)  # no call checks a token: the tick reloads the file
        until_unsubscribed(server)

    run = tail_during(server, act, tokens.access, agents=["nobody"])
    assert run.code == 1
    assert "no longer accepts the bearer token (UNAUTHENTICATED)" in run.err
    assert server.sample(AUTH_FAILURES, {"listener": "stream"}) == 1


def test_findings_withheld_from_a_revoked_stream_are_not_counted_lost(
    start_server: Start, pki: Pki, tmp_path: Path
) -> None:
    """They are not a slow subscriber's losses (ToolwatchFindingsStreamDropping), even when
    none is held for a resume."""
    tokens = revocable(tmp_path, pki)
    server = start_server(**tls(pki), **tokens.settings(), output__stream_replay_size=0)
    broker = server.app.broker

    def act() -> None:
        tokens.revoke(server)
        # Published before any call reloads the tokens: the stream's own check before the
        # write does, and the finding it took is withheld.
        server.call(lambda: broker.publish(make_trace(), [make_finding()]))
        until_unsubscribed(server)

    run = tail_during(server, act, tokens.access)
    assert (run.code, run.out) == (1, "")
    assert server.sample("toolwatch_stream_dropped_findings_total") == 0
    assert server.sample(AUTH_FAILURES, {"listener": "stream"}) == 1


def test_tail_reconnecting_through_a_token_rotation_loses_no_finding(
    start_server: Start, pki: Pki, tmp_path: Path
) -> None:
    """Both sides rotate: the stream ends at the old token's removal, and tail --reconnect
    subscribes again with its file's new token, resuming where it left off."""
    token_file = tmp_path / "tokens"
    token_file.write_text("old-token\nnew-token\n")
    server = start_server(
        **tls(pki), **auth(token_file, security__auth__reload_seconds=30), **POLICY
    )
    tail_token = tmp_path / "tail-token"
    tail_token.write_text("old-token\n")
    send = unverified_refund(server, grpc_credentials(pki), "new-token")
    rotated = threading.Event()

    def wait(_seconds: float) -> None:  # tail's wait before it subscribes again
        if rotated.is_set():
            raise KeyboardInterrupt  # the server closed the stream at the end: stop
        tail_token.write_text("new-token\n")
        rotated.set()

    def act() -> None:
        send()
        token_file.write_text("new-token\n")
        server.clock.advance(30)
        send()
        assert rotated.wait(timeout=10)
        resubscribed = server.app.broker.wait_for_subscribers(1)
        asyncio.run_coroutine_threadsafe(resubscribed, server.loop).result(timeout=10)

    access = StreamAccess(ca_file=pki.ca, bearer_token_file=tail_token)
    run = tail_during(server, act, access, as_json=True, reconnect=True, sleep=wait)
    assert len(missing_verification(run.out)) == 2
    assert "no longer accepts the bearer token (UNAUTHENTICATED)" in run.err
    assert "resuming where it left off" in run.err


def test_tail_reconnecting_rides_out_a_rotation_whose_client_side_comes_later(
    start_server: Start, tmp_path: Path
) -> None:
    """The server's and tail's token files are separate mounts (a Secret in each pod), each
    updated on its own sync, often a minute apart: until tail's catches up, its attempts are
    refused, or find the file half written. tail exited 2 at the first refusal; having
    subscribed in this run, it reads its file again at each attempt, with the usual
    back-off, and resumes."""
    token_file = tmp_path / "tokens"
    token_file.write_text("old-token\n")
    server = start_server(**auth(token_file, security__auth__reload_seconds=30), **POLICY)
    tail_token = tmp_path / "tail-token"
    tail_token.write_text("old-token\n")
    target = server.address("stream")
    waits: list[float] = []
    client_side = {1: "", 2: "old-token\n", 3: "new-token\n"}  # empty: half written

    def wait(seconds: float) -> None:  # tail's wait before it subscribes again
        waits.append(seconds)
        if len(waits) in client_side:
            tail_token.write_text(client_side[len(waits)])
        if len(waits) > 20:
            raise KeyboardInterrupt  # the server closed the stream at the end: stop

    def subscribers(count: int) -> None:
        waiting = server.app.broker.wait_for_subscribers(count)
        asyncio.run_coroutine_threadsafe(waiting, server.loop).result(timeout=10)

    def act() -> None:
        unverified_refund(server, token="old-token")()
        token_file.write_text("new-token\n")  # the server side of the rotation
        server.clock.advance(30)
        server.call(server.app.tick)  # the reload ends the stream opened with old-token
        subscribers(0)
        unverified_refund(server, token="new-token")()
        subscribers(1)

    access = StreamAccess(bearer_token_file=tail_token)
    run = tail_during(server, act, access, as_json=True, reconnect=True, sleep=wait)
    assert len(missing_verification(run.out)) == 2  # the second one after the resume
    assert waits[:3] == [0.5, 1.0, 2.0]
    assert run.err.splitlines()[:2] == [
        f"toolwatch tail: {target} no longer accepts the bearer token (UNAUTHENTICATED): it"
        f" was taken out of the server's token file; reconnecting, reading {tail_token} again"
        " at each attempt",
        f"toolwatch tail: reconnected to {target}, resuming where it left off",
    ]
    assert server.sample(AUTH_FAILURES, {"listener": "stream"}) == 2  # the end, one refusal


def test_tail_on_mutual_tls_needs_a_client_certificate(start_server: Start, pki: Pki) -> None:
    server = start_server(**tls(pki, mutual=True))
    without = tail_refused(server, StreamAccess(ca_file=pki.ca))
    assert without.code == 1

    access = StreamAccess(ca_file=pki.ca, cert_file=pki.client_cert, key_file=pki.client_key)
    run = tail_during(server, lambda: None, access)
    assert (run.code, run.out) == (0, "")
    assert "ended the stream" in run.err


def client_names(*names: str) -> dict[str, Any]:
    return {"security__tls__client_names": list(names)}


@pytest.mark.parametrize(
    "name",
    [NAMED_CN, NAMED_DNS, NAMED_SPIFFE, NAMED_EMAIL],
    ids=["common-name", "dns", "spiffe-uri", "email"],
)
def test_client_names_admit_a_certificate_by_any_of_its_names(
    start_server: Start, pki: Pki, name: str
) -> None:
    server = start_server(**tls(pki, mutual=True, **client_names("someone.else", name)))
    assert send_grpc(server, refund_spans(), grpc_credentials(pki, "named")) is (
        SpanExportResult.SUCCESS
    )
    assert send_http(server, refund_spans(), pki, client="named") is SpanExportResult.SUCCESS
    assert server.settle() == 2
    assert server.sample(AUTH_FAILURES, {"listener": "grpc"}) == 0
    assert server.sample(AUTH_FAILURES, {"listener": "http"}) == 0


def test_a_certificate_the_ca_signed_for_another_client_is_denied_and_counted(
    start_server: Start, pki: Pki
) -> None:
    """A CA shared with other services signs their certificates too: one that names no
    accepted client is answered PERMISSION_DENIED / 403 with no detail, counted, and none of
    its spans are taken. Its IP address is no name (the named certificate has 10.1.2.3)."""
    server = start_server(**tls(pki, mutual=True, **client_names(NAMED_SPIFFE)))
    other = grpc_credentials(pki, "client")  # agent.example, signed by the client CA
    target = server.address("grpc")

    assert raw_export(server, other) == grpc.StatusCode.PERMISSION_DENIED
    assert send_grpc(server, refund_spans(), other) is SpanExportResult.FAILURE
    with pytest.raises(grpc.RpcError) as denied:
        health_check(target, other)
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert health_watch(target, other) == grpc.StatusCode.PERMISSION_DENIED
    answer = post_traces(server, client_context(pki, client=True), token=None)
    denied_status = status_pb2.Status.FromString(answer.body)
    assert (answer.status, denied_status.code, denied_status.message) == (
        403,
        code_pb2.PERMISSION_DENIED,
        "",
    )
    assert send_http(server, refund_spans(), pki, client=True) is SpanExportResult.FAILURE
    assert server.sample(AUTH_FAILURES, {"listener": "grpc"}) == 4
    assert server.sample(AUTH_FAILURES, {"listener": "http"}) == 2
    assert server.settle() == 0

    named = grpc_credentials(pki, "named")
    assert health_check(target, named) == health_pb2.HealthCheckResponse.SERVING
    assert health_watch(target, named) == health_pb2.HealthCheckResponse.SERVING
    assert send_grpc(server, refund_spans(), named) is SpanExportResult.SUCCESS
    assert_one_refund_trace(server)


def test_client_names_on_metrics_leave_probes_open(start_server: Start, pki: Pki) -> None:
    server = start_server(**tls(pki, mutual=True, **client_names(NAMED_DNS)))
    base = f"https://{server.address('metrics')}"
    anonymous, other, named = (
        client_context(pki),
        client_context(pki, client=True),
        client_context(pki, client="named"),
    )
    probes = [
        http_get(f"{base}{path}", who).status
        for path in ("/healthz", "/readyz")
        for who in (anonymous, other, named)
    ]
    assert probes == [200] * 6
    assert http_get(f"{base}/metrics", anonymous).status == 403  # no certificate
    refused = http_get(f"{base}/metrics", other)
    assert (refused.status, refused.body) == (403, b"")
    assert server.sample(AUTH_FAILURES, {"listener": "metrics"}) == 2
    assert http_get(f"{base}/metrics", named).status == 200


def test_tail_with_a_certificate_naming_another_client_is_told_so(
    start_server: Start, pki: Pki
) -> None:
    server = start_server(**tls(pki, mutual=True, **client_names(NAMED_CN)), **POLICY)
    other = StreamAccess(ca_file=pki.ca, cert_file=pki.client_cert, key_file=pki.client_key)
    refused = tail_refused(server, other)
    assert refused.code == EXIT_USAGE  # not retried: another certificate is needed
    assert "does not accept this client certificate (PERMISSION_DENIED)" in refused.err
    assert server.sample(AUTH_FAILURES, {"listener": "stream"}) == 1

    named = StreamAccess(ca_file=pki.ca, cert_file=pki.named_cert, key_file=pki.named_key)
    act = unverified_refund(server, grpc_credentials(pki, "named"))
    run = tail_during(server, act, named, as_json=True)
    assert run.code == 0
    [finding] = missing_verification(run.out)
    assert finding["tool"] == "issue_refund"


def answers_to(
    server: RunningServer, pki: Pki, tmp_path: Path, cert: bytes, key: bytes
) -> tuple[grpc.StatusCode, int]:
    """What an empty export over gRPC and over HTTP is answered with, from a client showing
    ``cert`` (with ``key``)."""
    credentials = grpc.ssl_channel_credentials(pki.read("ca"), key, cert)
    context = client_context(pki)
    context.load_cert_chain(*pki.client_files(tmp_path, cert, key))
    return raw_export(server, credentials), post_traces(server, context, token=None).status


@pytest.mark.parametrize(
    ("common_names", "alternative"),
    [
        ([f"{NAMED_CN}\x00.evil.example"], []),
        (["evil"], [f"dns:{NAMED_DNS}\x00.evil.example"]),
        (["evil"], [f"uri:{NAMED_SPIFFE}\x00/evil"]),
        (["evil"], [f"email:{NAMED_EMAIL}\x00.evil.example"]),
    ],
    ids=["common-name", "dns", "uri", "email"],
)
def test_a_name_cut_short_by_a_nul_byte_is_no_accepted_name(
    start_server: Start, pki: Pki, tmp_path: Path, common_names: list[str], alternative: list[str]
) -> None:
    """gRPC's auth properties end a name at a NUL byte: a certificate the shared CA signed
    for ``otel-collector\0.evil.example`` read there as ``otel-collector``. The names are read
    from the certificate, alike on every listener."""
    names = client_names(NAMED_CN, NAMED_DNS, NAMED_SPIFFE, NAMED_EMAIL)
    server = start_server(**tls(pki, mutual=True, **names))
    cert, key = client_certificate(pki.clients, common_names, alt_names(*alternative))
    assert answers_to(server, pki, tmp_path, cert, key) == (grpc.StatusCode.PERMISSION_DENIED, 403)
    assert server.sample(AUTH_FAILURES, {"listener": "grpc"}) == 1
    assert server.sample(AUTH_FAILURES, {"listener": "http"}) == 1


def test_a_certificate_whose_names_cannot_all_be_read_names_no_client(
    start_server: Start, pki: Pki, tmp_path: Path
) -> None:
    """OpenSSL verifies a certificate with an ediPartyName beside the accepted DNS name;
    ``cryptography`` cannot read that name: refused and counted, not a failed call."""
    server = start_server(**tls(pki, mutual=True, **client_names(NAMED_DNS)))
    cert, key = client_certificate(pki.clients, [NAMED_CN], with_edi_party_name(NAMED_DNS))
    assert answers_to(server, pki, tmp_path, cert, key) == (grpc.StatusCode.PERMISSION_DENIED, 403)
    assert server.sample(AUTH_FAILURES, {"listener": "grpc"}) == 1
    assert server.sample(AUTH_FAILURES, {"listener": "http"}) == 1


@pytest.mark.parametrize("order", ["accepted-first", "accepted-second"])
def test_every_common_name_of_a_certificate_is_read_on_every_listener(
    start_server: Start, pki: Pki, tmp_path: Path, order: str
) -> None:
    cns = [NAMED_CN, "someone-else"] if order == "accepted-first" else ["someone-else", NAMED_CN]
    server = start_server(**tls(pki, mutual=True, **client_names(NAMED_CN)))
    cert, key = client_certificate(pki.clients, cns)
    assert answers_to(server, pki, tmp_path, cert, key) == (grpc.StatusCode.OK, 200)


def test_a_certificate_naming_another_client_is_refused_before_its_token_is_read(
    start_server: Start, pki: Pki
) -> None:
    """Checked in the other order, a client of the shared CA could tell a good token (then
    PERMISSION_DENIED) from a bad one (UNAUTHENTICATED). Each refusal is counted once."""
    server = start_server(
        **tls(pki, mutual=True, **client_names(NAMED_DNS)), **auth(pki.token_file)
    )
    other, named = grpc_credentials(pki, "client"), grpc_credentials(pki, "named")
    for token in (None, "wrong", TOKEN):
        metadata = bearer(token) if token else ()
        assert raw_export(server, other, metadata) == grpc.StatusCode.PERMISSION_DENIED
        answer = post_traces(server, client_context(pki, client=True), token=token)
        assert (answer.status, status_pb2.Status.FromString(answer.body).code) == (
            403,
            code_pb2.PERMISSION_DENIED,
        )
    assert server.sample(AUTH_FAILURES, {"listener": "grpc"}) == 3
    assert server.sample(AUTH_FAILURES, {"listener": "http"}) == 3
    assert raw_export(server, named) == grpc.StatusCode.UNAUTHENTICATED
    assert raw_export(server, named, bearer(TOKEN)) == grpc.StatusCode.OK
    assert server.sample(AUTH_FAILURES, {"listener": "grpc"}) == 4

    # Nor through a method no service serves, which a good token reaches and a bad one not.
    with grpc.secure_channel(server.address("grpc"), other) as channel:
        for token in ("wrong", TOKEN):
            with pytest.raises(grpc.RpcError) as refused:
                channel.unary_unary("/no.Such/Method")(b"", metadata=bearer(token), timeout=10)
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert server.sample(AUTH_FAILURES, {"listener": "grpc"}) == 6

    tail = StreamAccess(
        ca_file=pki.ca,
        cert_file=pki.client_cert,
        key_file=pki.client_key,
        bearer_token_file=pki.token_file,
    )
    refused = tail_refused(server, tail)
    assert "does not accept this client certificate (PERMISSION_DENIED)" in refused.err


def test_a_large_request_from_a_certificate_naming_another_client_is_refused_unread(
    start_server: Start, pki: Pki
) -> None:
    """Over the listener's message limit, a read request would be RESOURCE_EXHAUSTED, and
    reading it is what the check must spare: the health check takes one request message."""
    server = start_server(**tls(pki, mutual=True, **client_names(NAMED_DNS)))
    other = grpc_credentials(pki, "client")
    with grpc.secure_channel(server.address("grpc"), other) as channel:
        check = health_pb2_grpc.HealthStub(channel).Check
        large = health_pb2.HealthCheckRequest(service="x" * (30 << 20))
        with pytest.raises(grpc.RpcError) as refused:
            check(large, timeout=30)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert server.sample(AUTH_FAILURES, {"listener": "grpc"}) == 1


def metric_label_values(server: RunningServer) -> set[str]:
    samples = (s for metric in server.registry.collect() for s in metric.samples)
    return {value for sample in samples for value in sample.labels.values()}


@pytest.mark.parametrize(
    ("show_fields", "logged", "streamed"),
    [
        (
            [],
            {"failed_verification_spans": [], "fields": {"order_id": REDACTED}, "outcome": "ok"},
            {
                "failed_verification_spans": "[]",
                "fields": '{"order_id":"[redacted]"}',
                "outcome": "ok",
            },
        ),
        (
            ["issue_refund.order_id"],
            {"failed_verification_spans": [], "fields": {"order_id": "A-1001"}, "outcome": "ok"},
            {"failed_verification_spans": "[]", "fields": '{"order_id":"A-1001"}', "outcome": "ok"},
        ),
        (
            ["issue_refund.value", "fields"],
            {"failed_verification_spans": [], "fields": {"order_id": REDACTED}, "outcome": "ok"},
            {
                "failed_verification_spans": "[]",
                "fields": '{"order_id":"[redacted]"}',
                "outcome": "ok",
            },
        ),
    ],
)
def test_argument_values_are_shown_only_for_configured_fields(
    start_server: Start,
    tmp_path: Path,
    show_fields: list[str],
    logged: dict[str, Any],
    streamed: dict[str, Any],
) -> None:
    server = start_server(output__show_fields=show_fields, **POLICY)

    run = tail_during(server, unverified_refund(server), StreamAccess(), as_json=True)

    log_text = (tmp_path / "findings.jsonl").read_text()
    [in_log] = missing_verification(log_text)
    [in_stream] = missing_verification(run.out)
    assert in_log["details"] == logged
    assert in_stream["details"] == streamed
    if "issue_refund.order_id" not in show_fields:
        assert "A-1001" not in log_text
        assert "A-1001" not in run.out
    assert (
        server.sample(
            "toolwatch_regressions_total",
            {
                "category": "MISSING_VERIFICATION_STEP",
                "severity": in_log["severity"],
                "evaluator": in_log["evaluator"],
                "agent": "refund-bot",
                "tool": "issue_refund",
            },
        )
        == 1
    )
    assert not any("A-1001" in value for value in metric_label_values(server))


# -- start-up --------------------------------------------------------------------------------


def test_the_unredacted_tooltrace_dump_is_created_readable_by_its_owner_alone(
    start_server: Start, tmp_path: Path
) -> None:
    """The dump holds arguments and results as agents sent them; the findings log, redacted,
    is created as the umask says."""
    umask = os.umask(0o022)
    try:
        start_server()
    finally:
        os.umask(umask)
    assert (tmp_path / "tooltraces.jsonl").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "findings.jsonl").stat().st_mode & 0o777 == 0o644


def test_an_existing_tooltrace_dump_others_may_read_is_warned_about(
    start_server: Start, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dump = tmp_path / "tooltraces.jsonl"
    dump.touch(mode=0o644)
    dump.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="toolwatch"):
        start_server()
    assert f"{dump} (output.dump_tooltraces) may be read by others (mode 644)" in caplog.text
    assert dump.stat().st_mode & 0o777 == 0o644  # kept: its owner decides


def test_a_tooltrace_dump_to_a_device_is_not_warned_about(
    start_server: Start, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="toolwatch"):
        start_server(output__dump_tooltraces="/dev/null")
    assert "may be read by others" not in caplog.text


@pytest.mark.parametrize(
    ("protection", "warning"),
    [
        ("none", "without TLS or authentication"),
        ("tls", "with TLS but no client authentication: any client that reaches it is served"),
        ("mutual", None),
        ("auth", "without TLS: its bearer tokens cross the network in clear text"),
        ("both", None),
    ],
)
def test_a_listener_beyond_loopback_warns_without_tls_or_auth(
    start_server: Start,
    pki: Pki,
    caplog: pytest.LogCaptureFixture,
    protection: str,
    warning: str | None,
) -> None:
    overrides = {
        "none": {},
        "tls": tls(pki),
        "mutual": tls(pki, mutual=True),
        "auth": auth(pki.token_file),
        "both": {**tls(pki), **auth(pki.token_file)},
    }[protection]
    with caplog.at_level(logging.WARNING, logger="toolwatch"):
        server = start_server(listen__grpc="0.0.0.0:0", **overrides)
    address = server.address("grpc")
    assert address.startswith("0.0.0.0:")
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    expected = f"grpc listener {address} is reachable beyond loopback {warning}"
    assert warnings == ([expected] if warning else [])


def test_a_missing_certificate_file_fails_naming_the_file(pki: Pki, tmp_path: Path) -> None:
    missing = tmp_path / "absent.pem"
    overrides = {
        "security.tls.cert_file": str(missing),
        "security.tls.key_file": str(pki.server_key),
    }
    with pytest.raises(ConfigError) as error:
        load_config(None, overrides)
    message = str(error.value)
    assert "security.tls.cert_file" in message
    assert f"{missing}: cannot read: No such file or directory" in message


def test_a_key_that_does_not_match_the_certificate_fails(pki: Pki) -> None:
    overrides = {
        "security.tls.cert_file": str(pki.server_cert),
        "security.tls.key_file": str(pki.client_key),
    }
    with pytest.raises(ConfigError) as error:
        load_config(None, overrides)
    assert f"security.tls: {pki.server_cert} with key {pki.client_key}" in str(error.value)
    assert "(key values mismatch)" in str(error.value)


def test_an_empty_token_file_fails_naming_the_file(tmp_path: Path) -> None:
    empty = tmp_path / "tokens"
    empty.write_text("\n")
    with pytest.raises(ConfigError) as error:
        load_config(None, {"security.auth.bearer_token_file": str(empty)})
    assert f"security.auth.bearer_token_file: {empty}: holds no bearer token" in str(error.value)


def test_paths_in_a_config_file_are_relative_to_the_file(pki: Pki, tmp_path: Path) -> None:
    config_file = pki.ca.parent / "toolwatch.yaml"
    config_file.write_text(
        "security:\n"
        "  tls: {cert_file: server.pem, key_file: server.key, client_ca_file: client-ca.pem}\n"
        "  auth: {bearer_token_file: tokens, listeners: [grpc]}\n"
    )
    config = load_config(config_file).security
    assert config.tls is not None and config.auth is not None
    assert (config.tls.cert_file, config.tls.client_ca_file) == (pki.server_cert, pki.client_ca)
    assert config.auth.bearer_token_file == pki.token_file
    assert [config.uses_auth(name) for name in ("grpc", "http")] == [True, False]
    assert config.uses_tls("metrics")
