"""Was (found by review, fixed): an eviction judges a trace by an ``ended_verdict`` gone stale,
and cuts a run in flight while a run the buffer holds as over stays.

``_ended`` caches its verdict on ``_Trace.ended_verdict`` "until the trace's next span", and
only ``_Trace.add`` clears it. Two things change ``anchored()``'s answer without an ``add``:

* ``TraceBuffer.flag_rejected`` (``Engine.admit``, a span of the trace rejected at ingest)
  and ``_flag_limited`` (a span dropped for a limit) set ``span_limited``: a trace whose root
  came is anchored then (``anchored``: ``root_seen and span_limited``), as ``poll`` reads it
  (since the "wait" rule, only once quiet the lost parent's wait, and not as an eviction
  asks: ``test_assembly_rejected_step_background_run``);
* ``_Trace.dropped`` (a root dropped ``span_too_large``, or past the 64 enclosing spans, or
  ``buffer_full``) sets ``root_seen``: "a root dropped all the same still anchors its trace".

A verdict cached False before (by an earlier eviction's scan passing over the trace) stays
False: the next eviction passes the run over again and evicts the oldest run in flight
(``evicted``; its later spans dropped ``late``), though the trace it passed over would have
been judged as it came (``span_limit``), nothing cut short.

Suggested fix: clear ``ended_verdict`` wherever ``span_limited`` or ``root_seen`` is set
(``HeldTraces._flag_limited``, ``_Trace.dropped``), e.g. in one ``_Trace`` method that both
call.
"""

from __future__ import annotations

import dataclasses

import pytest
from assembly_support import agent, span, tool
from stall_support import LIMITS, in_flight, make, offer, tid, verdicts

from toolwatch.assembly.completed import CompletedTrace
from toolwatch.model import SpanRecord, SpanRole

_EVICT = dataclasses.replace(LIMITS, max_traces=3, overflow="evict_oldest", max_buffered_bytes=1000)


def _ended_run(n: int) -> list[SpanRecord]:
    return [agent(1, None, "refund-bot", 0, 5, trace_id=tid(n), size_bytes=10)]


def test_a_rooted_run_flagged_by_a_rejected_span_is_evicted_as_it_came_once_ended() -> None:
    """A span rejected at ingest clears the eviction's verdict; the run is judged ended by
    what it holds, the rejection aside.
    Was: the rejection let run 2's root anchor it (its agent span to come), so the eviction
    took it as ended (``span_limit``) and kept run 1 in flight.
    Now: which span was rejected is not known, so run 2, left running in the background, is
    in flight still: passed over, as before the rejection (run 1, the oldest, is evicted).
    Was (after the "wait" rule): once its agent span came, it had ended, and the next
    eviction took it as it came (``span_limit``). Now: its agent span came, but the rejected
    span may be a step of another run the request left in the background (no span held says
    which run it was of: ``victims._root_ended``), so it is still in flight until quiet
    ``completion_wait + lost_parent_wait``; the next eviction takes it as the oldest in
    flight, ``evicted``."""
    buffer, _, _ = make(_EVICT)
    out: list[CompletedTrace] = []
    assert offer(buffer, in_flight(1), out)  # run 1: in flight, the oldest
    background = [  # run 2: a request's span, ended, and a step of the run it left running
        span(9, None, SpanRole.OTHER, 0, 100, name="POST /chat", trace_id=tid(2), size_bytes=10),
        tool(3, 1, "lookup_order", 150, 200, trace_id=tid(2), size_bytes=10, parent_local=True),
    ]
    assert offer(buffer, background, out)
    assert offer(buffer, _ended_run(3), out)  # run 3 over: the buffer is full
    assert offer(buffer, in_flight(4), out)  # evicts run 3 (ended), passing over runs 1 and 2
    assert verdicts(out) == {tid(3): None}

    buffer.flag_rejected([tid(2)])  # a span of run 2 was rejected at ingest
    assert offer(buffer, in_flight(5), out)
    assert verdicts(out) == {tid(3): None, tid(1): "evicted"}

    agent_span = agent(1, 9, "refund-bot", 110, 300, trace_id=tid(2), size_bytes=10)
    assert offer(buffer, [agent_span], out)  # run 2's agent span: its run has ended
    assert offer(buffer, in_flight(6), out)  # evicts run 2, the oldest, still in flight
    assert verdicts(out) == {tid(3): None, tid(1): "evicted", tid(2): "evicted"}


