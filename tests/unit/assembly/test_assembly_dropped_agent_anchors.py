"""A span dropped for a limit came, and the anchor rules read it as a held one: a dropped
AGENT span, too. In a trace whose root is another service's (never held here), the agent
service's outermost agent span is its anchor; agent spans carry big input/output attributes,
so it is the span most often dropped ``span_too_large``.

Was: ``_Trace._agent_anchors`` read held agent spans only: nothing anchored such a trace,
held ``max_trace_age`` (300 s) and judged ``timed_out``.
Now: what it reads of a dropped agent span (its end and service) is kept in its link
(``assembly.dropped``, counted in the trace's bytes), and the trace is judged ``span_limit``
at the next quiet ``completion_wait`` (2 s), counted from its last span held: a drop is not an
arrival, and, known, it is no lost parent (``parent_lost`` not set: not the lost parent's
wait, 7 s).

So with a trace of no agent span, anchored by the span that encloses its model calls once a
span says it is a local parent (its sender sets the flags): a dropped span says so too.
"""

from __future__ import annotations

from assembly_support import RecordingMetrics, agent, llm, span, tool
from stall_support import tid
from wait_support import RUN, TWO_EVICTING, judge_timed

from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.model import ManualClock, SpanRecord, SpanRole

#: The agent service's part of a trace whose root (span 1) is another service's: the agent
#: span 2 (its parent remote), a model call 12 and a step 10 under it (local parent).
_STEP = tool(10, 2, "lookup_order", 4, 20, trace_id=RUN, size_bytes=10, parent_local=True)
_MODEL = llm(12, 2, 1, 3, trace_id=RUN, size_bytes=10, parent_local=True)


def _agent(size: int) -> SpanRecord:
    return agent(2, 1, "refund-bot", 1, 60, trace_id=RUN, size_bytes=size, parent_local=False)


def test_control_a_held_outermost_agent_anchors_a_trace_of_another_services_root() -> None:
    """Holds (control): the agent span held: complete, 3 spans, at 2 s."""
    assert judge_timed([([_MODEL, _STEP, _agent(10)], 1)]) == ([(None, 3, 2)], 0)


def test_a_dropped_outermost_agent_anchors_a_trace_of_another_services_root() -> None:
    """The agent span (ends last, exported last) dropped ``span_too_large`` in the request
    of its steps.

    Was: ``timed_out``, 2 spans, at 300 s.
    Now: ``span_limit``, 2 spans, at 2 s (as the control, less the dropped span)."""
    judged = judge_timed([([_MODEL, _STEP, _agent(2000)], 1)])
    assert judged == ([("span_limit", 2, 2)], 0)


def test_a_dropped_outermost_agent_in_a_later_request_anchors_at_the_steps_quiet_wait() -> None:
    """The agent span dropped in a request of its own, a second after its steps': judged 2 s
    after the steps (the drop restarts the checks, not the quiet period).

    Was: ``timed_out`` at 300 s. Now: ``span_limit`` at 2 s."""
    judged = judge_timed([([_MODEL, _STEP], 1), ([_agent(2000)], 1)])
    assert judged == ([("span_limit", 2, 2)], 0)


def test_a_dropped_outermost_agent_before_its_trace_was_held_anchors_it() -> None:
    """The agent span dropped too large before any span of its trace was held: replayed
    (``assembly.limited`` keeps its end, service and role) once its steps come.

    Was: ``timed_out`` at 301 s (the age counts from the trace's first span held).
    Now: ``span_limit``, 2 s after the steps' request (3 s)."""
    judged = judge_timed([([_agent(2000)], 1), ([_MODEL, _STEP], 1)])
    assert judged == ([("span_limit", 2, 3)], 0)


def test_a_dropped_agent_still_waits_for_a_background_run_of_its_service() -> None:
    """As for a held agent: a step of its service that ended after it waits for its local
    parent (span 3, a run the agent left running in the background, its agent span to
    come): the trace waits for it (nested under the dropped agent, it anchors nothing
    itself), judged 2 s after it came (at 7 s), with it.

    Was: ``timed_out``, 4 spans, at 300 s. Now: ``span_limit`` at 7 s."""
    late_step = tool(11, 3, "refund", 70, 80, trace_id=RUN, size_bytes=10, parent_local=True)
    background = agent(3, 2, "refunder", 65, 90, trace_id=RUN, size_bytes=10, parent_local=True)
    judged = judge_timed([([_MODEL, _STEP, late_step, _agent(2000)], 5), ([background], 1)])
    assert judged == ([("span_limit", 4, 7)], 0)


# --- A dropped span says where its parent is, as a held one does.

#: A trace of no agent span whose root (span 1) is another service's: a loop span 3 (its
#: parent remote), a chain span 4 under it, and a model call 12 under that which requested
#: tools (local parents): the loop span anchors it, once a span says it is a local parent
#: (its sender sets the flags).
_LOOP = span(3, 1, SpanRole.OTHER, 0, 70, trace_id=RUN, size_bytes=10, parent_local=False)
_CALL = llm(
    12, 4, 1, 3, trace_id=RUN, size_bytes=10, parent_local=True, finish_reasons=("tool_calls",)
)


def _chain(size: int) -> SpanRecord:
    return span(4, 3, SpanRole.OTHER, 1, 60, trace_id=RUN, size_bytes=size, parent_local=True)


def test_control_a_loop_span_a_held_span_says_is_local_anchors_its_trace() -> None:
    """Holds (control): the chain span held says the loop span is its local parent: the
    loop span anchors, complete, 3 spans, at 2 s."""
    assert judge_timed([([_CALL, _chain(10), _LOOP], 1)]) == ([(None, 3, 2)], 0)


def test_a_loop_span_a_dropped_span_says_is_local_anchors_its_trace() -> None:
    """The chain span, the only span that names the loop span as its parent, dropped too
    large: its flags said the loop span is its local parent, as the control's did.

    Was: ``said`` read from held spans only: no span said so, the loop span might be a step
    of an agent run not all here: held ``max_trace_age``, ``timed_out`` at 300 s.
    Now: ``span_limit``, 2 spans, at 2 s (as the control, less the dropped span)."""
    judged = judge_timed([([_CALL, _chain(2000), _LOOP], 1)])
    assert judged == ([("span_limit", 2, 2)], 0)


def test_an_eviction_takes_a_run_anchored_by_a_dropped_agent_for_one_that_ended() -> None:
    """Two traces more than ``max_traces`` (2) evict this run's, its steps and its agent span
    come (the agent span held, or dropped too large): its end has come, so it is judged as it
    came, its quiet period cut short.

    Was: held, complete; dropped, ``evicted`` (``victims._ended`` read held agent spans only:
    a run in flight, not judged by ``required`` minimums).
    Now: dropped, ``span_limit``, as the trace ``poll`` judges at 2 s."""
    verdicts = {}
    for size in (10, 2000):
        buffer = TraceBuffer(TWO_EVICTING, ManualClock(), RecordingMetrics())
        buffer.add([_MODEL, _STEP, _agent(size)])
        evicted = buffer.add([agent(1, None, "bot", 0, 5, trace_id=tid(n)) for n in (6, 7)])
        verdicts[size] = [(t.trace_id, t.incomplete_reason, len(t.spans)) for t in evicted]
    assert verdicts == {10: [(RUN, None, 3)], 2000: [(RUN, "span_limit", 2)]}
