"""Where findings (and, for debugging and replay, ToolTraces) go.

A ``FindingSink`` receives the findings of one ToolTrace at a time. Shipped sinks:

- ``JsonLinesFindingSink``: the findings log, one JSON object per finding per line;
- ``InMemoryFindingSink``: keeps what it receives, for tests (ours and users');
- ``FanOutSink``: hands each publication to several sinks, isolating their failures;
- ``toolwatch.sinks.stream.FindingsBroker``: the live gRPC findings stream.

Argument values are sensitive (customer ids, amounts, free text): ``Redaction`` decides which
of the argument values in ``Finding.details`` a sink may show, field by field; the others
become ``"[redacted]"``. Explanations never contain argument values (``Finding`` contract), so
they are written as they are.

The findings log line (keys always present, ``null`` when absent)::

    {"category": "MISSING_VERIFICATION_STEP", "severity": "critical", "evaluator": "safety",
     "reference": "policy", "score": 0.0, "tool": "issue_refund", "field": "order_id",
     "agent": "refund-bot", "explanation": "...", "trace_id": "<32 hex>",
     "span_id": "<16 hex>", "service": "support", "timestamp": "2026-11-29T20:31:02.123Z",
     "details": {"failed_verification_spans": [], "fields": {"order_id": "[redacted]"}}}

``ToolTraceWriter`` writes the ``--dump-tooltraces`` format (``toolwatch replay`` reads it
back through ``tooltrace_from_dict``, files and errors by line; ``read_tooltraces`` reads
plain lines): one ``tooltrace_to_dict`` object per line, as ASCII-only JSON. Every ``ToolTrace`` and
``ToolCall`` field appears under its own name, plus ``"format": "toolwatch.tooltrace/v1"``;
ids are hex strings, times integer nanoseconds (or ``null``), ``arguments``/``result`` the
JSON values they hold (bytes, which JSON cannot hold, are written as hex strings).
``tooltrace_from_dict`` inverts ``tooltrace_to_dict`` exactly for JSON-valued arguments.

Threading: sinks are called from the event loop; they are not thread-safe.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, Final, Protocol

from toolwatch.jsontext import compact_encoder
from toolwatch.model import (
    DETAIL_ERRORS,
    DETAIL_FIELDS,
    CallStatus,
    Clock,
    Finding,
    ToolCall,
    ToolTrace,
)

__all__ = [
    "REDACTED",
    "TOOLTRACE_FORMAT",
    "FanOutSink",
    "FindingSink",
    "InMemoryFindingSink",
    "JsonLinesFindingSink",
    "Redaction",
    "ToolTraceWriter",
    "finding_record",
    "format_timestamp",
    "read_tooltraces",
    "render_details",
    "tooltrace_from_dict",
    "tooltrace_to_dict",
]

_log = logging.getLogger(__name__)

#: What a hidden detail value is replaced with.
REDACTED = "[redacted]"

#: The ``format`` key of every ``--dump-tooltraces`` line.
TOOLTRACE_FORMAT = "toolwatch.tooltrace/v1"


class FindingSink(Protocol):
    """Receives the findings of one ToolTrace per call. Called from the event loop.

    ``publish`` must not block on I/O for long (it runs on the ingest loop) and is called
    once per evaluated ToolTrace that has findings. ``close`` flushes; nothing is published
    after it.
    """

    def publish(self, trace: ToolTrace, findings: Sequence[Finding]) -> None: ...
    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Redaction:
    """Which ``Finding.details`` values sinks may show.

    Argument values live in two places of ``details`` (the ``Finding`` contract): ``fields``,
    a map from an argument's field path to what the finding says about its value, and
    ``errors``, a list of ``{"field", "message"}`` whose messages may quote values. Each entry
    is redacted on its own: shown when ``show_values`` is set, or when ``show_fields`` names
    its field as ``"tool.field"`` (normalized tool name) or ``"field"`` (that field of any
    tool); otherwise its value, or its message, becomes ``REDACTED``. Every other key holds no
    argument value (tool names, counts, span ids, rule labels) and is shown as it is.
    """

    show_values: bool = False
    show_fields: frozenset[str] = frozenset()

    def shows(self, tool: str | None, name: str | None) -> bool:
        """Whether values of argument ``name`` (a field path) of ``tool`` may be shown: a
        named field shows the fields inside it (``order`` shows ``order.id``)."""
        if self.show_values:
            return True
        if not name:
            return False
        path = name
        while True:
            if path in self.show_fields or f"{tool}.{path}" in self.show_fields:
                return True
            cut = path.rfind(".")
            if cut < 0:
                return False
            path = path[:cut]

    def details(self, finding: Finding) -> dict[str, Any]:
        """``finding.details`` with every value it may not show replaced by ``REDACTED``."""
        details = dict(finding.details)
        if self.show_values:
            return details
        tool = finding.tool
        fields = details.get(DETAIL_FIELDS)
        if isinstance(fields, Mapping):
            details[DETAIL_FIELDS] = {
                name: value if self.shows(tool, _field_name(name)) else REDACTED
                for name, value in fields.items()
            }
        elif fields is not None:
            details[DETAIL_FIELDS] = REDACTED
        errors = details.get(DETAIL_ERRORS)
        if isinstance(errors, list):
            details[DETAIL_ERRORS] = [self._error(tool, error) for error in errors]
        elif errors is not None:
            details[DETAIL_ERRORS] = REDACTED
        return details

    def _error(self, tool: str | None, error: Any) -> Any:
        if not isinstance(error, Mapping):
            return REDACTED
        field = error.get("field")
        if self.shows(tool, _field_name(field)):
            return dict(error)
        return {**error, "message": REDACTED}


def _field_name(name: Any) -> str | None:
    return name if isinstance(name, str) else None


def format_timestamp(time_ns: int) -> str:
    """``time_ns`` (Unix epoch) as ISO 8601 UTC with milliseconds: ``2026-11-29T20:31:02.123Z``."""
    seconds, rest = divmod(time_ns, 1_000_000_000)
    return _utc_second(seconds) + f".{rest // 1_000_000:03d}Z"


@functools.lru_cache(maxsize=4)  # the findings of one second share it
def _utc_second(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))


def finding_record(
    trace: ToolTrace, finding: Finding, redaction: Redaction, time_ns: int
) -> dict[str, Any]:
    """The findings-log object of ``finding`` (see the module docstring), details redacted."""
    score = finding.score
    return {
        "category": str(finding.category),
        "severity": str(finding.severity),
        "evaluator": finding.evaluator,
        "reference": str(finding.reference),
        "score": score if score is not None and math.isfinite(score) else None,
        "tool": finding.tool,
        "field": finding.field,
        "agent": finding.agent or trace.agent,
        "explanation": finding.explanation,
        "trace_id": finding.trace_id,
        "span_id": finding.span_id,
        "service": trace.service,
        "timestamp": format_timestamp(time_ns),
        "details": redaction.details(finding),
    }


def _json_default(value: Any) -> Any:
    """Encodes what JSON has no type for instead of failing on it (never crash on input)."""
    if isinstance(value, bytes | bytearray):
        return value.hex()
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, frozenset | set):
        return sorted(value, key=repr)
    return repr(value)


#: Compact JSON, ``_json_default`` for what JSON has no type for; ASCII only for the dump.
_to_json = compact_encoder(_json_default)
_to_ascii_json = compact_encoder(_json_default, ascii_only=True)


def render_details(details: Mapping[str, Any]) -> dict[str, str]:
    """Detail values as text, for the findings stream's ``map<string, string>``: strings as
    they are, other values as compact JSON. Redact before rendering."""
    return {k: v if isinstance(v, str) else _to_json(v) for k, v in details.items()}


class JsonLinesFindingSink:
    """The findings log: one JSON object per finding per line on ``stream``.

    ``wall_clock`` gives the ``timestamp`` (Unix ns; ``time.time_ns`` in production). The
    stream is flushed after each publication and on ``close``; its owner closes it.
    """

    def __init__(
        self, stream: IO[str], redaction: Redaction | None = None, wall_clock: Clock = time.time_ns
    ) -> None:
        self._stream = stream
        self._redaction = redaction or Redaction()
        self._wall_clock = wall_clock

    def publish(self, trace: ToolTrace, findings: Sequence[Finding]) -> None:
        now = self._wall_clock()
        lines = [_to_json(finding_record(trace, f, self._redaction, now)) for f in findings]
        if lines:
            self._stream.write("\n".join(lines) + "\n")
            self._stream.flush()

    def close(self) -> None:
        self._stream.flush()


@dataclass(slots=True)
class InMemoryFindingSink:
    """Keeps every finding published to it, in order: a test double for pipelines.

    ``findings`` lists the findings, ``traces`` the ToolTrace of each publication, ``closed``
    whether ``close`` was called. Findings are stored unredacted.
    """

    findings: list[Finding] = field(default_factory=list)
    traces: list[ToolTrace] = field(default_factory=list)
    closed: bool = False

    def publish(self, trace: ToolTrace, findings: Sequence[Finding]) -> None:
        self.traces.append(trace)
        self.findings.extend(findings)

    def close(self) -> None:
        self.closed = True

    def clear(self) -> None:
        """Forgets everything published so far."""
        self.findings.clear()
        self.traces.clear()


class FanOutSink:
    """Publishes to every sink in ``sinks``, in order; a sink that raises does not stop the
    others. Failures are counted per sink in ``failures`` (keyed by position and class name)
    and logged with a rate limit: the 1st, 2nd, 4th, 8th, ... failure of each sink."""

    def __init__(self, sinks: Sequence[FindingSink]) -> None:
        self._sinks = tuple(sinks)
        self._names = tuple(f"{i}:{type(s).__name__}" for i, s in enumerate(self._sinks))
        self.failures: dict[str, int] = dict.fromkeys(self._names, 0)

    def publish(self, trace: ToolTrace, findings: Sequence[Finding]) -> None:
        for name, sink in zip(self._names, self._sinks, strict=True):
            try:
                sink.publish(trace, findings)
            except Exception:
                self._failed(name, "publish")

    def close(self) -> None:
        for name, sink in zip(self._names, self._sinks, strict=True):
            try:
                sink.close()
            except Exception:
                self._failed(name, "close")

    def _failed(self, name: str, action: str) -> None:
        count = self.failures[name] = self.failures[name] + 1
        if count & (count - 1) == 0:  # a power of two
            _log.exception(
                "findings sink %s failed to %s (%d failures so far)", name, action, count
            )


class ToolTraceWriter:
    """Writes each ToolTrace it is given as one JSON line (``--dump-tooltraces``).

    Flushes after every line so the file can be followed live; the stream's owner closes it.
    """

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, trace: ToolTrace) -> None:
        # ASCII only: text may hold U+2028, U+0085, ... which some line splitters split on.
        self._stream.write(_to_ascii_json(tooltrace_to_dict(trace)) + "\n")
        self._stream.flush()

    def close(self) -> None:
        self._stream.flush()


def tooltrace_to_dict(trace: ToolTrace) -> dict[str, Any]:
    """``trace`` as a JSON-ready dict in the ``--dump-tooltraces`` format."""
    return {
        "format": TOOLTRACE_FORMAT,
        "trace_id": trace.trace_id,
        "run_span_id": trace.run_span_id,
        "service": trace.service,
        "agent": trace.agent,
        "model": trace.model,
        "calls": [_call_to_dict(call) for call in trace.calls],
        "final_text": trace.final_text,
        "refusal": trace.refusal,
        "refusal_reason": trace.refusal_reason,
        "error_count": trace.error_count,
        "complete": trace.complete,
        "incomplete_reason": trace.incomplete_reason,
        "start_ns": trace.start_ns,
        "end_ns": trace.end_ns,
        "span_count": trace.span_count,
        "conversation_id": trace.conversation_id,
        "reference_keys": dict(trace.reference_keys),
        "agents": list(trace.agents),
    }


def _call_to_dict(call: ToolCall) -> dict[str, Any]:
    return {
        "tool_name": call.tool_name,
        "raw_name": call.raw_name,
        "arguments": call.arguments,
        "arguments_error": call.arguments_error,
        "call_id": call.call_id,
        "parent_call_id": call.parent_call_id,
        "sequence_index": call.sequence_index,
        "parallel_group": call.parallel_group,
        "status": str(call.status),
        "error_type": call.error_type,
        "agent": call.agent,
        "span_id": call.span_id,
        "start_ns": call.start_ns,
        "end_ns": call.end_ns,
        "result": call.result,
        "hosted": call.hosted,
    }


def tooltrace_from_dict(data: Mapping[str, Any]) -> ToolTrace:
    """The ToolTrace ``tooltrace_to_dict`` made ``data`` from.

    Raises ``ValueError`` naming the problem when ``data`` is not in the format.
    """
    if not isinstance(data, Mapping):
        raise ValueError(f"expected a ToolTrace object, got {type(data).__name__}")
    fmt = data.get("format", TOOLTRACE_FORMAT)
    if fmt != TOOLTRACE_FORMAT:
        raise ValueError(f"unsupported format {fmt!r}, expected {TOOLTRACE_FORMAT!r}")
    fields = _checked_fields(ToolTrace, {k: v for k, v in data.items() if k != "format"})
    _check_types(fields, _TRACE_TYPES, "")
    if not _HEX_TRACE_ID.fullmatch(fields["trace_id"]):
        raise ValueError(f"trace_id must be 32 hex digits, got {fields['trace_id']!r:.40}")
    keys = fields.get("reference_keys", {})
    if not all(type(k) is str and type(v) is str for k, v in keys.items()):
        raise ValueError(f"reference_keys must map names to strings, got {keys!r:.60}")
    try:
        fields["calls"] = tuple(_call_from_dict(c, i) for i, c in enumerate(fields["calls"]))
        fields["reference_keys"] = dict(fields.get("reference_keys", {}))
        fields["agents"] = _names(fields.get("agents", []))  # absent in earlier dumps
        return ToolTrace(**fields)
    except TypeError as e:
        raise ValueError(str(e)) from None


def _names(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"agents must be a list of agent names, got {value!r:.80}")
    return tuple(value)


def _call_from_dict(data: Mapping[str, Any], index: int) -> ToolCall:
    if isinstance(data, Mapping) and "hosted" not in data:  # earlier dumps: none marked
        data = {**data, "hosted": False}
    fields = _checked_fields(ToolCall, data, " in a call")
    _check_types(fields, _CALL_TYPES, f"calls[{index}].")
    fields["status"] = CallStatus(fields["status"])
    return ToolCall(**fields)


_HEX_TRACE_ID: Final = re.compile(r"[0-9a-fA-F]{32}")
_TEXT: Final = (str,)
_MAYBE_TEXT: Final = (str, type(None))
_COUNT: Final = (int,)
_MAYBE_COUNT: Final = (int, type(None))
_FLAG: Final = (bool,)
#: The JSON types of the dump format's fields (``arguments`` and ``result`` take any value).
_CALL_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "tool_name": _TEXT,
    "raw_name": _TEXT,
    "arguments_error": _MAYBE_TEXT,
    "call_id": _MAYBE_TEXT,
    "parent_call_id": _MAYBE_TEXT,
    "sequence_index": _COUNT,
    "parallel_group": _MAYBE_COUNT,
    "status": _TEXT,
    "error_type": _MAYBE_TEXT,
    "agent": _MAYBE_TEXT,
    "span_id": _MAYBE_TEXT,
    "start_ns": _MAYBE_COUNT,
    "end_ns": _MAYBE_COUNT,
    "hosted": _FLAG,
}
_TRACE_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "trace_id": _TEXT,
    "run_span_id": _MAYBE_TEXT,
    "service": _MAYBE_TEXT,
    "agent": _MAYBE_TEXT,
    "model": _MAYBE_TEXT,
    "calls": (list,),
    "final_text": _MAYBE_TEXT,
    "refusal": _FLAG,
    "refusal_reason": _MAYBE_TEXT,
    "error_count": _COUNT,
    "complete": _FLAG,
    "incomplete_reason": _MAYBE_TEXT,
    "start_ns": _COUNT,
    "end_ns": _COUNT,
    "span_count": _COUNT,
    "conversation_id": _MAYBE_TEXT,
    "reference_keys": (dict,),
    "agents": (list,),
}
_TYPE_NAMES: Final = {
    str: "a string",
    int: "an integer",
    bool: "true or false",
    list: "a list",
    dict: "an object",
    type(None): "null",
}


def _check_types(fields: Mapping[str, Any], types: Mapping[str, tuple[type, ...]], at: str) -> None:
    """Raises ``ValueError`` naming the first field whose value has the wrong JSON type
    (a boolean is no integer)."""
    for name, allowed in types.items():
        if name not in fields:
            continue
        value = fields[name]
        kind = type(value)
        if kind not in allowed:
            wanted = " or ".join(_TYPE_NAMES[t] for t in allowed)
            raise ValueError(f"{at}{name} must be {wanted}, got {value!r:.40}")


def _checked_fields(record: type[Any], data: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    """``data`` as keyword arguments of ``record``'s constructor; ``ValueError`` naming the
    first unknown or missing field. (The compiled constructors' own errors do not name it.)"""
    if not isinstance(data, Mapping):
        raise ValueError(f"expected an object{where}, got {type(data).__name__}")
    known = dataclasses.fields(record)
    names = {f.name for f in known}
    unknown = sorted(k for k in data if k not in names)
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r}{where}")
    for f in known:
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and f.name not in data:
            raise ValueError(f"missing field {f.name!r}{where}")
    return dict(data)


def read_tooltraces(lines: Iterable[str]) -> Iterator[ToolTrace]:
    """Parses ``--dump-tooltraces`` lines, skipping blank ones.

    Raises ``ValueError`` naming the 1-based line number of the first bad line.
    """
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield tooltrace_from_dict(json.loads(line))
        except ValueError as e:  # json.JSONDecodeError is a ValueError
            raise ValueError(f"line {number}: {e}") from e
