"""Was (found by review, fixed): the 1 s "checks overdue" guard is fixed while ``tick_seconds``
goes up to 10.

``_stalled`` keeps refusing while the earliest completion check is ``STALL_BEHIND_NS`` (1 s)
overdue, read as "the CPU short, or assembly stuck" (docs/configuration.md). But the ticker
sleeps at least ``assembly.tick_seconds`` between checks (``app.tick_delay``), which the
configuration allows up to 10 s: with ``tick_seconds: 2`` a healthy ticker leaves checks up
to 2 s overdue in the ordinary course, and a stalled buffer refuses every request that comes
in the second half of each tick period, healthy as it is; at 10 s, nine tenths of the time.
The default (0.01 s, sleeping at most 1 s) stays under the guard.

Fix: measure "behind" against the ticker's own period: ``max(STALL_BEHIND_NS, 2 *
tick_seconds)``, or bound ``tick_seconds`` below 1 s (or warn of it).
"""

from __future__ import annotations

import dataclasses

from assembly_support import SECOND
from stall_support import LIMITS, in_flight, make, offer

from toolwatch.app import tick_delay
from toolwatch.assembly.completed import CompletedTrace


def _refused_when_stalled(tick_seconds: float) -> int:
    """Requests refused past the limit, a new run offered every 100 ms for 20 s, the ticker
    waking as ``App._until_next_tick`` wakes it (at most ``max(tick_seconds, 1)`` apart)."""
    longest = max(tick_seconds, 1.0)
    buffer, clock, _ = make(dataclasses.replace(LIMITS, tick_ns=int(tick_seconds * SECOND)))
    out: list[CompletedTrace] = []
    assert offer(buffer, in_flight(1), out)
    assert offer(buffer, in_flight(2), out)
    next_tick = clock() + int(tick_seconds * SECOND)
    refusals_when_stalled = 0
    for step in range(1, 200):
        now = clock.now_ns = SECOND + step * SECOND // 10
        if now >= next_tick:
            out.extend(buffer.poll())
            due = buffer.next_due_ns()
            wait = tick_delay(now, due if due is not None else now, tick_seconds, longest)
            next_tick = now + int(wait * SECOND)
        taken = offer(buffer, in_flight(10 + step), out)
        if not taken and step > 80:  # well past the limit (7 s): the buffer is stalled
            refusals_when_stalled += 1
    return refusals_when_stalled


def test_control_at_the_default_tick_a_stalled_buffer_takes_every_request() -> None:
    """Control: at the default tick nothing past the limit is refused."""
    assert _refused_when_stalled(0.01) == 0


def test_a_healthy_ticker_at_a_two_second_period_does_not_keep_a_stalled_buffer_refusing() -> None:
    """Was: 54 of the 139 requests past the limit were refused. Now: the guard is two ticks
    when that is longer than 1 s."""
    assert _refused_when_stalled(2.0) == 0  # tick_seconds: 2 is valid (at most 10)
