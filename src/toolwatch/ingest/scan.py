"""Scan an OTLP ``ExportTraceServiceRequest``: the wanted values of every span, nothing else.

A *scan* is what ``toolwatch.ingest.decode`` builds records from: per ResourceSpans the wanted
resource attributes, and per span a plain tuple (``ScannedSpan``) of its position, ids, name,
kind, times, status code (and an ERROR span's status message, cut), wanted attributes as
Python values (AnyValue converted: str, bool, int, float, hex str for bytes, list, dict;
strings cut to ``max_value_bytes`` UTF-8 bytes on a character boundary, arrays and maps to
``max_value_bytes // 8`` items per level, values nested deeper than 32 levels read as
``None``), at most ``max_span_attributes`` keys of them
with the count of those wanted beyond (dropped: the span is rejected), and its relevant
events (name in ``event_names``, attributes in ``event_keys``). A request nested deeper than
protobuf's own limit (100 messages, an AnyValue about 48 arrays or maps deep, in any
attribute) cannot be scanned at all: ``scan_bytes`` raises ``WireError``, and
``toolwatch.ingest.salvage`` then keeps the spans that parse on their own.

Two scanners give the same scan:

- the **compiled** one (``toolwatch.ingest._wire``, C) reads the wire bytes directly and only
  turns wanted values into Python objects: five to seven times less work per span. It takes every
  plainly encoded request and hands anything unusual (corrupt data, merged fields, groups,
  deep nesting) back to the reference, so protobuf stays the judge of what is valid;
- the **reference** one reads protobuf's own parsed messages. It also serves OTLP/JSON,
  which arrives as a parsed message, and machines where the extension was not built.

``Scanner.for_plan`` picks one. The compiled scanner is used only if its built-in schema
matches protobuf's descriptors field for field (``schema_mismatch``), so an upgraded
``opentelemetry-proto`` cannot silently change what it checks. Pure; safe from any thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol, TypeAlias

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError as ProtobufDecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from toolwatch.ingest.protobuf_pieces import Sifted, entries

__all__ = [
    "COMPILED_UNAVAILABLE",
    "MAX_STATUS_MESSAGE",
    "Decoder",
    "Scan",
    "ScanPlan",
    "ScannedEvent",
    "ScannedSpan",
    "Scanner",
    "WireError",
    "parent_local",
    "schema_mismatch",
    "status_message",
]

log = logging.getLogger(__name__)

#: Which scanner to use: ``auto`` (compiled if available), ``compiled`` (or fail), ``reference``.
Decoder: TypeAlias = Literal["auto", "compiled", "reference"]

#: ``(name, attributes)`` of a relevant span event.
ScannedEvent: TypeAlias = tuple[str, dict[str, Any]]
#: ``(resource, scope, position, trace_id, span_id, parent_span_id, name, kind, start_ns,
#: end_ns, status_code, attributes, attributes_over, events, parent_local, status_message)``:
#: ``resource``
#: indexes ``Scan.resources``; (resource, scope, position) locate the span in the request;
#: ``attributes_over`` counts the wanted attributes beyond ``max_span_attributes``, not kept;
#: ``events`` is ``None`` for a span without events, else its relevant ones;
#: ``parent_local`` is whether the span's flags say its parent is not remote (``parent_local``);
#: ``status_message`` is an ERROR span's status message, cut (``status_message``), else ``None``.
ScannedSpan: TypeAlias = tuple[
    int,
    int,
    int,
    bytes,
    bytes,
    bytes,
    str,
    int,
    int,
    int,
    int,
    dict[str, Any],
    int,
    list[ScannedEvent] | None,
    bool,
    str | None,
]

_MAX_DEPTH: Final = 32  # AnyValue nesting deeper than this is treated as absent
_MIN_ITEM_BYTES: Final = 8  # arrays and maps keep at most max_value_bytes // 8 items per level
_UNCAPPED: Final = 1 << 62  # resources and events keep a few exact keys: no cap


class WireError(ValueError):
    """The body is not a valid ``ExportTraceServiceRequest`` (protobuf's message says why)."""


@dataclass(frozen=True, slots=True)
class ScanPlan:
    """What a scan keeps: exact span attribute keys and key prefixes, resource attribute
    keys, event names and their attribute keys, the size cut of values, and how many
    attributes a span keeps (converting more would cost memory out of proportion to any
    real span: SDKs keep 128 attributes of every kind by default)."""

    span_keys: frozenset[str]
    prefixes: tuple[str, ...]
    resource_keys: frozenset[str]
    event_names: frozenset[str]
    event_keys: frozenset[str]
    max_value_bytes: int
    max_span_attributes: int


@dataclass(frozen=True, slots=True)
class Scan:
    """One request scanned: the wanted attributes of each ResourceSpans, and every span."""

    resources: list[dict[str, Any]]
    spans: list[ScannedSpan]


# --- the reference scanner: protobuf's messages ---------------------------------------------


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


_CONVERTERS: Final[dict[str, Callable[[AnyValue, int, int], Any]]] = {
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


def _attributes(
    pairs: Iterable[KeyValue],
    keys: frozenset[str],
    prefixes: tuple[str, ...],
    limit: int,
    cap: int = _UNCAPPED,
) -> tuple[dict[str, Any], int]:
    """The wanted attributes as Python values, at most ``cap`` keys, and how many with a new
    key and a value were wanted beyond them (a repeated key still takes its last value)."""
    attrs: dict[str, Any] = {}
    over = 0
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
            elif value is None:
                continue
            if len(attrs) >= cap and key not in attrs:
                over += 1
                continue
            attrs[key] = value
    return attrs, over


#: ``Span.flags`` bits (trace.proto ``SpanFlags``): the sender knows whether the span's parent
#: is remote, and it is.
_HAS_IS_REMOTE: Final = 0x100
_IS_REMOTE: Final = 0x200


def parent_local(flags: int) -> bool:
    """Whether a span's flags say its parent is *not* remote: the same process made it, and
    exports it (the OpenTelemetry SDKs set these bits since 2024). ``False`` when they say
    nothing (older SDKs, other senders) or that it is remote."""
    return flags & (_HAS_IS_REMOTE | _IS_REMOTE) == _HAS_IS_REMOTE


#: OTLP ``Status.code`` ERROR.
_STATUS_ERROR: Final = 2
#: The bytes of an ERROR span's status message kept: the OpenAI Agents SDK says there that a
#: guardrail tripped; a stack trace's first lines at most.
MAX_STATUS_MESSAGE: Final = 512


def status_message(code: int, message: str) -> str | None:
    """An ERROR span's status message, its first ``MAX_STATUS_MESSAGE`` bytes (cut before a
    character's first byte); ``None`` for another status or an empty message. The compiled
    scanner keeps the same."""
    if code != _STATUS_ERROR or not message:
        return None
    if len(message) * 4 <= MAX_STATUS_MESSAGE:  # 4 bytes a character at most
        return message
    return message.encode()[:MAX_STATUS_MESSAGE].decode(errors="ignore")


def _reference_scan(request: ExportTraceServiceRequest, plan: ScanPlan) -> Scan:
    limit = plan.max_value_bytes
    resources: list[dict[str, Any]] = []
    spans: list[ScannedSpan] = []
    for r, resource_spans in enumerate(request.resource_spans):
        resource = resource_spans.resource.attributes
        resources.append(_attributes(resource, plan.resource_keys, (), limit)[0])
        for s, scope_spans in enumerate(resource_spans.scope_spans):
            for p, span in enumerate(scope_spans.spans):
                attrs, over = _attributes(
                    span.attributes, plan.span_keys, plan.prefixes, limit, plan.max_span_attributes
                )
                events: list[ScannedEvent] | None = None
                if len(span.events):
                    events = [
                        (event.name, _attributes(event.attributes, plan.event_keys, (), limit)[0])
                        for event in span.events
                        if event.name in plan.event_names
                    ]
                # OTLP Span fields (opentelemetry-proto trace/v1/trace.proto).
                spans.append(
                    (
                        r,
                        s,
                        p,
                        span.trace_id,
                        span.span_id,
                        span.parent_span_id,
                        span.name,
                        span.kind,
                        span.start_time_unix_nano,
                        span.end_time_unix_nano,
                        span.status.code,
                        attrs,
                        over,
                        events,
                        parent_local(span.flags),
                        status_message(span.status.code, span.status.message),
                    )
                )
    return Scan(resources, spans)


# --- the compiled scanner ------------------------------------------------------------------

_KINDS: Final = {
    FieldDescriptor.TYPE_STRING: "string",
    FieldDescriptor.TYPE_BYTES: "bytes",
    FieldDescriptor.TYPE_MESSAGE: "message",
    FieldDescriptor.TYPE_FIXED64: "fixed64",
    FieldDescriptor.TYPE_DOUBLE: "fixed64",
    FieldDescriptor.TYPE_FIXED32: "fixed32",
    FieldDescriptor.TYPE_SFIXED64: "fixed64",
    FieldDescriptor.TYPE_SFIXED32: "fixed32",
    FieldDescriptor.TYPE_FLOAT: "fixed32",
}  # every other field type is a varint on the wire


def _descriptor_schema() -> dict[str, dict[int, tuple[str, str]]]:
    """Every message reachable from ExportTraceServiceRequest: ``{full name: {number:
    (field name, wire kind)}}``, the shape of ``_wire.SCHEMA``."""
    schema: dict[str, dict[int, tuple[str, str]]] = {}
    pending: list[Descriptor] = [ExportTraceServiceRequest.DESCRIPTOR]
    while pending:
        message = pending.pop()
        if message.full_name in schema:
            continue
        schema[message.full_name] = {
            f.number: (f.name, _KINDS.get(f.type, "varint")) for f in message.fields
        }
        pending.extend(f.message_type for f in message.fields if f.message_type is not None)
    return schema


class _CompiledPlan(Protocol):
    def scan(self, body: bytes) -> tuple[list[dict[str, Any]], list[ScannedSpan]] | None: ...


#: ``_wire.sift(body, consume)``: a dense request told apart, its pieces
#: (``protobuf_pieces.Sifted``) handed to ``consume`` a batch at a time; what is wrong, or
#: ``None``.
Sift: TypeAlias = Callable[[bytes, Callable[[list[Sifted]], object]], "str | None"]


def _load_compiled() -> tuple[
    Callable[..., _CompiledPlan] | None, Callable[[bytes], int], Sift | None, str
]:
    """The compiled ``Plan`` type, or ``None`` and why it cannot be used; the census
    (``protobuf_pieces.entries``, compiled where the extension is built); the sift (``None``
    where it is not)."""
    try:
        from toolwatch.ingest import _wire  # noqa: PLC0415 - optional extension module
    except ImportError as exc:
        return None, entries, None, f"the extension toolwatch.ingest._wire is not built ({exc})"
    problem = schema_mismatch(_wire.SCHEMA)
    if problem is not None:
        reason = f"the extension's schema differs from opentelemetry-proto's: {problem}"
        return None, entries, None, reason
    plan_type: Callable[..., _CompiledPlan] = _wire.Plan
    return plan_type, _wire.census, _wire.sift, ""


def schema_mismatch(compiled: dict[str, dict[int, tuple[str, str]]]) -> str | None:
    """What differs between a compiled scanner's schema and protobuf's, or ``None``."""
    expected = _descriptor_schema()
    for name in sorted(expected.keys() | compiled.keys()):
        have, want = compiled.get(name), expected.get(name)
        if have != want:
            return f"{name}: compiled {have}, opentelemetry-proto {want}"
    return None


_COMPILED, _CENSUS, _SIFT, COMPILED_UNAVAILABLE = _load_compiled()
#: ``COMPILED_UNAVAILABLE`` is why the compiled scanner cannot be used ("" when it can).


class Scanner:
    """Scans requests for one plan with the chosen scanner. Build with ``for_plan``."""

    __slots__ = ("_compiled", "plan")

    def __init__(self, plan: ScanPlan, compiled: _CompiledPlan | None) -> None:
        self.plan = plan
        self._compiled = compiled

    @classmethod
    def for_plan(cls, plan: ScanPlan, decoder: Decoder = "auto") -> Scanner:
        """Raises ``RuntimeError`` naming the reason when ``decoder`` is ``compiled`` and the
        compiled scanner cannot be used."""
        if decoder == "reference" or (_COMPILED is None and decoder == "auto"):
            return cls(plan, None)
        if _COMPILED is None:
            raise RuntimeError(f"ingest.decoder is 'compiled', but {COMPILED_UNAVAILABLE}")
        compiled = _COMPILED(
            span_keys=plan.span_keys,
            prefixes=plan.prefixes,
            resource_keys=plan.resource_keys,
            event_names=plan.event_names,
            event_keys=plan.event_keys,
            max_value_bytes=plan.max_value_bytes,
            max_span_attributes=plan.max_span_attributes,
        )
        return cls(plan, compiled)

    @property
    def compiled(self) -> bool:
        return self._compiled is not None

    @staticmethod
    def entries(body: bytes) -> int:
        """The resources, scopes and spans of a binary request, counted from its framing up
        to where it breaks (``protobuf_pieces.entries``, compiled where the extension is
        built, whichever scanner reads the spans)."""
        return _CENSUS(body)

    @staticmethod
    def sift() -> Sift | None:
        """The compiled ``_wire.sift``, which tells a dense request apart (``protobuf_pieces``:
        ``Sifted``); ``None`` where the extension is not built (``protobuf_pieces.pieces`` then
        reads it, whichever scanner reads the spans)."""
        return _SIFT

    def scan_bytes(self, body: bytes) -> Scan:
        """Scan a binary protobuf request; raises ``WireError`` when it is not valid."""
        if self._compiled is not None:
            found = self._compiled.scan(body)
            if found is not None:
                return Scan(*found)
        try:
            request = ExportTraceServiceRequest.FromString(body)
        except ProtobufDecodeError as exc:
            raise WireError(str(exc)) from exc
        return _reference_scan(request, self.plan)

    def scan_message(self, request: ExportTraceServiceRequest) -> Scan:
        """Scan an already parsed request (OTLP/JSON, replay): always the reference."""
        return _reference_scan(request, self.plan)


if _COMPILED is None:
    log.debug("compiled OTLP scanner unavailable: %s", COMPILED_UNAVAILABLE)
