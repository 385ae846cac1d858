"""The OTLP receivers against the OTLP specification (opentelemetry-proto
``docs/specification.md``), through real gRPC and HTTP clients and a real server.

Sections cited: OTLP/gRPC and OTLP/HTTP "Full Success", "Partial Success", "Failures",
"Throttling", "OTLP/gRPC Request" (message size), "OTLP/HTTP Request" (size after
decompression, gzip) and "JSON Protobuf Encoding".
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.integration.conftest import RunningServer, StartServer
from tests.integration.otlp_support import (
    JSON,
    PROTOBUF,
    QUIET,
    REFUND_CALLS,
    bad_data,
    error_status,
    export_grpc,
    grpc_channel,
    ok_response,
    post,
    refund_request,
    sent_calls,
    spans_in,
    to_otlp_json,
    trace_hex,
    with_bad_spans,
)
from toolwatch.ingest import scan


def test_empty_grpc_request_is_full_success(start_server: StartServer) -> None:
    server = start_server()
    with grpc_channel(server) as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)  # type: ignore[no-untyped-call]
        response = stub.Export(ExportTraceServiceRequest(), timeout=10)
    assert not response.HasField("partial_success")


@pytest.mark.parametrize(
    ("content_type", "body"), [(PROTOBUF, b""), (JSON, b"{}"), (JSON, b'{"resourceSpans": []}')]
)
def test_empty_http_request_is_full_success(
    start_server: StartServer, content_type: str, body: bytes
) -> None:
    answer = post(start_server(), body, content_type)
    assert answer.content_type == content_type
    assert not ok_response(answer).HasField("partial_success")
    if content_type == JSON:
        assert json.loads(answer.body) == {}


def _send_mixed(server: RunningServer, transport: str, request: Any) -> Any:
    if transport == "grpc":
        return export_grpc(server, request).partial_success
    if transport == "http-protobuf":
        return ok_response(post(server, request.SerializeToString())).partial_success
    answer = post(server, json.dumps(to_otlp_json(request)).encode(), JSON)
    assert "partialSuccess" in json.loads(answer.body)  # lowerCamelCase in the answer too
    return ok_response(answer).partial_success


@pytest.mark.parametrize("transport", ["grpc", "http-protobuf", "http-json"])
def test_invalid_spans_are_a_partial_success(start_server: StartServer, transport: str) -> None:
    server = start_server(**QUIET)
    valid = refund_request()

    partial = _send_mixed(server, transport, with_bad_spans(valid))

    assert partial.rejected_spans == 4
    message = partial.error_message
    assert message.startswith("4 spans rejected")
    # Each span is named as the client's encoding names it (proto3 JSON: lowerCamelCase).
    if transport == "http-json":
        assert "resourceSpans[0].scopeSpans[0].spans[6]: traceId must be 16 bytes, got 15" in (
            message
        )
        assert "spans[7]: spanId must be 8 bytes, got 4" in message
        assert "spans[8]: traceId must not be all zero" in message
    else:
        assert "resource_spans[0].scope_spans[0].spans[6]: trace_id must be 16 bytes, got 15" in (
            message
        )
        assert "spans[7]: span_id must be 8 bytes, got 4" in message
        assert "spans[8]: trace_id must not be all zero" in message
    assert message.endswith("and 1 more")
    assert server.sample("toolwatch_spans_rejected_total", {"reason": "invalid_trace_id"}) == 2
    assert server.sample("toolwatch_spans_rejected_total", {"reason": "invalid_span_id"}) == 2
    wire = "grpc" if transport == "grpc" else "http"
    assert server.sample("toolwatch_spans_received_total", {"transport": wire}) == 10
    server.settle(rejected=True)  # Was: completion_wait alone
    # Kept and built; judged incomplete: the two spans with a bad span id say they are its.
    assert sent_calls(server) == [(trace_hex(valid), REFUND_CALLS, False)]


@pytest.mark.parametrize("transport", ["grpc", "http-protobuf", "http-json"])
def test_spans_a_limit_drops_are_a_partial_success(
    start_server: StartServer, transport: str
) -> None:
    """OTLP: a server that accepts only part of a request says so; spans over the trace's
    span limit are accepted nowhere, so the sender hears of them (and they are counted).
    The run's root, last, is taken past the limit: it encloses the spans held."""
    server = start_server(assembly__max_spans_per_trace=3, **QUIET)
    request = refund_request()
    over = sum(1 for _ in spans_in(request)) - 3 - 1

    partial = _send_mixed(server, transport, request)

    assert partial.rejected_spans == over
    assert partial.error_message == (
        f"{over} spans dropped (trace_span_limit): over assembly.max_spans_per_trace"
    )
    assert server.sample("toolwatch_spans_dropped_total", {"reason": "trace_span_limit"}) == over


