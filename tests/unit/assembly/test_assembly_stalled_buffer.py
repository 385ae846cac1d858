"""A full buffer under ``backpressure`` stops refusing once refusing cannot make room.

Was: a buffer full of runs in flight refused every request that would start a trace or add
past a bound, for as long as it stayed full. Nearly every batch of a Collector or an SDK
carries both the end of some run and the start of another, so the runs' own last spans were
refused with the rest: nothing left the buffer until ``max_trace_age`` (300 s by default)
judged its runs ``timed_out``, while the senders gave the refused batches up (the SDKs after
their 10 s export timeout) and lost them uncounted.
Now: once the buffer has refused requests for ``max_refusal_ns`` (7 s by default: 5 s
before review-wait6 defect 5) with none
fitting in between, it takes each request by evicting the oldest runs, as ``evict_oldest``
does (counted, judged incomplete, their later spans dropped ``late``), until one fits again.
"""

from __future__ import annotations

import dataclasses

from assembly_support import SECOND, RecordingMetrics, agent, tool

from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.assembly.limits import MAX_REFUSAL_NS, AssemblyLimits
from toolwatch.model import ManualClock, SpanRecord

LIMITS = AssemblyLimits(
    completion_wait_ns=2 * SECOND,
    max_trace_age_ns=300 * SECOND,
    max_traces=2,
)


def make(
    limits: AssemblyLimits = LIMITS,
) -> tuple[TraceBuffer, ManualClock, RecordingMetrics]:
    clock = ManualClock()
    metrics = RecordingMetrics()
    return TraceBuffer(limits, clock, metrics), clock, metrics


def in_flight(n: int) -> list[SpanRecord]:
    """A tool span of run ``n``, whose agent is still running: never ready by itself."""
    return [tool(2, 1, "lookup_order", 0, 1, trace_id=n.to_bytes(16, "big"), size_bytes=10)]


def offer(buffer: TraceBuffer, spans: list[SpanRecord]) -> list[bytes] | None:
    """What a receiver does: ``None`` when refused, else the ids of the runs evicted."""
    evicted = buffer.admit(spans, sum(s.size_bytes for s in spans))
    return None if evicted is None else [t.trace_id for t in evicted]


def later(buffer: TraceBuffer, clock: ManualClock, ns: int) -> None:
    """``ns`` pass, and the completion checks due are made, as the ticker makes them."""
    clock.now_ns += ns
    assert buffer.poll() == []  # the runs in flight stay


def end(buffer: TraceBuffer, clock: ManualClock, n: int) -> None:
    """Run ``n`` ends (its agent span comes, fitting) and is judged after the wait."""
    ended = [agent(1, None, "refund-bot", 0, 5, trace_id=n.to_bytes(16, "big"))]
    assert offer(buffer, ended) == []
    clock.now_ns += 2 * SECOND
    assert [(t.trace_id, t.incomplete_reason) for t in buffer.poll()] == [
        (n.to_bytes(16, "big"), None)
    ]


def full(limits: AssemblyLimits = LIMITS) -> tuple[TraceBuffer, ManualClock, RecordingMetrics]:
    """A buffer holding ``max_traces`` runs in flight, 1 and 2."""
    buffer, clock, metrics = make(limits)
    assert offer(buffer, in_flight(1)) == []
    assert offer(buffer, in_flight(2)) == []
    return buffer, clock, metrics


def test_the_default_is_both_default_waits() -> None:
    """Was: 5 s. Now: 7 s, ``completion_wait`` and ``lost_parent_wait`` (2 s and 5 s): a run
    left running in the background waits both (review-wait6 defect 5)."""
    limits = AssemblyLimits()
    assert limits.max_refusal_ns == MAX_REFUSAL_NS == 7 * SECOND
    assert limits.completion_wait_ns + limits.lost_parent_wait_ns == MAX_REFUSAL_NS


def test_a_full_buffer_refuses_until_the_limit_then_evicts_the_oldest_run() -> None:
    buffer, clock, metrics = full()

    assert offer(buffer, in_flight(3)) is None  # the first refusal starts the count
    later(buffer, clock, MAX_REFUSAL_NS - 1)
    assert offer(buffer, in_flight(3)) is None
    assert metrics.evicted == {}

    later(buffer, clock, 1)
    assert offer(buffer, in_flight(3)) == [(1).to_bytes(16, "big")]
    assert metrics.evicted == {"max_traces": 1}
    assert buffer.buffered_traces == 2


def test_a_stalled_buffer_keeps_evicting_until_a_request_fits_again() -> None:
    buffer, clock, metrics = full()
    assert offer(buffer, in_flight(3)) is None
    later(buffer, clock, MAX_REFUSAL_NS)

    assert offer(buffer, in_flight(3)) == [(1).to_bytes(16, "big")]
    assert offer(buffer, in_flight(4)) == [(2).to_bytes(16, "big")]  # no new wait
    end(buffer, clock, 3)
    assert offer(buffer, in_flight(5)) == []  # room for it: the stall is over

    # Full again: the next refusal waits the whole limit anew.
    assert offer(buffer, in_flight(6)) is None
    later(buffer, clock, MAX_REFUSAL_NS - 1)
    assert offer(buffer, in_flight(6)) is None
    assert metrics.evicted == {"max_traces": 2}


