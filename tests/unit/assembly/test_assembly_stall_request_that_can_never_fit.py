"""Defects of the "can never fit" path once the fallback is armed.

``has_room`` lets a request that can never fit through (more new traces, spans or bytes than
the buffer can ever hold) without touching ``_refused_since``; ``add`` then evicts whenever
``_stalled(now)`` holds. Two consequences the commit's tests do not cover (they stop at
``MAX_REFUSAL_NS - 1``):

1. Self-eviction: ``_oldest_other`` skips only the current span's trace, so once every older
   run is gone the request evicts the traces *it* started a moment before: one-span runs
   judged ``evicted``, their ids remembered, their later spans dropped ``late``. Before the
   commit (and before the limit) the same request evicted nothing: what did not fit was
   dropped ``buffer_full`` and the sender told so in the partial success.
2. A stale count: ``_refused_since`` is cleared only by a request that fits, never by room
   made as runs end. One refusal at t=0, the runs judged at t=2, no request until t=10: the
   buffer is "stalled" although it has refused nothing for 10 s, and a request that cannot
   fit evicts runs at once.

Reachable by any sender: more than ``max_traces`` (10,000) distinct trace ids in one request
is about 10,001 small spans, well under ``max_request_bytes`` (20 MiB).

Fix: on the can-never-fit path keep the pre-commit behaviour (no eviction: take what fits,
drop the rest ``buffer_full``), or at least never evict a trace the same ``add`` stored; and
clear ``_refused_since`` when ``poll``/eviction leaves the buffer with room (or store the
time of the *last* refusal too, and require refusals within ``retry_after`` of each other).
"""

from __future__ import annotations

from assembly_support import SECOND
from stall_support import end_of, in_flight, make, offer, tick, tid, verdicts

from toolwatch.assembly.completed import CompletedTrace
from toolwatch.assembly.limits import MAX_REFUSAL_NS

#: Three new traces in one request: more than ``max_traces`` (2), so it can never fit.
TOO_MANY = in_flight(4) + in_flight(5) + in_flight(6)


def test_a_request_never_evicts_the_traces_it_started_itself() -> None:
    buffer, clock, _metrics = make()
    out: list[CompletedTrace] = []
    assert offer(buffer, in_flight(1), out)
    assert offer(buffer, in_flight(2), out)
    assert not offer(buffer, in_flight(3), out)
    tick(buffer, clock, MAX_REFUSAL_NS / SECOND, out)

    assert offer(buffer, TOO_MANY, out)  # can never fit: let through
    evicted = {t.trace_id for t in out if t.incomplete_reason == "evicted"}
    assert evicted.isdisjoint({tid(4), tid(5), tid(6)})  # Was: run 4 evicted by run 6


def test_a_request_that_can_never_fit_is_not_stalled_by_a_refusal_long_over() -> None:
    """One refusal at t=0; run 1 ends and is judged at t=2, leaving room; ten seconds with no
    refusal. The buffer is not stalled, and the request that can never fit is taken as before
    the commit: what fits is stored, nothing evicted, the rest dropped ``buffer_full``."""
    buffer, clock, metrics = make()
    out: list[CompletedTrace] = []
    assert offer(buffer, in_flight(1), out)
    assert offer(buffer, in_flight(2), out)
    assert not offer(buffer, in_flight(3), out)  # the one refusal
    assert offer(buffer, end_of(1), out)  # continues run 1: run 1 has ended
    assert not offer(buffer, in_flight(3), out)  # refused again at t=0: the count starts
    tick(buffer, clock, 2, out)
    assert verdicts(out) == {tid(1): None}  # run 1 judged: room for one trace
    tick(buffer, clock, 8, out)  # no refusal since t=0

    assert offer(buffer, TOO_MANY, out)
    assert metrics.evicted == {}  # Was: {"max_traces": 2}: run 2 and run 4 evicted
    assert metrics.dropped == {"buffer_full": 2}
