"""order: LCS against expected (over expected length) and source (over the longer length)."""

from __future__ import annotations

import random

import pytest
from eval_factories import block_lcs, call, case, every_order, grouped, quadratic_lcs, trace
from hypothesis import example, given
from hypothesis import strategies as st

from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.composite import Composite
from toolwatch.evaluation.order import Order, first_divergence, order_score
from toolwatch.evaluation.settings import CompositeSettings, OrderSettings, ToolArgumentsSettings
from toolwatch.model import Category, ReferenceKind
from toolwatch.model_evaluation import GoldenCase
from toolwatch.model_traces import ToolCall, ToolTrace
from toolwatch.names import NameNormalizer

EXPECTED, SOURCE = ReferenceKind.EXPECTED, ReferenceKind.SOURCE
ORDER = {"order_id": "A-1"}


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


def test_first_divergence() -> None:
    assert first_divergence(["a", "b"], ["a", "b"]) is None
    assert first_divergence(["a", "c"], ["a", "b"]) == 1
    assert first_divergence(["a"], ["a", "b"]) == 1


def test_drift_finding_points_at_the_first_divergence() -> None:
    """The finding's span, tool and explanation name one call: the run's call out of place
    (c, span s1). Its tool was b, the tool expected there: the page's tool label, and its
    dashboard link, named a tool the run called in its place while the span was c's."""
    evaluator = Order(OrderSettings(), NameNormalizer())
    result = evaluator(trace("a", "c", "b"), Reference(expected=case("a", "b", "c")))
    assert result is not None
    assert result.explanation == "Ordering: 67% (2/3 expected calls in order)."
    (finding,) = result.findings
    assert finding.category is Category.TOOL_ORDER_DRIFT
    assert (finding.span_id, finding.tool) == ("s1", "c")
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
    assert (finding.span_id, finding.tool) == ("s0", "c")
    assert finding.details == {"expected": ["a", "b", "c"], "actual": ["a", "c", "b"]}


def test_a_run_that_stops_short_names_the_expected_call_it_never_made() -> None:
    """No call of the run stands at the divergence: no span, and the tool is the one the
    reference expected there, as the explanation says."""
    result = Order(OrderSettings(), NameNormalizer())(
        trace("a", "b"), Reference(expected=case("a", "b", "c"))
    )
    assert result is not None
    (finding,) = result.findings
    assert (finding.span_id, finding.tool) == (None, "c")
    assert finding.explanation.endswith("first divergence at call 3: expected c, called (none).")


@pytest.mark.parametrize(
    ("run", "reference"),
    [
        (
            trace("send_email", "lookup_order", "issue_refund"),
            case("lookup_order", "issue_refund", "send_email"),
        ),
        (trace("a", "c", "x", "b"), case("a", "b", "c")),
        (trace("b", "a"), case("a", "b", "c")),
    ],
)
def test_the_drift_findings_tool_is_its_spans(run: ToolTrace, reference: GoldenCase) -> None:
    """Whatever the divergence, ``tool`` is the tool of the call ``span_id`` names, and the
    one the explanation says was called."""
    result = Order(OrderSettings(), NameNormalizer())(run, Reference(expected=reference))
    assert result is not None
    (finding,) = result.findings
    (named,) = [c for c in run.calls if c.span_id == finding.span_id]
    assert finding.tool == named.tool_name
    assert f"called {named.tool_name}." in finding.explanation


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


def test_a_tool_called_before_its_parallel_group_and_in_it_is_not_drift() -> None:
    """get_customer and search are called one after the other, then again together: read as
    get_customer, search, get_customer, search, the run holds the expected search,
    get_customer, search. Pairing each name's k-th occurrence with the reference's k-th put
    the group's get_customer last, and paged at 67%."""
    expected = Reference(expected=case("search", "get_customer", "search"))
    for started in (("get_customer", "search"), ("search", "get_customer")):
        run = grouped("get_customer", "search", started)
        result = Order(OrderSettings(), NameNormalizer())(run, expected)
        assert result is not None
        assert (result.scores["score"], result.findings) == (1.0, ())
        assert result.explanation == "Ordering: 100% (3/3 expected calls in order)."


