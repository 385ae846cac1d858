"""Review of 7097a45 (review-stall5), a design question the lead should settle: a span rejected
at ingest sets ``_Trace.parent_lost``, so a run left running in the background is anchored by
its root at its next quiet ``completion_wait``, cut in two, the rest ``late``.

7097a45 takes ``parent_lost`` from ``span_limited`` for the drops that may lose the parent
the trace waits for, and lists "rejected at ingest" among them: the decoder hands on only the
trace id of a rejected span (``DecodedBatch.rejected_traces``), so any span of the run may be
the one. But the run's agent span is one of its many: most rejections are of a step, and for
them ``parent_lost`` lets the root (the request's span, ended first) anchor the run while its
agent span is still to come. The run is judged at the first quiet ``completion_wait`` (2 s)
between two of its export batches (the OpenTelemetry SDKs' batch processors export every 5 s
by default: nearly always), and every span after is dropped ``late``: the calls the run made
after are never judged, where ``_Trace._awaits_local``'s docstring names exactly that as what
the rule prevents. Waiting instead loses nothing when a step was rejected, and only time
(``local_parent_wait``, else ``max_trace_age``, judged ``timed_out``) in the rarer case the
agent span was. Not new in 7097a45 (``span_limited`` did it before, and 4bd55ec made a
rejection restart the checks of a run already waiting): kept by it.

The same holds for a step dropped ``span_too_large`` or ``buffer_full`` (``parent_lost``
for any such drop), though there the span is known: it may be the parent waited for only if
a held span names it as its parent, as 7097a45 reasons for a step over the cap.

Suggested fix (if the lead agrees): for a dropped span, ``parent_lost`` only when a held span
names it as its parent (``span_id`` among the held spans' ``parent_span_id``: O(spans), once
per such drop; ``_Trace.encloses`` is the same question for a full trace). For a rejection,
whose span is unknown, let the root anchor the run only once it has been quiet
``completion_wait + lost_parent_wait`` (``_check``'s lost-parent branch, as for a parent lost
in export: a live run's batch processor exports within it), not at its next quiet
``completion_wait``; that keeps
``tests/unit/assembly/test_assembly_anchor_without_stored_span.py::
test_a_background_run_whose_span_was_rejected_is_judged_after_the_wait`` (flagged after 8 s
quiet) as it is. (Setting ``parent_lost=False`` for rejections outright fails that test: it
pins the present rule.) A prototype of both (/tmp/s53/rs5_prototype_parent_lost.diff, not
committed) passes these tests and all of tests/unit/assembly but two that pin the present
rule: ``test_assembly_buffer.py::test_a_root_anchors_a_trace_that_lost_a_span_whatever_its_
spans_await`` (a sync request's step ended before the root, one span rejected: judged at 2 s,
7 s with the prototype, as without the rejection) and ``test_assembly_stall_stale_verdict.py::
test_a_rooted_run_flagged_by_a_rejected_span_is_evicted_as_it_came`` (the rejected background
run is no longer taken as ended by an eviction).
"""

from __future__ import annotations

import pytest
from assembly_support import SECOND, RecordingMetrics, agent, span, tool
from stall_support import tid

from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.assembly.completed import CompletedTrace
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.model import ManualClock, SpanRecord, SpanRole

_RUN = tid(5)


#: The rule these tests would change, kept as it was before stop 53 (its closing note).
NOT_HANDLED = pytest.mark.xfail(
    strict=True,
    reason="not handled (design, as before this session): a step rejected or too large may have "
    "been a parent the run waits for, so its root anchors it: a background run is judged at "
    "its next quiet completion_wait and its later spans dropped late, rather than waiting "
    "lost_parent_wait_seconds more; see stop 53's closing note",
)


def _step(n: int) -> SpanRecord:
    """A step of the background run: under its agent span 2 (local, still running), ended
    after the request's span."""
    return tool(n, 2, "lookup_order", 4, 7, trace_id=_RUN, size_bytes=10, parent_local=True)


def _background_run(
    rejected: bool, too_large: bool = False
) -> tuple[list[tuple[str | None, int]], int]:
    """The request's span (the root, ended at 3 ms); the run's steps in export batches 5 s
    apart, the first batch with a step ingest rejected if ``rejected``, and one more step
    dropped ``span_too_large`` if ``too_large``; then its agent span. The traces judged
    (reason, spans) and the spans dropped ``late``."""
    limits = AssemblyLimits(
        completion_wait_ns=2 * SECOND, max_trace_age_ns=300 * SECOND, max_buffered_bytes=1000
    )
    clock = ManualClock()
    metrics = RecordingMetrics()
    buffer = TraceBuffer(limits, clock, metrics)
    out: list[CompletedTrace] = []
    buffer.add([span(9, None, SpanRole.OTHER, 0, 3, trace_id=_RUN, size_bytes=10)])
    last = agent(2, 9, "refund-bot", 1, 60, trace_id=_RUN, size_bytes=10)
    batches = [[_step(10)], [_step(11)], [_step(12)], [last]]
    for at, batch in enumerate(batches):
        if at == 0 and rejected:
            buffer.flag_rejected([_RUN])  # as Engine.admit does, before the add
        large = [tool(20, 2, "lookup_order", 4, 7, trace_id=_RUN, size_bytes=2000)]
        buffer.add([*batch, *large] if at == 0 and too_large else batch)
        for _ in range(25):  # the next batch 5 s on; the ticker polls on time meanwhile
            clock.now_ns += SECOND // 5
            out.extend(buffer.poll())
    return [(t.incomplete_reason, len(t.spans)) for t in out], metrics.dropped["late"]


def test_control_a_background_run_waits_for_its_agent_span() -> None:
    """No span rejected (held): one trace, whole, complete; none ``late``."""
    assert _background_run(rejected=False) == ([(None, 5)], 0)


@NOT_HANDLED
def test_a_background_run_with_a_rejected_step_waits_for_its_agent_span() -> None:
    """Scenario: as the control, a step of the first batch rejected at ingest.
    Expected: one trace, every span taken in it, flagged ``span_limit``; none ``late``.
    Was (7097a45, and before): judged 2 s after the first batch (2 spans), the other steps
    and the agent span dropped ``late``."""
    assert _background_run(rejected=True) == ([("span_limit", 5)], 0)


@NOT_HANDLED
def test_a_background_run_with_a_step_too_large_waits_for_its_agent_span() -> None:
    """Scenario: as the control, a step of the first batch dropped ``span_too_large`` (it
    encloses nothing held: no span names it as its parent, as the agent span it waits for).
    Expected: one trace, every span taken in it, flagged ``span_limit``; none ``late``.
    Was (7097a45, and before): cut 2 s after the first batch, as with a rejected step."""
    assert _background_run(rejected=False, too_large=True) == ([("span_limit", 5)], 0)
