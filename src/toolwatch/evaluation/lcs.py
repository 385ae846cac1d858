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

Two exact programs, by the shape of the sides:

- one side's blocks each hold one name (calls in sequence, or a group of one tool: golden
  cases, and most shadow pairs): rows over that side, kept bit-parallel as ``lcs_length``
  keeps them; a block of one name steps as its calls in sequence, and a block of several
  raises the row to the best, over where the stretch it pairs with starts, of the LCS
  before it plus what it shares with the stretch. That is exact, and costs a few steps per
  occurrence of a group's names on the other side (``MAX_WORK`` of them at most);
- both sides hold groups: a dynamic program over the cells, whose state is the side whose
  block goes on and the multiset left of it (a sub-multiset of one block; a cell holds one
  or two), at most ``MAX_MEETS`` names met.

Bound. Past either budget (long runs in groups against long references: some tens of
blocks a side for the cells, a few hundred calls for the rows; the programs would hold the
event loop), ``common`` is an upper bound instead, never below the best, so it never pages a
run that kept its order (a missed TOOL_ORDER_DRIFT, low or medium, does less harm than a
false page): the least of the multiset overlap and the best walk of one side against the
other's blocks written out, each block as its distinct names once per call (every order of
the block is a subsequence of that: the written-out side can only pair more), by the rows
within the budget, else of both sides written out. The steps are then one walk, in time
linear in the calls, pairing what it can in each cell and going on with the bigger
remainder: that pairs every name of two sides that some orders make equal, and the first
blocks as much as they can. Where the bound meets that walk, the walk is a best one
(``Walk.exact``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias

__all__ = ["MAX_MEETS", "MAX_WORK", "Step", "Walk", "best_walk", "lcs_length"]

#: Names the program over cells may meet (each state, a cell and what is left of the block
#: going on, meets that and the other block's names); past it, a bound.
MAX_MEETS: Final = 6_000
#: Steps of the program over rows (per occurrence of a group's name, one per call of the
#: group and a bisection's); past it, a bound.
MAX_WORK: Final = 10_000

#: A step of a walk: block of one side, block of the other, the name ids paired there.
Step: TypeAlias = tuple[int, int, tuple[int, ...]]
#: A cell's state: 0 when the first side's block goes on (its remainder given) and the
#: other's is whole, 1 for the reverse; the remainder as sorted name ids.
_Key: TypeAlias = tuple[int, tuple[int, ...]]
_NONE: Final[tuple[int, ...]] = ()


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
    empty), within the budgets ``meets`` and ``work`` (see the module docstring)."""
    if not _grouped(b):
        steps = _against_sequence(a, b, work)
    elif not _grouped(a):
        swapped = _against_sequence(b, a, work)
        steps = None if swapped is None else [(i, j, paired) for j, i, paired in swapped]
    else:
        steps = _staircase(a, b, meets)
    if steps is not None:
        return Walk(steps, sum(len(step[2]) for step in steps), True)
    steps = _greedy(a, b)
    found = sum(len(step[2]) for step in steps)
    # With one side in sequence the rows of the other's groups went past ``work``: the bound
    # writes those out (rows over them cost none), rather than spend it again.
    bound = _bound(a, b, work if _grouped(a) and _grouped(b) else 0)
    return Walk(steps, max(bound, found), bound <= found)


def _grouped(blocks: list[tuple[int, ...]]) -> bool:
    """Whether a block holds two names (its calls' order can matter)."""
    return any(block[0] != block[-1] for block in blocks)


def _meet(
    left: tuple[int, ...], right: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """The names two sorted multisets share, and what is left of each."""
    if len(left) == 1 and len(right) == 1:  # two calls alone: most cells
        return (left, _NONE, _NONE) if left[0] == right[0] else (_NONE, left, right)
    shared: list[int] = []
    rest_left: list[int] = []
    rest_right: list[int] = []
    i = j = 0
    while i < len(left) and j < len(right):
        x, y = left[i], right[j]
        if x == y:
            shared.append(x)
            i += 1
            j += 1
        elif x < y:
            rest_left.append(x)
            i += 1
        else:
            rest_right.append(y)
            j += 1
    rest_left.extend(left[i:])
    rest_right.extend(right[j:])
    return tuple(shared), tuple(rest_left), tuple(rest_right)


def _staircase(
    a: list[tuple[int, ...]], b: list[tuple[int, ...]], budget: int
) -> list[Step] | None:
    """A best walk over the cells of blocks ``a`` and ``b`` (see the module docstring), or
    ``None`` past ``budget`` names met."""
    width = len(b)
    if not a or not b:
        return []
    # A cell holds about two states, each meeting the names left of its two blocks.
    if 2 * (width * sum(len(x) for x in a) + len(a) * sum(len(y) for y in b)) > budget:
        return None
    spent = 0
    # The walk's steps, by number: cell, names paired, the step before (-1: none).
    cells: list[int] = []
    paired: list[tuple[int, ...]] = []
    before: list[int] = []
    waiting: dict[int, dict[_Key, tuple[int, int]]] = {0: {(0, a[0]): (0, -1)}}
    best, best_step = -1, -1
    for cell in range(len(a) * width):
        arrivals = waiting.pop(cell, None)
        if arrivals is None:
            continue
        i, j = cell // width, cell % width
        for (side, rest), (value, previous) in arrivals.items():
            whole = b[j] if side == 0 else a[i]
            spent += len(rest) + len(whole)
            if spent > budget:
                return None
            shared, left, right = _meet(rest, whole) if side == 0 else _meet(whole, rest)
            step = len(cells)
            cells.append(cell)
            paired.append(shared)
            before.append(previous)
            total = value + len(shared)
            for target, key in _moves(a, b, i, j, left=left, right=right):
                if target < 0:
                    if total > best:
                        best, best_step = total, step
                    continue
                arrived = waiting.get(target)
                if arrived is None:
                    arrived = waiting[target] = {}
                held = arrived.get(key)
                if held is None or held[0] < total:
                    arrived[key] = (total, step)
    walk: list[Step] = []
    while best_step >= 0:
        cell = cells[best_step]
        walk.append((cell // width, cell % width, paired[best_step]))
        best_step = before[best_step]
    walk.reverse()
    return walk


def _moves(
    a: list[tuple[int, ...]],
    b: list[tuple[int, ...]],
    i: int,
    j: int,
    *,
    left: tuple[int, ...],
    right: tuple[int, ...],
) -> list[tuple[int, _Key]]:
    """Where a walk goes from cell ``(i, j)`` with ``left`` of ``a[i]`` and ``right`` of
    ``b[j]`` unpaired: right keeping ``left``, down keeping ``right`` (only a block with names
    left goes on), or on to both next blocks; as (cell, state), cell -1 past the last."""
    width = len(b)
    if not left and not right:
        inside = i + 1 < len(a) and j + 1 < width
        return [((i + 1) * width + j + 1 if inside else -1, (0, a[i + 1] if inside else _NONE))]
    moves: list[tuple[int, _Key]] = []
    if left:
        moves.append((i * width + j + 1 if j + 1 < width else -1, (0, left)))
    if right:
        moves.append(((i + 1) * width + j if i + 1 < len(a) else -1, (1, right)))
    return moves


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


def _against_sequence(
    blocks: list[tuple[int, ...]], sequence: list[tuple[int, ...]], work: int
) -> list[Step] | None:
    """A best walk of ``blocks`` against ``sequence``, whose blocks hold one name each (read
    as their calls one after another), a step per pair; ``None`` past ``work``."""
    plain: list[int] = []
    block_of: list[int] = []
    for j, block in enumerate(sequence):
        plain.extend(block)
        block_of.extend([j] * len(block))
    if _work(blocks, plain) > work:
        return None
    rows = _rows(blocks, plain)
    return [(i, block_of[p], paired) for i, p, paired in _trace(blocks, plain, rows)]


def _work(blocks: list[tuple[int, ...]], plain: list[int]) -> int:
    """What ``_rows`` spends on the blocks of several names: per occurrence in ``plain`` of
    one of their names, a step per call of the block and a bisection."""
    counts: dict[int, int] = {}
    for x in plain:
        counts[x] = counts.get(x, 0) + 1
    steps = len(plain).bit_length()
    spent = 0
    for block in blocks:
        if block[0] != block[-1]:
            spent += sum(counts.get(x, 0) for x in set(block)) * (len(block) + steps)
    return spent


def _rows(blocks: list[tuple[int, ...]], plain: list[int], keep: bool = True) -> list[int]:
    """The LCS of ``blocks`` against ``plain`` row by row, as ``lcs_length`` keeps it (bit
    ``p`` clear where the LCS grows at ``plain[p]``): before any block, then after each
    (``keep``), or only the last. A block of one name steps as its calls in sequence,
    bit-parallel; one of several by ``_group_row`` (its cost: ``_work``)."""
    masks: dict[int, int] = {}
    where: dict[int, list[int]] = {}
    for p, x in enumerate(plain):
        masks[x] = masks.get(x, 0) | (1 << p)
        where.setdefault(x, []).append(p)
    full = (1 << len(plain)) - 1
    row = full
    rows = [row]
    for block in blocks:
        if block[0] == block[-1]:
            mask = masks.get(block[0], 0)
            for _ in block:
                matched = row & mask
                row = ((row + matched) | (row - matched)) & full
        else:
            stops = sorted(p for x in set(block) for p in where.get(x, ()))
            row = _group_row(row, block, plain, stops)
        if keep:
            rows.append(row)
    return rows if keep else [row]


def _prefix(row: int, end: int) -> int:
    """The LCS a row holds against ``plain[:end]``."""
    return end - (row & ((1 << end) - 1)).bit_count()


def _group_row(row: int, block: tuple[int, ...], plain: list[int], stops: list[int]) -> int:
    """The row after a block in any order. Against ``plain[:end]`` that is the best, over
    where the stretch the block pairs with starts, of the LCS before it plus what the block
    shares with the stretch; that grows only at a name's last occurrences (as many as the
    block holds), so only stretches starting at one of these are tried, and the best of them
    (``level``) changes only at the occurrences of the block's names (``stops``). The new
    LCS is the old one raised to ``level``: between two stops it grows where the old one
    grows, except while the old one is still below ``level``."""
    wanted: dict[int, int] = {}
    for x in block:
        wanted[x] = wanted.get(x, 0) + 1
    last: dict[int, list[tuple[int, int]]] = {}
    starts: list[tuple[int, int]] = []  # (last occurrence, LCS before it), latest first
    new = row
    level = 0
    for t, p in enumerate(stops):
        before = _prefix(row, p)
        start = (p, before)
        seen = last.get(plain[p])
        if seen is None:
            seen = last[plain[p]] = []
        seen.append(start)
        starts.insert(0, start)
        if len(seen) > wanted[plain[p]]:
            starts.remove(seen.pop(0))
        here = max(before, level)
        level = max(value + shared for shared, (_, value) in enumerate(starts, 1))
        after = before + (0 if row >> p & 1 else 1)
        if max(after, level) > here:
            new &= ~(1 << p)
        else:
            new |= 1 << p
        if after < level:  # the old LCS is below level from p + 1 until it reaches it
            until = stops[t + 1] if t + 1 < len(stops) else len(plain)
            below = _reaching(row, level, p + 1, until)
            new |= ((1 << below) - 1) ^ ((1 << (p + 1)) - 1)
    return new


def _reaching(row: int, value: int, low: int, high: int) -> int:
    """The first ``end`` in ``[low, high]`` where the row's LCS reaches ``value`` (``high``
    if none before it): by steps doubling from ``low`` (it is usually near), then
    bisection; the LCS only grows with ``end``."""
    step = 1
    while low + step < high and _prefix(row, low + step) < value:
        low += step
        step *= 2
    high = min(high, low + step)
    while low < high:
        middle = (low + high) // 2
        if _prefix(row, middle) >= value:
            high = middle
        else:
            low = middle + 1
    return low


def _trace(blocks: list[tuple[int, ...]], plain: list[int], rows: list[int]) -> list[Step]:
    """The pairs of a best walk, back from the end: a block pairs nothing when the LCS before
    it is as long, else with the fewest last occurrences that make up the difference, so
    the most of ``plain`` is left to the blocks before it; the first block pairs the earliest
    it can (the first calls agree when they can)."""
    where: dict[int, list[int]] = {}
    for p, x in enumerate(plain):
        where.setdefault(x, []).append(p)
    end = len(plain)
    value = _prefix(rows[-1], end)
    steps: list[Step] = []
    for i in range(len(blocks) - 1, -1, -1):
        if value == 0:
            break
        if _prefix(rows[i], end) == value:
            continue
        if i == 0:
            taken = _earliest(blocks[0], plain, value)
        else:
            starts = _starts(blocks[i], where, end)
            count = 1
            while _prefix(rows[i], starts[count - 1]) + count != value:
                count += 1
            taken = starts[:count]
        steps.extend((i, p, (plain[p],)) for p in sorted(taken, reverse=True))
        end = min(taken)
        value -= len(taken)
    steps.reverse()
    return steps


def _starts(block: tuple[int, ...], where: dict[int, list[int]], end: int) -> list[int]:
    """The last occurrences before ``end`` of the block's names (as many of each as it
    holds), latest first."""
    wanted: dict[int, int] = {}
    for x in block:
        wanted[x] = wanted.get(x, 0) + 1
    starts: list[int] = []
    for x, count in wanted.items():
        occurrences = where.get(x)
        if occurrences is not None:
            k = bisect_left(occurrences, end)
            starts.extend(occurrences[max(0, k - count) : k])
    starts.sort(reverse=True)
    return starts


def _earliest(block: tuple[int, ...], plain: list[int], count: int) -> list[int]:
    """The first ``count`` places of ``plain`` the block's names can pair with."""
    wanted: dict[int, int] = {}
    for x in block:
        wanted[x] = wanted.get(x, 0) + 1
    taken: list[int] = []
    for p, x in enumerate(plain):
        if len(taken) == count:
            break
        left = wanted.get(x, 0)
        if left:
            wanted[x] = left - 1
            taken.append(p)
    return taken


#: Longest a side's blocks are written out for the bound, per call of the two sides.
_SPREAD: Final = 2


def _bound(a: list[tuple[int, ...]], b: list[tuple[int, ...]], work: int) -> int:
    """An upper bound of the best walk: the least of the multiset overlap and the best walk
    of either side against the other's blocks written out (each as its distinct names once
    per call: every order of the block is a subsequence of that), within ``work``, else of
    the two written out."""
    bound = _overlap(a, b)
    most = _SPREAD * (sum(len(block) for block in a) + sum(len(block) for block in b))
    spread_a, spread_b = _spread(a, most), _spread(b, most)
    kept = False
    for blocks, written in ((a, spread_b), (b, spread_a)):
        if written is not None and _work(blocks, written) <= work // 2:
            last = _rows(blocks, written, keep=False)[0]
            bound = min(bound, len(written) - last.bit_count())
            kept = True
    if not kept and spread_a is not None and spread_b is not None:
        last = _rows([(x,) for x in spread_a], spread_b, keep=False)[0]
        bound = min(bound, len(spread_b) - last.bit_count())
    return bound


def _overlap(a: list[tuple[int, ...]], b: list[tuple[int, ...]]) -> int:
    counts: dict[int, int] = {}
    for block in a:
        for x in block:
            counts[x] = counts.get(x, 0) + 1
    overlap = 0
    for block in b:
        for x in block:
            left = counts.get(x, 0)
            if left:
                counts[x] = left - 1
                overlap += 1
    return overlap


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
