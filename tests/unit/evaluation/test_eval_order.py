"""order: LCS against expected (over expected length) and source (over the longer length)."""

from __future__ import annotations

import pytest
from eval_factories import call, case, trace
from hypothesis import given
from hypothesis import strategies as st

from toolwatch.evaluation.base import Reference, follow
from toolwatch.evaluation.order import Order, first_divergence, lcs_length, order_score
from toolwatch.evaluation.settings import OrderSettings
from toolwatch.model import Category, ReferenceKind, ToolTrace
from toolwatch.names import NameNormalizer

EXPECTED, SOURCE = ReferenceKind.EXPECTED, ReferenceKind.SOURCE


@pytest.mark.parametrize(
    ("actual", "reference", "kind", "score"),
    [
        ((), (), EXPECTED, 1.0),
        ((), (), SOURCE, 1.0),
        (("a",), (), EXPECTED, 1.0),  # no expected order to break
        (("a",), (), SOURCE, 0.0),
        (("a", "b", "c"), ("a", "b", "c"), EXPECTED, 1.0),
        (("a", "c", "b"), ("a", "b", "c"), EXPECTED, 2 / 3),
        (("x", "a", "y", "b"), ("a", "b"), EXPECTED, 1.0),  # extras do not break the order
        (("x", "a", "y", "b"), ("a", "b"), SOURCE, 0.5),  # against a source they count
        (("b", "a"), ("a", "b"), SOURCE, 0.5),
        (("a", "a"), ("a",), SOURCE, 0.5),
    ],
)
def test_order_score(
    actual: tuple[str, ...], reference: tuple[str, ...], kind: ReferenceKind, score: float
) -> None:
    assert order_score(actual, reference, kind) == pytest.approx(score)


def reference_lcs(a: list[str], b: list[str]) -> int:
    """The textbook quadratic table, to check the bit-parallel version against."""
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            table[i + 1][j + 1] = (
                table[i][j] + 1 if x == y else max(table[i][j + 1], table[i + 1][j])
            )
    return table[-1][-1]


@given(
    st.lists(st.sampled_from("abcd"), max_size=12), st.lists(st.sampled_from("abcd"), max_size=12)
)
def test_lcs_length_matches_the_quadratic_table(a: list[str], b: list[str]) -> None:
    assert lcs_length(a, b) == reference_lcs(a, b) == lcs_length(b, a)


def test_lcs_length() -> None:
    assert lcs_length("ABCBDAB", "BDCABA") == 4
    assert lcs_length([], ["a"]) == 0


def test_first_divergence() -> None:
    assert first_divergence(["a", "b"], ["a", "b"]) is None
    assert first_divergence(["a", "c"], ["a", "b"]) == 1
    assert first_divergence(["a"], ["a", "b"]) == 1


def test_drift_finding_points_at_the_first_divergence() -> None:
    evaluator = Order(OrderSettings(), NameNormalizer())
    result = evaluator(trace("a", "c", "b"), Reference(expected=case("a", "b", "c")))
    assert result is not None
    assert result.explanation == "Ordering: 67% (2/3 expected calls in order)."
    (finding,) = result.findings
    assert finding.category is Category.TOOL_ORDER_DRIFT
    assert (finding.span_id, finding.tool) == ("s1", "b")
    assert finding.explanation == (
        "Ordering: 67% (2/3 expected calls in order), first divergence at call 2: "
        "expected b, called c."
    )


def test_expected_no_tools_is_left_to_selection() -> None:
    evaluator = Order(OrderSettings(), NameNormalizer())
    assert evaluator(trace("a"), Reference(expected=case(expected_no_tools=True))) is None


def order_of(run: ToolTrace, reference: Reference) -> float:
    result = Order(OrderSettings(), NameNormalizer())(run, reference)
    assert result is not None
    return result.scores["score"]


def test_parallel_calls_started_the_other_way_round_keep_the_order() -> None:
    # The model asked for a and b at once; the framework happened to start b first.
    run = trace(call("b", index=0, group=1), call("a", index=1, group=1), call("c", index=2))
    assert order_of(run, Reference(expected=case("a", "b", "c"))) == 1.0
    source = trace(call("a", index=0, group=7), call("b", index=1, group=7), call("c", index=2))
    assert order_of(run, Reference(source=source)) == 1.0
    # A parallel source group fits a sequential run in either order, too.
    assert order_of(trace("b", "a", "c"), Reference(source=source)) == 1.0


