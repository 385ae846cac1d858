"""Fourth review of the "wait" rule (review-wait4): traces whose root is not held. f33d9e0 put
"no agent span excuses a rejected span" (judged once quiet ``completion_wait +
lost_parent_wait``, 7 s here) behind ``root_seen``, in ``_Trace.anchored``'s root branch and
``TraceBuffer._check``'s lost-parent branch; and only the root branch asked whether a run was
left running in the background. Fixed: without a root, a rejected span (the root itself,
maybe) holds the trace those 7 s too, and an outermost agent span, as a root, waits while a
span of its service that ended after it waits for its local parent. And (defect 6) a
background loop whose steps are the root's own children: a root whose service has a span that
ended after it, whatever that span's parent, anchors once quiet ``completion_wait +
lost_parent_wait`` (``_Trace.ran_on``).

A span dropped for a limit (review-wait4's other two defects) is another helper's; their
tests are not here.
"""

from __future__ import annotations

import dataclasses

import pytest
from assembly_support import SECOND, RecordingMetrics, agent, llm, span, tool
from stall_support import tid
from wait_support import LIMITS, RUN, TWO_EVICTING, judge_timed

from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.model import ManualClock, SpanRecord, SpanRole

# --- A rejected root: the lost-parent branch needed ``root_seen``.

#: A synchronous run: the request's server span 9 (the root) ends last; under it the run's
#: agent span 2 (local parent), and its steps 10, 11 (local parent 2), all in one export batch.
_RUN_AGENT = agent(2, 9, "refund-bot", 1, 60, trace_id=RUN, size_bytes=10, parent_local=True)


def _sync_step(n: int, end_ms: int) -> SpanRecord:
    return tool(n, 2, "lookup_order", 4, end_ms, trace_id=RUN, size_bytes=10, parent_local=True)


_SYNC = [_sync_step(10, 20), _sync_step(11, 40), _RUN_AGENT]


def test_control_a_synchronous_run_whose_root_was_dropped_too_large_is_judged_at_once() -> None:
    """Control, unchanged: the root dropped ``span_too_large`` came: judged ``span_limit`` at
    the first quiet ``completion_wait``, 2 s."""
    big_root = span(9, None, SpanRole.OTHER, 0, 70, trace_id=RUN, size_bytes=2000)
    assert judge_timed([([*_SYNC, big_root], 1)]) == ([("span_limit", 3, 2)], 0)


def test_a_synchronous_run_whose_root_was_rejected_is_judged_once_quiet_the_lost_parents_wait() -> (
    None
):
    """The same run, its root (the request's server span: another instrumentation's, the span
    most often malformed) rejected at ingest: the agent waits for its local parent, 9, which
    the rejected span may be.
    Was: held ``max_trace_age`` (300 s, the whole run in memory that long), judged
    ``timed_out``: the lost-parent branch and its deadline looked at rooted traces only.
    Now: ``span_limit`` once quiet 7 s, as a rooted trace with a rejected span: what would
    anchor it were its local parents gone (the agent) has come."""
    assert judge_timed([([*_SYNC, None], 1)]) == ([("span_limit", 3, 7)], 0)


def test_rejected_steps_that_nothing_would_anchor_still_wait_for_max_trace_age() -> None:
    """Steps alone (no agent span, no model call), a span of their trace rejected: nothing
    would anchor them were their local parent gone, so the lost parent's wait passes (its
    deadline no longer looked at: ``lost_parent_waited``) and they wait for their run, then
    ``max_trace_age``, as before. Their agent span, come after 20 s, anchors them.
    Was: with the agent span too, ``timed_out`` at 300 s (its local parent, 9, waited for).
    Now: ``span_limit`` once quiet 7 s after it came, 27 s."""
    steps = [_sync_step(10, 20), _sync_step(11, 40)]
    assert judge_timed([([*steps, None], 1)]) == ([("timed_out", 2, 300)], 0)
    judged = judge_timed([([*steps, None], 20), ([_RUN_AGENT], 1)])
    assert judged == ([("span_limit", 3, 27)], 0)


