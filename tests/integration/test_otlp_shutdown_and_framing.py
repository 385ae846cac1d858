"""A shutdown's grace for requests in flight, and calls framed wrong: a chunked body the Python
parser cannot read, an export call with more or fewer than one request, a call cancelled."""

from __future__ import annotations

import http.client
import logging
import socket

import aiohttp.web_protocol
import grpc
import pytest
from aiohttp.http_parser import HttpRequestParserPy
from google.protobuf import json_format
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceResponse,
)

from tests.integration.conftest import StartServer, errors_logged, until
from tests.integration.otlp_support import (
    HEADERS,
    JSON,
    PROTOBUF,
    QUIET,
    REQUESTS_COUNTED,
    HeldCall,
    bad_data,
    export_grpc,
    in_flight,
    ok_response,
    post,
    ready,
    refund_request,
    stalled_body,
    stopping,
    trace_hex,
)


def test_a_shutdown_stops_taking_http_requests_at_once_and_serves_those_in_flight(
    start_server: StartServer,
) -> None:
    """Both receivers stop accepting the moment the shutdown begins, whatever the other still
    waits for (here a gRPC call in flight held the HTTP listener open until gRPC's grace
    ended), and both finish their requests in flight within the grace."""
    server = start_server(**QUIET)
    host, _, port = server.address("http").rpartition(":")
    kept = http.client.HTTPConnection(host, int(port), timeout=10)
    kept.request("POST", "/v1/traces", refund_request().SerializeToString(), HEADERS)
    first = kept.getresponse()
    assert (first.status, first.read(), first.will_close) == (200, b"", False)  # kept alive
    grpc_request = refund_request()
    held = HeldCall(server, [grpc_request.SerializeToString()])
    http_request = refund_request()
    body = http_request.SerializeToString()
    with socket.create_connection((host, int(port)), timeout=10) as client:
        head = f"POST /v1/traces HTTP/1.1\r\nHost: {host}\r\nContent-Type: {PROTOBUF}\r\n"
        client.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body[:10])
        assert until(lambda: in_flight(server) == 2)

        stopped = stopping(server, grace=30)
        assert until(lambda: not ready(server))
        with pytest.raises(ConnectionRefusedError):  # the listener is closed
            socket.create_connection((host, int(port)), timeout=10).close()
        # A connection kept alive: its next request is refused unread, retryable.
        kept.request("POST", "/v1/traces", body, HEADERS)
        refused = kept.getresponse()
        assert (refused.status, refused.getheader("Retry-After")) == (503, "1")
        assert b"toolwatch is shutting down" in refused.read()
        assert refused.will_close  # the client opens a new connection, elsewhere
        kept.close()
        client.sendall(body[10:])
        answer = client.recv(65536).decode("latin-1")
        assert held.release() == ExportTraceServiceResponse()
        stopped.result(10)

    assert answer.partition("\r\n")[0] == "HTTP/1.1 200 OK"
    received = "toolwatch_spans_received_total"
    assert server.sample(received, {"transport": "http"}) == 12  # the refused one not taken
    assert server.sample(received, {"transport": "grpc"}) == 6
    assert server.sample(REQUESTS_COUNTED, {"transport": "http", "outcome": "aborted"}) == 1
    drained = {t["trace_id"] for t in server.tooltraces()}
    assert {trace_hex(http_request), trace_hex(grpc_request)} <= drained


def test_a_shutdown_answers_an_http_body_still_arriving_at_the_grace_503_unread(
    start_server: StartServer,
) -> None:
    """Not waited for until the read timeout (30 s), past the grace: as gRPC cancels its
    calls at the grace, and a decode still running then is given up."""
    server = start_server(**QUIET)
    with stalled_body(server) as client:
        stopping(server, grace=0.2).result(10)
        answer = client.recv(65536).decode("latin-1")

    status_line, _, rest = answer.partition("\r\n")
    assert status_line == "HTTP/1.1 503 Service Unavailable"
    assert "Retry-After: 1" in rest
    assert "toolwatch is shutting down" in rest
    aborted = {"transport": "http", "outcome": "aborted"}
    assert server.sample(REQUESTS_COUNTED, aborted) == 1  # none of it was taken
    assert in_flight(server) == 0


