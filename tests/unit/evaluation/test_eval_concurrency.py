"""Which calls could have seen another's result: ``Concurrency`` and its ``Successes``."""

from __future__ import annotations

from eval_factories import call
from hypothesis import given
from hypothesis import strategies as st

from toolwatch.evaluation.concurrency import MAX_NESTING, Concurrency
from toolwatch.evaluation.loops import find_repeats
from toolwatch.model_traces import ToolCall


@st.composite
def nested_runs(draw: st.DrawFn) -> tuple[list[ToolCall], list[bool]]:
    """Calls in sequence order, each nested in an earlier one or in none, in a parallel
    group or not (groups shared by siblings and by unrelated calls alike), and which of
    them succeeded. Deep enough, at times, to pass ``MAX_NESTING``."""
    count = draw(st.integers(1, 60))
    # flat: no nesting (the usual run); chain: each call in the one before, past MAX_NESTING
    shape = draw(st.sampled_from(["flat", "tree", "chain"]))
    calls, succeeded = [], []
    for i in range(count):
        if shape == "chain":
            parent = i - 1 if i else None
        elif shape == "tree" and i:
            parent = draw(st.one_of(st.none(), st.integers(0, i - 1)))
        else:
            parent = None
        group = draw(st.one_of(st.none(), st.integers(0, 3)))
        calls.append(call("search", {"q": "x"}, index=i, group=group, parent=parent))
        succeeded.append(draw(st.booleans()))
    return calls, succeeded


@given(nested_runs())
def test_successes_answer_as_asking_each_success_does(
    run: tuple[list[ToolCall], list[bool]],
) -> None:
    """The counting index and the pairwise question agree on every run: the index only
    answers in time bounded by nesting depth."""
    calls, succeeded = run
    concurrency = Concurrency(calls)
    successes = concurrency.successes()
    added: list[int] = []
    for i in range(len(calls)):
        assert successes.informs(i) == any(concurrency.informs(j, i) for j in added), i
        if succeeded[i]:
            successes.add(i)
            added.append(i)
    assert bool(successes) == bool(added)


def test_nesting_deeper_than_the_limit_reads_as_siblings_at_the_limit() -> None:
    """A chain of calls each nested in the one before (hostile, or a runaway recursion):
    past MAX_NESTING they sit side by side, so an identical one that returned is a repeat."""
    depth = MAX_NESTING + 8
    chain = [call("search", {"q": "x"}, index=i, parent=i - 1 if i else None) for i in range(depth)]
    concurrency = Concurrency(chain)
    assert concurrency.lineage(MAX_NESTING - 1) == tuple(range(MAX_NESTING))
    assert concurrency.lineage(depth - 1) == (*range(MAX_NESTING - 1), depth - 1)
    assert not concurrency.informs(MAX_NESTING - 2, MAX_NESTING - 1)  # still enclosing it
    assert concurrency.informs(MAX_NESTING - 1, MAX_NESTING)  # beside it, returned
    (repeat,) = find_repeats(chain, ["search"] * depth, {}, 0)
    # The first call past the limit repeats the one at the limit; each later one the same.
    assert [c.sequence_index for c in repeat.flagged] == list(range(MAX_NESTING, depth))


def test_identical_calls_issued_at_once_inform_none_of_each_other_but_a_later_one() -> None:
    together = [call("search", {"q": "x"}, index=i, group=1) for i in range(500)]
    later = call("search", {"q": "x"}, index=500)
    concurrency = Concurrency([*together, later])
    successes = concurrency.successes()
    for i in range(500):
        assert not successes.informs(i)
        successes.add(i)
    assert successes.informs(500)
