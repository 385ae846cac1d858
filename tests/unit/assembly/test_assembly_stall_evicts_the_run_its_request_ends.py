"""Was (found by review, fixed): once stalled, the request that carries the end of the oldest
run evicts that very run.

The commit's own premise: a full buffer of runs in flight makes no room by refusing because
"their last spans come in the very batches it refuses, with other runs' first ones". When the
stall finally takes such a batch, ``add`` stores its spans in order and, for the new run's
first span, evicts the *oldest* run (``_oldest_other``), which is the run the same batch ends:

* root first in the batch: the run is emitted ``evicted`` (judged incomplete, policy only, no
  golden case, no shadow comparison) although every one of its spans arrived;
* root after the new run's span: the run is evicted first and its root, in the same request,
  is dropped ``late`` (and the sender told "their trace was already evaluated").

A run whose anchor has arrived is over; at most ``completion_wait`` of stragglers is lost by
judging it now. Evicting a run still in flight instead (or judging the anchored run now, with
its normal verdict) loses nothing the batch brought.
"""

from __future__ import annotations

from assembly_support import SECOND, RecordingMetrics
from stall_support import end_of, in_flight, make, offer, tick, tid, verdicts

from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.assembly.completed import CompletedTrace
from toolwatch.assembly.limits import MAX_REFUSAL_NS
from toolwatch.model import ManualClock

Stalled = tuple[TraceBuffer, ManualClock, RecordingMetrics, list[CompletedTrace]]


def _stalled() -> Stalled:
    buffer, clock, metrics = make()
    out: list[CompletedTrace] = []
    assert offer(buffer, in_flight(1), out)
    assert offer(buffer, in_flight(2), out)
    assert not offer(buffer, end_of(1) + in_flight(3), out)  # refused: needs a third trace
    tick(buffer, clock, MAX_REFUSAL_NS / SECOND, out)
    assert out == []
    return buffer, clock, metrics, out


def test_a_batch_ending_the_oldest_run_does_not_judge_that_run_evicted() -> None:
    """Root of run 1 first, then run 3's first span: run 1 is complete in the buffer when run
    3's span needs a slot. Was: run 1 was the victim, judged ``evicted`` with all its spans;
    run 2, still in flight, stays."""
    buffer, clock, _metrics, out = _stalled()
    assert offer(buffer, end_of(1) + in_flight(3), out)
    tick(buffer, clock, 2, out)

    assert verdicts(out).get(tid(1)) is None  # run 1 ended in this batch: judged complete
    assert tid(1) in verdicts(out)


def test_a_batch_ending_the_oldest_run_does_not_drop_that_runs_root_late() -> None:
    """Run 3's span first, then run 1's root: run 1 is evicted for run 3, then its own root,
    which the same request carried, is dropped ``late``."""
    buffer, clock, metrics, out = _stalled()
    assert offer(buffer, in_flight(3) + end_of(1), out)
    tick(buffer, clock, 2, out)

    assert metrics.dropped.get("late", 0) == 0
    assert verdicts(out).get(tid(1), "absent") is None
