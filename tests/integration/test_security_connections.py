"""What an unauthenticated peer can do to the listeners' connections: how many it may hold open
(``ingest.max_connections``), and what the sender log says of a TLS handshake that fails on an
HTTP listener (``toolwatch.connection_gate``). Real servers on port 0, real sockets and TLS
clients."""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import warnings
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.integration.conftest import RunningServer, StartServer
from tests.integration.otlp_support import refund_spans
from tests.integration.pki_support import Pki
from tests.integration.security_support import (
    REFUSED,
    auth,
    client_context,
    closed_by_server,
    http_get,
    loop_turns,
    send_grpc,
    send_http,
    senders_told,
    tls,
)
from toolwatch import healthcheck


@contextlib.contextmanager
def _held(address: str, n: int) -> Iterator[list[socket.socket]]:
    """``n`` connections to ``address`` that send nothing, closed on leaving."""
    host, port = address.rsplit(":", 1)
    held = [socket.create_connection((host, int(port)), timeout=10) for _ in range(n)]
    try:
        yield held
    finally:
        for sock in held:
            sock.close()


def _refused(address: str) -> bool:
    """Whether a new connection to ``address`` is closed by the server before it sends a
    byte (gRPC's listener sends its HTTP/2 settings first; an HTTP one waits)."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.settimeout(0.5)  # a held HTTP connection says nothing: the wait is the answer
        try:
            return sock.recv(100) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False


@pytest.mark.parametrize("listener", ["http", "metrics"])
def test_an_http_listener_closes_its_oldest_idle_connection_at_max_connections(
    start_server: StartServer, caplog: pytest.LogCaptureFixture, listener: str
) -> None:
    """Each open connection holds a file descriptor for ``idle_timeout_seconds``: a peer
    opening thousands took every descriptor of the process (EMFILE). Was: no bound; then a
    bound that closed every connection past it, so a peer holding ``max_connections`` idle
    ones kept every client out, a liveness probe (not from loopback) included. Now: the
    new connection is served, the oldest idle one closed, counted and told."""
    server = start_server(ingest__max_connections=3)
    address = server.address(listener)
    with caplog.at_level(logging.WARNING, "toolwatch.senders"), _held(address, 3) as held:
        loop_turns(server)
        # Answered: /healthz is the metrics listener's; the OTLP one says it is not its own.
        expected = {"http": 404, "metrics": 200}[listener]
        assert http_get(f"http://{address}/healthz", None).status == expected
        assert closed_by_server(held[0])
        held[1].settimeout(0.5)  # still open: the wait is the answer
        with pytest.raises(TimeoutError):
            held[1].recv(100)
    (line,) = senders_told(caplog)
    assert line.startswith(f"idle connection closed (connection_limit_idle) on {listener} from")
    assert line.endswith(
        ": '3 connections are open (ingest.max_connections): the oldest idle closed'"
    )
    assert server.sample(REFUSED, {"listener": listener, "reason": "connection_limit_idle"}) == 1
    assert server.sample(REFUSED, {"listener": listener, "reason": "connection_limit"}) == 0
    assert send_grpc(server, refund_spans()) is SpanExportResult.SUCCESS


def test_a_connection_in_its_tls_handshake_makes_room_untold_as_a_handshake_failure(
    start_server: StartServer, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    """A connection whose TLS handshake has not finished handles no request. Was: it held
    its place for the handshake time. Now: at the bound it is closed for a new one, told as
    such (``connection_limit_idle``), not as a failed handshake."""
    server = start_server(**tls(pki), ingest__max_connections=2)
    address = server.address("metrics")
    with caplog.at_level(logging.WARNING, "toolwatch.senders"), _held(address, 2):
        loop_turns(server)
        answer = http_get(f"https://{address}/healthz", client_context(pki))
        assert (answer.status, answer.body) == (200, b"ok\n")
        loop_turns(server)
    (line,) = senders_told(caplog)
    assert line.startswith("idle connection closed (connection_limit_idle) on metrics from")
    assert server.sample(REFUSED, {"listener": "metrics", "reason": "tls_handshake"}) == 0
    assert server.sample(REFUSED, {"listener": "metrics", "reason": "connection_limit_idle"}) == 1


def test_the_otlp_http_listener_refuses_a_connection_when_each_one_handles_a_request(
    start_server: StartServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Was: a connection past ``ingest.max_connections`` was closed whatever the open ones
    did. Now: only when every open one is handling a request (here a body that has not all
    arrived) is the new one closed when accepted, counted and told; the other listeners serve
    on, and once those requests end a connection is served again."""
    server = start_server(ingest__max_connections=3)
    address = server.address("http")
    head = (
        b"POST /v1/traces HTTP/1.1\r\nHost: toolwatch\r\n"
        b"Content-Type: application/x-protobuf\r\nContent-Length: 1000\r\n\r\n"
    )
    with caplog.at_level(logging.WARNING, "toolwatch.senders"), _held(address, 3) as held:
        for sock in held:
            sock.sendall(head)
        loop_turns(server)
        assert _refused(address)
        assert send_grpc(server, refund_spans()) is SpanExportResult.SUCCESS
    (line,) = senders_told(caplog)
    assert line.startswith("connection refused (connection_limit) on http from 127.0.0.1:")
    assert line.endswith(": '3 connections are handling requests (ingest.max_connections)'")
    assert server.sample(REFUSED, {"listener": "http", "reason": "connection_limit"}) == 1
    assert server.sample(REFUSED, {"listener": "http", "reason": "connection_limit_idle"}) == 0
    loop_turns(server)  # the held ones closed: their requests end
    assert send_http(server, refund_spans()) is SpanExportResult.SUCCESS


