"""lineup: the LCS over every order of each side's parallel groups, and the orders shown."""

from __future__ import annotations

import random

import pytest
from eval_factories import block_lcs, every_order, quadratic_lcs
from hypothesis import example, given
from hypothesis import strategies as st

from toolwatch.evaluation.lcs import MAX_MEETS, MAX_WORK, lcs_length
from toolwatch.evaluation.lineup import Lineup, line_up
from toolwatch.evaluation.staircase import meets, staircase

Side = tuple[list[str], list[int | None]]


@given(
    st.lists(st.sampled_from("abcd"), max_size=12), st.lists(st.sampled_from("abcd"), max_size=12)
)
def test_lcs_length_matches_the_quadratic_table(a: list[str], b: list[str]) -> None:
    assert lcs_length(a, b) == quadratic_lcs(a, b) == lcs_length(b, a)


def test_lcs_length() -> None:
    assert lcs_length("ABCBDAB", "BDCABA") == 4
    assert lcs_length([], ["a"]) == 0


@pytest.mark.parametrize(
    "groups", [[None, None, None], [1, None, 2], [None, 5, None]], ids=["none", "one each", "one"]
)
def test_without_a_group_of_two_nothing_moves(groups: list[int | None]) -> None:
    """The usual run: the caller takes the plain LCS of the sequences as given."""
    assert line_up(["a", "b", "c"], groups, ["c", "b"], [None, None]) is None


def test_a_tool_called_before_its_group_and_in_it() -> None:
    """get_customer, search, then both at once, against search, get_customer, search: the
    group read as get_customer, search keeps all three in order."""
    lined = line_up(["g", "s", "s", "g"], [None, None, 1, 1], ["s", "g", "s"], [None] * 3)
    assert lined == Lineup((0, 1, 3, 2), (0, 1, 2), 3, True)


def test_equal_leading_and_trailing_blocks_pair_whole() -> None:
    """A shadow pair that issued the same groups, each started in another order: the
    reference's members are read in the run's order, and nothing else is searched."""
    run = (["a", "b", "c", "d", "c"], [1, 1, None, 2, 2])
    source = (["b", "a", "c", "c", "d"], [7, 7, None, 8, 8])
    lined = line_up(*run, *source, meets=0, work=0)  # nothing to spend: the ends only
    assert lined == Lineup((0, 1, 2, 3, 4), (1, 0, 2, 4, 3), 5, True)


@st.composite
def sides(draw: st.DrawFn, base: int = 10, apart: bool = False, steps: int = 4) -> Side:
    """Calls of a, b or c in up to ``steps`` steps of one to three calls (at most 7 calls when
    ``steps`` is 4, for brute force); a step of two or more is a parallel group. ``apart``:
    up to 6 calls, each in group ``base``, ``base + 1`` or none, wherever it stands (a
    group's members with other calls between them)."""
    if apart:
        names = draw(st.lists(st.sampled_from("abc"), max_size=6))
        choices = [None, base, base + 1]
        groups = draw(st.lists(st.sampled_from(choices), min_size=len(names), max_size=len(names)))
        return names, groups
    drawn = draw(st.lists(st.lists(st.sampled_from("abc"), min_size=1, max_size=3), max_size=steps))
    names: list[str] = []
    groups: list[int | None] = []
    for number, step in enumerate(drawn):
        names.extend(step)
        groups.extend([base + number if len(step) > 1 else None] * len(step))
    most = 7 if steps == 4 else len(names)
    return names[:most], groups[:most]


def shown(names: list[str], order: tuple[int, ...]) -> tuple[str, ...]:
    return tuple(names[i] for i in order)


def best(a: Side, b: Side) -> int:
    """The rule, by brute force: the best LCS over every order of each side's groups."""
    return max(quadratic_lcs(x, y) for x in every_order(*a) for y in every_order(*b))


