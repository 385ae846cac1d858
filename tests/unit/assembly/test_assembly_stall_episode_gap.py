"""Was (found by review, fixed): the refusal episode outlives the request it counted, so the
buffer evicts runs in flight at once, with no refusal, long after its stall was over.

``Refusals`` keeps the most any refused request needed (here: two new traces) and ends the
episode only when the buffer has that room. Once the stall takes that request by evicting,
its need is met, and its own runs now fill the room it needed: the buffer at ``max_traces``
never has two free slots at once again while runs end and start one at a time (any steady
load near the bound). Requests fit meanwhile, nothing is refused for minutes; then one does
not fit, and ``stalled`` (``now - since >= max_refusal_ns``, ``since`` minutes ago) takes it
by evicting a run in flight at once (judged ``evicted``), where ``backpressure`` promises a
refusal for up to ``max_refusal_seconds`` first ("how long a full buffer refuses").

Suggested fix: end the episode when the request it waited for is taken (reset the need when
a stalled request is taken, and let the next refusal begin a new count), or when nothing was
refused for longer than a sender's longest retry interval (the Collector's 30 s
``max_interval``, so a retry of a batch still refused counts on).
"""

from __future__ import annotations

from assembly_support import SECOND
from stall_support import end_of, in_flight, make, offer, tick, tid

from toolwatch.assembly.completed import CompletedTrace
from toolwatch.assembly.limits import MAX_REFUSAL_NS


def test_a_full_buffer_refuses_again_after_minutes_without_a_refusal() -> None:
    buffer, clock, metrics = make()  # max_traces=2
    out: list[CompletedTrace] = []
    assert offer(buffer, in_flight(1), out)
    assert offer(buffer, in_flight(2), out)
    two_new = in_flight(3) + in_flight(4)
    assert not offer(buffer, two_new, out)  # the episode begins: it needs two new traces
    tick(buffer, clock, MAX_REFUSAL_NS / SECOND, out)
    assert offer(buffer, two_new, out)  # stalled: runs 1 and 2 evicted, 3 and 4 taken
    assert metrics.evicted == {"max_traces": 2}

    # Ten minutes of runs ending and starting one at a time: every request fits.
    running = [3, 4]
    for n in range(5, 125):
        ending = running.pop(0)
        assert offer(buffer, end_of(ending), out)
        tick(buffer, clock, 2, out)  # judged after the wait
        assert tid(ending) in {t.trace_id for t in out}
        assert offer(buffer, in_flight(n), out)  # fits: one slot was free
        running.append(n)
        tick(buffer, clock, 3, out)
    assert metrics.evicted == {"max_traces": 2}

    # Full again, ten minutes after the last refusal: a new run's first batch is refused.
    assert not offer(buffer, in_flight(999), out)
    assert metrics.evicted == {"max_traces": 2}
