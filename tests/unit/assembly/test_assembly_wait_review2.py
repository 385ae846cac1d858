"""Second review of the "wait" rule after its fixes (18ef89d, review-wait2): what it cut, fixed.

The run, as in ``tests/unit/assembly/test_assembly_wait_review.py``: a request's span (the
root, 9, ended at 3 ms) came first; the run it left running in the background sends its steps
(ended 4-7 ms, after the root, each under the run's agent span 2: local, still running) and,
last, the agent span. Here one of its steps is slow: the run is quiet 20 s before its next
export (a reasoning model's call), longer than ``completion_wait + lost_parent_wait`` (7 s).
A root held with its first step held waits for the agent span however long (``awaits_after_root``,
then ``lost_parent_waited``): the controls below say so; the same run with a span dropped for a
limit is cut at 7 s, its rest ``late``, though docs/configuration.md says a span dropped for a
limit "came", "what it waited for ... is still waited for", and "a dropped root counts as
arrived, even one dropped before any span of its trace was held".
"""

from __future__ import annotations

import dataclasses

from assembly_support import SECOND, RecordingMetrics, agent, span, tool
from stall_support import tid
from wait_support import LIMITS, RUN, TWO_EVICTING, judge

from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.assembly.completed import CompletedTrace
from toolwatch.model import ManualClock, SpanRecord, SpanRole

_AGENT = agent(2, 9, "refund-bot", 1, 60_000, trace_id=RUN, size_bytes=10, parent_local=True)


def _root(size: int = 10) -> SpanRecord:
    return span(9, None, SpanRole.OTHER, 0, 3, trace_id=RUN, size_bytes=size)


def _step(n: int, size: int = 10, end_ms: int = 7) -> SpanRecord:
    return tool(n, 2, "lookup_order", 4, end_ms, trace_id=RUN, size_bytes=size, parent_local=True)


def test_control_a_slow_step_after_a_held_step_is_waited_for() -> None:
    """Holds (control): root, a step, 20 s quiet, a step, the agent span: one trace."""
    judged, late = judge([([_root()], 1), ([_step(10)], 20), ([_step(11)], 1), ([_AGENT], 1)])
    assert (judged, late) == ([(None, 4)], 0)


def test_a_slow_step_after_a_step_dropped_too_large_does_not_cut_the_run() -> None:
    """Was: the run's first step (ended after the root) is dropped ``span_too_large``; its
    wait for the agent span is kept (``dropped_waits``), so the root does not anchor at 2 s,
    but at 7 s quiet the lost-parent branch asks ``awaits_after_root()``, which returns False
    before reading ``dropped_waits``: its ``last_end_ns <= root_end_ns`` shortcut counts held
    spans only (``dropped`` never moves ``last_end_ns``). The root is judged alone at 7 s (not
    an agent run, its id not remembered), and the rest makes a second trace that waits for
    its root until ``max_trace_age`` (``timed_out``).
    Expected, as the control with the step held: one trace, ``span_limit``, 3 spans.
    Fix: ``_Trace.dropped`` moves ``last_end_ns`` to the dropped span's end when it records a
    wait (or ``awaits_after_root`` reads ``dropped_waits`` before the shortcut)."""
    judged, late = judge(
        [([_root()], 1), ([_step(10, size=2000)], 20), ([_step(11)], 1), ([_AGENT], 1)]
    )
    assert (judged, late) == ([("span_limit", 3)], 0)


def test_a_shutdown_judges_a_run_whose_only_step_was_dropped_as_in_flight() -> None:
    """Was, same cause at a drain (``buffer._over``: anchored, or the root with nothing
    waiting after it): a background run holding its root, its only step dropped too large
    (waiting for the running agent span), is judged as over (``span_limit``) at a SIGTERM,
    where the same run with the step held is judged ``shutdown`` (in flight).
    Expected: ``shutdown`` both."""
    verdicts = {}
    for size in (10, 2000):
        buffer = TraceBuffer(LIMITS, ManualClock(), RecordingMetrics())
        buffer.add([_root()])
        buffer.add([_step(10, size=size)])
        verdicts[size] = [t.incomplete_reason for t in buffer.drain()]
    assert verdicts == {10: ["shutdown"], 2000: ["shutdown"]}


def test_control_a_slow_step_after_a_held_root_is_waited_for() -> None:
    """Holds (control): a root and first step held, 20 s quiet: one trace, complete."""
    judged, late = judge([([_root()], 1), ([_step(10)], 20), ([_step(11), _AGENT], 1)])
    assert (judged, late) == ([(None, 4)], 0)