def lined_up(a: Side, b: Side, budget: int | None = None) -> tuple[Lineup, int]:
    """``line_up``'s answer (the sides as given when it has none) and the LCS of the orders
    it shows; ``budget``: both budgets, else the defaults."""
    meets, work = (MAX_MEETS, MAX_WORK) if budget is None else (budget, budget)
    lined = line_up(*a, *b, meets=meets, work=work)
    if lined is None:
        every = tuple(range(len(a[0]))), tuple(range(len(b[0])))
        lined = Lineup(*every, lcs_length(a[0], b[0]), True)
    return lined, quadratic_lcs(shown(a[0], lined.actual), shown(b[0], lined.reference))


@given(sides(), sides(base=20))
def test_the_common_length_is_the_best_over_every_order_of_each_group(a: Side, b: Side) -> None:
    lined, common = lined_up(a, b)
    assert lined.exact
    assert lined.common == best(a, b) == common
    assert shown(a[0], lined.actual) in every_order(*a)
    assert shown(b[0], lined.reference) in every_order(*b)


@given(sides(), sides(base=20), st.sampled_from([0, 3, None]))
def test_the_orders_shown_agree_when_some_orders_make_them(
    a: Side, b: Side, budget: int | None
) -> None:
    """Whatever the budget: equal sequences (``exact`` selection, tool-name accuracy), and
    first calls (selection's ``first``), when some orders of the groups make them so."""
    lined, _ = lined_up(a, b, budget)
    run, reference = shown(a[0], lined.actual), shown(b[0], lined.reference)
    if every_order(*a) & every_order(*b):
        assert run == reference
    if {x[:1] for x in every_order(*a)} & {y[:1] for y in every_order(*b)}:
        assert run[:1] == reference[:1]


@given(sides(), sides(base=20), st.sampled_from([0, 1, 3, 20]))
def test_past_the_budgets_the_common_length_is_a_bound_never_below_the_best(
    a: Side, b: Side, budget: int
) -> None:
    """Never below: a run that kept its order is never paged. ``exact`` only when it is the
    best; the orders shown are the rule's, and keep no more than the best in common."""
    lined, common = lined_up(a, b, budget)
    most = best(a, b)
    assert lined.common >= most >= common
    if lined.exact:
        assert lined.common == most == common
    assert shown(a[0], lined.actual) in every_order(*a)
    assert shown(b[0], lined.reference) in every_order(*b)


@given(sides(apart=True), sides(base=20, apart=True))
def test_groups_whose_members_lie_apart_trade_only_their_own_places(a: Side, b: Side) -> None:
    """Another agent's calls between a group's members: the members trade places among the
    places they hold, nothing else moves; exact, as brute force over those orders, when
    every assignment of the members to their places is tried. The orders shown agree when
    some orders make them, as with groups whose members stand together."""
    lined = line_up(*a, *b, arrangements=10_000)
    if lined is None:
        return
    run, reference = shown(a[0], lined.actual), shown(b[0], lined.reference)
    assert lined.exact
    assert lined.common == best(a, b)
    assert_keeps_the_best(a, b, lined.common, run, reference)
    assert run in every_order(*a)
    assert reference in every_order(*b)
    if every_order(*a) & every_order(*b):
        assert run == reference
    if {x[:1] for x in every_order(*a)} & {y[:1] for y in every_order(*b)}:
        assert run[:1] == reference[:1]


