"""Severity from effect size, floors, and the Finding builder."""

from __future__ import annotations

import dataclasses
import math

import pytest
from eval_factories import call, trace

from toolwatch.evaluation.severity import (
    MAX_EXPLANATION,
    clamp,
    effect_severity,
    incomplete_note,
    make_finding,
    severity_for,
)
from toolwatch.model import Category, ReferenceKind, Severity
from toolwatch.model_evaluation import Finding
from toolwatch.model_traces import ToolTrace


@pytest.mark.parametrize(
    ("score", "severity"),
    [
        (1.0, Severity.LOW),
        (0.8, Severity.LOW),
        (0.75, Severity.MEDIUM),
        (0.5, Severity.HIGH),
        (0.26, Severity.HIGH),
        (0.25, Severity.CRITICAL),
        (0.0, Severity.CRITICAL),
        (-3.0, Severity.CRITICAL),
        (math.nan, Severity.CRITICAL),
    ],
)
def test_effect_size_bands(score: float, severity: Severity) -> None:
    assert effect_severity(score) is severity


def test_floors_raise_and_never_lower() -> None:
    assert severity_for(0.9, Severity.HIGH) is Severity.HIGH
    assert severity_for(0.0, Severity.LOW) is Severity.CRITICAL
    assert severity_for(0.9, Severity.LOW, Severity.MEDIUM) is Severity.MEDIUM


def test_clamp() -> None:
    assert (clamp(1.5), clamp(-1.0), clamp(math.nan), clamp(0.3)) == (1.0, 0.0, 0.0, 0.3)


def test_make_finding_takes_span_and_tool_from_the_offending_call() -> None:
    run = trace(call("lookup", index=0, span="abc", agent="billing"), agent="billing")
    finding = make_finding(
        run,
        category=Category.UNNECESSARY_TOOL_CALL,
        evaluator="loops",
        reference=ReferenceKind.POLICY,
        severity=Severity.LOW,
        score=1.7,
        explanation="x",
        call=run.calls[0],
    )
    assert (finding.span_id, finding.tool, finding.agent, finding.score) == (
        "abc",
        "lookup",
        "billing",
        1.0,
    )
    assert finding.trace_id == run.trace_id
    assert finding.details == {}


def test_a_finding_on_a_call_a_nested_agent_made_names_it_beside_the_runs() -> None:
    """The run's agent labels the finding, as every per-agent series and alert reads it
    (a drift burst divides by the compared runs of the run's agent)."""
    run = trace(
        call("ask_billing", index=0, agent="support"),
        call("issue_refund", index=1, parent=0, agent="billing"),
        agent="support",
    )
    found = [
        make_finding(
            run,
            category=Category.MISSING_VERIFICATION_STEP,
            evaluator="safety",
            reference=ReferenceKind.POLICY,
            severity=Severity.HIGH,
            score=0.0,
            explanation="x",
            call=made,
            details={"verification_tools": ["lookup_order"]},
        )
        for made in (*run.calls, None)
    ]
    assert [(f.agent, f.details) for f in found] == [
        ("support", {"verification_tools": ["lookup_order"]}),
        ("support", {"verification_tools": ["lookup_order"], "call_agent": "billing"}),
        ("support", {"verification_tools": ["lookup_order"]}),
    ]


def _finding_of(run: ToolTrace, explanation: str) -> Finding:
    return make_finding(
        run,
        category=Category.MISSING_VERIFICATION_STEP,
        evaluator="safety",
        reference=ReferenceKind.POLICY,
        severity=Severity.HIGH,
        score=0.0,
        explanation=explanation,
        call=run.calls[0],
    )


@pytest.mark.parametrize(
    ("reason", "why"),
    [
        ("timed_out", "its root span had not come within assembly.max_trace_age_seconds"),
        ("evicted", "evicted from a full buffer before it ended"),
        ("shutdown", "toolwatch shut down before it ended"),
        ("span_limit", "a span of it was dropped over a limit or rejected at ingest"),
    ],
)
def test_a_finding_of_an_incomplete_run_says_so_in_its_explanation(reason: str, why: str) -> None:
    """The on-call reads the explanation first: a finding of a run judged without all its
    spans (the verification's may be among those that never came) must not read as one of a
    whole run."""
    run = dataclasses.replace(
        trace(call("issue_refund", index=0)), complete=False, incomplete_reason=reason
    )
    finding = _finding_of(run, "Safety: issue_refund: no earlier successful lookup.")
    assert finding.explanation == (
        "Safety: issue_refund: no earlier successful lookup. [run evaluated incomplete"
        f" ({reason}: {why}); judged on the spans that came]"
    )
    whole = _finding_of(trace(call("issue_refund", index=0)), "Safety: issue_refund: x.")
    assert whole.explanation == "Safety: issue_refund: x."


def test_a_long_explanation_is_cut_before_the_incomplete_note() -> None:
    run = dataclasses.replace(
        trace(call("issue_refund", index=0)), complete=False, incomplete_reason="timed_out"
    )
    finding = _finding_of(run, "y" * 5_000)
    note = " [run evaluated incomplete (timed_out: its root span had not come within"
    assert len(finding.explanation) == MAX_EXPLANATION
    assert finding.explanation.endswith("; judged on the spans that came]")
    assert finding.explanation.index("…" + note) == MAX_EXPLANATION - len(incomplete_note(run)) - 1
