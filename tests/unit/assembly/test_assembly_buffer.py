"""TraceBuffer: completion, bounds, eviction, duplicates and late spans (DESIGN §4)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from assembly_support import (
    OTHER_TRACE,
    SECOND,
    TRACE,
    RecordingMetrics,
    agent,
    ask,
    llm,
    sid,
    span,
    tool,
)

from toolwatch.assembly.buffer import TraceBuffer, runs_an_agent
from toolwatch.assembly.completed import CompletedTrace
from toolwatch.assembly.limits import ENCLOSING_SPANS, LOST_PARENT_WAIT_NS, AssemblyLimits
from toolwatch.model import ManualClock, SpanRecord, SpanRole

WAIT = 2 * SECOND
LIMITS = AssemblyLimits(
    completion_wait_ns=WAIT,
    max_trace_age_ns=60 * SECOND,
    late_span_window_ns=300 * SECOND,
)


def make(limits: AssemblyLimits = LIMITS) -> tuple[TraceBuffer, ManualClock, RecordingMetrics]:
    clock = ManualClock()
    metrics = RecordingMetrics()
    return TraceBuffer(limits, clock, metrics), clock, metrics


def run_spans(trace_id: bytes = TRACE, size: int = 10) -> list[SpanRecord]:
    """An agent run: root agent span with two tool spans, each ``size`` bytes."""
    return [
        agent(1, None, "refund-bot", 0, 100, trace_id=trace_id, size_bytes=size),
        tool(2, 1, "lookup_order", 1, 10, trace_id=trace_id, size_bytes=size),
        tool(3, 1, "issue_refund", 11, 20, trace_id=trace_id, size_bytes=size),
    ]


def trace_of(n: int, spans: int = 1, size: int = 10) -> list[SpanRecord]:
    """Trace number ``n``: ``spans`` non-root spans (never ready by itself)."""
    trace_id = n.to_bytes(16, "big")
    return [tool(i + 2, 1, "t", 0, 1, trace_id=trace_id, size_bytes=size) for i in range(spans)]


def summary(done: list[CompletedTrace]) -> list[tuple[bytes, int, bool, str | None]]:
    return [(t.trace_id, len(t.spans), t.complete, t.incomplete_reason) for t in done]


def test_trace_is_ready_after_the_quiet_period_not_before() -> None:
    buffer, clock, metrics = make()
    buffer.add(run_spans())

    clock.advance(1.999)
    assert buffer.poll() == []
    clock.advance(0.001)
    (done,) = buffer.poll()
    assert done == CompletedTrace(
        trace_id=TRACE,
        spans=tuple(run_spans()),
        complete=True,
        incomplete_reason=None,
        first_arrival_ns=1 * SECOND,
        last_arrival_ns=1 * SECOND,
    )
    assert (metrics.built, buffer.buffered_traces, buffer.buffered_spans) == (3, 0, 0)


def test_a_new_span_restarts_the_quiet_period() -> None:
    buffer, clock, _ = make()
    root, *children = run_spans()
    buffer.add([root])
    clock.advance(1.5)
    buffer.add(children)

    clock.advance(1.5)
    assert buffer.poll() == []
    clock.advance(0.5)
    assert summary(buffer.poll()) == [(TRACE, 3, True, None)]


def test_quiet_trace_without_its_root_is_not_ready() -> None:
    buffer, clock, _ = make()
    buffer.add(run_spans()[1:])

    clock.advance(10)
    assert buffer.poll() == []
    assert buffer.buffered_spans == 2


def test_outermost_agent_stands_in_for_a_missing_root() -> None:
    buffer, clock, _ = make()
    remote_parent = 99  # the root lives in an upstream service that exports elsewhere
    buffer.add(
        [
            span(5, 1, SpanRole.OTHER, 0, 1, name="turn"),
            agent(1, remote_parent, "refund-bot", 0, 100),
            tool(2, 5, "lookup_order", 1, 10),
        ]
    )

    clock.advance(2)
    assert summary(buffer.poll()) == [(TRACE, 3, True, None)]


def test_an_agent_under_a_local_parent_not_yet_arrived_waits_for_it() -> None:
    """A handoff (openai-agents): triage ends, hands off, and the workflow span above both
    agents ends last. Its spans say their parent is local (SpanFlags), so triage does not
    anchor the trace: evaluated then, the refund agent's spans would arrive late."""
    buffer, clock, metrics = make()
    workflow = 9
    buffer.add(
        [
            agent(1, workflow, "triage", 0, 100, parent_local=True),
            tool(2, 1, "transfer_to_refund_agent", 90, 95, parent_local=True),
        ]
    )
    clock.advance(20)  # a refund agent that takes its time (under local_parent_wait)
    assert buffer.poll() == []

    buffer.add(
        [
            agent(3, workflow, "refund", 100, 30_000, parent_local=True),
            tool(4, 3, "issue_refund", 200, 300, parent_local=True),
            span(workflow, None, SpanRole.OTHER, 0, 30_001, name="Agent workflow"),
        ]
    )
    clock.advance(2)
    assert summary(buffer.poll()) == [(TRACE, 5, True, None)]
    assert metrics.dropped == {}


def test_a_local_parent_that_never_comes_is_taken_as_gone_after_its_wait() -> None:
    """Exported elsewhere (a second tracer provider) or filtered out: the agent anchors once
    the trace has been quiet for local_parent_wait, complete, not at max_trace_age."""
    limits = dataclasses.replace(LIMITS, local_parent_wait_ns=10 * SECOND)
    buffer, clock, _ = make(limits)
    buffer.add([agent(1, 9, "refund-bot", 0, 100, parent_local=True), tool(2, 1, "t", 1, 9)])
    clock.advance(9.999)
    assert buffer.poll() == []
    buffer.add([tool(3, 1, "t", 10, 20)])  # a span restarts the wait
    clock.advance(9.999)
    assert buffer.poll() == []
    clock.advance(0.001)
    assert summary(buffer.poll()) == [(TRACE, 3, True, None)]


