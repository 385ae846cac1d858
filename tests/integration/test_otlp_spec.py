"""The OTLP receivers against the OTLP specification (opentelemetry-proto
``docs/specification.md``), through real gRPC and HTTP clients and a real server.

Sections cited: OTLP/gRPC and OTLP/HTTP "Full Success", "Partial Success", "Failures",
"Throttling", "OTLP/gRPC Request" (message size), "OTLP/HTTP Request" (size after
decompression, gzip) and "JSON Protobuf Encoding".
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip
import http.client
import json
import logging
import socket
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from email.message import Message
from typing import Any

import aiohttp.web_protocol
import grpc
import pytest
from aiohttp.http_parser import HttpRequestParserPy
from google.protobuf import duration_pb2, json_format
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcExporter,
)
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpExporter,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.trace.export import SpanExportResult

from bench import json_memory
from tests.integration import agents
from tests.integration.conftest import RunningServer, errors_logged, until
from toolwatch.bearer_tokens import HEALTH_CHECK
from toolwatch.ingest import scan
from toolwatch.ingest.grpc_health import MAX_READ_SECONDS, MAX_WAITING, READ_TURNS

StartServer = Callable[..., RunningServer]

EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
TRACE_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
MIB = 2**20
REFUND_CALLS = ["lookup_order", "issue_refund"]
# The harness's background ticker must not race ``settle``: engine ticks only when told.
QUIET = {"assembly__tick_seconds": 10}


# --- clients --------------------------------------------------------------------------------


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    headers: Message
    body: bytes

    @property
    def content_type(self) -> str:
        """The header exactly, parameters included: OTLP asks for the request's own."""
        return str(self.headers["Content-Type"])


def post(
    server: RunningServer, body: bytes, content_type: str = PROTOBUF, encoding: str | None = None
) -> HttpAnswer:
    headers = {"Content-Type": content_type}
    if encoding is not None:
        headers["Content-Encoding"] = encoding
    url = f"http://{server.address('http')}/v1/traces"
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return HttpAnswer(response.status, response.headers, response.read())
    except urllib.error.HTTPError as error:
        with error:
            return HttpAnswer(error.code, error.headers, error.read())


def error_status(answer: HttpAnswer) -> status_pb2.Status:
    """OTLP/HTTP "Failures": every 4xx/5xx body is a ``google.rpc.Status``."""
    if answer.content_type == JSON:
        return json_format.Parse(answer.body, status_pb2.Status())
    assert answer.content_type == PROTOBUF
    return status_pb2.Status.FromString(answer.body)


def bad_data(status: status_pb2.Status) -> list[tuple[str, str]]:
    """OTLP "Bad Data": INVALID_ARGUMENT, and a BadRequest in ``Status.details`` describing
    the bad data; its ``(field, description)`` violations."""
    assert status.code == code_pb2.INVALID_ARGUMENT
    (detail,) = status.details
    bad_request = error_details_pb2.BadRequest()
    assert detail.Unpack(bad_request)
    return [(v.field, v.description) for v in bad_request.field_violations]


def ok_response(answer: HttpAnswer) -> ExportTraceServiceResponse:
    """The 200 body, decoded per its Content-Type, which must be the request's."""
    assert answer.status == 200, answer
    if answer.content_type == JSON:
        return json_format.Parse(answer.body, ExportTraceServiceResponse())
    assert answer.content_type == PROTOBUF
    return ExportTraceServiceResponse.FromString(answer.body)


def grpc_channel(
    server: RunningServer, compression: grpc.Compression | None = None
) -> grpc.Channel:
    return grpc.insecure_channel(server.address("grpc"), compression=compression)


def export_grpc(
    server: RunningServer,
    request: ExportTraceServiceRequest | bytes,
    compression: grpc.Compression | None = None,
) -> ExportTraceServiceResponse:
    """One unary Export; raw ``bytes`` are sent as they are (for malformed bodies)."""
    body = request if isinstance(request, bytes) else request.SerializeToString()
    with grpc_channel(server, compression) as channel:
        export = channel.unary_unary(
            EXPORT_METHOD, response_deserializer=ExportTraceServiceResponse.FromString
        )
        response: ExportTraceServiceResponse = export(body, timeout=10)
        return response


