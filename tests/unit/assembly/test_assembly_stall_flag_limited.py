"""Review of 4bd55ec (review-stall4): ``HeldTraces._flag_limited`` reschedules a trace at a
deadline already passed.

``_flag_limited`` now calls ``_Trace.changed()`` and ``_schedule(trace)`` for every dropped or
rejected span. ``changed()`` clears ``anchor_missing``, so ``due_ns`` is ``last_ns +
completion_wait_ns``, where ``last_ns`` is the last span *stored*: a span dropped (over the
cap, ``span_too_large``, ``buffer_full``) or rejected does not move it. For a trace quiet for
longer than the completion wait (a capped run going on: every further step is dropped;
a run waiting for its anchor up to ``max_trace_age``), the heap gets an entry in the past,
and until the next ``poll``:

* ``overdue_ns`` (``toolwatch_assembly_overdue_seconds``, read at scrape time from another
  thread) reads the trace's quiet time, e.g. 101 s, where its docstring promises "between
  polls this stays under the ticker's period: it grows only while nothing polls"
  (ToolwatchNoToolTraces reads it as "assembly stuck" above 60 s);
* ``Refusals.stalled`` reads the checks as behind (``STALL_BEHIND_NS``): a stalled buffer
  under ``backpressure`` refuses the next request instead of taking it by evicting.

And each such ``add`` costs a full ``anchored()`` walk at the next ``poll`` (O(spans) of a
trace at its cap: an add of one dropped step and a poll took 0.11 ms compiled and 0.21-0.25 ms
pure at 5,000 spans, 0.011 ms pure at 3a1bfda; once per tick per capped run in flight) that
cannot change its answer: for a trace without a root, ``anchored`` does
not read ``span_limited``; for one whose ``span_limited`` was already set, nothing changed.

Suggested fix: in ``_flag_limited``, call ``changed()`` and reschedule only when the verdict
can change (the span dropped is a root, or ``span_limited`` turns true on a trace whose root
came), and schedule no earlier than the clock now (``max(due, now)``), so the heap's head is
never in the past between polls.
"""

from __future__ import annotations

import dataclasses

from assembly_support import SECOND, RecordingMetrics, tool
from stall_support import tid

from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.model import ManualClock, SpanRecord

_LIMITS = AssemblyLimits(
    completion_wait_ns=2 * SECOND, max_trace_age_ns=300 * SECOND, max_spans_per_trace=3
)
_RUN = tid(1)


def _step(n: int, trace_id: bytes = _RUN) -> SpanRecord:
    """A step of a run in flight, under its agent span 2 (a local parent, still running)."""
    return tool(n, 2, "lookup_order", 0, 1, trace_id=trace_id, size_bytes=10, parent_local=True)


def _capped_run_quiet_100s(limits: AssemblyLimits = _LIMITS) -> tuple[TraceBuffer, ManualClock]:
    """A run at its cap of 3 spans, found unanchored at its quiet period's end, then 100 s on
    (polled all along: nothing is due before ``max_trace_age``)."""
    clock = ManualClock()
    buffer = TraceBuffer(limits, clock, RecordingMetrics())
    buffer.add([_step(10), _step(11), _step(12)])
    clock.now_ns += 3 * SECOND
    assert buffer.poll() == []
    clock.now_ns += 100 * SECOND
    assert buffer.poll() == []
    assert buffer.overdue_ns() == 0
    return buffer, clock


def test_a_step_dropped_over_the_cap_leaves_no_check_overdue() -> None:
    """Scenario: the capped run sends one more step (dropped ``trace_span_limit``).
    Was (4bd55ec): ``overdue_ns`` reads 101 s until the next poll, which finds nothing to do.
    Expected: 0, as before the span came: no check is behind."""
    buffer, _clock = _capped_run_quiet_100s()
    buffer.add([_step(13)])
    assert buffer.overdue_ns() == 0, f"overdue {buffer.overdue_ns() / SECOND:.0f} s after an add"


def test_a_rejected_span_leaves_no_check_overdue() -> None:
    """Scenario: a span of the run is rejected at ingest (``flag_rejected``), twice.
    Was (4bd55ec): ``overdue_ns`` reads 101 s after each. Expected: 0."""
    buffer, _clock = _capped_run_quiet_100s()
    buffer.flag_rejected([_RUN])
    assert buffer.poll() == []  # nothing comes of it: the run has no root
    buffer.flag_rejected([_RUN])
    assert buffer.overdue_ns() == 0, f"overdue {buffer.overdue_ns() / SECOND:.0f} s"


def test_a_dropped_span_does_not_keep_a_stalled_buffer_refusing() -> None:
    """Scenario: ``backpressure``, room for 2 traces: the capped run and another run in flight
    fill it; a third run is refused for ``max_refusal`` (polled on time all along), so the
    buffer is stalled. A request with one more step of the capped run (dropped, it takes no
    room: let through) comes just before the third run's retry, in the same tick.
    Expected: the retry is taken by evicting, as it is without the dropped step.
    Was (4bd55ec): refused: the dropped step put the capped run's check 101 s in the past, and
    ``stalled`` reads the checks as behind until the next poll."""
    limits = dataclasses.replace(_LIMITS, max_traces=2)
    buffer, clock = _capped_run_quiet_100s(limits)
    buffer.add([_step(20, tid(2))])
    third = [_step(30, tid(3))]
    assert not buffer.has_room(third, 10)
    for _ in range(8):  # past the default limit (7 s)
        clock.now_ns += SECOND
        buffer.poll()
    assert buffer.overdue_ns() == 0
    assert buffer.admit([_step(13)], 10) is not None  # takes no room
    assert buffer.has_room(third, 10), "refused: the stall waits for the next poll"