L, G, S = "lookup_order", "get_customer", "search"


@pytest.mark.parametrize(
    ("run", "reference", "score"),
    [
        # lookup_order, then lookup_order and get_customer at once, read as L L G: 3 of the
        # 4 expected calls in order (read as L G L, 2).
        (grouped(L, (L, G)), Reference(expected=case(G, L, L, G)), 3 / 4),
        (grouped(L, (G, L)), Reference(expected=case(G, L, L, G)), 3 / 4),
        # The source's group read as S G L: 3 of the run's 4 calls in order (as S L G, 2).
        (grouped(L, S, G, L), Reference(source=grouped(S, (G, L))), 3 / 4),
        # Groups on both sides: L G S L against G S L, G L G L against L G L.
        (grouped(L, (S, G, L)), Reference(source=grouped(G, (S, L))), 3 / 4),
        (grouped(G, (L, L, G)), Reference(source=grouped(L, (G, L))), 3 / 4),
    ],
)
def test_the_score_is_the_best_over_every_order_of_each_group(
    run: ToolTrace, reference: Reference, score: float
) -> None:
    assert order_of(run, reference) == pytest.approx(score)


def test_a_threshold_below_one_pages_no_source_run_that_keeps_its_order() -> None:
    """At 75% the run is above a 70% threshold: read as S G L, the source's parallel pair
    leaves one of the run's four calls out of order, not two."""
    settings = OrderSettings.model_validate({"threshold": 0.7})
    run, source = grouped(L, S, G, L), grouped(S, (G, L))
    result = Order(settings, NameNormalizer())(run, Reference(source=source))
    assert result is not None
    assert (result.scores["score"], result.findings) == (0.75, ())


def best_common(run: ToolTrace, reference: Reference) -> int:
    """The longest common subsequence over every order of each side's groups."""
    names = [c.tool_name for c in run.calls]
    groups = [c.parallel_group for c in run.calls]
    if reference.source is not None:
        other = [c.tool_name for c in reference.source.calls]
        other_groups = [c.parallel_group for c in reference.source.calls]
    else:
        assert reference.expected is not None
        other = [c.name for c in reference.expected.expected_tools]
        other_groups = [None] * len(other)
    return max(
        quadratic_lcs(a, b)
        for a in every_order(names, groups)
        for b in every_order(other, other_groups)
    )


def the_score(run: ToolTrace, reference: Reference, common: int) -> float:
    """The rule's score: ``common`` over the expected length, or the longer one (a source)."""
    made = len(run.calls)
    if reference.source is not None:
        longest = max(made, len(reference.source.calls))
        return common / longest if longest else 1.0
    assert reference.expected is not None
    expected = len(reference.expected.expected_tools)
    return common / expected if expected else 1.0


@st.composite
def runs_in_groups(draw: st.DrawFn) -> ToolTrace:
    """Up to 3 steps of 1 to 3 calls of a, b or c; a step of two or more is a parallel group
    (its calls next to each other, as the timeline gives them)."""
    steps = draw(st.lists(st.lists(st.sampled_from("abc"), min_size=1, max_size=3), max_size=3))
    return grouped(*(tuple(step) if len(step) > 1 else step[0] for step in steps))


@st.composite
def runs_interleaved(draw: st.DrawFn) -> ToolTrace:
    """Up to 6 calls of a, b or c, each in group 1, group 2 or none: a group's members need
    not be next to each other (calls of another agent, running meanwhile, between them)."""
    names = draw(st.lists(st.sampled_from("abc"), max_size=6))
    groups = draw(st.lists(st.sampled_from([None, 1, 2]), min_size=len(names), max_size=len(names)))
    return trace(
        *(call(n, index=i, group=g) for i, (n, g) in enumerate(zip(names, groups, strict=True)))
    )


references = st.one_of(
    st.lists(st.sampled_from("abc"), max_size=5).map(
        lambda names: Reference(expected=case(*names))
    ),
    runs_in_groups().map(lambda run: Reference(source=run)),
)


