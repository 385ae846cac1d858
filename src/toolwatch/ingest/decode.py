"""Decode the scanned spans of an OTLP ``ExportTraceServiceRequest`` into ``SpanRecord``s:
the per-span loop (``_Decoder``).

``toolwatch.ingest.scan`` reads the request (compiled from the wire bytes, or from protobuf's
parsed message) and keeps only what a convention reads: the attributes in
``toolwatch.conventions.ATTRIBUTE_KEYS`` / ``_PREFIXES`` plus the configured reference keys,
the relevant span events, and ``service.name`` and the reference keys of each resource. This
module validates each span's ids (OTLP: a trace id is 16 bytes, a span id 8 bytes, neither
all zero; a parent span id is empty or 8 bytes), lets ``toolwatch.conventions.recognize``
classify the span and extract its role's fields, builds its record and counts what it holds
(``_held_size``).

Invalid spans are rejected and counted by reason; the rest of the request is kept (OTLP
partial success). The trace ids of rejected spans that have a valid one are handed on
(``DecodedBatch.rejected_traces``): their runs miss a span, and are judged incomplete. A
span that ends before it starts is kept with its end clamped to its start: clock skew should
not cost a tool call.

Its siblings: ``decode_types`` holds what decoding takes and gives (``DecodeOptions``,
``DecodedBatch``, the errors); ``decode_requests`` holds the ways a request comes in
(``decode_request``, ``decode_protobuf`` whole or piece by piece, ``PieceDecoder``), each of
which feeds this module's ``_Decoder``. Everything run per span stays here: a per-span
helper called across modules is a slower call once compiled. Pure functions; safe to call
from any thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Final, NamedTuple

from toolwatch.conventions import (
    Attributes,
    EventSource,
    Recognition,
    SpanEvent,
    recognize,
)
from toolwatch.conventions.history import NO_HISTORY, read_history
from toolwatch.ingest.decode_types import DecodedBatch, DecodeOptions, IdProblems
from toolwatch.ingest.protobuf_pieces import SIFTED_REASONS
from toolwatch.ingest.scan import Scan, ScannedEvent, ScannedSpan
from toolwatch.jsontext import held_size, text_size
from toolwatch.model import RequestedCall, SpanRecord, SpanRole

__all__ = ["Recognizer"]


_SERVICE_NAME: Final = "service.name"


_MAX_REPORTED: Final = 3  # offenders named in the partial-success message


# What one buffered span costs besides its values: the record, its ids and small fields, and
# its share of the buffer's bookkeeping. Measured, `make bench` (memory): 1,048 B resident
# per buffered GenAI span without argument values at first, 821 B since spans share their
# trace id (`d89e066`); 512 had the byte bound 40% optimistic. Kept on the safe side.
_SPAN_OVERHEAD_BYTES: Final = 1024


# What one requested call of a model output holds besides its name and arguments: the
# record, its id, its slot in the span's tuple (measured: 168 bytes a call of 1,000 with
# one-letter names, since the record's hosted flag). Its arguments were parsed from the
# output's JSON at ingest, and parsed JSON can hold far more than its text (``[{},{},...]``:
# about 70 bytes of objects per 3 characters), so they are counted as held, not as sent.
_REQUEST_OVERHEAD_BYTES: Final = 176


# What one configured reference key (``SpanRecord.reference_keys``) holds besides its value's
# characters: its pair (56 bytes), the pair's slot (8), its value's string header (49) and the
# tuple of pairs' own header (40), counted with each pair (153 for one). The key is the
# configured string, shared by every record.
_REFERENCE_OVERHEAD_BYTES: Final = 160


# What one tool-call id an input history names holds besides its characters: its string's
# header (49 bytes) and its slot in the span's tuple (8), the tuple's own header (40) counted
# with each (at most ``history.MAX_CALL_IDS`` a span).
_HISTORY_ID_OVERHEAD_BYTES: Final = 104


_ZERO_TRACE_ID: Final = bytes(16)


_ZERO_SPAN_ID: Final = bytes(8)


def _held_size(record: SpanRecord) -> int:
    """Rough bytes a buffered span holds: the record (``_SPAN_OVERHEAD_BYTES``) and what its
    fields hold, parsed JSON counted as held, not as sent (see ``_REQUEST_OVERHEAD_BYTES``).
    Counted from the record, not from the attributes it was read from: those are let go once
    the span is recognized (while its request is decoded, the request slots bound them).
    Field by field, not a loop over a tuple of them (a generic iterator when compiled): it
    runs for every span.

    The resource's ``service.name`` and the configured reference keys (``DecodeOptions``)
    are counted too: the sender sets them, up to ``max_value_bytes`` each, and a request of
    one span per resource gives each span its own. A resource's values are one string shared
    by its spans of one request, yet each of those spans is charged them whole: the spans
    leave the buffer a trace at a time or are dropped (duplicates, limits), and the string is
    held while any of them is, so charging it to one span, or a share to each, would
    undercount once those left. That costs a service name's characters a span (tens of bytes
    against ``_SPAN_OVERHEAD_BYTES``, whose measurement shared the name: its header is in
    the margin)."""
    size = _SPAN_OVERHEAD_BYTES + text_size(record.name) + _value_size(record.arguments)
    size += _value_size(record.result)
    if record.service is not None:
        size += text_size(record.service)  # a width check: a long name may be CJK or emoji
    for _, value in record.reference_keys:  # none unless golden cases or shadow read them
        size += _REFERENCE_OVERHEAD_BYTES + text_size(value)
    if record.output_text is not None:
        size += text_size(record.output_text)  # the one long text
    size += _text_size(record.tool_name) + _text_size(record.call_id)
    size += _text_size(record.error_type) + _text_size(record.refusal)
    size += _text_size(record.agent_name) + _text_size(record.model)
    size += _text_size(record.conversation_id) + _text_size(record.handoff_to)
    for reason in record.finish_reasons:
        size += text_size(reason)
    for call_id in record.prior_call_ids:  # none unless histories are read
        size += _HISTORY_ID_OVERHEAD_BYTES + text_size(call_id)
    requested: Sequence[object] = record.output_tool_calls  # each checked: a test's may not be
    for call in requested:
        size += _REQUEST_OVERHEAD_BYTES
        if isinstance(call, RequestedCall):
            size += text_size(call.name) + _text_size(call.call_id)
            size += _value_size(call.arguments)
    return size


def _text_size(text: str | None) -> int:
    """``text_size`` of a text that may be absent. Short ones too: a sender sets each up to
    ``max_value_bytes``, and one in emoji holds four bytes a character."""
    return 0 if text is None else text_size(text)


def _value_size(value: Any) -> int:
    """A value as sent (usually text: its characters) or parsed (``held_size``)."""
    if type(value) is str:
        text: str = value
        return text_size(text)
    return 0 if value is None else held_size(value)


_log = logging.getLogger(__name__)


_history_failures = [0]  # model spans whose history reader raised (logged at the first)


def _history_failed() -> None:
    """A history reader raised on a model span (a defect: no input should): the span keeps
    no history, and the first such failure of the process is logged with its traceback."""
    _history_failures[0] += 1
    if _history_failures[0] == 1:
        _log.exception(
            "toolwatch: a model span's input history could not be read (a defect;"
            " its spans are judged without the evidence, logged once)"
        )


class _Events:
    """A span's relevant events as the recognizers ask for them (``conventions.EventSource``),
    made only if one does."""

    __slots__ = ("_loaded", "_scanned")

    def __init__(self, scanned: Sequence[ScannedEvent]) -> None:
        self._scanned = scanned
        self._loaded: tuple[SpanEvent, ...] | None = None

    def __call__(self) -> tuple[SpanEvent, ...]:
        if self._loaded is None:
            self._loaded = tuple(SpanEvent(name, attrs) for name, attrs in self._scanned)
        return self._loaded


# --- ids ----------------------------------------------------------------------------------


def _id_problem(trace_id: bytes, span_id: bytes, parent: bytes) -> tuple[str, str] | None:
    """``(reason, detail)`` when the span's ids break OTLP's rules, else ``None``.

    opentelemetry-proto ``trace/v1/trace.proto``: a trace id is 16 bytes and a span id 8
    bytes, all-zero ones are invalid; an empty parent span id marks a root span.
    """
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


#: The ids' fields as OTLP/JSON names them (proto3 JSON: lowerCamelCase).
_JSON_ID_NAMES: Final = {
    "trace_id": "traceId",
    "span_id": "spanId",
    "parent_span_id": "parentSpanId",
}


# --- the request --------------------------------------------------------------------------


class _Resource(NamedTuple):
    service: str | None
    references: dict[str, str]
    reference_items: tuple[tuple[str, str], ...]  # ``references``, sorted


def _reference_text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def _resource(attrs: dict[str, Any], references: Sequence[str]) -> _Resource:
    service = attrs.get(_SERVICE_NAME)
    found = {key: _reference_text(attrs[key]) for key in references if key in attrs}
    service_name = service if isinstance(service, str) else None
    return _Resource(service_name, found, tuple(sorted(found.items())))


#: ``conventions.recognize``'s signature (a decoder takes another in tests).
Recognizer = Callable[[str, int, Attributes, EventSource, str | None], Recognition]


class _Decoder:
    """One request's decoding state. Not shared between requests or threads."""

    __slots__ = (
        "_cap",
        "_histories",
        "_json_names",
        "_known",
        "_recognize",
        "_references",
        "offenders",
        "received",
        "rejected",
        "rejected_traces",
        "spans",
    )

    def __init__(
        self,
        options: DecodeOptions,
        recognizer: Recognizer = recognize,
        known: IdProblems | None = None,
        json_names: bool = False,
    ) -> None:
        self._cap = options.max_span_attributes
        self._histories = options.read_histories
        self._json_names = json_names
        self._known = known
        self._recognize = recognizer
        self._references = tuple(sorted(options.reference_keys))
        self.spans: list[SpanRecord] = []
        self.received = 0
        self.rejected: dict[str, int] = {}
        self.rejected_traces: dict[bytes, None] = {}  # in order, each once
        self.offenders: list[str] = []  # the first _MAX_REPORTED rejected, for the message

    def scan(self, scan: Scan) -> DecodedBatch:
        """Decode every scanned span of a request (``add``), and the batch."""
        self.add(scan)
        return self.batch()

    def add(self, scan: Scan, at: tuple[int, int, int] = (0, 0, 0)) -> None:
        """Decode every scanned span. Consumes ``scan`` (its spans become ``None``): each
        span's scanned values are let go once its record is built, so a request's scan and
        its records are not all held at once (each costs 5 to 7 times a request of small
        spans). ``at``: what to add to a scanned span's ``(resource, scope, span)`` indices
        for its place in the request, when the scan is of a piece of it (``PieceDecoder``):
        a rejected span is named by that place."""
        # Typed Any: storing None in the list (not a tuple, which would be a new object).
        found_spans: list[Any] = scan.spans
        count = len(found_spans)
        if not count:
            return
        resources = [_resource(attrs, self._references) for attrs in scan.resources]
        for index in range(count):
            found: ScannedSpan = found_spans[index]
            found_spans[index] = None
            problem = self._span(found, resources[found[0]])
            if problem is not None:
                r, s, p = found[0] + at[0], found[1] + at[1], found[2] + at[2]
                if self._known is not None:  # the parser's own reason, if it had one
                    problem = self._known.get((r, s, p), problem)
                self._reject(problem, r, s, p)
                trace_id = found[3]  # a rejected span only: no work for the others
                if len(trace_id) == 16 and trace_id != _ZERO_TRACE_ID:
                    self.rejected_traces[trace_id] = None
        self.received += count

    def empty_spans(self, at: tuple[int, int, int], count: int) -> None:
        """``count`` spans sent empty, the first at ``(resource, scope, span)``: rejected as
        the scan of each would be (no trace id), without scanning them."""
        problem = _id_problem(b"", b"", b"")
        assert problem is not None  # no trace id
        r, s, p = at
        for offset in range(min(count, _MAX_REPORTED)):  # the first few, as offenders
            self._reject(problem, r, s, p + offset)
        if count > _MAX_REPORTED:
            self.rejected[problem[0]] += count - _MAX_REPORTED
        self.received += count

    def rejected_run(
        self, count: int, counts: Sequence[int], offenders: Sequence[str], traces: Sequence[bytes]
    ) -> None:
        """``count`` spans rejected unscanned (``protobuf_pieces.Sifted``): ``counts`` by
        reason, ``offenders`` as the first of them are named, the valid trace ids they hand
        on in order. Nothing per span but the trace ids, at C speed."""
        for reason, number in zip(SIFTED_REASONS, counts, strict=True):
            if number:
                self.rejected[reason] = self.rejected.get(reason, 0) + number
        room = _MAX_REPORTED - len(self.offenders)
        if room > 0:
            self.offenders.extend(offenders[:room])
        self.rejected_traces.update(dict.fromkeys(traces))
        self.received += count

    def batch(self) -> DecodedBatch:
        """The spans decoded so far and the accounting of the rest."""
        return DecodedBatch(
            tuple(self.spans),
            self.received,
            self.rejected,
            self._message(),
            tuple(self.rejected_traces),
        )

    def _path(self, r: int, s: int, p: int) -> str:
        if self._json_names:
            return f"resourceSpans[{r}].scopeSpans[{s}].spans[{p}]"
        return f"resource_spans[{r}].scope_spans[{s}].spans[{p}]"

    def _reject(self, problem: tuple[str, str], r: int, s: int, p: int) -> None:
        reason, detail = problem
        self.rejected[reason] = self.rejected.get(reason, 0) + 1
        if len(self.offenders) >= _MAX_REPORTED:
            return  # counted; only the first are named (a text each, for any number)
        if self._json_names:  # an id's detail starts with its field's name
            field, _, rest = detail.partition(" ")
            if field in _JSON_ID_NAMES:
                detail = f"{_JSON_ID_NAMES[field]} {rest}"
        self.offenders.append(f"{self._path(r, s, p)}: {detail}")

    def _reference_keys(
        self, attrs: dict[str, Any], resource: _Resource
    ) -> tuple[tuple[str, str], ...]:
        """Configured keys on the span, else on its resource (the span's value wins)."""
        if not self._references:
            return ()
        own = {key: _reference_text(attrs[key]) for key in self._references if key in attrs}
        if not own:
            return resource.reference_items
        return tuple(sorted({**resource.references, **own}.items()))

    def _span(self, found: ScannedSpan, resource: _Resource) -> tuple[str, str] | None:
        """Decode one scanned span into ``self.spans``; ``(reason, detail)`` if rejected."""
        (
            _,
            _,
            _,
            trace_id,
            span_id,
            parent,
            name,
            kind,
            start,
            end,
            code,
            attrs,
            over,
            scanned,
            local,
            message,
        ) = found
        problem = _id_problem(trace_id, span_id, parent)
        if problem is not None:
            return problem
        if over:  # its calls would be read in part: a model output with some of its requests
            detail = f"more than {self._cap} attributes a convention reads"
            return "too_many_attributes", f"{detail} (ingest.max_span_attributes)"
        events = _Events(scanned) if scanned is not None else None
        try:
            recognition = self._recognize(name, code, attrs, events, message)
        except Exception as exc:  # a recognizer bug must cost one span, not the request
            return "malformed_attributes", f"attributes could not be read ({exc!r:.80})"
        role, convention, fields = recognition.role, recognition.convention, recognition.fields
        history = NO_HISTORY
        if self._histories and role is SpanRole.LLM:
            try:
                history = read_history(attrs, events)
            except Exception:  # a reader's bug costs the evidence (unread), not the span
                _history_failed()
        # OTLP: an empty parent marks a root; an all-zero one is read the same way.
        parent_id = parent if parent and parent != _ZERO_SPAN_ID else None
        record = SpanRecord(
            trace_id=trace_id,
            span_id=span_id,
            parent_span_id=parent_id,
            parent_local=local and parent_id is not None,
            name=name,
            kind=kind,
            start_ns=start,
            end_ns=max(end, start),  # clock skew: clamp, keep the span
            status_code=code,
            service=resource.service,
            role=role,
            convention=convention,
            reference_keys=self._reference_keys(attrs, resource),
            # Named, not ``**fields``: a call with a splat is not compiled (it builds a
            # dict and matches 25 keywords by name), a third of the record's cost.
            tool_name=fields.get("tool_name"),
            call_id=fields.get("call_id"),
            arguments=fields.get("arguments"),
            result=fields.get("result"),
            error_type=fields.get("error_type"),
            finish_reasons=fields.get("finish_reasons", ()),
            output_tool_calls=fields.get("output_tool_calls", ()),
            output_text=fields.get("output_text"),
            refusal=fields.get("refusal"),
            agent_name=fields.get("agent_name"),
            model=fields.get("model"),
            conversation_id=fields.get("conversation_id"),
            handoff_to=fields.get("handoff_to"),
            prior_turns=history[0],
            prior_call_ids=history[1],
        )
        record.size_bytes = _held_size(record)  # counted from the record, before anyone sees it
        self.spans.append(record)
        return None

    def _message(self) -> str | None:
        total = sum(self.rejected.values())
        if not total:
            return None
        named = "; ".join(self.offenders)
        more = f"; and {total - _MAX_REPORTED} more" if total > _MAX_REPORTED else ""
        return f"{total} span{'s' if total != 1 else ''} rejected; {named}{more}"
