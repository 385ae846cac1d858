"""Longest common subsequences of two name sequences cut into blocks, each block in any order
(``lineup`` states the rule, cuts the blocks and shows the orders found).

A walk. A choice of orders with a common subsequence of them is a matching of equal names
between the sides in which no two pairs cross block-wise (a pair's block on one side before
another pair's, its block on the other side after); any such matching is reached by ordering
each block's matched names as their partners stand. The cells (block ``i`` of one side,
block ``j`` of the other) a matching pairs in form a staircase from ``(0, 0)``, one step
right or down at a time, and a best matching pairs in each cell as many equal names as the
two blocks have left: a name left unpaired where it could pair could pair at most once
later, so pairing it now is never worse (the exchange argument). ``best_walk`` finds one.

Exact, by the shape of the sides:

- one side's blocks each hold one name (calls in sequence, or a group of one tool: golden
  cases, and most shadow pairs): ``rows`` over that side, bit-parallel, at most
  ``MAX_WORK`` steps (``rows.work``);
- both sides hold groups: first one walk, in time linear in the calls, pairing what it can
  in each cell and going on with the bigger remainder (``_greedy``): when it pairs as many
  names as the two sides share, it is a best walk (two sides that some orders make equal,
  or that differ by calls only one side made); else the program over the cells
  (``staircase``), when it meets at most ``MAX_MEETS`` names (``staircase.meets`` foresees
  it from the block sizes, never below).

Bound. Past the budgets (long runs in groups against long references: a few hundred calls
a side or more, by their groups; the programs would hold the event loop), ``common`` is an
upper bound instead, never below the best, so it never pages a run that kept its order (a
missed TOOL_ORDER_DRIFT, low or medium, does less harm than a false page). With ``x`` and
``y`` any order of each side, the best is the most ``LCS(x, y)``, and each of these is at
least that:

- the multiset overlap: a common subsequence pairs equal names, each call once;
- the best of one side's blocks against the other side written out, each block as its
  distinct names once per call (``_spread``), by ``rows``, within ``MAX_WORK``. Every order
  ``y`` of a side is a subsequence of it written out (its ``t``-th call from the ``t``-th
  copy of the block's names), and an LCS only grows with a supersequence, so ``LCS(x, y)``
  is at most ``LCS(x, written(B))``, at most the best over ``x`` of that, which is what
  ``rows`` computes; likewise with the sides swapped;
- the LCS of both sides written out (``LCS(x, y) <= LCS(written(A), written(B))``); at
  least each of the last two, so worked out only when neither fits the budget.

``common`` is the least of them. The steps are then the best of walks some orders keep:
the linear one, and, within the same budget, ``rows`` of each side's blocks against the
other side in one order (``_fixed``), each made to pair the first blocks when they share a
name (``_first_pair``: the first calls agree when some orders make them). Where the bound
meets the best of them, it is a best walk (``Walk.exact``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from toolwatch.evaluation import rows, staircase
from toolwatch.evaluation.staircase import Step

__all__ = ["MAX_MEETS", "MAX_WORK", "Step", "Walk", "best_walk", "lcs_length", "overlap"]

#: Names the program over cells may meet, each cell counted as ``staircase.CELL`` more
#: (``staircase.meets``, foreseen); past it, a bound. Compiled, at most about 30 ms: some
#: 400 calls a side in groups of 2 to 8, or 300 in groups of 2 among calls alone.
MAX_MEETS: Final = 1_000_000
#: Steps of ``rows`` (per occurrence of a group's name, one per call of the group and a
#: bisection's); past it, a bound, whose rows spend as much again at most. Compiled, 0.2 to
#: 0.4 us a step: some 200 calls in groups against as many in sequence, 300 with few
#: repeated tools.
MAX_WORK: Final = 80_000
#: Longest a side's blocks are written out for the bound, per call of the two sides.
_SPREAD: Final = 2


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence.

    Bit-parallel (Hyyro's form of the Allison-Dix recurrence): bit ``i`` of ``row`` is 0 where
    the LCS of ``a[:i + 1]`` against the prefix of ``b`` seen so far grows; one big-integer
    step per item of ``b`` makes it O(len(b) * len(a) / 64), so a 5,000-call run costs
    milliseconds where the quadratic table would cost seconds.
    """
    positions: dict[str, int] = {}
    for i, name in enumerate(a):
        positions[name] = positions.get(name, 0) | (1 << i)
    full = (1 << len(a)) - 1
    row = full
    for name in b:
        matched = row & positions.get(name, 0)
        row = ((row + matched) | (row - matched)) & full
    return len(a) - row.bit_count()


