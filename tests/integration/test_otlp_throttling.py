"""Throttling (opentelemetry-proto ``docs/specification.md``, "Throttling"): a full buffer or
no free request slot is answered UNAVAILABLE with RetryInfo / 503 with Retry-After, a slot
comes back when a call is abandoned or stalls, and requests that are not OTLP are counted."""

from __future__ import annotations

import logging
import socket

import grpc
import pytest
from google.protobuf import duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcExporter,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.integration import agents
from tests.integration.conftest import RunningServer, StartServer, errors_logged, until
from tests.integration.otlp_support import (
    JSON,
    PROTOBUF,
    QUIET,
    REQUESTS_COUNTED,
    SLOW,
    HeldCall,
    error_status,
    export_grpc,
    in_flight,
    ok_response,
    post,
    refund_request,
    sent_calls,
    trace_hex,
)

OVERLOAD = {
    "assembly__max_buffered_spans": 8,
    "assembly__max_spans_per_trace": 7,  # under the buffer's bound: the cap must be reachable
    "assembly__overflow": "backpressure",
    "ingest__retry_after_seconds": 2.5,
    **QUIET,
}


def _retry_info(error: grpc.RpcError) -> tuple[error_details_pb2.RetryInfo, ...]:
    """RetryInfo from both trailers: the rich status and the one the Python SDK reads."""
    trailers = dict(error.trailing_metadata())
    status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    assert status.code == code_pb2.UNAVAILABLE
    (detail,) = status.details
    from_status = error_details_pb2.RetryInfo()
    assert detail.Unpack(from_status)
    return from_status, error_details_pb2.RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"])


def test_grpc_overload_is_unavailable_with_retry_info(start_server: StartServer) -> None:
    server = start_server(**OVERLOAD)
    export_grpc(server, refund_request())  # 6 of 8 spans buffered
    refused = refund_request()

    with pytest.raises(grpc.RpcError) as raised:
        export_grpc(server, refused)

    assert raised.value.code() is grpc.StatusCode.UNAVAILABLE
    delay = duration_pb2.Duration(seconds=2, nanos=500_000_000)
    assert [info.retry_delay for info in _retry_info(raised.value)] == [delay, delay]
    assert server.sample("toolwatch_spans_refused_total", {"transport": "grpc"}) == 6
    assert server.sample("toolwatch_spans_received_total", {"transport": "grpc"}) == 6
    server.settle()
    assert export_grpc(server, refused) == ExportTraceServiceResponse()
    assert server.sample("toolwatch_spans_received_total", {"transport": "grpc"}) == 12


def test_the_python_grpc_exporter_drops_a_batch_told_to_retry_past_its_timeout(
    start_server: StartServer,
) -> None:
    """Why ``check-config`` warns of an ``ingest.retry_after_seconds`` of 10 or more: the SDK's
    exporter (timeout 2 s here, told 2.5 s) gives its batch up at once instead of waiting."""
    server = start_server(**OVERLOAD)
    export_grpc(server, refund_request())  # 6 of 8 spans buffered
    exporter = GrpcExporter(endpoint=server.address("grpc"), insecure=True, timeout=2)
    try:
        spans = agents.record(agents.refund_run(), "genai")
        assert exporter.export(spans) is SpanExportResult.FAILURE
    finally:
        exporter.shutdown()
    assert server.sample("toolwatch_spans_refused_total", {"transport": "grpc"}) == 6
    assert server.sample("toolwatch_spans_received_total", {"transport": "grpc"}) == 6


def test_http_overload_is_503_with_retry_after(start_server: StartServer) -> None:
    server = start_server(**OVERLOAD)
    ok_response(post(server, refund_request().SerializeToString()))
    refused = refund_request().SerializeToString()

    answer = post(server, refused)

    assert answer.status == 503
    assert answer.headers["Retry-After"] == "3"  # whole seconds, never shorter than 2.5 s
    assert error_status(answer).code == code_pb2.UNAVAILABLE
    assert server.sample("toolwatch_spans_refused_total", {"transport": "http"}) == 6
    assert server.sample("toolwatch_spans_received_total", {"transport": "http"}) == 6
    server.settle()
    assert ok_response(post(server, refused)) == ExportTraceServiceResponse()
    assert server.sample("toolwatch_spans_received_total", {"transport": "http"}) == 12


