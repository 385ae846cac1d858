"""tool_selection: every mode, the edge cases peers disagree on, findings and explanations."""

from __future__ import annotations

import pytest
from eval_factories import FLAKY, STEADY, call, case, grouped, trace

from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.selection import ToolSelection, jaccard, recall, selection_score
from toolwatch.evaluation.settings import ToolSelectionSettings
from toolwatch.model import Category, ReferenceKind, Severity
from toolwatch.names import NameNormalizer

MODES = ("expected", "expected_set", "exact", "set", "first")


def evaluator(**settings: object) -> ToolSelection:
    return ToolSelection(ToolSelectionSettings.model_validate(settings), NameNormalizer())


@pytest.mark.parametrize(
    ("expected", "actual", "scores"),
    [
        # (expected, expected_set, exact, set, first)
        ((), (), (1.0, 1.0, 1.0, 1.0, 1.0)),  # both empty
        ((), ("a",), (1.0, 1.0, 0.0, 0.0, 0.0)),  # nothing expected, a call made
        (("a",), (), (0.0, 0.0, 0.0, 0.0, 0.0)),  # nothing called
        (("a", "b", "c", "d", "e"), ("a", "b", "c", "d"), (0.8, 0.8, 0.0, 0.8, 1.0)),
        (("a", "b"), ("b", "a"), (0.5, 1.0, 0.0, 1.0, 0.0)),  # order only
        (("a", "a"), ("a",), (0.5, 0.5, 0.0, 0.5, 1.0)),  # a repeat expected, made once
        (("a",), ("a", "a"), (1.0, 1.0, 0.0, 0.5, 1.0)),  # a repeat not expected
        (("a", "b"), ("a", "b", "c"), (1.0, 1.0, 0.0, 2 / 3, 1.0)),  # an extra call
        (("a", "b"), ("c", "d"), (0.0, 0.0, 0.0, 0.0, 0.0)),  # wrong tools
    ],
)
def test_selection_score_per_mode(
    expected: tuple[str, ...], actual: tuple[str, ...], scores: tuple[float, ...]
) -> None:
    got = tuple(selection_score(mode, actual, expected) for mode in MODES)
    assert got == pytest.approx(scores)


def test_repeated_calls_count_as_a_multiset_not_a_set() -> None:
    assert recall(["a", "a", "b"], ["a", "a", "a"]) == pytest.approx(2 / 3)
    assert jaccard(["a", "a", "b"], ["a", "a", "a"]) == pytest.approx(2 / 4)


def test_unknown_mode_is_a_value_error_naming_the_mode() -> None:
    with pytest.raises(ValueError, match="'fuzzy'"):
        selection_score("fuzzy", [], [])


def test_missed_tool_gives_drift_finding_with_the_documented_explanation() -> None:
    expected = case("lookup_order", "validate_input", "check_stock", "issue_refund", "notify")
    run = trace("lookup_order", "check_stock", "issue_refund", "notify")
    result = evaluator()(run, Reference(expected=expected))
    assert result is not None
    assert result.scores == {"score": pytest.approx(0.8)}
    assert result.explanation == (
        "Selection: 80% (called 4/5 expected tools, missed: [validate_input])."
    )
    (finding,) = result.findings
    assert finding.category is Category.TOOL_SELECTION_DRIFT
    assert finding.reference is ReferenceKind.EXPECTED
    assert finding.tool == "validate_input"
    assert finding.severity is Severity.LOW  # a 0.2 drop
    assert finding.details["missed"] == ["validate_input"]


def test_score_at_or_above_threshold_raises_no_finding() -> None:
    run = trace("a", "b", "c", "d")
    result = evaluator(threshold=0.8)(run, Reference(expected=case("a", "b", "c", "d", "e")))
    assert result is not None
    assert result.findings == ()


