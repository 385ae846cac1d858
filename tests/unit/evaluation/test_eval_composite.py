"""composite: report figures against golden cases and the failure type of a miss."""

from __future__ import annotations

from typing import Any

import pytest
from eval_factories import call, case, grouped, trace

from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.composite import Composite, failure_type, step_efficiency
from toolwatch.evaluation.settings import CompositeSettings, ToolArgumentsSettings
from toolwatch.model_evaluation import EvalResult, GoldenCase
from toolwatch.model_traces import ToolTrace
from toolwatch.names import NameNormalizer


def evaluate(run: ToolTrace, expected: GoldenCase, **settings: Any) -> EvalResult:
    composite = Composite(
        CompositeSettings.model_validate(settings), ToolArgumentsSettings(), NameNormalizer()
    )
    result = composite(run, Reference(expected=expected))
    assert result is not None
    return result


def test_figures_and_explanation_for_a_missed_tool() -> None:
    expected = case("lookup", "validate_input", "check", "refund", "notify", expected_min_steps=6)
    result = evaluate(trace("lookup", "check", "refund", "notify"), expected)
    assert result.scores == pytest.approx(
        {
            "score": 0.8,
            "selection": 0.8,
            "ordering": 0.8,
            "tool_name_accuracy": 0.0,
            "step_efficiency": 4 / 6,
        }
    )
    assert result.explanation == (
        "Selection: 80% (called 4/5 expected tools, missed: [validate_input]). Ordering: 80%. "
        "Composite: 80%; failure: wrong_tool."
    )
    assert result.findings == ()


def test_recall_metric_and_weights_are_configurable() -> None:
    run = trace("b", "a", "x")
    jaccard = evaluate(run, case("a", "b"))
    weighted = evaluate(
        run, case("a", "b"), selection_metric="recall", weights={"selection": 1.0, "ordering": 0.0}
    )
    assert jaccard.scores["selection"] == pytest.approx(2 / 3)
    assert jaccard.scores["score"] == pytest.approx(0.6 * 2 / 3 + 0.4 * 0.5)
    assert weighted.scores["selection"] == 1.0
    assert weighted.scores["score"] == 1.0


def test_parameter_accuracy_is_reported_when_the_case_gives_arguments() -> None:
    result = evaluate(trace(("search", {"q": "a"})), case(("search", {"q": "a", "n": 2})))
    assert result.scores["parameter_accuracy"] == pytest.approx(0.5)
    assert result.scores["tool_name_accuracy"] == 1.0
    assert "parameter_accuracy" not in evaluate(trace("search"), case("search")).scores


def test_a_case_of_mode_first_is_met_by_a_run_that_calls_its_tool_first() -> None:
    """The case fixes the first call alone, as ``tool_selection`` and the failure type read
    it: the calls after it are neither extra (Jaccard) nor out of the case's sequence."""
    first = case("classify_ticket", selection_mode="first")
    met = evaluate(trace("classify_ticket", "search_kb", "reply"), first)
    assert met.scores == {
        "score": 1.0,
        "selection": 1.0,
        "ordering": 1.0,
        "tool_name_accuracy": 1.0,
    }
    assert met.explanation.endswith("Composite: 100%; failure: none.")
    missed = evaluate(trace("search_kb", "classify_ticket"), first)
    assert (missed.scores["selection"], missed.scores["tool_name_accuracy"]) == (0.0, 0.0)
    assert missed.explanation.endswith("failure: wrong_tool.")


def test_expected_no_tools_figures() -> None:
    quiet = evaluate(trace(), case(expected_no_tools=True))
    noisy = evaluate(trace("search"), case(expected_no_tools=True))
    assert quiet.scores["score"] == 1.0
    assert noisy.scores["score"] == 0.0
    assert noisy.explanation.endswith("failure: wrong_tool.")


@pytest.mark.parametrize(
    ("actual", "minimum", "efficiency"),
    [(4, 6, 4 / 6), (6, 4, 4 / 6), (3, 3, 1.0), (0, 0, 1.0), (2, 0, 0.0)],
)
def test_step_efficiency(actual: int, minimum: int, efficiency: float) -> None:
    assert step_efficiency(actual, minimum) == pytest.approx(efficiency)


