"""The exact program of ``lcs`` when both sides hold groups: a best walk over the cells.

A state. A walk at cell ``(i, j)`` (block ``i`` of one side, block ``j`` of the other) has
one block going on, with the names it has left, the other block whole: side 0 when it is
``a[i]`` (``b[j]`` whole), side 1 when it is ``b[j]``. Both whole is side 0 with all of
``a[i]``. The cell pairs all it can of the two (``lcs``: never worse), and the walk goes
right keeping what is left of ``a[i]``, down keeping what is left of ``b[j]`` (only a block
with names left goes on), or on to both next blocks, whole. The state's value is the names
paired before it; the program keeps the best value of each state.

What is left makes a chain. The names of ``a[i]`` left at ``(i, j)`` are ``a[i]`` less what it
shares with ``r + b[j0 + 1] + ... + b[j - 1]``, where the walk came into the row at column
``j0`` meeting ``r`` (``b[j0]`` whole, or what was left of it coming down): pairing all it can
at each cell takes, of each name, the least of what ``a[i]`` holds and what those blocks hold
together. Those sums make a chain: a walk that came into the row earlier meets, from column
``j0 + 1`` on, all a later one meets, and at the same column what is left of ``b[j0]`` is a
chain (the same argument down the column, at cells before this one). So the states of side
0 at a cell hold distinct counts of names, at most ``|a[i]|`` of them, and those of side 1 at
most ``|b[j]| - 1`` (``b[j]`` whole is both whole): a state is named by its count, and
``meets`` foresees the program's cost from the block sizes alone.

Pruning. From a state, the most a walk can still pair is the best over ``a[i]``'s rest and
the blocks after, against ``b[j]`` and those after (side 0; likewise side 1): at most that of
both blocks whole (more names can only pair more), and at least that less the names the
block going on has used (drop the pairs of those). So a state whose value is at most
another's value less the names that one's block has used can do no better than it, and is
not gone on with.
"""

from __future__ import annotations

from typing import Final, TypeAlias

__all__ = ["CELL", "Step", "meets", "staircase"]

#: A step of a walk: block of one side, block of the other, the name ids paired there.
Step: TypeAlias = tuple[int, int, tuple[int, ...]]
#: What visiting a cell costs, counted as names met (measured, compiled: about 0.2 us a
#: cell, 0.015 us a name met).
CELL: Final = 12
_NONE: Final[tuple[int, ...]] = ()


def meets(a: list[tuple[int, ...]], b: list[tuple[int, ...]]) -> int:
    """The most names ``staircase`` meets over blocks ``a`` and ``b``, each cell counted as
    ``CELL`` more. In a cell of blocks of ``p`` and ``q`` names: states going on with ``p``,
    ``p - 1``, ... 1 names of the first, each meeting the ``q`` of the other, and with
    ``q - 1``, ... 1 of the second, each meeting the ``p`` of the first (the chain, in the
    module docstring): ``(p * p - p) / 2 + (q * q - q) / 2 + 2 * p * q``."""
    p1 = sum(len(x) for x in a)
    p2 = sum(len(x) * len(x) for x in a)
    q1 = sum(len(y) for y in b)
    q2 = sum(len(y) * len(y) for y in b)
    cells = len(a) * len(b)
    return len(b) * (p2 - p1) // 2 + len(a) * (q2 - q1) // 2 + 2 * p1 * q1 + CELL * cells


def staircase(a: list[tuple[int, ...]], b: list[tuple[int, ...]]) -> tuple[list[Step], int]:
    """A best walk over the cells of blocks ``a`` and ``b`` (each a sorted tuple of name ids,
    none empty), and the names it met (each cell counted as ``CELL``): never more than
    ``meets`` foresees. Each row's states are kept in a ``_Row``, the steps in ``_Walks``."""
    if not a or not b:
        return [], 0
    walks = _Walks(a, b)
    here = _Row(len(a[0]), walks.starts)
    here.arrive(len(a[0]) - 1, a[0], 0, -1)
    for i in range(len(a)):
        below = _Row(len(a[i + 1]), walks.starts) if i + 1 < len(a) else None
        for j in range(len(b)):
            walks.cell(i, j, here, below)
        if below is not None:
            here = below
    return walks.best(), walks.met


