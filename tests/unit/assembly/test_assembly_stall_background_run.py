"""Was (found by review, fixed): an eviction judges a run still running in the background
``complete``.

``_ended`` counts a trace as over when its root has come and no span that ended *after* the
root waits for a local parent (``root_seen and not awaits_after_root()``). That is also the
shape of a run a request handler left running in the background, whose first export held
only the root and steps that ended before the handler returned: the run's agent span, their
local parent, is still running. The completion check does not judge such a trace at once: it
waits ``lost_parent_wait`` (5 s) more, which docs/configuration.md says is there so that "a run
left running in the background after its request may [not] be judged at its first half". An
eviction cuts that wait to nothing, and judges the first half ``complete`` (not ``evicted``):
so against its golden case, its shadow source and the ``required``/``call_count`` minimum
invariants, which read the calls it had yet to make as never made (false pages), while the
rest of the run is dropped ``late``. Before 12ea40f it was judged ``evicted`` (policy only).

The first review's lost-parent run (tests/unit/assembly/
test_assembly_stall_evicts_runs_waiting_for_a_lost_parent.py) differs in one thing the buffer
can see: its agent span (the run's own, under the root) has come. Suggested fix: in
``_ended``, take the root-seen clause only when the trace holds an AGENT span (its run's agent
has ended), or prefer ``anchored()`` runs as victims and judge the lost-parent-waiting ones
``evicted``.
"""

from __future__ import annotations

from assembly_support import SECOND, TRACE, agent, span, tool
from stall_support import tid

from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.metrics import NoopMetrics
from toolwatch.model import ManualClock, SpanRecord, SpanRole

LIMITS = AssemblyLimits(completion_wait_ns=2 * SECOND, max_traces=1, overflow="evict_oldest")


def _first_export() -> list[SpanRecord]:
    """The handler's span (root, ended at 100 ms) and the background run's first step, which
    ended at 80 ms under the run's agent span 1 (still running, so not here)."""
    return [
        span(9, None, SpanRole.OTHER, 0, 100, name="POST /chat"),
        tool(3, 1, "lookup_order", 20, 80, parent_local=True),
    ]


def test_control_the_completion_check_does_not_judge_the_first_export_at_once() -> None:
    clock = ManualClock()
    buffer = TraceBuffer(LIMITS, clock, NoopMetrics())
    buffer.add(_first_export())
    clock.now_ns += 2 * SECOND
    assert buffer.poll() == []  # waits lost_parent_wait more for the parent


def test_an_eviction_does_not_judge_the_background_runs_first_export_complete() -> None:
    clock = ManualClock()
    buffer = TraceBuffer(LIMITS, clock, NoopMetrics())
    buffer.add(_first_export())
    clock.now_ns += SECOND

    evicted = buffer.add([tool(2, 1, "lookup_order", 0, 1, trace_id=tid(7))])  # another run

    assert [(t.trace_id, t.incomplete_reason) for t in evicted] == [(TRACE, "evicted")]
    # ... and the rest of the run, its refund and agent span, is dropped late either way:
    rest = [tool(4, 1, "issue_refund", 200, 300), agent(1, 9, "refund-bot", 10, 900)]
    assert buffer.add(rest) == []
