"""The body of test_fallback_properties_extended.py, run in a subprocess (a ``poll`` that never
returns cannot be interrupted in compiled code): Hypothesis over traffic with the paths 3a1bfda
added, both overflow modes, with and without ``local_parent_wait``.

Traffic: runs in flight, their ends (agent root), runs left in the background (request span
first, steps naming a local parent after it), the end of a capped run as a chain (agent,
workflow, root: they enclose what the trace holds), roots too large for the buffer (dropped,
anchoring all the same), duplicates, stragglers of judged runs (``late``), spans rejected at
ingest (``flag_rejected``), clock steps, late ticks.
"""

from __future__ import annotations

import os

from assembly_support import SECOND, RecordingMetrics, agent, span, tool
from hypothesis import example, given, settings
from hypothesis import strategies as st
from stall_support import tid

from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.assembly.completed import CompletedTrace
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.model import ManualClock, SpanRecord, SpanRole

KINDS = 9
#: How many examples each property tries (``RS3_EXAMPLES``; random, not derandomized, if set).
EXAMPLES = int(os.environ.get("RS3_EXAMPLES", "1000"))
_FIXED = "RS3_EXAMPLES" not in os.environ


def _ops(runs: int) -> st.SearchStrategy[list[tuple[list[tuple[int, int]], int, bool, list[int]]]]:
    """Requests of up to 5 spans of ``runs`` runs, then a clock step, maybe a tick."""
    return st.lists(
        st.tuples(
            st.lists(st.tuples(st.integers(0, KINDS - 1), st.integers(0, runs - 1)), max_size=5),
            st.sampled_from([0, SECOND // 10, SECOND, 3 * SECOND, 7 * SECOND, 40 * SECOND]),
            st.booleans(),  # a tick after the step
            st.lists(st.integers(0, runs - 1), max_size=2),  # runs a span of which was rejected
        ),
        max_size=50,
    )


def _span(kind: int, run: int, n: int) -> SpanRecord:
    t = tid(run + 1)
    if kind == 0:  # a step of a run in flight, under its agent span 2
        return tool(n, 2, "t", 0, 1, trace_id=t, size_bytes=100)
    if kind == 1:  # the run's agent span, under the workflow span 1
        return agent(2, 1, "a", 0, 5, trace_id=t, size_bytes=100)
    if kind == 2:  # the workflow span, under the request's span 9
        return span(1, 9, SpanRole.OTHER, 0, 6, trace_id=t, size_bytes=100)
    if kind == 3:  # the request's span, the root (ends last, or first: a background run)
        return span(9, None, SpanRole.OTHER, 0, 3, trace_id=t, size_bytes=100)
    if kind == 4:  # a background step that ended after that root, its parent local
        return tool(n, 2, "t", 4, 7, trace_id=t, size_bytes=100, parent_local=True)
    if kind == 5:  # a duplicate
        return tool(3, 2, "t", 0, 1, trace_id=t, size_bytes=100)
    if kind == 6:  # a root too large for the buffer: dropped, anchors its trace
        return span(9, None, SpanRole.OTHER, 0, 8, trace_id=t, size_bytes=5_000)
    if kind == 7:  # an agent run that is its own root
        return agent(2, None, "a", 0, 5, trace_id=t, size_bytes=100)
    return tool(n, 2, "t", 0, 1, trace_id=t, size_bytes=700)  # a large step


@settings(max_examples=EXAMPLES, deadline=None, derandomize=_FIXED, database=None)
@given(
    ops=_ops(8),
    evict=st.booleans(),
    local_wait=st.sampled_from([0, 3 * SECOND]),
    refusal=st.sampled_from([0, 5 * SECOND]),
)
def bounds_conservation_and_deadlines(
    ops: list[tuple[list[tuple[int, int]], int, bool, list[int]]],
    evict: bool,
    local_wait: int,
    refusal: int,
) -> None:
    limits = AssemblyLimits(
        completion_wait_ns=2 * SECOND,
        max_trace_age_ns=60 * SECOND,
        local_parent_wait_ns=local_wait,
        max_traces=4,
        max_buffered_spans=10,
        max_buffered_bytes=2_000,
        max_spans_per_trace=3,
        late_span_window_ns=10_000 * SECOND,
        overflow="evict_oldest" if evict else "backpressure",
        max_refusal_ns=refusal,
    )
    clock = ManualClock()
    metrics = RecordingMetrics()
    buffer = TraceBuffer(limits, clock, metrics)
    taken = 0
    emitted: list[bytes] = []
    serial = 10
    for request, step, tick, rejected in ops:
        spans = []
        for kind, run in request:
            serial += 1
            spans.append(_span(kind, run, serial))
        out: list[CompletedTrace] = []
        evicted = buffer.admit(spans, sum(s.size_bytes for s in spans))
        if evicted is not None:
            taken += len(spans)
            assert not {t.trace_id for t in evicted} & {s.trace_id for s in spans}
            out.extend(evicted)
            buffer.flag_rejected([tid(r + 1) for r in rejected])
        clock.now_ns += step
        if tick:
            out.extend(buffer.poll())
            due = buffer.next_due_ns()
            assert due is None or due > clock(), "poll left a due check"
        emitted.extend(t.trace_id for t in out if t.agent_run)
        assert buffer.buffered_traces <= limits.max_traces
        assert buffer.buffered_spans <= limits.max_buffered_spans
        assert buffer.buffered_bytes <= limits.max_buffered_bytes
        assert taken == metrics.built + sum(metrics.dropped.values()) + buffer.buffered_spans
    clock.now_ns += 1_000 * SECOND
    emitted.extend(t.trace_id for t in buffer.drain() if t.agent_run)
    assert buffer.buffered_traces == buffer.buffered_spans == 0
    assert taken == metrics.built + sum(metrics.dropped.values())
    assert len(emitted) == len(set(emitted))


@settings(max_examples=EXAMPLES, deadline=None, derandomize=_FIXED, database=None)
@given(ops=_ops(3), local_wait=st.sampled_from([0, 3 * SECOND]))
# What Hypothesis found (RS3_EXAMPLES=6000, random): run 1 at its cap, its agent span and the
# workflow span above it in one request, one span of room short (the chain defect).
@example(
    ops=[
        ([(0, 0), (0, 1), (0, 1), (0, 1)], 0, False, []),
        ([(0, 0), (1, 1), (2, 1)], 0, False, []),
    ],
    local_wait=0,
)
def what_has_room_decides_add_does(
    ops: list[tuple[list[tuple[int, int]], int, bool, list[int]]], local_wait: int
) -> None:
    """Under ``backpressure`` never stalled (``max_refusal_ns`` 0), a request ``has_room``
    lets through that could fit (no more spans, bytes or traces than the whole buffer) loses
    no span ``buffer_full``."""
    limits = AssemblyLimits(
        completion_wait_ns=2 * SECOND,
        max_trace_age_ns=60 * SECOND,
        local_parent_wait_ns=local_wait,
        max_traces=4,
        max_buffered_spans=6,
        max_buffered_bytes=2_000,
        max_spans_per_trace=3,
        late_span_window_ns=10_000 * SECOND,
        max_refusal_ns=0,
    )
    clock = ManualClock()
    buffer = TraceBuffer(limits, clock, RecordingMetrics())
    serial = 10
    for request, step, tick, rejected in ops:
        spans = []
        for kind, run in request:
            serial += 1
            spans.append(_span(kind, run, serial))
        refused: dict[str, int] = {}
        if buffer.admit(spans, sum(s.size_bytes for s in spans), refused) is not None:
            buffer.flag_rejected([tid(r + 1) for r in rejected])
            fitting = [s for s in spans if s.size_bytes <= 2_000]  # not dropped too large
            could_fit = (
                len({s.trace_id for s in fitting}) <= limits.max_traces
                and sum(s.size_bytes for s in fitting) <= limits.max_buffered_bytes
            )
            if could_fit:
                assert "buffer_full" not in refused, [
                    (s.trace_id[-1], s.span_id[-1]) for s in spans
                ]
        clock.now_ns += step
        if tick:
            buffer.poll()
