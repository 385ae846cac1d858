"""Helpers for the tests of a full buffer under backpressure (``assembly.refusals``): runs in
flight and their ends, offered as ``Engine.admit`` offers a request."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from assembly_support import SECOND, RecordingMetrics, agent, tool

from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.assembly.completed import CompletedTrace
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.model import ManualClock, SpanRecord

LIMITS = AssemblyLimits(completion_wait_ns=2 * SECOND, max_trace_age_ns=300 * SECOND, max_traces=2)


def tid(n: int) -> bytes:
    return n.to_bytes(16, "big")


def in_flight(n: int, span_id: int = 2) -> list[SpanRecord]:
    """A tool span of run ``n``, under its agent span 1, which has not ended yet."""
    return [tool(span_id, 1, "lookup_order", 0, 1, trace_id=tid(n), size_bytes=10)]


def end_of(n: int) -> list[SpanRecord]:
    """Run ``n``'s agent span, its root: it ends the run."""
    return [agent(1, None, "refund-bot", 0, 5, trace_id=tid(n), size_bytes=10)]


def make(limits: AssemblyLimits = LIMITS) -> tuple[TraceBuffer, ManualClock, RecordingMetrics]:
    clock = ManualClock()
    metrics = RecordingMetrics()
    return TraceBuffer(limits, clock, metrics), clock, metrics


def offer(buffer: TraceBuffer, spans: list[SpanRecord], out: list[CompletedTrace]) -> bool:
    """What ``Engine.admit`` does with the buffer: False when refused; the traces evicted go to
    ``out``."""
    evicted = buffer.admit(spans, sum(s.size_bytes for s in spans))
    if evicted is None:
        return False
    out.extend(evicted)
    return True


def tick(
    buffer: TraceBuffer, clock: ManualClock, seconds: float, out: list[CompletedTrace]
) -> None:
    """``seconds`` pass and the ticker makes the checks due (on time)."""
    clock.now_ns += int(seconds * SECOND)
    out.extend(buffer.poll())


def verdicts(out: list[CompletedTrace]) -> dict[bytes, str | None]:
    return {t.trace_id: t.incomplete_reason for t in out}


def run_apart(script: str, timeout: float) -> str:
    """Run ``script`` in a Python process of its own, with these helpers importable, and
    return what it printed: for code that could hang in ``poll`` (compiled code is not
    interrupted by pytest-timeout's signal). Fails the test if it does not return within
    ``timeout`` seconds, or fails."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), env.get("PYTHONPATH", "")])
    try:
        done = subprocess.run(
            [sys.executable, "-c", script],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"did not return within {timeout:g} s (poll hanging?)") from None
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout.strip()