def overloaded(server: RunningServer, transport: str) -> float:
    labels = {"transport": transport, "outcome": "overloaded"}
    return server.sample("toolwatch_export_request_duration_seconds_count", labels)


def test_requests_beyond_the_slots_are_refused_unread_and_retryable(
    start_server: StartServer,
) -> None:
    server = start_server(
        ingest__max_concurrent_requests=2, ingest__retry_after_seconds=2.5, **QUIET
    )
    held = [refund_request() for _ in range(2)]
    calls = [HeldCall(server, [request.SerializeToString()]) for request in held]
    assert until(lambda: in_flight(server) == 2)
    refused = refund_request()

    with pytest.raises(grpc.RpcError) as raised:
        export_grpc(server, refused)
    answer = post(server, refused.SerializeToString())  # the slots are shared

    assert raised.value.code() is grpc.StatusCode.UNAVAILABLE
    delay = duration_pb2.Duration(seconds=2, nanos=500_000_000)
    assert [info.retry_delay for info in _retry_info(raised.value)] == [delay, delay]
    assert (answer.status, answer.headers["Retry-After"]) == (503, "3")
    assert error_status(answer).code == code_pb2.UNAVAILABLE
    assert (overloaded(server, "grpc"), overloaded(server, "http")) == (1, 1)
    assert [call.release() for call in calls] == [ExportTraceServiceResponse()] * 2
    assert in_flight(server) == 0
    assert export_grpc(server, refused) == ExportTraceServiceResponse()
    server.settle()
    sent = sorted(trace_hex(r) for r in (*held, refused))
    assert sorted(t for t, _, _ in sent_calls(server)) == sent
    assert server.sample("toolwatch_spans_received_total", {"transport": "grpc"}) == 18


def test_a_call_abandoned_before_its_body_gives_its_slot_back(start_server: StartServer) -> None:
    server = start_server(ingest__max_concurrent_requests=1, **QUIET)
    abandoned = HeldCall(server, [refund_request().SerializeToString()])
    assert until(lambda: in_flight(server) == 1)

    abandoned.cancel()

    assert until(lambda: in_flight(server) == 0)  # a leaked slot would refuse all, forever
    assert export_grpc(server, refund_request()) == ExportTraceServiceResponse()
    assert server.sample("toolwatch_spans_received_total", {"transport": "grpc"}) == 6


def test_an_http_body_cut_off_mid_way_gives_its_slot_back(
    start_server: StartServer, caplog: pytest.LogCaptureFixture
) -> None:
    server = start_server(ingest__max_concurrent_requests=1, **QUIET)
    host, _, port = server.address("http").rpartition(":")
    aborted = {"transport": "http", "outcome": "aborted"}
    with caplog.at_level(logging.ERROR), socket.create_connection((host, int(port)), 10) as client:
        head = f"POST /v1/traces HTTP/1.1\r\nHost: {host}\r\nContent-Type: {PROTOBUF}\r\n"
        client.sendall(f"{head}Content-Length: 100000\r\n\r\n".encode() + b"\x0a" * 10)
        assert until(lambda: in_flight(server) == 1)
        client.close()
        assert until(lambda: server.sample(REQUESTS_COUNTED, aborted, missing_ok=True) == 1)
    assert errors_logged(caplog) == []

    assert until(lambda: in_flight(server) == 0)
    answer = ok_response(post(server, refund_request().SerializeToString()))
    assert answer == ExportTraceServiceResponse()
    assert server.sample("toolwatch_spans_received_total", {"transport": "http"}) == 6


def test_a_first_request_with_a_bad_method_is_counted_and_its_line_not_logged(
    start_server: StartServer, caplog: pytest.LogCaptureFixture
) -> None:
    """aiohttp logs this one through debug, not exception: the line at fault (a token in its
    query, here) must not reach the log either, and the request is counted invalid."""
    server = start_server(**QUIET)
    host, _, port = server.address("http").rpartition(":")
    with caplog.at_level(logging.DEBUG, logger="aiohttp.server"):
        with socket.create_connection((host, int(port)), timeout=10) as client:
            client.sendall(b"post /v1/traces?access_token=s3cret HTTP/1.1\r\nHost: x\r\n\r\n")
            assert client.recv(65536).startswith(b"HTTP/1.0 400 Bad Request\r\n")
        invalid = {"transport": "http", "outcome": "invalid"}
        assert until(lambda: server.sample(REQUESTS_COUNTED, invalid) == 1)
    logged = [logging.Formatter().format(r) for r in caplog.records if r.name == "aiohttp.server"]
    assert logged == ["refused a request that is not HTTP: BadHttpMethod (400)"]