@pytest.mark.parametrize(
    "broken",
    [b"2\r\n{}XX\r\n0\r\n\r\n", b"2\r\n{}\r\nzz\r\n0\r\n\r\n"],
    ids=["chunk-data", "chunk-size"],
)
def test_a_chunked_body_whose_framing_breaks_under_the_python_parser_is_400(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch, broken: bytes
) -> None:
    """aiohttp's Python parser (no C extension) tells the reading handler, which answered it
    500, a server error no OTLP client retries or reports as bad data. (The C parser does
    not tell it: answered at the read timeout, above.)"""
    monkeypatch.setattr(aiohttp.web_protocol, "HttpRequestParser", HttpRequestParserPy)
    server = start_server(**QUIET)
    host, _, port = server.address("http").rpartition(":")
    head = f"POST /v1/traces HTTP/1.1\r\nHost: {host}\r\nContent-Type: {JSON}\r\n"
    with socket.create_connection((host, int(port)), timeout=10) as client:
        client.sendall(f"{head}Transfer-Encoding: chunked\r\n\r\n".encode())
        assert until(lambda: in_flight(server) == 1)  # the handler is reading the body
        client.sendall(broken)
        answer = b""
        while part := client.recv(65536):  # the server closes the connection
            answer += part

    head_lines, _, body = answer.partition(b"\r\n\r\n")
    assert head_lines.split(b"\r\n")[0] == b"HTTP/1.1 400 Bad Request"
    status = json_format.Parse(body, status_pb2.Status())
    assert bad_data(status) == [
        (
            "Transfer-Encoding",
            "the request body's HTTP framing is broken (TransferEncodingError); nothing was read",
        )
    ]
    invalid = {"transport": "http", "outcome": "invalid"}
    assert until(lambda: server.sample(REQUESTS_COUNTED, invalid) == 1)
    assert ok_response(post(server, refund_request().SerializeToString())) == (
        ExportTraceServiceResponse()
    )


@pytest.mark.parametrize(
    ("messages", "reason"),
    [(0, "the call carried no ExportTraceServiceRequest"), (2, "a second request message")],
)
def test_an_export_call_must_carry_exactly_one_request(
    start_server: StartServer, messages: int, reason: str
) -> None:
    server = start_server(**QUIET)
    call = HeldCall(server, [refund_request().SerializeToString() for _ in range(messages)])

    error = call.release()

    assert isinstance(error, grpc.RpcError)
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert reason in error.details()
    assert server.sample("toolwatch_spans_received_total", {"transport": "grpc"}) == 0
    invalid = {"transport": "grpc", "outcome": "invalid"}
    assert server.sample(REQUESTS_COUNTED, invalid) == 1
    assert in_flight(server) == 0


def test_a_grpc_call_the_client_cancels_is_aborted_not_invalid(
    start_server: StartServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A client that gives up (its deadline, or it went away) has sent nothing wrong: counted
    ``aborted``, as an HTTP client that goes away is, so the invalid-request count an SRE
    alerts on stays the count of broken clients."""
    server = start_server(**QUIET)
    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            call = HeldCall(server, [])
            assert until(lambda: in_flight(server) == 1)
            call.cancel()
            assert until(lambda: in_flight(server) == 0)

    counted = {
        outcome: server.sample(
            REQUESTS_COUNTED, {"transport": "grpc", "outcome": outcome}, missing_ok=True
        )
        for outcome in ("aborted", "invalid", "ok")
    }
    assert counted == {"aborted": 3, "invalid": 0, "ok": 0}
    assert errors_logged(caplog) == []
    assert export_grpc(server, refund_request()) == ExportTraceServiceResponse()
    assert server.sample("toolwatch_spans_received_total", {"transport": "grpc"}) == 6
