"""Severity from effect size, and the one way evaluators build a Finding.

Effect size is how far a score fell from perfect: ``drop = 1 - score``.

=============  ==========
drop           severity
=============  ==========
>= 0.75        critical
>= 0.50        high
>= 0.25        medium
otherwise      low
=============  ==========

The result is then raised to the evaluator's ``severity_floor`` (refusal mismatches to at
least ``high``). Severity is never lowered.

Findings about a single yes/no fact have no effect size and use a fixed base instead:
``safety`` findings (missing verification, dangerous-action drift, disallowed tool) take the
safety floor (default ``high``); invariant violations take the rule's ``severity`` (default
``high``) raised to the floor; a call made when a golden case expects none is ``medium``
raised to the floor.

A finding that names one call of a dangerous tool (``safety``'s, and an invariant's on one)
also says what became of it (``call_outcome``): a page asks its reader to reverse the action,
and a refund that failed, or that the model asked for and the agent never ran, is none to
reverse. The outcome changes neither category nor severity: the agent tried.

A finding of a run evaluated before it was whole (``ToolTrace.complete`` false) ends its
explanation by saying so and why (``incomplete_note``): such a run is judged on the spans that
had come, so the verification a MISSING_VERIFICATION_STEP misses may be in a span that never
came. The findings log, the stream and ``tail`` name the reason too (``incomplete_reason``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

from toolwatch.evaluation.base import lost_earlier, never_ran, unfinished
from toolwatch.model import MISSING_SPANS, CallStatus, Category, ReferenceKind, Severity
from toolwatch.model_evaluation import Finding
from toolwatch.model_traces import ToolCall, ToolTrace

__all__ = [
    "CALL_AGENT",
    "EFFECT_BANDS",
    "ERROR_TYPE",
    "INCOMPLETE_NOTES",
    "OUTCOME",
    "call_outcome",
    "clamp",
    "effect_severity",
    "incomplete_note",
    "incomplete_reason",
    "make_finding",
    "severity_for",
]

#: (minimum drop, severity), checked in order; below the last band the severity is ``low``.
EFFECT_BANDS: Final = (
    (0.75, Severity.CRITICAL),
    (0.50, Severity.HIGH),
    (0.25, Severity.MEDIUM),
)


def clamp(score: float) -> float:
    """``score`` clamped to [0, 1] (NaN counts as 0: a score that could not be computed)."""
    if math.isnan(score):
        return 0.0
    return min(1.0, max(0.0, score))


def effect_severity(score: float) -> Severity:
    """The severity of a score's drop from 1.0, per ``EFFECT_BANDS``."""
    drop = 1.0 - clamp(score)
    for minimum, severity in EFFECT_BANDS:
        if drop >= minimum:
            return severity
    return Severity.LOW


def severity_for(score: float, *floors: Severity) -> Severity:
    """The effect-size severity of ``score`` raised to every floor given."""
    severity = effect_severity(score)
    for floor in floors:
        severity = severity.at_least(floor)
    return severity


def make_finding(
    trace: ToolTrace,
    *,
    category: Category,
    evaluator: str,
    reference: ReferenceKind,
    severity: Severity,
    score: float | None,
    explanation: str,
    call: ToolCall | None = None,
    tool: str | None = None,
    field: str | None = None,
    details: Mapping[str, Any] | None = None,
) -> Finding:
    """A Finding about ``trace``; ``call`` (the offending call) supplies span id and tool. Its
    agent is the run's, as every per-agent series and alert reads it; a call another agent
    of the run made (an agent used as a tool, or one handed over to) is named in
    ``details["call_agent"]``.

    Bounded whatever the run (a finding is held in every stream subscriber's queue): the
    explanation is cut at ``MAX_EXPLANATION`` characters and each list in ``details`` at
    ``MAX_DETAIL_ITEMS`` items. A run evaluated incomplete ends the explanation with its
    ``incomplete_note``, kept whole however long the rest."""
    note = incomplete_note(trace)
    room = MAX_EXPLANATION - len(note)
    if len(explanation) > room:
        explanation = explanation[: room - 1] + "…"
    explanation += note
    if call is not None and call.agent is not None and call.agent != trace.agent:
        details = {**(details or {}), CALL_AGENT: call.agent}
    return Finding(
        category=category,
        severity=severity,
        evaluator=evaluator,
        reference=reference,
        score=None if score is None else clamp(score),
        explanation=explanation,
        trace_id=trace.trace_id,
        span_id=call.span_id if call is not None else None,
        tool=tool if tool is not None or call is None else call.tool_name,
        field=field,
        agent=trace.agent,
        details={k: _bounded(v) for k, v in details.items()} if details else {},
    )