def test_a_request_that_fits_in_between_restarts_the_count() -> None:
    buffer, clock, _ = full()
    assert offer(buffer, in_flight(3)) is None
    later(buffer, clock, MAX_REFUSAL_NS - 2 * SECOND)
    end(buffer, clock, 1)
    assert offer(buffer, in_flight(3)) == []  # room for it: the count restarts

    assert offer(buffer, in_flight(4)) is None
    later(buffer, clock, MAX_REFUSAL_NS - 1)
    assert offer(buffer, in_flight(4)) is None
    later(buffer, clock, 1)
    assert offer(buffer, in_flight(4)) == [(2).to_bytes(16, "big")]


def test_room_made_by_runs_ending_ends_the_stall_without_an_eviction() -> None:
    buffer, clock, metrics = full()
    assert offer(buffer, in_flight(3)) is None
    later(buffer, clock, MAX_REFUSAL_NS - 2 * SECOND)
    end(buffer, clock, 1)  # at the limit, run 1 has ended and been judged

    assert offer(buffer, in_flight(3)) == []
    assert metrics.evicted == {}


def test_with_no_limit_a_full_buffer_refuses_until_its_runs_age_out() -> None:
    buffer, clock, metrics = full(dataclasses.replace(LIMITS, max_refusal_ns=0))
    assert offer(buffer, in_flight(3)) is None
    later(buffer, clock, 300 * SECOND - 1)

    assert offer(buffer, in_flight(3)) is None
    assert metrics.evicted == {}


def test_a_request_that_can_never_fit_neither_restarts_the_count_nor_evicts_before_it() -> None:
    limits = dataclasses.replace(LIMITS, max_buffered_spans=3)
    buffer, clock, metrics = full(limits)
    too_many = in_flight(3) + in_flight(4) + in_flight(5) + in_flight(6)  # 4 spans, 4 traces

    assert offer(buffer, in_flight(3)) is None
    later(buffer, clock, MAX_REFUSAL_NS - 1)
    assert offer(buffer, too_many) == []  # let through: add drops what does not fit
    assert metrics.dropped == {"buffer_full": 4}
    assert metrics.evicted == {}
    later(buffer, clock, 1)
    assert offer(buffer, in_flight(3)) == [(1).to_bytes(16, "big")]


def test_evict_oldest_never_refuses() -> None:
    buffer, _, metrics = full(dataclasses.replace(LIMITS, overflow="evict_oldest"))
    assert offer(buffer, in_flight(3)) == [(1).to_bytes(16, "big")]
    assert metrics.evicted == {"max_traces": 1}


def test_a_buffer_whose_completion_checks_are_behind_keeps_refusing() -> None:
    """Full because nothing judges its runs (the ticker stuck, the CPU short), not because
    runs are in flight: refusing is what helps, and eviction would hide it."""
    buffer, clock, metrics = full()
    assert offer(buffer, in_flight(3)) is None
    clock.now_ns += MAX_REFUSAL_NS  # no poll: the runs' checks fell due 2 s in, unmade

    assert offer(buffer, in_flight(3)) is None
    assert metrics.evicted == {}
    assert buffer.poll() == []  # made now: the runs in flight wait for their age
    assert offer(buffer, in_flight(3)) == [(1).to_bytes(16, "big")]


def test_runs_going_on_at_max_traces_do_not_restart_the_count() -> None:
    """Was: a request that only continued buffered runs fitted at ``max_traces`` and
    restarted the count, so a sidecar whose agents' runs went on refused every batch with a
    new run's first spans until those runs ended: past the SDKs' 10 s, lost uncounted.
    Now: only a request that fits with room for a new trace restarts it."""
    buffer, clock, _ = full()
    assert offer(buffer, in_flight(3)) is None
    later(buffer, clock, MAX_REFUSAL_NS - 1)
    going_on = [tool(3, 1, "issue_refund", 1, 2, trace_id=(2).to_bytes(16, "big"), size_bytes=10)]
    assert offer(buffer, going_on) == []

    later(buffer, clock, 1)
    assert offer(buffer, in_flight(3)) == [(1).to_bytes(16, "big")]


def test_a_span_too_large_for_the_buffer_is_not_counted_in_what_a_refusal_needed() -> None:
    """A refused request's span bigger than the whole buffer takes no room (dropped,
    ``span_too_large``): counted in what the refused requests needed, no room would ever be
    enough, and the count would never end."""
    limits = dataclasses.replace(LIMITS, max_buffered_bytes=100)
    buffer, clock, metrics = full(limits)
    huge = dataclasses.replace(in_flight(3)[0], span_id=(9).to_bytes(8, "big"), size_bytes=101)
    assert offer(buffer, [*in_flight(3), huge]) is None  # needs one trace, 10 bytes
    end(buffer, clock, 1)  # room for it: the count ends

    assert offer(buffer, in_flight(4)) == []
    later(buffer, clock, MAX_REFUSAL_NS)
    assert offer(buffer, in_flight(5)) is None  # a new count: refused, not evicting
    assert metrics.evicted == {}
