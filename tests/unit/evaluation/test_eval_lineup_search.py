"""lineup._searched (3d2f339, then reviewed): past MAX_ARRANGEMENTS pairs of assignments, the
search lines each pair up with 1/(4 * tries) of the budgets; a pair's line-up past its
budget returns that pair's own (loose) bound, and ``common`` is the most of those, never
capped by the global bound (``_past_arrangements``: overlap / written / merged) that the
code before computed with the whole budgets. Runs of 30-40 calls in pairs, split pairs
among them, are scored above the best: 100% where the best keeps 26 of 30 (a missed
TOOL_ORDER_DRIFT), and a 40-call pair scored exactly before (34) now says 37, inexact.

The best is computed here independently: every distinct assignment of each split group's
members to its places, then the block LCS (a staircase matching over blocks, each block in
any order) by memoized search over (block, used members) states. Checked against a brute
force over every permutation of every group on 3,000 random small inputs in the review.
"""

from __future__ import annotations

import itertools

import pytest
from eval_factories import block_lcs, call, trace

from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.lineup import line_up
from toolwatch.evaluation.order import Order
from toolwatch.evaluation.settings import OrderSettings
from toolwatch.model import Category
from toolwatch.model_traces import ToolTrace
from toolwatch.names import NameNormalizer

Groups = tuple[int | None, ...]


def _blocks(names: tuple[str, ...], groups: Groups) -> tuple[tuple[str, ...], ...]:
    sizes: dict[int, int] = {}
    for g in groups:
        if g is not None:
            sizes[g] = sizes.get(g, 0) + 1
    out: list[tuple[str, ...]] = []
    i = 0
    while i < len(names):
        g, end = groups[i], i + 1
        if g is not None and sizes[g] > 1:
            while end < len(names) and groups[end] == g:
                end += 1
        out.append(tuple(sorted(names[i:end])))
        i = end
    return tuple(out)


def _variants(names: str, groups: Groups) -> set[tuple[tuple[str, ...], ...]]:
    places: dict[int, list[int]] = {}
    for i, g in enumerate(groups):
        if g is not None:
            places.setdefault(g, []).append(i)
    split = [p for p in places.values() if len(p) > 1 and p[-1] - p[0] >= len(p)]
    orders = [sorted(set(itertools.permutations([names[i] for i in p]))) for p in split]
    found = set()
    for combo in itertools.product(*orders):
        moved = list(names)
        for held, sequence in zip(split, combo, strict=True):
            for place, name in zip(held, sequence, strict=True):
                moved[place] = name
        found.add(_blocks(tuple(moved), groups))
    return found


def best_common(a: str, ga: Groups, b: str, gb: Groups) -> int:
    """The rule's best: the most LCS over every order of each group's members."""
    return max(block_lcs(x, y) for x in _variants(a, ga) for y in _variants(b, gb))


# 30 calls a side: pairs issued together, five split pairs on each side (10000+).
RUN = "abbaaabcaacabcccaccbbcccbabbcb"
RUN_GROUPS: Groups = (0, 0, 10003, 1, 10003, 2, 10000, 10001, 4, 10001, 5, 5, 10002, 6, 10002, 7,
                      10004, 8, 10004, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14)  # fmt: skip
SOURCE = "abbaaabcbacabcbcaccbacccbacbcb"
SOURCE_GROUPS: Groups = (
    0, 10001, 1, 10001, 2, 2, 10004, 3, 10004, 4, 10002, 5, 6, 10003, 7,
    10003, 8, 8, 9, 10000, 10, 10000, 11, 11, 12, 12, 13, 13, 14, 14,
)  # fmt: skip

# 40 calls a side, groups of three and split pairs: exact (34) at 3decae8.
RUN_40 = "abbbabbabaabagabbbaababbaaabbbeaaaababaa"
RUN_40_GROUPS: Groups = (0, 0, 0, 1, 1, 1, 2, 2, 2, 10001, 3, 10004, 4, 10004, 4, 5, 5, 5, 6, 6, 6,
                         7, 7, 7, 8, 10000, 8, 10000, 10003, 9, 10003, 10, 10, 11, 11, 11, 12, 12,
                         12, 13)  # fmt: skip
SOURCE_40 = "abbbabbaadebababbbabbaabaaabbbbaaaabfbaa"
SOURCE_40_GROUPS: Groups = (0, 0, 0, 1, 1, 1, 10004, 10001, 10004, 10001, 10002, 3, 4, 4, 4, 5, 5,
                            5, 6, 6, 6, 7, 7, 7, 8, 8, 8, 9, 9, 9, 10, 10, 10, 10000, 10003, 10000,
                            10003, 12, 12, 13)  # fmt: skip


def test_the_oracle_is_the_rule() -> None:
    """The independent best agrees with the line-up where the code is exact anyway."""
    assert (
        best_common("bbcaac", (None, 2, 2, None, 2, 2), "bbccaa", (None, 2, 2, None, None, 2)) == 5
    )
    assert best_common(RUN, RUN_GROUPS, SOURCE, SOURCE_GROUPS) == 26
    assert best_common(RUN_40, RUN_40_GROUPS, SOURCE_40, SOURCE_40_GROUPS) == 34


@pytest.mark.parametrize(
    ("run", "run_groups", "source", "source_groups", "best"),
    [
        (RUN, RUN_GROUPS, SOURCE, SOURCE_GROUPS, 26),
        (RUN_40, RUN_40_GROUPS, SOURCE_40, SOURCE_40_GROUPS, 34),
    ],
    ids=["30-calls", "40-calls"],
)
def test_the_search_never_scores_above_the_bound_the_budgets_allow(
    run: str, run_groups: Groups, source: str, source_groups: Groups, best: int
) -> None:
    """At the default budgets. Observed: 30 (not exact) for the first, 37 (not exact) for the
    second; 3decae8 said 26 (a bound equal to the best) and 34 (exact). ``arrangements=1``
    (straight to the bound) says 26/34 on this very code."""
    lined = line_up(list(run), run_groups, list(source), source_groups)
    assert lined is not None
    assert lined.common == best


def test_a_30_call_run_that_kept_26_of_30_in_order_is_paged() -> None:
    """The Order evaluator against a shadow source: the best orders keep 26 of 30 calls
    (86.7%); observed 100% and no TOOL_ORDER_DRIFT."""
    run = _run(RUN, RUN_GROUPS)
    source = _run(SOURCE, SOURCE_GROUPS)
    result = Order(OrderSettings(), NameNormalizer())(run, Reference(source=source))
    assert result is not None
    assert result.scores["score"] == pytest.approx(26 / 30)
    assert [f.category for f in result.findings] == [Category.TOOL_ORDER_DRIFT]


def _run(names: str, groups: Groups) -> ToolTrace:
    return trace(
        *(call(n, index=i, group=g) for i, (n, g) in enumerate(zip(names, groups, strict=True)))
    )
