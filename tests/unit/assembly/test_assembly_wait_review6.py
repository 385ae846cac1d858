"""Sixth review of the wait rule (review-wait6): what it found in ``_Trace.ran_on`` (a run left
running in the background after its request, held ``completion_wait + lost_parent_wait``) and
in ``assembly.dropped``, fixed here or pinned as a known limit (``xfail``).

Driven by ``wait_support.judge_timed`` (ManualClock, polled every 0.2 s; no mocks, no sleeps).
Limits: ``wait_support.LIMITS`` (completion_wait 2 s, lost_parent_wait 5 s: the two 7 s).
"""

from __future__ import annotations

import dataclasses

import pytest
from assembly_support import SECOND, agent, llm, span, tool
from stall_support import end_of, make, offer, tick, tid, verdicts
from wait_support import LIMITS, ROOT, RUN, judge_timed

from toolwatch.assembly.completed import CompletedTrace
from toolwatch.model import SpanRecord, SpanRole


def test_a_stall_waits_for_background_runs_to_be_judged() -> None:
    """Backpressure, room for two traces (``stall_support.LIMITS``: the default
    ``max_refusal_ns``, completion_wait 2 s, lost_parent_wait 5 s). Two background loops (root
    9 ended at 3 ms, a model call under it ended at 1 s: ``ran_on``) fill it at 0 s; a third
    run's request is offered every 0.5 s from 0.5 s.

    Was: the default ``max_refusal`` (5 s) was shorter than a ran-on run's 7 s wait: the stall
    (refused since 0.5 s) evicted loop 1 at 6.5 s, judged ``evicted`` (incomplete), 0.5 s
    before its wait ended; loop 2 judged complete at 7 s.
    Now: the default is ``completion_wait + lost_parent_wait`` (7 s): both loops judged
    complete at 7 s, the third request taken then."""

    def loop(n: int) -> list[SpanRecord]:
        t = tid(n)
        call = llm(10, 9, 1, 1_000, trace_id=t, size_bytes=10, parent_local=True)
        return [span(9, None, SpanRole.OTHER, 0, 3, trace_id=t, size_bytes=10), call]

    buffer, clock, _ = make()
    out: list[CompletedTrace] = []
    assert offer(buffer, loop(1), out) and offer(buffer, loop(2), out)
    taken_at = None
    for half_seconds in range(1, 21):
        tick(buffer, clock, 0.5, out)
        if taken_at is None and offer(buffer, end_of(3), out):
            taken_at = half_seconds / 2
    assert verdicts(out) == {tid(1): None, tid(2): None, tid(3): None}
    assert taken_at == 7


# The defect6 shape: a request handler (root 9, refund-agent, 0-3 ms) left a tool loop on a
# plain model client running in a task of its own: its steps are the root's own children
# (local parent), ended after the root, exported in batches 5 s apart.


def _loop_call(n: int, start_ms: int, end_ms: int) -> SpanRecord:
    return llm(
        n,
        9,
        start_ms,
        end_ms,
        trace_id=RUN,
        size_bytes=10,
        parent_local=True,
        finish_reasons=("tool_calls",),
    )


def _loop_tool(n: int, start_ms: int, end_ms: int) -> SpanRecord:
    return tool(
        n, 9, "lookup_order", start_ms, end_ms, trace_id=RUN, size_bytes=10, parent_local=True
    )


@pytest.mark.parametrize("local_parent_wait_s", [1, 3])
def test_local_parent_wait_shorter_than_both_waits_does_not_cut_a_run_that_ran_on(
    local_parent_wait_s: int,
) -> None:
    """``local_parent_wait_seconds`` set, shorter than both waits (7 s); the loop waits for no
    local parent (its steps are the root's children, the root held).

    Was: under a root ``anchored(local_gone=True)`` is always true, so ``_check`` set
    ``awaiting_local`` on every rooted trace it found unanchored: at 3 s the ran-on trace was
    emitted at quiet 3 s, its next batch (4 s later) ``late``; at 1 s ``ran_on`` had no effect
    (judged at 2 s).
    Now: ``awaiting_local`` only where a span waits for a local parent
    (``_Trace.anchored_if_local_gone``): one trace, 3 spans, at 11 s (7 s after the last)."""
    limits = dataclasses.replace(LIMITS, local_parent_wait_ns=local_parent_wait_s * SECOND)
    batches = [([ROOT, _loop_call(10, 1, 1_000)], 4), ([_loop_tool(11, 1_000, 5_000)], 1)]
    assert judge_timed(batches, limits) == ([(None, 3, 11)], 0)


def test_local_parent_wait_still_cuts_a_rooted_run_waiting_for_a_local_parent() -> None:
    """Control: a rooted trace whose agent span's local parent (span 5) never comes is cut at
    ``local_parent_wait`` (3 s), as configured, not held the two waits."""
    limits = dataclasses.replace(LIMITS, local_parent_wait_ns=3 * SECOND)
    orphan = agent(2, 5, "refund-bot", 1, 2, trace_id=RUN, size_bytes=10, parent_local=True)
    assert judge_timed([([ROOT, orphan], 1)], limits) == ([(None, 2, 3)], 0)


def test_local_parent_wait_shorter_than_both_waits_does_not_cut_a_run_with_a_rejected_span() -> (
    None
):
    """A rooted trace one of whose spans was rejected at ingest (``parent_lost``: it may be a
    step of a run left running in the background), ``local_parent_wait`` 3 s.

    Was: emitted at quiet 3 s, as any unanchored rooted trace was.
    Now: held the two waits (7 s), as without ``local_parent_wait``; ``span_limit`` (a span
    of it rejected)."""
    limits = dataclasses.replace(LIMITS, local_parent_wait_ns=3 * SECOND)
    step = _loop_call(10, 1, 2)  # ended before the root's end: not ``ran_on``
    assert judge_timed([([step, ROOT, None], 1)], limits) == ([("span_limit", 2, 7)], 0)