# --- requests -------------------------------------------------------------------------------


def refund_request() -> ExportTraceServiceRequest:
    """A fresh (new ids) six-span refund run as the SDK's OTLP encoder writes it."""
    return encode_spans(agents.record(agents.refund_run(), "genai"))


def spans_in(request: ExportTraceServiceRequest) -> Iterator[Span]:
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            yield from scope_spans.spans


def trace_hex(request: ExportTraceServiceRequest) -> str:
    return next(spans_in(request)).trace_id.hex()


def with_bad_spans(request: ExportTraceServiceRequest) -> ExportTraceServiceRequest:
    """``request`` plus four spans whose ids break trace.proto's rules, appended in order:
    short trace id, short span id, all-zero trace id, all-zero span id."""
    mixed = ExportTraceServiceRequest()
    mixed.CopyFrom(request)
    scope = mixed.resource_spans[0].scope_spans[0]
    template = scope.spans[0]
    for field, value in (
        ("trace_id", b"\x01" * 15),
        ("span_id", b"\x02" * 4),
        ("trace_id", bytes(16)),
        ("span_id", bytes(8)),
    ):
        bad = scope.spans.add()
        bad.CopyFrom(template)
        setattr(bad, field, value)
    return mixed


def to_otlp_json(request: ExportTraceServiceRequest, times_as_numbers: bool = False) -> Any:
    """OTLP/JSON as the spec writes it: lowerCamelCase keys, integer enums, upper-case hex
    ids (hex is case-insensitive), int64 as strings or, if asked, as numbers."""
    document = json_format.MessageToDict(request, use_integers_for_enums=True)
    for resource_spans in document["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex().upper()
                if times_as_numbers:
                    for key in ("startTimeUnixNano", "endTimeUnixNano"):
                        span[key] = int(span[key])
    return document


def sent_calls(server: RunningServer) -> list[tuple[str, list[str], bool]]:
    """(trace id, tool names, complete) of every ToolTrace dumped so far."""
    return [
        (t["trace_id"], [c["tool_name"] for c in t["calls"]], t["complete"])
        for t in server.tooltraces()
    ]


# --- full success ---------------------------------------------------------------------------


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


# --- partial success ------------------------------------------------------------------------


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


# --- size limits ----------------------------------------------------------------------------


def test_grpc_message_over_the_limit_is_resource_exhausted(start_server: StartServer) -> None:
    """gRPC refuses it before the handler reads it, with no RetryInfo: a Collector drops the
    batch (the Python SDK retries it, in vain, until its export timeout). The handler sees a
    cancelled call, counted ``aborted`` (as a client's own cancellation is), which
    ToolwatchExportsAborted watches (test_deploy_artifacts)."""
    server = start_server(ingest__max_request_bytes=2048)
    request = refund_request()
    assert request.ByteSize() > 2048

    with pytest.raises(grpc.RpcError) as raised:
        export_grpc(server, request)
    assert raised.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert server.sample("toolwatch_spans_received_total", {"transport": "grpc"}) == 0
    aborted = {"transport": "grpc", "outcome": "aborted"}
    requests = "toolwatch_export_request_duration_seconds_count"
    assert until(lambda: server.sample(requests, aborted) == 1)


def test_grpc_limit_applies_after_decompression(start_server: StartServer) -> None:
    server = start_server(ingest__max_request_bytes=64 * 1024)
    request = refund_request()
    span = next(spans_in(request))
    span.name = "x" * (256 * 1024)  # compresses to a few hundred bytes
    assert len(gzip.compress(request.SerializeToString())) < 64 * 1024

    with pytest.raises(grpc.RpcError) as raised:
        export_grpc(server, request, grpc.Compression.Gzip)
    assert raised.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED


def test_http_body_over_the_limit_is_413(start_server: StartServer) -> None:
    server = start_server(ingest__max_request_bytes=MIB)
    answer = post(server, b"\x00" * (MIB + 4096))
    assert answer.status == 413
    assert "exceeds 1048576 bytes" in error_status(answer).message
    assert error_status(answer).code == code_pb2.RESOURCE_EXHAUSTED
    assert server.sample("toolwatch_spans_received_total", {"transport": "http"}) == 0


def test_otlp_json_dense_in_values_is_read_unless_the_largest_body_could_not_hold_them(
    start_server: StartServer,
) -> None:
    """A body may hold one comma (a JSON value after an object's or array's first) per 40
    bytes of the largest body (ingest.max_request_bytes), commas in strings included: a small
    dense body is valid and read; one past the bound is a limit (413), not bad data."""
    request = refund_request()
    document = to_otlp_json(request)
    span = document["resourceSpans"][0]["scopeSpans"][0]["spans"][2]
    result = json.dumps([[i, i] for i in range(1_100)])  # a tool result of 2,199 commas
    span["attributes"].append({"key": "tool.result", "value": {"stringValue": result}})
    body = json.dumps(document).encode()
    server = start_server(ingest__max_request_bytes=MIB, **QUIET)
    assert ok_response(post(server, body, JSON)) == ExportTraceServiceResponse()
    tight = start_server(ingest__max_request_bytes=40 * 2_200, **QUIET)  # 2,200 at most
    answer = post(tight, body, JSON)
    assert answer.status == 413
    status = error_status(answer)
    assert status.code == code_pb2.RESOURCE_EXHAUSTED
    assert status.message == (
        f"body holds up to {body.count(b',')} JSON values after the first of an object or"
        " array (commas), more than the 2200 a body may (one per 40 bytes of the largest body:"
        " decoded, each holds up to 270 bytes): send protobuf or smaller batches"
    )


def test_an_otlp_json_body_may_be_as_large_as_the_limit(start_server: StartServer) -> None:
    """Decoded a piece at a time, a JSON body of any size up to ingest.max_request_bytes fits
    what the memory formula budgets for the request being decoded: that is its cap, as
    protobuf's (it was a quarter of it)."""
    request = refund_request()
    body = json.dumps(to_otlp_json(request)).encode()
    server = start_server(ingest__max_request_bytes=len(body), **QUIET)
    assert ok_response(post(server, body, JSON)) == ExportTraceServiceResponse()
    assert server.sample("toolwatch_spans_received_total", {"transport": "http"}) == 6
    smaller = start_server(ingest__max_request_bytes=len(body) - 1, **QUIET)
    answer = post(smaller, body, JSON)
    assert answer.status == 413
    assert error_status(answer).message.endswith(f"exceeds {len(body) - 1} bytes")


def test_a_json_batch_of_agent_spans_beyond_the_old_quarter_is_accepted_whole(
    start_server: StartServer,
) -> None:
    """The OpenTelemetry JavaScript SDK exports OTLP/JSON, up to 512 spans a batch, and agent
    spans carry prompts, messages and tool results of 10-40 KB: an 8 MiB batch (the recorded
    captures' spans, each grown so) was answered 413 past 5 MiB, a quarter of the default
    cap, and lost (OTLP clients do not retry a 413). With the default configuration every
    span is now received, and every one built into its run."""
    body = json_memory.agent(8 * MIB)
    runs = json.loads(body)["resourceSpans"]
    spans = sum(len(scope["spans"]) for run in runs for scope in run["scopeSpans"])
    assert len(body) > 8 * MIB and spans > 250
    server = start_server(**QUIET)

    assert ok_response(post(server, body, JSON)) == ExportTraceServiceResponse()
    assert server.sample("toolwatch_spans_received_total", {"transport": "http"}) == spans
    server.settle()
    assert server.sample("toolwatch_spans_built_total") == spans


@pytest.mark.parametrize("builder", ["empty_resources", "strings", "keys"])
def test_a_json_body_dense_in_values_is_still_refused_at_that_size(
    start_server: StartServer, builder: str
) -> None:
    """The same 8 MiB, of empty objects, short strings or keys where toolwatch reads none,
    would decode to 15 to 25 times its size: refused unparsed, 413."""
    body = json_memory.BUILDERS[builder](8 * MIB)
    server = start_server(**QUIET)

    answer = post(server, body, JSON)

    assert answer.status == 413
    status = error_status(answer)
    assert status.code == code_pb2.RESOURCE_EXHAUSTED
    assert status.message.startswith(f"body holds up to {body.count(b',')} JSON values ")
    assert "more than the 524288 a body may" in status.message
    assert server.sample("toolwatch_spans_received_total", {"transport": "http"}) == 0


def _gzip_of_zeros(size: int) -> bytes:
    """Gzip of ``size`` zero bytes, built a chunk at a time: the test never holds it whole."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = bytes(MIB)
    parts = [compressor.compress(chunk) for _ in range(size // MIB)]
    return b"".join([*parts, compressor.flush()])


def peak_rss_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1])


def peak_rss_growth_kib(action: Callable[[], object]) -> int:
    """How far this process's peak RSS rose above its current RSS while ``action`` ran.
    Linux proc(5), /proc/pid/clear_refs: writing 5 resets the peak (VmHWM) to the current RSS.
    """
    with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
        refs.write("5")
    before = peak_rss_kib()
    action()
    return peak_rss_kib() - before


def test_gzip_bomb_is_413_without_inflating_it(start_server: StartServer) -> None:
    server = start_server(ingest__max_request_bytes=MIB)
    bomb = _gzip_of_zeros(50 * MIB)
    assert len(bomb) < MIB  # passes the cap before decompression
    # The probe sees a 50 MB inflation in this process (the server runs in it)...
    assert peak_rss_growth_kib(lambda: zlib.decompress(bomb, 16 + zlib.MAX_WBITS)) > 45 * 1024

    answers: list[HttpAnswer] = []
    grown_kib = peak_rss_growth_kib(lambda: answers.append(post(server, bomb, encoding="gzip")))

    (answer,) = answers
    assert answer.status == 413
    assert "decompressed body exceeds 1048576 bytes" in error_status(answer).message
    assert grown_kib < 20 * 1024  # ...and none while the server refuses the bomb


# --- encodings ------------------------------------------------------------------------------


def test_grpc_gzip_request_is_accepted(start_server: StartServer) -> None:
    server = start_server(**QUIET)
    request = refund_request()
    response = export_grpc(server, request, grpc.Compression.Gzip)
    assert not response.HasField("partial_success")
    server.settle()
    assert sent_calls(server) == [(trace_hex(request), REFUND_CALLS, True)]


@pytest.mark.parametrize("content_type", [PROTOBUF, JSON])
def test_http_gzip_request_is_accepted(start_server: StartServer, content_type: str) -> None:
    server = start_server(**QUIET)
    request = refund_request()
    body = request.SerializeToString()
    if content_type == JSON:
        body = json.dumps(to_otlp_json(request)).encode()
    answer = post(server, gzip.compress(body), content_type, encoding="gzip")
    assert not ok_response(answer).HasField("partial_success")
    assert answer.content_type == content_type
    server.settle()
    assert sent_calls(server) == [(trace_hex(request), REFUND_CALLS, True)]


@pytest.mark.parametrize("compression", list(Compression))
def test_the_sdks_http_exporter_delivers_with_every_compression(
    start_server: StartServer, compression: Compression
) -> None:
    server = start_server(**QUIET)
    spans = agents.record(agents.refund_run(), "genai")
    endpoint = f"http://{server.address('http')}/v1/traces"
    exporter = HttpExporter(endpoint=endpoint, timeout=10, compression=compression)
    try:
        assert exporter.export(spans) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    server.settle()
    assert [calls for _, calls, _ in sent_calls(server)] == [REFUND_CALLS]


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [
        ("deflate", zlib.compress),  # RFC 1950, what RFC 9110 calls deflate
        ("deflate", lambda data: zlib.compress(data, wbits=-zlib.MAX_WBITS)),  # bare RFC 1951
        ("x-gzip", gzip.compress),
        ("GZip", gzip.compress),
    ],
)
def test_http_deflate_and_gzip_aliases_are_accepted(
    start_server: StartServer, encoding: str, compress: Callable[[bytes], bytes]
) -> None:
    server = start_server(**QUIET)
    request = refund_request()
    answer = post(server, compress(request.SerializeToString()), encoding=encoding)
    assert not ok_response(answer).HasField("partial_success")
    server.settle()
    assert sent_calls(server) == [(trace_hex(request), REFUND_CALLS, True)]


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (zlib.compress(b"x" * 100)[:-6], "body is not valid deflate: the stream is truncated"),
        (zlib.compress(b"") + b"more", "body is not valid deflate: data after the stream"),
        (b"\x78\x9c\xff\xff", "body is not valid deflate: Error -3"),
    ],
)
def test_a_bad_deflate_body_is_400(start_server: StartServer, body: bytes, said: str) -> None:
    server = start_server()
    answer = post(server, body, encoding="deflate")
    assert answer.status == 400
    assert error_status(answer).message.startswith(said)


def test_a_deflate_bomb_is_413(start_server: StartServer) -> None:
    server = start_server(ingest__max_request_bytes=MIB)
    answer = post(server, zlib.compress(bytes(50 * MIB)), encoding="deflate")
    assert answer.status == 413
    assert error_status(answer).message == "decompressed body exceeds 1048576 bytes"


@pytest.mark.parametrize(
    ("method", "path", "status", "code", "allow"),
    [
        ("GET", "/v1/traces", 405, code_pb2.UNIMPLEMENTED, "POST"),
        ("POST", "/v1/metrics", 404, code_pb2.NOT_FOUND, None),
    ],
)
def test_other_paths_and_methods_are_answered_with_a_status(
    start_server: StartServer, method: str, path: str, status: int, code: int, allow: str | None
) -> None:
    server = start_server()
    url = f"http://{server.address('http')}{path}"
    request = urllib.request.Request(url, data=b"" if method == "POST" else None, method=method)
    request.add_header("Content-Type", PROTOBUF)
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, timeout=10)
    with raised.value as error:
        answer = HttpAnswer(error.code, error.headers, error.read())
    assert (answer.status, answer.content_type) == (status, PROTOBUF)
    assert answer.headers["Allow"] == allow
    body = error_status(answer)
    assert body.code == code
    assert body.message == (
        f"{method} {path}: {raised.value.reason}; OTLP traces are sent as POST /v1/traces"
    )


def test_http_gzip_body_of_several_members_is_read_to_the_end(start_server: StartServer) -> None:
    # RFC 1952: members follow one another; two serialized requests one after the other are
    # one request with both runs (protobuf merges repeated fields).
    server = start_server(**QUIET)
    first, second = refund_request(), refund_request()
    body = gzip.compress(first.SerializeToString()) + gzip.compress(second.SerializeToString())
    answer = post(server, body, encoding="gzip")
    assert not ok_response(answer).HasField("partial_success")
    server.settle()
    expected = [(trace_hex(r), REFUND_CALLS, True) for r in (first, second)]
    assert sorted(sent_calls(server)) == sorted(expected)
    assert server.sample("toolwatch_spans_received_total", {"transport": "http"}) == 12


@pytest.mark.parametrize(
    ("tail", "status", "said"),
    [
        (b"\x00\x01garbage", 400, "body is not valid gzip (member 2): "),
        (gzip.compress(bytes(600_000)), 413, "decompressed body exceeds 1048576 bytes"),
    ],
)
def test_http_gzip_members_after_the_first_are_checked_too(
    start_server: StartServer, tail: bytes, status: int, said: str
) -> None:
    server = start_server(ingest__max_request_bytes=MIB)
    head = gzip.compress(bytes(600_000)) if status == 413 else gzip.compress(b"")
    answer = post(server, head + tail, encoding="gzip")
    assert answer.status == status
    assert said in error_status(answer).message
    assert server.sample("toolwatch_spans_received_total", {"transport": "http"}) == 0


@pytest.mark.parametrize(
    ("content_type", "encoding", "status", "said"),
    [
        (
            PROTOBUF,
            "br",
            415,
            "content encoding 'br' is not one of gzip, deflate, zlib, zstd, identity",
        ),
        ("text/plain", None, 415, "content type 'text/plain' is not"),
        ("", None, 415, "no content type: send application/x-protobuf or application/json"),
        (PROTOBUF, "gzip", 400, "body is not valid gzip"),
    ],
)
def test_unusable_http_body_is_refused(
    start_server: StartServer, content_type: str, encoding: str | None, status: int, said: str
) -> None:
    server = start_server()
    answer = post(server, refund_request().SerializeToString(), content_type, encoding)
    assert answer.status == status
    body = error_status(answer)
    assert said in body.message
    if status == 400:
        assert bad_data(body) == [("body", body.message)]
    else:
        assert (body.code, body.details) == (code_pb2.INVALID_ARGUMENT, [])
    # RFC 7694 §3: a 415 for the request's content coding says which codings are accepted.
    accepted = answer.headers.get("Accept-Encoding")
    assert accepted == ("gzip, deflate, zlib, zstd, identity" if encoding == "br" else None)
    assert server.sample("toolwatch_spans_received_total", {"transport": "http"}) == 0


# --- OTLP/JSON ------------------------------------------------------------------------------


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


# --- malformed bodies -----------------------------------------------------------------------

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


# --- throttling -----------------------------------------------------------------------------

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


class HeldCall:
    """An Export call (or a call of ``method``, answered with ``response``) open on the wire
    whose request message is not sent until ``release``: the server holds a request slot for
    it meanwhile (``ingest.max_concurrent_requests``)."""

    def __init__(
        self,
        server: RunningServer,
        messages: list[bytes],
        method: str = EXPORT_METHOD,
        response: Callable[[bytes], Any] = ExportTraceServiceResponse.FromString,
    ) -> None:
        self._channel = grpc_channel(server)
        self._go = threading.Event()
        self._messages = messages
        call = self._channel.stream_unary(method, response_deserializer=response)
        self.future = call.future(self._requests(), timeout=30)

    def _requests(self) -> Iterator[bytes]:
        self._go.wait(30)
        yield from self._messages

    def cancel(self) -> None:
        """Abandon the call before sending anything, as a client that gives up does."""
        self.future.cancel()
        self._go.set()
        self._channel.close()

    def release(self) -> Any:
        """Send the messages, end the call; its response, or the error it ended with."""
        self._go.set()
        try:
            return self.future.result(timeout=30)
        except grpc.RpcError as error:
            return error
        finally:
            self._channel.close()


def in_flight(server: RunningServer) -> float:
    return server.sample("toolwatch_requests_in_flight")


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


REQUESTS_COUNTED = "toolwatch_export_request_duration_seconds_count"


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


# Real network time: the read timeout is the loop's clock, so these wait a fraction of a second.
SLOW = {"ingest__max_concurrent_requests": 1, "ingest__read_timeout_seconds": 0.2, **QUIET}


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


HEADERS = {"Content-Type": PROTOBUF}


def stopping(server: RunningServer, grace: float) -> Future[None]:
    """``App.stop(grace)`` (what SIGTERM runs) begun on the server's loop."""
    return asyncio.run_coroutine_threadsafe(server.app.stop(grace=grace), server.loop)


def ready(server: RunningServer) -> bool:
    """``/readyz`` answers 200: false from the moment a shutdown begins."""
    url = f"http://{server.address('metrics')}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return bool(answer.status == 200)
    except urllib.error.HTTPError as error:
        with error:
            return False


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
    with _stalled_body(server) as client:
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


# --- health ---------------------------------------------------------------------------------


def test_grpc_health_service_answers_serving(start_server: StartServer) -> None:
    server = start_server()
    with grpc_channel(server) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        statuses = [
            health.Check(health_pb2.HealthCheckRequest(service=name), timeout=10).status
            for name in ("", TRACE_SERVICE)
        ]
        with pytest.raises(grpc.RpcError) as unknown:
            health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=10)
    assert statuses == [health_pb2.HealthCheckResponse.SERVING] * 2
    assert unknown.value.code() is grpc.StatusCode.NOT_FOUND


