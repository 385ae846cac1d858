"""Request heads on the HTTP listeners, OTLP and metrics, through a real server and raw
clients: a header line as long as a bearer JWT is read, and a head aiohttp's parser refuses
(past ``listeners.HEAD_LIMITS``, or not HTTP) is answered without quoting it, over OTLP/HTTP
with a ``google.rpc.Status`` (opentelemetry-proto ``docs/specification.md``, OTLP/HTTP
"Failures": "The response body for all HTTP 4xx and HTTP 5xx responses MUST be a
Protobuf-encoded Status message")."""

from __future__ import annotations

import http.client
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from google.rpc import code_pb2, status_pb2

from tests.integration.conftest import RunningServer, until
from tests.integration.test_otlp_spec import PROTOBUF, QUIET, REQUESTS_COUNTED, refund_request
from toolwatch.listeners import MAX_HEAD_LINE, MAX_HEADERS

StartServer = Callable[..., RunningServer]

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
#: may have.
PAST_THE_LIMITS = {
    "line": {"Authorization": "Bearer " + "s" * MAX_HEAD_LINE},
    "fields": {f"X-Field-{n}": "s" * 40 for n in range(MAX_HEADERS + 1)},
}


@pytest.mark.parametrize("past", sorted(PAST_THE_LIMITS))
def test_a_head_past_the_limits_is_refused_with_a_status_that_quotes_nothing(
    start_server: StartServer, past: str
) -> None:
    """Was: aiohttp's 400 ``text/plain``, quoting the first 100 bytes of the line at fault.
    Now: a ``google.rpc.Status`` (INVALID_ARGUMENT) naming the limits, counted invalid;
    the connection is closed, and the next export is served."""
    server = start_server(**QUIET)

    answer = export(server, PAST_THE_LIMITS[past])

    assert (answer.status, answer.content_type) == (400, PROTOBUF)
    status = status_pb2.Status.FromString(answer.body)
    assert status.code == code_pb2.INVALID_ARGUMENT
    assert f"longer than {MAX_HEAD_LINE} bytes" in status.message
    assert f"more than {MAX_HEADERS} header fields" in status.message
    assert b"s" * 20 not in answer.body
    assert until(lambda: server.sample(REQUESTS_COUNTED, INVALID) == 1)
    assert export(server, {}).status == 200


def test_a_head_that_is_not_http_is_refused_with_a_status_that_quotes_nothing(
    start_server: StartServer,
) -> None:
    """Was: aiohttp's 400 quoted the bad header, a token and all. Now: a Status naming the
    parser's error kind."""
    server = start_server(**QUIET)
    host, port = server.address("http").rsplit(":", 1)
    head = b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-s3cret\x01\r\n"
    with socket.create_connection((host, int(port)), timeout=10) as client:
        client.sendall(head + b"Content-Length: 0\r\n\r\n")
        answer = _read_all(client)

    head_end = answer.index(b"\r\n\r\n") + 4
    assert answer.startswith(b"HTTP/1.0 400 Bad Request\r\n")
    assert f"Content-Type: {PROTOBUF}\r\n".encode() in answer[:head_end]
    status = status_pb2.Status.FromString(answer[head_end:])
    assert status.message.startswith("the request's head was refused (")
    assert b"s3cret" not in answer


def test_the_metrics_listener_refuses_a_head_past_the_limits_in_text_that_quotes_nothing(
    start_server: StartServer,
) -> None:
    """Was: aiohttp's 400 quoted the line at fault, a scraper's token with it. Now: the
    metrics listener has the OTLP listener's limits, and says why in plain text."""
    server = start_server(**QUIET)

    answer = send(server, "metrics", PAST_THE_LIMITS["line"])

    assert answer.status == 400
    assert (answer.content_type or "").startswith("text/plain")
    assert answer.body.startswith(b"the request's head was refused (LineTooLong)")
    assert b"s" * 20 not in answer.body


def _read_all(client: socket.socket) -> bytes:
    """What the server sends before it closes the connection."""
    received = b""
    while chunk := client.recv(65536):
        received += chunk
    return received
