"""Fuzz both receivers of a real server: random bytes, random gzip and zstd (whole, cut short
or with a byte flipped), hostile but well-formed requests. Every answer is a success or a
client error (HTTP 200/400, gRPC OK or INVALID_ARGUMENT), never a server error (500, UNKNOWN,
INTERNAL); a valid request right after each one still succeeds; the process's resident
memory stays bounded throughout.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from google.rpc import status_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from tests.integration import agents
from tests.integration.conftest import RunningServer

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
EXAMPLES = 50
RSS_BOUND_BYTES = 200 * 2**20
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def resident_bytes() -> int:
    """This process's resident set size now (the server runs in it)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Client:
    """Raw requests to both receivers of one server, and the memory ceiling seen."""

    def __init__(self, server: RunningServer) -> None:
        self.server = server
        self.channel = grpc.insecure_channel(server.address("grpc"))
        self.export = self.channel.unary_unary(EXPORT)
        self.valid = encode_spans(agents.record(agents.refund_run(), "genai")).SerializeToString()
        self.rss_start = resident_bytes()
        self.rss_peak = self.rss_start

    def post(
        self, body: bytes, content_type: str, encoding: str | None = None
    ) -> tuple[int, bytes]:
        headers = {"Content-Type": content_type}
        if encoding is not None:
            headers["Content-Encoding"] = encoding
        url = f"http://{self.server.address('http')}/v1/traces"
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            with error:
                return error.code, error.read()

    def grpc(self, body: bytes) -> tuple[grpc.StatusCode, bytes | str]:
        try:
            return grpc.StatusCode.OK, self.export(body, timeout=30)
        except grpc.RpcError as error:
            return error.code(), error.details() or ""

    def still_serving(self) -> None:
        """A valid request over each transport succeeds; records memory."""
        assert self.grpc(self.valid)[0] is grpc.StatusCode.OK
        assert self.post(self.valid, PROTOBUF)[0] == 200
        self.rss_peak = max(self.rss_peak, resident_bytes())

    def assert_memory_bounded(self) -> None:
        assert self.rss_peak - self.rss_start < RSS_BOUND_BYTES


@pytest.fixture
def client(start_server: Callable[..., RunningServer]) -> Client:
    server = start_server(assembly__tick_seconds=10)  # nothing completes unless settled
    return Client(server)


# -- random bytes -----------------------------------------------------------------------------


def test_random_bytes_over_http_are_400_or_200_never_500(client: Client) -> None:
    @FUZZ
    @given(st.binary(max_size=4096), st.sampled_from([PROTOBUF, JSON]))
    def check(body: bytes, content_type: str) -> None:
        status, answer = client.post(body, content_type)
        assert status in (200, 400)
        if status == 400 and content_type == PROTOBUF:
            assert status_pb2.Status.FromString(answer).message  # the reason, in words
        if status == 200 and content_type == PROTOBUF:
            ExportTraceServiceResponse.FromString(answer)
        client.still_serving()

    check()
    client.assert_memory_bounded()


@pytest.mark.parametrize(
    ("encoding", "compress"), [("gzip", gzip.compress), ("zstd", zstd.compress)]
)
def test_random_compressed_bodies_over_http_are_400_or_200_never_500(
    client: Client, encoding: str, compress: Callable[[bytes], bytes]
) -> None:
    @FUZZ
    @given(
        st.binary(max_size=2048),
        st.sampled_from(["whole", "raw", "cut", "flipped"]),
        st.sampled_from([PROTOBUF, JSON]),
        st.data(),
    )
    def check(payload: bytes, damage: str, content_type: str, data: st.DataObject) -> None:
        body = bytearray(payload if damage == "raw" else compress(payload))  # raw: not compressed
        if damage == "cut":
            del body[data.draw(st.integers(0, len(body) - 1), label="cut at") :]
        if damage == "flipped":
            body[data.draw(st.integers(0, len(body) - 1), label="at")] ^= 0xFF
        status, answer = client.post(bytes(body), content_type, encoding=encoding)
        assert status in (200, 400)
        if status == 400 and content_type == PROTOBUF:
            assert status_pb2.Status.FromString(answer).message  # the reason, in words
        client.still_serving()

    check()
    client.assert_memory_bounded()


def test_random_bytes_over_grpc_are_invalid_argument_or_ok_never_internal(
    client: Client,
) -> None:
    @FUZZ
    @given(st.binary(max_size=4096))
    def check(body: bytes) -> None:
        code, answer = client.grpc(body)
        assert code in (grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT)
        if code is grpc.StatusCode.INVALID_ARGUMENT:
            assert "not a valid ExportTraceServiceRequest" in str(answer)
        client.still_serving()

    check()
    client.assert_memory_bounded()


