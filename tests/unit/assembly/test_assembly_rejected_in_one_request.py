"""Found by review (review-stall5, of 7097a45): flagged before ``add``, the rejected traces a
request starts go through ``_limited``, which keeps ``max_traces`` ids and forgets the oldest.

``flag_rejected`` before ``add`` remembers every rejected trace id not buffered yet in
``HeldTraces._limited`` (``_store`` flags the trace when its first span comes). Before
7097a45 a trace the request started was buffered by then and flagged directly; now, in a
request with more rejected trace ids than ``max_traces``, the first ones are pushed out of
``_limited`` by the later ones before ``add`` stores their spans, and those runs are judged
whole without the span ingest rejected.

When: rare with the default ``max_traces`` (10,000 such ids in one request); a small
``max_traces`` (a sidecar's) and a request whose rejected spans span many traces, e.g. a
sender whose ids are all malformed in one way but the trace id.

Suggested fix: in ``flag_rejected``, remember only ids the request does not start (pass the
batch's trace ids), or flag after the ``add`` the traces it stored and before it those it
did not; or let ``_limited`` keep ``max_traces`` plus one request's ids.
"""

from __future__ import annotations

from assembly_support import SECOND, RecordingMetrics, agent
from stall_support import tid

from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.model import ManualClock


def test_every_run_a_request_starts_with_a_rejected_span_is_flagged() -> None:
    """Scenario: room for 2 traces; one request brings runs 1 and 2 (their roots) and the
    rejected spans of runs 1, 2 and 3 (run 3 is not in the request), in the engine's order.
    Expected: runs 1 and 2 judged ``span_limit``. Was (7097a45): run 1 ``complete`` (its id
    pushed out of ``_limited`` by run 3's before its span was stored)."""
    limits = AssemblyLimits(
        completion_wait_ns=2 * SECOND,
        max_trace_age_ns=300 * SECOND,
        max_traces=2,
        overflow="evict_oldest",
    )
    clock = ManualClock()
    buffer = TraceBuffer(limits, clock, RecordingMetrics())
    spans = [agent(1, None, "refund-bot", 0, 5, trace_id=tid(n)) for n in (1, 2)]
    assert buffer.add(spans, rejected=[tid(1), tid(2), tid(3)]) == []  # as Engine.admit does
    clock.now_ns += 8 * SECOND  # Was: 3 s. Now: a rejected span's trace waits 7 s
    judged = {t.trace_id: t.incomplete_reason for t in buffer.poll()}
    assert judged == {tid(1): "span_limit", tid(2): "span_limit"}
