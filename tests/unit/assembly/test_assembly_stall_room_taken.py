"""Was (found by review, fixed): ``has_room`` counts as needing room spans that ``add`` drops
without taking any: ``duplicate`` (an OTLP retry of spans already held), ``late`` (stragglers
of a run already judged, whose trace id ``_new_traces`` counts as a new trace) and
``trace_span_limit``. 5095d85 left out a span too large for the whole buffer for exactly this
reason ("it takes no room"), but not these.

At a full buffer such a request is refused (the sender retries what toolwatch would take and
drop at once), and its size becomes the episode's need (``Refusals.refused``), which then
holds the episode open, and the buffer stalls sooner for requests that do need room. The
straggler case is the one a stall makes common: the runs it evicted send the rest of their
spans in the batches that carry the next steps of the runs it still holds.

Suggested fix: ``_room_taken``/``_new_traces`` leave out a span whose trace id is remembered
(``_emitted``), a span id its trace already holds, and a span over its trace's cap, as
``_drop_reason`` would (only when the request does not fit, as for too-large spans).
"""

from __future__ import annotations

import dataclasses

from stall_support import LIMITS, end_of, in_flight, make, offer, tick, tid

from toolwatch.assembly.completed import CompletedTrace


def test_a_retry_of_spans_already_held_is_taken_at_the_span_bound() -> None:
    buffer, _, metrics = make(dataclasses.replace(LIMITS, max_buffered_spans=2, max_traces=10))
    out: list[CompletedTrace] = []
    assert offer(buffer, in_flight(1) + in_flight(1, span_id=3), out)  # the buffer is full
    retry = in_flight(1) + in_flight(1, span_id=3)  # the answer was lost; the sender retries

    assert offer(buffer, retry, out)  # both dropped ``duplicate``: no room needed
    assert metrics.dropped == {"duplicate": 2}


def test_stragglers_of_a_judged_run_beside_a_continuation_are_taken_at_max_traces() -> None:
    buffer, clock, metrics = make()  # max_traces=2
    out: list[CompletedTrace] = []
    assert offer(buffer, in_flight(1), out)
    assert offer(buffer, end_of(1), out)
    tick(buffer, clock, 2, out)  # run 1 judged, complete
    assert [t.trace_id for t in out] == [tid(1)]
    assert offer(buffer, in_flight(2), out)
    assert offer(buffer, in_flight(3), out)  # full: runs 2 and 3 in flight

    straggler = in_flight(1, span_id=7)  # a step of run 1 that ended late
    batch = straggler + in_flight(2, span_id=3)  # ... sent with run 2's next step

    assert offer(buffer, batch, out)  # run 2's step taken, the straggler dropped late
    assert metrics.dropped == {"late": 1}


def test_steps_of_a_run_past_its_span_cap_are_taken_at_the_span_bound() -> None:
    limits = dataclasses.replace(LIMITS, max_buffered_spans=3, max_spans_per_trace=2, max_traces=10)
    buffer, _, metrics = make(limits)
    out: list[CompletedTrace] = []
    assert offer(buffer, in_flight(1) + in_flight(1, span_id=3), out)  # run 1 at its cap
    assert offer(buffer, in_flight(2), out)  # the buffer is full
    looping = in_flight(1, span_id=4) + in_flight(1, span_id=5)  # run 1 loops on a tool

    assert offer(buffer, looping, out)  # both dropped ``trace_span_limit``: no room needed
    assert metrics.dropped == {"trace_span_limit": 2}