def health_status(server: RunningServer) -> Any:
    with grpc_channel(server) as channel:
        check = health_pb2_grpc.HealthStub(channel).Check
        return check(health_pb2.HealthCheckRequest(), timeout=10).status


def test_a_health_check_larger_than_a_service_name_is_refused_undecoded(
    start_server: StartServer,
) -> None:
    """The listener takes Export bodies of ``max_request_bytes``; a HealthCheckRequest is a
    service name (grpc_health.MAX_REQUEST_BYTES)."""
    server = start_server(**QUIET)
    with grpc_channel(server) as channel:
        check = health_pb2_grpc.HealthStub(channel).Check
        with pytest.raises(grpc.RpcError) as refused:
            check(health_pb2.HealthCheckRequest(service="x" * 2048), timeout=10)
    assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert refused.value.details() == "a HealthCheckRequest is at most 1024 bytes"
    assert health_status(server) == health_pb2.HealthCheckResponse.SERVING


def test_a_health_check_that_never_sends_its_request_gives_its_turn_back(
    start_server: StartServer,
) -> None:
    """Health requests are read in a few turns: a check whose request does not come is
    answered at the read timeout, as an Export is, and its turn given back."""
    server = start_server(**SLOW)
    stalled = HeldCall(server, [], HEALTH_CHECK, health_pb2.HealthCheckResponse.FromString)

    status = health_status(server)  # read in another turn and answered

    error = stalled.future.exception(timeout=10)  # the server ends it; the client sent nothing
    stalled.cancel()
    assert isinstance(error, grpc.RpcError)
    assert error.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    assert error.details() == "the request was not received within 0.2 s"
    assert status == health_pb2.HealthCheckResponse.SERVING