@dataclass(frozen=True, slots=True)
class Walk:
    """A walk over two sides' blocks: its ``steps`` in order, and ``common``, the length of
    the longest common subsequence over every order of each block: the pairs of ``steps``
    when ``exact``, else an upper bound of it (past the budgets)."""

    steps: list[Step]
    common: int
    exact: bool


def best_walk(a: list[tuple[int, ...]], b: list[tuple[int, ...]], meets: int, work: int) -> Walk:
    """A best walk over the blocks ``a`` and ``b`` (each a sorted tuple of name ids, none
    empty), within the budgets ``meets`` (``MAX_MEETS``) and ``work`` (``MAX_WORK``); past
    them, the best walk found and a bound (see the module docstring)."""
    if not _grouped(b):
        found = _against(a, b, work)
        if found is not None:
            return Walk(found, _paired(found), True)
    elif not _grouped(a):
        found = _against(b, a, work)
        if found is not None:
            steps = [(i, j, names) for j, i, names in found]
            return Walk(steps, _paired(steps), True)
    else:
        steps = _greedy(a, b)
        if _paired(steps) == _overlap(a, b):
            return Walk(steps, _paired(steps), True)
        if staircase.meets(a, b) <= meets:
            steps = staircase.staircase(a, b)[0]
            return Walk(steps, _paired(steps), True)
    return _bounded(a, b, work)


def _paired(steps: list[Step]) -> int:
    return sum(len(step[2]) for step in steps)


def _grouped(blocks: list[tuple[int, ...]]) -> bool:
    """Whether a block holds two names (its calls' order can matter)."""
    return any(block[0] != block[-1] for block in blocks)


def _against(
    blocks: list[tuple[int, ...]], sequence: list[tuple[int, ...]], work: int
) -> list[Step] | None:
    """A best walk of ``blocks`` against ``sequence``, whose blocks hold one name each (read
    as their calls one after another), a step per pair; ``None`` past ``work``."""
    plain: list[int] = []
    block_of: list[int] = []
    for j, block in enumerate(sequence):
        plain.extend(block)
        block_of.extend([j] * len(block))
    if rows.work(blocks, plain) > work:
        return None
    return _walk_of(blocks, plain, block_of, sequence)


def _walk_of(
    blocks: list[tuple[int, ...]],
    plain: list[int],
    block_of: list[int],
    other: list[tuple[int, ...]],
) -> list[Step]:
    """The best walk ``rows`` finds of ``blocks`` against ``plain``, one order of the blocks
    ``other`` (``block_of``: the block of each place), its first blocks paired when they
    share a name."""
    if not blocks or not other:
        return []
    kept = rows.rows(blocks, plain)
    steps = [(i, block_of[p], names) for i, p, names in rows.trace(blocks, plain, kept)]
    return _first_pair(steps, blocks[0], other[0])


def _first_pair(
    steps: list[Step], first_a: tuple[int, ...], first_b: tuple[int, ...]
) -> list[Step]:
    """``steps``, pairing the first blocks when they share a name: if the walk pairs
    nothing there, one of their shared names is paired there, taken from the step that
    pairs it with the other's first block (the walk then pairs none of this side's first
    block: nothing crosses), else added. That never pairs fewer."""
    shared = sorted(set(first_a) & set(first_b))
    paired = [step for step in steps if step[2]]
    if not shared or (paired and paired[0][0] == 0 and paired[0][1] == 0):
        return steps
    x = shared[0]
    at = paired[0] if paired else (1, 1, ())
    if at[0] == 0 or at[1] == 0:  # one first block pairs: take a shared name from it
        column = at[1] == 0  # the other side's first block pairs down its column
        for k, (i, j, names) in enumerate(steps):
            if (j == 0 if column else i == 0) and any(y in names for y in shared):
                x = next(y for y in shared if y in names)
                rest = list(names)
                rest.remove(x)
                moved = [*steps[:k], (i, j, tuple(rest)), *steps[k + 1 :]]
                return [(0, 0, (x,)), *moved]
    return [(0, 0, (x,)), *steps]