@given(runs_in_groups(), references)
@example(grouped("a", "b", ("a", "b")), Reference(expected=case("b", "a", "b")))  # a, b in and out
@example(grouped("a", "b", "c", "a"), Reference(source=grouped("b", ("c", "a"))))  # a source's
def test_the_score_is_the_best_lcs_over_every_order_of_each_group(
    run: ToolTrace, reference: Reference
) -> None:
    assert order_of(run, reference) == pytest.approx(
        the_score(run, reference, best_common(run, reference))
    )


def apart(names: str, groups: tuple[int | None, ...]) -> ToolTrace:
    """A run of the calls ``names``, each in the group ``groups`` says (``None``: none)."""
    return trace(
        *(call(n, index=i, group=g) for i, (n, g) in enumerate(zip(names, groups, strict=True)))
    )


# b, then b c a c issued together with another agent's a between c and a; the source b,
# then b c a together with its own c and a between c and a.
SPLIT_RUN = apart("bbcaac", (None, 2, 2, None, 2, 2))
SPLIT_SOURCE = apart("bbccaa", (None, 2, 2, None, None, 2))


@given(
    runs_interleaved(), st.one_of(references, runs_interleaved().map(lambda r: Reference(source=r)))
)
@example(  # the source's a and its last b, issued together, read as b, a: the run's b, a
    trace("b", "a"),
    Reference(
        source=trace(call("a", index=0, group=7), call("b", index=1), call("b", index=2, group=7))
    ),
)
@example(  # a and b issued together, c between them: c stays second, 2 of c, b, a kept
    trace(call("a", index=0, group=1), call("c", index=1), call("b", index=2, group=1)),
    Reference(expected=case("c", "b", "a")),
)
@example(SPLIT_RUN, Reference(source=SPLIT_SOURCE))  # a fixed a against a fixed c: 5 of 6
@example(  # two groups of three apart on each side: 12 x 6 assignments, searched: 5 of 6
    apart("ccabcb", (1, 2, 1, 2, 2, 1)), Reference(source=apart("caccbb", (None, 2, 1, 2, None, 2)))
)
def test_the_score_is_the_best_lcs_whatever_the_groups(
    run: ToolTrace, reference: Reference
) -> None:
    """Groups whose members lie apart (another agent's calls between them): the members trade
    places among their own places, nothing else moves."""
    assert order_of(run, reference) == pytest.approx(
        the_score(run, reference, best_common(run, reference))
    )


def test_a_group_split_by_another_agents_call_moves_only_its_members() -> None:
    """issue_refund and notify issued together, the billing agent's lookup_order started
    between them: the lookup stays second, so against lookup_order, issue_refund, notify
    the best order keeps two of three (the refund group was issued before the lookup)."""
    run = trace(
        call("issue_refund", index=0, group=1),
        call("lookup_order", index=1, agent="billing"),
        call("notify", index=2, group=1),
    )
    result = Order(OrderSettings(), NameNormalizer())(
        run, Reference(expected=case("lookup_order", "issue_refund", "notify"))
    )
    assert result is not None
    assert result.scores["score"] == pytest.approx(2 / 3)
    assert [f.category for f in result.findings] == [Category.TOOL_ORDER_DRIFT]
    assert result.findings[0].details["actual"][1] == "lookup_order"


def test_a_call_between_a_split_groups_members_keeps_its_place_on_both_sides() -> None:
    """``SPLIT_RUN`` against ``SPLIT_SOURCE``: the run's fourth call is a fixed a, the
    source's a fixed c, so no orders of the groups keep all six calls, only five. Each
    member's place tried apart made 12 x 6 = 72 assignments, past the 48 tried, and the
    bound (the group read as one block from its first member to its last, the fixed a in
    it) said six: 100%, a missed drift. A split group's members standing next to each
    other are one block, in any order: 4 x 3 assignments, exact."""
    reference = Reference(source=SPLIT_SOURCE)
    result = Order(OrderSettings(), NameNormalizer())(SPLIT_RUN, reference)
    assert result is not None
    assert best_common(SPLIT_RUN, reference) == 5
    assert result.scores["score"] == pytest.approx(5 / 6)
    assert [f.category for f in result.findings] == [Category.TOOL_ORDER_DRIFT]


