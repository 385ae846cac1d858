"""Fifth review of the "wait" rule (review-wait5): the memory of a span dropped for a limit,
and what an outermost agent span waits for. Each test fails at 1673108.

A step dropped over its trace's cap keeps its wait for the run's agent span
(``_Trace.came``), in the room the rest of its request leaves (``HeldTraces._reserved``): that
room counted spans the request drops too, so a step lost its wait where a large span dropped
came after it, or a retry brought a duplicate (defects 1 and 5).
"""

from __future__ import annotations

import dataclasses

from assembly_support import SECOND, RecordingMetrics, agent, span, tool
from stall_support import tid
from wait_support import LIMITS, RUN, judge_timed

from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.model import ManualClock, SpanRecord, SpanRole

#: ``LIMITS`` (a buffer of 1,000 bytes) with a cap of 2 spans a trace.
_CAP = dataclasses.replace(LIMITS, max_spans_per_trace=2)
#: A request's spans, the cap: a child 3 and the root 9 (ended at 3 ms), which left a run
#: running in the background.
_REQUEST = [
    span(3, 9, SpanRole.OTHER, 0, 1, trace_id=RUN, size_bytes=10, parent_local=True),
    span(9, None, SpanRole.OTHER, 0, 3, trace_id=RUN, size_bytes=10),
]
#: The background run's agent span (under the root, local), ended last.
_BG_AGENT = agent(2, 9, "refund-bot", 1, 60_000, trace_id=RUN, size_bytes=10, parent_local=True)


def _step(n: int, size: int = 10) -> SpanRecord:
    """A step of the background run (under its agent span 2, local), over the cap."""
    return tool(n, 2, "lookup_order", 4, 7, trace_id=RUN, size_bytes=size, parent_local=True)


def _other(n: int, size: int) -> SpanRecord:
    """A root of another trace (``tid(n)``)."""
    return span(1, None, SpanRole.OTHER, 0, 1, trace_id=tid(n), size_bytes=size)


def _run_judged(
    clock: ManualClock, buffer: TraceBuffer, metrics: RecordingMetrics
) -> tuple[list[tuple[str | None, int]], int]:
    """20 s quiet (a slow step), the agent span, 300 s more: RUN's traces judged (reason,
    spans), and the spans dropped ``late``."""
    judged: list[tuple[bytes, str | None, int]] = []
    for gap, batch in ((20, [_BG_AGENT]), (300, [])):
        for _ in range(gap * 5):
            clock.now_ns += SECOND // 5
            judged += [(t.trace_id, t.incomplete_reason, len(t.spans)) for t in buffer.poll()]
        if batch:
            buffer.add(batch)
    run = [(reason, n) for trace_id, reason, n in judged if trace_id == RUN]
    return run, metrics.dropped["late"]


# --- 1 and 5. The room a drop's memory may take: the spans its request takes after it.


def test_control_over_the_cap_steps_big_one_first_keep_their_wait() -> None:
    """Control, unchanged: two steps over the cap in one request, the 900-byte one first:
    the wait is kept; after a 20 s quiet step the agent span comes: one trace, 3 spans."""
    judged = judge_timed([(_REQUEST, 1), ([_step(10, 900), _step(11)], 20), ([_BG_AGENT], 1)], _CAP)
    assert judged == ([("span_limit", 3, 28)], 0)  # the run ran on after its root: 7 s quiet


def test_a_step_over_the_cap_keeps_its_wait_whatever_the_request_drops_after_it() -> None:
    """The same two steps, the small one first; both dropped ``trace_span_limit``.
    Was: the room for the first's wait was what the request's spans after it would take,
    counting the second's 900 bytes (dropped, it takes none): 1,000 - 20 - 900 < its 333
    bytes, not kept, the trace ``parent_lost``: the root anchored once quiet 7 s, the
    request's part judged alone (2 spans), the agent span a trace of its own, ``timed_out``
    at 321 s.
    Now: only the spans the request takes are reserved (none here): as the control."""
    judged = judge_timed([(_REQUEST, 1), ([_step(11), _step(10, 900)], 20), ([_BG_AGENT], 1)], _CAP)
    assert judged == ([("span_limit", 3, 28)], 0)  # the run ran on after its root: 7 s quiet


