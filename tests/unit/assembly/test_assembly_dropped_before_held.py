"""A span dropped for a limit before any span of its trace is held (``assembly.limited``) is
known once the trace is, as one dropped after it: a root anchors the trace, a parent is waited
for no more, what the span waited for still is. Past the bounds (16 spans a trace,
``max_traces`` in all), or beside a rejection, a span is not known (``parent_lost``).

The run, as in ``test_assembly_wait_review3.py``: a request's span (the root, 9, ended at
3 ms); a run it left running in the background sends its steps (ended after the root, each
under the run's agent span 2, local, still running), one slow (quiet 20 s: longer than
``completion_wait + lost_parent_wait``, 7 s), and, last, the agent span.
"""

from __future__ import annotations

import dataclasses

from assembly_support import SECOND, RecordingMetrics, agent, span, tool
from wait_support import LIMITS, RUN, judge

from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.assembly.dropped import DROPPED_IDS, dropped_span
from toolwatch.assembly.limited import LimitedTraces
from toolwatch.model import ManualClock, SpanRecord, SpanRole

#: Room for what a trace keeps of 16 dropped spans (``_Trace.came``: 1,349 bytes here).
_LIMITS = dataclasses.replace(LIMITS, max_buffered_bytes=10_000)
_TOO_LARGE = 20_000
_AGENT = agent(2, 9, "refund-bot", 1, 60_000, trace_id=RUN, size_bytes=10, parent_local=True)


def _root(size: int = 10) -> SpanRecord:
    return span(9, None, SpanRole.OTHER, 0, 3, trace_id=RUN, size_bytes=size)


def _step(n: int, size: int = 10) -> SpanRecord:
    return tool(n, 2, "lookup", 4, 7, trace_id=RUN, size_bytes=size, parent_local=True)


def _slow_run(first: list[SpanRecord | None]) -> tuple[list[tuple[str | None, int]], int]:
    """``first`` (one request; ``None``: a rejection), then a step, 20 s quiet, a step and
    the agent span: the traces judged (reason, spans), and the spans dropped ``late``."""
    return judge([(first, 1), ([_step(10)], 20), ([_step(11)], 1), ([_AGENT], 1)], _LIMITS)


def _dropped(count: int) -> list[SpanRecord | None]:
    """The root and ``count`` steps, all too large (``_LIMITS``: 10,000 bytes)."""
    return [_root(size=_TOO_LARGE), *(_step(100 + k, size=_TOO_LARGE) for k in range(count))]


def test_a_root_and_several_steps_dropped_before_the_trace_is_held_are_known() -> None:
    """The root and three steps dropped too large in the trace's first request: known, the
    run waits for its agent span through the slow step: one trace, ``span_limit``, 3 spans
    (the held steps and the agent span), nothing late."""
    assert _slow_run(_dropped(3)) == ([("span_limit", 3)], 0)


def test_sixteen_spans_dropped_before_the_trace_is_held_are_known() -> None:
    """The root and 15 steps: ``DROPPED_IDS`` (16) spans kept, all known: one trace."""
    assert _slow_run(_dropped(DROPPED_IDS - 1)) == ([("span_limit", 3)], 0)


def test_a_span_dropped_past_sixteen_before_the_trace_is_held_is_not_known() -> None:
    """The root and 16 steps: the 17th span is not kept, and counts as a rejected one
    (``parent_lost``): the root anchors the trace once quiet the lost parent's wait (7 s),
    so the slow step cuts the run: its first step judged alone, the rest (a step and the
    agent span) ``late``."""
    assert _slow_run(_dropped(DROPPED_IDS)) == ([("span_limit", 1)], 2)


def test_a_retried_request_dropped_before_the_trace_is_held_is_known_once() -> None:
    """The root and 15 steps dropped, then the same request again (an OTLP retry): each span
    is kept once, so the retry neither fills the bound nor loses a span: one trace."""
    dropped = _dropped(DROPPED_IDS - 1)
    judged = judge(
        [(dropped, 1), (dropped, 1), ([_step(10)], 20), ([_step(11)], 1), ([_AGENT], 1)],
        _LIMITS,
    )
    assert judged == ([("span_limit", 3)], 0)


