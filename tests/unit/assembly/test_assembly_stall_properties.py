"""Properties of the full-buffer fallback under random traffic, both overflow modes
(Hypothesis): bounds hold, every span taken is built, dropped or still held, no agent run is
emitted twice, and an ``add`` never evicts a trace of its own request. Traffic mixes new runs,
continuations, run ends, runs left in the background (root first, steps naming a local parent),
duplicates, clock steps and late ticks.

``local_parent_wait_ns`` is set: unset, the background runs hang ``poll``
(test_poll_hangs_on_a_background_run.py). These held (no defect found here).
"""

from __future__ import annotations

from assembly_support import SECOND, RecordingMetrics, agent, span, tool
from hypothesis import given, settings
from hypothesis import strategies as st
from stall_support import tid

from toolwatch.assembly.buffer import CompletedTrace, TraceBuffer
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.model import ManualClock, SpanRecord, SpanRole

_OPS = st.lists(
    st.tuples(
        st.lists(st.tuples(st.integers(0, 5), st.integers(0, 30), st.booleans()), max_size=5),
        st.sampled_from([0, SECOND // 10, SECOND, 3 * SECOND, 20 * SECOND]),
        st.booleans(),
    ),
    max_size=60,
)


def _span(kind: int, run: int, n: int) -> SpanRecord:
    trace_id = tid(run + 1)
    if kind == 0:  # a step of a run in flight
        return tool(n, 1, "t", 0, 1, trace_id=trace_id, size_bytes=100)
    if kind == 1:  # the run's end: its agent span, the root
        return agent(1, None, "a", 0, 5, trace_id=trace_id, size_bytes=100)
    if kind == 2:  # a request's span that ended first (a run left in the background)
        return span(9, None, SpanRole.OTHER, 0, 3, trace_id=trace_id, size_bytes=100)
    if kind == 3:  # a background step that ended after that root
        return tool(n, 1, "t", 4, 6, trace_id=trace_id, size_bytes=100, parent_local=True)
    if kind == 4:  # a duplicate
        return tool(2, 1, "t", 0, 1, trace_id=trace_id, size_bytes=100)
    return tool(n, 1, "t", 0, 1, trace_id=trace_id, size_bytes=900)  # a large step


@settings(max_examples=300, deadline=None)
@given(ops=_OPS, evict=st.booleans())
def test_bounds_conservation_and_own_traces(
    ops: list[tuple[list[tuple[int, int, bool]], int, bool]], evict: bool
) -> None:
    limits = AssemblyLimits(
        completion_wait_ns=2 * SECOND,
        max_trace_age_ns=60 * SECOND,
        local_parent_wait_ns=3 * SECOND,
        max_traces=4,
        max_buffered_spans=10,
        max_buffered_bytes=2_000,
        max_spans_per_trace=4,
        late_span_window_ns=10_000 * SECOND,
        overflow="evict_oldest" if evict else "backpressure",
    )
    clock = ManualClock()
    metrics = RecordingMetrics()
    buffer = TraceBuffer(limits, clock, metrics)
    taken = 0
    emitted: list[bytes] = []
    serial = 10
    for request, step, tick in ops:
        spans = []
        for kind, run, _ in request:
            serial += 1
            spans.append(_span(kind, run, serial))
        out: list[CompletedTrace] = []
        if buffer.has_room(spans, sum(s.size_bytes for s in spans)):
            taken += len(spans)
            evicted = buffer.add(spans)
            assert not {t.trace_id for t in evicted} & {s.trace_id for s in spans}
            out.extend(evicted)
        clock.now_ns += step
        if tick:
            out.extend(buffer.poll())
        emitted.extend(t.trace_id for t in out if t.agent_run)
        assert buffer.buffered_traces <= limits.max_traces
        assert buffer.buffered_spans <= limits.max_buffered_spans
        assert buffer.buffered_bytes <= limits.max_buffered_bytes
        assert taken == metrics.built + sum(metrics.dropped.values()) + buffer.buffered_spans
    assert len(emitted) == len(set(emitted))
