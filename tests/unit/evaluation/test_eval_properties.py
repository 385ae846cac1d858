"""Properties: a run scores 1.0 against itself, every score stays in [0, 1], and evaluators
read the calls in sequence order however the trace holds them."""

from __future__ import annotations

import dataclasses

import pytest
from eval_factories import POLICY, as_case, call, tool_traces, trace
from hypothesis import example, given, settings
from hypothesis import strategies as st

from toolwatch.evaluation import EvaluationPipeline, EvaluationSettings
from toolwatch.evaluation.base import Reference, pct
from toolwatch.evaluation.concurrency import in_sequence
from toolwatch.evaluation.loops import acted
from toolwatch.evaluation.policy_settings import PolicySettings
from toolwatch.evaluation.selection import selection_score
from toolwatch.model_traces import ToolTrace
from toolwatch.names import NameNormalizer

STRATEGIES = ("exact", "subset", "numeric", "contains", "fuzzy")
MODES = ("expected", "expected_set", "exact", "set", "first")
COMPARING = ("tool_selection", "tool_arguments", "tool_trace_structure", "order", "composite")


def pipeline(strategy: str = "exact", mode: str = "expected_set") -> EvaluationPipeline:
    evaluators = {
        "tool_arguments": {"default_strategy": strategy},
        "tool_selection": {"mode": mode, "source_mode": mode},
    }
    return EvaluationPipeline(
        EvaluationSettings.model_validate({"policy": POLICY, "evaluators": evaluators})
    )


PIPELINES = {(s, m): pipeline(s, m) for s in STRATEGIES for m in MODES}
BOUND = PolicySettings.model_validate(POLICY).action_fields()


def comparing_scores(
    run: ToolTrace, reference: Reference, strategy: str, mode: str
) -> dict[str, float]:
    result = PIPELINES[(strategy, mode)].evaluate(run, reference.expected, reference.source)
    assert result.failures == ()
    return {
        f"{r.evaluator}.{key}": value
        for r in result.results
        if r.evaluator in COMPARING
        for key, value in r.scores.items()
    }


@settings(max_examples=60)
@given(tool_traces(), st.sampled_from(STRATEGIES), st.sampled_from(MODES))
def test_a_run_scores_one_against_itself_as_source(
    run: ToolTrace, strategy: str, mode: str
) -> None:
    scores = comparing_scores(run, Reference(source=run), strategy, mode)
    assert scores
    assert all(value == 1.0 for value in scores.values()), scores


@settings(max_examples=60)
@given(tool_traces(), st.sampled_from(STRATEGIES), st.sampled_from(MODES))
@example(  # a failed refund made again on its bound value, otherwise corrected: one action
    trace(
        call("issue_refund", {"a": [], "b": None}, index=0, ok=False),
        call("lookup_order", index=1, ok=False),
        call("issue_refund", {"a": []}, index=2, ok=False),
    ),
    "exact",
    "expected",
)
def test_a_run_scores_one_against_its_own_golden_case(
    run: ToolTrace, strategy: str, mode: str
) -> None:
    run = dataclasses.replace(run, refusal=False)
    # A case lists what to do, not failed attempts: the run's actions as the pipeline reads
    # them (a failed refund made again on the same bound value is one).
    actions = acted(run, NameNormalizer(), BOUND)
    expected = as_case(actions, expected_min_steps=len(actions.calls))
    scores = comparing_scores(run, Reference(expected=expected), strategy, mode)
    assert all(value == 1.0 for value in scores.values()), scores


@given(tool_traces(), tool_traces(), st.sampled_from(STRATEGIES), st.sampled_from(MODES))
def test_scores_stay_in_the_unit_interval_against_a_source(
    run: ToolTrace, source: ToolTrace, strategy: str, mode: str
) -> None:
    result = PIPELINES[(strategy, mode)].evaluate(run, source=source)
    assert result.failures == ()
    for r in result.results:
        assert all(0.0 <= v <= 1.0 for v in r.scores.values()), (r.evaluator, r.scores)
        assert all(f.score is None or 0.0 <= f.score <= 1.0 for f in r.findings)


@given(tool_traces(), tool_traces(), st.booleans(), st.sampled_from(STRATEGIES))
def test_scores_stay_in_the_unit_interval_against_a_case(
    run: ToolTrace, other: ToolTrace, no_tools: bool, strategy: str
) -> None:
    expected = as_case(other, expected_no_tools=no_tools, expected_min_steps=len(other.calls))
    result = PIPELINES[(strategy, "expected")].evaluate(run, expected=expected)
    assert result.failures == ()
    for r in result.results:
        assert all(0.0 <= v <= 1.0 for v in r.scores.values()), (r.evaluator, r.scores)


@given(
    st.lists(st.sampled_from("abc"), max_size=6),
    st.lists(st.sampled_from("abc"), max_size=6),
    st.sampled_from(MODES),
)
def test_selection_scores_stay_in_the_unit_interval(
    actual: list[str], expected: list[str], mode: str
) -> None:
    assert 0.0 <= selection_score(mode, actual, expected) <= 1.0
    assert selection_score(mode, actual, actual) == 1.0


@pytest.mark.parametrize("mode", MODES)
def test_both_sides_empty_score_one_in_every_mode(mode: str) -> None:
    assert selection_score(mode, [], []) == 1.0


@given(indexes=st.lists(st.integers(0, 5), max_size=8))
def test_in_sequence_is_the_calls_sorted_by_sequence_index(indexes: list[int]) -> None:
    calls = tuple(call(f"t{n}", index=i) for n, i in enumerate(indexes))
    ordered = in_sequence(calls)
    assert [c.tool_name for c in ordered] == [
        c.tool_name for c in sorted(calls, key=lambda c: c.sequence_index)
    ]
    if indexes == sorted(indexes):
        assert ordered is calls  # already in order (what the timeline builds): not copied


@given(st.floats(min_value=0.0, max_value=1.0))
def test_a_score_reads_as_a_whole_percentage_that_only_the_ends_reach(score: float) -> None:
    text = pct(score)
    value = int(text.removesuffix("%"))
    assert text == f"{value}%"
    assert abs(value - score * 100) <= 1  # rounded, or nudged off an end it does not reach
    assert (value == 100) is (score == 1.0)
    assert (value == 0) is (score == 0.0)