#: Why a run was evaluated incomplete (``ToolTrace.incomplete_reason``), as its findings'
#: explanations say it: the first three were judged before the run ended, the last two ended
#: without some of its spans (docs/output-formats.md says what each means for a finding).
INCOMPLETE_NOTES: Final = {
    "timed_out": "its root span had not come within assembly.max_trace_age_seconds",
    "evicted": "evicted from a full buffer before it ended",
    "shutdown": "toolwatch shut down before it ended",
    "span_limit": "a span of it was dropped over a limit or rejected at ingest",
    MISSING_SPANS: (
        "a model span's input shows earlier model calls of this run whose spans never came"
        " (split across replicas by a rollout or scale step, or lost before toolwatch)"
    ),
}


def incomplete_reason(trace: ToolTrace) -> str | None:
    """Why ``trace`` was evaluated incomplete, as its findings say it (``unknown`` when the
    run does not say), ``None`` for a complete run."""
    return None if trace.complete else trace.incomplete_reason or "unknown"


def incomplete_note(trace: ToolTrace) -> str:
    """What a finding's explanation ends with when ``trace`` was evaluated incomplete ("" for
    a complete run): the reason and that the run was judged on the spans that came."""
    reason = incomplete_reason(trace)
    if reason is None:
        return ""
    why = INCOMPLETE_NOTES.get(reason, "")
    said = f"{reason}: {why}" if why else reason
    return f" [run evaluated incomplete ({said}); judged on the spans that came]"


#: The ``details`` key naming the agent that made a finding's call, when not the run's.
CALL_AGENT: Final = "call_agent"

#: Bounds on one finding (``make_finding``).
MAX_EXPLANATION: Final = 2_000
MAX_DETAIL_ITEMS: Final = 50


def _bounded(value: Any) -> Any:
    return value[:MAX_DETAIL_ITEMS] if type(value) is list else value


#: The ``details`` keys saying what became of a finding's dangerous call (``call_outcome``).
OUTCOME: Final = "outcome"
ERROR_TYPE: Final = "error_type"


def call_outcome(
    trace: ToolTrace, call: ToolCall, *, tool_spanned: bool
) -> tuple[dict[str, str], str]:
    """What became of the dangerous ``call`` of ``trace`` a finding names: the ``details``
    to add (``OUTCOME``, and ``ERROR_TYPE`` when it failed with one recorded) and what its
    explanation adds (``""`` for a call that went through). ``tool_spanned``: another call
    of its tool in the run has a tool span (``base.spanned_tools``). The outcome is

    - ``failed``: its status is error. It may still have done something (a timeout on a
      refund the payment system made), so it is said, not taken for "nothing happened";
    - ``never_run``: the model requested it and the agent never ran it (``base.never_ran``,
      in a run that lost no spans);
    - ``no_tool_span``: no span says whether it ran: the producer records no span of its
      tool, the run was evaluated before it ended (the span may be still to come), or it
      lost spans (the call's may be among them);
    - ``ok``: it ran (a tool span, or the provider ran it, ``hosted``) and did not fail."""
    if call.status is not CallStatus.OK:
        if call.error_type:
            return {OUTCOME: "failed", ERROR_TYPE: call.error_type}, (
                f"the flagged call failed ({call.error_type})"
            )
        return {OUTCOME: "failed"}, "the flagged call failed (no error type recorded)"
    if call.span_id is not None or call.hosted:
        return {OUTCOME: "ok"}, ""
    if trace.complete and never_ran(call, tool_spanned, complete=True):
        return {OUTCOME: "never_run"}, "the flagged call was requested by the model, never run"
    if unfinished(trace) and not lost_earlier(trace):
        said = "no tool span yet, the run was evaluated before it ended"
    elif not trace.complete:
        said = "no tool span, but the run lost spans"
    else:
        said = "no tool span, so whether it ran is not recorded"
    return {OUTCOME: "no_tool_span"}, f"the flagged call has {said}"
