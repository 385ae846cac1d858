"""Review of 597a7b0 (review-stall6), a cost: ``flag_rejected`` now begins with
``self._emitted.forget(now)``, and ``add`` calls it twice (the rejected traces the request
brings no span of, then those it brings), each time even with an empty list, after its own
``forget``: three ``forget`` calls for one request with a rejected span.

The ids' clock is the same, so the later two forget no bucket, but each ``forget`` also
shrinks one sparse table (``RememberedTraces._shrink_one``): one request now rehashes up to
three. ``assembly.remembered``'s docstring spreads that work on purpose ("each ``forget``
shrinks one of those queued, never more": 0.4 ms a shrink at 1,500,000 ids compiled, where
shrinking many at once took up to 76 ms). Minor: at most 2 shrinks more per request, the same
work in all; but a request's latency is what the spreading bounds.

Suggested fix: ``add`` flags through a helper without the ``forget`` (its own ``forget`` ran
at the same ``now``); the public ``flag_rejected`` forgets, then calls the helper. Skip the
call when its list is empty.
"""

from __future__ import annotations

from assembly_support import SECOND, RecordingMetrics, agent
from stall_support import tid

from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.model import ManualClock

_WINDOW = 256 * SECOND  # buckets of 1 s
_RUNS = 4000  # ~16 ids a table: each grows past the smallest size, sparse once forgotten


def _shrinks(rejected: list[bytes]) -> int:
    """Remember ``_RUNS`` emitted runs, let their window pass and a ``poll`` forget them (every
    table is left sparse, queued to be shrunk); then one ``add`` of a new run's root with
    ``rejected``: how many tables it shrank."""
    limits = AssemblyLimits(
        completion_wait_ns=2 * SECOND, max_trace_age_ns=300 * SECOND, late_span_window_ns=_WINDOW
    )
    buffer = TraceBuffer(limits, clock := ManualClock(), RecordingMetrics())
    buffer.add([agent(1, None, "bot", 0, 5, trace_id=tid(n)) for n in range(1, _RUNS + 1)])
    clock.now_ns += 3 * SECOND
    assert len(buffer.poll()) == _RUNS
    clock.now_ns += _WINDOW + 2 * SECOND
    buffer.poll()
    assert buffer.remembered_traces == 0

    def large() -> int:
        return sum(len(t.slots) > 8 for t in buffer._emitted._tables)

    before = large()
    buffer.add([agent(1, None, "bot", 0, 5, trace_id=tid(_RUNS + 1))], rejected=rejected)
    return before - large()


def test_control_an_add_shrinks_one_table() -> None:
    """Held: an ``add`` with no rejected span shrinks one table."""
    assert _shrinks([]) == 1


def test_an_add_with_rejected_spans_shrinks_one_table() -> None:
    """Scenario: the ``add`` carries a rejected span of its own run and one of another.
    Expected: one table shrunk, as without. Was (597a7b0): three (``add``'s ``forget`` and
    one in each ``flag_rejected``)."""
    assert _shrinks([tid(_RUNS + 1), tid(_RUNS + 2)]) == 1
