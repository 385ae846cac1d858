"""Was (found by review, fixed): ``has_room``'s ``_room_taken`` judges each span of a request
against the buffer as it is before the request, where ``add`` judges it against the spans of
the request stored before it. So "what it decides, ``add`` does" breaks both ways:

* **It lets through a request that does not fit** (spans lost, ``buffer_full``). A trace at
  its cap takes a span that encloses what it holds (``_over_the_cap``: ``encloses`` reads
  ``open_parents``, the parents of its spans it does not hold). The end of a capped run comes
  as a chain in one batch (the agent span, the workflow span above it, the root: they end
  last, one after another): before the request only the first of the chain is an open
  parent, so ``_room_taken`` counts the middle spans as dropped (``trace_span_limit``); in
  ``add`` each stored span makes its parent open, and they are all stored. The request is
  taken as fitting, and ``add``, evicting nothing under ``backpressure``, drops its last span
  (the root) ``buffer_full`` where a refusal would have had the sender retry it.
* **It refuses a request that fits** (and counts it in the episode's need). Spans of the
  request past its trace's cap (a runaway run's spans in one batch, a new trace of more
  spans than ``max_spans_per_trace``) and a span twice in one request are counted as taking
  room, though ``add`` drops them (``trace_span_limit``, ``duplicate``); docs/configuration.md
  says the count leaves out "the spans it would drop: duplicates, late, over a trace's cap".

Suggested fix: count the request as ``add`` would, in order: per trace touched, the span ids
seen so far in the request, how many it will hold, and the open parents as the request's own
spans change them (a small dict per trace touched, built only on this slow path).
"""

from __future__ import annotations

import dataclasses

from assembly_support import agent, span, tool
from stall_support import LIMITS, make, tid

from toolwatch.model import SpanRecord, SpanRole

_CAPPED = dataclasses.replace(
    LIMITS, max_traces=10, max_spans_per_trace=2, max_buffered_spans=5, max_refusal_ns=0
)


def _sizes(spans: list[SpanRecord]) -> int:
    return sum(s.size_bytes for s in spans)


def test_the_end_of_a_capped_run_is_not_dropped_buffer_full_once_let_through() -> None:
    buffer, _, metrics = make(_CAPPED)
    # Run 1 at its cap: two tool calls of its agent span 2, which has not ended.
    steps = [tool(n, 2, "lookup_order", 0, 1, trace_id=tid(1), size_bytes=10) for n in (3, 4)]
    other = [tool(3, 1, "lookup_order", 0, 1, trace_id=tid(2), size_bytes=10)]
    buffer.add(steps + other)  # 3 of 5 spans held
    end = [  # the run's end, in the order its spans ended: agent, workflow, the request's
        agent(2, 1, "refund-bot", 0, 5, trace_id=tid(1), size_bytes=10),
        span(1, 9, SpanRole.OTHER, 0, 6, name="workflow", trace_id=tid(1), size_bytes=10),
        span(9, None, SpanRole.OTHER, 0, 7, name="POST /chat", trace_id=tid(1), size_bytes=10),
    ]
    refused: dict[str, int] = {}

    buffer.admit(end, _sizes(end), refused)  # as Engine.admit does

    # Was: let through as fitting (2 of 3 spans counted); the root dropped ``buffer_full``.
    # Was: refused (the sender retries), or taken whole.
    assert refused == {}
    assert metrics.dropped == {}


def test_a_request_whose_spans_past_the_cap_are_dropped_is_taken_when_the_rest_fits() -> None:
    limits = dataclasses.replace(_CAPPED, max_spans_per_trace=3, max_buffered_spans=6)
    buffer, _, metrics = make(limits)
    buffer.add([tool(n, 1, "t", 0, 1, trace_id=tid(2), size_bytes=10) for n in (3, 4)])  # 2 of 6
    looping = [tool(n, 1, "t", 0, 1, trace_id=tid(1), size_bytes=10) for n in range(10, 15)]

    # Was: refused (5 spans counted, 4 free); ``add`` takes 3 and drops 2 over the cap.
    assert buffer.admit(looping, _sizes(looping)) == []
    assert metrics.dropped == {"trace_span_limit": 2}


def test_a_request_holding_a_span_twice_is_taken_when_one_copy_fits() -> None:
    limits = dataclasses.replace(_CAPPED, max_buffered_spans=3)
    buffer, _, metrics = make(limits)
    buffer.add([tool(n, 1, "t", 0, 1, trace_id=tid(2), size_bytes=10) for n in (3, 4)])
    twice = [tool(5, 1, "t", 0, 1, trace_id=tid(1), size_bytes=10)] * 2  # a retried span

    # Was: refused (2 spans counted, 1 free); ``add`` takes one and drops the other duplicate.
    assert buffer.admit(twice, _sizes(twice)) == []
    assert metrics.dropped == {"duplicate": 1}
