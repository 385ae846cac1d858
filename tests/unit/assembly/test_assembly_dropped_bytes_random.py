"""Byte and span accounting under random requests (review-wait5, what held): drops of every
kind (too large, over the cap, ``buffer_full``, duplicates, late), what traces keep of them
(``_Trace.came``, ``assembly.limited``), rejections, evictions and polls, with random parents
(cycles and self-parents too). The buffer stays within every bound, every span passed to it
is buffered, built or dropped (the conservation law), and a drain leaves nothing: what a
trace keeps of its drops leaves with it (its bytes were the buffer's). ``LimitedTraces``
stays within its bounds, and taking every trace id frees its whole span count."""

from __future__ import annotations

import random

from assembly_support import SECOND, RecordingMetrics, span
from stall_support import tid

from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.assembly.dropped import DROPPED_IDS, dropped_span
from toolwatch.assembly.limited import LimitedTraces
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.model import ManualClock, SpanRecord, SpanRole

_ROLES = [SpanRole.OTHER, SpanRole.AGENT, SpanRole.TOOL, SpanRole.LLM]


def _limits(rng: random.Random) -> AssemblyLimits:
    return AssemblyLimits(
        completion_wait_ns=2 * SECOND,
        max_trace_age_ns=30 * SECOND,
        max_buffered_bytes=rng.choice([600, 1500, 5000]),
        max_spans_per_trace=rng.choice([2, 3, 5, 100]),
        max_traces=rng.choice([2, 3, 50]),
        max_buffered_spans=rng.choice([5, 10, 100]),
        overflow=rng.choice(["backpressure", "evict_oldest"]),
        local_parent_wait_ns=rng.choice([0, 3 * SECOND]),
    )


def _span(rng: random.Random) -> SpanRecord:
    return span(
        rng.randint(1, 12),
        rng.choice([None, rng.randint(1, 12), 100]),
        rng.choice(_ROLES),
        0,
        rng.randint(1, 100),
        trace_id=tid(rng.randint(1, 4)),
        size_bytes=rng.choice([10, 50, 300, 2000, 6000]),
        parent_local=rng.random() < 0.6,
    )


def _within_bounds(buffer: TraceBuffer, limits: AssemblyLimits) -> None:
    assert 0 <= buffer.buffered_bytes <= limits.max_buffered_bytes
    assert 0 <= buffer.buffered_spans <= limits.max_buffered_spans
    assert 0 <= buffer.buffered_traces <= limits.max_traces


def test_the_buffer_accounts_for_every_span_and_byte_under_random_requests() -> None:
    for seed in range(300):
        rng = random.Random(seed)
        limits = _limits(rng)
        clock = ManualClock()
        metrics = RecordingMetrics()
        buffer = TraceBuffer(limits, clock, metrics)
        passed = 0  # the spans passed to the buffer (not those of a request refused)
        for _ in range(40):
            op = rng.random()
            if op < 0.6:
                spans = [_span(rng) for _ in range(rng.randint(1, 5))]
                if op < 0.3:
                    buffer.add(spans)
                    passed += len(spans)
                elif buffer.admit(spans, sum(s.size_bytes for s in spans)) is not None:
                    passed += len(spans)
            elif op < 0.7:
                buffer.flag_rejected([tid(rng.randint(1, 4))])
            else:
                clock.now_ns += rng.randint(1, 40) * SECOND // 5
                buffer.poll()
            _within_bounds(buffer, limits)
            accounted = metrics.built + sum(metrics.dropped.values()) + buffer.buffered_spans
            assert accounted == passed, seed
        buffer.drain()
        assert (buffer.buffered_bytes, buffer.buffered_spans, buffer.buffered_traces) == (
            0,
            0,
            0,
        ), seed


def test_limited_traces_stay_within_their_bounds_under_random_flags() -> None:
    for seed in range(300):
        rng = random.Random(seed)
        most = rng.choice([1, 2, 3, 20])
        limited = LimitedTraces(most)
        ids = [bytes([n]) * 16 for n in range(1, 6)]
        for _ in range(60):
            trace_id = rng.choice(ids)
            op = rng.random()
            if op < 0.7:
                step = span(rng.randint(1, 20), 2, SpanRole.TOOL, 0, 1, trace_id=trace_id)
                limited.flag(trace_id, dropped_span(step))
            elif op < 0.8:
                limited.flag(trace_id, None)
            elif (taken := limited.take(trace_id)) is not None:
                kept = [k[0] for k in taken[1]]
                assert len(kept) == len(set(kept)) <= min(DROPPED_IDS, most), seed
            assert len(limited) <= most and 0 <= limited.spans <= most, seed
        for trace_id in ids:
            limited.take(trace_id)
        assert (len(limited), limited.spans) == (0, 0), seed