@pytest.mark.parametrize(
    ("run", "expected", "failure"),
    [
        (trace(), case("search"), "not_triggered"),
        (trace("lookup"), case("search"), "wrong_tool"),
        (trace("search"), case("search", "lookup"), "wrong_tool"),
        (trace("search"), case(expected_no_tools=True), "wrong_tool"),
        (trace(("search", {"q": "b"})), case(("search", {"q": "a"})), "wrong_arguments"),
        (trace(("search", {"q": "a"})), case(("search", {"q": "a"})), None),
        (trace("search", "extra"), case("search"), None),  # extras are not a miss
        (trace(), case(expected_no_tools=True), None),
        (trace("anything"), case(), None),
        (trace("search", "other"), case("search", "lookup", selection_mode="first"), None),
        (trace("lookup", "search"), case("search", "lookup", selection_mode="first"), "wrong_tool"),
        # Issued together, the two calls have no first: read in the case's order, as the
        # composite and tool_selection read them (this was wrong_tool in replay's report).
        (
            trace(call("lookup", index=0, group=0), call("search", index=1, group=0)),
            case("search", "lookup", selection_mode="first"),
            None,
        ),
        # Issued together with search, another agent's call between them: the call between
        # stays second, so the run's first call is lookup or search, never it.
        (
            trace(
                call("lookup", index=0, group=0),
                call("check", index=1, agent="billing"),
                call("search", index=2, group=0),
            ),
            case("check", "lookup", "search", selection_mode="first"),
            "wrong_tool",
        ),
        (
            trace(
                call("lookup", index=0, group=0),
                call("check", index=1, agent="billing"),
                call("search", index=2, group=0),
            ),
            case("search", "check", "lookup", selection_mode="first"),
            None,
        ),
    ],
)
def test_failure_type(run: ToolTrace, expected: GoldenCase, failure: str | None) -> None:
    assert failure_type(run, expected) == failure


def test_failure_type_uses_the_given_argument_settings() -> None:
    run, expected = trace(("search", {"q": "Paris, FR"})), case(("search", {"q": "paris"}))
    lenient = ToolArgumentsSettings(default_strategy="contains")
    assert failure_type(run, expected) == "wrong_arguments"
    assert failure_type(run, expected, lenient) is None


def test_composite_needs_a_golden_case_or_a_shadow_source() -> None:
    composite = Composite(CompositeSettings(), ToolArgumentsSettings(), NameNormalizer())
    assert composite(trace("a"), Reference()) is None


def test_failed_calls_made_again_are_one_call_in_every_figure() -> None:
    """As ``tool_selection`` and ``order`` read them: a lookup that failed and was asked
    again is one lookup, so the run meets the source that looked up once, and the case."""
    composite = Composite(CompositeSettings(), ToolArgumentsSettings(), NameNormalizer())
    flaky = trace(
        call("lookup", {"id": 1}, index=0, ok=False),
        call("lookup", {"id": 1}, index=1),
        call("refund", {"id": 1}, index=2),
    )
    steady = trace(("lookup", {"id": 1}), ("refund", {"id": 1}))
    for reference in (Reference(source=steady), Reference(expected=case("lookup", "refund"))):
        result = composite(flaky, reference)
        assert result is not None
        assert result.scores["score"] == result.scores["tool_name_accuracy"] == 1.0
    assert failure_type(flaky, case("lookup", "refund", expected_min_steps=2)) is None
    stepped = evaluate(flaky, case("lookup", "refund", expected_min_steps=2))
    assert stepped.scores["step_efficiency"] == 1.0