@pytest.mark.parametrize("transport", ["grpc", "http-protobuf", "http-json"])
def test_spans_of_a_trace_already_evaluated_are_a_partial_success(
    start_server: StartServer, transport: str
) -> None:
    """A trace is evaluated once: spans that come after it are not taken, so the sender
    hears of them, as of spans a limit drops (and they are counted late)."""
    server = start_server(**QUIET)
    request = refund_request()
    assert export_grpc(server, request) == ExportTraceServiceResponse()
    server.settle()
    straggler = ExportTraceServiceRequest()
    straggler.CopyFrom(request)
    for n, span in enumerate(spans_in(straggler), start=1):
        span.span_id = (0xA0 + n).to_bytes(8, "big")  # new spans, not a retry

    partial = _send_mixed(server, transport, straggler)

    assert (partial.rejected_spans, partial.error_message) == (
        6,
        "6 spans dropped (late): their trace was already evaluated",
    )
    assert server.sample("toolwatch_spans_dropped_total", {"reason": "late"}) == 6


def test_a_trace_forgotten_for_the_remembered_cap_is_counted_and_no_longer_late(
    start_server: StartServer,
) -> None:
    """Past assembly.max_remembered_traces the oldest evaluated trace's id is forgotten
    before its late window passed: /metrics says so, and a straggler of that trace is taken
    as a new trace (no longer late), while one of the trace remembered still is."""
    server = start_server(assembly__max_remembered_traces=1, **QUIET)
    first, second = refund_request(), refund_request()
    assert server.sample("toolwatch_remembered_trace_evictions_total") == 0
    for request in (first, second):
        assert export_grpc(server, request) == ExportTraceServiceResponse()
        server.settle()
    assert server.sample("toolwatch_remembered_trace_evictions_total") == 1
    assert server.sample("toolwatch_remembered_traces") == 1

    for request in (first, second):
        for n, span in enumerate(spans_in(request), start=1):
            span.span_id = (0xA0 + n).to_bytes(8, "big")
    assert export_grpc(server, first) == ExportTraceServiceResponse()
    assert export_grpc(server, second).partial_success.rejected_spans == 6
    assert server.sample("toolwatch_spans_dropped_total", {"reason": "late"}) == 6
    assert server.sample("toolwatch_buffered_spans") == 6


def _two_runs(spoil: Callable[[dict[str, Any]], None]) -> tuple[bytes, str]:
    """An OTLP/JSON request of two resources, each a refund run, the first spoiled by
    ``spoil``; and the trace id (hex) of the second."""
    bad, good = refund_request(), refund_request()
    document = to_otlp_json(bad)
    spoil(document["resourceSpans"][0])
    document["resourceSpans"].extend(to_otlp_json(good)["resourceSpans"])
    return json.dumps(document).encode(), trace_hex(good)


def _attribute_value_a_string(resource_spans: dict[str, Any]) -> None:
    resource_spans["resource"]["attributes"].append({"key": "deployment", "value": "prod"})


def _attributes_not_an_array(resource_spans: dict[str, Any]) -> None:
    resource_spans["resource"]["attributes"] = "service.name=refund-agent"


def _scope_not_an_object(resource_spans: dict[str, Any]) -> None:
    resource_spans["scopeSpans"][0]["scope"] = "opentelemetry.instrumentation.openai"