def test_a_retried_request_does_not_lose_the_wait_of_its_step_over_the_cap() -> None:
    """backpressure (the default). A request brings the run's step over the cap (its wait
    kept) and another trace's 500-byte span (taken). The client retries it (its answer lost):
    the step again (its wait is the entry kept: it costs nothing) and the 500-byte span, a
    ``duplicate``.
    Was: the duplicate's 500 bytes were reserved: room 1,000 - 853 - 500 < 0, and the step,
    needing nothing, counted as a rejected one (``parent_lost``): the root anchored once
    quiet 7 s (2 spans), the agent span a trace of its own, ``timed_out``.
    Now: a duplicate is not reserved, and a retry changes nothing: one trace, 3 spans."""
    clock = ManualClock()
    metrics = RecordingMetrics()
    buffer = TraceBuffer(_CAP, clock, metrics)
    buffer.add(_REQUEST)
    request = [_step(10), _other(7, 500)]
    buffer.add(request)
    held = buffer.buffered_bytes
    buffer.add(request)  # the retry
    assert buffer.buffered_bytes == held
    assert _run_judged(clock, buffer, metrics) == ([("span_limit", 3)], 0)


def test_a_drop_leaves_the_room_the_spans_its_request_takes_after_it_need() -> None:
    """Unchanged: a step over the cap, then 750 bytes of another trace's spans the request
    takes: the step's wait (333 bytes) finds no room after them (1,000 - 20 - 750 < 333),
    and the step is not known; the spans are all held."""
    clock = ManualClock()
    metrics = RecordingMetrics()
    buffer = TraceBuffer(_CAP, clock, metrics)
    buffer.add(_REQUEST)
    buffer.add([_step(10), _other(7, 750)])
    assert (buffer.buffered_spans, buffer.buffered_bytes) == (3, 770)
    assert _run_judged(clock, buffer, metrics) == ([("span_limit", 2), ("timed_out", 1)], 0)


# --- 2. A dropped span that needs no memory is known whatever the room.


def test_a_step_whose_wait_is_kept_already_costs_nothing_and_stays_known() -> None:
    """evict_oldest. The run's first step over the cap keeps its wait for the agent span 2
    (a few hundred bytes). Another trace's span fills the buffer to 980 bytes. A request then
    brings a second step over the cap (same parent, same service: its wait is the entry kept
    already, it costs nothing) and a 400-byte span of a new trace (taken, evicting the other
    trace): the room left for the step is 1,000 - 980 - 400 < 0.
    Was: ``came`` refused what costs more than the room, and 0 > -380: the step counted as
    a rejected one (``parent_lost``): the root anchored once quiet 7 s (2 spans), and the
    agent span, after a 20 s step, was a trace of its own, ``timed_out``.
    Now: a span that needs no memory is known whatever the room: one trace, 3 spans."""
    clock = ManualClock()
    metrics = RecordingMetrics()
    buffer = TraceBuffer(dataclasses.replace(_CAP, overflow="evict_oldest"), clock, metrics)
    buffer.add(_REQUEST)
    buffer.add([_step(10)])
    kept = buffer.buffered_bytes - 20  # the wait kept
    assert kept > 0
    buffer.add([_other(7, 1000 - 20 - kept - 20)])
    assert buffer.buffered_bytes == 980
    buffer.add([_step(11), _other(8, 400)])
    assert buffer.buffered_bytes == 20 + kept + 400
    assert _run_judged(clock, buffer, metrics) == ([("span_limit", 3)], 0)


# --- 3. Without a root: each service's outermost agent spans, from the first that ended.

#: A triage agent of service "triage" (parent 100, remote: its caller not sent here), ended at
#: 3 ms, which left a refund run running in the background (agent span 4 under it, local;
#: its steps under 4, local, of "triage" too).
_TRIAGE = agent(1, 100, "triage", 0, 3, trace_id=RUN, size_bytes=10, service="triage")
_REFUND = agent(
    4, 1, "refund-bot", 1, 60_000, trace_id=RUN, size_bytes=10, parent_local=True, service="triage"
)


def _bg(n: int, end_ms: int) -> SpanRecord:
    step = tool(n, 4, "lookup_order", 4, end_ms, trace_id=RUN, size_bytes=10, parent_local=True)
    return dataclasses.replace(step, service="triage")


def _triage_run(first: list[SpanRecord]) -> tuple[list[tuple[str | None, int, int]], int]:
    """``first``, then the refund run's next steps, then its agent span, 5 s apart (a batch
    processor's schedule)."""
    return judge_timed(
        [
            (first, 5),
            ([_bg(11, 5_000)], 5),
            ([_bg(12, 10_000)], 5),
            ([_REFUND], 1),
        ]
    )


def test_control_a_remote_triage_agent_alone_waits_for_its_background_run() -> None:
    """Control, unchanged (review-wait4): one trace, complete, 5 spans, 2 s after the refund
    agent span came (at 17 s)."""
    assert _triage_run([_TRIAGE, _bg(10, 7)]) == ([(None, 5, 17)], 0)


