"""Bipartite pairing: the Hungarian assignment is optimal, pairing is by name, and optimal
pairing is never worse than greedy pairing."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from toolwatch.evaluation.matching import MAX_OPTIMAL_CELLS, max_weight_assignment, pair_by_name

matrices = st.integers(1, 5).flatmap(
    lambda rows: st.integers(1, 5).flatmap(
        lambda columns: st.lists(
            st.lists(st.integers(-20, 50), min_size=columns, max_size=columns),
            min_size=rows,
            max_size=rows,
        )
    )
)


def brute_force_best(weights: list[list[int]]) -> int:
    rows, columns = len(weights), len(weights[0])
    if rows <= columns:
        return max(
            sum(weights[i][p[i]] for i in range(rows))
            for p in itertools.permutations(range(columns), rows)
        )
    return max(
        sum(weights[p[j]][j] for j in range(columns))
        for p in itertools.permutations(range(rows), columns)
    )


@given(matrices)
def test_assignment_is_a_maximum_weight_complete_matching(weights: list[list[int]]) -> None:
    pairs = max_weight_assignment(weights)
    assert len(pairs) == min(len(weights), len(weights[0]))
    assert len({r for r, _ in pairs}) == len(pairs) == len({c for _, c in pairs})
    assert sum(weights[r][c] for r, c in pairs) == brute_force_best(weights)


@given(matrices, st.sampled_from([2**60, -(2**60)]))
def test_weights_past_a_doubles_precision_are_compared_exactly(
    weights: list[list[int]], offset: int
) -> None:
    """Compiled, a float is a C double: weights one apart past 2**53 (long runs, or pairs
    of unknown arguments ranked below the judged ones) read as equal there."""
    shifted = [[offset + w for w in row] for row in weights]
    pairs = max_weight_assignment(shifted)
    assert sum(shifted[r][c] for r, c in pairs) == brute_force_best(shifted)


def test_assignment_of_an_empty_matrix_is_empty() -> None:
    assert max_weight_assignment([]) == []
    assert max_weight_assignment([[]]) == []


def test_assignment_beats_greedy_on_the_classic_counterexample() -> None:
    # Greedy takes the 9 and is left with 0; the optimum is 8 + 8.
    assert max_weight_assignment([[9, 8], [8, 0]]) == [(0, 1), (1, 0)]


def test_pairs_only_join_calls_of_the_same_tool() -> None:
    pairs = pair_by_name(["a", "b", "a"], ["b", "c", "a"], lambda i, j: 0.0)
    assert pairs == [(1, 0), (2, 2)]  # the second "a" is closer to the only "a" on the right


def test_equal_similarity_ties_go_to_the_closest_positions() -> None:
    pairs = pair_by_name(["a", "a", "a"], ["a", "a", "a"], lambda i, j: 1.0)
    assert pairs == [(0, 0), (1, 1), (2, 2)]


def test_similarity_wins_over_position() -> None:
    similarity = {(0, 0): 0.0, (0, 1): 1.0, (1, 0): 1.0, (1, 1): 0.0}
    assert pair_by_name(["a", "a"], ["a", "a"], lambda i, j: similarity[(i, j)]) == [
        (0, 1),
        (1, 0),
    ]


def greedy_total(names_l: list[str], names_r: list[str], sim: list[list[float]]) -> float:
    """Greedy: each left call in order takes its best remaining same-name partner."""
    used: set[int] = set()
    total = 0.0
    for i, name in enumerate(names_l):
        options = [j for j, n in enumerate(names_r) if n == name and j not in used]
        if options:
            best = max(options, key=lambda j: sim[i][j])
            used.add(best)
            total += sim[i][best]
    return total


@given(
    st.lists(st.sampled_from("ab"), min_size=1, max_size=6),
    st.lists(st.sampled_from("ab"), min_size=1, max_size=6),
    st.data(),
)
def test_optimal_pairing_is_never_worse_than_greedy(
    left: list[str], right: list[str], data: st.DataObject
) -> None:
    unit = st.floats(0.0, 1.0, allow_nan=False)
    sim = [[data.draw(unit) for _ in right] for _ in left]
    pairs = pair_by_name(left, right, lambda i, j: sim[i][j])
    optimal = sum(sim[i][j] for i, j in pairs)
    # Similarities are compared at 1e-9 resolution, hence the tolerance.
    assert optimal >= greedy_total(left, right, sim) - 1e-8 * len(left)


def test_a_tool_with_too_many_calls_is_paired_in_order_with_few_comparisons() -> None:
    n = 100
    assert n * n > MAX_OPTIMAL_CELLS
    asked: list[tuple[int, int]] = []

    def similarity(i: int, j: int) -> float:
        asked.append((i, j))
        return 1.0

    pairs = pair_by_name(["a"] * n, ["a"] * (n + 5), similarity)
    assert pairs == [(i, i) for i in range(n)]
    assert sorted(asked) == pairs


def complete_matchings(rows: int, columns: int) -> list[list[tuple[int, int]]]:
    if rows <= columns:
        return [list(enumerate(p)) for p in itertools.permutations(range(columns), rows)]
    return [[(i, j) for j, i in enumerate(p)] for p in itertools.permutations(range(rows), columns)]


@given(st.integers(1, 4), st.integers(1, 4), st.data())
def test_pairs_judge_as_many_as_they_can_then_the_most_similar(
    rows: int, columns: int, data: st.DataObject
) -> None:
    """A side with nothing to compare (arguments unknown) makes its pairs unjudged: the
    pairing judges as many pairs as it can, then maximizes their similarity, and never asks
    the similarity of an unjudged pair."""
    sim = [[data.draw(st.floats(0.0, 1.0)) for _ in range(columns)] for _ in range(rows)]
    unknown_left = data.draw(st.frozensets(st.integers(0, rows - 1)))
    unknown_right = data.draw(st.frozensets(st.integers(0, columns - 1)))
    asked: list[tuple[int, int]] = []

    def similarity(i: int, j: int) -> float:
        asked.append((i, j))
        return sim[i][j]

    def value(pairs: list[tuple[int, int]]) -> tuple[int, int]:
        judged = [(i, j) for i, j in pairs if i not in unknown_left and j not in unknown_right]
        return len(judged), sum(round(sim[i][j] * 10**9) for i, j in judged)

    pairs = pair_by_name(["a"] * rows, ["a"] * columns, similarity, unknown_left, unknown_right)
    assert len(pairs) == min(rows, columns)
    assert value(pairs) == max(value(m) for m in complete_matchings(rows, columns))
    assert not any(i in unknown_left or j in unknown_right for i, j in asked)


def test_an_unknown_call_never_takes_a_judged_pairs_place_even_when_closer() -> None:
    assert pair_by_name(["a"], ["a", "a"], lambda i, j: 0.0, unknown_right={0}) == [(0, 1)]


def test_past_the_bound_judged_sides_are_paired_in_order_before_the_rest() -> None:
    n = 30
    assert n * n > MAX_OPTIMAL_CELLS
    pairs = pair_by_name(["a"] * n, ["a"] * n, lambda i, j: 1.0, unknown_right={0})
    assert pairs == sorted([(i, i + 1) for i in range(n - 1)] + [(n - 1, 0)])