@given(sides(apart=True), sides(base=20, apart=True), st.sampled_from([0, 3, None]))
@example(  # 36 assignments a side: one split group at a time finds the equal orders
    (["a", "a", "a", "a", "b", "c"], [None, None, 10, None, 10, 10]),
    (["b", "a", "a", "a", "c", "a"], [21, None, None, None, 21, 21]),
    None,
)
def test_past_the_arrangements_the_common_length_is_a_bound_never_below_the_best(
    a: Side, b: Side, budget: int | None
) -> None:
    """Past ``MAX_ARRANGEMENTS`` (here 2): ``common`` a bound, never below the best; the
    orders shown the rule's, their first calls agreeing when some orders make them."""
    meets_, work = (MAX_MEETS, MAX_WORK) if budget is None else (budget, budget)
    lined = line_up(*a, *b, meets=meets_, work=work, arrangements=2)
    if lined is None:
        return
    run, reference = shown(a[0], lined.actual), shown(b[0], lined.reference)
    most = best(a, b)
    assert lined.common >= most >= quadratic_lcs(run, reference)
    if lined.exact:
        assert lined.common == most
        assert_keeps_the_best(a, b, most, run, reference)
    assert run in every_order(*a)
    assert reference in every_order(*b)
    if {x[:1] for x in every_order(*a)} & {y[:1] for y in every_order(*b)}:
        assert run[:1] == reference[:1]


def assert_keeps_the_best(
    a: Side, b: Side, most: int, run: tuple[str, ...], reference: tuple[str, ...]
) -> None:
    """The orders shown keep the best in common, unless no orders that do have agreeing
    first calls and these have (what ``first`` reads wins)."""
    if quadratic_lcs(run, reference) < most:
        assert run[:1] == reference[:1]
        pairs = ((x, y) for x in every_order(*a) for y in every_order(*b))
        assert all(x[:1] != y[:1] for x, y in pairs if quadratic_lcs(x, y) == most)


def test_a_group_with_another_call_among_its_members_moves_only_its_members() -> None:
    """a and b issued together, x (another agent's) started between them: x stays second,
    so against x, b, a the best is 2 (b, a in that order)."""
    lined = line_up(["a", "x", "b"], [1, None, 1], ["x", "b", "a"], [None] * 3)
    assert lined is not None
    assert (lined.common, lined.exact) == (2, True)
    assert shown(["a", "x", "b"], lined.actual) in {("a", "x", "b"), ("b", "x", "a")}


def test_first_calls_that_can_agree_agree_though_the_best_orders_would_not() -> None:
    """a and b issued together, a and b between them: read b, a, b, a the first calls agree
    with the reference's (what mode ``first`` reads), keeping 3 of its 5 in order; read
    a, a, b, b it would keep 4, which ``common`` says."""
    lined = line_up(["a", "a", "b", "b"], [1, None, None, 1], ["b", "a", "a", "b", "b"], [None] * 5)
    assert lined == Lineup((3, 1, 2, 0), (0, 1, 2, 3, 4), 4, True)


def test_a_split_group_past_the_arrangements_is_written_out_for_the_bound() -> None:
    """Five distinct members split by another call: 10 assignments (which two stand before
    it), past 9. The bound writes each member's place out as the five names; the run as
    given meets it here. Within the limit, the 10 are tried: exact."""
    run = ["a", "b", "x", "c", "d", "e"]
    groups: list[int | None] = [1, 1, None, 1, 1, 1]
    lined = line_up(run, groups, ["a", "b", "x", "c", "d", "e"], [None] * 6, arrangements=9)
    assert lined == Lineup((0, 1, 2, 3, 4, 5), (0, 1, 2, 3, 4, 5), 6, True)
    lined = line_up(run, groups, ["x", "a", "b", "c", "d", "e"], [None] * 6, arrangements=9)
    assert lined is not None
    assert lined.common >= 5
    assert shown(run, lined.actual)[2] == "x"
    lined = line_up(run, groups, ["x", "a", "b", "c", "d", "e"], [None] * 6)
    assert lined is not None
    assert (lined.common, lined.exact) == (5, True)


def test_a_long_group_past_the_budgets_is_still_read_exactly_when_it_can_be() -> None:
    """5,000 calls of a and b issued at once against a source that made them one by one: far
    past the budget of the rows (a step per call per occurrence), so the walk is the linear
    one, which pairs every call, and the bound (the overlap) meets it."""
    run = ["a", "b"] * 2_500
    source = ["b", "a"] * 2_500
    lined = line_up(run, [0] * len(run), source, [None] * len(source))
    assert lined is not None
    assert (lined.common, lined.exact) == (5_000, True)
    assert shown(run, lined.actual) == tuple(source)