def test_severity_floor_raises_the_effect_size_severity() -> None:
    run = trace("a", "b", "c", "d")
    result = evaluator(severity_floor="high")(
        run, Reference(expected=case("a", "b", "c", "d", "e"))
    )
    assert result is not None
    assert result.findings[0].severity is Severity.HIGH


def test_expected_no_tools_scores_one_only_without_calls() -> None:
    quiet = evaluator()(trace(), Reference(expected=case(expected_no_tools=True)))
    assert quiet is not None
    assert (quiet.scores["score"], quiet.findings) == (1.0, ())


@pytest.mark.parametrize("fields", [{"expected_no_tools": True}, {"expected_tool_count": 0}])
def test_expected_no_tools_with_calls_is_unnecessary_tool_call(fields: dict[str, object]) -> None:
    """``expected_tool_count: 0`` naming no tools reads as ``expected_no_tools``."""
    run = trace("search", "search")
    result = evaluator()(run, Reference(expected=case(**fields)))
    assert result is not None
    assert result.scores["score"] == 0.0
    (finding,) = result.findings
    assert finding.category is Category.UNNECESSARY_TOOL_CALL
    assert finding.severity is Severity.MEDIUM
    assert (finding.span_id, finding.tool) == ("s0", "search")
    assert result.explanation == "Selection: 0% (expected no tool calls, made 2: [search, search])."


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "fields", [{"expected_min_steps": 2}, {"expected_tool_count": 3}, {"expected_refusal": False}]
)
def test_a_case_that_names_no_tools_gives_selection_nothing_to_judge(
    mode: str, fields: dict[str, object]
) -> None:
    """A canary case that only bounds the steps, counts the calls or expects an answer
    (composite: "the case names no tools"; safety: no reference for drift). Modes set,
    exact and first paged a critical TOOL_SELECTION_DRIFT, "called 0/0 expected tools", on
    every run that made a call."""
    run = trace("lookup_order", "issue_refund")
    assert evaluator(mode=mode)(run, Reference(expected=case(**fields))) is None


def test_a_source_that_made_no_call_still_scores_per_mode() -> None:
    run = trace("search")
    recall_mode = evaluator(source_mode="expected_set")(run, Reference(source=trace()))
    jaccard_mode = evaluator(source_mode="set")(run, Reference(source=trace()))
    assert recall_mode is not None and jaccard_mode is not None
    assert (recall_mode.scores["score"], recall_mode.findings) == (1.0, ())
    assert jaccard_mode.scores["score"] == 0.0
    assert jaccard_mode.findings[0].category is Category.TOOL_SELECTION_DRIFT


def test_case_selection_mode_overrides_the_configured_mode() -> None:
    expected = case("a", "b", selection_mode="exact")
    result = evaluator(mode="expected_set")(trace("b", "a"), Reference(expected=expected))
    assert result is not None
    assert result.scores["score"] == 0.0


def test_against_source_uses_source_mode_jaccard_by_default() -> None:
    source = trace("a", "b")
    result = evaluator()(trace("a", "b", "c"), Reference(source=source))
    assert result is not None
    assert result.scores["score"] == pytest.approx(2 / 3)
    assert result.findings[0].reference is ReferenceKind.SOURCE
    assert result.explanation == "Selection: 67% (called 2/2 source tools, extra: [c])."


def test_auto_prefers_the_golden_case_over_the_source() -> None:
    reference = Reference(expected=case("a"), source=trace("z"))
    result = evaluator()(trace("a"), reference)
    assert result is not None
    assert result.scores["score"] == 1.0


def test_against_expected_without_a_case_does_not_apply() -> None:
    assert evaluator(against="expected")(trace("a"), Reference(source=trace("a"))) is None
    assert evaluator()(trace("a"), Reference()) is None


def test_names_are_normalized_with_aliases_and_case_folding() -> None:
    selection = ToolSelection(
        ToolSelectionSettings(), NameNormalizer({"lookupOrder": "lookup_order"})
    )
    run = trace(call(" LookupOrder ", index=0))
    result = selection(run, Reference(expected=case("LOOKUP_ORDER")))
    assert result is not None
    assert result.scores["score"] == 1.0


