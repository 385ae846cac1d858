"""What the reviews of the "wait" rule (test_assembly_wait_review*.py) share: a background
run's trace id, root and steps, its limits, and the batches-with-gaps drivers."""

from __future__ import annotations

import dataclasses

from assembly_support import SECOND, RecordingMetrics, llm, span, tool
from stall_support import tid

from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.model import ManualClock, SpanRecord, SpanRole

RUN = tid(5)
LIMITS = AssemblyLimits(
    completion_wait_ns=2 * SECOND, max_trace_age_ns=300 * SECOND, max_buffered_bytes=1000
)
#: ``LIMITS`` with room for two traces, a third evicting one (``evict_oldest``).
TWO_EVICTING = dataclasses.replace(LIMITS, max_traces=2, overflow="evict_oldest")
#: The request's span: the root (9), ended, come first.
ROOT = span(9, None, SpanRole.OTHER, 0, 3, trace_id=RUN, size_bytes=10)


def run_step(n: int, parent: int = 2, size: int = 10) -> SpanRecord:
    """A step of the background run: a tool span under its agent span (2, local, running)."""
    return tool(n, parent, "lookup_order", 4, 7, trace_id=RUN, size_bytes=size, parent_local=True)


def judge(
    batches: list[tuple[list[SpanRecord | None], int]], limits: AssemblyLimits = LIMITS
) -> tuple[list[tuple[str | None, int]], int]:
    """Each batch (``None``: a span of it ingest rejected), then the seconds before the next
    (polled every 0.2 s); then 300 s more. The traces judged (reason, spans) and the spans
    dropped ``late``."""
    judged, late = judge_timed(batches, limits)
    return [(reason, spans) for reason, spans, _ in judged], late


def judge_timed(
    batches: list[tuple[list[SpanRecord | None], int]], limits: AssemblyLimits = LIMITS
) -> tuple[list[tuple[str | None, int, int]], int]:
    """``judge`` with when each trace was judged: (reason, spans, whole seconds since the
    first batch), and the spans dropped ``late``."""
    clock = ManualClock()
    metrics = RecordingMetrics()
    buffer = TraceBuffer(limits, clock, metrics)
    began = clock.now_ns
    out: list[tuple[str | None, int, int]] = []
    for batch, gap in [*batches, ([], 300)]:
        if None in batch:
            buffer.flag_rejected([RUN])
        if taken := [s for s in batch if s is not None]:
            buffer.add(taken)
        for _ in range(gap * 5):
            clock.now_ns += SECOND // 5
            out.extend(
                (t.incomplete_reason, len(t.spans), (clock.now_ns - began) // SECOND)
                for t in buffer.poll()
            )
    return out, metrics.dropped["late"]


def loop_call(n: int, start_ms: int, end_ms: int) -> SpanRecord:
    """A step of a tool loop on a plain model client that the request (root 9) left running in
    a task of its own: a model call that asked for tools, the root's own child (local)."""
    return llm(
        n,
        9,
        start_ms,
        end_ms,
        trace_id=RUN,
        size_bytes=10,
        parent_local=True,
        finish_reasons=("tool_calls",),
    )


def loop_tool(n: int, start_ms: int, end_ms: int) -> SpanRecord:
    """The loop's tool call: the root's own child too (``loop_call``)."""
    return tool(
        n, 9, "lookup_order", start_ms, end_ms, trace_id=RUN, size_bytes=10, parent_local=True
    )
