"""Property tests: hostile or random input never crashes ingest."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ingest_support import decode_bytes, event, request, span
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from toolwatch.conventions import ATTRIBUTE_KEYS
from toolwatch.ingest.decode_requests import decode_protobuf
from toolwatch.ingest.decode_types import DecodeError, DecodeOptions
from toolwatch.ingest.otlp_json import parse_otlp_json

_OPTIONS = DecodeOptions(reference_keys=frozenset({"case.id"}), max_value_bytes=64)


def _check_batch(body: bytes) -> None:
    try:
        batch = decode_protobuf(body, _OPTIONS)
    except DecodeError:
        return
    assert batch.received == len(batch.spans) + sum(batch.rejected.values())


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=512))
def test_decode_protobuf_raises_only_decode_error_on_arbitrary_bytes(body: bytes) -> None:
    _check_batch(body)


@settings(max_examples=200)
@given(st.binary(max_size=64), st.integers(min_value=0, max_value=400))
def test_decode_protobuf_survives_corrupted_valid_requests(noise: bytes, at: int) -> None:
    body = request(
        span("execute_tool t", {"gen_ai.operation.name": "execute_tool"})
    ).SerializeToString()
    at = min(at, len(body))
    _check_batch(body[:at] + noise + body[at:])


_scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=40),
    st.binary(max_size=8),
    # JSON-looking strings, since recognizers parse some values
    st.recursive(
        st.one_of(st.none(), st.integers(), st.text(max_size=10)),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
        ),
        max_leaves=5,
    ).map(json.dumps),
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
_keys = st.sampled_from(
    sorted(
        ATTRIBUTE_KEYS
        | {
            "llm.output_messages.0.message.tool_calls.1.tool_call.function.name",
            "llm.output_messages.x.message.content",
            "gen_ai.completion.3.tool_calls.0.arguments",
            "gen_ai.completion.0.finish_reason",
            "case.id",
        }
    )
)
_kinds = st.sampled_from(
    [
        {"gen_ai.operation.name": "execute_tool"},
        {"gen_ai.operation.name": "chat"},
        {"gen_ai.operation.name": "invoke_agent"},
        {"openinference.span.kind": "TOOL"},
        {"openinference.span.kind": "LLM"},
        {"openinference.span.kind": "AGENT"},
        {"traceloop.span.kind": "tool"},
        {"traceloop.span.kind": "agent"},
        {"llm.request.type": "chat"},
        {},
    ]
)
_event_names = st.sampled_from(
    [
        "exception",
        "gen_ai.tool.message",
        "gen_ai.choice",
        "gen_ai.client.inference.operation.details",
    ]
)
_event_keys = st.sampled_from(
    [
        "exception.type",
        "content",
        "id",
        "message",
        "finish_reason",
        "gen_ai.input.messages",
        "gen_ai.output.messages",
    ]
)


@st.composite
def _spans(draw: st.DrawFn) -> Any:
    attrs = {**draw(st.dictionaries(_keys, _values, max_size=8)), **draw(_kinds)}
    events = draw(
        st.lists(
            st.builds(event, _event_names, st.dictionaries(_event_keys, _values, max_size=3)),
            max_size=3,
        )
    )
    name = draw(
        st.sampled_from(["execute_tool x", "running tools", "agent run", "handoff to b", "n"])
    )
    return span(name, attrs, events=events, status=draw(st.sampled_from([0, 1, 2])))


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_spans(), min_size=1, max_size=4))
def test_any_attribute_shapes_decode_without_raising(spans: list[Any]) -> None:
    batch = decode_bytes(request(*spans), _OPTIONS)
    assert batch.rejected == {}, batch.error_message
    assert len(batch.spans) == len(spans)
    for record in batch.spans:
        assert record.size_bytes > 0
        assert all(c.position == i for i, c in enumerate(record.output_tool_calls))


_json_values = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8)
    ),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "resourceSpans",
                    "scopeSpans",
                    "spans",
                    "traceId",
                    "spanId",
                    "links",
                    "attributes",
                    "key",
                    "value",
                    "stringValue",
                    "kind",
                    "name",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=20,
)


@settings(max_examples=150)
@given(_json_values)
def test_parse_otlp_json_raises_only_decode_error(document: Any) -> None:
    try:
        parsed = parse_otlp_json(json.dumps(document))
    except DecodeError as error:
        assert str(error)
    else:
        assert isinstance(parsed, ExportTraceServiceRequest)