def test_a_health_check_is_waited_for_a_fraction_of_a_probes_timeout_at_most(
    start_server: StartServer,
) -> None:
    """With the default 30 s read timeout, a check that sends nothing holds its turn (and
    delays the checks queued behind it) for 0.2 s, not 30."""
    server = start_server()
    stalled = HeldCall(server, [], HEALTH_CHECK, health_pb2.HealthCheckResponse.FromString)

    status = health_status(server)

    error = stalled.future.exception(timeout=10)
    stalled.cancel()
    assert isinstance(error, grpc.RpcError)
    assert error.details() == f"the request was not received within {MAX_READ_SECONDS:g} s"
    assert status == health_pb2.HealthCheckResponse.SERVING


KUBELET_PROBE_TIMEOUT = 1.0  # a gRPC probe's default timeoutSeconds


def probe_behind_idle_checks(server: RunningServer, idle_calls: int) -> Any:
    """A kubelet-like probe (its request sent at once, 1 s deadline) made while
    ``idle_calls`` checks are open without sending their request: its status or error code."""
    idle = [
        HeldCall(server, [], HEALTH_CHECK, health_pb2.HealthCheckResponse.FromString)
        for _ in range(idle_calls)
    ]
    time.sleep(0.05)  # the calls reached the server: in a turn, or waiting for one
    try:
        with grpc_channel(server) as channel:
            check = health_pb2_grpc.HealthStub(channel).Check
            try:
                return check(health_pb2.HealthCheckRequest(), timeout=KUBELET_PROBE_TIMEOUT).status
            except grpc.RpcError as error:
                return error.code()
    finally:
        for call in idle:
            call.cancel()