# --- An outermost agent span (its parent remote) that left a run in the background.

#: A triage agent invoked by another service (parent 100, remote), ended at 3 ms, and the
#: refund run it left running in the background (agent span 4, its child, local) and its
#: steps (ended after the triage agent, each under 4, local).
_TRIAGE_REMOTE = agent(1, 100, "triage", 0, 3, trace_id=RUN, size_bytes=10)
_TRIAGE_ROOT = agent(1, None, "triage", 0, 3, trace_id=RUN, size_bytes=10)
_REFUND = agent(4, 1, "refund-bot", 1, 60_000, trace_id=RUN, size_bytes=10, parent_local=True)


def _bg_step(n: int, end_ms: int, service: str = "refund-agent") -> SpanRecord:
    step = tool(n, 4, "lookup_order", 4, end_ms, trace_id=RUN, size_bytes=10, parent_local=True)
    return dataclasses.replace(step, service=service)


def _left_running(
    triage: SpanRecord, first: SpanRecord | None, *, refund: bool = True
) -> tuple[list[tuple[str | None, int, int]], int]:
    """The triage span, 1 s later the refund run's first step ``first`` (``None``:
    rejected), two more 5 s apart, then the refund agent span (unless not ``refund``: lost
    in export)."""
    return judge_timed(
        [
            ([triage], 1),
            ([first], 5),
            ([_bg_step(11, 5_000)], 5),
            ([_bg_step(12, 10_000)], 5),
            ([_REFUND] if refund else [], 1),
        ]
    )


def test_control_a_root_triage_agent_that_left_a_run_waits_for_its_held_step() -> None:
    """Control: the triage agent is the root: its held step waits for the refund agent span
    (``_awaits_local``): one trace, complete.
    Was: 2 s after the refund agent span came (18 s).
    Now: 7 s after (23 s): the run's spans, of the root's service, ended after it (a run left
    running in the background, ``_Trace.ran_on``)."""
    assert _left_running(_TRIAGE_ROOT, _bg_step(10, 7)) == ([(None, 5, 23)], 0)


def test_control_a_root_triage_agent_that_left_a_run_waits_out_a_rejected_step() -> None:
    """Control, unchanged: the same, the first step rejected (f33d9e0): one trace,
    ``span_limit``, 7 s after the refund agent span came."""
    assert _left_running(_TRIAGE_ROOT, None) == ([("span_limit", 4, 23)], 0)


def test_a_remote_triage_agent_that_left_a_run_waits_for_its_held_step() -> None:
    """The same run, the triage agent's parent in another service (a gateway's span not sent
    here, or sent later).
    Was: the outermost agent anchored the trace whatever waited: judged at 3 s (2 s quiet)
    as triage and one step, the refund run's other two steps and its agent span dropped
    ``late``: the refund run never judged.
    Now: as under a root, a span of the agent's service that ended after it and waits for
    its local parent (``_awaits_after``, from the agent's end) holds the trace: one trace,
    complete, 5 spans, nothing late, at 18 s: 2 s after the refund agent span came (the
    rooted control, 23 s: a root holds a run that ran on after it 5 s more, ``ran_on``;
    an outermost agent span does not)."""
    assert _left_running(_TRIAGE_REMOTE, _bg_step(10, 7)) == ([(None, 5, 18)], 0)


def test_a_remote_triage_agent_does_not_excuse_a_rejected_step() -> None:
    """As above, the first step rejected.
    Was: the outermost agent anchored at the next quiet 2 s (``parent_lost`` was read only
    under a root): triage judged alone at 3 s, the refund run's steps and agent span dropped
    ``late`` (3).
    Now: no agent span excuses a rejected span without a root either: one trace,
    ``span_limit``, 4 spans, nothing late, once quiet 7 s (23 s), as the rooted control."""
    assert _left_running(_TRIAGE_REMOTE, None) == ([("span_limit", 4, 23)], 0)


