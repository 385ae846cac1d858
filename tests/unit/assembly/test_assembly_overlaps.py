"""The overlap sweep behind ``parallel_group``: its components are those of the pairs it is
meant to join, found by comparing every pair (CONVENTIONS §6.4)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from toolwatch.assembly.overlaps import Execution, overlapping_pairs

Request = tuple[int, int, bytes]


def components(count: int, pairs: list[tuple[int, int]]) -> list[int]:
    leader = list(range(count))

    def find(i: int) -> int:
        while leader[i] != i:
            i = leader[i]
        return i

    for first, second in pairs:
        a, b = find(first), find(second)
        leader[max(a, b)] = min(a, b)
    return [find(i) for i in range(count)]


def joined(a: Execution, b: Execution) -> bool:
    """The rule, pair by pair: one parent, overlapping executions, and no requests of model
    calls one strictly after the other."""
    if a.parent != b.parent or not (a.start_ns < b.end_ns and b.start_ns < a.end_ns):
        return False
    if a.request is None or b.request is None or a.request[2] == b.request[2]:
        return True
    (a_start, a_end, _), (b_start, b_end, _) = a.request, b.request
    return not (a_end <= b_start or b_end <= a_start)


@st.composite
def runs(draw: st.DrawFn) -> list[Execution]:
    requests = [
        (start, start + draw(st.sampled_from([0, 0, 1, 2, 3, 5])), bytes([k]))
        for k, start in enumerate(draw(st.lists(st.integers(0, 8), min_size=1, max_size=4)))
    ]
    drawn = []
    for index in range(draw(st.integers(1, 12))):
        start = draw(st.integers(0, 10))
        end = start + draw(st.sampled_from([0, 1, 2, 4, 8]))
        parent = draw(st.sampled_from([None, None, None, b"p"]))
        request = draw(st.sampled_from([None, *requests]))
        drawn.append(Execution(index, parent, start, end, request))
    return sorted(drawn, key=lambda e: (e.start_ns, e.end_ns, e.index))


@given(runs())
def test_the_sweep_joins_what_comparing_every_pair_joins(run: list[Execution]) -> None:
    every_pair = [
        (a.index, b.index) for k, a in enumerate(run) for b in run[k + 1 :] if joined(a, b)
    ]
    assert components(len(run), overlapping_pairs(run)) == components(len(run), every_pair)


def test_a_call_with_no_request_joins_calls_requested_one_after_the_other() -> None:
    # ``a`` requested by a model call at 1-10 ms, ``b`` by one at 20-29: never joined to
    # each other, but ``c``, which no output requested, overlaps both.
    run = [
        Execution(0, None, 11, 40, (1, 10, b"m1")),
        Execution(1, None, 30, 50, (20, 29, b"m2")),
        Execution(2, None, 35, 60, None),
    ]
    assert components(3, overlapping_pairs(run)) == [0, 0, 0]
    assert components(2, overlapping_pairs(run[:2])) == [0, 1]