def _in_groups(groups: list[list[str]], base: int) -> ToolTrace:
    """A run whose calls are issued in parallel groups, one group after another."""
    calls: list[ToolCall] = []
    for number, names in enumerate(groups):
        start = len(calls)
        calls.extend(call(n, index=start + k, group=base + number) for k, n in enumerate(names))
    return trace(*calls)


# A shadow pair whose agents both issue their calls in parallel pairs (a search beside a
# second tool), the canary issuing the 23 pairs in the reverse order of the stable agent.
_PAIRS = [["search", f"tool_{k}"] for k in range(23)]
# 18 parallel groups of 4 calls over 8 tools, the canary issuing the groups shuffled.
_rng = random.Random(5)
_FOURS = [[_rng.choice([f"t{i}" for i in range(8)]) for _ in range(4)] for _ in range(18)]
_SHUFFLED = _FOURS[:]
_rng.shuffle(_SHUFFLED)


@pytest.mark.parametrize(
    ("run_groups", "source_groups", "common"),
    [(_PAIRS[::-1], _PAIRS, 24), (_SHUFFLED, _FOURS, 39)],
    ids=["23-pairs-reversed", "18-fours-shuffled"],
)
def test_a_shadow_run_issuing_its_parallel_groups_in_another_order_is_drift(
    run_groups: list[list[str]], source_groups: list[list[str]], common: int
) -> None:
    """Groups on both sides, 46 and 72 calls: the score is the rule's (the best over every
    order of each group, over the longer side), 24/46 and 39/72, a page; not 100%, as when
    the program over the cells stopped at 6,000 names met and its bound counted every call."""
    assert block_lcs(run_groups, source_groups) == common
    run, source = _in_groups(run_groups, 0), _in_groups(source_groups, 1000)
    calls = len(run.calls)
    result = Order(OrderSettings(), NameNormalizer())(run, Reference(source=source))
    assert result is not None
    assert result.scores["score"] == pytest.approx(common / calls)
    assert [f.category for f in result.findings] == [Category.TOOL_ORDER_DRIFT]
    composite = Composite(CompositeSettings(), ToolArgumentsSettings(), NameNormalizer())
    scored = composite(run, Reference(source=source))
    assert scored is not None
    assert scored.scores["ordering"] == pytest.approx(common / calls)


def test_failed_calls_made_again_do_not_lengthen_a_side_against_a_source() -> None:
    """Against a source the LCS is over the longer side, so a lookup asked again after it
    failed would lower the score; it is one call with its retry, either side's (against a
    case the run's extra calls never lowered it)."""
    flaky = trace(
        call("lookup_order", ORDER, index=0, ok=False),
        call("lookup_order", ORDER, index=1),
        call("issue_refund", ORDER, index=2),
    )
    steady = trace(call("lookup_order", ORDER, index=0), call("issue_refund", ORDER, index=1))
    order = Order(OrderSettings(), NameNormalizer())
    for run, source in [(flaky, steady), (steady, flaky)]:
        result = order(run, Reference(source=source))
        assert result is not None
        assert (result.scores["score"], result.findings) == (1.0, ())


def test_a_divergence_is_numbered_by_the_runs_own_calls_after_a_retry() -> None:
    """The lookup failed once and was asked again: the search is the run's third call, and
    the run made four calls, one a failed call made again, though order reads three."""
    order = {"order_id": "A-1"}
    run = trace(
        call("lookup_order", order, index=0, ok=False),
        call("lookup_order", order, index=1),
        call("search", {"q": "policy"}, index=2),
        call("issue_refund", order, index=3),
    )
    evaluate = Order(OrderSettings(), NameNormalizer())
    against_case = evaluate(run, Reference(expected=case("lookup_order", "issue_refund", "search")))
    source = trace(("lookup_order", order), ("issue_refund", order), ("search", {"q": "p"}))
    against_source = evaluate(run, Reference(source=source))
    for result in (against_case, against_source):
        assert result is not None
        (finding,) = result.findings
        assert finding.span_id == "s2"
        assert "first divergence at call 3: " in finding.explanation
        assert "called search" in finding.explanation
    assert against_source is not None
    assert "the run 3 (and 1 failed call made again)" in against_source.explanation