def test_sequential_calls_in_the_other_order_are_still_drift() -> None:
    assert order_of(trace("b", "a", "c"), Reference(expected=case("a", "b", "c"))) == 2 / 3
    # Only members of one group trade places: b (group 1) cannot move past c (group 2).
    run = trace(
        call("c", index=0, group=2),
        call("x", index=1, group=2),
        call("b", index=2, group=1),
        call("a", index=3, group=1),
    )
    assert order_of(run, Reference(expected=case("a", "b", "c"))) == 2 / 3


def test_drift_in_a_parallel_run_names_the_call_that_diverges() -> None:
    # The group {c, a} is read as a, c: the first divergence is c where b was expected.
    run = trace(call("c", index=0, group=1), call("a", index=1, group=1), call("b", index=2))
    result = Order(OrderSettings(), NameNormalizer())(run, Reference(expected=case("a", "b", "c")))
    assert result is not None
    (finding,) = result.findings
    assert (finding.span_id, finding.tool) == ("s0", "b")
    assert finding.details == {"expected": ["a", "b", "c"], "actual": ["a", "c", "b"]}


@given(
    st.lists(st.sampled_from("abcdefgh"), unique=True, max_size=8).flatmap(
        lambda names: st.tuples(
            st.just(names),
            st.lists(st.sampled_from([None, 1, 2]), min_size=len(names), max_size=len(names)),
        )
    ),
    st.lists(st.sampled_from("ab"), max_size=6),
)
def test_follow_moves_group_members_among_their_own_places(
    distinct: tuple[list[str], list[int | None]], repeated: list[str]
) -> None:
    names, groups = distinct
    # The target: the same calls with each group's members in reverse order.
    target = list(names)
    for group in (1, 2):
        places = [i for i, g in enumerate(groups) if g == group]
        for place, i in zip(places, reversed(places), strict=True):
            target[place] = names[i]
    order = follow(names, groups, target)
    if order is None:
        assert all(groups.count(g) < 2 for g in (1, 2))
        return
    assert sorted(order) == list(range(len(names)))
    assert all(groups[i] == groups[place] for place, i in enumerate(order))
    assert [names[i] for i in order] == target
    # Repeated names (parallel calls of one tool): one group takes any order of itself.
    all_one_group = follow(repeated, [1] * len(repeated), repeated[::-1])
    if len(repeated) > 1:
        assert all_one_group is not None
        assert [repeated[i] for i in all_one_group] == repeated[::-1]


def test_calls_nested_in_a_parallel_call_move_with_its_group() -> None:
    # One output asks for ask_billing (an agent used as a tool, which looks the order up) and
    # search; where search starts against the nested lookup is scheduling, not order.
    def run(search_first: bool) -> ToolTrace:
        ask = call("ask_billing", index=0, group=1)
        lookup = call("lookup_order", index=2 if search_first else 1, parent=0, agent="billing")
        search = call("search", index=1 if search_first else 2, group=1)
        return trace(ask, *((search, lookup) if search_first else (lookup, search)))

    assert order_of(run(True), Reference(source=run(False))) == 1.0
    assert order_of(run(False), Reference(source=run(True))) == 1.0
    assert (
        order_of(run(True), Reference(expected=case("ask_billing", "lookup_order", "search")))
        == 1.0
    )


def test_against_a_source_the_explanation_counts_as_the_score_does() -> None:
    order = Order(OrderSettings(), NameNormalizer())
    longer = order(trace("a", "b", "c", "d"), Reference(source=trace("a")))
    assert longer is not None
    assert longer.explanation == (
        "Ordering: 25% (1 of 4 calls in order; the source made 1, the run 4)."
    )
    none_made = order(trace("a", "b"), Reference(source=trace()))
    assert none_made is not None
    assert none_made.explanation == (
        "Ordering: 0% (0 of 2 calls in order; the source made 0, the run 2)."
    )
    golden = order(trace("a", "c"), Reference(expected=case("a", "b", "c")))
    assert golden is not None
    assert golden.explanation == "Ordering: 67% (2/3 expected calls in order)."


@pytest.mark.parametrize(
    ("mode", "judged"),
    [
        (None, True),
        ("expected", True),
        ("exact", True),
        ("expected_set", False),
        ("set", False),
        ("first", False),
    ],
)
def test_a_case_whose_own_mode_leaves_order_out_is_not_judged_for_it(
    mode: str | None, judged: bool
) -> None:
    """Its author said which tools matter, not their order: the run calling them the other
    way round is no TOOL_ORDER_DRIFT."""
    expected = case("lookup_order", "send_email", selection_mode=mode)
    result = Order(OrderSettings(), NameNormalizer())(
        trace("send_email", "lookup_order"), Reference(expected=expected)
    )
    assert (result is not None) is judged
    if result is not None:
        assert [f.category for f in result.findings] == [Category.TOOL_ORDER_DRIFT]