@pytest.mark.parametrize(
    ("spoil", "said"),
    [
        (_attribute_value_a_string, "resource cannot be parsed at attributes[5].value: a string"),
        (_attributes_not_an_array, "resource cannot be parsed at attributes: a string is not an"),
        (_scope_not_an_object, 'scope cannot be parsed: "opentelemetry.instrumentation.openai"'),
    ],
)
def test_a_json_resource_or_scope_of_the_wrong_shape_costs_its_own_spans(
    start_server: StartServer, spoil: Callable[[dict[str, Any]], None], said: str
) -> None:
    """Was: a resource attribute whose ``value`` is a string instead of an AnyValue object,
    or ``attributes`` that is no array, refused the whole request 400 (a fault outside the
    spans), which OTLP forbids the client to retry: a Collector batching several services'
    spans lost all of them for one service's bad resource, where one whose ``intValue`` is
    ``"abc"`` cost its own spans. Now: the same, its six spans rejected
    (``malformed_span``), named with the field, the value's kind and the fault."""
    server = start_server(**QUIET)
    body, kept_trace = _two_runs(spoil)

    partial = ok_response(post(server, body, JSON)).partial_success

    assert partial.rejected_spans == 6
    first = "resourceSpans[0].scopeSpans[0].spans[0]"
    assert partial.error_message.startswith(f"6 spans rejected; {first}: its {said}")
    assert server.sample("toolwatch_spans_rejected_total", {"reason": "malformed_span"}) == 6
    server.settle()
    assert sent_calls(server) == [(kept_trace, REFUND_CALLS, True)]


def _length_delimited(number: int, payload: bytes) -> bytes:
    head = bytearray([number << 3 | 2])
    length = len(payload)
    while length >= 0x80:
        head.append(length & 0x7F | 0x80)
        length >>= 7
    head.append(length)
    return bytes(head) + payload


#: A ``schema_url`` (field 3 of ResourceSpans and of ScopeSpans) that is not UTF-8, which
#: proto3 requires of a string: protobuf refuses the message holding it.
_BAD_SCHEMA_URL = _length_delimited(3, b"\xff\xfe")


def _bad_schema_url_then_a_good_run(where: str) -> tuple[bytes, str]:
    """A protobuf request of two resources, each a refund run, the first's ResourceSpans
    (``where`` "resource") or ScopeSpans ("scope") given a schema_url that is not UTF-8;
    and the trace id (hex) of the second run."""
    bad, good = refund_request(), refund_request()
    resource_spans = bad.resource_spans[0]
    if where == "resource":
        first = resource_spans.SerializeToString() + _BAD_SCHEMA_URL
    else:
        (scope_spans,) = resource_spans.scope_spans
        first = _length_delimited(1, resource_spans.resource.SerializeToString())
        first += _length_delimited(2, scope_spans.SerializeToString() + _BAD_SCHEMA_URL)
    second = good.resource_spans[0].SerializeToString()
    return _length_delimited(1, first) + _length_delimited(1, second), trace_hex(good)


@pytest.mark.parametrize("sift", ["compiled", "python"])
@pytest.mark.parametrize("where", ["resource", "scope"])
@pytest.mark.parametrize("transport", ["grpc", "http-protobuf"])
def test_a_schema_url_protobuf_cannot_parse_costs_its_own_spans(
    start_server: StartServer,
    monkeypatch: pytest.MonkeyPatch,
    transport: str,
    where: str,
    sift: str,
) -> None:
    """Was: a ResourceSpans' or ScopeSpans' ``schema_url`` that is not UTF-8 refused the
    whole request (400 / INVALID_ARGUMENT), every other resource's spans with it, where a
    resource protobuf cannot parse (an attribute key that is not UTF-8) cost its own spans
    (``protobuf_pieces``). Now: the same, whichever reads the request protobuf refuses (the
    compiled sift, or ``salvage``)."""
    if sift == "python":
        monkeypatch.setattr(scan, "_SIFT", None)
    elif scan._SIFT is None:
        pytest.skip(scan.COMPILED_UNAVAILABLE)
    server = start_server(**QUIET)
    body, kept_trace = _bad_schema_url_then_a_good_run(where)

    if transport == "grpc":
        partial = export_grpc(server, body).partial_success
    else:
        partial = ok_response(post(server, body)).partial_success

    assert partial.rejected_spans == 6
    said = f"resource_spans[0].scope_spans[0].spans[0]: protobuf cannot parse its {where}_spans'"
    assert partial.error_message.startswith(f"6 spans rejected; {said} schema_url or unknown")
    assert server.sample("toolwatch_spans_rejected_total", {"reason": "malformed_span"}) == 6
    server.settle()
    assert sent_calls(server) == [(kept_trace, REFUND_CALLS, True)]


