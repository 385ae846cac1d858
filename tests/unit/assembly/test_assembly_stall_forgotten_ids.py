"""Was (found by review, fixed): ``has_room`` reads the remembered ids (``_emitted``) before
they are forgotten, where ``add`` forgets first (``self._emitted.forget(now)``), so it counts a
span of a trace whose late window has passed as ``late`` (no room, no new trace) and lets the
request through at a full buffer; ``add`` then stores it as a new trace, finds no room and,
evicting nothing under ``backpressure``, drops it ``buffer_full``, where a refusal would have
had the sender retry it.

Only ``add`` and ``poll`` forget; the ticker polls at least every second
(``app._HOUSEKEEPING_SECONDS``), so the stale view lasts up to a second, against ids kept a
bucket (1.17 s of 300 s) past their window anyway: rare, and one span lost counted, not
silently. Reported for the contract ("what it decides, ``add`` does").

Suggested fix: ``self._emitted.forget(self._clock())`` at the top of ``has_room`` (it is
O(1) when nothing is due to be forgotten).
"""

from __future__ import annotations

import dataclasses

from assembly_support import SECOND
from stall_support import LIMITS, end_of, in_flight, make, offer, tick, tid, verdicts

from toolwatch.assembly.completed import CompletedTrace

_WINDOW = 256 * SECOND  # ids forgotten in 1 s buckets


def test_a_span_of_a_trace_forgotten_since_is_refused_at_a_full_buffer() -> None:
    limits = dataclasses.replace(LIMITS, late_span_window_ns=_WINDOW, max_refusal_ns=0)
    buffer, clock, metrics = make(limits)  # max_traces=2
    out: list[CompletedTrace] = []
    assert offer(buffer, end_of(1), out)
    tick(buffer, clock, 2, out)
    assert verdicts(out) == {tid(1): None}  # run 1 judged, its id remembered for the window
    assert offer(buffer, in_flight(2), out)
    assert offer(buffer, in_flight(3), out)  # full: runs 2 and 3 in flight
    clock.now_ns += _WINDOW + 2 * SECOND  # the window passed; nothing added or polled since
    refused: dict[str, int] = {}
    straggler = in_flight(1, span_id=7)  # trace 1 again: a new trace now, as add reads it

    buffer.admit(straggler, 10, refused)

    # Was: let through as ``late``; stored as a new trace by ``add``, dropped ``buffer_full``.
    assert refused == {}
    assert metrics.dropped == {}