def test_a_slow_step_after_a_root_dropped_before_its_trace_is_held_does_not_cut_the_run() -> None:
    """Was: the root, first, is dropped ``span_too_large`` before its trace is held:
    ``HeldTraces._limited`` keeps its (id, end, service) and ``_store`` counts it arrived
    (``root_dropped``), but also sets ``parent_lost``, as for a span rejected at ingest,
    whatever the entry. So the lost-parent branch of ``_check`` emits the trace at 7 s quiet
    (``parent_lost or not awaits_after_root()``), though its step ended after the root and
    waits for the agent span: the root dropped once the trace is held, or held, waits. The
    first step alone is judged ``span_limit`` at 7 s (an agent run: a TOOL span), and the
    rest of the run, the agent span too, is dropped ``late``.
    Expected: one trace, ``span_limit``, 3 spans, nothing late.
    Fix: set ``parent_lost`` in ``_store`` only for an entry of an unknown span (None); keep
    in ``_limited`` both facts where a rejection and a root drop meet (the root's tuple now
    overwrites a rejection's None): a flag beside the root, set by a None it replaces, a
    rejection or non-root drop after it, or another root it replaces (guarded by
    ``test_a_rejection_and_a_root_dropped_before_the_trace_both_count`` and
    ``test_two_roots_dropped_before_the_trace_is_held_leave_it_judged``)."""
    judged, late = judge(
        [([_root(size=2000)], 1), ([_step(10)], 20), ([_step(11)], 1), ([_AGENT], 1)]
    )
    assert (judged, late) == ([("span_limit", 3)], 0)


def test_a_root_dropped_once_its_trace_is_held_waits_for_a_slow_step() -> None:
    """Holds: the same root dropped after a step of its trace is held (``_Trace.dropped``,
    no ``parent_lost``): one trace, ``span_limit``, nothing late. Set beside the test above:
    where the root drop falls decides whether the run is cut."""
    judged, late = judge(
        [([_step(10)], 1), ([_root(size=2000)], 20), ([_step(11)], 1), ([_AGENT], 1)]
    )
    assert (judged, late) == ([("span_limit", 3)], 0)