# -- well-formed but hostile requests ---------------------------------------------------------


def _array(items: list[AnyValue]) -> AnyValue:
    value = AnyValue()
    value.array_value.values.extend(items)
    return value


_ANY_VALUES = st.recursive(
    st.one_of(
        st.builds(AnyValue, string_value=st.text(max_size=20)),
        st.builds(AnyValue, int_value=st.integers(-(2**63), 2**63 - 1)),
        st.builds(AnyValue, bytes_value=st.binary(max_size=8)),
        st.just(AnyValue()),
    ),
    lambda inner: st.lists(inner, max_size=4).map(_array),
    max_leaves=12,
)
_KEYS = st.sampled_from(
    [
        "gen_ai.operation.name",
        "gen_ai.tool.name",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        "gen_ai.output.messages",
        "openinference.span.kind",
        "input.value",
        "traceloop.entity.input",
    ]
)


@st.composite
def hostile_spans(draw: st.DrawFn) -> tuple[Span, bool]:
    """A span with ids of any length (its own parent, sometimes) and odd attributes; and
    whether the OTLP id rules accept it."""
    trace_id = draw(st.sampled_from([bytes(range(1, 17)), b"", b"\x01" * 15, bytes(16)]))
    span_id = draw(st.sampled_from([b"\x02" * 8, b"\x02" * 7, bytes(8), b""]))
    parent = draw(st.sampled_from([b"", span_id, b"\x03" * 8, b"\x03" * 5]))
    attributes = draw(st.lists(st.builds(KeyValue, key=_KEYS, value=_ANY_VALUES), max_size=5))
    span = Span(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent,
        name=draw(st.text(max_size=30)),
        start_time_unix_nano=draw(st.integers(0, 2**64 - 1)),
        end_time_unix_nano=draw(st.integers(0, 2**64 - 1)),
        attributes=attributes,
    )
    valid = (
        len(trace_id) == 16
        and trace_id != bytes(16)
        and len(span_id) == 8
        and span_id != bytes(8)
        and len(parent) in (0, 8)
    )
    return span, valid


def as_request(spans: list[tuple[Span, bool]]) -> ExportTraceServiceRequest:
    scope = ScopeSpans(spans=[span for span, _valid in spans])
    return ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[scope])])


def test_hostile_spans_are_accepted_or_counted_as_rejected_on_both_transports(
    client: Client,
) -> None:
    @FUZZ
    @given(st.lists(hostile_spans(), min_size=1, max_size=6))
    def check(spans: list[tuple[Span, bool]]) -> None:
        body = as_request(spans).SerializeToString()
        invalid = sum(not valid for _span, valid in spans)
        code, answer = client.grpc(body)
        assert code is grpc.StatusCode.OK
        assert isinstance(answer, bytes)
        over_grpc = ExportTraceServiceResponse.FromString(answer).partial_success
        status, http_answer = client.post(body, PROTOBUF)
        over_http = ExportTraceServiceResponse.FromString(http_answer).partial_success
        assert (status, over_grpc.rejected_spans, over_http.rejected_spans) == (
            200,
            invalid,
            invalid,
        )
        client.still_serving()

    check()
    client.assert_memory_bounded()
    client.server.settle(client.server.app.config.assembly.max_trace_age_seconds + 1)
    assert client.server.sample("toolwatch_buffered_spans") == 0  # every trace built


# -- huge values through the receivers -----------------------------------------------------------


def tool_request(arguments: AnyValue) -> tuple[ExportTraceServiceRequest, str]:
    """A refund run whose first tool call has ``arguments``; and its trace id. The model's
    requests are left out, so the calls' arguments are what the tool spans recorded (a
    requested object would win over an executed value that is not one)."""
    spans = agents.record(agents.refund_run(), "genai")
    request = encode_spans(spans)
    scope = request.resource_spans[0].scope_spans[0]
    for span in scope.spans:
        kept = [p for p in span.attributes if p.key != "gen_ai.output.messages"]
        del span.attributes[:]
        span.attributes.extend(kept)
    pairs = (p for s in scope.spans for p in s.attributes)
    next(p for p in pairs if p.key == "gen_ai.tool.call.arguments").value.CopyFrom(arguments)
    return request, format(spans[0].context.trace_id, "032x")


def first_arguments(server: RunningServer, trace_id: str) -> Any:
    server.settle()
    (trace,) = [t for t in server.tooltraces() if t["trace_id"] == trace_id]
    return trace["calls"][0]["arguments"]


