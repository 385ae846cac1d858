"""Random runs of a small buffer (caps, drops, rejections, roots, background steps, both
overflow policies), polled as a ticker would, checking after every step: no check overdue right
after an add or a ``flag_rejected``; every held trace has a live heap entry no later than its
due time (or now); none held past ``max_trace_age`` (+5 s); none anchored and quiet for
``completion_wait`` left held after a poll, nor any rooted with a span rejected
(``parent_lost``) and quiet for ``completion_wait + lost_parent_wait``. Prints ``bad N`` (N
violations); run by ``test_review_stall5_held.py`` in a subprocess with a timeout (a
``poll`` that spins hangs).

Usage: python stall5_probe.py FIRST_SEED LAST_SEED
"""

from __future__ import annotations

import random
import sys

from assembly_support import SECOND, RecordingMetrics, agent, span, tool

from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.model import ManualClock, SpanRecord, SpanRole


def _tid(n: int) -> bytes:
    return n.to_bytes(16, "big")


def _limits(rng: random.Random) -> AssemblyLimits:
    return AssemblyLimits(
        completion_wait_ns=2 * SECOND,
        max_trace_age_ns=60 * SECOND,
        max_spans_per_trace=rng.choice([2, 3, 5]),
        max_traces=rng.choice([2, 3, 10]),
        max_buffered_bytes=rng.choice([100, 1000]),
        local_parent_wait_ns=rng.choice([0, 10 * SECOND]),
        lost_parent_wait_ns=rng.choice([3 * SECOND, 5 * SECOND]),
        overflow=rng.choice(["evict_oldest", "backpressure"]),
        late_span_window_ns=rng.choice([0, 30 * SECOND]),
    )


def _span(rng: random.Random, n: int, trace_id: bytes) -> SpanRecord:
    kind, size = rng.random(), rng.choice([10, 10, 10, 200, 2000])
    if kind < 0.15:
        end = rng.randint(1, 9)
        return span(n, None, SpanRole.OTHER, 0, end, trace_id=trace_id, size_bytes=size)
    if kind < 0.3:
        n = rng.choice([2, n])
        return agent(n, 9, "bot", 1, 60, trace_id=trace_id, size_bytes=size, parent_local=True)
    local, end = rng.random() < 0.7, rng.randint(2, 12)
    parent = rng.choice([2, n - 1])
    return tool(n, parent, "x", 4, end, trace_id=trace_id, size_bytes=size, parent_local=local)


def _violations(seed: int) -> list[str]:
    rng = random.Random(seed)
    lim = _limits(rng)
    clock = ManualClock()
    buffer = TraceBuffer(lim, clock, RecordingMetrics())
    n = 100
    for step in range(200):
        clock.now_ns += rng.choice([0, SECOND // 10, SECOND // 2, SECOND, 3 * SECOND])
        buffer.poll()
        for trace in buffer._traces.values():
            quiet = clock.now_ns - trace.last_ns
            if quiet >= lim.completion_wait_ns and trace.anchored():
                return [f"seed {seed} step {step}: anchored, quiet {quiet / SECOND} s, held"]
            lost_wait = lim.completion_wait_ns + lim.lost_parent_wait_ns
            if trace.root_seen and trace.parent_lost and quiet >= lost_wait:
                return [f"seed {seed} step {step}: rejected, quiet {quiet / SECOND} s, held"]
        trace_id = _tid(rng.randint(1, 4))
        if rng.random() < 0.15:
            buffer.flag_rejected([trace_id])
        else:
            spans = []
            for _ in range(rng.randint(1, 3)):
                n += 1
                spans.append(_span(rng, n, trace_id))
            buffer.admit(spans, sum(s.size_bytes for s in spans))
        if buffer.overdue_ns() != 0:
            return [f"seed {seed} step {step}: overdue {buffer.overdue_ns()} ns after an op"]
        for trace in buffer._traces.values():
            if trace.scheduled_ns is None or trace.scheduled_ns > max(
                trace.due_ns(lim), clock.now_ns
            ):
                return [f"seed {seed} step {step}: scheduled {trace.scheduled_ns}, late"]
            if clock.now_ns - trace.first_ns > lim.max_trace_age_ns + 5 * SECOND:
                return [f"seed {seed} step {step}: held past max_trace_age"]
    return []


def main(first: int, last: int) -> None:
    """Print the violations of seeds ``first`` to ``last`` (excluded), then ``bad N``."""
    found = [v for seed in range(first, last) for v in _violations(seed)]
    print("\n".join(found))
    print(f"bad {len(found)}")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