@pytest.mark.parametrize(
    "framing",
    [
        b"Content-Length: abc\r\n\r\n{}",
        b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
        b"Authorization: Bearer tok-s3cret\x01\r\nContent-Length: 2\r\n\r\n{}",
    ],
    ids=["content-length", "chunk-size", "header-value"],
)
def test_a_request_that_is_not_http_is_400_and_counted_not_logged_as_an_error(
    start_server: StartServer, caplog: pytest.LogCaptureFixture, framing: bytes
) -> None:
    """aiohttp's parser answers it before any handler runs, and logged an ERROR with a
    traceback for each: any client could flood the log."""
    server = start_server(**QUIET)
    host, _, port = server.address("http").rpartition(":")
    head = f"POST /v1/traces HTTP/1.1\r\nHost: {host}\r\nContent-Type: {JSON}\r\n".encode()
    with caplog.at_level(logging.DEBUG, logger="aiohttp.server"):
        for _ in range(3):
            with socket.create_connection((host, int(port)), timeout=10) as client:
                client.sendall(head + framing)
                assert client.recv(65536).startswith(b"HTTP/1.0 400 Bad Request\r\n")
        invalid = {"transport": "http", "outcome": "invalid"}
        assert until(lambda: server.sample(REQUESTS_COUNTED, invalid) == 3)
    logged = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert [r.levelname for r in logged] == ["DEBUG"] * 3
    assert not [r for r in logged if "s3cret" in logging.Formatter().format(r)]  # unsaid
    assert ok_response(post(server, refund_request().SerializeToString())) == (
        ExportTraceServiceResponse()
    )


def test_a_grpc_call_that_never_sends_its_body_times_out_retryably(
    start_server: StartServer,
) -> None:
    server = start_server(**SLOW)
    stalled = HeldCall(server, [])
    assert until(lambda: in_flight(server) == 1)

    error = stalled.future.exception(timeout=10)  # the server ends it; the client sent nothing

    assert isinstance(error, grpc.RpcError)
    assert error.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    assert "not received within 0.2 s" in error.details()
    stalled.cancel()
    assert in_flight(server) == 0
    assert export_grpc(server, refund_request()) == ExportTraceServiceResponse()
    labels = {"transport": "grpc", "outcome": "timeout"}
    assert server.sample("toolwatch_export_request_duration_seconds_count", labels) == 1


def test_an_http_body_that_stalls_is_answered_503_and_frees_its_slot(
    start_server: StartServer,
) -> None:
    server = start_server(**SLOW)
    host, _, port = server.address("http").rpartition(":")
    with socket.create_connection((host, int(port)), timeout=10) as client:
        head = f"POST /v1/traces HTTP/1.1\r\nHost: {host}\r\nContent-Type: {PROTOBUF}\r\n"
        client.sendall(f"{head}Content-Length: 100000\r\n\r\n".encode() + b"\x0a" * 10)
        answer = client.recv(65536).decode("latin-1")  # sent once the read timeout passed
        client.sendall(b"\x0a" * (100_000 - 10))  # the rest, late: discarded, then closed
        while client.recv(65536):
            pass

    status_line, _, rest = answer.partition("\r\n")
    assert status_line == "HTTP/1.1 503 Service Unavailable"
    assert "Retry-After: 1" in rest
    assert until(lambda: in_flight(server) == 0)
    answer_ok = ok_response(post(server, refund_request().SerializeToString()))
    assert answer_ok == ExportTraceServiceResponse()
    count = "toolwatch_export_request_duration_seconds_count"
    outcomes = {
        o: server.sample(count, {"transport": "http", "outcome": o})
        for o in ("timeout", "overloaded")
    }
    assert outcomes == {"timeout": 1, "overloaded": 0}  # as gRPC counts it