def test_a_remote_triage_agent_whose_run_lost_its_agent_span_waits_as_under_a_root() -> None:
    """The refund agent span lost in export: a root or an outermost agent span alike wait
    for it, ``max_trace_age`` by default (judged ``timed_out``), ``local_parent_wait`` when
    set (quiet that long, anchored: complete).
    Was: without a root, judged at 3 s, triage and the first step; the other two ``late``.
    Now: as under a root."""
    for triage in (_TRIAGE_ROOT, _TRIAGE_REMOTE):
        assert _left_running(triage, _bg_step(10, 7), refund=False) == (
            [("timed_out", 4, 300)],
            0,
        )
    waits = AssemblyLimits(
        completion_wait_ns=2 * SECOND,
        max_trace_age_ns=300 * SECOND,
        max_buffered_bytes=1000,
        local_parent_wait_ns=30 * SECOND,
    )
    judged = judge_timed(
        [([_TRIAGE_REMOTE], 1), ([_bg_step(10, 7)], 5), ([_bg_step(11, 5_000)], 1)], waits
    )
    assert judged == ([(None, 3, 36)], 0)


def test_a_step_of_another_service_or_ended_before_the_agent_does_not_hold_it() -> None:
    """Only a span of the outermost agent's service that ended after it says a run was left
    running in the background (its clock is the agent's): a step of another service, or one
    that ended before the agent (a parent lost in export), does not hold the trace.
    Unchanged: judged at the first quiet 2 s."""
    other = _bg_step(10, 7, service="orders")
    assert judge_timed([([_TRIAGE_REMOTE, other], 1)]) == ([(None, 2, 2)], 0)
    slow_triage = agent(1, 100, "triage", 0, 9_000, trace_id=RUN, size_bytes=10)
    assert judge_timed([([slow_triage, _bg_step(10, 7)], 1)]) == ([(None, 2, 2)], 0)


# --- Without a root or an agent span: the span that encloses a tool loop's model calls.


def test_a_tool_loop_under_a_remote_parent_does_not_excuse_a_rejected_span() -> None:
    """A loop on a plain model client in a called service (its span 3 under a remote
    parent; a model call that asked for tools under it, and the tool it ran), a span of the
    trace rejected at ingest: it may be the loop's next call, or a run left in the background.
    Was: anchored by the loop's span at the first quiet 2 s.
    Now: as by a root or an agent span, once quiet 7 s."""
    loop = [
        llm(5, 3, 1, 10, finish_reasons=("tool_calls",), trace_id=RUN, parent_local=True),
        tool(6, 3, "lookup_order", 11, 20, trace_id=RUN, parent_local=True),
        span(3, 100, SpanRole.OTHER, 0, 30, trace_id=RUN),
    ]
    assert judge_timed([(loop, 1)]) == ([(None, 3, 2)], 0)
    assert judge_timed([([*loop, None], 1)]) == ([("span_limit", 3, 7)], 0)


# --- A run left running in the background whose steps name the root itself (defect 6).

#: The request's span (the root) ended at 3 ms; the run it left running in a background task
#: writes no span of its own (a plain client's tool loop): its model calls and tools are the
#: root's children (local, held), ended after it, exported in batches 5 s apart.
_REQUEST_ROOT = span(9, None, SpanRole.OTHER, 0, 3, trace_id=RUN, size_bytes=10)


def _call(n: int, end_ms: int, service: str | None = "refund-agent") -> SpanRecord:
    call = tool(n, 9, "lookup_order", 4, end_ms, trace_id=RUN, size_bytes=10, parent_local=True)
    return dataclasses.replace(call, service=service)