def test_a_later_agent_of_another_service_does_not_excuse_triages_background_run() -> None:
    """The same, and a billing agent of another service, invoked by the same caller after
    triage answered (parent 101, remote), ended after triage (6 ms), in the first batch.
    Was: only the service of the outermost agent that ended last (billing) was read:
    triage's step waiting for its local parent (the refund agent span) was not, and the
    trace was anchored at the first quiet 2 s: triage, billing and one step; the refund
    run's other steps and agent span ``late`` (3).
    Now: each service's outermost agents are read: as the control, billing with it."""
    billing = agent(5, 101, "billing", 4, 6, trace_id=RUN, size_bytes=10, service="billing")
    assert _triage_run([_TRIAGE, billing, _bg(10, 7)]) == ([(None, 6, 17)], 0)


def test_a_second_turn_does_not_excuse_the_background_run_of_the_first() -> None:
    """A second triage turn (parent 101, remote, same service), ended at 4 s, after the
    refund run's first step (7 ms), in the first batch.
    Was (and with each service's outermost agent that ended last read): the second turn's
    end was read, the step ended before it, nothing waited: anchored at the first quiet 2 s
    (3 spans), the refund run's other steps and agent span ``late`` (3).
    Now: each service's outermost agent that ended first (the first turn) is read: one trace,
    complete, 6 spans, at 17 s."""
    second = agent(5, 101, "triage", 8, 4_000, trace_id=RUN, size_bytes=10, service="triage")
    assert _triage_run([_TRIAGE, second, _bg(10, 7)]) == ([(None, 6, 17)], 0)


def test_a_later_turn_whose_steps_all_came_anchors_at_the_first_quiet_wait() -> None:
    """Unchanged: two turns of one service, each with its step (local parent, its turn's
    agent span, held): nothing waits, judged at the first quiet 2 s."""
    second = agent(5, 101, "triage", 8, 20, trace_id=RUN, size_bytes=10, service="triage")
    steps = [
        dataclasses.replace(
            tool(n, turn, "lookup_order", 1, end, trace_id=RUN, parent_local=True),
            service="triage",
        )
        for n, turn, end in ((10, 1, 2), (11, 5, 15))
    ]
    assert judge_timed([([_TRIAGE, second, *steps], 1)]) == ([(None, 4, 2)], 0)


# --- 4. Admission reads the wait of a step its request drops.


def _full_buffer() -> tuple[TraceBuffer, RecordingMetrics]:
    """backpressure, 3 spans at most: the request's 2 spans (the cap) and another trace's
    span: full."""
    metrics = RecordingMetrics()
    buffer = TraceBuffer(dataclasses.replace(_CAP, max_buffered_spans=3), ManualClock(), metrics)
    buffer.add(_REQUEST)
    buffer.add([_other(7, 10)])
    return buffer, metrics


def test_control_the_agent_span_a_dropped_step_waits_for_is_refused_when_the_buffer_is_full() -> (
    None
):
    """Control, unchanged: the step comes over the cap alone (taken: dropped, it takes no
    room; its wait kept), then the agent span, which encloses it: it needs a slot, the buffer
    is full: refused (the client retries), nothing dropped ``buffer_full``."""
    buffer, metrics = _full_buffer()
    assert buffer.admit([_step(10)], 10) == []
    assert buffer.admit([_BG_AGENT], 10) is None
    assert metrics.dropped["buffer_full"] == 0


def test_a_step_and_its_agent_span_in_one_request_are_refused_when_the_buffer_is_full() -> None:
    """The step and the agent span in one request (a batch processor's one export).
    Was: admission judged the agent span as enclosing nothing held (the step's wait, kept by
    ``add``, was not read): dropped over the cap, taking no room: the request was admitted;
    ``add`` dropped the step, kept its wait (so the agent span encloses), and had no slot for
    the agent span: dropped ``buffer_full``, the run's anchor and its name lost.
    Now: refused, as the control's agent span is; nothing dropped."""
    buffer, metrics = _full_buffer()
    request = [_step(10), _BG_AGENT]
    assert (buffer.admit(request, 20), metrics.dropped["buffer_full"]) == (None, 0)
    assert buffer.buffered_spans == 3


def test_a_step_too_large_and_its_agent_span_in_one_request_are_refused_when_full() -> None:
    """The same, the step dropped too large (its wait kept as well).
    Was: admitted, the agent span dropped ``buffer_full``. Now: refused."""
    buffer, metrics = _full_buffer()
    request = [_step(10, 2000), _BG_AGENT]
    assert (buffer.admit(request, 2010), metrics.dropped["buffer_full"]) == (None, 0)


# --- 6. Spans dropped before their trace is held: the oldest traces' forgotten first.

