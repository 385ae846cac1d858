"""Two defects of the fourth review of the "wait" rule (review-wait4) for spans dropped for a
limit, fixed: such a span came, so its children wait for it no more, and what it waited for is
still waited for.

- The agent walk (``_Trace._outermost``) passes through a span dropped for a limit as through
  a held one (its ``Link`` in ``_Trace.drops``: its role, its parent, whether that parent is
  local): an agent whose local parent (a workflow span) was dropped too large anchors its
  trace.
- A step dropped over the cap (``trace_span_limit``, enclosing nothing: no parent) keeps its
  wait (``_Trace.drops.waits``), and the cap takes the span it waits for
  (``_Trace.encloses``).
"""

from __future__ import annotations

import dataclasses

from assembly_support import SECOND, RecordingMetrics, agent, span, tool
from wait_support import RUN, judge_timed

from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.model import ManualClock, SpanRecord, SpanRole

# --- 2. An agent whose local parent was dropped for a limit.

#: The agent service's part of a trace whose root lives in another service: a workflow span
#: 3 (its parent remote, span 1), the agent span 2 under it (local parent), a step 10 of it.
_STEP = tool(10, 2, "lookup_order", 4, 20, trace_id=RUN, size_bytes=10, parent_local=True)
_AGENT = agent(2, 3, "refund-bot", 1, 60, trace_id=RUN, size_bytes=10, parent_local=True)


def _workflow(size: int, role: SpanRole = SpanRole.OTHER) -> SpanRecord:
    return span(3, 1, role, 0, 70, trace_id=RUN, size_bytes=size, parent_local=False)


def test_control_an_agent_under_a_held_workflow_span_anchors_its_trace() -> None:
    """Holds (control): the workflow span held: anchored by the agent, complete at 2 s."""
    assert judge_timed([([_STEP, _AGENT, _workflow(10)], 1)]) == ([(None, 3, 2)], 0)


def test_an_agent_whose_local_parent_was_dropped_too_large_anchors_its_trace() -> None:
    """The workflow span (ends last, exported last) dropped ``span_too_large`` once the trace
    is held: the agent walk passes through it (its parent remote): the agent anchors.

    Was: the walk stopped at parent 3, not held, and read "a local parent still running":
    held ``max_trace_age``, ``timed_out`` at 300 s.
    Now: ``span_limit``, 2 spans, at 2 s (as the control, less the dropped span)."""
    judged = judge_timed([([_STEP, _AGENT, _workflow(2000)], 1)])
    assert judged == ([("span_limit", 2, 2)], 0)


def test_an_agent_whose_local_parent_was_dropped_before_its_trace_was_held_anchors_it() -> None:
    """The workflow span dropped too large before any span of its trace was held: replayed
    (``assembly.limited`` keeps its role), the walk passes through it as above.

    Was: ``timed_out`` at 300 s.
    Now: ``span_limit``, 2 spans, 2 s after the agent's batch (3 s)."""
    judged = judge_timed([([_workflow(2000)], 1), ([_STEP, _AGENT], 1)])
    assert judged == ([("span_limit", 2, 3)], 0)


def test_an_agent_under_a_dropped_tool_span_waits_for_the_outer_run() -> None:
    """The agent's parent is a TOOL span (an agent invoked as a tool) dropped too large: the
    walk reads its role, the run is nested in another, still running (its parent, the outer
    agent span 1, is local): the trace waits for it, judged 2 s after it came (at 7 s), the
    outer agent's span with the rest."""
    outer = agent(1, None, "planner", 0, 80, trace_id=RUN, size_bytes=10)
    as_tool = dataclasses.replace(_workflow(2000, SpanRole.TOOL), parent_local=True)
    judged = judge_timed([([_STEP, _AGENT, as_tool], 5), ([outer], 1)])
    assert judged == ([("span_limit", 3, 7)], 0)


# --- 5. A step dropped over the cap.

_CAP = AssemblyLimits(
    completion_wait_ns=2 * SECOND,
    max_trace_age_ns=300 * SECOND,
    max_buffered_bytes=1000,
    max_spans_per_trace=2,
)
#: A request's spans: a child 3 and the root 9 (ended at 3 ms).
_REQUEST = [
    span(3, 9, SpanRole.OTHER, 0, 1, trace_id=RUN, size_bytes=10, parent_local=True),
    span(9, None, SpanRole.OTHER, 0, 3, trace_id=RUN, size_bytes=10),
]
#: The background run's agent span (under the root, local) and its one step (local).
_BG_AGENT = agent(2, 9, "refund-bot", 1, 60, trace_id=RUN, size_bytes=10, parent_local=True)


def _run_step(size: int) -> SpanRecord:
    return tool(10, 2, "lookup_order", 4, 7, trace_id=RUN, size_bytes=size, parent_local=True)


def test_control_a_step_dropped_too_large_keeps_its_wait() -> None:
    """Holds (control): under no cap, the request's spans, then the run's step dropped too
    large (its wait kept), then the agent span: one trace.
    Was: judged 2 s after the agent span came (4 s after the first batch).
    Now: 7 s after (9 s): the agent span ended after the root, a run left running in the
    background (``_Trace.ran_on``)."""
    judged = judge_timed([(_REQUEST, 1), ([_run_step(2000)], 1), ([_BG_AGENT], 1)])
    assert judged == ([("span_limit", 3, 9)], 0)


def test_a_step_dropped_over_the_cap_keeps_its_wait_for_its_agent_span() -> None:
    """The request's spans fill the trace's cap (2 here); the run's step comes over it and
    encloses nothing held: dropped ``trace_span_limit``, no parent, but what it waited for
    (the agent span 2) is kept; the agent span, over the cap, encloses that wait: taken.

    Was: the step's wait was not kept: the root anchored at 2 s (the request's 2 spans,
    ``span_limit``), and the agent span started a second trace, waiting for its local parent
    (the root, judged) for ``max_trace_age``: ``timed_out`` at 302 s, alone.
    Then (the fix): one trace, ``span_limit``, 3 spans, judged 2 s after the agent span came
    (4 s).
    Now: the same, 7 s after the agent span came (9 s), a run left running in the
    background (``_Trace.ran_on``)."""
    judged = judge_timed([(_REQUEST, 1), ([_run_step(10)], 1), ([_BG_AGENT], 1)], _CAP)
    assert judged == ([("span_limit", 3, 9)], 0)


def test_the_span_a_step_dropped_over_the_cap_waits_for_is_enclosing() -> None:
    """The full trace's ``encloses``: the agent span the dropped step waits for is one of
    the spans the cap takes; another span under the root is not, nor a second step."""
    buffer = TraceBuffer(_CAP, ManualClock(), RecordingMetrics())
    buffer.add(_REQUEST)
    buffer.add([_run_step(10)])
    trace = buffer._traces[RUN]
    other = agent(4, 9, "other-bot", 1, 60, trace_id=RUN, size_bytes=10, parent_local=True)
    second = tool(11, 2, "lookup_order", 8, 9, trace_id=RUN, size_bytes=10, parent_local=True)
    assert [trace.encloses(s) for s in (_BG_AGENT, other, second)] == [True, False, False]
    assert trace.drops is not None
    assert trace.drops.waits == [(_BG_AGENT.span_id, _run_step(10).end_ns, "refund-agent")]
    assert trace.drops.links is None  # no parent: not kept as one
