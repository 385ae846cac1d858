"""What the security tests share: server settings for TLS and tokens, clients that export
through them (the SDK's OTLP exporters, grpc, urllib) and what they were answered,
``toolwatch tail`` run on a server's stream, and the connections a listener closed or refused
(``REFUSED``, ``closed_by_server``) and told of (``senders_told``)."""

from __future__ import annotations

import asyncio
import datetime
import io
import json
import socket
import ssl
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

from tests.certificates import install_certificate
from tests.integration import agents
from tests.integration.conftest import RunningServer, StartServer
from tests.integration.pki_support import Pki
from toolwatch.tail import run_tail
from toolwatch.tail_access import StreamAccess

ROOT = Path(__file__).resolve().parents[2]
AUTH_FAILURES = "toolwatch_auth_failures_total"
RELOAD_FAILURES = "toolwatch_security_reload_failures_total"
CERTIFICATE_EXPIRY = "toolwatch_tls_certificate_expiry_timestamp_seconds"
CERTIFICATE_NOT_BEFORE = "toolwatch_tls_certificate_not_before_timestamp_seconds"
REFUSED = "toolwatch_connections_refused_total"
DAY = datetime.timedelta(days=1)


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
    return _answer(urllib.request.Request(url), context, token)


def post_traces(server: RunningServer, context: ssl.SSLContext, token: str | None) -> HttpAnswer:
    request = urllib.request.Request(
        f"https://{server.address('http')}/v1/traces",
        data=trace_service_pb2.ExportTraceServiceRequest().SerializeToString(),
        headers={"Content-Type": "application/x-protobuf"},
    )
    return _answer(request, context, token)


def _answer(
    request: urllib.request.Request, context: ssl.SSLContext | None, token: str | None
) -> HttpAnswer:
    """What ``request`` is answered, with ``token`` as its bearer token when given."""
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


def assert_one_refund_trace(server: RunningServer) -> None:
    assert server.settle() == 1
    [trace] = server.tooltraces()
    assert [c["tool_name"] for c in trace["calls"]] == ["lookup_order", "issue_refund"]


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


def serving_certificate(
    start_server: StartServer, tmp_path: Path, ca: trustme.CA
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


class _TailThread:
    """``toolwatch tail`` on ``server``'s stream, run in a thread (started)."""

    def __init__(self, server: RunningServer, access: StreamAccess, **options: Any) -> None:
        self.out, self.err = io.StringIO(), io.StringIO()
        self.codes: list[int] = []
        target = server.address("stream")

        def tail() -> None:
            run = run_tail(target, out=self.out, err=self.err, access=access, **options)
            self.codes.append(run)

        self.thread = threading.Thread(target=tail, daemon=True)
        self.thread.start()

    def ended(self) -> TailRun:
        return TailRun(self.codes[0], self.out.getvalue(), self.err.getvalue())


def tail_during(
    server: RunningServer, act: Callable[[], None], access: StreamAccess, **options: Any
) -> TailRun:
    """Runs ``toolwatch tail`` on the server's stream in a thread; once it has subscribed,
    does ``act``, then ends the stream and returns what tail printed.
    The stream is ended even when ``act`` fails, so tail never outlives the test."""
    tail = _TailThread(server, access, **options)
    try:
        subscribed = server.app.broker.wait_for_subscribers(1)
        asyncio.run_coroutine_threadsafe(subscribed, server.loop).result(timeout=10)
        act()
    finally:
        server.call(server.app.broker.close)
        tail.thread.join(timeout=10)
    return tail.ended()


def tail_refused(server: RunningServer, access: StreamAccess, **options: Any) -> TailRun:
    """Runs ``toolwatch tail``, expecting it to give up on its own; ends the stream if it
    subscribed after all, so a regression fails instead of hanging."""
    tail = _TailThread(server, access, **options)
    tail.thread.join(timeout=10)
    if tail.thread.is_alive():
        server.call(server.app.broker.close)
        tail.thread.join(timeout=10)
        pytest.fail(f"tail subscribed with {access}")
    return tail.ended()


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


def until_unsubscribed(server: RunningServer) -> None:
    gone = server.app.broker.wait_for_subscribers(0)
    asyncio.run_coroutine_threadsafe(gone, server.loop).result(timeout=10)


def client_names(*names: str) -> dict[str, Any]:
    return {"security__tls__client_names": list(names)}


def answers_to(
    server: RunningServer, pki: Pki, tmp_path: Path, cert: bytes, key: bytes
) -> tuple[grpc.StatusCode, int]:
    """What an empty export over gRPC and over HTTP is answered with, from a client showing
    ``cert`` (with ``key``)."""
    credentials = grpc.ssl_channel_credentials(pki.read("ca"), key, cert)
    context = client_context(pki)
    context.load_cert_chain(*pki.client_files(tmp_path, cert, key))
    return raw_export(server, credentials), post_traces(server, context, token=None).status


# -- connections: the listeners' bounds ------------------------------------------------------


def senders_told(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the sender log (``toolwatch.senders``) said."""
    return [r.getMessage() for r in caplog.records if r.name == "toolwatch.senders"]


def loop_turns(server: RunningServer, n: int = 3) -> None:
    """Let the server's loop take what the sockets sent or closed: each call is one round
    trip through it."""
    for _ in range(n):
        server.call(lambda: None)


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (a connection that sent nothing)."""
    try:
        return sock.recv(100) == b""
    except ConnectionResetError:
        return True
