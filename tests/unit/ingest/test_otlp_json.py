"""OTLP/JSON bodies: hex ids, int64 forms, field-name forms, errors with paths."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ingest_support import ROOT_ID, TRACE_ID

from toolwatch.ingest.decode_requests import decode_request
from toolwatch.ingest.decode_types import DecodeError, DecodeLimitError, DecodeOptions
from toolwatch.ingest.otlp_json import decode_otlp_json, parse_otlp_json
from toolwatch.model import SpanRole

_TRACE_HEX = TRACE_ID.hex()
_SPAN_HEX = "00f067aa0ba902b7"


def _body(**span_fields: Any) -> dict[str, Any]:
    span = {
        "traceId": _TRACE_HEX,
        "spanId": _SPAN_HEX,
        "parentSpanId": ROOT_ID.hex(),
        "name": "execute_tool lookup",
        "kind": 1,
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": 1700000000500000000,
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
            {"key": "gen_ai.tool.name", "value": {"stringValue": "lookup"}},
        ],
        "status": {"code": 2},
        **span_fields,
    }
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]
                },
                "scopeSpans": [{"scope": {"name": "pydantic-ai"}, "spans": [span]}],
            }
        ]
    }


def test_hex_ids_round_trip_to_bytes() -> None:
    request = parse_otlp_json(json.dumps(_body()))
    span = request.resource_spans[0].scope_spans[0].spans[0]
    assert (span.trace_id, span.span_id, span.parent_span_id) == (
        TRACE_ID,
        bytes.fromhex(_SPAN_HEX),
        ROOT_ID,
    )


def test_decoded_json_request_gives_records() -> None:
    batch = decode_request(parse_otlp_json(json.dumps(_body()).encode()), DecodeOptions())
    (record,) = batch.spans
    assert (record.role, record.tool_name, record.service) == (SpanRole.TOOL, "lookup", "svc")
    assert (record.status_code, record.kind) == (2, 1)


def test_int64_as_string_and_as_number() -> None:
    span = parse_otlp_json(json.dumps(_body())).resource_spans[0].scope_spans[0].spans[0]
    assert span.start_time_unix_nano == 1_700_000_000_000_000_000
    assert span.end_time_unix_nano == 1_700_000_000_500_000_000


def test_int_value_attribute_as_string() -> None:
    attributes = [{"key": "n", "value": {"intValue": "9007199254740993"}}]
    span = parse_otlp_json(json.dumps(_body(attributes=attributes)))
    value = span.resource_spans[0].scope_spans[0].spans[0].attributes[0].value
    assert value.int_value == 9_007_199_254_740_993


def test_snake_case_field_names_are_accepted() -> None:
    body = {
        "resource_spans": [
            {
                "scope_spans": [
                    {
                        "spans": [
                            {
                                "trace_id": _TRACE_HEX,
                                "span_id": _SPAN_HEX,
                                "parent_span_id": "",
                                "start_time_unix_nano": "5",
                            }
                        ]
                    }
                ]
            }
        ]
    }
    span = parse_otlp_json(json.dumps(body)).resource_spans[0].scope_spans[0].spans[0]
    assert (span.trace_id, span.span_id, span.parent_span_id) == (
        TRACE_ID,
        bytes.fromhex(_SPAN_HEX),
        b"",
    )
    assert span.start_time_unix_nano == 5


def test_unknown_fields_are_ignored() -> None:
    body = _body(futureField={"x": 1})
    body["somethingNew"] = True
    span = parse_otlp_json(json.dumps(body)).resource_spans[0].scope_spans[0].spans[0]
    assert span.name == "execute_tool lookup"


def test_uppercase_hex_is_accepted() -> None:
    span = parse_otlp_json(json.dumps(_body(spanId=_SPAN_HEX.upper())))
    assert span.resource_spans[0].scope_spans[0].spans[0].span_id == bytes.fromhex(_SPAN_HEX)


def test_link_ids_are_hex_too() -> None:
    links = [{"traceId": _TRACE_HEX, "spanId": _SPAN_HEX}]
    span = parse_otlp_json(json.dumps(_body(links=links))).resource_spans[0].scope_spans[0].spans[0]
    assert (span.links[0].trace_id, span.links[0].span_id) == (TRACE_ID, bytes.fromhex(_SPAN_HEX))


def test_non_hex_id_is_an_error_naming_path_and_value() -> None:
    with pytest.raises(DecodeError) as raised:
        parse_otlp_json(json.dumps(_body(traceId="xyz")))
    assert str(raised.value) == 'resourceSpans[0].scopeSpans[0].spans[0].traceId: "xyz" is not hex'


def test_base64_id_is_not_hex() -> None:
    with pytest.raises(DecodeError, match=r"spans\[0\]\.spanId: \"APBnqgupArc=\" is not hex"):
        parse_otlp_json(json.dumps(_body(spanId="APBnqgupArc=")))


def test_odd_length_hex_id_is_an_error() -> None:
    with pytest.raises(DecodeError, match=r"parentSpanId: \"abc\" has an odd number of hex digits"):
        parse_otlp_json(json.dumps(_body(parentSpanId="abc")))


def test_non_string_id_is_an_error() -> None:
    with pytest.raises(DecodeError, match=r"spans\[0\]\.spanId: 12 is not a hex string"):
        parse_otlp_json(json.dumps(_body(spanId=12)))


def test_long_bad_value_is_shortened_in_the_message() -> None:
    with pytest.raises(DecodeError) as raised:
        parse_otlp_json(json.dumps(_body(traceId="z" * 500)))
    assert len(str(raised.value)) < 120
    assert '"zzzz' in str(raised.value)


SECRET = "SSN 078-05-1120 " * 300  # a prompt's text, sent where a number belongs


def _rejection(body: dict[str, Any]) -> str:
    batch = decode_otlp_json(json.dumps(body), DecodeOptions())
    assert batch.rejected == {"malformed_span": 1}
    assert batch.error_message is not None
    return batch.error_message


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ({"intValue": SECRET}, "the span cannot be parsed at attributes.value: not an integer"),
        ({"intValue": "12-34"}, "parsed at attributes.value.intValue: not an integer"),
        ({"doubleValue": SECRET}, "the span cannot be parsed at attributes.value: not a number"),
        ({"stringValue": {"note": SECRET}}, "at attributes.value.stringValue: not a string"),
        ({"boolValue": SECRET}, "the span cannot be parsed at attributes.value: not a boolean"),
        ([SECRET], "spans[0]: attributes[2].value: an array is not an object"),
    ],
)
def test_an_attribute_value_protobuf_cannot_read_is_not_echoed(value: Any, said: str) -> None:
    """The answer names the attribute and the fault, never the value: an exporter logs the
    answer's message, and attribute values hold prompts, arguments and results."""
    attributes = [*_body()["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"]]
    message = _rejection(_body(attributes=[*attributes, {"key": "app.note", "value": value}]))
    assert message.endswith(said)
    assert "078-05" not in message and "12-34" not in message