def test_a_flood_of_the_metrics_listener_does_not_fail_the_health_check(
    start_server: StartServer,
) -> None:
    """The image's HEALTHCHECK and the Kubernetes livenessProbe (``/healthz`` on the metrics
    port, 3 failures) ask the metrics listener, kubelet's not from loopback. Was: a peer
    holding ``max_connections`` idle connections there failed the check, so the orchestrator
    restarted toolwatch, every listener and the buffered traces with it. Now: the check is
    answered, in place of the oldest idle connection."""
    server = start_server(ingest__max_connections=8)
    host, port = server.address("metrics").rsplit(":", 1)
    with _held(server.address("metrics"), 8):
        loop_turns(server)
        assert healthcheck.check(host, int(port)) == 200


def test_the_health_check_over_ipv4_to_a_dual_stack_tls_listener_is_not_told(
    start_server: StartServer, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    """``listen.metrics: "[::]:9464"`` binds dual-stack, so the image's HEALTHCHECK
    (``127.0.0.1``, plain HTTP first) arrives from ``::ffff:127.0.0.1``, whose
    ``is_loopback`` is False on Python 3.11. Was: every check counted as a ``tls_handshake``
    refusal and logged. Now: an IPv4-mapped loopback peer is loopback (``ipv4_mapped``)."""
    server = start_server(**tls(pki), listen__metrics="[::]:0")
    port = int(server.address("metrics").rsplit(":", 1)[1])
    with caplog.at_level(logging.WARNING, "toolwatch.senders"):
        assert healthcheck.check("127.0.0.1", port) == 200
        loop_turns(server)
    assert senders_told(caplog) == []
    assert server.sample(REFUSED, {"listener": "metrics", "reason": "tls_handshake"}) == 0


@pytest.mark.parametrize("listener", ["grpc", "stream"])
def test_a_grpc_listener_closes_connections_past_max_connections(
    start_server: StartServer, listener: str
) -> None:
    """As on the HTTP listeners. Was: gRPC accepted connections without a bound. Now: its
    own ``grpc.max_allowed_incoming_connections`` closes one past ``ingest.max_connections``
    before a byte is sent; the HTTP listener serves on."""
    server = start_server(ingest__max_connections=2)
    address = server.address(listener)
    with _held(address, 2) as held:
        assert [sock.recv(3) != b"" for sock in held] == [True, True]  # its HTTP/2 settings
        assert _refused(address)
        assert send_http(server, refund_spans()) is SpanExportResult.SUCCESS


def _handshake(server: RunningServer, listener: str, context: ssl.SSLContext) -> None:
    """A TLS handshake with ``listener``, and a request after it (under TLS 1.3 a refused
    client certificate shows only there); any failure is the test's point."""
    host, port = server.address(listener).rsplit(":", 1)
    with (
        contextlib.suppress(ssl.SSLError, ConnectionError),
        socket.create_connection((host, int(port)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls_socket,
    ):
        tls_socket.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        tls_socket.recv(100)


def _tls_1_1(pki: Pki) -> ssl.SSLContext:
    context = client_context(pki)
    with warnings.catch_warnings():  # TLS 1.1 is deprecated: that it is refused is the point
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version = context.maximum_version = ssl.TLSVersion.TLSv1_1
    context.set_ciphers("DEFAULT:@SECLEVEL=0")  # this OpenSSL's clients refuse 1.1 otherwise
    return context


@pytest.mark.parametrize(
    ("client", "reason"),
    [
        ("none", "PEER_DID_NOT_RETURN_A_CERTIFICATE"),
        ("rogue", "CERTIFICATE_VERIFY_FAILED"),
        ("tls1.1", "UNSUPPORTED_PROTOCOL"),  # without a client CA: TLS 1.2 is the minimum
    ],
)
def test_a_failed_tls_handshake_on_an_http_listener_is_told_to_the_sender_log(
    start_server: StartServer, pki: Pki, caplog: pytest.LogCaptureFixture, client: str, reason: str
) -> None:
    """A client refused in the handshake (under mutual TLS, no certificate, or one the client
    CA did not sign; TLS 1.1) was told nowhere: asyncio says so in its debug mode only. Was:
    the exporter's log alone said why. Now: the sender log names the listener, the peer and
    OpenSSL's reason, rate-limited as every refusal is; the server serves on."""
    server = start_server(**tls(pki, mutual=client != "tls1.1"))
    contexts = {"none": client_context(pki), "rogue": client_context(pki, "rogue")}
    context = _tls_1_1(pki) if client == "tls1.1" else contexts[client]
    who = {"client": False} if client == "tls1.1" else {"client": True}
    with caplog.at_level(logging.WARNING, "toolwatch.senders"):
        _handshake(server, "http", context)
        for _ in range(3):  # the failure is told on the server's loop
            server.call(lambda: None)
    (line,) = senders_told(caplog)
    assert line.startswith("connection refused (tls_handshake) on http from 127.0.0.1:")
    assert line.endswith(f": 'the TLS handshake failed: {reason}'")
    assert server.sample(REFUSED, {"listener": "http", "reason": "tls_handshake"}) == 1
    assert send_http(server, refund_spans(), pki, **who) is SpanExportResult.SUCCESS


def test_plain_http_from_loopback_to_a_tls_metrics_listener_is_not_told(
    start_server: StartServer, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    """The image's HEALTHCHECK asks in plain HTTP first, every 30 s: not a refusal to tell.
    A handshake that does fail there is (the previous test)."""
    server = start_server(**tls(pki))
    with caplog.at_level(logging.WARNING, "toolwatch.senders"):
        with contextlib.suppress(ConnectionError):
            http_get(f"http://{server.address('metrics')}/healthz", None)
        for _ in range(3):
            server.call(lambda: None)
        assert http_get(f"https://{server.address('metrics')}/healthz", client_context(pki))
    assert senders_told(caplog) == []
    assert server.sample(REFUSED, {"listener": "metrics", "reason": "tls_handshake"}) == 0


def test_a_tls_handshake_not_done_in_time_is_told_to_the_sender_log(
    start_server: StartServer, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    """A client that starts a handshake and never finishes it holds its connection for the
    handshake time. Was: closed then, told nowhere. Now: the sender log says so. Real time
    is the point: 0.5 s."""
    server = start_server(**tls(pki), ingest__idle_timeout_seconds=0.5)
    host, port = server.address("http").rsplit(":", 1)
    with (
        caplog.at_level(logging.WARNING, "toolwatch.senders"),
        socket.create_connection((host, int(port)), timeout=10) as client,
    ):
        client.sendall(b"\x16\x03\x01")  # a TLS record's start
        with contextlib.suppress(ConnectionResetError):
            assert client.recv(100) == b""  # closed by the server, before the 10 s timeout
        for _ in range(3):
            server.call(lambda: None)
    (line,) = senders_told(caplog)
    assert line.startswith("connection refused (tls_handshake) on http from 127.0.0.1:")
    assert line.endswith(": 'the TLS handshake was not done within 0.5 s'")
    assert server.sample(REFUSED, {"listener": "http", "reason": "tls_handshake"}) == 1


@pytest.mark.parametrize("listener", ["grpc", "http", "metrics", "stream"])
def test_every_listener_refuses_tls_1_1(start_server: StartServer, pki: Pki, listener: str) -> None:
    """TLS 1.2 is the oldest protocol served, gRPC's listeners (gRPC core's own minimum)
    as the HTTP ones (``tls.py``): a TLS 1.1 client's handshake fails (the server closes the
    connection without an alert: the client sees an EOF; the server's reason is the previous
    tests')."""
    server = start_server(**tls(pki))
    host, port = server.address(listener).rsplit(":", 1)
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        pytest.raises(ssl.SSLError),
    ):
        _tls_1_1(pki).wrap_socket(raw, server_hostname=host)


@pytest.mark.parametrize("listener", ["http", "metrics"])
def test_an_http_listener_names_no_software_version(
    start_server: StartServer, pki: Pki, listener: str
) -> None:
    """Whoever reaches a listener, token or not, read ``Server: Python/3.11 aiohttp/3.14.5``
    in every answer (a 401 too): which known faults to try. Was: aiohttp's default header.
    Now: ``Server: toolwatch``, on a served answer, a refusal and a head aiohttp's parser
    refused."""
    everywhere = ["grpc", "http", "metrics", "stream"]
    server = start_server(**auth(pki.token_file, security__auth__listeners=everywhere))
    host, port = server.address(listener).rsplit(":", 1)
    heads = []
    for request in (
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",  # open to probes (on metrics)
        b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",  # no token: 401
        b"GET /\x01 HTTP/1.1\r\nHost: x\r\n\r\n",  # not HTTP: 400
    ):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(request)
            heads.append(_head(sock))
    served = "200" if listener == "metrics" else "401"
    assert [head["status"] for head in heads] == [served, "401", "400"]
    assert [head.get("server") for head in heads] == ["toolwatch"] * 3


def _head(sock: socket.socket) -> dict[str, str]:
    """The status and header fields of the answer read from ``sock`` (names lower case)."""
    received = b""
    while b"\r\n\r\n" not in received and (chunk := sock.recv(4096)):
        received += chunk
    status_line, *fields = received.split(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
    pairs = (field.partition(":") for field in fields)
    head = {name.strip().lower(): value.strip() for name, _, value in pairs}
    return {"status": status_line.split()[1], **head}


#: What an HTTP/2 client sends first: the preface and an empty SETTINGS frame (RFC 9113 3.4).
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


@pytest.mark.parametrize("listener", ["grpc", "stream"])
def test_a_grpc_connection_without_calls_is_closed_at_the_idle_timeout(
    start_server: StartServer, listener: str
) -> None:
    """A peer that finishes HTTP/2's preface and makes no call held its connection until its
    age (5 minutes) on the OTLP listener and for ever on the stream's, so that
    ``max_connections`` of them kept every client out. Was: kept. Now: closed (GOAWAY) at
    ``ingest.idle_timeout_seconds``. Real time is the point: 0.5 s."""
    server = start_server(ingest__idle_timeout_seconds=0.5)
    host, port = server.address(listener).rsplit(":", 1)
    received = b""
    with socket.create_connection((host, int(port)), timeout=5) as client:
        client.sendall(_HTTP2_PREFACE)
        with contextlib.suppress(ConnectionResetError):
            while chunk := client.recv(4096):  # closed by the server, before the 5 s timeout
                received += chunk
    assert 7 in _frame_types(received)  # GOAWAY (RFC 9113 6.8) before the close


def _frame_types(received: bytes) -> list[int]:
    """The types of the HTTP/2 frames in ``received`` (each a 9-byte header: a 24-bit
    length, the type, flags, the stream id; then its payload)."""
    types, at = [], 0
    while at + 9 <= len(received):
        types.append(received[at + 3])
        at += 9 + int.from_bytes(received[at : at + 3], "big")
    return types
