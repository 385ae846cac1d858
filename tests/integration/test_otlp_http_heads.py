"""Request heads on the HTTP listeners, OTLP and metrics, through a real server and raw
clients: a header line as long as a bearer JWT is read; a connection reads one request
ahead of the one it handles (``listeners.QUEUED_REQUESTS``); and a request aiohttp's parser
refuses (a head past ``listeners.HEAD_LIMITS`` or not HTTP, a chunked body whose framing
breaks in the packet that brought its head) is answered saying which, without quoting it,
over OTLP/HTTP with a ``google.rpc.Status`` (opentelemetry-proto ``docs/specification.md``,
OTLP/HTTP "Failures": "The response body for all HTTP 4xx and HTTP 5xx responses MUST be a
Protobuf-encoded Status message")."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import logging
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp.web_protocol
import pytest
from aiohttp.http_parser import HttpRequestParserPy
from google.rpc import code_pb2, status_pb2

from tests.integration.conftest import RunningServer, StartServer, until
from tests.integration.otlp_support import PROTOBUF, QUIET, REQUESTS_COUNTED, refund_request
from toolwatch.listeners import MAX_HEAD_LINE, MAX_HEADERS, QUEUED_REQUESTS

#: Longer than aiohttp's default limit of a header line (8,190 bytes), as a bearer JWT
#: carrying many claims is: the Collector's receiver (1 MiB of headers) and toolwatch's
#: gRPC listener (16 KiB of metadata) take it.
LONG_VALUE = "a" * 9_000
INVALID = {"transport": "http", "outcome": "invalid"}


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str | None
    body: bytes


def send(server: RunningServer, listener: str, head: dict[str, str], body: bytes = b"") -> Answer:
    """``POST /v1/traces`` (``listener`` "http") or ``GET /metrics`` ("metrics") with the
    headers ``head``."""
    host, port = server.address(listener).rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    method, path = ("POST", "/v1/traces") if listener == "http" else ("GET", "/metrics")
    try:
        connection.request(method, path, body=body or None, headers=head)
        response = connection.getresponse()
        return Answer(response.status, response.getheader("Content-Type"), response.read())
    finally:
        connection.close()


def export(server: RunningServer, head: dict[str, str]) -> Answer:
    body = refund_request().SerializeToString()
    return send(server, "http", {"Content-Type": PROTOBUF, **head}, body)


@pytest.mark.parametrize(
    "head",
    [
        {"X-Scope-OrgID": LONG_VALUE},
        {"Authorization": "Bearer " + LONG_VALUE},
        {"X-Scope-OrgID": "a" * (MAX_HEAD_LINE - 100)},
    ],
    ids=["long-custom-header", "long-authorization", "near-the-limit"],
)
def test_a_header_line_as_long_as_a_bearer_jwt_is_read(
    start_server: StartServer, head: dict[str, str]
) -> None:
    """Was: aiohttp's parser refused a header line over 8,190 bytes, 400 ``text/plain``
    quoting its first 100 bytes (a token's prefix, which an exporter may log), before any
    handler ran. Now: heads are read up to 64 KiB a line, on both HTTP listeners."""
    server = start_server(**QUIET)

    answer = export(server, head)
    scraped = send(server, "metrics", head)

    assert (answer.status, answer.content_type, answer.body) == (200, PROTOBUF, b"")
    assert server.sample("toolwatch_spans_received_total", {"transport": "http"}) == 6
    assert scraped.status == 200 and b"toolwatch_spans_received_total" in scraped.body


def test_a_long_bearer_token_authenticates(start_server: StartServer, tmp_path: Path) -> None:
    """Was: a token over 8,190 bytes could not reach the token check. Now: it is checked."""
    token = "eyJ" + LONG_VALUE
    token_file = tmp_path / "tokens"
    token_file.write_text(token + "\n")
    server = start_server(security__auth__bearer_token_file=str(token_file), **QUIET)

    assert export(server, {"Authorization": "Bearer " + token}).status == 200
    refused = export(server, {"Authorization": "Bearer " + token[:-1] + "b"})

    assert refused.status == 401
    assert status_pb2.Status.FromString(refused.body).code == code_pb2.UNAUTHENTICATED


#: Heads past ``HEAD_LIMITS``: a line longer than a field may be, more fields than a head
#: may have; and what the refusal says of each.
PAST_THE_LIMITS = {
    "line": (
        {"Authorization": "Bearer " + "s" * MAX_HEAD_LINE},
        f"(LineTooLong): a line of it (the request line, a header field) is longer than"
        f" {MAX_HEAD_LINE} bytes",
    ),
    "fields": (
        {f"X-Field-{n}": "s" * 40 for n in range(MAX_HEADERS + 1)},
        f"(BadHttpMessage): it has more than {MAX_HEADERS} header fields",
    ),
}


@pytest.mark.parametrize("past", sorted(PAST_THE_LIMITS))
def test_a_head_past_the_limits_is_refused_with_a_status_that_quotes_nothing(
    start_server: StartServer, past: str
) -> None:
    """Was: aiohttp's 400 ``text/plain``, quoting the first 100 bytes of the line at fault;
    then a Status naming every limit, whichever was passed. Now: a ``google.rpc.Status``
    (INVALID_ARGUMENT) naming the limit passed, counted invalid; the connection is closed,
    and the next export is served."""
    server = start_server(**QUIET)
    head, reason = PAST_THE_LIMITS[past]

    answer = export(server, head)

    assert (answer.status, answer.content_type) == (400, PROTOBUF)
    status = status_pb2.Status.FromString(answer.body)
    assert status.code == code_pb2.INVALID_ARGUMENT
    assert status.message == "the request's head was refused " + reason
    assert b"s" * 20 not in answer.body
    assert until(lambda: server.sample(REQUESTS_COUNTED, INVALID) == 1)
    assert export(server, {}).status == 200


def test_an_http_1_0_head_with_a_long_line_is_told_its_line_is_long(
    start_server: StartServer,
) -> None:
    """Was: "it is not HTTP/1.1, or a line of it is longer than 65536 bytes, or ...": a
    well-formed HTTP/1.0 request was told it might not be HTTP/1.1. Now: the line alone."""
    server = start_server(**QUIET)
    line = b"X-Scope-OrgID: " + b"s" * MAX_HEAD_LINE
    with _connect(server, "http") as client:
        client.sendall(b"POST /v1/traces HTTP/1.0\r\n" + line + b"\r\n\r\n")
        answer = _read_all(client)

    status = _status(answer)
    assert status.message == "the request's head was refused " + PAST_THE_LIMITS["line"][1]
    assert b"s" * 20 not in answer


def test_a_head_that_is_not_http_is_refused_with_a_status_that_quotes_nothing(
    start_server: StartServer,
) -> None:
    """Was: aiohttp's 400 quoted the bad header, a token and all. Now: a Status naming the
    parser's error kind."""
    server = start_server(**QUIET)
    head = b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-s3cret\x01\r\n"
    with _connect(server, "http") as client:
        client.sendall(head + b"Content-Length: 0\r\n\r\n")
        answer = _read_all(client)

    head_end = answer.index(b"\r\n\r\n") + 4
    assert answer.startswith(b"HTTP/1.0 400 Bad Request\r\n")
    assert f"Content-Type: {PROTOBUF}\r\n".encode() in answer[:head_end]
    status = _status(answer)
    assert status.message.startswith("the request's head was refused (")
    assert "a character HTTP does not allow" in status.message
    assert b"s3cret" not in answer


@pytest.mark.parametrize("listener", ["http", "metrics"])
def test_a_refused_head_is_told_to_the_sender_log_with_its_peer_and_no_secret(
    start_server: StartServer, caplog: pytest.LogCaptureFixture, listener: str
) -> None:
    """Was: a head aiohttp's parser refuses was counted (``invalid``) and logged at DEBUG
    only: the on-call could not find which client sent a malformed or oversized head (a
    proxy adding headers, TLS sent to a plain listener). Now: the sender log's warning names
    the listener, the peer and the answer, and quotes nothing of the request."""
    server = start_server(**QUIET)
    head = b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-s3cret\x01\r\n"
    with (
        caplog.at_level(logging.WARNING, "toolwatch.senders"),
        _connect(server, listener) as client,
    ):
        client.sendall(head + b"Content-Length: 0\r\n\r\n")
        port = client.getsockname()[1]
        assert _read_all(client).startswith(b"HTTP/1.0 400 Bad Request\r\n")
    (line,) = [r.getMessage() for r in caplog.records if r.name == "toolwatch.senders"]
    expected = (
        f"request refused (invalid_head) on {listener} from 127.0.0.1:{port}:"
        " \"the request's head was refused (BadHttpMessage): it is not well-formed HTTP/1.x"
        " (such as a header field with a character HTTP does not allow"
    )
    assert line.startswith(expected), line
    assert "s3cret" not in line


def test_the_metrics_listener_refuses_a_head_past_the_limits_in_text_that_quotes_nothing(
    start_server: StartServer,
) -> None:
    """Was: aiohttp's 400 quoted the line at fault, a scraper's token with it. Now: the
    metrics listener has the OTLP listener's limits, and says why in plain text."""
    server = start_server(**QUIET)

    answer = send(server, "metrics", PAST_THE_LIMITS["line"][0])

    assert answer.status == 400
    assert (answer.content_type or "").startswith("text/plain")
    assert answer.body.startswith(b"the request's head was refused (LineTooLong)")
    assert b"s" * 20 not in answer.body


@pytest.fixture(params=["C", "Python"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """aiohttp's request parser the server's connections use: its C one (llhttp), as
    installed, or its Python one, as without its wheels (``AIOHTTP_NO_EXTENSIONS``). They
    raise different errors for the same fault."""
    if request.param == "Python":
        monkeypatch.setattr(aiohttp.web_protocol, "HttpRequestParser", HttpRequestParserPy)
    elif aiohttp.web_protocol.HttpRequestParser is HttpRequestParserPy:
        pytest.skip("aiohttp's C parser is not installed")
    return str(request.param)


@pytest.mark.parametrize(
    "body",
    [b"zz\r\nabc\r\n0\r\n\r\n", b"3\r\nabcdef\r\n0\r\n\r\n"],
    ids=["chunk-size-not-hex", "chunk-longer-than-its-size"],
)
def test_a_broken_chunked_body_after_a_valid_head_is_not_said_to_be_the_head(
    start_server: StartServer, parser: str, body: bytes
) -> None:
    """A head within every limit, its chunked body broken in the same packet: aiohttp's
    parser refuses the request before a handler runs. Was: "the request's head was refused
    (BadHttpMessage): it is not HTTP/1.1, or a line of it is longer than 65536 bytes, or it
    has more than 128 header fields", none of which was so: a client (or an operator reading
    the exporter's log) was sent to look at its headers. Now: the receiver's own answer to
    the same fault found while reading (``listeners.framing_message``), naming the parser's
    error: ``BadHttpMessage`` from the C parser, ``TransferEncodingError`` from Python's."""
    server = start_server(**QUIET)
    head = (
        b"POST /v1/traces HTTP/1.1\r\nHost: toolwatch\r\n"
        + f"Content-Type: {PROTOBUF}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    )
    with _connect(server, "http") as client:
        client.sendall(head + body)
        answer = _read_all(client)

    assert answer.split(b"\r\n", 1)[0].endswith(b" 400 Bad Request")
    status = _status(answer)
    assert status.code == code_pb2.INVALID_ARGUMENT
    kind = "BadHttpMessage" if parser == "C" else "TransferEncodingError"
    assert status.message == (
        f"the request body's HTTP framing is broken ({kind}); nothing was read"
    )
    assert until(lambda: server.sample(REQUESTS_COUNTED, INVALID) == 1)


@pytest.fixture
def decode_turn_held(start_server: StartServer) -> Iterator[RunningServer]:
    """A server whose decoding turn is held, as another client's export holds it while it
    decodes (one at a time: a 20 MiB OTLP/JSON body takes 1.3 to 9 s, ``decode_thread``)."""
    server = start_server(**QUIET)
    release = server.call(asyncio.Event)
    entered = threading.Event()

    async def hold() -> None:
        async with server.app._decoding.turn(lambda: None):
            entered.set()
            await release.wait()

    server.call(lambda: server.loop.create_task(hold()))
    assert entered.wait(10)
    yield server
    server.call(release.set)


#: A header field's value in ``_largest_head``, and how many such fields it has: 126 fields
#: in all, as many as aiohttp's Python parser takes (it counts the request line and the
#: blank line among its 128).
_PAD = MAX_HEAD_LINE - 100
_PADS = MAX_HEADERS - 5
#: A head within ``HEAD_LIMITS`` at most: its request line and 128 fields, 64 KiB each.
HEAD_BOUND = MAX_HEAD_LINE * (MAX_HEADERS + 1)


def _export_head(length: int, extra: bytes = b"") -> bytes:
    return (
        b"POST /v1/traces HTTP/1.1\r\nHost: toolwatch\r\n"
        + f"Content-Type: {PROTOBUF}\r\nContent-Length: {length}\r\n".encode()
        + extra
        + b"\r\n"
    )


def _largest_head() -> bytes:
    """An export's head within ``HEAD_LIMITS``: its fields (Host, Content-Type and
    Content-Length, and ``_PADS`` more) nearly 64 KiB each (a field's name and value count
    against ``max_field_size``)."""
    value = b"t" * _PAD
    fields = b"".join(b"X-Pad-%03d: %s\r\n" % (n, value) for n in range(_PADS))
    return _export_head(0, fields)


def _queued_heads(server: RunningServer) -> tuple[list[int], bool]:
    """The bytes of each request head the HTTP listeners' connections have read and queued
    behind the request they handle, and whether every connection holding one has stopped
    reading (read on the server's loop, from aiohttp's internals: its handler's queue
    ``_messages`` and ``_buffer_paused``)."""

    def held() -> tuple[list[int], bool]:
        sizes, paused = [], True
        for runner in server.app._runners:
            assert runner.server is not None
            for handler in runner.server._connections:
                for message, _ in handler._messages:
                    raw = getattr(message, "raw_headers", ())
                    sizes.append(sum(len(name) + len(value) for name, value in raw))
                paused = paused and (not handler._messages or handler._buffer_paused)
        return sizes, paused

    return server.call(held)


def test_a_connection_reads_one_request_ahead_of_the_one_it_handles(
    decode_turn_held: RunningServer, parser: str
) -> None:
    """Was: aiohttp read on while a request was handled, and queued up to 32 pipelined
    requests (``web_protocol.MAX_MSG_QUEUE_SIZE``), each head up to ``HEAD_LIMITS``: one
    connection whose export waited for its decoding turn held 32 heads of 8 MiB (measured:
    485 MiB resident). Now: one (``QUEUED_REQUESTS``), then it stops reading until the
    handled request is answered. Reads aiohttp's internals (``_queued_heads``)."""
    server = decode_turn_held
    body = refund_request().SerializeToString()
    pipelined = _export_head(len(body)) + body + _largest_head() * 3
    client = _connect(server, "http")
    sender = threading.Thread(target=_send, args=(client, pipelined), daemon=True)
    try:
        sender.start()

        def settled() -> bool:  # stopped reading with a large head queued, or read past it
            sizes, paused = _queued_heads(server)
            return (paused and max(sizes, default=0) > _PAD * _PADS) or len(sizes) > 1

        assert until(settled)
        sizes, _ = _queued_heads(server)
        assert len(sizes) == QUEUED_REQUESTS
        assert _PAD * _PADS < sizes[0] <= HEAD_BOUND
    finally:
        client.shutdown(socket.SHUT_RDWR)  # wakes the sender, blocked while the server waits
        sender.join(timeout=10)
        client.close()


def _send(client: socket.socket, data: bytes) -> None:
    """``data`` sent, as far as the server reads it before the test closes the socket."""
    with contextlib.suppress(OSError):
        client.sendall(data)


def _connect(server: RunningServer, listener: str) -> socket.socket:
    host, port = server.address(listener).rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def _status(answer: bytes) -> status_pb2.Status:
    """The ``google.rpc.Status`` an HTTP answer carries."""
    return status_pb2.Status.FromString(answer[answer.index(b"\r\n\r\n") + 4 :])


def _read_all(client: socket.socket) -> bytes:
    """What the server sends before it closes the connection."""
    received = b""
    while chunk := client.recv(65536):
        received += chunk
    return received


def _ask(address: str, request: bytes) -> bytes:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        return sock.recv(100)


def test_a_refused_head_does_not_hide_the_next_undecodable_body_from_the_sender_log(
    start_server: StartServer, caplog: pytest.LogCaptureFixture
) -> None:
    """``invalid_request`` is "a body that cannot be decoded", the line that names the
    exporter whose SDK writes bad bodies. Was (review): a refused head (a port scanner, TLS
    sent to a plain listener) was told under the same reason and took its one line a
    minute: the exporter's undecodable body sent after it was not told. Now: refused heads
    have a reason of their own, ``invalid_head``."""
    server = start_server()
    address = server.address("http")
    with caplog.at_level(logging.WARNING, "toolwatch.senders"):
        garbage = _ask(address, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\r\n\r\n")
        assert garbage.startswith(b"HTTP/1.")  # refused: 400
        body = b"\xff\xff\xff"
        export = (
            b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
            b"Content-Length: 3\r\n\r\n" + body
        )
        assert _ask(address, export).startswith(b"HTTP/1.1 400")
    lines = [r.getMessage() for r in caplog.records if r.name == "toolwatch.senders"]
    assert [line.split(" on ")[0] for line in lines] == [
        "request refused (invalid_head)",
        "request refused (invalid_request)",
    ], lines
