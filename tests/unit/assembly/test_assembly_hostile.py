"""Hostile span trees through the buffer and the timeline: self-parents, parent cycles,
100,000 spans in one trace, 100,000-deep parent chains, many agents under one long chain.

Each must end in a bounded number of steps, without recursion, every span accounted for.
Time bounds are generous (a loaded machine passes them easily); they catch work that grows
with the square of the spans, which at these sizes takes minutes.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from assembly_support import (
    MS,
    NORMALIZE,
    SECOND,
    TRACE,
    RecordingMetrics,
    agent,
    ask,
    llm,
    span,
    tool,
)

from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.assembly.completed import CompletedTrace
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.assembly.timeline import build_tool_traces
from toolwatch.model import ManualClock, SpanRecord, SpanRole
from toolwatch.model_traces import ToolTrace

T = TypeVar("T")

WAIT = 2 * SECOND
MAX_AGE = 60 * SECOND
LIMITS = AssemblyLimits(completion_wait_ns=WAIT, max_trace_age_ns=MAX_AGE)
BIG = 100_000
QUADRATIC_BOUND_SECONDS = 10.0


def make(limits: AssemblyLimits = LIMITS) -> tuple[TraceBuffer, ManualClock, RecordingMetrics]:
    clock = ManualClock()
    metrics = RecordingMetrics()
    return TraceBuffer(limits, clock, metrics), clock, metrics


def timed(work: Callable[[], T]) -> tuple[T, float]:
    started = time.perf_counter()
    result = work()
    return result, time.perf_counter() - started


def build(done: CompletedTrace) -> list[ToolTrace]:
    return build_tool_traces(done, NORMALIZE)


def after_quiet(buffer: TraceBuffer, clock: ManualClock) -> list[CompletedTrace]:
    clock.advance(WAIT / SECOND)
    return buffer.poll()


def after_max_age(buffer: TraceBuffer, clock: ManualClock) -> list[CompletedTrace]:
    clock.advance(MAX_AGE / SECOND)
    return buffer.poll()


def span_id(n: int) -> bytes:
    return n.to_bytes(8, "big")


def whole(spans: Sequence[SpanRecord]) -> CompletedTrace:
    return CompletedTrace(TRACE, tuple(spans), True, None, 0, 0)


# -- a span that is its own parent, parent cycles -------------------------------------------


def test_an_agent_that_is_its_own_parent_is_no_anchor_and_times_out_whole() -> None:
    buffer, clock, metrics = make()
    looped = dataclasses.replace(agent(1, None, "loop-bot", 0, 100), parent_span_id=span_id(1))
    buffer.add([looped, tool(2, 1, "lookup_order", 1, 10)])

    assert after_quiet(buffer, clock) == []
    (done,) = after_max_age(buffer, clock)
    assert (len(done.spans), done.incomplete_reason, metrics.built) == (2, "timed_out", 2)
    (trace,) = build(done)
    assert trace.tool_names == ("lookup_order",)
    assert trace.agent == "loop-bot"


def test_a_lone_span_that_is_its_own_parent_builds_one_run() -> None:
    looped = dataclasses.replace(tool(7, None, "lookup_order", 0, 10), parent_span_id=span_id(7))
    (trace,) = build(whole([looped]))
    assert (trace.tool_names, trace.span_count) == (("lookup_order",), 1)


def test_a_cycle_through_agents_and_tools_yields_each_call_once() -> None:
    # 1 -> 2 -> 3 -> 1: an agent, a tool running an agent, and back.
    spans = [
        agent(1, 3, "outer", 0, 100),
        tool(2, 1, "ask_billing", 1, 90),
        agent(3, 2, "inner", 2, 80),
        tool(4, 3, "lookup_order", 3, 10),
        tool(5, 1, "issue_refund", 91, 95),
    ]
    buffer, clock, _ = make()
    buffer.add(spans)
    assert after_quiet(buffer, clock) == []  # nothing in a cycle is outermost

    (done,) = after_max_age(buffer, clock)
    calls = sorted(name for trace in build(done) for name in trace.tool_names)
    assert calls == ["ask_billing", "issue_refund", "lookup_order"]


# -- 100,000 spans in one trace -------------------------------------------------------------


def test_a_hundred_thousand_spans_are_cut_at_the_per_trace_limit_and_counted() -> None:
    buffer, clock, metrics = make()
    limit = LIMITS.max_spans_per_trace
    root = agent(1, None, "busy-bot", 0, 10**6)
    spans = [root, *(tool(n, 1, "lookup_order", n, n + 1) for n in range(2, BIG + 1))]
    for at in range(0, BIG, 1_000):  # as receivers hand them over: request by request
        buffer.add(spans[at : at + 1_000])

    (done,) = after_quiet(buffer, clock)
    (trace,), seconds = timed(lambda: build(done))

    assert metrics.dropped == {"trace_span_limit": BIG - limit}
    assert metrics.built + sum(metrics.dropped.values()) == BIG
    assert (done.complete, done.incomplete_reason, len(done.spans)) == (False, "span_limit", limit)
    assert len(trace.calls) == limit - 1
    assert seconds < QUADRATIC_BOUND_SECONDS


def chain(length: int, top_parent: int | None) -> list[SpanRecord]:
    """Spans 2..length+1, each the child of the one before; span 2 under ``top_parent``."""
    return [
        span(n, n - 1 if n > 2 else top_parent, SpanRole.OTHER, n, 10**6)
        for n in range(2, length + 2)
    ]


def test_a_hundred_thousand_deep_parent_chain_builds_without_recursion() -> None:
    limits = dataclasses.replace(LIMITS, max_spans_per_trace=BIG + 2)
    buffer, clock, metrics = make(limits)
    spans = [agent(1, None, "deep-bot", 0, 10**7), *chain(BIG, 1)]
    buffer.add([*spans, tool(BIG + 2, BIG + 1, "lookup_order", BIG + 2, BIG + 3)])

    (done,) = after_quiet(buffer, clock)
    (trace,), seconds = timed(lambda: build(done))

    assert (done.complete, metrics.dropped) == (True, {})
    assert (trace.agent, trace.tool_names, trace.span_count) == (
        "deep-bot",
        ("lookup_order",),
        BIG + 2,
    )
    assert seconds < QUADRATIC_BOUND_SECONDS


def test_an_agent_under_a_deep_chain_without_root_is_found_as_the_anchor() -> None:
    limits = dataclasses.replace(LIMITS, max_spans_per_trace=BIG + 2)
    buffer, clock, _ = make(limits)
    bottom = agent(BIG + 2, BIG + 1, "leaf-bot", BIG + 2, BIG + 9)
    buffer.add([*chain(BIG, 999_999_999), bottom, tool(BIG + 3, BIG + 2, "t", BIG + 3, BIG + 4)])

    (done,), seconds = timed(lambda: after_quiet(buffer, clock))
    assert done.complete  # the root's service never exported it: the outermost agent anchors
    assert seconds < QUADRATIC_BOUND_SECONDS
    assert [t.agent for t in build(done) if t.calls] == ["leaf-bot"]


# -- many agents: the anchor check must not walk the chain once per agent ---------------------

MANY = 10_000


def test_many_agents_under_a_tool_topped_chain_are_checked_in_linear_time() -> None:
    limits = dataclasses.replace(LIMITS, max_spans_per_trace=3 * MANY)
    buffer, clock, _ = make(limits)
    top = tool(1, 999_999_999, "delegate", 0, 10**7)  # the agents run inside a tool
    agents = [agent(MANY + 2 + k, MANY + 1, f"a{k}", 5, 6) for k in range(MANY)]
    buffer.add([top, *chain(MANY, 1), *agents])

    ready, seconds = timed(lambda: after_quiet(buffer, clock))
    assert ready == []  # every agent has a TOOL above it: no outermost agent yet
    assert seconds < QUADRATIC_BOUND_SECONDS
    (done,) = after_max_age(buffer, clock)
    assert (len(done.spans), done.incomplete_reason) == (2 * MANY + 1, "timed_out")


def test_many_agents_hanging_from_a_parent_cycle_are_checked_in_linear_time() -> None:
    limits = dataclasses.replace(LIMITS, max_spans_per_trace=3 * MANY)
    buffer, clock, _ = make(limits)
    cycle = [span(1, 2, SpanRole.OTHER, 0, 10), span(2, 1, SpanRole.OTHER, 0, 10)]
    agents = [agent(3 + k, 1 + k % 2, f"a{k}", 1, 2) for k in range(2 * MANY)]
    buffer.add([*cycle, *agents])

    ready, seconds = timed(lambda: after_quiet(buffer, clock))
    assert ready == []  # a cycle never leaves the buffer: no anchor
    assert seconds < QUADRATIC_BOUND_SECONDS


# -- many parallel calls --------------------------------------------------------------------


def test_fifty_thousand_parallel_calls_form_one_group_in_linear_time() -> None:
    count = 50_000
    spans = [agent(1, None, "fan-out-bot", 0, 10**6)]
    spans += [tool(n, 1, "get_weather", 1, 1_000 + n) for n in range(2, count + 2)]

    (trace,), seconds = timed(lambda: build(whole(spans)))

    assert len(trace.calls) == count
    assert {call.parallel_group for call in trace.calls} == {0}
    assert [call.sequence_index for call in trace.calls] == list(range(count))
    assert trace.calls[-1].end_ns == (1_000 + count + 1) * MS
    assert seconds < QUADRATIC_BOUND_SECONDS


def model_steps(count: int, concurrent: bool) -> list[SpanRecord]:
    """``count`` model calls each requesting one call whose tool span runs to the run's end:
    one after the other, or all at once (a wide fan-out)."""
    spans = [agent(1, None, "late-bot", 0, 10**7)]
    for k in range(count):
        start, end = (k, 10**6 + k) if concurrent else (10 * k, 10 * k + 4)
        spans.append(llm(2 + 2 * k, 1, start, end, ask("t", f"c{k}", {})))
        spans.append(tool(3 + 2 * k, 1, "t", end + 1, 10**7 - 1, call_id=f"c{k}"))
    return spans


def test_sequential_calls_whose_spans_all_ran_late_are_grouped_in_n_log_n() -> None:
    count = 20_000
    done = CompletedTrace(TRACE, tuple(model_steps(count, concurrent=False)), True, None, 0, 0)

    (trace,), seconds = timed(lambda: build(done))

    assert len(trace.calls) == count
    assert {call.parallel_group for call in trace.calls} == {None}  # requested one by one
    assert seconds < QUADRATIC_BOUND_SECONDS


def test_calls_of_a_wide_fan_out_of_model_calls_are_grouped_in_n_log_n() -> None:
    count = 20_000
    done = CompletedTrace(TRACE, tuple(model_steps(count, concurrent=True)), True, None, 0, 0)

    (trace,), seconds = timed(lambda: build(done))

    assert {call.parallel_group for call in trace.calls} == {0}
    assert seconds < QUADRATIC_BOUND_SECONDS