@pytest.mark.parametrize("times_as_numbers", [False, True])
def test_otlp_json_request_round_trips(start_server: StartServer, times_as_numbers: bool) -> None:
    server = start_server(**QUIET)
    request = refund_request()
    document = to_otlp_json(request, times_as_numbers)
    span = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert isinstance(span["kind"], int)
    assert isinstance(span["startTimeUnixNano"], int if times_as_numbers else str)
    document["futureTopLevel"] = {"x": 1}  # OTLP/JSON: unknown fields MUST be ignored
    document["resourceSpans"][0]["futureField"] = [1, 2]
    span["futureSpanField"] = "ignored"

    answer = post(server, json.dumps(document).encode(), JSON)

    assert answer.content_type == JSON
    assert json.loads(answer.body) == {}
    server.settle()
    (trace,) = server.tooltraces()
    assert trace["trace_id"] == trace_hex(request) == span["traceId"].lower()
    assert [c["tool_name"] for c in trace["calls"]] == REFUND_CALLS
    assert trace["start_ns"] == min(s.start_time_unix_nano for s in spans_in(request))


def test_otlp_json_ids_are_hex_not_base64(start_server: StartServer) -> None:
    server = start_server()
    document = to_otlp_json(refund_request())
    span = document["resourceSpans"][0]["scopeSpans"][0]["spans"][2]
    span["traceId"] = base64.b64encode(bytes(range(1, 17))).decode()  # proto3 JSON's form

    answer = post(server, json.dumps(document).encode(), JSON)

    # That span alone is rejected (partial success), as a protobuf span with a bad id is:
    # a 400 would lose the others, and OTLP forbids retrying it.
    partial = ok_response(answer).partial_success
    assert partial.rejected_spans == 1
    assert partial.error_message == (
        "1 span rejected; resourceSpans[0].scopeSpans[0].spans[2]: traceId"
        f' "{span["traceId"]}" is not hex'
    )
    assert server.sample("toolwatch_spans_rejected_total", {"reason": "invalid_trace_id"}) == 1


GARBAGE = b"\x0a\xff\xff\xff\xff\x0f"  # field 1, length-delimited, length past the end


def test_malformed_protobuf_over_http_is_400_then_serving(start_server: StartServer) -> None:
    server = start_server(**QUIET)
    answer = post(server, GARBAGE)

    assert answer.status == 400
    status = error_status(answer)
    assert status.message.startswith("body is not a valid ExportTraceServiceRequest")
    assert bad_data(status) == [("body", status.message)]

    request = refund_request()
    assert ok_response(post(server, request.SerializeToString())) == ExportTraceServiceResponse()
    server.settle()
    assert sent_calls(server) == [(trace_hex(request), REFUND_CALLS, True)]


def test_malformed_protobuf_over_grpc_is_invalid_argument_then_serving(
    start_server: StartServer,
) -> None:
    server = start_server(**QUIET)
    with pytest.raises(grpc.RpcError) as raised:
        export_grpc(server, GARBAGE)

    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    message = raised.value.details()
    assert message.startswith("body is not a valid ExportTraceServiceRequest")
    trailers = dict(raised.value.trailing_metadata())
    status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    assert status.message == message
    assert bad_data(status) == [("body", message)]

    request = refund_request()
    assert export_grpc(server, request) == ExportTraceServiceResponse()
    server.settle()
    assert sent_calls(server) == [(trace_hex(request), REFUND_CALLS, True)]