def test_a_ten_megabyte_argument_is_accepted_and_cut(client: Client) -> None:
    request, trace_id = tool_request(AnyValue(string_value="€" * (10 * 2**20 // 3)))
    status, _answer = client.post(request.SerializeToString(), PROTOBUF)
    client.still_serving()

    limit = client.server.app.config.ingest.max_value_bytes
    assert status == 200
    assert first_arguments(client.server, trace_id) == "€" * (limit // 3)
    client.assert_memory_bounded()


def test_an_argument_array_of_a_hundred_thousand_items_is_accepted_and_cut(
    client: Client,
) -> None:
    request, trace_id = tool_request(_array([AnyValue(int_value=7)] * 100_000))
    code, _answer = client.grpc(request.SerializeToString())
    client.still_serving()

    limit = client.server.app.config.ingest.max_value_bytes
    assert code is grpc.StatusCode.OK
    assert first_arguments(client.server, trace_id) == [7] * (limit // 8)
    client.assert_memory_bounded()


def test_otlp_json_of_the_wrong_shape_in_a_span_rejects_it_naming_the_path(
    client: Client,
) -> None:
    good = json_format.MessageToDict(tool_request(AnyValue(string_value="A-1"))[0])
    spans = good["resourceSpans"][0]["scopeSpans"][0]["spans"]
    for span in spans:  # proto3 JSON writes ids in base64, OTLP/JSON in hex
        for name in ("traceId", "spanId", "parentSpanId"):
            if name in span:
                span[name] = base64.b64decode(span[name]).hex()
    spans.append({"status": "ERROR"})
    status, answer = client.post(json.dumps(good).encode(), JSON)

    assert status == 200
    partial = json.loads(answer)["partialSuccess"]
    assert partial["rejectedSpans"] == "1"  # proto3 JSON writes 64-bit integers as strings
    at = f"resourceSpans[0].scopeSpans[0].spans[{len(spans) - 1}]"
    assert partial["errorMessage"] == f'1 span rejected; {at}: status: "ERROR" is not an object'
    assert client.server.sample("toolwatch_spans_rejected_total", {"reason": "malformed_span"}) == 1
    client.still_serving()


def test_otlp_json_of_the_wrong_shape_in_a_resource_rejects_its_spans_naming_the_path(
    client: Client,
) -> None:
    """Was: refused whole, 400 (a fault outside the spans). Now: its spans are rejected."""
    document = {"resourceSpans": [{"resource": "svc", "scopeSpans": [{"spans": [{}]}]}]}
    status, answer = client.post(json.dumps(document).encode(), JSON)

    assert status == 200
    partial = json.loads(answer)["partialSuccess"]
    assert partial["rejectedSpans"] == "1"
    at = "resourceSpans[0].scopeSpans[0].spans[0]"
    said = f'1 span rejected; {at}: its resource cannot be parsed: "svc" is not an object'
    assert partial["errorMessage"] == said
    client.still_serving()


def test_otlp_json_whose_spans_cannot_be_told_apart_is_400_naming_the_path(
    client: Client,
) -> None:
    document = {"resourceSpans": [{"resource": {}, "scopeSpans": "svc"}]}
    status, answer = client.post(json.dumps(document).encode(), JSON)
    assert status == 400
    assert 'resourceSpans[0].scopeSpans: \\"svc\\" is not an array' in answer.decode()
    client.still_serving()


def test_a_span_nested_past_protobufs_limit_is_rejected_and_the_rest_evaluated(
    client: Client,
) -> None:
    """protobuf refuses such a request whole; an exporter told INVALID_ARGUMENT would drop
    the other spans with it."""
    request, trace_id = tool_request(AnyValue(string_value="A-1"))
    scope = request.resource_spans[0].scope_spans[0]
    deep = scope.spans.add(trace_id=b"\x07" * 16, span_id=b"\x09" * 8, name="deep")
    value = deep.attributes.add(key="gen_ai.tool.call.arguments").value
    for _ in range(60):
        value = value.array_value.values.add()
    value.string_value = "leaf"
    code, answer = client.grpc(request.SerializeToString())

    assert code is grpc.StatusCode.OK
    assert isinstance(answer, bytes)
    partial = ExportTraceServiceResponse.FromString(answer).partial_success
    assert partial.rejected_spans == 1
    at = f"resource_spans[0].scope_spans[0].spans[{len(scope.spans) - 1}]"
    assert partial.error_message.startswith(
        f"1 span rejected; {at}: protobuf cannot parse the span"
    )
    assert "MaxDepth" in partial.error_message
    assert first_arguments(client.server, trace_id) == "A-1"
    assert client.server.sample("toolwatch_spans_rejected_total", {"reason": "malformed_span"}) == 1
    client.still_serving()