def test_attributes_that_are_no_array_are_not_echoed() -> None:
    message = _rejection(_body(attributes={"note": SECRET}))
    assert message.endswith("spans[0]: attributes: an object is not an array")


def test_a_resource_attribute_protobuf_cannot_read_is_not_echoed() -> None:
    body = _body()
    body["resourceSpans"][0]["resource"]["attributes"].append(
        {"key": "region", "value": {"doubleValue": SECRET}}
    )
    message = _rejection(body)
    assert "its resource cannot be parsed at attributes.value: not a number" in message
    assert "078-05" not in message


@pytest.mark.parametrize("where", ["resource", "scope"])
def test_a_schema_url_holding_a_lone_surrogate_rejects_the_spans_it_holds(where: str) -> None:
    """Was: OTLP/JSON's ``"\\ud800"``, which no UTF-8 holds, in a ResourceSpans' or
    ScopeSpans' ``schemaUrl`` refused the request ("cannot be parsed at
    resourceSpans.schemaUrl: Unpaired surrogate"), every service batched with it lost. Now:
    its resource's or scope's spans are rejected, as a protobuf ``schema_url`` that is not
    UTF-8 costs them; the others are kept."""
    body = _body()
    resource = body["resourceSpans"][0]
    kept = json.loads(json.dumps(resource))
    kept["scopeSpans"][0]["spans"][0]["spanId"] = "00f067aa0ba902b8"
    body["resourceSpans"].append(kept)
    holder = resource if where == "resource" else resource["scopeSpans"][0]
    holder["schemaUrl"] = "https://opentelemetry.io/schemas/\ud800"
    owner = "resourceSpans" if where == "resource" else "scopeSpans"

    batch = decode_otlp_json(json.dumps(body), DecodeOptions())

    assert [span.span_id.hex() for span in batch.spans] == ["00f067aa0ba902b8"]
    assert batch.rejected == {"malformed_span": 1}
    assert batch.error_message == (
        f"1 span rejected; resourceSpans[0].scopeSpans[0].spans[0]: its {owner}' schemaUrl"
        " cannot be parsed: a lone surrogate is not UTF-8"
    )


