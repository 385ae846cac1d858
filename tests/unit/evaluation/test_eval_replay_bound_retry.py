"""Review: replay's failure type reads a bound retry as two calls (composite.failure_type is
built without the policy's action fields), while the engine's composite reads it as one."""

from __future__ import annotations

import yaml
from eval_factories import call, case, trace

from toolwatch.evaluation import EvaluationPipeline, EvaluationSettings
from toolwatch.replay_builder import ReportBuilder

BOUND = """
policy:
  dangerous_tools: [issue_refund]
  verification_tools: [lookup_order]
  bindings: {issue_refund.order_id: lookup_order.order_id}
"""

# The refund of A1 for the right amount failed; the model made it again for A1 with the
# wrong amount, and that went through. As actions (the engine's reading): one refund of 5000.
RUN = trace(
    ("lookup_order", {"order_id": "A1"}),
    call("issue_refund", {"order_id": "A1", "amount": 50}, index=1, ok=False),
    ("issue_refund", {"order_id": "A1", "amount": 5000}),
)
CASE = case("lookup_order", ("issue_refund", {"order_id": "A1", "amount": 50}), category="refunds")


def _report(document: str):
    settings = EvaluationSettings.model_validate(yaml.safe_load(document))
    pipeline = EvaluationPipeline(settings)
    builder = ReportBuilder(settings, [])
    result = pipeline.evaluate(RUN, CASE, None)
    builder.add(RUN, CASE, result)
    return result, builder.build()


def test_replay_failure_type_reads_a_bound_retry_as_the_engine_does() -> None:
    result, built = _report(BOUND)
    composite = next(r for r in result.results if r.evaluator == "composite")
    assert composite.scores["parameter_accuracy"] < 0.8  # the engine: the 5000 refund, wrong
    # composite's own failure type, as for any run whose arguments were wrong
    assert built.failure_types == {"wrong_arguments": 1}


def test_replay_counts_the_case_failed_without_tool_arguments() -> None:
    """With tool_arguments off no finding rescues the report: the case the run failed (its one
    refund was of the wrong amount, composite parameter_accuracy 0.5) is counted as kept."""
    result, built = _report(BOUND + "evaluators: {tool_arguments: {enabled: false}}\n")
    composite = next(r for r in result.results if r.evaluator == "composite")
    assert composite.scores["parameter_accuracy"] < 0.8
    assert built.categories["refunds"]["failed"] == 1.0