class _Walks:
    """The steps of the walks, by number (cell, names paired, the step before, -1 for none),
    the best walk's end, and the names met."""

    __slots__ = ("a", "b", "before", "best_step", "best_value", "cells", "met", "paired", "starts")

    def __init__(self, a: list[tuple[int, ...]], b: list[tuple[int, ...]]) -> None:
        self.a = a
        self.b = b
        self.starts = [0]  # where each block of ``b`` starts, in names
        for y in b:
            self.starts.append(self.starts[-1] + len(y))
        self.cells: list[int] = []
        self.paired: list[tuple[int, ...]] = []
        self.before: list[int] = []
        self.best_value = -1
        self.best_step = -1
        self.met = 0

    def cell(self, i: int, j: int, here: _Row, below: _Row | None) -> None:
        """Go on from the states of cell ``(i, j)`` worth going on with (``_floor``)."""
        block, other = self.a[i], self.b[j]
        size = len(block)
        self.met += CELL
        first = here.first(j)
        keep, floor = _floor(here, first, size, len(other))
        for slot in range(first, first + size + len(other) - 1):
            value = here.values[slot]
            if value < 0 or (value <= floor and slot != keep):
                continue
            rest = here.rests[slot]
            if slot - first < size:  # a[i]'s rest goes on, b[j] whole
                self.met += len(rest) + len(other)
                shared, left, right = _meet(rest, other)
            else:
                self.met += len(rest) + size
                shared, left, right = _meet(block, rest)
            step = len(self.cells)
            self.cells.append(i * len(self.b) + j)
            self.paired.append(shared)
            self.before.append(here.steps[slot])
            total = value + len(shared)
            self.go_on(i, j, here, below, left=left, right=right, total=total, step=step)

    def go_on(
        self,
        i: int,
        j: int,
        here: _Row,
        below: _Row | None,
        *,
        left: tuple[int, ...],
        right: tuple[int, ...],
        total: int,
        step: int,
    ) -> None:
        """The moves from cell ``(i, j)`` with ``left`` of ``a[i]`` and ``right`` of ``b[j]``
        unpaired, ``total`` paired, by ``step``: right keeping ``left``, down keeping
        ``right`` (all of ``b[j]``: both whole), on to both next blocks whole; a walk that
        can go no further ends."""
        ended = False
        last_column = j + 1 == len(self.b)
        if not left and not right:
            if below is None or last_column:
                ended = True
            else:
                below.arrive(below.first(j + 1) + below.size - 1, self.a[i + 1], total, step)
        if left:
            if last_column:
                ended = True
            else:
                here.arrive(here.first(j + 1) + len(left) - 1, left, total, step)
        if right:
            if below is None:
                ended = True
            elif len(right) == len(self.b[j]):
                below.arrive(below.first(j) + below.size - 1, self.a[i + 1], total, step)
            else:
                below.arrive(below.first(j) + below.size + len(right) - 1, right, total, step)
        if ended and total > self.best_value:
            self.best_value, self.best_step = total, step

    def best(self) -> list[Step]:
        """The best walk's steps, from the first."""
        width = len(self.b)
        walk: list[Step] = []
        at = self.best_step
        while at >= 0:
            cell = self.cells[at]
            walk.append((cell // width, cell % width, self.paired[at]))
            at = self.before[at]
        walk.reverse()
        return walk


class _Row:
    """The states of one row of cells, a slot for each state a cell can hold (the chain):
    in cell ``j``, slot ``s - 1`` from its first for ``s`` names of ``a[i]`` left (``size``
    names) and ``b[j]`` whole, slot ``size + s - 1`` for ``s`` of ``b[j]`` left and ``a[i]``
    whole. Per slot: the best value reaching it (-1: none), its step, and the names left."""

    __slots__ = ("rests", "size", "starts", "steps", "values")

    def __init__(self, size: int, starts: list[int]) -> None:
        self.size = size
        self.starts = starts  # where each block of the other side starts, in names
        slots = (len(starts) - 1) * (size - 1) + starts[-1]
        self.values = [-1] * slots
        self.steps = [-1] * slots
        self.rests: list[tuple[int, ...]] = [_NONE] * slots

    def first(self, j: int) -> int:
        """The first slot of cell ``j``: ``size + |b[j']| - 1`` slots per cell before it."""
        return j * (self.size - 1) + self.starts[j]

    def arrive(self, slot: int, rest: tuple[int, ...], total: int, step: int) -> None:
        """A walk reaches ``slot`` with ``total`` paired, by ``step``: kept if the best yet."""
        if self.values[slot] < total:
            self.values[slot] = total
            self.steps[slot] = step
            self.rests[slot] = rest


def _floor(row: _Row, first: int, size_a: int, size_b: int) -> tuple[int, int]:
    """The slot of the cell's state with the most value less the names its block going on
    has used, and that: the others go on only when worth more (pruning, in the module
    docstring). ``(-1, 0)`` for a cell no walk reached."""
    keep, floor = -1, 0
    end = first + size_a + size_b - 1
    for slot in range(first, end):
        value = row.values[slot]
        if value >= 0:
            used = size_a - 1 - (slot - first) if slot - first < size_a else end - slot
            if keep < 0 or value - used > floor:
                keep, floor = slot, value - used
    return keep, floor


def _meet(
    left: tuple[int, ...], right: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """The names two sorted multisets share, and what is left of each."""
    i = j = 0
    while i < len(left) and j < len(right):  # most cells share nothing: build nothing
        if left[i] == right[j]:
            break
        if left[i] < right[j]:
            i += 1
        else:
            j += 1
    else:
        return _NONE, left, right
    shared: list[int] = []
    rest_left = list(left[:i])
    rest_right = list(right[:j])
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
