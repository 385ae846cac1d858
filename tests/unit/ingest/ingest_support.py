"""Builders of OTLP trace protobufs for the ingest tests."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from toolwatch.ingest.decode_requests import decode_protobuf
from toolwatch.ingest.decode_types import DecodedBatch, DecodeOptions
from toolwatch.model import SpanRecord

TRACE_ID = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")
ROOT_ID = bytes.fromhex("b7ad6b7169203331")
_span_ids = itertools.count(1)


def any_value(value: Any) -> AnyValue:
    """A Python value as an OTLP AnyValue (str, bool, int, float, bytes, list, dict)."""
    if isinstance(value, AnyValue):
        return value
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    if isinstance(value, list):
        result = AnyValue()
        result.array_value.values.extend(any_value(item) for item in value)
        return result
    result = AnyValue()
    result.kvlist_value.values.extend(key_values(value))
    return result


def key_values(attrs: Mapping[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=key, value=any_value(value)) for key, value in attrs.items()]


def event(name: str, attrs: Mapping[str, Any] | None = None, time_ns: int = 1_500) -> Span.Event:
    return Span.Event(name=name, time_unix_nano=time_ns, attributes=key_values(attrs or {}))


def span(
    name: str = "span",
    attrs: Mapping[str, Any] | None = None,
    *,
    events: Iterable[Span.Event] = (),
    trace_id: bytes = TRACE_ID,
    span_id: bytes | None = None,
    parent: bytes = ROOT_ID,
    status: int = 0,
    kind: int = 1,
    start: int = 1_000,
    end: int = 2_000,
) -> Span:
    """A span; a fresh span id unless given, parented under ``ROOT_ID`` unless given."""
    result = Span(
        trace_id=trace_id,
        span_id=span_id if span_id is not None else next(_span_ids).to_bytes(8, "big"),
        parent_span_id=parent,
        name=name,
        kind=kind,  # type: ignore[arg-type]
        start_time_unix_nano=start,
        end_time_unix_nano=end,
        attributes=key_values(attrs or {}),
        events=list(events),
    )
    result.status.code = status  # type: ignore[assignment]
    return result


def request(
    *spans: Span,
    resource: Mapping[str, Any] | None = None,
    scopes: Sequence[Sequence[Span]] | None = None,
) -> ExportTraceServiceRequest:
    """One ResourceSpans holding ``spans`` in one scope (or the given ``scopes``)."""
    resource_spans = ResourceSpans(resource=Resource(attributes=key_values(resource or {})))
    for scope in scopes if scopes is not None else [spans]:
        resource_spans.scope_spans.append(ScopeSpans(spans=list(scope)))
    return ExportTraceServiceRequest(resource_spans=[resource_spans])


def decode_bytes(message: ExportTraceServiceRequest, options: DecodeOptions) -> DecodedBatch:
    """Decode ``message`` from its wire bytes, as the receivers do, with the scanner the
    options choose; asserts that the reference scanner decodes the same bytes the same."""
    body = message.SerializeToString()
    batch = decode_protobuf(body, options)
    assert batch == decode_protobuf(body, dataclasses.replace(options, decoder="reference"))
    return batch


def decode(*spans: Span, options: DecodeOptions | None = None, **kw: Any) -> DecodedBatch:
    return decode_bytes(request(*spans, **kw), options or DecodeOptions())


def decode_one(one: Span, options: DecodeOptions | None = None, **kw: Any) -> SpanRecord:
    """The single record decoded from ``one``; fails if it was rejected."""
    batch = decode(one, options=options, **kw)
    assert batch.rejected == {}, batch.error_message
    (record,) = batch.spans
    return record


# -- the wire format, by hand (encodings protobuf's own API cannot produce) --------------------


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload
