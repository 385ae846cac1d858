"""Review of 9c5b73e (``BackgroundOutput``): ``_stalled`` is now cleared only when the writer
thread finds ``_chars == 0`` after a batch. An output that recovered from one stall and keeps
up with a steady load, but always has a line or two queued when a batch ends (a slower disk,
a network mount: each write takes longer than the gap between findings), never reaches
zero, so ``_stalled`` stays set for as long as the load lasts: every later burst that does
not fit at once is lost without the ``ROOM_SECONDS`` wait that would have let it in.

The output takes one write per permit the test gives it (the stall, then a healthy disk);
the thread's waits are bounded; the test never sleeps to wait for the pipeline (a timer
plays the disk finishing its write 50 ms into the burst).
"""

from __future__ import annotations

import logging
import threading

from permit_file import WAIT, PermitFile

from toolwatch.sinks.background import BackgroundOutput
from toolwatch.sinks.linefile import WriteFailures

_DISK = 0.05  # seconds the disk takes to finish the write in progress during the burst


def test_after_one_stall_a_recovered_output_under_steady_load_still_gets_a_burst() -> None:
    """Scenario: an output of limit 1,000 characters (lines of 100) blocks once: the line
    that does not fit waits ``ROOM_SECONDS`` and is lost (expected). The output recovers: it
    writes everything that waited at the stall, and then keeps up with a steady load, one
    line queued while each batch is written (backlog 100 to 200 of 1,000 characters). Then
    a burst fills the backlog while the disk finishes its current write within 50 ms.

    Was: ``_stalled`` is still set (``_chars`` was never 0 after a batch), so the burst's
    line that does not fit is lost at once, counted and logged as "blocked", on an output
    that has kept up for many batches. In production (4 Mi, 64 KiB batches) one hiccup of a
    network mount at startup makes every later large burst (a tick that completes many runs,
    a few multi-MiB ToolTraces) lose lines at once, for as long as the load never lets the
    queue empty exactly.
    Now: the stall ends once the output wrote what waited when it began, or wrote a batch
    within ``ROOM_SECONDS`` (the trickle review's own suggestion), or the backlog fell below
    a low-water mark; then the burst's line waits and fits.
    Regression of 9c5b73e (before it any batch written ended the stall)."""
    lost = 0

    def failed() -> None:
        nonlocal lost
        lost += 1

    gated = PermitFile()
    output = BackgroundOutput(
        gated, WriteFailures("the findings log", failed, logging.getLogger(__name__)), 1000
    )
    line = "x" * 99 + "\n"
    try:
        output.write(line)  # taken by the thread, which waits at the gate
        assert gated.entered.acquire(timeout=WAIT)
        for _ in range(9):
            output.write(line)  # the backlog is full: 1,000 characters
        output.write(line)  # the stall: waits ROOM_SECONDS, lost
        assert lost == 1
        # The output recovers; a steady load queues one line while each batch is written.
        gated.permits.release()  # the first line is written...
        assert gated.entered.acquire(timeout=WAIT)  # ...the 9 that waited are being written
        for _ in range(5):
            output.write(line)  # one finding while the disk writes the batch before
            gated.permits.release()
            assert gated.entered.acquire(timeout=WAIT)  # the next batch: that one line
        assert lost == 1, "a line of the steady load was lost"
        # Everything that waited at the stall is written; the backlog is 100 characters.
        for _ in range(9):
            output.write(line)  # a burst: the backlog is full again
        assert lost == 1
        disk = threading.Timer(_DISK, gated.permits.release)  # the write in progress ends
        disk.start()
        output.write(line)  # does not fit: should wait for the disk's write to end
        disk.join(WAIT)
        lost_in_burst = lost - 1
    finally:
        for _ in range(100):
            gated.permits.release()
        output.close(WAIT)
    assert lost_in_burst == 0, "a burst line was lost at once on an output that keeps up"
