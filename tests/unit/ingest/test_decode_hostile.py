"""Hostile and malformed input at the decoder: every body gets a ``DecodeError`` naming what
is wrong, or a batch whose every span is decoded or counted as rejected; nothing else
escapes, and no value costs time or memory out of proportion to ``max_value_bytes``."""

from __future__ import annotations

import copy
import json
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ingest_support import ROOT_ID, TRACE_ID, decode_bytes, field, request, span
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from toolwatch.assembly.completed import CompletedTrace
from toolwatch.assembly.timeline import build_tool_traces
from toolwatch.ingest import salvage as salvage_module
from toolwatch.ingest.decode_requests import decode_protobuf, decode_request
from toolwatch.ingest.decode_types import DecodedBatch, DecodeError, DecodeOptions
from toolwatch.ingest.otlp_json import decode_otlp_json, parse_otlp_json
from toolwatch.model import SpanRecord
from toolwatch.model_traces import ToolCall
from toolwatch.names import NameNormalizer

OPTIONS = DecodeOptions()
LIMIT = OPTIONS.max_value_bytes
TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup_order"}
ARGUMENTS = "gen_ai.tool.call.arguments"


def accounted(batch: DecodedBatch) -> bool:
    return batch.received == len(batch.spans) + sum(batch.rejected.values())


def decode_or_error(body: bytes) -> DecodedBatch | DecodeError:
    try:
        return decode_protobuf(body, OPTIONS)
    except DecodeError as error:
        return error


def realistic_body() -> bytes:
    """A request shaped like a real export: resource, several spans, events, nested values."""
    spans = [
        span("invoke_agent refund-bot", {"gen_ai.operation.name": "invoke_agent"}, parent=b""),
        span("chat gpt-4o", {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}),
        span("execute_tool lookup_order", {**TOOL, ARGUMENTS: {"order_id": "A-1", "n": [1, 2]}}),
        span("execute_tool issue_refund", {**TOOL, ARGUMENTS: '{"order_id": "A-1"}'}, status=2),
    ]
    body: bytes = request(*spans, resource={"service.name": "refund-agent"}).SerializeToString()
    return body


# -- truncated and corrupted protobuf -------------------------------------------------------


def test_every_truncation_of_a_request_is_an_error_or_fully_accounted() -> None:
    body = realistic_body()
    outcomes = [decode_or_error(body[:cut]) for cut in range(len(body))]

    errors = [o for o in outcomes if isinstance(o, DecodeError)]
    assert errors  # most cuts land inside a field
    assert all("ExportTraceServiceRequest" in str(e) for e in errors)
    assert all(accounted(o) for o in outcomes if isinstance(o, DecodedBatch))
    assert len(decode_or_error(body).spans) == 4  # type: ignore[union-attr]


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_flipped_bytes_give_a_decode_error_or_an_accounted_batch(data: st.DataObject) -> None:
    body = bytearray(realistic_body())
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(body) - 1))
        body[at] = data.draw(st.integers(0, 255))
    outcome = decode_or_error(bytes(body))
    assert isinstance(outcome, DecodeError) or accounted(outcome)


@settings(max_examples=100)
@given(st.integers(0, 20), st.integers(0, 12), st.sampled_from([0, 1, 4, 7, 8, 9, 16]))
def test_any_id_lengths_are_decoded_or_rejected_by_the_otlp_rules(
    trace_len: int, span_len: int, parent_len: int
) -> None:
    odd = span(
        trace_id=b"\x01" * trace_len, span_id=b"\x02" * span_len, parent=b"\x03" * parent_len
    )
    batch = decode_bytes(request(odd, span()), OPTIONS)

    expected = (
        "invalid_trace_id"
        if trace_len != 16
        else "invalid_span_id"
        if span_len != 8
        else "invalid_parent_span_id"
        if parent_len not in (0, 8)
        else None
    )
    assert batch.rejected == ({expected: 1} if expected else {})
    assert len(batch.spans) == (2 if expected is None else 1)
    assert accounted(batch)