def _judged_at(
    first: list[SpanRecord | None], rejected_after: bool
) -> list[tuple[str | None, int, int]]:
    """``first`` (``None``: a rejection, before its spans or, ``rejected_after``, after
    them), then a step waiting for the agent span, which never comes: the traces judged
    (reason, spans, seconds after the step)."""
    clock = ManualClock()
    buffer = TraceBuffer(_LIMITS, clock, RecordingMetrics())
    taken = [s for s in first if s is not None]
    if not rejected_after:
        buffer.flag_rejected([RUN])
    buffer.add(taken)
    if rejected_after:
        buffer.flag_rejected([RUN])
    buffer.add([_step(10)])
    began, out = clock.now_ns, list[tuple[str | None, int, int]]()
    for _ in range(400 * 5):
        clock.now_ns += SECOND // 5
        out.extend(
            (t.incomplete_reason, len(t.spans), (clock.now_ns - began) // SECOND)
            for t in buffer.poll()
        )
    return out


def test_a_rejection_and_spans_dropped_before_the_trace_is_held_both_count() -> None:
    """A rejection and the root and a step dropped, before any span is held, in either
    order: the spans are known, but the rejected span may be the agent span the step waits
    for: judged once quiet the lost parent's wait (7 s), not held to ``max_trace_age``."""
    for after in (False, True):
        assert _judged_at(_dropped(1), rejected_after=after) == [("span_limit", 1, 7)], after


def test_without_a_rejection_the_same_trace_waits_for_its_agent_span() -> None:
    """Control: the same drops without the rejection: the step waits for its agent span
    (local, ended after the root), which never comes: judged at ``max_trace_age``."""
    clock = ManualClock()
    buffer = TraceBuffer(_LIMITS, clock, RecordingMetrics())
    buffer.add([s for s in _dropped(1) if s is not None])
    buffer.add([_step(10)])
    out = []
    for _ in range(400 * 5):
        clock.now_ns += SECOND // 5
        out.extend((t.incomplete_reason, len(t.spans)) for t in buffer.poll())
    assert out == [("timed_out", 1)]


def test_what_is_kept_before_traces_are_held_is_bounded() -> None:
    """``LimitedTraces`` of ``max_traces`` 3: 3 trace ids (a 4th forgets the oldest first,
    its spans with it) and 3 spans in all (past them, the oldest trace's spans forgotten
    first, its id kept marked lost, but the trace of the span kept; one trace alone past
    them: lost); a retry of a span kept is kept once; taking a trace frees its spans.
    Was: past 3 spans in all, the newest span was lost, the oldest kept (a trace never held,
    all its spans dropped, held the budget until 3 newer trace ids pushed it out); then
    (0672070) the oldest trace was forgotten whole, also one that kept no span
    (review-wait7 defect 1).
    Now: the oldest trace's spans are forgotten, its id kept (lost), and the newest kept."""
    limited = LimitedTraces(3)
    a, b, c, d = (bytes([n]) * 16 for n in (1, 2, 3, 4))
    step, other = dropped_span(_step(10)), dropped_span(_step(11))
    limited.flag(a, step)
    limited.flag(a, step)  # a retry
    limited.flag(a, other)
    assert (len(limited), limited.spans) == (1, 2)
    limited.flag(b, step)
    limited.flag(b, other)  # past 3 spans in all: a's, the oldest, forgotten
    assert (len(limited), limited.spans) == (2, 2)
    assert limited.take(a) == (True, ())
    assert limited.take(b) == (False, (step, other))
    assert limited.spans == 0
    limited.flag(b, None)  # a rejection: lost, nothing kept
    limited.flag(c, step)
    limited.flag(d, step)
    limited.flag(a, step)  # a 4th trace id: b, the oldest, forgotten first
    assert (len(limited), limited.spans) == (3, 3)
    assert limited.take(b) is None
    limited.flag(c, other)  # c is the oldest: the next oldest's, d's, spans forgotten
    assert limited.take(d) == (True, ())
    assert limited.take(c) == (False, (step, other))
    assert limited.take(a) == (False, (step,))
    assert (len(limited), limited.spans) == (0, 0)
    spans = [dropped_span(_step(20 + k)) for k in range(4)]
    for kept in spans:
        limited.flag(a, kept)
    assert limited.take(a) == (True, tuple(spans[:3]))  # a alone fills the budget


def test_sixteen_spans_a_trace_are_kept_before_it_is_held() -> None:
    """``DROPPED_IDS`` spans of one trace kept; the 17th makes it lost, keeping 16."""
    limited = LimitedTraces(100)
    spans = [dropped_span(_step(100 + k)) for k in range(DROPPED_IDS + 1)]
    for kept in spans:
        limited.flag(RUN, kept)
    assert limited.take(RUN) == (True, tuple(spans[:DROPPED_IDS]))
    assert limited.spans == 0
