"""Review of the "wait" rule (merge 9ce1a29): what was probed and held (these pass)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from assembly_support import SECOND, RecordingMetrics, span
from stall_support import run_apart
from test_review_wait import _AGENT, _LIMITS, _ROOT, _RUN, _judge, _step

from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.model import ManualClock, SpanRole


def test_rejections_every_few_seconds_keep_a_run_at_most_max_trace_age() -> None:
    """A background run (root, one step waiting for its agent span) whose sender's later steps
    are all rejected, one every 3 s, for ever: each rejection is an arrival (the quiet period
    restarts), so the lost-parent wait never passes, but the trace is judged ``timed_out`` at
    ``max_trace_age`` (300 s), not later, and ``poll`` returns each time."""
    clock = ManualClock()
    buffer = TraceBuffer(_LIMITS, clock, RecordingMetrics())
    buffer.add([_ROOT, _step(10)])
    out = []
    for _ in range(200):  # 600 s
        clock.now_ns += 3 * SECOND
        buffer.flag_rejected([_RUN])
        out.extend((t.incomplete_reason, clock.now_ns // SECOND) for t in buffer.poll())
    assert [r for r, _ in out] == ["timed_out"]
    assert 300 <= out[0][1] < 303, out  # polled every 3 s
    assert buffer.buffered_traces == 0


def test_more_than_sixteen_dropped_parents_fall_back_to_the_lost_parent_wait() -> None:
    """A background run whose 20 steps each lost their parent (a model call dropped too large,
    named by the held HTTP call under it): past ``DROPPED_IDS`` (16) the trace is
    ``parent_lost``; the calls naming the 17th to 20th still wait, but the lost-parent branch
    judges the run once quiet 2 s + 5 s, ``span_limit``: neither at ``max_trace_age`` nor
    cut before the agent span (which comes 5 s later)."""
    batch = []
    for k in range(20):
        model = _step(100 + k, size=2000)
        call = span(
            200 + k, 100 + k, SpanRole.OTHER, 5, 6, trace_id=_RUN, size_bytes=10, parent_local=True
        )
        batch += [call, model]
    judged, late = _judge([[_step(10), *batch], [_step(11)], [_AGENT]])
    assert ([(r, n) for r, n, _ in judged], late) == ([("span_limit", 24)], 0)


def test_poll_returns_for_a_run_whose_spans_are_all_dropped_or_rejected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Run apart with a timeout (compiled code is not interrupted): a trace whose every later
    span is dropped too large or rejected, polled every 0.1 s for 400 s: ``poll`` returns and
    the trace is judged once."""
    script = """
from assembly_support import SECOND, RecordingMetrics
from test_review_wait import _LIMITS, _ROOT, _RUN, _step
from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.model import ManualClock
clock = ManualClock(); buffer = TraceBuffer(_LIMITS, clock, RecordingMetrics())
buffer.add([_ROOT, _step(10)]); judged = []
for k in range(4000):
    clock.now_ns += SECOND // 10
    if k % 30 == 0:
        buffer.add([_step(1000 + k, size=2000)]); buffer.flag_rejected([_RUN])
    judged += [t.incomplete_reason for t in buffer.poll()]
print(judged)
"""
    here = str(Path(__file__).parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
    assert run_apart(script, timeout=60).strip() == "['timed_out']"
