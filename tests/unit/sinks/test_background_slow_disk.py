"""A disk slower than a burst of lines but working makes room for each of them (review of
fa1e7dd, ``BackgroundOutput._wait_for_room``). Was (fa1e7dd): the lines that did not fit
shared ``ROOM_SECONDS`` until the output had written what waited when the first began to wait
(up to the whole 4 Mi backlog), so an output that freed room for each line well within half a
second but could not write a backlog within it (under 8 MB/s) lost lines in a burst larger
than the backlog. Now: each wait is bounded by ``ROOM_SECONDS`` and all of them by
``ROOM_BUDGET_SECONDS``, which comes back with time.

The output takes one write per permit; the output's clock (``clock``, which times the waits)
gives the disk a permit as each wait for room begins and says that wait lasted 0.2 s (the
disk's time for one 1 MiB line). No sleeps."""

from __future__ import annotations

import logging

from permit_file import WAIT, PermitFile, WaitClock

from toolwatch.sinks.background import OUTPUT_BACKLOG_CHARS, BackgroundOutput
from toolwatch.sinks.linefile import WriteFailures

_LINE = 1024 * 1024  # characters of one ToolTrace line (a run with large results)
_DISK = 0.2  # seconds the disk takes for one such line: 5 MB/s


def test_a_disk_behind_by_a_few_large_tooltraces_loses_none_of_a_burst() -> None:
    """Scenario: the ToolTrace dump's backlog (4 Mi characters) holds four 1 MiB lines, the
    first being written; a tick (or the drain) publishes four more. The disk writes one line
    in each wait for room, 0.2 s each.
    Was (fa1e7dd): the third wait spent the shared 0.5 s (0.6 s), the output counted as
    stalled, and the fourth line was lost at once, though the disk made room for every line
    within 0.2 s. Now: each of the four waits 0.2 s for its room, none lost."""
    lost = 0

    def failed() -> None:
        nonlocal lost
        lost += 1

    disk = PermitFile()
    clock = WaitClock(disk, _DISK)
    output = BackgroundOutput(
        disk,
        WriteFailures("the ToolTrace dump", failed, logging.getLogger(__name__)),
        OUTPUT_BACKLOG_CHARS,
        clock=clock,
    )
    line = "x" * (_LINE - 1) + "\n"
    try:
        output.write(line)
        assert disk.entered.acquire(timeout=WAIT)  # the first is being written
        for _ in range(OUTPUT_BACKLOG_CHARS // _LINE - 1):
            output.write(line)  # the backlog is full: four lines
        for _ in range(4):
            output.write(line)  # the burst: each waits for the disk to write one line
        assert clock.waits == 4
        assert lost == 0, f"{lost} of 4 ToolTraces lost after {clock.now:.1f} s of waits"
        for _ in range(4):
            disk.permits.release()  # the disk writes what is left
        assert output.written(WAIT)
        assert disk.getvalue() == line * 8
    finally:
        for _ in range(20):
            disk.permits.release()
        output.close(WAIT)
