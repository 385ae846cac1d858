"""Review: a dangerous tool hammered on one entity with varying arguments (failed refunds of
order A1 for 5000, 4000, 3000, 2000, then one for 500 that went through) is now one action
everywhere, and ``retry_limit`` (``loops``), the backstop for an agent hammering a failing
tool, still keys retries by identical arguments: nothing flags the run. Before 06736c4 the
``call_count`` invariant (max 1) flagged it: 5 refunds."""

from __future__ import annotations

import yaml
from eval_factories import call, trace

from toolwatch.evaluation import EvaluationPipeline, EvaluationSettings
from toolwatch.model import Category
from toolwatch.model_traces import ToolTrace

DOC = """
policy:
  dangerous_tools: [issue_refund]
  verification_tools: [lookup_order]
  bindings: {issue_refund.order_id: lookup_order.order_id}
  retry_limit: 1
  invariants: [{kind: call_count, tool: issue_refund, max: 1, name: one-refund}]
"""


def _run(amounts: list[int]) -> ToolTrace:
    calls = [call("lookup_order", {"order_id": "A1"}, index=0)]
    calls += [
        call("issue_refund", {"order_id": "A1", "amount": a}, index=i + 1, ok=False)
        for i, a in enumerate(amounts)
    ]
    calls.append(call("issue_refund", {"order_id": "A1", "amount": 500}, index=len(calls)))
    return trace(*calls)


def _found(amounts: list[int]) -> set[tuple[str, Category]]:
    pipeline = EvaluationPipeline(EvaluationSettings.model_validate(yaml.safe_load(DOC)))
    return {(f.evaluator, f.category) for f in pipeline.evaluate(_run(amounts)).findings}


def test_identical_hammering_is_flagged_by_the_retry_limit() -> None:
    """The control: the same four failed refunds with identical arguments are flagged."""
    assert ("loops", Category.UNNECESSARY_TOOL_CALL) in _found([500, 500, 500, 500])


def test_hammering_one_order_with_varying_amounts_is_flagged() -> None:
    """Four failed refunds of A1, each for another amount (an agent probing what the refund
    service lets through), then one that went through: retry_limit 1 and call_count max 1
    are both configured, yet the run has no finding."""
    found = _found([5000, 4000, 3000, 2000])
    assert found & {
        ("loops", Category.UNNECESSARY_TOOL_CALL),
        ("invariants", Category.INVARIANT_VIOLATION),
    }


def test_the_loop_finding_says_the_retries_were_of_one_order() -> None:
    """The retries of a bound tool are counted on its bound values, and the finding says
    so: its arguments were not identical."""
    pipeline = EvaluationPipeline(EvaluationSettings.model_validate(yaml.safe_load(DOC)))
    result = pipeline.evaluate(_run([5000, 4000, 3000, 2000]))
    (finding,) = [f for f in result.findings if f.evaluator == "loops"]
    assert finding.explanation == (
        "Loops: issue_refund retried 4 times on the same order_id after failed results"
        " (retry limit 1)."
    )
    assert finding.details["spans"] == ["s3", "s4", "s5"]