@given(sides(steps=15), sides(base=20, steps=15), st.booleans())
def test_past_the_budgets_the_bound_is_never_below_the_exact_walk(
    a: Side, b: Side, sequential: bool
) -> None:
    """Sides longer than brute force reaches: the bound against the exact programs, with
    groups on one side (the rows) or both (the cells)."""
    if sequential:
        b = (b[0], [None] * len(b[0]))
    exact = line_up(*a, *b, meets=10**9, work=10**9)
    bounded = line_up(*a, *b, meets=0, work=0)
    if exact is None or bounded is None:
        assert exact is bounded is None
        return
    assert exact.exact
    assert bounded.common >= exact.common
    if bounded.exact:
        assert bounded.common == exact.common


def test_past_the_arrangements_the_group_read_as_one_block_bounds_too() -> None:
    """c and a issued together, b between them, against c c a c x: written out, the places
    of the group pair c c a c (4), as does the multiset overlap; read as one block from c
    to a, at most 3, the best, which the calls as given keep: exact."""
    run = (["x", "c", "c", "b", "a"], [None, None, 2, None, 2])
    reference = (["c", "c", "a", "c", "x"], [None] * 5)
    assert best(run, reference) == 3
    lined = line_up(*run, *reference, arrangements=1)
    assert lined == Lineup((0, 1, 2, 3, 4), (0, 1, 2, 3, 4), 3, True)


def _blocks_of(groups: list[list[str]], base: int) -> Side:
    names = [name for group in groups for name in group]
    return names, [base + k for k, group in enumerate(groups) for _ in group]


def test_a_few_dozen_parallel_groups_on_both_sides_are_read_exactly() -> None:
    """18 groups of 4 calls over 8 tools, issued shuffled against the same groups in order:
    within the budget of the program over the cells, the rule's 39 of 72 (a bound of 72, every
    call, when that budget was 6,000 names)."""
    rng = random.Random(5)
    fours = [[rng.choice([f"t{i}" for i in range(8)]) for _ in range(4)] for _ in range(18)]
    shuffled = fours[:]
    rng.shuffle(shuffled)
    a, b = _blocks_of(shuffled, 0), _blocks_of(fours, 1000)
    lined = line_up(*a, *b)
    assert lined is not None
    assert (lined.common, lined.exact) == (block_lcs(shuffled, fours), True) == (39, True)
    assert quadratic_lcs(shown(a[0], lined.actual), shown(b[0], lined.reference)) == 39


def test_past_the_budgets_the_bound_reads_one_side_written_out() -> None:
    """23 pairs of a search and a tool, issued in reverse: with no budget for the cells, the
    run's blocks against the source's written out bound it at 24, which the orders meet (the
    two sides written out would give 46, every call)."""
    pairs = [["search", f"tool_{k}"] for k in range(23)]
    lined = line_up(*_blocks_of(pairs[::-1], 0), *_blocks_of(pairs, 1000), meets=0)
    assert lined is not None
    assert (lined.common, lined.exact) == (24, True)


@st.composite
def blocks(draw: st.DrawFn, most: int = 6) -> list[tuple[int, ...]]:
    """Up to ``most`` blocks of 1 to 6 calls of up to 3 names (names repeat: more states)."""
    return [
        tuple(sorted(block))
        for block in draw(
            st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=6), min_size=1, max_size=most)
        )
    ]


@given(blocks(), blocks())
def test_the_program_over_cells_meets_no_more_names_than_foreseen(
    a: list[tuple[int, ...]], b: list[tuple[int, ...]]
) -> None:
    """What it keeps per cell is a chain (``staircase``): the budget is checked beforehand."""
    steps, met = staircase(a, b)
    assert met <= meets(a, b)
    assert sum(len(names) for _, _, names in steps) == block_lcs(
        [[str(x) for x in block] for block in a], [[str(y) for y in block] for block in b]
    )
