"""Review of 4bd55ec (review-stall4): a run left running in the background that reaches its
span cap is judged at the cap, 2 s after its last span taken, and its agent span (the run's
end, and its agent name) comes later and is dropped ``late``.

A background run's root (the request's span) ends first, so its trace waits for the agent
span its steps name as their local parent (``_Trace._awaits_local``). Once a step is dropped
over the cap, ``span_limited`` is set, and ``anchored`` takes the root as the anchor (``root_seen
and span_limited``: "a trace that lost a span to a limit ... may have lost that parent"). But
a span dropped ``trace_span_limit`` cannot be that parent: a span the trace's held spans name
as their parent encloses them, and is still taken (up to ``ENCLOSING_SPANS``), which is what
the buffer's docstring keeps them for ("dropped, the trace was never anchored ... its agent
name lost with its agent span"). 4bd55ec's ``_flag_limited`` makes it more often so (it
starts the checks again at every dropped span, where before a trace found unanchored kept
waiting); before, the common case (a step dropped right after the cap) was the same.

Suggested fix: let ``span_limited`` stand in for a lost parent only for drops that can lose
one (``span_too_large``, ``buffer_full``, a span rejected at ingest, a span past the
``ENCLOSING_SPANS``), not for a span dropped over the cap that encloses nothing held.
"""

from __future__ import annotations

from assembly_support import SECOND, RecordingMetrics, agent, span, tool
from stall_support import tid

from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.assembly.completed import CompletedTrace
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.model import ManualClock, SpanRecord, SpanRole

_RUN = tid(1)


def _step(n: int) -> SpanRecord:
    """A step of the background run: under its agent span 2 (local, still running), ended
    after the request's span."""
    return tool(n, 2, "lookup_order", 4, 7, trace_id=_RUN, size_bytes=10, parent_local=True)


def test_a_background_run_at_its_cap_waits_for_its_agent_span() -> None:
    """Scenario: the request's span (the root, ended at 3 ms), then the run's steps, 4 of
    them over a cap of 3 (one dropped), every second; then its agent span, the run's end.
    Expected: one trace, its agent span in it, flagged ``span_limit``; no span ``late``.
    Was: the trace is judged 2 s after the cap without the agent span, which is dropped
    ``late`` when it comes. Then (the fix): judged 2 s after the agent span came.
    Now (a run left running in the background, ``_Trace.ran_on``): 7 s after it came, once
    quiet ``completion_wait + lost_parent_wait``; not at 3 s."""
    limits = AssemblyLimits(
        completion_wait_ns=2 * SECOND, max_trace_age_ns=300 * SECOND, max_spans_per_trace=3
    )
    clock = ManualClock()
    metrics = RecordingMetrics()
    buffer = TraceBuffer(limits, clock, metrics)
    out: list[CompletedTrace] = []
    buffer.add([span(9, None, SpanRole.OTHER, 0, 3, trace_id=_RUN, size_bytes=10)])
    for n in (10, 11, 12, 13, 14, 15):
        clock.now_ns += SECOND
        buffer.add([_step(n)])
        out.extend(buffer.poll())
    clock.now_ns += 5 * SECOND
    out.extend(buffer.poll())
    buffer.add([agent(2, 9, "refund-bot", 1, 60, trace_id=_RUN, size_bytes=10)])
    clock.now_ns += 3 * SECOND
    assert buffer.poll() == []
    clock.now_ns += 4 * SECOND
    out.extend(buffer.poll())
    assert metrics.dropped["late"] == 0, f"{metrics.dropped['late']} span(s) late"
    assert [(t.incomplete_reason, len(t.spans)) for t in out] == [("span_limit", 4)]