def test_two_idle_health_calls_do_not_fail_a_kubelet_probe(start_server: StartServer) -> None:
    """With one read turn held up to 1 s, two checks sending nothing made the probe queued
    behind them miss kubelet's 1 s timeout (DEADLINE_EXCEEDED)."""
    server = start_server()
    status = probe_behind_idle_checks(server, 2)
    assert status == health_pb2.HealthCheckResponse.SERVING


def test_a_health_probe_behind_as_many_idle_checks_as_may_wait_is_answered_in_time(
    start_server: StartServer,
) -> None:
    """The most calls that may wait besides the probe, all sending nothing, hold the turns
    for (MAX_WAITING - READ_TURNS) / READ_TURNS * MAX_READ_SECONDS (0.6 s) before the probe
    is read: under kubelet's timeout."""
    assert (MAX_WAITING - READ_TURNS) / READ_TURNS * MAX_READ_SECONDS < KUBELET_PROBE_TIMEOUT
    server = start_server()
    status = probe_behind_idle_checks(server, MAX_WAITING - 1)
    assert status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/v1/traces"), ("POST", "/v1/metrics"), ("POST", "/v1/trace")]
)
def test_an_error_answer_keeps_the_connection_for_the_next_export(
    start_server: StartServer, method: str, path: str
) -> None:
    """OTLP clients keep their connection alive: a 404 or 405 (a mistyped path) must not
    close it, or the next export pipelined on it is lost."""
    server = start_server()
    host, port = server.address("http").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request(method, path, body=b"" if method == "POST" else None)
        wrong = connection.getresponse()
        wrong.read()
        assert (wrong.status, wrong.getheader("Connection")) in ((404, None), (405, None))
        sock = connection.sock
        connection.request("POST", "/v1/traces", body=b"", headers={"Content-Type": PROTOBUF})
        right = connection.getresponse()
        right.read()
        assert right.status == 200
        assert connection.sock is sock  # the same connection, not a new one
    finally:
        connection.close()


