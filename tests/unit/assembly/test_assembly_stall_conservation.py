"""conservation and bounds under the fallback, random traffic.

Every span offered and taken is built, dropped by a reason, or still buffered; the buffer
never holds more than its bounds; a trace is emitted once; ``late`` counts exactly the spans of
evicted (or judged) runs that came after. Refused requests are not taken and not counted by
the buffer. Random mixes of new runs, continuations, run ends, requests that can never fit,
duplicates, skipped ticks (checks overdue) and clock steps.
"""

from __future__ import annotations

import random

import pytest
from assembly_support import SECOND, agent, tool
from stall_support import make, tid

from toolwatch.assembly.completed import CompletedTrace
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.model import SpanRecord

LIMITS = AssemblyLimits(
    completion_wait_ns=2 * SECOND,
    max_trace_age_ns=60 * SECOND,
    max_traces=8,
    max_buffered_spans=24,
    max_buffered_bytes=24 * 100,
    max_spans_per_trace=10,
    late_span_window_ns=100_000 * SECOND,  # ids not forgotten within the test
)


@pytest.mark.parametrize("seed", range(40))
def test_every_span_is_counted_once_and_bounds_hold(seed: int) -> None:
    rng = random.Random(seed)
    buffer, clock, metrics = make(LIMITS)
    taken = 0
    emitted: list[bytes] = []
    next_span = [10] * 200
    next_run = 1

    def span_of(run: int, end: bool = False) -> SpanRecord:
        size = rng.choice([50, 100, 150])
        if end:
            return agent(1, None, "a", 0, 5, trace_id=tid(run), size_bytes=size)
        next_span[run] += 1
        n = next_span[run] if rng.random() > 0.05 else 11  # sometimes a duplicate
        return tool(n, 1, "t", 0, 1, trace_id=tid(run), size_bytes=size)

    for _ in range(400):
        spans: list[SpanRecord] = []
        for _ in range(rng.randint(1, 4)):
            kind = rng.random()
            if kind < 0.4 and next_run < 199:
                spans.append(span_of(next_run))
                next_run += 1
            elif kind < 0.55:
                spans.append(span_of(rng.randint(1, max(1, next_run - 1)), end=True))
            else:
                spans.append(span_of(rng.randint(1, max(1, next_run - 1))))
        if rng.random() < 0.03 and next_run < 185:  # can never fit: more traces than max
            spans = [span_of(next_run + i) for i in range(10)]
            next_run += 10
        out: list[CompletedTrace] = []
        evicted = buffer.admit(spans, sum(s.size_bytes for s in spans))
        if evicted is not None:
            taken += len(spans)
            out.extend(evicted)
        clock.now_ns += rng.choice([0, SECOND // 10, SECOND // 2, SECOND, 3 * SECOND])
        if rng.random() < 0.8:  # sometimes the ticker is late
            out.extend(buffer.poll())
        emitted.extend(t.trace_id for t in out)

        assert buffer.buffered_traces <= LIMITS.max_traces
        assert buffer.buffered_spans <= LIMITS.max_buffered_spans
        assert buffer.buffered_bytes <= LIMITS.max_buffered_bytes
        assert taken == metrics.built + sum(metrics.dropped.values()) + buffer.buffered_spans
    assert len(emitted) == len(set(emitted))
