"""OTLP/HTTP ``Expect: 100-continue`` (RFC 9110 §10.1.1): a request the receiver will refuse
whatever its body (no token, over the size limit, every request slot taken, shutting down)
is answered before its client sends the body; one it admits holds its request slot from the
check to its answer, once."""

from __future__ import annotations

import re
import socket
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from tests.integration.conftest import RunningServer, StartServer, until
from tests.integration.otlp_support import PROTOBUF, HeldCall, in_flight, refund_request

REQUESTS = "toolwatch_export_request_duration_seconds_count"
QUIET = {"assembly__tick_seconds": 10}


def _head(server: RunningServer, content_length: int, token: str = "", more: str = "") -> bytes:
    host = server.address("http").rpartition(":")[0]
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (
        f"POST /v1/traces HTTP/1.1\r\nHost: {host}\r\nContent-Type: {PROTOBUF}\r\n{auth}{more}"
        f"Expect: 100-continue\r\nContent-Length: {content_length}\r\n\r\n"
    ).encode()


def _connect(server: RunningServer) -> socket.socket:
    host, _, port = server.address("http").rpartition(":")
    return socket.create_connection((host, int(port)), timeout=5)


def _first_answer_to_expect(server: RunningServer, content_length: int, token: str = "") -> bytes:
    """The status line of the first answer to a POST whose headers say ``Expect:
    100-continue`` (curl sends it for bodies over 1 MiB, .NET Framework's HttpClient for
    every POST); its body is not sent: a client waits for ``100 Continue`` first."""
    with _connect(server) as client:
        client.sendall(_head(server, content_length, token))
        return client.recv(4096).split(b"\r\n", 1)[0]


def _answer(client: socket.socket) -> bytes:
    """The first final answer on the connection, head and body (an interim ``100 Continue``
    before it is left out)."""
    received = b""
    while True:
        received += client.recv(65536)
        if received.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"):
            received = received.removeprefix(b"HTTP/1.1 100 Continue\r\n\r\n")
        head, found, body = received.partition(b"\r\n\r\n")
        if not found:
            continue
        length = re.search(rb"\r\ncontent-length: *(\d+)", head, re.IGNORECASE)
        if length is not None and len(body) >= int(length.group(1)):
            return received


def test_expect_continue_over_the_size_limit_is_refused_before_the_body_is_sent(
    start_server: StartServer,
) -> None:
    """aiohttp's default expect handler sent ``100 Continue`` before the receiver looked at
    anything: a client declaring a body far over ``ingest.max_request_bytes`` was invited
    to upload all of it, to be told 413 afterwards."""
    server = start_server(ingest__max_request_bytes=64 * 1024)

    first = _first_answer_to_expect(server, 50 * 2**20)

    assert first.startswith(b"HTTP/1.1 413"), first
    assert server.sample(REQUESTS, {"transport": "http", "outcome": "refused"}) == 1


def test_expect_continue_with_every_request_slot_taken_is_told_to_retry_before_the_body(
    start_server: StartServer,
) -> None:
    """Overload is answered "before their bodies are read" (docs/configuration.md, ``ingest``),
    for a client that asks ``Expect: 100-continue`` too: 503 + Retry-After at once."""
    server = start_server(ingest__max_concurrent_requests=1, **QUIET)
    held = HeldCall(server, [refund_request().SerializeToString()])
    try:
        assert until(lambda: in_flight(server) == 1)

        with _connect(server) as client:
            client.sendall(_head(server, 10 * 2**20))
            answer = _answer(client)

        assert answer.startswith(b"HTTP/1.1 503"), answer[:80]
        assert b"\r\nRetry-After: 1\r\n" in answer
        assert server.sample(REQUESTS, {"transport": "http", "outcome": "overloaded"}) == 1
    finally:
        held.release()
    assert until(lambda: in_flight(server) == 0)


def test_expect_continue_without_the_token_is_401_before_the_body(
    start_server: StartServer, tmp_path: Path
) -> None:
    """The expect check runs the listener's middlewares: the token check answers first."""
    tokens = tmp_path / "tokens"
    tokens.write_text("s3cret-token\n")
    server = start_server(security__auth__bearer_token_file=str(tokens))

    refused = _first_answer_to_expect(server, 1024, token="wrong")
    admitted = _first_answer_to_expect(server, 1024, token="s3cret-token")

    assert refused.startswith(b"HTTP/1.1 401"), refused
    assert admitted == b"HTTP/1.1 100 Continue"
    assert until(lambda: in_flight(server) == 0)  # the admitted one's slot, given back


def test_an_admitted_expect_continue_request_holds_one_slot_and_is_answered(
    start_server: StartServer,
) -> None:
    """Told to go on, the client holds the slot it was checked for: one, not two, and it
    is given back with the answer."""
    server = start_server(ingest__max_concurrent_requests=1, **QUIET)
    body = refund_request().SerializeToString()
    with _connect(server) as client:
        client.sendall(_head(server, len(body)))
        assert client.recv(4096) == b"HTTP/1.1 100 Continue\r\n\r\n"
        assert in_flight(server) == 1

        client.sendall(body)
        answer = _answer(client)

    assert answer.startswith(b"HTTP/1.1 200"), answer[:80]
    payload = answer.partition(b"\r\n\r\n")[2]
    assert ExportTraceServiceResponse.FromString(payload) == ExportTraceServiceResponse()
    assert until(lambda: in_flight(server) == 0)
    assert server.sample(REQUESTS, {"transport": "http", "outcome": "ok"}) == 1
    assert server.sample("toolwatch_spans_received_total", {"transport": "http"}) == 6


def test_a_client_gone_after_100_continue_gives_its_slot_back(start_server: StartServer) -> None:
    server = start_server(ingest__max_concurrent_requests=1, **QUIET)
    with _connect(server) as client:
        client.sendall(_head(server, 100_000))
        assert client.recv(4096) == b"HTTP/1.1 100 Continue\r\n\r\n"
        client.sendall(b"\x0a" * 10)
    assert until(lambda: in_flight(server) == 0)  # a leaked slot would refuse all, forever


def test_an_unknown_expectation_is_417_with_a_status(start_server: StartServer) -> None:
    server = start_server()
    with _connect(server) as client:
        head = _head(server, 10).replace(b"100-continue", b"something-else")
        client.sendall(head)
        answer = _answer(client)
    assert answer.startswith(b"HTTP/1.1 417"), answer[:80]
    assert b"Content-Type: application/x-protobuf" in answer
