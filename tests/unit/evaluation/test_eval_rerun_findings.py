"""A request the framework ran again under its call id (``ToolCall.rerun``: its retry policy,
a wrapper's span beside the tool's) is one request: the evaluators that judge calls one by
one (``safety``'s missing verification and disallowed tools, ``invariants``' ``arguments``
rules) give it one finding, on the attempt that went through (the first that succeeded, else
the last), listing its attempts' spans (``details.attempt_spans``). Two requests still give
two: another call id, or one id used again in another turn or by another agent; and an
attempt that recorded other bound values or other arguments than its request's first attempt
is judged on its own (``evaluation.attempts``). The runs marked by assembly are built from
spans (``tests/unit/assembly/assembly_support.py``)."""

from __future__ import annotations

from typing import Any

from eval_factories import A1, A2, call, rerun, trace

from tests import factories
from tests.unit.assembly.assembly_support import (
    REFUND_POLICY,
    REFUND_POLICY_FIELDS,
    agent,
    ask,
    hexid,
    llm,
    only,
    tool,
)
from toolwatch.evaluation.arguments import ToolArguments
from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.invariants import Invariants
from toolwatch.evaluation.loops import Loops
from toolwatch.evaluation.policy_settings import PolicySettings
from toolwatch.evaluation.safety import Safety
from toolwatch.evaluation.settings import (
    InvariantsSettings,
    LoopsSettings,
    SafetySettings,
    ToolArgumentsSettings,
)
from toolwatch.model import CallStatus, Category, SpanRecord
from toolwatch.model_evaluation import EvalResult, ExpectedCall, GoldenCase
from toolwatch.model_traces import ToolCall, ToolTrace

MISSING = Category.MISSING_VERIFICATION_STEP
DRIFT = Category.DANGEROUS_ACTION_DRIFT


def judge(run: ToolTrace, policy: PolicySettings = REFUND_POLICY, **reference: Any) -> EvalResult:
    return Safety(SafetySettings(), policy)(run, Reference(**reference))


def refund_timed_out_then_run_again() -> list[SpanRecord]:
    """No lookup; the model asks issue_refund(A-1) once (c1); the tool's span times out and
    the SDK's retry policy runs the request again under c1 (span 4), which goes through."""
    return [
        agent(1, None, "refund-bot", 0, 1_000),
        llm(2, 1, 10, 100, ask("issue_refund", "c1", A1)),
        tool(3, 1, "issue_refund", 101, 110, call_id="c1", status_code=2, error_type="Timeout"),
        tool(4, 1, "issue_refund", 120, 130, call_id="c1"),
        llm(5, 1, 400, 500),
    ]


def test_an_unverified_refund_run_again_is_one_missing_verification() -> None:
    """Scenario: ``refund_timed_out_then_run_again``, built from spans.
    Was: two MISSING_VERIFICATION_STEP findings (two pages' worth) for one request, the
    first saying "the flagged call failed (Timeout)" of a refund that went through.
    Now: one, on the attempt that went through (span 4, outcome ok), listing both spans."""
    run = only(refund_timed_out_then_run_again())
    assert [(c.span_id, c.status, c.rerun) for c in run.calls] == [
        (hexid(3), CallStatus.ERROR, False),
        (hexid(4), CallStatus.OK, True),
    ]

    result = judge(run)

    (finding,) = result.findings
    assert finding.category is MISSING
    assert finding.span_id == hexid(4)
    assert finding.details["outcome"] == "ok"
    assert finding.details["attempt_spans"] == [hexid(3), hexid(4)]
    assert finding.explanation == (
        "Safety: issue_refund: order_id not verified by an earlier successful [lookup_order]"
        " call of the same value (one request, 2 attempts: run again under its call id)."
    )
    assert result.scores["score"] == 0.0  # both calls were of the unverified request


def test_a_refund_recorded_twice_is_one_missing_verification_on_its_first_record() -> None:
    """Scenario: no lookup; one refund (c2) recorded by the tool's span and a wrapper's
    beside it, both ok (the second is the rerun).
    Was: two findings. Now: one, on the first success: the second records it again."""
    run = only(
        [
            agent(1, None, "refund-bot", 0, 1_000),
            llm(4, 1, 200, 300, ask("issue_refund", "c2", A1)),
            tool(5, 1, "issue_refund", 301, 330, call_id="c2"),
            tool(6, 1, "issue_refund", 302, 320, call_id="c2"),
            llm(7, 1, 400, 500),
        ]
    )
    assert [c.rerun for c in run.calls] == [False, True]

    (finding,) = judge(run).findings

    assert (finding.category, finding.span_id) == (MISSING, hexid(5))
    assert finding.details["attempt_spans"] == [hexid(5), hexid(6)]