def test_a_run_whose_root_was_dropped_too_large_is_evicted_as_it_came() -> None:
    buffer, _, metrics = make(_EVICT)
    out: list[CompletedTrace] = []
    assert offer(buffer, in_flight(1), out)  # run 1: in flight, the oldest
    # Run 2: its agent span came, under a workflow span its flags say is local: waits for it.
    handed = [agent(2, 7, "refund-bot", 0, 5, trace_id=tid(2), size_bytes=10, parent_local=True)]
    assert offer(buffer, handed, out)
    assert offer(buffer, _ended_run(3), out)
    assert offer(buffer, in_flight(4), out)  # evicts run 3 (ended), passing over runs 1 and 2
    assert verdicts(out) == {tid(3): None}

    workflow = span(7, None, SpanRole.OTHER, 0, 6, trace_id=tid(2), size_bytes=2000)
    assert offer(buffer, [workflow], out)  # run 2's root: dropped too large, anchors it
    assert metrics.dropped == {"span_too_large": 1}
    assert offer(buffer, in_flight(5), out)

    # Was: run 1, in flight, evicted (``evicted``); run 2 stays until ``poll`` judges it.
    assert verdicts(out) == {tid(3): None, tid(2): "span_limit"}


@pytest.mark.parametrize(
    ("agent_span", "root_end", "judged"),
    [
        (True, 100, {tid(1): "evicted"}),
        (True, 400, {tid(2): "span_limit"}),
        (False, 100, {tid(1): "evicted"}),
    ],
    ids=["its-agent-span", "its-agent-span-the-root-ended-last", "a-step"],
)
def test_a_background_run_that_lost_a_span_too_large_is_ended_only_by_its_agent_span(
    agent_span: bool, root_end: int, judged: dict[bytes, str | None]
) -> None:
    """Run 2: a request's span, ended, and a step of the run it left running, which names
    the run's agent span 2 (local, still running); then a span of it is dropped too large.
    A step no span names: the run waits for its agent span still, in flight, passed over:
    the oldest run in flight (run 1) is evicted. Its agent span: the step waits for it no
    more.
    Was: the run has ended, and the eviction takes it as it came (``span_limit``).
    Now: its step ended after the root (a run left running in the background,
    ``_Trace.ran_on``): in flight until quiet ``completion_wait + lost_parent_wait``, passed
    over as the other case: run 1 is evicted (``victims._root_ended``). Where the request's
    span ended last (a synchronous run, its agent span dropped), the verdict cached before
    the drop is still asked again: the run has ended, taken as it came (``span_limit``)."""
    buffer, _, metrics = make(_EVICT)
    out: list[CompletedTrace] = []
    assert offer(buffer, in_flight(1), out)  # run 1: in flight, the oldest
    request = span(
        9, None, SpanRole.OTHER, 0, root_end, name="POST /chat", trace_id=tid(2), size_bytes=10
    )
    step = tool(3, 2, "lookup_order", 150, 200, trace_id=tid(2), size_bytes=10, parent_local=True)
    assert offer(buffer, [request, step], out)
    assert offer(buffer, _ended_run(3), out)
    assert offer(buffer, in_flight(4), out)  # evicts run 3 (ended), passing over runs 1 and 2
    lost = (
        agent(2, 9, "refund-bot", 10, 300, trace_id=tid(2), size_bytes=2000, parent_local=True)
        if agent_span
        else tool(
            8, 2, "lookup_order", 210, 250, trace_id=tid(2), size_bytes=2000, parent_local=True
        )
    )
    assert offer(buffer, [lost], out)
    assert metrics.dropped == {"span_too_large": 1}
    assert offer(buffer, in_flight(5), out)
    assert verdicts(out) == {tid(3): None, **judged}
