"""Was (found by review, fixed): any request that fits restarts the count, so the fallback
never comes while another sender's runs in flight keep sending continuation-only batches.

The commit's case: a buffer full of runs in flight whose last spans come in refused batches
that also start new runs. If any other sender's batch continues only traces already buffered
(a long run exporting its steps every few seconds: one reasoning-model run of minutes
suffices), it fits under ``max_traces`` and resets ``_refused_since`` (``has_room``: "none
fitting in between"). The mixed batch is then refused until the runs age out
(``max_trace_age``, 300 s) or the long run ends, far past the SDKs' 10 s export timeout:
the exact loss the commit set out to stop, still uncounted. Livelock for the mixed sender,
not for the buffer: B's run progresses, A's run 1 cannot end (its end is in the refused
batch) and is judged ``timed_out`` at 300 s.

Fix: measure the refusal from the oldest request refused that still would not fit (or reset
only when a request that needed room — new traces, or past a span/byte bound — fitted, or
when the buffer's use fell below a watermark), not from any request that fitted.
"""

from __future__ import annotations

import pytest
from stall_support import end_of, in_flight, make, offer, tick

from toolwatch.assembly.completed import CompletedTrace

#: The OpenTelemetry SDKs' exporters give a refused batch up after their export timeout.
SDK_EXPORT_TIMEOUT_SECONDS = 10


def _taken_at(b_continues_every: int | None) -> int | None:
    """The second A's mixed batch (run 1's end, run 3's start) is taken, retried every
    second, while B's long run 2 exports a step every ``b_continues_every`` seconds."""
    buffer, clock, _ = make()
    out: list[CompletedTrace] = []
    assert offer(buffer, in_flight(1), out)  # sender A's run 1, in flight
    assert offer(buffer, in_flight(2), out)  # sender B's long run 2, in flight
    mixed = end_of(1) + in_flight(3)
    for second in range(1, 60):
        tick(buffer, clock, 1, out)
        if b_continues_every and second % b_continues_every == 0:
            assert offer(buffer, in_flight(2, span_id=100 + second), out)  # it fits
        if offer(buffer, mixed, out):
            return second
    return None


def test_control_with_no_other_traffic_the_mixed_batch_is_taken_at_the_limit() -> None:
    """Control: first refused at 1 s, taken at 8 s (7 s of refusals, the default limit)."""
    assert _taken_at(None) == 8


@pytest.mark.parametrize("every", [3, 4])
def test_a_mixed_batch_is_taken_before_the_sdk_gives_it_up_while_a_long_run_continues(
    every: int,
) -> None:
    """Was: never taken within a minute (refused throughout). Now: taken at the limit."""
    taken = _taken_at(every)
    assert taken is not None and taken < SDK_EXPORT_TIMEOUT_SECONDS