def test_call_0_asked_again_in_a_later_turn_is_another_request() -> None:
    """Scenario: a model that numbers each turn's calls from ``call_0`` asks
    issue_refund(A-1) in two turns, never looking it up; the second turn's refund times out
    and is run again under ``call_0``.
    Now: two findings, one a turn; the rerun joins its own turn's request, not the first."""
    run = only(
        [
            agent(1, None, "refund-bot", 0, 1_000),
            llm(2, 1, 10, 100, ask("issue_refund", "call_0", A1)),
            tool(3, 1, "issue_refund", 101, 110, call_id="call_0"),
            llm(4, 1, 200, 300, ask("issue_refund", "call_0", A1)),
            tool(5, 1, "issue_refund", 301, 310, call_id="call_0", status_code=2),
            tool(6, 1, "issue_refund", 320, 330, call_id="call_0"),
            llm(7, 1, 400, 500),
        ]
    )
    assert [c.rerun for c in run.calls] == [False, False, True]

    findings = judge(run).findings

    assert [(f.category, f.span_id) for f in findings] == [(MISSING, hexid(3)), (MISSING, hexid(6))]
    assert "attempt_spans" not in findings[0].details
    assert findings[1].details["attempt_spans"] == [hexid(5), hexid(6)]


def refund_under_call_0(*, parent: str, index: int, ok: bool) -> ToolCall:
    """issue_refund(A-1), asked under ``call_0`` by refund-agent used as the tool call
    ``parent``."""
    return factories.tool_call(
        tool_name="issue_refund",
        arguments=A1,
        call_id="call_0",
        parent_call_id=parent,
        sequence_index=index,
        status=CallStatus.OK if ok else CallStatus.ERROR,
        agent="refund-agent",
        span_id=f"s{index}",
    )


def test_two_agents_asking_under_call_0_are_two_requests() -> None:
    """Scenario: two agents used as tools at once (under r1 and r2) each ask
    issue_refund(A-1) under ``call_0``; the second's is run again.
    Now: two findings, one an agent's request (``loops._request``: id, agent, parent call)."""
    first = refund_under_call_0(parent="r1", index=0, ok=True)
    second = refund_under_call_0(parent="r2", index=1, ok=False)
    again = rerun("issue_refund", A1, index=2, call_id="call_0", agent="refund-agent", parent="r2")

    findings = judge(trace(first, second, again)).findings

    assert [f.span_id for f in findings] == ["s0", "s2"]
    assert findings[1].details["attempt_spans"] == ["s1", "s2"]


def test_an_attempt_that_recorded_another_order_is_judged_on_its_own() -> None:
    """Scenario: the request refunds A-1 (unverified); its rerun's span recorded A-2 (its
    own arguments, unverified too).
    Now: two findings, one a value: the binding judges each attempt's own arguments."""
    run = trace(
        call("issue_refund", A1, index=0, ok=False),
        rerun("issue_refund", A2, index=1, call_id="c0"),
    )

    findings = judge(run).findings

    assert [(f.span_id, f.details["fields"]) for f in findings] == [("s0", A1), ("s1", A2)]


def test_a_verified_request_whose_rerun_recorded_another_order_still_pages() -> None:
    """Scenario: lookup_order(A-1), then the refund of A-1, whose rerun's span recorded
    A-2, never looked up.
    Now (as before): one finding, on the rerun: the only attempt unverified."""
    run = trace(
        call("lookup_order", A1, index=0),
        call("issue_refund", A1, index=1, ok=False),
        rerun("issue_refund", A2, index=2, call_id="c1"),
    )

    (finding,) = judge(run).findings

    assert (finding.category, finding.span_id) == (MISSING, "s2")
    assert "attempt_spans" not in finding.details


def test_without_bindings_attempts_with_other_arguments_are_one_request() -> None:
    """Scenario: no bindings (any lookup verifies a refund): the request and its rerun,
    which recorded other arguments, both unverified.
    Now: one finding: arguments were never what the check judged."""
    policy = PolicySettings.model_validate(
        {"dangerous_tools": ["issue_refund"], "verification_tools": ["lookup_order"]}
    )
    run = trace(
        call("issue_refund", A1, index=0, ok=False),
        rerun("issue_refund", A2, index=1, call_id="c0"),
    )

    (finding,) = judge(run, policy).findings

    assert (finding.category, finding.span_id) == (MISSING, "s1")
    assert finding.details["attempt_spans"] == ["s0", "s1"]


def test_all_attempts_failed_the_finding_is_on_the_last() -> None:
    run = trace(
        call("issue_refund", A1, index=0, ok=False),
        rerun("issue_refund", A1, index=1, call_id="c0", ok=False),
        rerun("issue_refund", A1, index=2, call_id="c0", ok=False),
    )

    (finding,) = judge(run).findings

    assert finding.span_id == "s2"
    assert finding.details["outcome"] == "failed"
    assert finding.details["attempt_spans"] == ["s0", "s1", "s2"]


