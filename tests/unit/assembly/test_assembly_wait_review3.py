"""Third review of the "wait" rule (50ead45, 8070f99, review-wait3): what it cut. Fixed: no agent
span excuses a rejection any more, nor does it at an eviction or a drain (their verdict labels,
below), and a step dropped before its trace is held is known (``assembly.limited``).

The run, as in ``tests/unit/assembly/test_assembly_wait_review2.py``: a request's span (the
root, 9, ended at 3 ms) came first; a run it left running in the background sends its steps
(ended after the root, each under the run's agent span, local, still running) in export
batches, and, last, that agent span. A step of it ingest rejected (``None`` in a batch) may
be the parent a span waits for; 8070f99 excuses the rejection (the root anchors at the next
quiet ``completion_wait``, 2 s, not 7 s) when ``_Trace._agent_after_root``: the root is an
agent span, or an agent span of the root's service ended after the root. Neither says that
*the run the rejected span belongs to* ended.
"""

from __future__ import annotations

from assembly_support import SECOND, RecordingMetrics, agent, span, tool
from stall_support import tid
from wait_support import LIMITS, RUN, TWO_EVICTING, judge

from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.model import ManualClock, SpanRecord, SpanRole

_ROOT = span(9, None, SpanRole.OTHER, 0, 3, trace_id=RUN, size_bytes=10)


def _bg_agent(n: int, end_ms: int) -> SpanRecord:
    """A background run's agent span ``n`` under the root 9 (local), ended at ``end_ms``."""
    return agent(n, 9, f"bot-{n}", 1, end_ms, trace_id=RUN, size_bytes=10, parent_local=True)


def _step(n: int, parent: int = 2, size: int = 10, end_ms: int = 7) -> SpanRecord:
    return tool(n, parent, "lookup", 4, end_ms, trace_id=RUN, size_bytes=size, parent_local=True)


# --- Two background runs: the agent span of the one that ended excuses the other's rejection.


def _two_runs(first_of_y: SpanRecord | None) -> tuple[list[tuple[str | None, int]], int]:
    """The request left two runs in the background (X: agent span 2; Y: agent span 4). X
    ends first (its step 10, its agent span at 10 ms); Y's first step is ``first_of_y``
    (``None``: rejected), then two more, 5 s apart, then Y's agent span."""
    return judge(
        [
            ([_ROOT], 1),
            ([_step(10, parent=2), _bg_agent(2, 10)], 1),
            ([first_of_y], 5),
            ([_step(21, parent=4, end_ms=5_000)], 5),
            ([_step(22, parent=4, end_ms=10_000)], 5),
            ([_bg_agent(4, 60_000)], 1),
        ]
    )


def test_control_two_background_runs_a_held_step_of_the_second_is_waited_for() -> None:
    """Holds (control): Y's first step held: one trace, complete, 7 spans."""
    assert _two_runs(_step(20, parent=4)) == ([(None, 7)], 0)


def test_a_rejected_step_of_a_second_background_run_is_not_excused_by_the_first_runs_agent() -> (
    None
):
    """Fails: a request left two runs in the background (two tasks: parallel agents). X's
    steps and agent span came (ended after the root, the root's service); then a batch whose
    only span, Y's first step, ingest rejected. Nothing held waits for a local parent, and
    ``_agent_after_root`` finds X's agent span (ended after the root, same service): the root
    anchors the trace at the next quiet 2 s. The request and X are judged (an agent run,
    remembered), and Y's steps and agent span are dropped ``late``: Y is never judged.
    With Y's step held (control above) the run is one trace.
    Expected: one trace, ``span_limit``, 6 spans, nothing late.
    Fix: excuse no rejection by an agent span (wait ``lost_parent_wait`` more whenever
    ``parent_lost``: 5 s more for a trace with a rejected span; rejections are rare), since no
    held span says which run the rejected span was of."""
    assert _two_runs(None) == ([("span_limit", 6)], 0)


# --- The root is an agent span (no server span above it) that left a run in the background.

_TRIAGE_ROOT = agent(9, None, "triage", 0, 3, trace_id=RUN, size_bytes=10)
_BG = _bg_agent(2, 60_000)


def _handed_off(first: SpanRecord | None) -> tuple[list[tuple[str | None, int]], int]:
    """The root, a triage agent span (ended at 3 ms), left the refund run (agent span 2, its
    child, local) running in the background: its first step ``first`` (``None``: rejected),
    two more 5 s apart, then its agent span."""
    return judge(
        [
            ([_TRIAGE_ROOT], 1),
            ([first], 5),
            ([_step(11, end_ms=5_000)], 5),
            ([_step(12, end_ms=10_000)], 5),
            ([_BG], 1),
        ]
    )


