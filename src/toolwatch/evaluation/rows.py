"""The exact program of ``lcs`` when one side's blocks each hold one name (calls in sequence,
or a group of one tool): rows over that side, ``plain``, kept bit-parallel as
``lcs.lcs_length`` keeps them.

A block of one name steps as its calls in sequence; a block of several raises the row to the
best, over where the stretch it pairs with starts, of the LCS before it plus what it shares
with the stretch (``_group_row``). That is exact, and costs a few steps per occurrence of a
group's names in ``plain`` (``work``).
"""

from __future__ import annotations

from bisect import bisect_left

from toolwatch.evaluation.staircase import Step

__all__ = ["best", "prefix", "rows", "trace", "work"]


def work(blocks: list[tuple[int, ...]], plain: list[int]) -> int:
    """What ``rows`` spends on the blocks of several names: per occurrence in ``plain`` of
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


def rows(blocks: list[tuple[int, ...]], plain: list[int], keep: bool = True) -> list[int]:
    """The LCS of ``blocks`` against ``plain`` row by row, as ``lcs_length`` keeps it (bit
    ``p`` clear where the LCS grows at ``plain[p]``): before any block, then after each
    (``keep``), or only the last. A block of one name steps as its calls in sequence,
    bit-parallel; one of several by ``_group_row`` (its cost: ``work``)."""
    masks: dict[int, int] = {}
    where: dict[int, list[int]] = {}
    for p, x in enumerate(plain):
        masks[x] = masks.get(x, 0) | (1 << p)
        where.setdefault(x, []).append(p)
    full = (1 << len(plain)) - 1
    row = full
    kept = [row]
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
            kept.append(row)
    return kept if keep else [row]


def best(blocks: list[tuple[int, ...]], plain: list[int]) -> int:
    """The LCS over every order of each of ``blocks`` against ``plain`` (cost: ``work``)."""
    return len(plain) - rows(blocks, plain, keep=False)[0].bit_count()


def prefix(row: int, end: int) -> int:
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
        before = prefix(row, p)
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
    while low + step < high and prefix(row, low + step) < value:
        low += step
        step *= 2
    high = min(high, low + step)
    while low < high:
        middle = (low + high) // 2
        if prefix(row, middle) >= value:
            high = middle
        else:
            low = middle + 1
    return low


def trace(blocks: list[tuple[int, ...]], plain: list[int], kept: list[int]) -> list[Step]:
    """The pairs of a best walk, from the rows ``kept`` (all of them), back from the end: a
    block pairs nothing when the LCS before it is as long, else with the fewest last
    occurrences that make up the difference, so the most of ``plain`` is left to the blocks
    before it; the first block pairs the earliest it can."""
    where: dict[int, list[int]] = {}
    for p, x in enumerate(plain):
        where.setdefault(x, []).append(p)
    end = len(plain)
    value = prefix(kept[-1], end)
    steps: list[Step] = []
    for i in range(len(blocks) - 1, -1, -1):
        if value == 0:
            break
        if prefix(kept[i], end) == value:
            continue
        if i == 0:
            taken = _earliest(blocks[0], plain, value)
        else:
            starts = _starts(blocks[i], where, end)
            count = 1
            while prefix(kept[i], starts[count - 1]) + count != value:
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
