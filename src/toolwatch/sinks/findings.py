"""Where findings go.

A ``FindingSink`` receives the findings of one ToolTrace at a time. Shipped sinks:

- ``JsonLinesFindingSink``: the findings log, one JSON object per finding per line;
- ``InMemoryFindingSink``: keeps what it receives, for tests (ours and users');
- ``FanOutSink``: hands each publication to several sinks, isolating their failures;
- ``toolwatch.sinks.stream.broker.FindingsBroker``: the live gRPC findings stream.

Argument values are sensitive (customer ids, amounts, free text): ``Redaction`` decides which
of the argument values in ``Finding.details`` a sink may show, field by field; the others
become ``"[redacted]"``. Explanations never contain argument values (``Finding`` contract), so
they are written as they are.

The findings log line (keys always present, ``null`` when absent)::

    {"category": "MISSING_VERIFICATION_STEP", "severity": "critical", "evaluator": "safety",
     "reference": "policy", "case_id": null, "source_trace_id": null, "pair_key": null,
     "score": 0.0, "tool": "issue_refund", "field": "order_id", "agent": "refund-bot",
     "explanation": "...", "trace_id": "<32 hex>", "span_id": "<16 hex>",
     "service": "support", "traffic": "live", "incomplete_reason": null,
     "timestamp": "2026-11-29T20:31:02.123Z",
     "details": {"failed_verification_spans": [], "fields": {"order_id": "[redacted]"}}}

``incomplete_reason`` is the run's (``ToolTrace.incomplete_reason``: ``timed_out``,
``evicted``, ``shutdown``, ``span_limit``, ``missing_spans``) when it was evaluated without
all its spans, so that a finding of such a run is told apart from one of a whole run (a
missing verification may be a span that never came); ``null`` for a complete run. A key
added to the line: a reader of the line as it was before finds every key it knew.

``case_id`` names the golden case of a finding against ``expected``; ``source_trace_id`` and
``pair_key`` the shadow source run and the pair key of one against ``source``
(``Finding``); they are ids, not argument values, and written as they are.

The ``--dump-tooltraces`` format of ToolTraces is in ``toolwatch.sinks.tooltraces``.

Threading: sinks are called from the event loop; they are not thread-safe.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from toolwatch.jsontext import compact_encoder
from toolwatch.model import Clock, Traffic
from toolwatch.model_evaluation import DETAIL_ERRORS, DETAIL_FIELDS, Finding
from toolwatch.model_traces import ToolTrace
from toolwatch.sinks.linefile import TextOutput, write_lines

__all__ = [
    "REDACTED",
    "FanOutSink",
    "FindingSink",
    "InMemoryFindingSink",
    "JsonLinesFindingSink",
    "Redaction",
    "finding_fields",
    "finding_record",
    "format_timestamp",
    "json_default",
    "render_details",
]

_log = logging.getLogger(__name__)

#: What a hidden detail value is replaced with.
REDACTED: Final = "[redacted]"


class FindingSink(Protocol):
    """Receives the findings of one ToolTrace per call. Called from the event loop.

    ``publish`` must not block on I/O for long (it runs on the ingest loop) and is called
    once per evaluated ToolTrace that has findings. ``close`` flushes; nothing is published
    after it.
    """

    def publish(
        self, trace: ToolTrace, findings: Sequence[Finding], traffic: Traffic = Traffic.LIVE
    ) -> None: ...
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
        named field shows the fields inside it (``order`` shows ``order.id``). A finding on
        no tool (``tool`` ``None``) shows only the fields named for any tool."""
        if self.show_values:
            return True
        if not name:
            return False
        path = name
        while True:
            if path in self.show_fields:
                return True
            if tool is not None and f"{tool}.{path}" in self.show_fields:
                return True
            cut = path.rfind(".")
            if cut < 0:
                return False
            path = path[:cut]

    def named_tools(self) -> frozenset[str]:
        """The tools ``show_fields`` may name: what comes before each dot of each entry (a
        tool's name may hold dots: ``a.b.c`` names field ``b.c`` of tool ``a`` and field ``c``
        of tool ``a.b``). A tool not among them shows only the fields named for any tool."""
        return frozenset(
            entry[:cut]
            for entry in self.show_fields
            for cut, char in enumerate(entry)
            if char == "."
        )

    def details(self, finding: Finding) -> dict[str, Any]:
        """``finding.details`` with every value it may not show replaced by ``REDACTED``."""
        return self.redact(finding.tool, finding.details)

    def redact_rendered(self, tool: str | None, rendered: Mapping[str, str]) -> dict[str, str]:
        """Details already rendered as text (``render_details``) redacted by this redaction:
        for findings rendered under one that showed more (a reload). A value hidden when they
        were rendered stays hidden; so does one that is no longer readable as JSON."""
        if self.show_values:
            return dict(rendered)
        parsed = {
            key: _parsed(value) if key in (DETAIL_FIELDS, DETAIL_ERRORS) else value
            for key, value in rendered.items()
        }
        return render_details(self.redact(tool, parsed))

    def redact(self, tool: str | None, details: Mapping[str, Any]) -> dict[str, Any]:
        """``details`` of a finding on ``tool`` with every value it may not show replaced."""
        details = dict(details)
        if self.show_values:
            return details
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