def test_control_a_root_agent_that_left_a_run_in_the_background_waits_for_a_held_step() -> None:
    """Holds (control): the background run's first step held: one trace, complete."""
    assert _handed_off(_step(10)) == ([(None, 5)], 0)


def test_a_rejected_step_of_a_run_a_root_agent_left_in_the_background_does_not_cut_it() -> None:
    """Fails: the root is an agent span (a triage agent, no server span above it: an agent
    invoked from a worker or a script) that started the refund run as a background task and
    ended first. The run's first batch, one step, is rejected at ingest. The root alone is
    held, nothing waits, and ``_agent_after_root`` returns True because the root is an agent
    span (``a.parent_span_id is None``): the root anchors at 2 s, is judged alone (an agent
    run, remembered), and the refund run is dropped ``late``. With the step held (control)
    it is one trace. An agent root that ended *before* the spans of its trace says no more
    than the triage agent of review-wait2's test did.
    Expected: one trace, ``span_limit``, 4 spans, nothing late.
    Fix: as above (no excuse). No narrower test of the held spans helps: here the root is
    all that is held (it ended last of them), and the rejected span may be later still."""
    assert _handed_off(None) == ([("span_limit", 4)], 0)


# --- _limited: a step dropped before its trace is held is known (it was "not known").


def test_control_a_root_dropped_before_its_trace_and_a_slow_held_step() -> None:
    """Holds (control, review-wait2's fix): root dropped too large before any span of its
    trace is held, the first step held, 20 s quiet, a step, the agent span: one trace."""
    judged = judge(
        [
            ([span(9, None, SpanRole.OTHER, 0, 3, trace_id=RUN, size_bytes=2000)], 1),
            ([_step(10)], 1),
            ([_step(11)], 20),
            ([_step(12)], 1),
            ([_BG], 1),
        ]
    )
    assert judged == ([("span_limit", 4)], 0)


def test_a_step_dropped_before_its_trace_is_held_is_known_as_a_dropped_root_is() -> None:
    """The request's span and the run's first step come in one request and are both dropped
    (too large here; ``buffer_full`` under a full buffer drops a whole batch alike) before
    any span of the trace is held; then a step, a slow one (20 s), a step, the agent span.
    Was (older than 50ead45, which fixed the root's case only): ``_limited`` kept the root's
    (id, end, service) but the step's drop only as "a span not known" (``lost``): the trace
    was ``parent_lost``, as for a rejection, and the lost-parent branch of ``_check`` judged
    it once quiet 7 s though its held step waited for the running agent span: the run cut,
    the part so far judged, the rest ``late``. The same step dropped once the trace is held
    is known (``dropped_ids``, ``dropped_waits``) and waited for; docs/configuration.md: a
    span dropped for a limit "came".
    Now: ``_limited`` (``assembly.limited``) keeps what ``_Trace.came`` reads of each span
    dropped before its trace is held (id, parent, end, service, parent_local; 16 a trace),
    replayed when the trace's first span is stored: one trace, ``span_limit``, 3 spans,
    nothing late. Only a span past the bounds (or a rejection) is not known."""
    judged = judge(
        [
            (
                [
                    span(9, None, SpanRole.OTHER, 0, 3, trace_id=RUN, size_bytes=2000),
                    _step(10, size=2000),
                ],
                1,
            ),
            ([_step(11)], 20),
            ([_step(12)], 1),
            ([_BG], 1),
        ]
    )
    assert judged == ([("span_limit", 3)], 0)


# --- What held.


def test_a_retried_root_dropped_before_its_trace_is_not_lost() -> None:
    """Holds: the root dropped too large twice before its trace is held (an OTLP retry of its
    request): ``_limited`` keeps it once (``LimitedTraces.flag``: a retry of a span kept
    changes nothing), so a slow step after it is waited for: one trace."""
    big_root = span(9, None, SpanRole.OTHER, 0, 3, trace_id=RUN, size_bytes=2000)
    judged = judge(
        [([big_root], 1), ([big_root], 1), ([_step(10)], 20), ([_step(11)], 1), ([_BG], 1)]
    )
    assert judged == ([("span_limit", 3)], 0)