def test_bad_link_id_names_the_link() -> None:
    links = [{"traceId": _TRACE_HEX, "spanId": "nothex!!"}]
    with pytest.raises(DecodeError, match=r"spans\[0\]\.links\[0\]\.spanId: "):
        parse_otlp_json(json.dumps(_body(links=links)))


def test_wrong_length_hex_id_flows_through_and_is_rejected_per_span() -> None:
    body = _body(traceId="abcdef")
    batch = decode_otlp_json(json.dumps(body), DecodeOptions())
    assert (batch.received, batch.spans, batch.rejected) == (1, (), {"invalid_trace_id": 1})
    # Named as the client wrote it (proto3 JSON), not by the protobuf field names.
    assert batch.error_message == (
        "1 span rejected; resourceSpans[0].scopeSpans[0].spans[0]: traceId must be 16 bytes, got 3"
    )
    protobuf = decode_request(parse_otlp_json(json.dumps(body)), DecodeOptions())
    assert protobuf.error_message == (
        "1 span rejected; resource_spans[0].scope_spans[0].spans[0]: "
        "trace_id must be 16 bytes, got 3"
    )


def test_null_parent_id_is_the_default_empty_id() -> None:
    span = parse_otlp_json(json.dumps(_body(parentSpanId=None)))
    assert span.resource_spans[0].scope_spans[0].spans[0].parent_span_id == b""


def test_invalid_json_is_an_error() -> None:
    with pytest.raises(DecodeError, match="body is not JSON: Expecting value at line 1 column 1"):
        parse_otlp_json(b"not json")


def test_non_utf8_body_is_an_error() -> None:
    with pytest.raises(DecodeError, match="body is not UTF-8: invalid byte at offset 1"):
        parse_otlp_json(b'{\xff"resourceSpans": []}')


def test_non_object_body_is_an_error() -> None:
    with pytest.raises(DecodeError, match="body must be a JSON object, got list"):
        parse_otlp_json("[]")


def test_deeply_nested_json_is_an_error_not_a_crash() -> None:
    with pytest.raises(DecodeError, match="nested too deeply"):
        parse_otlp_json("[" * 100_000 + " " * 2_000_000 + "]" * 100_000)


def test_an_integer_literal_python_will_not_convert_is_ignored_in_an_unknown_field() -> None:
    """``json`` raises a plain ValueError past ``sys.get_int_max_str_digits()`` digits; an
    OTLP/JSON receiver ignores unknown fields, so such a literal in one costs nothing."""
    digits = "1" * 5000
    body = json.dumps(_body()).replace('{"resourceSpans"', f'{{"x": -{digits}, "resourceSpans"')
    assert f"-{digits}" in body
    batch = decode_otlp_json(body, DecodeOptions())
    assert (len(batch.spans), batch.rejected) == (1, {})
    assert parse_otlp_json(body) == parse_otlp_json(json.dumps(_body()))