def _loop(
    root: SpanRecord, gaps: tuple[int, ...], service: str | None = "refund-agent"
) -> tuple[list[tuple[str | None, int, int]], int]:
    """The root, 1 s later the loop's first call, then one more call after each of ``gaps``
    seconds (each ended 1 ms before it came, of ``service``): ``judge_timed``'s outcome."""
    batches: list[tuple[list[SpanRecord | None], int]] = [([root], 1)]
    ended = 1_000
    for n, gap in enumerate((*gaps, 1)):
        batches.append(([_call(10 + n, ended, service)], gap))
        ended += gap * 1_000
    return judge_timed(batches)


def test_a_background_loop_under_the_root_is_not_cut_at_the_first_export_gap() -> None:
    """The loop's 3 batches 5 s apart: ``awaits_after_root``'s reading of a run left running
    in the background (the root's service, ended after the root), whatever the spans' parent.
    Was: judged at the first quiet 2 s (3 s) as the request and the first batch, every later
    step ``late`` (2): the run judged as its first part.
    Now: the root anchors once quiet ``completion_wait + lost_parent_wait`` (7 s, within one
    more batch delay): one trace, complete, 4 spans, nothing late, 7 s after the last batch
    (18 s)."""
    assert _loop(_REQUEST_ROOT, (5, 5)) == ([(None, 4, 18)], 0)


def test_a_synchronous_run_is_still_judged_at_the_first_quiet_completion_wait() -> None:
    """The same calls, ended before the root (the request answered once its loop was done),
    in one batch: nothing ran on after the root. Unchanged: judged at 2 s."""
    sync_root = span(9, None, SpanRole.OTHER, 0, 20_000, trace_id=RUN, size_bytes=10)
    calls = [_call(10, 1_000), _call(11, 6_000), _call(12, 11_000)]
    assert judge_timed([([*calls, sync_root], 1)]) == ([(None, 4, 2)], 0)


def test_the_wait_restarts_at_every_batch_and_is_due_at_seven_seconds_quiet() -> None:
    """``due_ns``: found unanchored at 2 s quiet, the trace is next due at ``completion_wait
    + lost_parent_wait`` after its last span; a batch restarts that wait: at 6.999 s quiet
    nothing, its deadline 1 ms ahead, at 7 s the run, whole."""
    clock = ManualClock()
    buffer = TraceBuffer(LIMITS, clock, RecordingMetrics())
    buffer.add([_REQUEST_ROOT, _call(10, 1_000)])
    came = clock.now_ns
    clock.now_ns += 3 * SECOND
    assert buffer.poll() == []
    assert min(when for when, _, _ in buffer._deadlines) == came + 7 * SECOND
    clock.now_ns += 3 * SECOND
    buffer.add([_call(11, 6_000)])
    clock.now_ns += 2 * SECOND
    assert buffer.poll() == []
    clock.now_ns += 5 * SECOND - 1_000_000
    assert buffer.poll() == []
    assert min(when for when, _, _ in buffer._deadlines) == clock.now_ns + 1_000_000
    clock.now_ns += 1_000_000
    assert [(t.complete, len(t.spans)) for t in buffer.poll()] == [(True, 3)]


def test_a_loop_quiet_longer_than_the_two_waits_is_cut() -> None:
    """The bound, pinned: a loop quiet more than ``completion_wait + lost_parent_wait`` (7 s:
    a step slower than that, or a batch delay raised past ``lost_parent_wait``) is judged
    then, and what it exports after is ``late``, as a run that lost a parent in export is.
    Was: cut at 2 s quiet.
    Now: at 7 s quiet (8 s: the first call came at 1 s), the call that came at 9 s late."""
    assert _loop(_REQUEST_ROOT, (8,)) == ([(None, 2, 8)], 1)
    assert _loop(_REQUEST_ROOT, (6,)) == ([(None, 3, 14)], 0)  # quiet 6 s: whole