# -- huge values ----------------------------------------------------------------------------


@pytest.mark.parametrize("char", ["x", "é", "€", "😀"])
def test_a_ten_megabyte_string_is_cut_to_max_value_bytes(char: str) -> None:
    huge = char * (10 * 2**20 // len(char.encode()))
    started = time.perf_counter()
    batch = decode_bytes(request(span("t", {**TOOL, ARGUMENTS: huge})), OPTIONS)
    seconds = time.perf_counter() - started

    (record,) = batch.spans
    kept = record.arguments.encode()
    assert LIMIT - len(char.encode()) < len(kept) <= LIMIT
    assert set(record.arguments) == {char}  # cut on a character boundary
    assert record.size_bytes < 2 * LIMIT
    assert seconds < 5


def test_a_ten_megabyte_bytes_value_is_cut_to_max_value_bytes_of_hex() -> None:
    raw = AnyValue(bytes_value=b"\xab" * (10 * 2**20))
    (record,) = decode_bytes(request(span("t", {**TOOL, ARGUMENTS: raw})), OPTIONS).spans
    assert record.arguments == "ab" * (LIMIT // 2)


def test_an_array_of_a_hundred_thousand_items_is_cut_and_fully_counted() -> None:
    array = AnyValue()
    array.array_value.values.extend(AnyValue(int_value=i) for i in range(100_000))
    started = time.perf_counter()
    (record,) = decode_bytes(request(span("t", {**TOOL, ARGUMENTS: array})), OPTIONS).spans
    seconds = time.perf_counter() - started

    assert record.arguments == list(range(LIMIT // 8))  # cut like a long string
    # Every kept item is counted at what CPython spends on it, so the buffer's byte bound
    # holds for many small items too.
    held = sys.getsizeof(record.arguments) + sum(map(sys.getsizeof, record.arguments))
    assert record.size_bytes >= held
    assert seconds < 5


def test_a_map_of_a_hundred_thousand_entries_is_cut() -> None:
    kvlist = AnyValue()
    for i in range(100_000):
        pair = kvlist.kvlist_value.values.add()
        pair.key, pair.value.string_value = f"k{i}", "v"
    (record,) = decode_bytes(request(span("t", {**TOOL, ARGUMENTS: kvlist})), OPTIONS).spans

    assert len(record.arguments) == LIMIT // 8
    assert record.arguments["k0"] == "v"
    assert record.size_bytes >= 128 * len(record.arguments)


# -- deep nesting and bad UTF-8, written on the wire by hand ----------------------------------


def with_span_fields(*extra: bytes) -> bytes:
    """A valid one-span request whose span carries ``extra`` encoded fields too.

    ExportTraceServiceRequest.resource_spans = 1, ResourceSpans.scope_spans = 2,
    ScopeSpans.spans = 2, Span.attributes = 9 (opentelemetry-proto trace.proto).
    """
    valid = span("t", TOOL).SerializeToString()
    return field(1, field(2, field(2, valid + b"".join(extra))))


def beside_a_valid_span(*extra: bytes) -> bytes:
    """Like ``with_span_fields``, after a valid sibling span named ``sibling`` in the same
    scope, and before another one in a second resource named ``cousin``."""
    sibling = field(2, span("sibling", TOOL, span_id=b"\x05" * 8).SerializeToString())
    bad = field(2, span("t", TOOL).SerializeToString() + b"".join(extra))
    cousin = field(
        1, field(2, field(2, span("cousin", TOOL, span_id=b"\x06" * 8).SerializeToString()))
    )
    return field(1, field(2, sibling + bad)) + cousin


def assert_rejected_alone(body: bytes, reason: str) -> None:
    batch = decode_protobuf(body, OPTIONS)
    assert [record.name for record in batch.spans] == ["sibling", "cousin"]
    assert batch.received == 3
    assert batch.rejected == {"malformed_span": 1}
    message = batch.error_message or ""
    assert message.startswith("1 span rejected; resource_spans[0].scope_spans[0].spans[1]: ")
    assert reason in message
    assert batch.rejected_traces == (TRACE_ID,)  # read alone: its run misses it


def attribute(key: bytes, value: bytes) -> bytes:
    return field(9, field(1, key) + field(2, value))  # KeyValue: key = 1, value = 2


def nested_array(depth: int) -> bytes:
    """An AnyValue holding ``depth`` arrays in arrays (array_value = 5, values = 1)."""
    value = field(1, b"leaf")  # string_value = 1
    for _ in range(depth):
        value = field(5, field(1, value))
    return value


def test_the_hand_written_wire_form_decodes() -> None:
    batch = decode_protobuf(
        with_span_fields(attribute(ARGUMENTS.encode(), nested_array(3))), OPTIONS
    )
    assert batch.spans[0].arguments == [[["leaf"]]]


@pytest.mark.parametrize("depth", [48, 200, 10_000])
def test_a_span_nested_too_deeply_is_rejected_alone(depth: int) -> None:
    """protobuf refuses the whole request; the other spans are still kept (a client told
    INVALID_ARGUMENT would drop them all)."""
    body = beside_a_valid_span(attribute(ARGUMENTS.encode(), nested_array(depth)))
    assert_rejected_alone(body, "MaxDepth")


def test_a_resource_protobuf_cannot_parse_rejects_its_spans_and_keeps_the_others() -> None:
    # ResourceSpans.resource = 1, Resource.attributes = 1, KeyValue: key = 1, value = 2
    deep_resource = field(1, field(1, field(1, b"deep") + field(2, nested_array(200))))
    spans = field(2, span("a", TOOL).SerializeToString()) + field(
        2, span("b", TOOL, span_id=b"\x07" * 8).SerializeToString()
    )
    elsewhere = field(2, field(2, span("cousin", TOOL, span_id=b"\x06" * 8).SerializeToString()))
    body = field(1, deep_resource + field(2, spans)) + field(1, elsewhere)

    batch = decode_protobuf(body, OPTIONS)

    assert [record.name for record in batch.spans] == ["cousin"]
    assert batch.rejected == {"malformed_span": 2}
    assert batch.rejected_traces == (TRACE_ID,)
    message = batch.error_message or ""
    assert (
        "resource_spans[0].scope_spans[0].spans[0]: protobuf cannot parse its resource" in message
    )
    assert (
        "resource_spans[0].scope_spans[0].spans[1]: protobuf cannot parse its resource" in message
    )


def test_the_outline_numbers_its_fields_as_opentelemetry_proto_does() -> None:
    outline = {
        "Request": ExportTraceServiceRequest.DESCRIPTOR,
        "ResourceSpans": ResourceSpans.DESCRIPTOR,
        "ScopeSpans": ScopeSpans.DESCRIPTOR,
        "Span": Span.DESCRIPTOR,
    }
    for name, fields in salvage_module._OUTLINE.items():
        descriptor = outline[name]
        for number, field_name in fields.items():
            assert descriptor.fields_by_name[field_name].number == number


BAD_UTF8 = [
    field(5, b"caf\xc3"),  # Span.name cut inside a character
    attribute(b"gen_ai.tool.name", field(1, b"\xff\xfe")),  # a string attribute value
    attribute(b"gen_ai.\xc0\xaf", field(1, b"ok")),  # an attribute key (overlong '/')
]


@pytest.mark.parametrize("bad", BAD_UTF8)
def test_invalid_utf8_in_one_span_rejects_that_span_alone(bad: bytes) -> None:
    assert_rejected_alone(beside_a_valid_span(bad), "UTF-8")


# -- arguments that are not JSON, through to the ToolTrace ------------------------------------


def only_call(record: SpanRecord) -> ToolCall:
    trace = CompletedTrace(record.trace_id, (record,), True, None, 0, 0)
    (tool_trace,) = build_tool_traces(trace, NameNormalizer({}))
    (call,) = tool_trace.calls
    return call


@pytest.mark.parametrize(
    "arguments",
    [
        "{order_id: A-1",
        "[" * 50_000,  # deeper than the JSON parser's recursion limit
        "\x00 not \x7f text",
    ],
)
def test_arguments_that_are_not_json_are_kept_raw_and_flagged(arguments: str) -> None:
    raw = AnyValue(string_value=arguments)
    record = decode_bytes(request(span("t", {**TOOL, ARGUMENTS: raw}, parent=b"")), OPTIONS)
    call = only_call(record.spans[0])

    assert call.arguments == arguments[:LIMIT]
    assert call.arguments_error == "arguments are not valid JSON"
    assert call.tool_name == "lookup_order"


def test_a_json_string_holding_unparseable_nesting_is_that_string() -> None:
    """Double encoding (CONVENTIONS §0): the second decode failing is not an error."""
    inner = "[" * 50_000
    raw = AnyValue(string_value=json.dumps(inner))
    record = decode_bytes(request(span("t", {**TOOL, ARGUMENTS: raw}, parent=b"")), OPTIONS)
    call = only_call(record.spans[0])
    assert (call.arguments, call.arguments_error) == (inner, None)


def test_a_result_nested_too_deeply_for_json_is_kept_as_text() -> None:
    result = "{" + '"a":[' * 30_000
    attrs = {**TOOL, "gen_ai.tool.call.result": result}
    call = only_call(decode_bytes(request(span("t", attrs, parent=b"")), OPTIONS).spans[0])
    assert call.result == result[:LIMIT]


# -- OTLP/JSON with wrong types -------------------------------------------------------------


def json_body(**span_fields: Any) -> dict[str, Any]:
    one = {
        "traceId": TRACE_ID.hex(),
        "spanId": "00f067aa0ba902b7",
        "parentSpanId": ROOT_ID.hex(),
        "name": "execute_tool lookup_order",
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": 1700000000500000000,
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in TOOL.items()],
        "events": [{"name": "exception", "attributes": []}],
        "status": {"code": 2},
        **span_fields,
    }
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]}
    return {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": [one]}]}]}


SPAN = "resourceSpans[0].scopeSpans[0].spans[0]"


@pytest.mark.parametrize(
    ("span_fields", "names"),
    [
        ({"startTimeUnixNano": "soon"}, "startTimeUnixNano"),
        ({"kind": "x" * 10}, None),  # proto3 JSON: an unknown enum name is ignored
        ({"attributes": {"key": "a"}}, f"{SPAN}.attributes"),
        ({"events": "exception"}, f"{SPAN}.events"),
        ({"status": "ERROR"}, f"{SPAN}.status"),
        ({"status": [2]}, f"{SPAN}.status"),
        ({"attributes": ["gen_ai.tool.name"]}, f"{SPAN}.attributes[0]"),
        ({"attributes": [{"key": "k", "value": "v"}]}, f"{SPAN}.attributes[0].value"),
        (
            {"attributes": [{"key": "k", "value": {"arrayValue": {"values": [{}, 7]}}}]},
            f"{SPAN}.attributes[0].value.arrayValue.values[1]",
        ),
        ({"name": {"text": "x"}}, "name"),
        ({"droppedAttributesCount": -1}, "droppedAttributesCount"),
    ],
)
def test_otlp_json_of_the_wrong_type_is_an_error_naming_where(
    span_fields: dict[str, Any], names: str | None
) -> None:
    body = json.dumps(json_body(**span_fields))
    if names is None:
        assert len(decode_otlp_json(body, OPTIONS).spans) == 1
        return
    with pytest.raises(DecodeError) as caught:
        parse_otlp_json(body)
    assert names in str(caught.value)


def with_a_valid_sibling(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` (from ``json_body``) with a valid span after its first, named ``sibling``."""
    sibling = {**json_body()["resourceSpans"][0]["scopeSpans"][0]["spans"][0]}
    sibling.update(spanId="00f067aa0ba902b8", name="sibling")
    document["resourceSpans"][0]["scopeSpans"][0]["spans"].append(sibling)
    return document


def nested_json_array(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"stringValue": "leaf"}
    for _ in range(depth):
        value = {"arrayValue": {"values": [value]}}
    return value


@pytest.mark.parametrize(
    ("span_fields", "names"),
    [
        ({"startTimeUnixNano": "soon"}, "startTimeUnixNano"),
        ({"attributes": {"key": "a"}}, "attributes: "),
        ({"status": "ERROR"}, "status: "),
        ({"attributes": [{"key": "k", "value": "v"}]}, "attributes[0].value: "),
        ({"name": {"text": "x"}}, "name"),
        ({"droppedAttributesCount": -1}, "droppedAttributesCount"),
        # 48 arrays: too deep only where the span sits in the request, not parsed alone
        ({"attributes": [{"key": ARGUMENTS, "value": nested_json_array(48)}]}, "values(x"),
        ({"traceId": TRACE_ID.hex(), "trace_id": TRACE_ID.hex()}, "trace_id: names the same"),
    ],
)
def test_a_wrong_or_too_deep_value_in_one_otlp_json_span_rejects_that_span_alone(
    span_fields: dict[str, Any], names: str
) -> None:
    batch = decode_otlp_json(json.dumps(with_a_valid_sibling(json_body(**span_fields))), OPTIONS)

    assert [record.name for record in batch.spans] == ["sibling"]
    assert batch.rejected == {"malformed_span": 1}
    assert (batch.error_message or "").startswith(f"1 span rejected; {SPAN}: ")
    assert names in (batch.error_message or "")
    assert batch.rejected_traces == (TRACE_ID,)  # kept when emptied: its run misses it


@pytest.mark.parametrize("trace_id", [5, "no hex", None])
def test_a_malformed_otlp_json_span_without_a_readable_trace_id_names_no_trace(
    trace_id: Any,
) -> None:
    document = with_a_valid_sibling(json_body(traceId=trace_id, startTimeUnixNano="soon"))
    batch = decode_otlp_json(json.dumps(document), OPTIONS)
    assert (sum(batch.rejected.values()), batch.rejected_traces) == (1, ())


def with_another_resource(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` (from ``json_body``) with a second resource of one valid span, named
    ``elsewhere``."""
    other = json_body()["resourceSpans"][0]
    other["scopeSpans"][0]["spans"][0].update(spanId="00f067aa0ba902b9", name="elsewhere")
    document["resourceSpans"].append(other)
    return document


@pytest.mark.parametrize(
    ("where", "value", "said"),
    [
        ("resource", "service.name", ': "service.name" is not an object'),
        ("attributes", "service.name", " at attributes: a string is not an array"),
        ("attributes", [{"key": "k", "value": "v"}], " at attributes[0].value: a string is not"),
        ("scope", ["tool"], ': ["tool"] is not an object'),
        ("scope", {"attributes": {"k": "v"}}, " at attributes: an object is not an array"),
    ],
)
def test_a_resource_or_scope_of_the_wrong_shape_rejects_its_spans_and_keeps_the_others(
    where: str, value: Any, said: str
) -> None:
    """Was: a fault outside the spans, ``attributes`` that is no array, refused the request.
    Now: as a resource or scope protobuf cannot parse, it costs its own spans, named with
    the field, the kind of value and the fault (an attribute's value never quoted)."""
    document = with_another_resource(with_a_valid_sibling(json_body()))
    resource_spans = document["resourceSpans"][0]
    if where == "attributes":
        resource_spans["resource"]["attributes"] = value
    elif where == "resource":
        resource_spans["resource"] = value
    else:
        resource_spans["scopeSpans"][0]["scope"] = value

    batch = decode_otlp_json(json.dumps(document), OPTIONS)

    assert [record.name for record in batch.spans] == ["elsewhere"]
    assert batch.rejected == {"malformed_span": 2}
    head = "scope" if where == "scope" else "resource"
    said = f"2 spans rejected; {SPAN}: its {head} cannot be parsed{said}"
    assert (batch.error_message or "").startswith(said)
    assert '"v"' not in (batch.error_message or "")
    assert batch.rejected_traces == (TRACE_ID,)


def test_a_wrong_value_where_the_spans_cannot_be_told_apart_still_refuses_the_request() -> None:
    document = with_another_resource(with_a_valid_sibling(json_body()))
    document["resourceSpans"][0]["scopeSpans"] = "spans"
    with pytest.raises(DecodeError, match=r"^resourceSpans\[0\]\.scopeSpans: \"spans\" is no"):
        decode_otlp_json(json.dumps(document), OPTIONS)


def test_both_spellings_of_the_spans_list_refuse_the_request() -> None:
    """Which would ``ParseDict`` keep? Counting the spans of one and parsing the other's
    would lose or invent spans."""
    document = with_a_valid_sibling(json_body())
    document["resource_spans"] = json_body()["resourceSpans"]
    same = r"^resource_spans: names the same field as resourceSpans"
    with pytest.raises(DecodeError, match=same):
        decode_otlp_json(json.dumps(document), OPTIONS)


def test_a_wrong_value_outside_the_spans_refuses_the_request_even_beside_a_bad_span() -> None:
    document = with_a_valid_sibling(json_body(kind=[1]))  # the first span alone would go
    document["resourceSpans"][0]["schemaUrl"] = 5
    with pytest.raises(DecodeError, match=r"cannot be parsed at resourceSpans\.schemaUrl: "):
        decode_otlp_json(json.dumps(document), OPTIONS)


def test_a_resource_too_deep_to_parse_rejects_its_spans_and_keeps_the_others() -> None:
    document = with_another_resource(with_a_valid_sibling(json_body()))
    deep = {"key": "deep", "value": nested_json_array(60)}
    document["resourceSpans"][0]["resource"]["attributes"].append(deep)

    batch = decode_otlp_json(json.dumps(document), OPTIONS)

    assert [record.name for record in batch.spans] == ["elsewhere"]
    assert batch.rejected == {"malformed_span": 2}
    assert "its resource cannot be parsed at attributes.value.values(x" in (
        batch.error_message or ""
    )


def test_a_string_where_a_span_belongs_is_an_error_not_an_empty_span() -> None:
    document = json_body()
    document["resourceSpans"][0]["scopeSpans"][0]["spans"].append("span")
    with pytest.raises(DecodeError, match=r"spans\[1\]: \"span\" is not an object"):
        parse_otlp_json(json.dumps(document))


def nodes(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The path of every node of a JSON document."""
    yield path
    if isinstance(value, dict | list):
        children = value.items() if isinstance(value, dict) else enumerate(value)
        for key, child in children:
            yield from nodes(child, (*path, key))


_VALID = json_body()
_PATHS = [path for path in nodes(_VALID) if path]
_WRONG = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=12),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=6), st.integers(), max_size=2),
)


@settings(max_examples=300)
@given(st.sampled_from(_PATHS), _WRONG)
def test_any_node_replaced_by_any_json_value_is_an_error_or_a_request(
    path: tuple[Any, ...], replacement: Any
) -> None:
    document = copy.deepcopy(_VALID)
    parent = document
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = replacement
    try:
        parsed = parse_otlp_json(json.dumps(document))
    except DecodeError as error:
        assert str(error)
        return
    assert isinstance(parsed, ExportTraceServiceRequest)
    assert accounted(decode_request(parsed, OPTIONS))


@pytest.mark.parametrize("number", ["Infinity", "-Infinity", "NaN"])
def test_a_non_finite_number_in_an_integer_field_is_an_error_naming_it(number: str) -> None:
    # Python's json reads these literals; ParseDict raised OverflowError on an enum.
    document = copy.deepcopy(_VALID)
    document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["status"] = {"code": 0}
    text = json.dumps(document).replace('"code": 0', f'"code": {number}')
    with pytest.raises(DecodeError) as caught:
        parse_otlp_json(text)
    where = "resourceSpans[0].scopeSpans[0].spans[0].status.code"
    assert str(caught.value) == f"{where}: {number} is not a value this field can hold"
