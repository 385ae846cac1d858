"""Sixth review of the wait rule (review-wait6): what it found in ``_Trace.ran_on`` (a run left
running in the background after its request, held ``completion_wait + lost_parent_wait``) and
in ``assembly.dropped``, fixed here or pinned as a known limit (``xfail``).

Driven by ``wait_support.judge_timed`` (ManualClock, polled every 0.2 s; no mocks, no sleeps).
Limits: ``wait_support.LIMITS`` (completion_wait 2 s, lost_parent_wait 5 s: the two 7 s).
"""

from __future__ import annotations

from assembly_support import llm, span
from stall_support import end_of, make, offer, tick, tid, verdicts

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
