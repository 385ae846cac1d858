"""Decode an OTLP ``ExportTraceServiceRequest`` into ``SpanRecord``s, in one pass.

This is the only module that reads the OTLP trace protobuf types; everything after it works
on the project's records. For each span it validates the ids (OTLP: a trace id is 16 bytes,
a span id 8 bytes, neither all zero; a parent span id is empty or 8 bytes), converts only the
attributes a convention reads (``toolwatch.conventions.ATTRIBUTE_KEYS`` / ``_PREFIXES`` plus
the configured reference keys), decodes span events only when a recognizer asks, and lets
``toolwatch.conventions.recognize`` classify the span and extract its role's fields.

Invalid spans are rejected and counted by reason; the rest of the request is kept (OTLP
partial success). A span that ends before it starts is kept with its end clamped to its
start: clock skew should not cost a tool call. Pure functions; safe to call from any thread.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from google.protobuf.message import DecodeError as ProtobufDecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from toolwatch.conventions import (
    ATTRIBUTE_KEYS,
    ATTRIBUTE_PREFIXES,
    EVENT_ATTRIBUTE_KEYS,
    EVENT_NAMES,
    Recognition,
    SpanEvent,
    recognize,
)
from toolwatch.model import SpanRecord

__all__ = ["DecodeError", "DecodeOptions", "DecodedBatch", "decode_protobuf", "decode_request"]

_SERVICE_NAME = "service.name"
_MAX_DEPTH = 32  # AnyValue nesting deeper than this is treated as absent
_MIN_ITEM_BYTES = 8  # arrays and maps keep at most max_value_bytes // 8 items per level
_ITEM_BYTES = 64  # what CPython spends on one converted item (object, list slot, dict entry)
_MAX_REPORTED = 3  # offenders named in the partial-success message
_SPAN_OVERHEAD_BYTES = 512  # a SpanRecord, its ids and small fields, for the buffer's bound
_ZERO_TRACE_ID = bytes(16)
_ZERO_SPAN_ID = bytes(8)


@dataclass(frozen=True, slots=True)
class DecodeOptions:
    """What to read besides the conventions' keys, and how much of each value to keep."""

    reference_keys: frozenset[str] = frozenset()  # copied into SpanRecord.reference_keys
    max_value_bytes: int = 65_536  # longer strings are truncated (UTF-8 bytes), arrays cut

    def __post_init__(self) -> None:
        if self.max_value_bytes < 1:
            raise ValueError(f"max_value_bytes must be positive, got {self.max_value_bytes}")


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    """The valid spans of one request and the accounting of the rest."""

    spans: tuple[SpanRecord, ...]  # the valid spans
    received: int  # spans in the request
    rejected: Mapping[str, int]  # reason -> count, e.g. {"invalid_trace_id": 2}
    error_message: str | None  # for OTLP partial_success.error_message


class DecodeError(ValueError):
    """The whole body is unusable; the message names the field and the reason."""


# --- AnyValue -> Python -------------------------------------------------------------------