def test_by_default_a_local_parent_is_waited_for_until_max_age() -> None:
    """A live run is quiet for as long as one slow step runs (a reasoning model's call):
    taking its parent as gone would cut it in two, the rest dropped as late."""
    buffer, clock, _ = make()
    buffer.add([agent(1, 9, "refund-bot", 0, 100, parent_local=True)])
    clock.advance(59.999)
    assert buffer.poll() == []
    clock.advance(0.001)
    assert summary(buffer.poll()) == [(TRACE, 1, False, "timed_out")]


def test_a_trace_without_even_a_local_anchor_still_waits_for_max_age() -> None:
    buffer, clock, _ = make(dataclasses.replace(LIMITS, local_parent_wait_ns=10 * SECOND))
    buffer.add([tool(2, 1, "t", 1, 9, parent_local=True)])
    clock.advance(59.999)
    assert buffer.poll() == []
    clock.advance(0.001)
    assert summary(buffer.poll()) == [(TRACE, 1, False, "timed_out")]


@pytest.mark.parametrize(
    ("root_end", "step", "more"),
    [(5, (10, 20), 5), (50, (6, 20), 0)],
    ids=["the first step ended after the root", "it ended before the root"],
)
def test_a_root_that_ended_before_its_run_waits_for_the_local_parents_its_spans_await(
    root_end: int, step: tuple[int, int], more: int
) -> None:
    """A request that answered at once and left its agent running: its server span, the
    root, comes with the first turn's spans, whose parent (the agent span, still running)
    is local. The trace waits for it across a quiet period, then is ready as any. A first
    step that ended before the root did (a fast tool run while the response went out) holds
    it too (review: the root anchored at once, and the rest of the run was dropped late).
    Was: ready at the first quiet ``completion_wait`` once the agent span came.
    Now: where the agent span (the root's service) ended after the root, as a run left
    running in the background, once quiet ``lost_parent_wait`` more (``_Trace.ran_on``)."""
    buffer, clock, metrics = make()
    buffer.add(
        [
            span(9, None, SpanRole.OTHER, 0, root_end, name="POST /support"),
            tool(2, 1, "search_kb", *step, parent_local=True),
        ]
    )
    clock.advance(4)  # the model thinks: quiet for longer than completion_wait
    assert buffer.poll() == []

    buffer.add(
        [
            tool(3, 1, "issue_refund", 30, 40, parent_local=True),
            agent(1, 9, "refund-bot", 6, 50, parent_local=True),
        ]
    )
    clock.advance(2)
    if more:
        assert buffer.poll() == []
        clock.advance(more)
    assert summary(buffer.poll()) == [(TRACE, 4, True, None)]
    assert metrics.dropped == {}


def test_a_root_anchors_a_trace_that_lost_a_span_once_quiet_the_lost_parents_wait() -> None:
    """A span rejected at ingest may be the parent the others wait for: the root anchors the
    trace, once quiet ``completion_wait`` and the lost parent's wait, as without the rejection
    (a sync request: its step ended before the root), and judges it ``span_limit``.
    Was: judged at the next quiet ``completion_wait`` (2 s), whatever its spans await, which
    cut a run left running in the background in two
    (``test_assembly_rejected_step_background_run``).
    Now: not before 7 s (``completion_wait`` + ``lost_parent_wait``), judged then."""
    buffer, clock, _ = make()
    buffer.add(
        [
            span(9, None, SpanRole.OTHER, 0, 50, name="POST /support"),
            tool(2, 1, "search_kb", 10, 20, parent_local=True),
        ]
    )
    buffer.flag_rejected([TRACE])
    clock.advance(2)
    assert buffer.poll() == []
    clock.advance(LOST_PARENT_WAIT_NS / 1e9 - 0.001)
    assert buffer.poll() == []
    clock.advance(0.001)
    assert summary(buffer.poll()) == [(TRACE, 2, False, "span_limit")]


@pytest.mark.parametrize(
    ("server_parent_local", "anchored"),
    [(False, True), (True, False)],
    ids=["server-span-under-a-remote-caller", "server-span-under-a-local-span"],
)
def test_a_chain_that_leaves_the_buffer_anchors_only_at_a_parent_not_said_local(
    server_parent_local: bool, anchored: bool
) -> None:
    """The agent's own parent (an HTTP server span) has arrived: what counts is the parent
    of the last span the walk reached."""
    buffer, clock, _ = make()
    buffer.add(
        [
            span(
                5, 99, SpanRole.OTHER, 0, 200, name="POST /chat", parent_local=server_parent_local
            ),
            agent(1, 5, "refund-bot", 1, 100, parent_local=True),
        ]
    )
    clock.advance(2)
    assert bool(buffer.poll()) is anchored


CALLER = 99  # a span of the calling service, which exports elsewhere


def model_loop(flags: bool = True) -> list[SpanRecord]:
    """A run that writes no AGENT span (a loop on a plain model client): a model call that
    requests a tool, its execution and a last model call, then their loop's span, below the
    caller's. ``flags``: its calls say their parent is local (the SDKs since 2024), else they
    say nothing."""
    return [
        llm(2, 1, 1, 10, ask("lookup_order", "call_1", {}), parent_local=flags),
        tool(3, 1, "lookup_order", 11, 20, parent_local=flags),
        llm(4, 1, 21, 30, parent_local=flags),
        span(1, CALLER, SpanRole.OTHER, 0, 31, name="support_agent"),  # parent not said local
    ]


def test_a_run_without_an_agent_span_is_anchored_by_what_encloses_its_model_calls() -> None:
    buffer, clock, _ = make()
    *calls, loop = model_loop()
    buffer.add(calls)
    clock.advance(2)
    assert buffer.poll() == []  # the loop's span, said local, is on its way
    buffer.add([loop])
    clock.advance(2)
    assert summary(buffer.poll()) == [(TRACE, 4, True, None)]


def test_what_encloses_model_calls_anchors_once_a_call_stopped_for_tools() -> None:
    """A loop's calls that requested tools say so without content capture too: the finish
    reason (``tool_calls``) alone anchors, as does a call that ran its tools inside it
    (google-genai's automatic function calling: TOOL spans below the call, ``STOP``)."""
    for calls in (
        [llm(2, 1, 1, 10, finish_reasons=("TOOL_CALLS",), parent_local=True)],
        [
            tool(3, 2, "lookup_order", 2, 5, parent_local=True),
            llm(2, 1, 1, 10, finish_reasons=("STOP",), parent_local=True),
        ],
    ):
        buffer, clock, _ = make()
        buffer.add([*calls, span(1, CALLER, SpanRole.OTHER, 0, 31, name="support_agent")])
        clock.advance(2)
        assert summary(buffer.poll()) == [(TRACE, len(calls) + 1, True, None)]


def test_a_service_whose_model_call_requested_no_tool_waits_for_its_caller() -> None:
    """A service called as another agent's tool (a summarizer on a plain client) writes a
    model call, requesting no tool, below its server span: its part of the trace, exported
    by its own batch processor, arrives before the caller's run. Anchored on its own, it was
    evaluated alone and the caller's run, its AGENT span too, was dropped as late."""
    buffer, clock, metrics = make()
    server = span(11, 3, SpanRole.OTHER, 5, 20, name="POST /summarize")  # parent: remote
    buffer.add([llm(12, 11, 6, 19, finish_reasons=("stop",), parent_local=True), server])
    clock.advance(2)
    assert buffer.poll() == []
    buffer.add(
        [
            llm(2, 1, 1, 4, ask("summarize_ticket", "call_1", {})),
            tool(3, 1, "summarize_ticket", 4, 21),
            agent(1, None, "refund-bot", 0, 30),
        ]
    )
    clock.advance(2)
    assert summary(buffer.poll()) == [(TRACE, 5, True, None)]
    assert metrics.dropped == {}


def test_a_model_call_alone_does_not_anchor_under_a_parent_said_remote() -> None:
    """A model call is one step of its run, never its end: the next may come after a quiet
    longer than completion_wait (a slow tool)."""
    buffer, clock, _ = make()
    buffer.add([llm(2, CALLER, 1, 10, parent_local=False), llm(4, CALLER, 21, 30)])
    clock.advance(59.999)
    assert buffer.poll() == []
    clock.advance(0.001)
    assert summary(buffer.poll()) == [(TRACE, 2, False, "timed_out")]


def test_a_model_calls_parent_not_here_is_taken_as_gone_after_local_parent_wait() -> None:
    buffer, clock, _ = make(dataclasses.replace(LIMITS, local_parent_wait_ns=10 * SECOND))
    buffer.add(model_loop()[:3])
    clock.advance(9.999)
    assert buffer.poll() == []
    clock.advance(0.001)
    assert summary(buffer.poll()) == [(TRACE, 3, True, None)]


def test_without_flags_the_span_above_model_calls_does_not_anchor() -> None:
    """Older SDKs say nothing of a parent's place. The span above model calls is then as often
    a step of an agent run whose AGENT span ends last (Strands' event loop cycle, Vercel's
    ai.generateText) as a loop's own span: taken as the anchor, the agent span would come
    after its run was evaluated, and be dropped as late."""
    buffer, clock, metrics = make()
    *calls, cycle = model_loop(flags=False)
    buffer.add([*calls, dataclasses.replace(cycle, parent_span_id=sid(7), name="cycle")])
    clock.advance(2)
    assert buffer.poll() == []
    buffer.add([agent(7, None, "refund-bot", 0, 40)])
    clock.advance(2)
    assert summary(buffer.poll()) == [(TRACE, 5, True, None)]
    assert metrics.dropped == {}


def test_agent_invoked_as_a_tool_does_not_stand_in_for_the_root() -> None:
    buffer, clock, _ = make()
    buffer.add([tool(2, 1, "ask_billing", 5, 50), agent(3, 2, "billing-bot", 6, 49)])

    clock.advance(2)
    assert buffer.poll() == []


def test_trace_is_emitted_timed_out_at_max_age() -> None:
    buffer, clock, _ = make()
    buffer.add(run_spans()[1:])

    clock.advance(59.999)
    assert buffer.poll() == []
    clock.advance(0.001)
    assert summary(buffer.poll()) == [(TRACE, 2, False, "timed_out")]


def test_by_default_a_run_of_four_minutes_is_judged_whole() -> None:
    """A reasoning model's run of a few steps takes minutes: at a one-minute age it was cut,
    judged on its first calls, and its refund dropped as late."""
    buffer, clock, metrics = make(AssemblyLimits())
    spans = run_spans()
    buffer.add(spans[1:2])  # the lookup, at the start
    clock.advance(230)  # a long reasoning step, then the refund
    assert buffer.poll() == []
    buffer.add(spans[2:])
    clock.advance(10)
    buffer.add(spans[:1])  # the run's agent span, ending last
    clock.advance(2)
    assert summary(buffer.poll()) == [(TRACE, 3, True, None)]
    assert metrics.dropped == {}


def test_trace_that_never_goes_quiet_times_out() -> None:
    buffer, clock, _ = make()
    buffer.add(run_spans())
    for n in range(60):
        clock.advance(1)
        buffer.add([tool(10 + n, 1, "poll", 0, 1)])
        done = buffer.poll()
        if done:
            break

    assert summary(done) == [(TRACE, 63, False, "timed_out")]
    assert clock.now_ns == 61 * SECOND


def test_spans_over_the_per_trace_limit_are_dropped_and_flag_the_trace() -> None:
    buffer, clock, metrics = make(dataclasses.replace(LIMITS, max_spans_per_trace=2))
    buffer.add(run_spans())

    clock.advance(2)
    assert summary(buffer.poll()) == [(TRACE, 2, False, "span_limit")]
    assert metrics.dropped == {"trace_span_limit": 1}


def test_a_run_whose_own_span_alone_comes_past_the_span_limit_is_held_whole() -> None:
    buffer, clock, metrics = make(dataclasses.replace(LIMITS, max_spans_per_trace=2))
    root, *calls = run_spans()
    buffer.add([*calls, root])  # in end order, as exporters send

    clock.advance(2)
    assert summary(buffer.poll()) == [(TRACE, 3, True, None)]
    assert metrics.dropped == {}


def test_past_the_span_limit_the_spans_enclosing_the_run_are_held_and_anchor_it() -> None:
    """A run too long: its root, its agent and the span between end last, past the cap.
    Dropped, its trace had no anchor: held for max_trace_age, judged timed_out, not
    span_limit, its agent name lost with its agent span. Now they are held, what else came
    past the cap dropped, and the trace is judged span_limit after the wait."""
    buffer, clock, metrics = make(dataclasses.replace(LIMITS, max_spans_per_trace=4))
    steps = [tool(10 + n, 2, "poll", n, n + 1) for n in range(6)]
    enclosing = [
        span(3, 2, SpanRole.OTHER, 0, 90, name="turn"),  # not the parent of a span held
        agent(2, 1, "refund-bot", 0, 99),
        span(1, None, SpanRole.OTHER, 0, 100, name="POST /chat"),
    ]
    refused: dict[str, int] = {}
    buffer.add([*steps, *enclosing], refused)
    assert refused == {"trace_span_limit": 3}  # two steps past the cap, and the turn

    clock.advance(2)
    (done,) = buffer.poll()
    assert (done.complete, done.incomplete_reason) == (False, "span_limit")
    assert [s.span_id for s in done.spans[4:]] == [sid(2), sid(1)]
    assert (metrics.built, metrics.dropped) == (6, {"trace_span_limit": 3})


def test_a_root_that_the_span_limit_drops_all_the_same_still_anchors_its_trace() -> None:
    """Past ENCLOSING_SPANS more, a root is dropped too, but it has arrived: the trace is
    ready after the wait, span_limit, not held until max_trace_age."""
    buffer, clock, _ = make(dataclasses.replace(LIMITS, max_spans_per_trace=1))
    chain = [span(n, n - 1, SpanRole.OTHER, 0, 100 - n) for n in range(ENCLOSING_SPANS + 2, 1, -1)]
    buffer.add([*chain, agent(1, None, "refund-bot", 0, 100)])

    clock.advance(2)
    assert summary(buffer.poll()) == [(TRACE, 1 + ENCLOSING_SPANS, False, "span_limit")]


def test_a_root_too_large_to_hold_still_anchors_its_trace() -> None:
    """In a buffer of 1,000 bytes. Was: of 100. Now: what the trace keeps of its dropped
    root is counted in its bytes (176, ``_Trace.came``), and in 100 bytes that has no room:
    the root is not known then (``parent_lost``), and anchors the trace only once quiet the
    lost parent's wait (``test_assembly_dropped_bytes.py``)."""
    buffer, clock, metrics = make(dataclasses.replace(LIMITS, max_buffered_bytes=1000))
    root, *calls = run_spans()
    buffer.add([*calls, dataclasses.replace(root, size_bytes=1001)])

    clock.advance(2)
    assert summary(buffer.poll()) == [(TRACE, 2, False, "span_limit")]
    assert metrics.dropped == {"span_too_large": 1}


def test_spans_dropped_for_a_limit_or_late_are_counted_for_the_sender_duplicates_are_not() -> None:
    buffer, clock, metrics = make(dataclasses.replace(LIMITS, max_spans_per_trace=2))
    refused: dict[str, int] = {}
    buffer.add(run_spans(), refused)
    buffer.add(run_spans()[:1], refused)  # a retry of a held span: a duplicate
    assert refused == {"trace_span_limit": 1}

    clock.advance(2)
    assert len(buffer.poll()) == 1
    late: dict[str, int] = {}
    buffer.add(run_spans(), late)  # the trace was evaluated: these are not taken
    assert late == {"late": 3}
    assert metrics.dropped == {"trace_span_limit": 1, "duplicate": 1, "late": 3}


def test_evict_oldest_evicts_by_first_arrival_when_traces_are_full() -> None:
    limits = dataclasses.replace(LIMITS, max_traces=2, overflow="evict_oldest")
    buffer, clock, metrics = make(limits)
    buffer.add(trace_of(1))
    clock.advance(0.1)
    buffer.add(trace_of(2))
    buffer.add(trace_of(1, spans=2))  # more spans for trace 1 do not make it younger

    assert buffer.has_room(trace_of(9, spans=100), 10**9) is True
    evicted = buffer.add(trace_of(3))
    assert summary(evicted) == [((1).to_bytes(16, "big"), 2, False, "evicted")]
    assert metrics.evicted == {"max_traces": 1}
    assert buffer.buffered_traces == 2


def test_next_due_is_the_earliest_deadline_and_none_when_nothing_is_buffered() -> None:
    buffer, clock, _ = make()
    assert buffer.next_due_ns() is None
    buffer.add(run_spans())
    first_due = clock.now_ns + WAIT
    assert buffer.next_due_ns() == first_due
    clock.advance(1)
    buffer.add(run_spans(OTHER_TRACE))  # due later: the earliest stays
    assert buffer.next_due_ns() == first_due
    clock.advance(1)
    assert [t.trace_id for t in buffer.poll()] == [TRACE]
    assert buffer.next_due_ns() == first_due + SECOND  # the other trace's
    clock.advance(1)
    assert len(buffer.poll()) == 1
    assert buffer.next_due_ns() is None


def test_overdue_is_how_long_the_earliest_check_waited_past_its_time() -> None:
    buffer, clock, _ = make()
    assert buffer.overdue_ns() == 0  # nothing buffered
    buffer.add(run_spans())
    buffer.add(run_spans(OTHER_TRACE)[1:])  # no root: a run still going
    clock.advance(2)
    assert buffer.overdue_ns() == 0  # due now
    clock.advance(3)
    assert buffer.overdue_ns() == 3 * SECOND  # no poll came
    assert [t.trace_id for t in buffer.poll()] == [TRACE]
    assert buffer.overdue_ns() == 0
    # The rootless run waits for its maximum age (60 s), not overdue while it does.
    clock.advance(50)
    assert buffer.overdue_ns() == 0
    clock.advance(10)  # 65 s after it arrived
    assert buffer.overdue_ns() == 5 * SECOND
    assert summary(buffer.poll()) == [(OTHER_TRACE, 2, False, "timed_out")]
    assert buffer.overdue_ns() == 0


def test_evict_oldest_takes_the_oldest_live_trace_after_others_left() -> None:
    limits = dataclasses.replace(
        LIMITS, max_traces=3, overflow="evict_oldest", late_span_window_ns=0
    )
    buffer, clock, _ = make(limits)
    for n in (1, 2, 3):
        buffer.add(trace_of(n))
    clock.advance(61)
    assert len(buffer.poll()) == 3  # all three timed out and left
    buffer.add(trace_of(4))
    buffer.add(trace_of(1))  # trace 1 again (not remembered): it arrives after 4
    buffer.add(trace_of(5))

    evicted = buffer.add(trace_of(6)) + buffer.add(trace_of(7))
    assert [t.trace_id for t in evicted] == [(4).to_bytes(16, "big"), (1).to_bytes(16, "big")]
    assert buffer.buffered_traces == 3


def test_backpressure_reports_no_room_when_a_bound_would_break() -> None:
    limits = dataclasses.replace(LIMITS, max_traces=2, max_buffered_spans=4, max_buffered_bytes=100)
    buffer, _, _ = make(limits)
    buffer.add(trace_of(1, spans=2, size=30))

    assert buffer.has_room(trace_of(2, spans=2), 40) is True
    assert buffer.has_room(trace_of(2, spans=3), 10) is False  # spans
    assert buffer.has_room(trace_of(2), 41) is False  # bytes
    buffer.add(trace_of(2))
    assert buffer.has_room(trace_of(3), 1) is False  # traces
    assert buffer.has_room(trace_of(2), 1) is True  # a trace in flight may go on


def test_backpressure_counts_the_traces_a_request_would_start() -> None:
    # Room for two more traces: a request starting three is refused, not let in to evict.
    limits = dataclasses.replace(LIMITS, max_traces=3, max_buffered_spans=100)
    buffer, _, metrics = make(limits)
    buffer.add(trace_of(1))
    three_runs = trace_of(2) + trace_of(3) + trace_of(4)
    assert buffer.has_room(three_runs, 30) is False
    assert buffer.has_room(trace_of(2) + trace_of(3) + trace_of(1), 30) is True
    assert buffer.has_room(trace_of(2, spans=5), 50) is True  # five spans, one new trace
    # More new traces than the buffer can ever hold: let through, add takes what fits.
    assert buffer.has_room(three_runs + trace_of(5), 40) is True
    assert metrics.evicted == {}


def test_backpressure_lets_through_a_request_bigger_than_the_whole_buffer() -> None:
    buffer, _, _ = make(dataclasses.replace(LIMITS, max_buffered_spans=4))
    buffer.add(trace_of(1, spans=4))

    assert buffer.has_room(trace_of(2, spans=5), 10) is True


def test_backpressure_leaves_a_span_bigger_than_the_buffer_out_of_the_room_asked() -> None:
    # Counted, it made an ordinary request one that "can never fit", let through to evict.
    buffer, _, _ = make(dataclasses.replace(LIMITS, max_buffered_bytes=100))
    buffer.add(trace_of(1, size=90))
    too_large = trace_of(3, size=101)

    assert buffer.has_room(trace_of(2, size=20), 20) is False
    assert buffer.has_room(too_large + trace_of(2, size=20), 121) is False
    assert buffer.has_room(too_large + trace_of(2, size=10), 111) is True
    assert buffer.has_room(too_large, 101) is True  # dropped, without evicting
    # Nor does it start a trace: one more new trace than there is room for is the one it
    # would have been.
    few_traces = dataclasses.replace(LIMITS, max_traces=2, max_buffered_bytes=100)
    buffer, _, _ = make(few_traces)
    buffer.add(trace_of(1))
    assert buffer.has_room(too_large + trace_of(2) + trace_of(1), 121) is True
    assert buffer.has_room(trace_of(3, size=10) + trace_of(2) + trace_of(1), 30) is False


def test_add_without_room_under_backpressure_drops_what_does_not_fit_and_evicts_nothing() -> None:
    # A request let through as bigger than the buffer, or added without asking: runs in
    # flight are not judged early, as the operator chose.
    limits = dataclasses.replace(LIMITS, max_buffered_spans=3)
    buffer, clock, metrics = make(limits)
    buffer.add(trace_of(1, spans=2))

    assert buffer.add(run_spans(OTHER_TRACE)) == []
    assert (metrics.evicted, metrics.dropped) == ({}, {"buffer_full": 2})
    assert (buffer.buffered_traces, buffer.buffered_spans) == (2, 3)
    clock.advance(2)
    assert summary(buffer.poll()) == [(OTHER_TRACE, 1, False, "span_limit")]


def test_add_without_room_under_evict_oldest_evicts_to_stay_bounded() -> None:
    limits = dataclasses.replace(LIMITS, max_buffered_spans=3, overflow="evict_oldest")
    buffer, _, metrics = make(limits)
    buffer.add(trace_of(1, spans=2))

    evicted = buffer.add(trace_of(2, spans=2))
    assert summary(evicted) == [((1).to_bytes(16, "big"), 2, False, "evicted")]
    assert metrics.evicted == {"max_buffered_spans": 1}
    assert buffer.buffered_spans == 2


def test_byte_bound_evicts_the_oldest_traces() -> None:
    limits = dataclasses.replace(LIMITS, max_buffered_bytes=100, overflow="evict_oldest")
    buffer, _, metrics = make(limits)
    buffer.add(trace_of(1, size=40))
    buffer.add(trace_of(2, size=40))

    evicted = buffer.add(trace_of(3, size=50))
    assert [t.trace_id for t in evicted] == [(1).to_bytes(16, "big")]
    assert metrics.evicted == {"max_buffered_bytes": 1}
    assert buffer.buffered_bytes == 90


def test_trace_filling_the_whole_buffer_drops_its_overflow() -> None:
    buffer, clock, metrics = make(dataclasses.replace(LIMITS, max_buffered_spans=2))

    assert buffer.add(run_spans()) == []
    assert metrics.dropped == {"buffer_full": 1}
    clock.advance(2)
    assert summary(buffer.poll()) == [(TRACE, 2, False, "span_limit")]


def test_span_bigger_than_the_buffer_is_dropped_without_evicting() -> None:
    buffer, _, metrics = make(dataclasses.replace(LIMITS, max_buffered_bytes=100))
    buffer.add(trace_of(1, size=40))

    assert buffer.add(trace_of(2, size=101)) == []
    assert metrics.dropped == {"span_too_large": 1}
    assert (buffer.buffered_traces, buffer.buffered_bytes) == (1, 40)


def test_a_span_dropped_before_its_trace_arrived_still_flags_the_trace() -> None:
    # The tool span is exported first and is too large; the rest of the run comes later.
    buffer, clock, metrics = make(dataclasses.replace(LIMITS, max_buffered_bytes=100))
    root, lookup, refund = run_spans()
    big = dataclasses.replace(lookup, size_bytes=101)
    assert buffer.add([big]) == []
    assert (metrics.dropped, buffer.buffered_traces) == ({"span_too_large": 1}, 0)
    buffer.add([root, refund])
    clock.advance(7)  # Was: 2 s. Now: a trace with a span not known (rejected,
    # or dropped before its trace came) waits the lost parent's wait too: 7 s
    assert summary(buffer.poll()) == [(TRACE, 2, False, "span_limit")]


def test_a_span_rejected_at_ingest_flags_its_trace_buffered_or_still_to_come() -> None:
    # Judged whole without it, the run is compared with its golden case or shadow source,
    # where the missing call reads as drift.
    buffer, clock, metrics = make()
    buffer.add(run_spans())
    buffer.flag_rejected([TRACE, OTHER_TRACE])  # the other run's spans come later
    buffer.add(run_spans(OTHER_TRACE))
    clock.advance(7)  # Was: 2 s. Now: a trace with a span not known (rejected,
    # or dropped before its trace came) waits the lost parent's wait too: 7 s
    assert sorted(summary(buffer.poll())) == sorted(
        [(TRACE, 3, False, "span_limit"), (OTHER_TRACE, 3, False, "span_limit")]
    )
    assert metrics.dropped == {}  # counted rejected at ingest, not dropped here


def test_a_span_rejected_for_a_trace_already_evaluated_flags_nothing() -> None:
    # Its id is not kept among those to flag: a trace of that id after the late window is
    # another run, whole.
    buffer, clock, _ = make()
    buffer.add(run_spans())
    clock.advance(2)
    assert len(buffer.poll()) == 1
    buffer.flag_rejected([TRACE])
    clock.advance(302)  # past the late window: the id is forgotten
    buffer.add(run_spans())
    clock.advance(2)
    assert summary(buffer.poll()) == [(TRACE, 3, True, None)]


def test_ids_of_traces_whose_spans_were_dropped_first_are_remembered_boundedly() -> None:
    """A flood of oversized spans, each of a new trace, must not grow memory: past
    max_traces such ids the oldest is forgotten (its trace, if it comes, is not flagged)."""
    limits = dataclasses.replace(LIMITS, max_buffered_bytes=100, max_traces=4)
    buffer, clock, _ = make(limits)
    for n in range(1_000):
        buffer.add([dataclasses.replace(trace_of(n)[0], size_bytes=101)])
    first, last = (n.to_bytes(16, "big") for n in (0, 999))
    buffer.add(run_spans(first))
    buffer.add(run_spans(last))
    clock.advance(7)  # Was: 2 s. Now: a trace with a span not known (rejected,
    # or dropped before its trace came) waits the lost parent's wait too: 7 s
    assert sorted(summary(buffer.poll())) == [
        (first, 3, True, None),  # forgotten: 996 ids came after it
        (last, 3, False, "span_limit"),
    ]


def test_duplicate_spans_are_counted_once() -> None:
    buffer, clock, metrics = make()
    spans = run_spans()
    buffer.add(spans)
    buffer.add(spans[:2])

    clock.advance(2)
    assert summary(buffer.poll()) == [(TRACE, 3, True, None)]
    assert (metrics.dropped, metrics.built) == ({"duplicate": 2}, 3)


def test_late_spans_within_the_window_are_dropped_and_never_rebuilt() -> None:
    buffer, clock, metrics = make()
    buffer.add(run_spans())
    clock.advance(2)
    buffer.poll()

    clock.advance(299)
    buffer.add([tool(7, 1, "late_tool", 30, 40), run_spans()[0]])
    clock.advance(100)
    assert buffer.poll() == []
    assert metrics.dropped == {"late": 2}
    assert buffer.buffered_spans == 0


def test_a_trace_that_is_no_agent_run_is_not_remembered_its_agent_part_is_built() -> None:
    """A gateway's part of a trace comes first (no agent, model or tool span), the agent
    service's part of it later: each span ends once, the agent's built, nothing late."""
    buffer, clock, metrics = make()
    gateway = [span(8, None, SpanRole.OTHER, 0, 200), span(9, 8, SpanRole.OTHER, 1, 199)]
    buffer.add(gateway)
    clock.advance(2)
    assert summary(buffer.poll()) == [(TRACE, 2, True, None)]
    assert buffer.remembered_traces == 0

    agent_span, *calls = run_spans()
    buffer.add([dataclasses.replace(agent_span, parent_span_id=sid(9)), *calls])  # below span 9
    clock.advance(2)
    (done,) = buffer.poll()
    assert (done.agent_run, done.complete, len(done.spans)) == (True, True, 3)
    buffer.add(gateway)  # a retry: the agent run's id is remembered now
    assert (metrics.built, metrics.dropped) == (3, {"not_an_agent_run": 2, "late": 2})


def test_a_trace_id_is_forgotten_when_the_window_has_passed_since_its_bucket_ended() -> None:
    """Ids are forgotten by whole buckets of 1/256 of the window (1 s of 256 s here): never
    before the window has passed, at most a bucket after. Emitted at 3.5 s, the id is
    forgotten at 4 s + 256 s."""
    buffer, clock, metrics = make(dataclasses.replace(LIMITS, late_span_window_ns=256 * SECOND))
    buffer.add(run_spans())
    clock.advance(2.5)
    assert len(buffer.poll()) == 1
    emitted = clock()
    assert emitted == 3_500_000_000

    for n, now in enumerate([emitted + 256 * SECOND, 260 * SECOND - 1], start=7):
        clock.now_ns = now
        buffer.add([tool(n, 1, "late_tool", 30, 40)])
    assert (buffer.buffered_spans, metrics.dropped, buffer.remembered_traces) == (0, {"late": 2}, 1)

    clock.now_ns = 260 * SECOND
    buffer.add([tool(9, 1, "late_tool", 30, 40)])
    assert (buffer.buffered_spans, metrics.dropped, buffer.remembered_traces) == (1, {"late": 2}, 0)


def test_remembered_trace_ids_are_bounded_oldest_forgotten_first_and_counted() -> None:
    buffer, clock, metrics = make(dataclasses.replace(LIMITS, max_remembered_traces=1))
    buffer.add(run_spans(TRACE))
    clock.advance(1)
    buffer.add(run_spans(OTHER_TRACE))
    clock.advance(2)
    assert [t.trace_id for t in buffer.poll()] == [TRACE, OTHER_TRACE]
    assert (buffer.remembered_traces, metrics.remembered_evicted) == (1, 1)

    buffer.add([tool(7, 1, "x", 0, 1, trace_id=TRACE), tool(7, 1, "x", 0, 1, trace_id=OTHER_TRACE)])
    assert metrics.dropped == {"late": 1}
    assert buffer.buffered_traces == 1


def test_ids_forgotten_when_their_window_passed_are_not_counted_as_evicted() -> None:
    buffer, clock, metrics = make(dataclasses.replace(LIMITS, max_remembered_traces=1))
    buffer.add(run_spans(TRACE))
    clock.advance(2)
    buffer.poll()
    clock.advance(301)
    buffer.add(run_spans(OTHER_TRACE))
    clock.advance(2)
    assert [t.trace_id for t in buffer.poll()] == [OTHER_TRACE]
    assert (buffer.remembered_traces, metrics.remembered_evicted) == (1, 0)


def test_drain_emits_everything_ready_first_the_rest_as_shutdown() -> None:
    buffer, clock, metrics = make()
    buffer.add(run_spans(TRACE))
    clock.advance(2)
    buffer.add(trace_of(5, spans=2))

    assert summary(buffer.drain()) == [
        (TRACE, 3, True, None),
        ((5).to_bytes(16, "big"), 2, False, "shutdown"),
    ]
    assert (buffer.buffered_traces, buffer.buffered_spans, buffer.buffered_bytes) == (0, 0, 0)
    assert metrics.built == 5


def test_drain_judges_a_trace_whose_anchor_arrived_as_ready_however_recently() -> None:
    """SIGTERM a second after a run ended (a rolling restart): nothing more can come, so
    the wait for stragglers buys nothing, and the run is judged whole (shutdown, it lost
    its golden case and shadow comparison). Only a trace still without its anchor is
    unfinished."""
    buffer, clock, _ = make()
    buffer.add(run_spans(TRACE))
    buffer.add([agent(1, 99, "refund-bot", 0, 100, trace_id=OTHER_TRACE)])  # a remote parent
    buffer.add(trace_of(5, spans=2))
    clock.advance(1)

    assert summary(buffer.drain()) == [
        (TRACE, 3, True, None),
        (OTHER_TRACE, 1, True, None),
        ((5).to_bytes(16, "big"), 2, False, "shutdown"),
    ]


def test_poll_emits_in_deadline_order_not_arrival_order() -> None:
    buffer, clock, _ = make()
    first, *rest = run_spans(TRACE)
    buffer.add([first])
    clock.advance(1)
    buffer.add(run_spans(OTHER_TRACE))
    clock.advance(0.5)
    buffer.add(rest)  # TRACE is now due after OTHER_TRACE

    clock.advance(2.5)
    assert [t.trace_id for t in buffer.poll()] == [OTHER_TRACE, TRACE]


