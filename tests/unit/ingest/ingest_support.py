"""Builders of OTLP trace protobufs for the ingest tests: by hand, by the wire format, and any
request an SDK could send (``sdk_requests``, a Hypothesis strategy); and a body's whole
decode (``whole_decode``), what a decode in pieces must equal."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from toolwatch.conventions import ATTRIBUTE_KEYS, EVENT_ATTRIBUTE_KEYS, EVENT_NAMES
from toolwatch.ingest.decode import _Decoder
from toolwatch.ingest.decode_requests import decode_protobuf, decode_request, scanner
from toolwatch.ingest.decode_types import DecodedBatch, DecodeOptions
from toolwatch.ingest.salvage import salvage
from toolwatch.ingest.scan import WireError
from toolwatch.model import SpanRecord

REFERENCE_KEYS = frozenset({"toolwatch.case_id", "shadow.pair"})
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


# -- a body decoded whole -----------------------------------------------------------------


def whole_decode(body: bytes, options: DecodeOptions) -> DecodedBatch:
    """``decode_protobuf``'s whole decode, whatever the body's density."""
    try:
        return _Decoder(options).scan(scanner(options).scan_bytes(body))
    except WireError:
        salvaged = salvage(body)
        assert salvaged is not None
        return decode_request(*salvaged[:1], options, salvaged[1])


# -- any request an SDK could send ---------------------------------------------------------

_KEYS = sorted(ATTRIBUTE_KEYS | REFERENCE_KEYS)
_keys = st.one_of(
    st.sampled_from(_KEYS),
    st.sampled_from(["llm.output_messages.", "gen_ai.completion."]).flatmap(
        lambda prefix: st.from_regex(r"[0-9]{1,2}\.message\.[a-z_.]{1,12}", fullmatch=True).map(
            lambda rest: prefix + rest
        )
    ),
    st.text(max_size=12),
)
_scalars = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=st.characters(min_codepoint=0x80, exclude_categories=["Cs"]), max_size=30),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.binary(max_size=24),
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def _attributes(draw: st.DrawFn, keys: st.SearchStrategy[str] = _keys) -> list[KeyValue]:
    pairs = draw(st.lists(st.tuples(keys, _values | st.just(AnyValue())), max_size=8))
    return [KeyValue(key=key, value=any_value(value)) for key, value in pairs]


@st.composite
def _spans(draw: st.DrawFn) -> Span:
    result = span(
        draw(st.text(max_size=20)),
        trace_id=draw(st.sampled_from([b"\x01" * 16, b"\x00" * 16, b"\x02" * 15, b""])),
        span_id=draw(st.sampled_from([b"\x03" * 8, b"\x04" * 8, b"\x00" * 8, b"\x05"])),
        parent=draw(st.sampled_from([b"", b"\x06" * 8, b"\x00" * 8, b"\x07" * 3])),
        status=draw(st.integers(0, 2)),
        kind=draw(st.integers(0, 5)),
        start=draw(st.integers(0, 2**64 - 1)),
        end=draw(st.integers(0, 2**64 - 1)),
    )
    result.attributes.extend(draw(_attributes()))
    event_keys = st.sampled_from(sorted(EVENT_ATTRIBUTE_KEYS)) | st.text(max_size=6)
    for _ in range(draw(st.integers(0, 3))):
        name = draw(st.sampled_from(sorted(EVENT_NAMES)) | st.text(max_size=8))
        added = result.events.add(name=name, time_unix_nano=draw(st.integers(0, 2**64 - 1)))
        added.attributes.extend(draw(_attributes(event_keys)))
    if draw(st.booleans()):
        result.links.add(trace_id=b"\x09" * 16, span_id=b"\x0a" * 8, trace_state="k=v")
    result.trace_state = draw(st.text(max_size=8))
    result.flags = draw(st.integers(0, 2**32 - 1))
    # Some past the 512 bytes an ERROR span's message keeps, characters of 1 to 4 bytes.
    result.status.message = draw(st.text(max_size=8) | st.text(min_size=120, max_size=300))
    return result


@st.composite
def sdk_requests(draw: st.DrawFn) -> ExportTraceServiceRequest:
    """Any request an SDK could send: one to three resources of scopes of spans, their ids
    valid or not, attributes of wanted keys and others, any values, events and links."""
    message = ExportTraceServiceRequest()
    for _ in range(draw(st.integers(1, 3))):
        resource_spans = message.resource_spans.add(schema_url=draw(st.text(max_size=6)))
        resource_keys = st.sampled_from(["service.name", *sorted(REFERENCE_KEYS)]) | _keys
        resource_spans.resource.attributes.extend(draw(_attributes(resource_keys)))
        resource_spans.resource.dropped_attributes_count = draw(st.integers(0, 3))
        for _ in range(draw(st.integers(0, 2))):
            scope_spans = resource_spans.scope_spans.add()
            scope_spans.scope.name = draw(st.text(max_size=8))
            scope_spans.scope.attributes.extend(draw(_attributes()))
            scope_spans.spans.extend(draw(st.lists(_spans(), max_size=3)))
    return message