def _parsed(text: str) -> Any:
    """A rendered detail value read back (``REDACTED`` itself is no JSON: kept as text)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def format_timestamp(time_ns: int) -> str:
    """``time_ns`` (Unix epoch) as ISO 8601 UTC with milliseconds: ``2026-11-29T20:31:02.123Z``."""
    seconds, rest = divmod(time_ns, 1_000_000_000)
    return _utc_second(seconds) + f".{rest // 1_000_000:03d}Z"


@functools.lru_cache(maxsize=4)  # the findings of one second share it
def _utc_second(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))


def finding_record(
    trace: ToolTrace,
    finding: Finding,
    redaction: Redaction,
    time_ns: int,
    traffic: Traffic = Traffic.LIVE,
) -> dict[str, Any]:
    """The findings-log object of ``finding`` (see the module docstring), details redacted."""
    record = finding_fields(trace, finding, traffic)
    record["timestamp"] = format_timestamp(time_ns)
    record["details"] = redaction.details(finding)
    return record


def finding_fields(trace: ToolTrace, finding: Finding, traffic: Traffic) -> dict[str, Any]:
    """The findings-log keys of ``finding`` of run ``trace`` but ``timestamp`` and
    ``details``: what ``replay --format json`` lists too (``toolwatch.replay_listing``)."""
    score = finding.score
    return {
        "category": str(finding.category),
        "severity": str(finding.severity),
        "evaluator": finding.evaluator,
        "reference": str(finding.reference),
        "case_id": finding.case_id,
        "source_trace_id": finding.source_trace_id,
        "pair_key": finding.pair_key,
        "score": score if score is not None and math.isfinite(score) else None,
        "tool": finding.tool,
        "field": finding.field,
        "agent": finding.agent or trace.agent,
        "explanation": finding.explanation,
        "trace_id": finding.trace_id,
        "span_id": finding.span_id,
        "service": trace.service,
        "traffic": str(traffic),
        "incomplete_reason": None if trace.complete else trace.incomplete_reason or "unknown",
    }


def json_default(value: Any) -> Any:
    """Encodes what JSON has no type for instead of failing on it (never crash on input)."""
    if isinstance(value, bytes | bytearray):
        return value.hex()
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, frozenset | set):
        return sorted(value, key=repr)
    return repr(value)


#: Compact JSON, ``json_default`` for what JSON has no type for.
_to_json: Final = compact_encoder(json_default)


def render_details(details: Mapping[str, Any]) -> dict[str, str]:
    """Detail values as text, for the findings stream's ``map<string, string>``: strings as
    they are, other values as compact JSON. Redact before rendering."""
    return {k: v if isinstance(v, str) else _to_json(v) for k, v in details.items()}


class JsonLinesFindingSink:
    """The findings log: one JSON object per finding per line on ``stream``.

    ``wall_clock`` gives the ``timestamp`` (Unix ns; ``time.time_ns`` in production). The
    stream is flushed after each publication and on ``close``; its owner closes it. A
    publication that cannot be written raises ``OSError`` (``FanOutSink`` counts it);
    ``serve`` writes to a ``background.BackgroundOutput``, which counts and logs failed
    writes by outage itself, and never raises.
    """

    def __init__(
        self,
        stream: TextOutput,
        redaction: Redaction | None = None,
        wall_clock: Clock = time.time_ns,
    ) -> None:
        self.stream = stream
        self._redaction = redaction or Redaction()
        self._wall_clock = wall_clock

    def redact_with(self, redaction: Redaction) -> None:
        """Redact the findings written from now on by ``redaction`` (a reload)."""
        self._redaction = redaction

    def publish(
        self, trace: ToolTrace, findings: Sequence[Finding], traffic: Traffic = Traffic.LIVE
    ) -> None:
        now = self._wall_clock()
        redaction = self._redaction
        lines = [_to_json(finding_record(trace, f, redaction, now, traffic)) for f in findings]
        if not lines:
            return
        write_lines(self.stream, "\n".join(lines) + "\n", None)

    def close(self) -> None:
        self.stream.flush()


@dataclass(slots=True)
class InMemoryFindingSink:
    """Keeps every finding published to it, in order: a test double for pipelines.

    ``findings`` lists the findings, ``traces`` the ToolTrace of each publication, ``closed``
    whether ``close`` was called. Findings are stored unredacted.
    """

    findings: list[Finding] = field(default_factory=list)
    traces: list[ToolTrace] = field(default_factory=list)
    traffic: list[Traffic] = field(default_factory=list)  # each publication's
    closed: bool = False

    def publish(
        self, trace: ToolTrace, findings: Sequence[Finding], traffic: Traffic = Traffic.LIVE
    ) -> None:
        self.traces.append(trace)
        self.traffic.append(traffic)
        self.findings.extend(findings)

    def close(self) -> None:
        self.closed = True

    def clear(self) -> None:
        """Forgets everything published so far."""
        self.findings.clear()
        self.traces.clear()
        self.traffic.clear()


class FanOutSink:
    """Publishes to every sink in ``sinks``, in order; a sink that raises does not stop the
    others. Failures are counted per sink in ``failures`` (keyed by position and class name),
    told to ``failed`` (with the sink's position: a metric, say) and logged with a rate
    limit: the 1st, 2nd, 4th, 8th, ... failure of each sink."""

    def __init__(
        self, sinks: Sequence[FindingSink], failed: Callable[[int], None] | None = None
    ) -> None:
        self._sinks = tuple(sinks)
        self._names = tuple(f"{i}:{type(s).__name__}" for i, s in enumerate(self._sinks))
        self.failures: dict[str, int] = dict.fromkeys(self._names, 0)
        self._failed_at = failed

    def publish(
        self, trace: ToolTrace, findings: Sequence[Finding], traffic: Traffic = Traffic.LIVE
    ) -> None:
        for i, sink in enumerate(self._sinks):
            try:
                sink.publish(trace, findings, traffic)
            except Exception:
                self._failed(i, "publish")

    def close(self) -> None:
        for i, sink in enumerate(self._sinks):
            try:
                sink.close()
            except Exception:
                self._failed(i, "close")

    def _failed(self, index: int, action: str) -> None:
        if self._failed_at is not None:
            with contextlib.suppress(Exception):  # counting must not stop the others
                self._failed_at(index)
        name = self._names[index]
        count = self.failures[name] = self.failures[name] + 1
        if count & (count - 1) == 0:  # a power of two
            _log.exception(
                "findings sink %s failed to %s (%d failures so far)", name, action, count
            )