def test_many_traces_complete_in_one_poll_without_leftovers() -> None:
    buffer, clock, metrics = make()
    for n in range(2_000):
        buffer.add(run_spans(n.to_bytes(16, "big")))
        clock.advance(0.001)

    clock.advance(2)
    done = buffer.poll()
    assert (len(done), metrics.built, buffer.buffered_traces) == (2_000, 6_000, 0)
    assert all(t.complete for t in done)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("overflow", "drop_newest", "overflow: 'drop_newest' is not one of backpressure"),
        ("max_traces", 0, "max_traces: must be at least 1, got 0"),
        ("late_span_window_ns", -1, "late_span_window_ns: must be at least 0, got -1"),
    ],
)
def test_invalid_limits_fail_at_construction_naming_the_field(
    field: str, value: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(LIMITS, **{field: value})


def test_span_ids_of_a_completed_trace_are_distinct() -> None:
    buffer, clock, _ = make()
    buffer.add(run_spans() + run_spans())
    clock.advance(2)

    (done,) = buffer.poll()
    assert sorted(s.span_id for s in done.spans) == [sid(1), sid(2), sid(3)]


def test_parent_cycle_is_not_an_anchor_and_times_out() -> None:
    buffer, clock, _ = make()
    buffer.add([agent(1, 2, "a", 0, 10), span(2, 1, SpanRole.OTHER, 0, 10)])

    clock.advance(2)
    assert buffer.poll() == []
    clock.advance(58)
    assert summary(buffer.poll()) == [(TRACE, 2, False, "timed_out")]


def test_deadline_heap_stays_bounded_under_constant_eviction() -> None:
    limits = dataclasses.replace(LIMITS, max_traces=10, overflow="evict_oldest")
    buffer, clock, metrics = make(limits)
    for n in range(5_000):
        buffer.add(trace_of(n))

    # White box: evicted traces leave stale heap entries; they must not pile up.
    assert len(buffer._deadlines) <= 2 * limits.max_traces + 64
    assert metrics.evicted == {"max_traces": 4_990}
    clock.advance(60)
    assert len(buffer.poll()) == 10


def test_a_guardrail_check_alone_is_not_an_agent_run() -> None:
    """Guardrails AI validating a text with no model call: no ToolTrace (its spans were
    plain spans, not_an_agent_run, before guardrail spans were told apart)."""
    check = span(1, None, SpanRole.GUARDRAIL, 0, 10, name="Runner.step")
    assert not runs_an_agent([check, span(2, 1, SpanRole.OTHER, 1, 9)])
    assert runs_an_agent([check, span(2, 1, SpanRole.LLM, 1, 9)])


def _lost_model_call_run() -> list[SpanRecord]:
    """A synchronous request whose root ended after every span, and whose model call (span
    2) was lost in export: its HTTP client span (3) came, naming it as local parent."""
    return [
        span(9, None, SpanRole.OTHER, 0, 900, name="POST /support"),
        agent(1, 9, "refund-bot", 1, 890, parent_local=True),
        span(3, 2, SpanRole.OTHER, 12, 95, name="POST", parent_local=True),
        tool(5, 1, "issue_refund", 205, 260, call_id="c", parent_local=True),
    ]


def test_a_root_that_ended_last_anchors_a_trace_whose_lost_span_never_comes() -> None:
    """An ordinary synchronous request: its server span, the root, ended after every span of
    the run, and came with them. The model call's span never comes (its batch lost: the
    exporter gave up on a retry, its queue was full, a Collector filter dropped it); toolwatch
    never saw it, so nothing flags the trace ``span_limit``. Its HTTP client span names it
    as local parent.

    One batch processor sends a process's spans in the order they ended: a parent that ended
    before the root would have come with it or before it. Only a parent still running after
    the root ended (the background run the commit is for) is still to come, and then the
    spans under it end after the root did. Here all ended before the root: the run is over.
    The first version of the background-run rule made it wait the whole max_trace_age
    (300 s), judged ``timed_out``: against the policy only, so its golden case and shadow
    source never paged on it (review). It waits one batch delay more
    (``LOST_PARENT_WAIT_NS``), then is judged complete."""
    clock = ManualClock()
    buffer = TraceBuffer(AssemblyLimits(), clock, RecordingMetrics())
    buffer.add([*_lost_model_call_run(), llm(4, 1, 100, 200, parent_local=True)])

    clock.advance(2)
    assert buffer.poll() == []  # one more batch delay: the parent may be a background run's
    clock.advance(LOST_PARENT_WAIT_NS / 1e9)
    done = buffer.poll()

    assert [(t.trace_id, len(t.spans), t.incomplete_reason) for t in done] == [(TRACE, 5, None)]


def test_the_lost_parent_wait_is_the_configured_one() -> None:
    """A sender whose batch processor exports every 30 s (``OTEL_BSP_SCHEDULE_DELAY``)
    needs the trace to wait that long for a parent still running: with
    ``lost_parent_wait_ns`` at 30 s the same trace is still held where the default judges
    it, and is judged complete 30 s past the wait."""
    clock = ManualClock()
    limits = AssemblyLimits(lost_parent_wait_ns=30 * SECOND)
    buffer = TraceBuffer(limits, clock, RecordingMetrics())
    buffer.add([*_lost_model_call_run(), llm(4, 1, 100, 200, parent_local=True)])

    clock.advance(2 + LOST_PARENT_WAIT_NS / 1e9)
    assert buffer.poll() == []
    assert buffer.next_due_ns() == clock() + (30 * SECOND - LOST_PARENT_WAIT_NS)
    clock.advance(30 - LOST_PARENT_WAIT_NS / 1e9)
    done = buffer.poll()

    assert [(t.trace_id, len(t.spans), t.incomplete_reason) for t in done] == [(TRACE, 5, None)]


def test_a_run_over_before_a_sigterm_is_drained_complete_despite_a_lost_local_parent() -> None:
    """The same trace at a SIGTERM: ``drain`` asks ``anchored()`` and now flags it
    ``shutdown`` (judged incomplete, policy only), where before it was drained complete."""
    clock = ManualClock()
    buffer = TraceBuffer(AssemblyLimits(), clock, RecordingMetrics())
    buffer.add(_lost_model_call_run())
    clock.advance(0.5)

    assert [t.incomplete_reason for t in buffer.drain()] == [None]


_REVIEW3_LIMITS = AssemblyLimits(
    completion_wait_ns=2 * SECOND, max_trace_age_ns=60 * SECOND, late_span_window_ns=300 * SECOND
)


def _summary(done: list[CompletedTrace]) -> list[tuple[bytes, int, bool, str | None]]:
    return [(t.trace_id, len(t.spans), t.complete, t.incomplete_reason) for t in done]


def test_a_lost_span_of_a_sync_call_on_a_host_whose_clock_is_ahead_does_not_hold_the_root() -> None:
    """An ordinary synchronous run, but the root is the gateway's server span (another
    process, another host) and the agent service's clock runs 20 ms ahead of the gateway's
    (NTP keeps hosts within milliseconds to tens of them; the call returns within a few
    ms). The agent's last model call span was lost (an export given up); its HTTP client
    span, which really ended 3 ms before the gateway's root, reads as ending 17 ms after it.
    ``_awaits_local`` compares end times across processes: the trace waits max_trace_age
    and is judged ``timed_out`` (policy only), the case 047f2cb set out to fix. Only a span
    of the root's own process (service) can be ordered against the root by its clock."""
    buffer = TraceBuffer(_REVIEW3_LIMITS, ManualClock(), RecordingMetrics())
    clock = buffer._clock
    skew = 20
    buffer.add(
        [
            span(9, None, SpanRole.OTHER, 0, 900, name="POST /support", service="gateway"),
            span(8, 9, SpanRole.OTHER, 2, 898, name="POST", service="gateway"),
            span(7, 8, SpanRole.OTHER, 3 + skew, 896 + skew, name="POST /agent"),
            agent(1, 7, "refund-bot", 4 + skew, 895 + skew, parent_local=True),
            tool(5, 1, "lookup_order", 205, 260, call_id="c", parent_local=True),
            # the final model call (span 2) is lost; its HTTP client span came
            span(3, 2, SpanRole.OTHER, 700 + skew, 897 + skew, name="POST", parent_local=True),
        ]
    )
    clock.advance(2)
    assert buffer.poll() == []
    clock.advance(LOST_PARENT_WAIT_NS / 1e9)  # not max_trace_age: judged complete
    assert _summary(buffer.poll()) == [(TRACE, 6, True, None)]