def test_a_connection_that_never_finishes_its_headers_is_closed(
    start_server: StartServer,
) -> None:
    """Slowloris: a client that opens connections and sends half a request head must not
    hold their sockets (aiohttp's own limit is an hour): closed at ingest.idle_timeout_seconds.
    Real time is the point of this test: 0.5 s."""
    server = start_server(ingest__idle_timeout_seconds=0.5)
    host, port = server.address("http").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as client:
        client.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n")
        assert client.recv(100) == b""  # closed by the server, before the 10 s timeout


def test_a_body_given_up_at_the_grace_logs_no_unhandled_error(
    start_server: StartServer, caplog: pytest.LogCaptureFixture
) -> None:
    """``InFlight.abandon`` leaves ReadAbandonedError set on aiohttp's payload. After the
    handler's 503, aiohttp's lingering read of the unread rest of the body calls
    ``payload.readany()``, which raises it: aiohttp logs 'Unhandled exception' at ERROR with
    a traceback (ProtocolErrorLog passes it on), once per body given up."""
    server = start_server(**QUIET)
    with _stalled_body(server) as client:
        with caplog.at_level(logging.DEBUG):
            stopping(server, grace=0.2).result(10)
        answer = client.recv(65536).decode("latin-1")

    assert answer.startswith("HTTP/1.1 503 Service Unavailable")
    aborted = {"transport": "http", "outcome": "aborted"}
    assert server.sample(REQUESTS_COUNTED, aborted) == 1
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [(r.name, r.getMessage(), r.exc_info and r.exc_info[0]) for r in errors]


@contextlib.contextmanager
def _stalled_body(server: RunningServer) -> Iterator[socket.socket]:
    """A connection whose OTLP/HTTP request announced 100,000 bytes and sent 10, in flight."""
    host, _, port = server.address("http").rpartition(":")
    with socket.create_connection((host, int(port)), timeout=10) as client:
        head = f"POST /v1/traces HTTP/1.1\r\nHost: {host}\r\nContent-Type: {PROTOBUF}\r\n"
        client.sendall(f"{head}Content-Length: 100000\r\n\r\n".encode() + b"\x0a" * 10)
        assert until(lambda: in_flight(server) == 1)
        yield client