def test_in_order_mode_explains_how_many_calls_kept_the_order() -> None:
    result = evaluator(mode="expected")(trace("b", "a"), Reference(expected=case("a", "b")))
    assert result is not None
    assert result.explanation == "Selection: 50% (called 2/2 expected tools, 1 in order)."
    assert result.findings[0].details["mode"] == "expected"


@pytest.mark.parametrize("mode", ["expected", "exact", "first"])
def test_ordered_modes_take_parallel_calls_in_either_order(mode: str) -> None:
    run = trace(call("b", index=0, group=3), call("a", index=1, group=3))
    result = evaluator(mode=mode)(run, Reference(expected=case("a", "b")))
    assert result is not None
    assert (result.scores["score"], result.findings) == (1.0, ())
    # Started one after the other, b before a is a different sequence.
    sequential = evaluator(mode=mode)(trace("b", "a"), Reference(expected=case("a", "b")))
    assert sequential is not None
    assert sequential.scores["score"] < 1.0


@pytest.mark.parametrize("mode", ["exact", "first"])
def test_a_group_split_by_another_agents_call_moves_only_its_members(mode: str) -> None:
    """issue_refund and notify issued together, the billing agent's lookup_order started
    between them: the run's first call is issue_refund or notify in every order the rule
    allows, so against lookup_order, issue_refund, notify it is a miss (critical); against
    notify, lookup_order, issue_refund the group reads as that."""
    run = trace(
        call("issue_refund", index=0, group=1),
        call("lookup_order", index=1, agent="billing"),
        call("notify", index=2, group=1),
    )
    missed = case("lookup_order", "issue_refund", "notify", selection_mode=mode)
    result = evaluator()(run, Reference(expected=missed))
    assert result is not None
    assert result.scores["score"] == 0.0
    assert [f.severity for f in result.findings] == [Severity.CRITICAL]
    kept = case("notify", "lookup_order", "issue_refund", selection_mode=mode)
    result = evaluator()(run, Reference(expected=kept))
    assert result is not None
    assert (result.scores["score"], result.findings) == (1.0, ())


def test_in_order_mode_takes_a_group_in_the_order_that_keeps_the_most_in_order() -> None:
    """get_customer is called before the group and in it: read as get_customer, search,
    get_customer, search, the run holds the expected search, get_customer, search."""
    run = grouped("get_customer", "search", ("get_customer", "search"))
    expected = Reference(expected=case("search", "get_customer", "search"))
    result = evaluator(mode="expected")(run, expected)
    assert result is not None
    assert (result.scores["score"], result.findings) == (1.0, ())
    assert result.explanation == (
        "Selection: 100% (called 3/3 expected tools, 3 in order, extra: [get_customer])."
    )


def test_source_mode_exact_takes_a_parallel_source_group_in_either_order() -> None:
    source = trace(call("a", index=0, group=1), call("b", index=1, group=1))
    result = evaluator(source_mode="exact")(trace("b", "a"), Reference(source=source))
    assert result is not None
    assert result.scores["score"] == 1.0


@pytest.mark.parametrize("mode", ["set", "exact"])
def test_failed_calls_made_again_are_no_extra_selection(mode: str) -> None:
    """The multiset modes read a retry after a failure as one call with it, as the policy
    counts actions: a flaky order service is not the agent selecting more lookups, on the
    run's side or the source's."""
    select = evaluator(source_mode=mode, mode=mode)
    for run, reference in [
        (FLAKY, Reference(source=STEADY)),
        (STEADY, Reference(source=FLAKY)),
        (FLAKY, Reference(expected=case("lookup_order", "issue_refund"))),
    ]:
        result = select(run, reference)
        assert result is not None
        assert (result.scores["score"], result.findings) == (1.0, ())