def test_a_rejection_after_a_retried_root_before_its_trace_still_counts() -> None:
    """Holds: root dropped, retried, then a rejection, all before the trace is held; the
    steps wait for the agent span, which never comes: judged once quiet 7 s (the rejected
    span may be that agent span), not held to ``max_trace_age``."""
    clock = ManualClock()
    buffer = TraceBuffer(LIMITS, clock, RecordingMetrics())
    big_root = span(9, None, SpanRole.OTHER, 0, 3, trace_id=RUN, size_bytes=2000)
    buffer.add([big_root])
    buffer.add([big_root])
    buffer.flag_rejected([RUN])
    buffer.add([_step(10)])
    began, out = clock.now_ns, list[tuple[str | None, int]]()
    for _ in range(400 * 5):
        clock.now_ns += SECOND // 5
        out.extend((t.incomplete_reason, (clock.now_ns - began) // SECOND) for t in buffer.poll())
    assert out == [("span_limit", 7)]


def test_a_dropped_step_of_another_service_after_the_root_holds_only_the_lost_parents_wait() -> (
    None
):
    """Holds: a dropped step's end moves ``last_end_ns`` (50ead45), but ``_awaits_undropped``
    still reads its service: a step of another service (its clock is not the root's), ended
    'after' the root and dropped too large, waiting for its local parent that never comes,
    holds the trace the lost parent's wait (7 s), not ``max_trace_age``."""
    clock = ManualClock()
    buffer = TraceBuffer(LIMITS, clock, RecordingMetrics())
    buffer.add([_ROOT])
    other = tool(
        10, 2, "x", 4, 90_000, trace_id=RUN, size_bytes=2000, parent_local=True, service="orders"
    )
    buffer.add([other])
    began, out = clock.now_ns, list[tuple[str | None, int]]()
    for _ in range(400 * 5):
        clock.now_ns += SECOND // 5
        out.extend((t.incomplete_reason, (clock.now_ns - began) // SECOND) for t in buffer.poll())
    assert out == [("span_limit", 7)]


# --- 8070f99's narrowing, carried to an eviction's and a drain's "ended" (victims._root_ended).

_TRIAGE = agent(3, 9, "triage", 1, 2, trace_id=RUN, size_bytes=10, parent_local=True)


def test_an_eviction_judges_a_background_run_whose_step_was_rejected_as_in_flight() -> None:
    """Review-wait2's eviction case with the background run's first step rejected instead of
    held. ``anchored()`` says no (the triage agent ended before the root: 8070f99).
    Was: ``victims._ended``'s second clause (the root, an agent span, and ``not
    awaits_after_root()``) never read ``parent_lost``: the run was taken, of the 16 oldest, as
    one whose end had come (ahead of the oldest in flight) and judged ``span_limit`` as it
    came, where with the step held it is ``evicted``.
    Now: ``_ended`` asks ``victims._root_ended`` (``not parent_lost`` beside ``not
    awaits_after_root()``, as ``anchored()`` does): ``evicted`` both."""
    verdicts = {}
    for rejected in (False, True):
        buffer = TraceBuffer(TWO_EVICTING, ManualClock(), RecordingMetrics())
        buffer.add([_ROOT, _TRIAGE])
        if rejected:
            buffer.flag_rejected([RUN])
        else:
            buffer.add([_step(10)])
        evicted = buffer.add([agent(1, None, "bot", 0, 5, trace_id=tid(n)) for n in (6, 7)])
        verdicts[rejected] = [(t.trace_id, t.incomplete_reason) for t in evicted]
    assert verdicts == {False: [(RUN, "evicted")], True: [(RUN, "evicted")]}


def test_a_shutdown_judges_a_background_run_whose_step_was_rejected_as_in_flight() -> None:
    """Same cause at a drain (``buffer._over``: anchored, or the root with nothing waiting
    after it).
    Was: ``parent_lost`` unread: ``span_limit`` (its run over) where the same run with the
    step held is ``shutdown``.
    Now: ``_over`` asks ``victims._root_ended`` too: ``shutdown`` both. A synchronous run
    with a rejected span drained before it was quiet 7 s is ``shutdown`` as well (below)."""
    verdicts = {}
    for rejected in (False, True):
        buffer = TraceBuffer(LIMITS, ManualClock(), RecordingMetrics())
        buffer.add([_ROOT, _TRIAGE])
        if rejected:
            buffer.flag_rejected([RUN])
        else:
            buffer.add([_step(10)])
        verdicts[rejected] = [t.incomplete_reason for t in buffer.drain()]
    assert verdicts == {False: ["shutdown"], True: ["shutdown"]}