def test_against_a_shadow_source_the_run_is_scored_as_order_scores_it() -> None:
    """A candidate model gated in CI against the model it replaces (replay --min-score)."""
    composite = Composite(CompositeSettings(), ToolArgumentsSettings(), NameNormalizer())
    same = composite(
        trace(("lookup", {"id": 1}), "refund"),
        Reference(source=trace(("lookup", {"id": 1}), "refund")),
    )
    assert same is not None
    assert same.scores == {
        "score": 1.0,
        "selection": 1.0,
        "ordering": 1.0,
        "tool_name_accuracy": 1.0,
        "parameter_accuracy": 1.0,
    }  # no step_efficiency: a source sets no expected_min_steps
    assert same.explanation.endswith("Composite: 100%; failure: none.")
    # One call more than the source: Jaccard 2/3, LCS 2 / longer length 3.
    extra = composite(
        trace("lookup", "refund", "refund"), Reference(source=trace("lookup", "refund"))
    )
    assert extra is not None
    assert extra.scores["selection"] == pytest.approx(2 / 3)
    assert extra.scores["ordering"] == pytest.approx(2 / 3)
    assert extra.scores["score"] == pytest.approx(2 / 3)
    assert "source" in extra.explanation
    missed = composite(trace(), Reference(source=trace("lookup")))
    assert missed is not None
    assert missed.explanation.endswith("failure: not_triggered.")
    # A golden case, when the run has one, is what it is scored against.
    both = composite(trace("a"), Reference(expected=case("a"), source=trace("b")))
    assert both is not None and both.scores["score"] == 1.0


def test_parallel_calls_in_either_order_are_the_expected_sequence() -> None:
    run = trace(call("refund", index=0, group=1), call("notify", index=1, group=1))
    result = evaluate(run, case("notify", "refund"))
    assert (result.scores["ordering"], result.scores["tool_name_accuracy"]) == (1.0, 1.0)
    assert (
        evaluate(trace("refund", "notify"), case("notify", "refund")).scores["tool_name_accuracy"]
        == 0.0
    )


def test_ordering_takes_a_group_in_the_order_that_keeps_the_most_in_order() -> None:
    """As ``order`` scores it: get_customer before the group and in it holds the expected
    search, get_customer, search (the extra call costs selection, not ordering)."""
    run = grouped("get_customer", "search", ("get_customer", "search"))
    result = evaluate(run, case("search", "get_customer", "search"))
    assert result.scores["ordering"] == 1.0
    assert result.scores["score"] == pytest.approx(0.6 * 3 / 4 + 0.4)


def test_a_sources_parallel_calls_in_either_order_are_its_sequence() -> None:
    """The source asked for b and c together; the candidate called them one after the
    other, in the other order: ordering and the exact sequence hold, as ``order`` says."""
    composite = Composite(CompositeSettings(), ToolArgumentsSettings(), NameNormalizer())
    source = trace("a", call("c", index=1, group=1), call("b", index=2, group=1))
    result = composite(trace("a", "b", "c"), Reference(source=source))
    assert result is not None
    assert (result.scores["ordering"], result.scores["tool_name_accuracy"]) == (1.0, 1.0)
    assert result.scores["score"] == 1.0
    apart = composite(trace("a", "b", "c"), Reference(source=trace("a", "c", "b")))
    assert apart is not None and apart.scores["tool_name_accuracy"] == 0.0


@pytest.mark.parametrize(
    "fields", [{"expected_min_steps": 3}, {"expected_tool_count": 3}, {"expected_refusal": False}]
)
def test_a_case_that_names_no_tools_misses_none(fields: dict[str, Any]) -> None:
    """A canary case that only bounds the steps, counts the calls or expects an answer says
    nothing about which tools: a run that meets it is not scored as calling wrong ones."""
    result = evaluate(trace("lookup", "check", "refund"), case(**fields))
    selection = [result.scores[k] for k in ("selection", "ordering", "tool_name_accuracy")]
    assert selection == [1.0, 1.0, 1.0]
    assert result.explanation.endswith("failure: none.")
    assert result.explanation.startswith("Selection: 100% (the case names no tools). ")


def test_a_case_that_counts_no_calls_expects_none() -> None:
    """expected_tool_count: 0 expects no call, as expected_no_tools does."""
    made = evaluate(trace("lookup"), case(expected_tool_count=0))
    assert (made.scores["score"], made.explanation.endswith("failure: wrong_tool.")) == (0.0, True)
    none = evaluate(trace(), case(expected_tool_count=0))
    assert none.scores["score"] == 1.0


@pytest.mark.parametrize(("mode", "ordering"), [("expected_set", 1.0), ("expected", 0.5)])
def test_a_case_whose_own_mode_leaves_order_out_is_not_scored_for_it(
    mode: str, ordering: float
) -> None:
    result = evaluate(trace("b", "a"), case("a", "b", selection_mode=mode))
    assert result.scores["ordering"] == ordering