def test_a_disallowed_tool_run_again_is_one_drift() -> None:
    """Scenario: the agent may only look orders up; it refunds A-1 (verified), which the
    framework runs again after a failure.
    Was: two DANGEROUS_ACTION_DRIFT findings (policy). Now: one, on the attempt that went
    through."""
    policy = PolicySettings.model_validate(
        {**REFUND_POLICY_FIELDS, "allowed_tools": {"*": ["lookup_order"]}}
    )
    run = trace(
        call("lookup_order", A1, index=0),
        call("issue_refund", A1, index=1, ok=False),
        rerun("issue_refund", A1, index=2, call_id="c1"),
    )

    (finding,) = judge(run, policy).findings

    assert (finding.category, finding.span_id) == (DRIFT, "s2")
    assert finding.details["attempt_spans"] == ["s1", "s2"]


def test_a_refund_run_again_beyond_the_golden_cases_is_one_drift() -> None:
    """Scenario: the golden case expects a lookup only; the run's one refund (verified) is
    run again after a failure. As before (``loops.retried``): one drift finding."""
    case = GoldenCase(case_id="lookup", expected_tools=(ExpectedCall(name="lookup_order"),))
    run = trace(
        call("lookup_order", A1, index=0),
        call("issue_refund", A1, index=1, ok=False),
        rerun("issue_refund", A1, index=2, call_id="c1"),
    )

    (finding,) = judge(run, expected=case).findings

    assert (finding.category, finding.span_id) == (DRIFT, "s2")


SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"q": {"type": "string", "maxLength": 3}},
}


def schema_violations(run: ToolTrace) -> EvalResult:
    policy = PolicySettings.model_validate(
        {"invariants": [{"kind": "arguments", "tool": "search", "schema": SEARCH_SCHEMA}]}
    )
    result = Invariants(InvariantsSettings(), policy)(run, Reference())
    assert result is not None
    return result


def test_arguments_that_fail_the_schema_run_again_are_one_violation() -> None:
    """Scenario: search({"q": "toolong"}) fails, and is run again with the same arguments.
    Was: two INVARIANT_VIOLATION findings. Now: one, on the attempt that went through."""
    long = {"q": "toolong"}
    run = trace(
        call("search", long, index=0, ok=False), rerun("search", long, index=1, call_id="c0")
    )

    (finding,) = schema_violations(run).findings

    assert finding.span_id == "s1"
    assert finding.details["attempt_spans"] == ["s0", "s1"]
    assert finding.explanation.endswith("(one request, 2 attempts: run again under its call id).")


def test_a_rerun_that_recorded_other_failing_arguments_is_its_own_violation() -> None:
    run = trace(
        call("search", {"q": "toolong"}, index=0, ok=False),
        rerun("search", {"q": "longer"}, index=1, call_id="c0"),
    )

    assert [f.span_id for f in schema_violations(run).findings] == ["s0", "s1"]


def test_two_requests_with_the_same_failing_arguments_are_two_violations() -> None:
    long = {"q": "toolong"}
    run = trace(call("search", long, index=0), call("search", long, index=1))

    assert [f.span_id for f in schema_violations(run).findings] == ["s0", "s1"]


def test_a_repeat_run_again_is_one_loop_finding() -> None:
    """Audit guard (as before: ``find_repeats`` skips a rerun): the model asks
    search({"q": "x"}) twice, the second time run again after a failure; one finding, on the
    model's repeat."""
    q = {"q": "x"}
    run = trace(
        call("search", q, index=0),
        call("search", q, index=1, ok=False),
        rerun("search", q, index=2, call_id="c1"),
    )
    policy = PolicySettings.model_validate({"repeat_limit": 0})

    (finding,) = Loops(LoopsSettings(), policy)(run, Reference()).findings

    assert (finding.category, finding.span_id) == (Category.UNNECESSARY_TOOL_CALL, "s1")


def test_wrong_arguments_run_again_are_one_argument_drift() -> None:
    """Audit guard (as before: ``loops.acted`` reads the attempts as one call): the golden
    case refunds A-2; the run's refund of A-1 times out and is run again."""
    case = GoldenCase(
        case_id="refund-a2", expected_tools=(ExpectedCall(name="issue_refund", arguments=A2),)
    )
    run = trace(
        call("issue_refund", A1, index=0, ok=False),
        rerun("issue_refund", A1, index=1, call_id="c0"),
    )
    evaluator = ToolArguments(ToolArgumentsSettings(), REFUND_POLICY.normalizer())

    result = evaluator(run, Reference(expected=case))

    assert result is not None
    (finding,) = result.findings
    assert (finding.category, finding.span_id) == (Category.ARGUMENT_VALUE_DRIFT, "s1")
