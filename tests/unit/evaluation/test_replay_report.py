"""The replay report: means over the runs that have each figure, and which golden cases failed."""

from __future__ import annotations

import pytest
from eval_factories import case, trace

from toolwatch.evaluation import EvaluationPipeline, EvaluationSettings
from toolwatch.model import GoldenCase, ReferenceKind, ToolTrace
from toolwatch.replay_report import Report, ReportBuilder, parse_gate

SETTINGS = EvaluationSettings()


def report(*runs: tuple[ToolTrace, GoldenCase | None], gates: tuple[str, ...] = ()) -> Report:
    pipeline = EvaluationPipeline(SETTINGS)
    builder = ReportBuilder(SETTINGS, [parse_gate(g, "min") for g in gates])
    for run, golden in runs:
        builder.add(run, golden, pipeline.evaluate(run, golden, None))
    return builder.build()


def test_a_figure_only_some_runs_have_is_the_mean_over_those_runs() -> None:
    # Both runs are perfect; only the first case sets expected_min_steps.
    stepped = (trace("lookup", "refund"), case("lookup", "refund", expected_min_steps=2))
    greeting = (trace(), case(expected_no_tools=True, case_id="greeting"))
    built = report(stepped, greeting, gates=("composite.step_efficiency=0.9",))
    composite = built.scores["composite"]
    assert (composite["n"], composite["score"], composite["step_efficiency"]) == (2.0, 1.0, 1.0)
    assert built.passed  # it read 0.5 (1.0 over two runs) and failed the gate


def test_a_case_whose_tools_were_right_but_whose_order_was_not_failed() -> None:
    built = report((trace("refund", "lookup"), case("lookup", "refund", category="refunds")))
    assert built.categories["refunds"]["failed"] == 1.0
    (failed,) = built.failed_cases
    assert (failed.failure_type, failed.expected, failed.actual) == (
        "TOOL_ORDER_DRIFT",
        ("lookup", "refund"),
        ("refund", "lookup"),
    )
    assert built.failure_types == {"TOOL_ORDER_DRIFT": 1}


def test_a_case_that_had_to_refuse_and_answered_failed() -> None:
    must_refuse = case(expected_no_tools=True, expected_refusal=True, category="safety")
    built = report((trace(), must_refuse))
    assert built.failure_types == {"REFUSAL_REGRESSION": 1}
    assert built.categories["safety"]["failed"] == 1.0
    # A missed tool keeps composite's own failure type.
    assert report((trace("lookup"), case("lookup", "refund"))).failure_types == {"wrong_tool": 1}
    # A case kept is no failure.
    kept = report((trace("lookup", "refund"), case("lookup", "refund")))
    assert (kept.failed_cases, kept.failure_types) == ([], {})


def test_shadow_pairs_are_scored_by_composite_against_their_source() -> None:
    pipeline = EvaluationPipeline(SETTINGS)
    builder = ReportBuilder(SETTINGS, [parse_gate("composite=0.9", "min")])
    target, source = trace("lookup", "refund"), trace("lookup", "refund")
    builder.add(target, None, pipeline.evaluate(target, None, None))
    builder.add_pair(
        target, pipeline.evaluate(target, None, source, policy=False), ReferenceKind.SOURCE
    )
    built = builder.build()
    assert built.scores["composite"]["score"] == pytest.approx(1.0)
    assert built.passed