def test_an_integer_literal_python_will_not_convert_rejects_the_span_holding_it() -> None:
    """Where an integer belongs, such a literal is beyond any OTLP integer: the span alone is
    rejected, named with the literal's length. Was: in a resource, the request was refused.
    Now: its spans are rejected; outside the spans, resources and scopes the request is
    refused."""
    digits = "1" * 5000
    good = json.loads(json.dumps(_body()))["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span = json.dumps(good).replace("{", f'{{"droppedEventsCount": {digits}, ', 1)
    body = f'{{"resourceSpans": [{{"scopeSpans": [{{"spans": [{span}, {json.dumps(good)}]}}]}}]}}'
    batch = decode_otlp_json(body, DecodeOptions())
    assert (len(batch.spans), batch.rejected) == (1, {"malformed_span": 1})
    assert batch.error_message == (
        "1 span rejected; resourceSpans[0].scopeSpans[0].spans[0]: droppedEventsCount:"
        " an integer literal of 5000 digits is not a value this field can hold"
    )
    resource = f'{{"droppedAttributesCount": {digits}}}'
    scopes = f'[{{"spans": [{json.dumps(good)}]}}]'
    in_resource = f'{{"resourceSpans": [{{"resource": {resource}, "scopeSpans": {scopes}}}]}}'
    batch = decode_otlp_json(in_resource, DecodeOptions())
    assert (len(batch.spans), batch.rejected) == (0, {"malformed_span": 1})
    assert batch.error_message == (
        "1 span rejected; resourceSpans[0].scopeSpans[0].spans[0]: its resource cannot be"
        " parsed at droppedAttributesCount: an integer literal of 5000 digits is not a value"
        " this field can hold"
    )
    outside = f'{{"resourceSpans": [{{"schemaUrl": {digits}, "scopeSpans": {scopes}}}]}}'
    refused = r"^resourceSpans\[0\]\.schemaUrl: an integer literal of 5000 digits is not"
    with pytest.raises(DecodeError, match=refused):
        decode_otlp_json(outside, DecodeOptions())


def test_a_body_of_more_values_than_the_largest_body_may_hold_is_refused_unparsed() -> None:
    """``[{},{},...]`` decodes to about 25 times its size: a body may hold one comma (a value
    after an object's or array's first) per 40 bytes of the largest body accepted (recorded
    captures: one per 36 of theirs)."""
    attribute = {"key": "x", "value": {"arrayValue": {"values": [{}] * 100_000}}}
    bomb = json.dumps(_body(attributes=[attribute]))
    with pytest.raises(DecodeLimitError, match=r"^body holds up to 100\d{3} JSON values "):
        parse_otlp_json(bomb, max_values=50_000)
    with pytest.raises(DecodeLimitError, match=r"^body holds up to 100\d{3} JSON values "):
        decode_otlp_json(bomb, DecodeOptions(), max_values=50_000)
    # A small body dense in them is no threat, and valid: it is read (it was refused).
    values = [{"intValue": str(i)} for i in range(1_200)]
    dense = {"key": "ids", "value": {"arrayValue": {"values": values}}}
    (span,) = (
        parse_otlp_json(json.dumps(_body(attributes=[dense])))
        .resource_spans[0]
        .scope_spans[0]
        .spans
    )
    assert len(span.attributes[0].value.array_value.values) == 1_200


def test_ids_that_are_no_hex_reject_their_span_alone_when_decoded() -> None:
    good, bad_span, bad_parent = _body(), _body(spanId="APBnqgupArc="), _body(parentSpanId="abc")
    spans = [good, bad_span, bad_parent, _body(traceId=12)]
    document = good | {
        "resourceSpans": [
            {
                **good["resourceSpans"][0],
                "scopeSpans": [
                    {"spans": [b["resourceSpans"][0]["scopeSpans"][0]["spans"][0] for b in spans]}
                ],
            }
        ]
    }
    batch = decode_otlp_json(json.dumps(document), DecodeOptions())
    assert (batch.received, len(batch.spans)) == (4, 1)
    assert batch.rejected == {
        "invalid_span_id": 1,
        "invalid_parent_span_id": 1,
        "invalid_trace_id": 1,
    }
    assert batch.error_message == (
        "3 spans rejected; resourceSpans[0].scopeSpans[0].spans[1]: spanId"
        ' "APBnqgupArc=" is not hex; resourceSpans[0].scopeSpans[0].spans[2]: parentSpanId'
        ' "abc" has an odd number of hex digits; resourceSpans[0].scopeSpans[0].spans[3]:'
        " traceId 12 is not a hex string"
    )


def test_a_link_id_that_is_no_hex_is_dropped_when_decoded() -> None:
    links = [{"traceId": _TRACE_HEX, "spanId": "nothex!!"}]
    batch = decode_otlp_json(json.dumps(_body(links=links)), DecodeOptions())
    assert (len(batch.spans), batch.rejected) == (1, {})


def test_wrong_field_type_is_an_error_naming_the_field() -> None:
    with pytest.raises(DecodeError, match="startTimeUnixNano"):
        parse_otlp_json(json.dumps(_body(startTimeUnixNano="soon")))


def test_empty_object_is_an_empty_request() -> None:
    assert len(parse_otlp_json("{}").resource_spans) == 0