def _rejected_then(first_rejected: bool) -> list[tuple[str | None, int, int]]:
    """A rejection (the run's agent span: ingest refused it) and the root dropped too large,
    both before any span of the trace is held, in either order; then the run's steps, which
    ended after the root and name the agent span as their local parent, and nothing more.
    The traces judged (reason, spans, seconds since the steps)."""
    clock = ManualClock()
    buffer = TraceBuffer(LIMITS, clock, RecordingMetrics())
    if first_rejected:
        buffer.flag_rejected([RUN])
    buffer.add([_root(size=2000)])
    if not first_rejected:
        buffer.flag_rejected([RUN])
    buffer.add([_step(10), _step(11)])
    began, out = clock.now_ns, list[tuple[CompletedTrace, int]]()
    for _ in range(400 * 5):
        clock.now_ns += SECOND // 5
        out.extend((t, clock.now_ns) for t in buffer.poll())
    return [(t.incomplete_reason, len(t.spans), (w - began) // SECOND) for t, w in out]


def test_a_rejection_and_a_root_dropped_before_the_trace_both_count() -> None:
    """Holds now, and guards the fix above: a rejection and a root dropped before the trace
    is held, in either order, are both remembered (``_limited`` keeps the root, and that a
    span is not known, ``LimitedTraces.flag``). The rejected span may be the
    agent span the steps wait for: the run is judged once quiet the lost parent's wait (7 s),
    not held to ``max_trace_age`` (300 s). A fix that sets ``parent_lost`` only for a None
    entry fails this (measured: ``timed_out`` at 300 s, both orders) unless ``_limited``
    keeps both facts."""
    for first_rejected in (True, False):
        assert _rejected_then(first_rejected) == [("span_limit", 2, 7)], first_rejected


def _judged_at(spans: list[SpanRecord], rejected: bool) -> list[tuple[str | None, int]]:
    """``spans`` in one request (and a rejection of a span of their trace), polled every
    0.2 s for 400 s: the traces judged (reason, seconds after the request)."""
    clock = ManualClock()
    buffer = TraceBuffer(LIMITS, clock, RecordingMetrics())
    if rejected:
        buffer.flag_rejected([RUN])
    buffer.add(spans)
    began, out = clock.now_ns, list[tuple[str | None, int]]()
    for _ in range(400 * 5):
        clock.now_ns += SECOND // 5
        out.extend((t.incomplete_reason, (clock.now_ns - began) // SECOND) for t in buffer.poll())
    return out


def test_a_trace_of_no_agent_span_with_a_rejected_span_is_judged_at_seven_seconds() -> None:
    """Holds, at a cost: a plain HTTP trace a Collector forwards (a server span, the root, and
    a client span under it; ``not_an_agent_run``), one span of it rejected, is judged by the
    lost-parent branch of ``_check`` once quiet 7 s, where without the rejection it is at 2 s:
    never held to ``max_trace_age``. Such traces hold their room 3.5 times as long; only those
    with a rejection."""
    http = [
        span(9, None, SpanRole.OTHER, 0, 10, trace_id=RUN, size_bytes=10),
        span(3, 9, SpanRole.OTHER, 1, 5, trace_id=RUN, size_bytes=10, parent_local=True),
    ]
    assert _judged_at(http, rejected=False) == [(None, 2)]
    assert _judged_at(http, rejected=True) == [("span_limit", 7)]


def test_a_synchronous_run_under_a_request_span_with_a_rejected_step_waits_the_lost_parent() -> (
    None
):
    """Was: a synchronous run (a request span as root, agent span ended before it, a step), a
    step of it rejected: judged at ``completion_wait`` (2 s), as any held agent span excused
    the rejection. Now: at 7 s: held spans cannot tell this run from a triage agent's before a
    background run (below), and waiting costs only time. So is a run whose root is its agent
    span (review-wait3: such a root may have left a run in the background too)."""
    run = [
        span(9, None, SpanRole.OTHER, 0, 10, trace_id=RUN, size_bytes=10),
        agent(2, 9, "refund-bot", 1, 9, trace_id=RUN, size_bytes=10, parent_local=True),
        _step(10),
    ]
    assert _judged_at(run, rejected=True) == [("span_limit", 7)]


def test_a_dropped_span_naming_itself_as_its_parent_waits_for_nothing() -> None:
    """Holds: a span that names itself as its parent (broken instrumentation), dropped too
    large under a held root: its own id is in ``dropped_ids`` before its wait is read, so it
    waits for nothing; the root anchors the trace at 2 s."""
    self_parent = tool(7, 7, "x", 4, 7, trace_id=RUN, size_bytes=2000, parent_local=True)
    out = _judged_at([_root(), self_parent], rejected=False)
    assert out == [("span_limit", 2)]


def test_a_rejected_step_of_a_background_run_after_a_synchronous_agent_does_not_cut_it() -> None:
    """Was: ``anchored()``'s root branch takes a rejection as no reason to wait once *an*
    agent span is held (``not self.parent_lost or bool(self.agents)``), meant as "the run's
    agent span came". A request that runs a triage agent in the request (its span 3, ended
    before the root) and leaves the refund run to the background: the root and the triage
    agent span come first, then a batch whose only step ingest rejected. Nothing held waits
    for a local parent, an agent span is held: the root anchors the trace at the next quiet
    2 s, the triage part is judged alone (an agent run, remembered), and the background run's
    steps and agent span are dropped ``late``. With the step held (control below) the run is
    one trace. docs/configuration.md: a trace with a rejected span waits ``lost_parent_wait``
    more "unless its agent span has come".
    Now: one trace, ``span_limit``, 5 spans, nothing late (no agent span excuses a
    rejection: a synchronous run with a rejected span is judged at 7 s, not 2 s)."""
    triage = agent(3, 9, "triage", 1, 2, trace_id=RUN, size_bytes=10, parent_local=True)
    judged, late = judge(
        [([_root(), triage], 1), ([None], 5), ([_step(11)], 5), ([_step(12)], 5), ([_AGENT], 1)]
    )
    assert (judged, late) == ([("span_limit", 5)], 0)


def test_control_a_held_step_of_a_background_run_after_a_synchronous_agent() -> None:
    """Holds (control): the same run with its first step held: one trace, complete."""
    triage = agent(3, 9, "triage", 1, 2, trace_id=RUN, size_bytes=10, parent_local=True)
    judged, late = judge(
        [
            ([_root(), triage], 1),
            ([_step(10)], 5),
            ([_step(11)], 5),
            ([_step(12)], 5),
            ([_AGENT], 1),
        ]
    )
    assert (judged, late) == ([(None, 6)], 0)


def _sixteen_dropped(retry: bool) -> tuple[list[tuple[str | None, int]], int]:
    """Root and a step held, 16 steps dropped too large (``DROPPED_IDS``), then (``retry``)
    the same request again (an OTLP retry: its copies are duplicates or dropped again), then
    a 20 s quiet step and the agent span. In a buffer of 10,000 bytes: what the trace keeps
    of 16 dropped spans is counted in its bytes (1,349, ``_Trace.came``), and in one of 1,000
    the last 7 of them find no room, and count as rejected (``parent_lost``)."""
    dropped = [_step(100 + k, size=20_000) for k in range(16)]
    batches: list[tuple[list[SpanRecord | None], int]] = [
        ([_root(), _step(10)], 1),
        ([*dropped], 1),
        ([*dropped] if retry else [], 20),
        ([_step(11)], 1),
        ([_AGENT], 1),
    ]
    return judge(batches, dataclasses.replace(LIMITS, max_buffered_bytes=10_000))


def test_a_retry_of_a_request_past_sixteen_dropped_spans_loses_no_parent() -> None:
    """Was: ``_Trace.dropped`` checks the cap (``len(ids) >= DROPPED_IDS``: the span counts
    as rejected, ``parent_lost``) before it checks whether the id is known: a trace that
    dropped exactly 16 spans, then got one of them again (an OTLP retry of its request),
    is flagged ``parent_lost``, though no span unknown was lost. The lost-parent branch then
    judges the background run once quiet 7 s (its first part), and its rest is ``late``.
    Without the retry (control) the run is one trace.
    Expected: as the control. Fix: ``if span_id in ids: return False`` before the cap."""
    assert _sixteen_dropped(retry=False) == ([("span_limit", 4)], 0)
    assert _sixteen_dropped(retry=True) == ([("span_limit", 4)], 0)


def test_an_eviction_judges_a_run_whose_background_step_was_dropped_as_in_flight() -> None:
    """Was, the first defect's cause in the victim rule (``victims._ended``: the root beside
    an agent span, and ``not awaits_after_root()``, which does not see a dropped span that
    ended after the root): a request that ran a triage agent (its span 3, ended before the
    root) and left the refund run to the background, whose first step (ended after the root,
    waiting for the running agent span) was dropped too large, is evicted by two new runs as
    one whose end has come (``span_limit``), where with the step held it is ``evicted``.
    Expected: ``evicted`` both."""
    triage = agent(3, 9, "triage", 1, 2, trace_id=RUN, size_bytes=10, parent_local=True)
    verdicts = {}
    for size in (10, 2000):
        buffer = TraceBuffer(TWO_EVICTING, ManualClock(), RecordingMetrics())
        buffer.add([_root(), triage])
        buffer.add([_step(10, size=size)])
        evicted = buffer.add([agent(1, None, "bot", 0, 5, trace_id=tid(n)) for n in (6, 7)])
        verdicts[size] = [(t.trace_id, t.incomplete_reason) for t in evicted]
    assert verdicts == {10: [(RUN, "evicted")], 2000: [(RUN, "evicted")]}


def test_two_roots_dropped_before_the_trace_is_held_leave_it_judged() -> None:
    """A trace of two roots (broken instrumentation, or two requests' spans under one trace
    id), both dropped too large before any span is held; then a step under the first, local,
    ended before both roots (a synchronous request's: one ended after them is a run left
    running in the background, held 5 s more, ``_Trace.ran_on``). It is judged, not held to
    ``max_trace_age``.
    Was: ``_limited`` kept the second root only, the first counted as a span not known
    (``parent_lost``): the step waited for a root the trace did not know of, and the trace
    was judged once quiet the lost parent's wait, 7 s.
    Now: ``_limited`` keeps both roots, replayed as dropped once the trace is held
    (``_Trace.came``): the step's parent came, nothing waits, the root anchors the trace at
    the next quiet 2 s, as when both roots are dropped after the step is held."""
    clock = ManualClock()
    buffer = TraceBuffer(LIMITS, clock, RecordingMetrics())
    first = span(8, None, SpanRole.OTHER, 0, 3, trace_id=RUN, size_bytes=2000)
    buffer.add([first, _root(size=2000)])
    buffer.add([tool(10, 8, "x", 1, 2, trace_id=RUN, size_bytes=10, parent_local=True)])
    began, out = clock.now_ns, list[tuple[str | None, int]]()
    for _ in range(400 * 5):
        clock.now_ns += SECOND // 5
        out.extend((t.incomplete_reason, (clock.now_ns - began) // SECOND) for t in buffer.poll())
    assert out == [("span_limit", 2)]


def test_a_dropped_wait_no_longer_holds_once_its_parent_arrives() -> None:
    """Holds: a step dropped too large waits for the agent span (``dropped_waits``); once the
    agent span arrives, nothing waits: the run is judged once, complete but for the step
    (``span_limit``), 2 s after the agent span."""
    judged, late = judge([([_root()], 1), ([_step(20, size=2000)], 3), ([_AGENT], 1)])
    assert (judged, late) == ([("span_limit", 2)], 0)
