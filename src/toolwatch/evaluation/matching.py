"""Optimal pairing of reference calls with actual calls (maximum-weight bipartite matching).

Choice: the Hungarian algorithm (Kuhn-Munkres with row/column potentials, O(n^2 m)) written
here rather than scipy's ``linear_sum_assignment``: traces have few calls, the algorithm is
short, and it runs on Python integers, so optimality is exact (no float ties); a bitmask DP
would cap n near 12. Its contract is tested against brute force over all permutations.

Bound: a tool whose reference and actual calls would make more than ``MAX_OPTIMAL_CELLS``
candidate pairs (a run looping on one tool) is paired in order instead (k-th with k-th), so a
pathological run costs O(n) comparisons rather than O(n^2) comparisons and O(n^3) steps.

Pairing rule (``pair_by_name``): a reference call pairs only with an actual call of the same
tool; within each tool the pairs maximize the number of *judged* pairs first (a pair whose
two sides both have something to compare: a reference call that gives arguments, an actual
call recorded with them), their total argument similarity second and closeness of positions
third (a lexicographic objective, encoded exactly in integer weights), and every tool gets
``min(#reference, #actual)`` pairs, because with non-negative weights on a complete
bipartite graph a maximum-weight assignment can always be completed without loss. So an
actual call whose arguments are unknown never takes, by its position, the place of one that
can be judged: a wrong call is judged wherever the unknown one stands.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from typing import Final

__all__ = [
    "MAX_OPTIMAL_CELLS",
    "SIMILARITY_RESOLUTION",
    "max_weight_assignment",
    "pair_by_name",
]

#: Similarities are compared at this resolution (1e-9) so the objective is exact in integers.
SIMILARITY_RESOLUTION: Final = 10**9
#: Largest (reference calls x actual calls) of one tool that is paired optimally (24 x 24).
MAX_OPTIMAL_CELLS: Final = 576
_NONE: Final[frozenset[int]] = frozenset()  # no index with nothing to compare: the usual


def max_weight_assignment(weights: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """Pairs ``(row, column)`` of a rectangular weight matrix: ``min(rows, columns)`` pairs, no
    row or column used twice, with the largest total weight. Sorted by row."""
    if not weights or not weights[0]:
        return []
    if len(weights) > len(weights[0]):
        transposed = [list(column) for column in zip(*weights, strict=True)]
        return sorted((r, c) for c, r in max_weight_assignment(transposed))
    cost = [[-w for w in row] for row in weights]
    columns = _Hungarian(cost).solve()
    return [(row, column) for row, column in enumerate(columns)]


class _Hungarian:
    """Minimum-cost assignment of every row (rows <= columns). 1-based internally: index 0 is
    the virtual column that starts each augmenting search."""

    __slots__ = ("cost", "m", "owner", "u", "v")

    def __init__(self, cost: list[list[int]]) -> None:
        self.cost = cost
        self.m = len(cost[0])
        self.u = [0] * (len(cost) + 1)
        self.v = [0] * (self.m + 1)
        self.owner = [0] * (self.m + 1)  # owner[j]: the row holding column j, 0 if none

    def solve(self) -> list[int]:
        for row in range(1, len(self.cost) + 1):
            self._add_row(row)
        columns = [0] * len(self.cost)
        for column in range(1, self.m + 1):
            if self.owner[column]:
                columns[self.owner[column] - 1] = column - 1
        return columns

    def _add_row(self, row: int) -> None:
        """Grow a shortest augmenting path from ``row`` along reduced costs, then flip it."""
        self.owner[0] = row
        way = [0] * (self.m + 1)
        slack = [0] * (self.m + 1)  # set by the first step: no float infinity, see _step
        used = [False] * (self.m + 1)
        column = 0
        first = True
        while self.owner[column]:
            used[column] = True
            column = self._step(self.owner[column], column, used, slack, way, first=first)
            first = False
        while column:
            previous = way[column]
            self.owner[column] = self.owner[previous]
            column = previous

    def _step(
        self,
        row: int,
        from_column: int,
        used: list[bool],
        slack: list[int],
        way: list[int],
        *,
        first: bool,
    ) -> int:
        """Relax the free columns from ``row`` (the ``first`` step of a row sets every
        column's slack), move the potentials by the least slack and return the column
        reached. Integers only: compiled, a float would hold a weight past 2**53 inexactly
        (mypyc makes ``float`` a C double), and pick a worse pairing."""
        delta, target = 0, 0
        for j in range(1, self.m + 1):
            if used[j]:
                continue
            reduced = self.cost[row - 1][j - 1] - self.u[row] - self.v[j]
            if first or reduced < slack[j]:
                slack[j], way[j] = reduced, from_column
            if not target or slack[j] < delta:
                delta, target = slack[j], j
        for j in range(self.m + 1):
            if used[j]:
                self.u[self.owner[j]] += delta
                self.v[j] -= delta
            else:
                slack[j] -= delta
        return target


def pair_by_name(
    left: Sequence[str],
    right: Sequence[str],
    similarity: Callable[[int, int], float],
    unknown_left: AbstractSet[int] = _NONE,
    unknown_right: AbstractSet[int] = _NONE,
) -> list[tuple[int, int]]:
    """Optimal same-name pairs ``(i, j)`` of ``left[i]`` with ``right[j]`` (see the module
    docstring), sorted. ``unknown_left`` / ``unknown_right``: the indexes with nothing to
    compare; a pair with neither is judged. ``similarity(i, j)`` is in [0, 1]; it is called
    at most once per judged same-name pair, and for every judged pair returned.

    Past ``MAX_OPTIMAL_CELLS`` a tool's judged sides are paired in order, then the rest."""
    span = max(len(left), len(right))
    columns_of = _indexes(right)
    pairs: list[tuple[int, int]] = []
    for name, rows in _indexes(left).items():
        columns = columns_of.get(name, [])
        if len(rows) * len(columns) > MAX_OPTIMAL_CELLS:
            in_order = _in_order(rows, columns, unknown_left, unknown_right)
            for i, j in in_order:
                if i not in unknown_left and j not in unknown_right:
                    similarity(i, j)
            pairs.extend(in_order)
        elif columns:
            pairs.extend(
                _pair_group(
                    rows,
                    columns,
                    span,
                    similarity,
                    unknown_left=unknown_left,
                    unknown_right=unknown_right,
                )
            )
    return sorted(pairs)


def _indexes(names: Sequence[str]) -> dict[str, list[int]]:
    indexes: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        indexes.setdefault(name, []).append(i)
    return indexes


def _in_order(
    rows: list[int],
    columns: list[int],
    unknown_left: AbstractSet[int],
    unknown_right: AbstractSet[int],
) -> list[tuple[int, int]]:
    """k-th with k-th: the judged rows with the judged columns first, then what is left."""
    if not unknown_left and not unknown_right:
        return list(zip(rows, columns, strict=False))
    known_rows = [i for i in rows if i not in unknown_left]
    known_columns = [j for j in columns if j not in unknown_right]
    pairs = list(zip(known_rows, known_columns, strict=False))
    rows_left = known_rows[len(pairs) :] + [i for i in rows if i in unknown_left]
    columns_left = known_columns[len(pairs) :] + [j for j in columns if j in unknown_right]
    pairs.extend(zip(sorted(rows_left), sorted(columns_left), strict=False))
    return pairs


def _pair_group(
    rows: list[int],
    columns: list[int],
    span: int,
    similarity: Callable[[int, int], float],
    *,
    unknown_left: AbstractSet[int],
    unknown_right: AbstractSet[int],
) -> list[tuple[int, int]]:
    """Most judged pairs first, maximum similarity second, closest positions third, as one
    integer weight."""
    position_base = span * span + 1  # exceeds any total of per-pair closeness values
    if not unknown_left and not unknown_right:  # the usual: every pair is judged
        weights = [
            [_weight(similarity(i, j), span - abs(i - j), position_base) for j in columns]
            for i in rows
        ]
    else:
        # Exceeds any total of the lower tiers over the pairs one assignment makes.
        judged = min(len(rows), len(columns)) * (SIMILARITY_RESOLUTION * position_base + span) + 1
        weights = [
            [
                span - abs(i - j)
                if i in unknown_left or j in unknown_right
                else judged + _weight(similarity(i, j), span - abs(i - j), position_base)
                for j in columns
            ]
            for i in rows
        ]
    return [(rows[r], columns[c]) for r, c in max_weight_assignment(weights)]


def _weight(similarity: float, closeness: int, position_base: int) -> int:
    scaled = round(min(1.0, max(0.0, similarity)) * SIMILARITY_RESOLUTION)
    return scaled * position_base + closeness