def _truncate(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, on a character boundary."""
    if len(text) <= limit >> 2:  # even 4-byte characters fit: skip the encode
        return text
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore")


def _array(value: AnyValue, limit: int, depth: int) -> Any:
    """Like a long string, a long array (or map, below) is cut: converting 10^5 items would
    cost time and memory out of proportion to what any convention reads from it."""
    if depth >= _MAX_DEPTH:
        return None
    items = value.array_value.values[: limit // _MIN_ITEM_BYTES]
    return [_value(item, limit, depth + 1) for item in items]


def _kvlist(value: AnyValue, limit: int, depth: int) -> Any:
    if depth >= _MAX_DEPTH:
        return None
    pairs = value.kvlist_value.values[: limit // _MIN_ITEM_BYTES]
    return {pair.key: _value(pair.value, limit, depth + 1) for pair in pairs}


_CONVERTERS: dict[str, Callable[[AnyValue, int, int], Any]] = {
    "bool_value": lambda value, limit, depth: value.bool_value,
    "int_value": lambda value, limit, depth: value.int_value,
    "double_value": lambda value, limit, depth: value.double_value,
    "bytes_value": lambda value, limit, depth: _truncate(value.bytes_value.hex(), limit),
    "array_value": _array,
    "kvlist_value": _kvlist,
}


def _value(value: AnyValue, limit: int, depth: int) -> Any:
    """An AnyValue as Python: str, bool, int, float, hex str (bytes), list, dict or None."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return _truncate(value.string_value, limit)
    convert = _CONVERTERS.get(kind) if kind is not None else None
    return convert(value, limit, depth) if convert is not None else None


def _approx_size(value: Any) -> int:
    """Rough bytes CPython holds for a converted structured value: its strings' characters
    plus ``_ITEM_BYTES`` per item. Counting 8 per item let 10^5 small items hold ten times
    what the buffer's byte bound was told."""
    if isinstance(value, str):
        return len(value) + _ITEM_BYTES
    if isinstance(value, list):
        return sum(_approx_size(item) for item in value) + _ITEM_BYTES
    if isinstance(value, dict):
        items = sum(len(key) + _ITEM_BYTES + _approx_size(item) for key, item in value.items())
        return items + _ITEM_BYTES
    return _ITEM_BYTES


def _attributes(
    pairs: Iterable[KeyValue], keys: frozenset[str], prefixes: tuple[str, ...], limit: int
) -> tuple[dict[str, Any], int]:
    """The wanted attributes as Python values, and the approximate bytes kept."""
    attrs: dict[str, Any] = {}
    size = 0
    quarter = limit >> 2
    for pair in pairs:
        key = pair.key
        if key in keys or key.startswith(prefixes):
            any_value = pair.value
            # Most wanted values are non-empty strings: one field read, no WhichOneof.
            value = any_value.string_value or _value(any_value, limit, 0)
            if type(value) is str:
                if len(value) > quarter:
                    value = _truncate(value, limit)
                size += len(value)
            elif value is None:
                continue
            else:
                size += _approx_size(value)
            attrs[key] = value
    return attrs, size


class _EventLoader:
    """Decodes a span's relevant events on first call (``conventions.EventSource``)."""

    __slots__ = ("_events", "_limit", "_loaded", "size")

    def __init__(self, events: Sequence[Span.Event], limit: int) -> None:
        self._events = events
        self._limit = limit
        self._loaded: tuple[SpanEvent, ...] | None = None
        self.size = 0

    def __call__(self) -> tuple[SpanEvent, ...]:
        if self._loaded is None:
            self._loaded = tuple(self._decode(e) for e in self._events if e.name in EVENT_NAMES)
        return self._loaded

    def _decode(self, event: Span.Event) -> SpanEvent:
        attrs, size = _attributes(event.attributes, EVENT_ATTRIBUTE_KEYS, (), self._limit)
        self.size += size
        return SpanEvent(event.name, attrs)


# --- ids ----------------------------------------------------------------------------------


def _id_problem(span: Span) -> tuple[str, str] | None:
    """``(reason, detail)`` when the span's ids break OTLP's rules, else ``None``.

    opentelemetry-proto ``trace/v1/trace.proto``: a trace id is 16 bytes and a span id 8
    bytes, all-zero ones are invalid; an empty parent span id marks a root span.
    """
    trace_id, span_id, parent = span.trace_id, span.span_id, span.parent_span_id
    if len(trace_id) != 16:
        return "invalid_trace_id", f"trace_id must be 16 bytes, got {len(trace_id)}"
    if trace_id == _ZERO_TRACE_ID:
        return "invalid_trace_id", "trace_id must not be all zero"
    if len(span_id) != 8:
        return "invalid_span_id", f"span_id must be 8 bytes, got {len(span_id)}"
    if span_id == _ZERO_SPAN_ID:
        return "invalid_span_id", "span_id must not be all zero"
    if parent and len(parent) != 8:
        detail = f"parent_span_id must be empty or 8 bytes, got {len(parent)}"
        return "invalid_parent_span_id", detail
    return None


# --- the request --------------------------------------------------------------------------


class _Resource(NamedTuple):
    service: str | None
    references: dict[str, str]
    reference_items: tuple[tuple[str, str], ...]  # ``references``, sorted


def _reference_text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


@functools.lru_cache(maxsize=16)
def _wanted_keys(reference_keys: frozenset[str]) -> frozenset[str]:
    return ATTRIBUTE_KEYS | reference_keys


class _Decoder:
    """One request's decoding state. Not shared between requests or threads."""

    __slots__ = (
        "_keys",
        "_limit",
        "_references",
        "_resource_keys",
        "offenders",
        "received",
        "rejected",
        "spans",
    )

    def __init__(self, options: DecodeOptions) -> None:
        self._keys = _wanted_keys(options.reference_keys)
        self._references = tuple(sorted(options.reference_keys))
        self._resource_keys = options.reference_keys | {_SERVICE_NAME}
        self._limit = options.max_value_bytes
        self.spans: list[SpanRecord] = []
        self.received = 0
        self.rejected: dict[str, int] = {}
        self.offenders: list[str] = []

    def request(self, request: ExportTraceServiceRequest) -> None:
        for r, resource_spans in enumerate(request.resource_spans):
            resource = self._resource(resource_spans.resource)
            for s, scope_spans in enumerate(resource_spans.scope_spans):
                self.received += len(scope_spans.spans)
                for p, span in enumerate(scope_spans.spans):
                    problem = self._span(span, resource)
                    if problem is not None:
                        self._reject(problem, f"resource_spans[{r}].scope_spans[{s}].spans[{p}]")

    def _resource(self, resource: Resource) -> _Resource:
        attrs, _ = _attributes(resource.attributes, self._resource_keys, (), self._limit)
        service = attrs.get(_SERVICE_NAME)
        references = {
            key: _reference_text(value) for key, value in attrs.items() if key in self._references
        }
        service_name = service if isinstance(service, str) else None
        return _Resource(service_name, references, tuple(sorted(references.items())))

    def _reject(self, problem: tuple[str, str], path: str) -> None:
        reason, detail = problem
        self.rejected[reason] = self.rejected.get(reason, 0) + 1
        self.offenders.append(f"{path}: {detail}")

    def _reference_keys(
        self, attrs: Mapping[str, Any], resource: _Resource
    ) -> tuple[tuple[str, str], ...]:
        """Configured keys on the span, else on its resource (the span's value wins)."""
        if not self._references:
            return ()
        own = {key: _reference_text(attrs[key]) for key in self._references if key in attrs}
        if not own:
            return resource.reference_items
        return tuple(sorted({**resource.references, **own}.items()))

    def _span(self, span: Span, resource: _Resource) -> tuple[str, str] | None:
        """Decode one span into ``self.spans``; ``(reason, detail)`` if it is rejected."""
        problem = _id_problem(span)
        if problem is not None:
            return problem
        attrs, size = _attributes(span.attributes, self._keys, ATTRIBUTE_PREFIXES, self._limit)
        events = _EventLoader(span.events, self._limit) if len(span.events) else None
        try:
            recognition = recognize(span.name, span.status.code, attrs, events)
        except Exception as exc:  # a recognizer bug must cost one span, not the request
            return "malformed_attributes", f"attributes could not be read ({exc!r:.80})"
        if events is not None:
            size += events.size
        references = self._reference_keys(attrs, resource)
        self.spans.append(_record(span, resource.service, recognition, references, size))
        return None

    def batch(self) -> DecodedBatch:
        return DecodedBatch(tuple(self.spans), self.received, self.rejected, self._message())

    def _message(self) -> str | None:
        total = sum(self.rejected.values())
        if not total:
            return None
        named = "; ".join(self.offenders[:_MAX_REPORTED])
        more = f"; and {total - _MAX_REPORTED} more" if total > _MAX_REPORTED else ""
        return f"{total} span{'s' if total != 1 else ''} rejected; {named}{more}"


def _record(
    span: Span,
    service: str | None,
    recognition: Recognition,
    references: tuple[tuple[str, str], ...],
    payload_bytes: int,
) -> SpanRecord:
    role, convention, fields = recognition
    name = span.name
    start = span.start_time_unix_nano
    parent = span.parent_span_id
    return SpanRecord(
        trace_id=span.trace_id,
        span_id=span.span_id,
        # OTLP: an empty parent marks a root; an all-zero one is read the same way.
        parent_span_id=parent if parent and parent != _ZERO_SPAN_ID else None,
        name=name,
        kind=span.kind,
        start_ns=start,
        end_ns=max(span.end_time_unix_nano, start),  # clock skew: clamp, keep the span
        status_code=span.status.code,
        service=service,
        role=role,
        convention=convention,
        reference_keys=references,
        size_bytes=_SPAN_OVERHEAD_BYTES + len(name) + payload_bytes,
        **fields,
    )


def decode_request(request: ExportTraceServiceRequest, options: DecodeOptions) -> DecodedBatch:
    """Decode every span of ``request``; invalid spans are counted, never raised.

    ``parent_span_id`` of the records is ``None`` for roots (empty or all-zero parent).
    """
    decoder = _Decoder(options)
    decoder.request(request)
    return decoder.batch()


def decode_protobuf(body: bytes, options: DecodeOptions) -> DecodedBatch:
    """Parse a binary protobuf ``ExportTraceServiceRequest`` and decode it.

    Raises ``DecodeError`` when ``body`` is not a valid message.
    """
    try:
        request = ExportTraceServiceRequest.FromString(body)
    except ProtobufDecodeError as exc:
        raise DecodeError(f"body is not a valid ExportTraceServiceRequest: {exc}") from exc
    return decode_request(request, options)
