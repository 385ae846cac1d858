"""A request recorded twice (the tool's span and a wrapper's, ``rerun``) after its success
is one action for the comparing evaluators too (``loops.acted``), as for ``safety`` and
``call_count`` (``loops.retried``): ``acted`` returned the trace unchanged when every call
was ``ok``, so it never asked ``retried`` about the rerun (a review found it)."""

from __future__ import annotations

from assembly_support import REFUND_POLICY, agent, ask, llm, only, tool

from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.loops import acted
from toolwatch.evaluation.selection import ToolSelection
from toolwatch.evaluation.settings import ToolSelectionSettings
from toolwatch.model import SpanRecord
from toolwatch.model_evaluation import ExpectedCall, GoldenCase

POLICY = REFUND_POLICY
A1 = {"order_id": "A-1"}
REFUND_ONCE = GoldenCase(
    case_id="refund-a1",
    expected_tools=(ExpectedCall(name="lookup_order"), ExpectedCall(name="issue_refund")),
    selection_mode="exact",
)


def refund_recorded_twice() -> list[SpanRecord]:
    """As tests/unit/assembly/test_assembly_retried_arguments.py: the refund's request c2 is
    recorded by the tool's span and a wrapper's beside it, both ok."""
    return [
        agent(1, None, "refund-bot", 0, 1_000),
        llm(2, 1, 10, 100, ask("lookup_order", "c1", A1)),
        tool(3, 1, "lookup_order", 101, 110, call_id="c1"),
        llm(4, 1, 200, 300, ask("issue_refund", "c2", A1)),
        tool(5, 1, "issue_refund", 301, 330, call_id="c2"),
        tool(6, 1, "issue_refund", 302, 320, call_id="c2"),
        llm(7, 1, 400, 500),
    ]


def test_acted_drops_a_rerun_of_a_successful_request() -> None:
    """Scenario: one refund recorded by the tool's span and a wrapper's (rerun, both ok).
    Was: ``acted`` returns all three calls (its ``all ok`` shortcut ignores ``rerun``).
    Now: two actions, lookup and refund, as ``retried`` says ({2}).
    Older (c21e8fc made ``retried`` drop it but left ``acted``'s shortcut)."""
    trace = only(refund_recorded_twice())
    assert [c.rerun for c in trace.calls] == [False, False, True]

    made = acted(trace, POLICY.normalizer())

    assert [c.tool_name for c in made.calls] == ["lookup_order", "issue_refund"]


def test_one_refund_recorded_twice_is_no_selection_drift_from_a_golden_case() -> None:
    """Scenario: as above, against a golden case (mode ``exact``) of lookup then refund.
    Was: TOOL_SELECTION_DRIFT (score 0: the run "called" issue_refund twice).
    Now: score 1, no finding: the model asked for one refund, as safety already reads it.
    Older."""
    trace = only(refund_recorded_twice())
    evaluator = ToolSelection(ToolSelectionSettings(), POLICY.normalizer())

    result = evaluator(trace, Reference(expected=REFUND_ONCE))

    assert result is not None
    assert result.scores["score"] == 1.0
    assert result.findings == ()
