"""Second review of af9fc02 (``BackgroundOutput.write``): a line that does not fit waits up to
``ROOM_SECONDS`` for room unless ``_stalled``; and ``_stalled`` is cleared by the writer thread
after *any* batch it wrote. An output that is mostly blocked but takes a batch now and then (a
log driver whose collector reads a little at a time, Docker ``mode=blocking``) therefore makes
the event loop wait ``ROOM_SECONDS`` again after every batch it takes.

The output here takes one write per permit the test gives it; the thread's waits are bounded
(``WAIT``), the test never sleeps: it waits for the thread to reach its next write.
"""

from __future__ import annotations

import logging
import time

from permit_file import WAIT, PermitFile, WaitClock

from toolwatch.sinks.background import (
    ROOM_BUDGET_SECONDS,
    ROOM_REFILL,
    ROOM_SECONDS,
    BackgroundOutput,
)
from toolwatch.sinks.linefile import WriteFailures

#: The bound, in characters: 1,024 lines of 1 KiB, 16 batches of the thread's (64 Ki), as a
#: production backlog holds many batches (4 Mi, 64 of them).
_LIMIT = 1024 * 1024


def test_a_trickling_output_costs_the_event_loop_the_room_wait_once_per_stall() -> None:
    """Scenario: an output of limit 1 Mi characters is full (lines of 1 KiB) and blocked; the
    first line that does not fit waits ``ROOM_SECONDS`` and is lost (expected: the stall's
    one wait). Then the output takes one batch (64 Ki characters), three times, each time
    staying full; after each, the event loop writes lines until one is lost.
    Was (review of af9fc02): each batch taken ended the stall, so each of the three rounds
    made the loop wait ``ROOM_SECONDS`` again before losing a line: 4 x 0.5 s = 2 s of a
    blocked event loop (no exports, no /metrics, no /healthz) while the output never caught
    up. In production (4 Mi limit, 64 Ki batches) a driver that takes 64 KiB every second
    blocked the loop half the time, indefinitely, and lines were lost all the same.
    Now: the stall ends once the output wrote what waited when it began (a backlog's worth:
    64 s at 64 KiB a second, for one wait), so the loop waits once in this episode."""
    lost = 0

    def failed() -> None:
        nonlocal lost
        lost += 1

    trickle = PermitFile()
    output = BackgroundOutput(
        trickle, WriteFailures("the findings log", failed, logging.getLogger(__name__)), _LIMIT
    )
    line = "x" * 1023 + "\n"
    output.write(line)  # taken by the thread, which waits at the gate
    assert trickle.entered.acquire(timeout=WAIT)
    for _ in range(_LIMIT // len(line) - 1):
        output.write(line)  # the backlog is full: 1,000 characters
    blocked = 0.0

    def write_until_one_is_lost() -> None:
        nonlocal blocked
        before = lost
        for _ in range(2 * _LIMIT // len(line)):
            start = time.monotonic()
            output.write(line)
            blocked += time.monotonic() - start
            if lost > before:
                return
        raise AssertionError("twice the backlog fitted in it")

    try:
        write_until_one_is_lost()  # the stall's first wait: expected
        for _ in range(3):
            trickle.permits.release()  # the output takes one batch...
            assert trickle.entered.acquire(timeout=WAIT)  # ...and blocks in the next
            write_until_one_is_lost()
    finally:
        for _ in range(100):
            trickle.permits.release()
        output.close(WAIT)
    assert blocked < 2 * ROOM_SECONDS, f"the event loop waited {blocked:.2f} s in write"


def test_an_output_taking_a_batch_as_each_wait_runs_out_costs_the_loop_its_budget() -> None:
    """Scenario: the output's backlog (1 Mi characters of 1 KiB lines) is full; it takes
    one batch (64 Ki characters) as each wait for room would run out (``ROOM_SECONDS``),
    and never catches up.
    Was (stop 45's note): each wait got room, so the output never counted as stalled: the
    event loop waited half a second for every batch, indefinitely (exports, ``/metrics``
    and ``/healthz`` blocked nearly all the time).
    Now: the waits spend ``ROOM_BUDGET_SECONDS`` (two of them), then lines that do not fit
    are lost at once until the output caught up; by then the budget has come back
    (``ROOM_REFILL``), and a line waits again."""
    lost = 0

    def failed() -> None:
        nonlocal lost
        lost += 1

    trickle = PermitFile()
    clock = WaitClock(trickle, ROOM_SECONDS)
    output = BackgroundOutput(
        trickle,
        WriteFailures("the findings log", failed, logging.getLogger(__name__)),
        _LIMIT,
        clock=clock,
    )
    line = "x" * 1023 + "\n"
    output.write(line)  # taken by the thread, which waits at the gate
    assert trickle.entered.acquire(timeout=WAIT)
    try:
        written = 1
        while not lost and written < 4 * _LIMIT // len(line):
            output.write(line)
            written += 1
        assert lost == 1
        assert clock.waits == round(ROOM_BUDGET_SECONDS / ROOM_SECONDS)
        # The backlog, then what the two batches made room for (the first line, taken
        # alone, then 64), then one line lost.
        assert written == _LIMIT // len(line) + 1 + 64 + 1
        for _ in range(10):
            output.write(line)  # stalled: lost at once, no wait
        assert (lost, clock.waits) == (11, 2)
        for _ in range(_LIMIT // len(line)):
            trickle.permits.release()  # the output takes what waits: caught up
        assert output.written(WAIT)
        clock.now += ROOM_SECONDS / ROOM_REFILL  # the budget comes back: half of it
        for _ in range(_LIMIT // len(line) + 1):
            output.write(line)  # full again: the last waits for room, and gets it
        assert (lost, clock.waits) == (11, 3)
    finally:
        for _ in range(4 * _LIMIT // len(line)):
            trickle.permits.release()
        output.close(WAIT)