def test_a_loop_that_never_stops_is_bounded_by_max_trace_age() -> None:
    """A loop exporting every 5 s for ever restarts the wait at each batch: ``max_trace_age``
    (300 s, from the trace's first span) still bounds it: judged ``timed_out``, 61 spans, its
    later calls ``late``.
    Was: cut at the first quiet 2 s (3 s), 2 spans, every later call ``late``.
    Now: held to ``max_trace_age``, as any run still exporting."""
    judged, late = _loop(_REQUEST_ROOT, (5,) * 70)
    assert judged == [("timed_out", 61, 300)]
    assert late == 11


def test_a_root_of_no_service_is_held_by_spans_of_no_service_only() -> None:
    """A root whose resource names no ``service.name`` (``service`` None): "the root's
    service" is None, a name like any (the process that sets none sets it on none of its
    spans). A loop of no service holds it; a loop of a named service is another service's
    (its clock may be skewed against the root's), as for a named root.
    Was: both cut at 2 s, the later steps ``late``.
    Now: the first whole at 18 s; the second unchanged."""
    unnamed = dataclasses.replace(_REQUEST_ROOT, service=None)
    assert _loop(unnamed, (5, 5), service=None) == ([(None, 4, 18)], 0)
    assert _loop(unnamed, (5, 5)) == ([(None, 2, 3)], 2)


def test_another_services_span_ended_after_the_root_does_not_hold_it() -> None:
    """A span of another service (a tool host, its clock not the root's) that ended after
    the root, as skew between hosts shows it, says nothing of a run left running: a
    synchronous request judged at 2 s, unchanged. The same span of the root's service holds
    it 5 s more."""
    sync = span(9, None, SpanRole.OTHER, 0, 20, trace_id=RUN, size_bytes=10)
    skewed = _call(10, 25, service="orders")
    assert judge_timed([([skewed, sync], 1)]) == ([(None, 2, 2)], 0)
    assert judge_timed([([_call(10, 25), sync], 1)]) == ([(None, 2, 7)], 0)


@pytest.mark.parametrize(
    ("end_ms", "reason"), [(1_000, "shutdown"), (2, None)], ids=["ran-on", "synchronous"]
)
def test_a_drain_in_the_wait_takes_the_run_for_one_in_flight(
    end_ms: int, reason: str | None
) -> None:
    """A drain (shutdown) 1 s after the root and a call that ended after it: the loop may
    export more, and judged as it came its rest would page falsely: in flight (``shutdown``,
    ``buffer._over``), as a run with a span rejected at ingest is.
    Was: complete, the root its anchor. A synchronous run (its call ended before the root):
    complete, unchanged (nothing more can come)."""
    clock = ManualClock()
    buffer = TraceBuffer(LIMITS, clock, RecordingMetrics())
    buffer.add([_REQUEST_ROOT, _call(10, end_ms)])
    clock.now_ns += SECOND
    assert [(t.incomplete_reason, len(t.spans)) for t in buffer.drain()] == [(reason, 2)]


@pytest.mark.parametrize(
    ("end_ms", "reason"), [(1_000, "evicted"), (2, None)], ids=["ran-on", "synchronous"]
)
def test_an_eviction_in_the_wait_takes_the_run_for_one_in_flight(
    end_ms: int, reason: str | None
) -> None:
    """The same trace, the oldest, evicted for two new runs (``evict_oldest``, room for two):
    in flight until quiet the two waits (``victims._root_ended``), ``evicted``.
    Was: judged as it came (complete), its rest ``late`` when it came. A synchronous run:
    judged as it came, unchanged."""
    buffer = TraceBuffer(TWO_EVICTING, ManualClock(), RecordingMetrics())
    buffer.add([_REQUEST_ROOT, _call(10, end_ms)])
    evicted = buffer.add([agent(1, None, "bot", 0, 5, trace_id=tid(n)) for n in (6, 7)])
    assert [(t.trace_id, t.incomplete_reason) for t in evicted] == [(RUN, reason)]