def _bounded(a: list[tuple[int, ...]], b: list[tuple[int, ...]], work: int) -> Walk:
    """Past the budgets: the best walk found of those the module docstring names, and the
    least of its bounds, worked out within ``work`` more steps of ``rows``."""
    bound = _overlap(a, b)
    most = _SPREAD * (sum(len(block) for block in a) + sum(len(block) for block in b))
    spread_a, spread_b = _spread(a, most), _spread(b, most)
    left = work
    either = False
    for blocks, written in ((a, spread_b), (b, spread_a)):
        if written is not None:
            cost = rows.work(blocks, written)
            if cost <= left:
                left -= cost
                bound = min(bound, rows.best(blocks, written))
                either = True
    if not either and spread_a is not None and spread_b is not None:
        bound = min(bound, rows.best([(x,) for x in spread_a], spread_b))
    best = _greedy(a, b)
    found = _paired(best)
    for blocks, other, swap in ((a, b, False), (b, a, True)):
        if found >= bound:
            break
        plain, block_of = _fixed(other, blocks[0])
        cost = rows.work(blocks, plain)
        if cost <= left:
            left -= cost
            steps = _walk_of(blocks, plain, block_of, other)
            if _paired(steps) > found:
                best = [(j, i, names) for i, j, names in steps] if swap else steps
                found = _paired(best)
    return Walk(best, max(bound, found), found >= bound)


def _fixed(blocks: list[tuple[int, ...]], lead: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """The blocks' names in one order (each block's as sorted, the first block's names
    ``lead`` holds first), and the block of each place."""
    plain: list[int] = []
    block_of: list[int] = []
    for j, block in enumerate(blocks):
        if j == 0:
            plain.extend(x for x in block if x in lead)
            plain.extend(x for x in block if x not in lead)
        else:
            plain.extend(block)
        block_of.extend([j] * len(block))
    return plain, block_of


def _greedy(a: list[tuple[int, ...]], b: list[tuple[int, ...]]) -> list[Step]:
    """One walk, in time linear in the calls: each cell pairs what it can, and the block with
    more names left goes on (the block going on kept as counts, so a long group costs its
    length once, not once per cell)."""
    walk: list[Step] = []
    if not a or not b:
        return walk
    i = j = side = 0  # side: whose block goes on (0: a's, 1: b's); the other's is whole
    counts, size = _counts(a[0]), len(a[0])
    while True:
        shared: list[int] = []
        other: list[int] = []
        for x in b[j] if side == 0 else a[i]:
            left = counts.get(x, 0)
            if left:
                counts[x] = left - 1
                shared.append(x)
            else:
                other.append(x)
        size -= len(shared)
        walk.append((i, j, tuple(shared)))
        if size and (not other or size >= len(other)):  # the block going on goes on
            i, j = (i, j + 1) if side == 0 else (i + 1, j)
        elif other:  # what is left of the whole one goes on
            i, j = (i + 1, j) if side == 0 else (i, j + 1)
            side, counts, size = 1 - side, _counts(other), len(other)
        else:
            i, j, side = i + 1, j + 1, 0
            if i < len(a):
                counts, size = _counts(a[i]), len(a[i])
        if i == len(a) or j == len(b):
            return walk


def _counts(names: Sequence[int]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for x in names:
        counts[x] = counts.get(x, 0) + 1
    return counts


def overlap(a: Sequence[int], b: Sequence[int]) -> int:
    """How many names two sides share, as multisets: the LCS of any orders of them is at most
    this."""
    counts: dict[int, int] = {}
    for x in a:
        counts[x] = counts.get(x, 0) + 1
    shared = 0
    for x in b:
        left = counts.get(x, 0)
        if left:
            counts[x] = left - 1
            shared += 1
    return shared


def _overlap(a: list[tuple[int, ...]], b: list[tuple[int, ...]]) -> int:
    """``overlap`` of two sides in blocks."""
    return overlap([x for block in a for x in block], [x for block in b for x in block])


def _spread(blocks: list[tuple[int, ...]], most: int) -> list[int] | None:
    """The blocks written out, each as its distinct names once per call (a block of one name
    as itself); ``None`` past ``most`` names."""
    written: list[int] = []
    for block in blocks:
        if block[0] == block[-1]:
            written.extend(block)
        else:
            distinct = sorted(set(block))
            if len(written) + len(distinct) * len(block) > most:
                return None
            for _ in block:
                written.extend(distinct)
    return written if len(written) <= most else None