#: Room for 4 traces (and 4 spans kept before their trace is held: ``assembly.limited``).
_FOUR = dataclasses.replace(LIMITS, max_buffered_bytes=10_000, max_traces=4)
#: A synchronous run: two steps and the agent span; its root (span 9) ends last, and is
#: dropped too large.
_SYNC = [
    tool(10, 2, "lookup_order", 4, 20, trace_id=RUN, size_bytes=10, parent_local=True),
    tool(11, 2, "lookup_order", 4, 40, trace_id=RUN, size_bytes=10, parent_local=True),
    agent(2, 9, "refund-bot", 1, 60, trace_id=RUN, size_bytes=10, parent_local=True),
]
_BIG_ROOT = span(9, None, SpanRole.OTHER, 0, 70, trace_id=RUN, size_bytes=20_000)


def _never_held(n: int) -> list[SpanRecord | None]:
    """Another trace's ``n`` spans, all dropped too large: it is never held."""
    return [
        span(
            20 + k, None if k == 0 else 20, SpanRole.OTHER, 0, 1, trace_id=tid(9), size_bytes=20_000
        )
        for k in range(n)
    ]


def test_control_a_synchronous_run_whose_root_was_dropped_before_it_was_held() -> None:
    """Control, unchanged: the root dropped too large first is known (``assembly.limited``):
    the run judged at the first quiet 2 s (3 s)."""
    assert judge_timed([([_BIG_ROOT], 1), (_SYNC, 1)], _FOUR) == ([("span_limit", 3, 3)], 0)


def test_a_trace_never_held_does_not_keep_the_budget_from_a_newer_one() -> None:
    """First another trace's 4 spans dropped too large (it never comes), then the run's.
    Was: the 4 kept filled the budget (``max_traces`` spans) for good, until 4 newer trace
    ids pushed them out: the run's root, dropped next, was not kept, ``parent_lost``, and
    the run waited the lost parent's 7 s (judged at 9 s); a run left in the background
    would have been cut there.
    Now: the oldest trace's spans are forgotten for it: judged at the first quiet 2 s, as
    the control (a second later: the other trace's batch came first)."""
    judged = judge_timed([(_never_held(4), 1), ([_BIG_ROOT], 1), (_SYNC, 1)], _FOUR)
    assert judged == ([("span_limit", 3, 4)], 0)


# --- 7. A dropped span that only a dropped span waited for restarts the checks.

#: The agent service's part of a trace whose root is another service's: the agent span 2
#: under a handoff's workflow span 3 (local), itself under a wrapper span 6 (local), whose
#: parent (100) is remote; a step 10 of the agent.
_A_PART = [
    tool(10, 2, "lookup_order", 4, 20, trace_id=RUN, size_bytes=10, parent_local=True),
    agent(2, 3, "refund-bot", 1, 60, trace_id=RUN, size_bytes=10, parent_local=True),
]


def _wrapper(n: int, parent: int, size: int, *, local: bool) -> SpanRecord:
    return span(n, parent, SpanRole.OTHER, 0, 70, trace_id=RUN, size_bytes=size, parent_local=local)


def test_control_two_dropped_wrappers_in_one_export_anchor_the_agent() -> None:
    """Control, unchanged: the workflow span and the wrapper above it both dropped too large,
    in the batch after the agent's: the walk passes through both and leaves at a remote
    parent: judged once quiet 2 s since the agent's batch (a drop is no arrival)."""
    wrappers = [_wrapper(3, 6, 2000, local=True), _wrapper(6, 100, 2000, local=False)]
    assert judge_timed([(_A_PART, 1), (wrappers, 1)]) == ([("span_limit", 2, 2)], 0)


def test_a_wrapper_dropped_after_the_check_found_no_anchor_restarts_the_checks() -> None:
    """The same two spans in two exports 3 s apart (a batch processor's schedule): the
    workflow span 3 dropped (its wait for 6, local, kept); the check 2 s later finds the walk
    stopped at 6, a local parent not come: next due at ``max_trace_age``. Then 6 is dropped.
    Was: ``came`` said nothing changed (no held span names 6; only the dropped span 3's
    wait does), so no check restarted: judged ``timed_out`` at 300 s, though its anchor came
    at 4 s.
    Now: the checks restart when 6 is dropped, as where a held span names it; the trace was
    quiet 2 s already: judged at once (4 s)."""
    judged = judge_timed(
        [
            (_A_PART, 1),
            ([_wrapper(3, 6, 2000, local=True)], 3),
            ([_wrapper(6, 100, 2000, local=False)], 1),
        ]
    )
    assert judged == ([("span_limit", 2, 4)], 0)


def test_control_a_held_wrapper_after_the_check_anchors_the_agent() -> None:
    """Control, unchanged: the same, the wrapper 6 small (held): judged 2 s after it (6 s)."""
    judged = judge_timed(
        [
            (_A_PART, 1),
            ([_wrapper(3, 6, 2000, local=True)], 3),
            ([_wrapper(6, 100, 10, local=False)], 1),
        ]
    )
    assert judged == ([("span_limit", 3, 6)], 0)
