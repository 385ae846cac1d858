"""Found by review (review-stall6, of 597a7b0): ``add`` flags the rejected traces the request
brings no span of *before* taking its spans, and those not held go to ``HeldTraces._limited``
(at most ``max_traces`` ids, the oldest forgotten). An id already there for a trace the request
does bring (a span of it rejected or dropped in an earlier request, before its first span came)
is pushed out by them before ``_store`` reads it, and the run is judged whole without the span
ingest rejected.

Before 7097a45 (flag after the add) ``_store`` consumed the entry first; 7097a45 flagged every
id first (the same loss, and review-stall5's for the request's own ids); 597a7b0 fixed the
request's own rejected ids but not an entry left by an earlier request.

When: a request that starts runs flagged earlier and carries rejected spans of at least
``max_traces`` other traces not held (a small ``max_traces``, a sender whose ids are malformed
but the trace id).

Suggested fix: flag before ``_take`` only the not-brought traces that are held (an eviction
judges only those; ``_flag_limited`` of an id not held only remembers it in ``_limited``), and
the rest, not-brought ids not held included, after ``_take``: then ``_store`` has consumed the
brought traces' entries before any push.
"""

from __future__ import annotations

from assembly_support import SECOND, RecordingMetrics, agent
from stall_support import tid

from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.model import ManualClock

_LIMITS = AssemblyLimits(
    completion_wait_ns=2 * SECOND,
    max_trace_age_ns=300 * SECOND,
    max_traces=2,
    overflow="evict_oldest",
)


def _judged(rejected_later: list[bytes]) -> dict[bytes, str | None]:
    """Request 1: only a rejected span of run 1 (no valid span: ``flag_rejected``, as
    ``Engine.admit`` does). Request 2: run 1's root, and rejected spans of ``rejected_later``
    (traces not in it, not held). The traces judged after the wait."""
    buffer = TraceBuffer(_LIMITS, clock := ManualClock(), RecordingMetrics())
    buffer.flag_rejected([tid(1)])
    root = agent(1, None, "refund-bot", 0, 5, trace_id=tid(1))
    assert buffer.add([root], rejected=rejected_later) == []
    clock.now_ns += 8 * SECOND  # Was: 3 s. Now: a rejected span's trace waits 7 s
    return {t.trace_id: t.incomplete_reason for t in buffer.poll()}


def test_control_one_other_rejected_trace_keeps_the_flag() -> None:
    """Held: with one other rejected trace (``_limited`` not over its cap) run 1 is
    ``span_limit``."""
    assert _judged([tid(2)]) == {tid(1): "span_limit"}


def test_a_run_flagged_earlier_stays_flagged_when_its_request_rejects_other_traces() -> None:
    """Scenario: as the control, with two other rejected traces (``max_traces`` 2).
    Expected: run 1 ``span_limit``, as in the control (and before 7097a45). Was (597a7b0):
    ``complete``: the ids of traces 2 and 3, flagged before run 1's root was taken, pushed
    run 1's out of ``_limited``."""
    assert _judged([tid(2), tid(3)]) == {tid(1): "span_limit"}
