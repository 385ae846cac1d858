"""``BackgroundOutput.close`` tells in one log line what a shutdown's grace left unwritten,
the lines still queued and those being written apart (review of 2e11f06). Was: it told them to
the output's ``WriteFailures`` line by line, which logs an outage's 1st, 2nd, 4th, 8th...
failure in a row only, so the lines being written, told last ("the file may hold part of
them"), were logged only when their place in the streak was a power of two: not with two
lines queued and one being written, nor at all once the output was already losing lines
before the shutdown (a blocked output's usual state when its grace runs out). Now: one
line, whatever the outage logged before (``WriteFailures.lost``).

The output's thread is held in its write by a ``PermitFile`` that never gets a permit until
the test ends; ``close``'s own timeout bounds the wait, no sleeps."""

from __future__ import annotations

import errno
import io
import logging
import threading

import pytest
from permit_file import WAIT, PermitFile

from toolwatch.sinks.background import BackgroundOutput
from toolwatch.sinks.linefile import WriteFailures

_TOLD = (
    "could not write the findings log (?): lines lost: 2 not written within 0.05 s of the"
    " shutdown; 1 being written as its 0.05 s ran out, which the file may hold in part"
)


def test_close_logs_the_line_being_written_when_two_lines_still_wait(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Scenario: the thread is blocked writing one line; two more wait in the queue; the
    shutdown's 0.05 s run out. Expected: three failures counted, the two queued told as
    "not written within", the one being written as "being written ...: in part?".
    Found: the third failure in a row is not a power of two: the line being written is
    counted but its message never reaches the log."""
    failures = 0

    def failed() -> None:
        nonlocal failures
        failures += 1

    stream = PermitFile()
    output = BackgroundOutput(
        stream, WriteFailures("the findings log", failed, logging.getLogger(__name__))
    )
    try:
        output.write("taken\n")
        assert stream.entered.acquire(timeout=WAIT)  # the thread blocks in its write
        output.write("queued 1\n")
        output.write("queued 2\n")
        with caplog.at_level(logging.ERROR):
            output.close(timeout=0.05)
        assert failures == 3
        assert [record.getMessage() for record in caplog.records] == [_TOLD]
    finally:
        stream.permits.release()  # the process would exit; here the thread ends


class _FullForBatches(io.StringIO):
    """A disk with room for one line at a time: a write of several lines fails (ENOSPC), so
    the thread writes them one by one; ``zero`` waits for ``first_permit``, ``second`` for a
    permit that never comes until the test ends."""

    def __init__(self) -> None:
        super().__init__()
        self.first_permit = threading.Event()
        self.second_entered = threading.Event()
        self.release = threading.Event()
        self.zero_entered = threading.Event()

    def write(self, text: str, /) -> int:
        if text.count("\n") > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        if text == "zero\n":
            self.zero_entered.set()
            assert self.first_permit.wait(WAIT)
        if text == "second\n":
            self.second_entered.set()
            assert self.release.wait(WAIT)
        return super().write(text)

    def fileno(self) -> int:
        return -1


def test_close_counts_lost_only_the_lines_the_thread_had_not_told(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Scenario: a batch of two lines fails as a whole, so the thread writes them one by one;
    the first is written (told), the thread blocks in the second; the shutdown's 0.05 s run
    out. Was: ``close`` counted the whole batch (``_busy``) lost, the first line too, told
    written already. Now: the one line being written."""
    failures = 0

    def failed() -> None:
        nonlocal failures
        failures += 1

    disk = _FullForBatches()
    output = BackgroundOutput(
        disk, WriteFailures("the findings log", failed, logging.getLogger(__name__))
    )
    try:
        output.write("zero\n")
        assert disk.zero_entered.wait(WAIT)  # the thread writes it: the next two wait
        output.write("first\n")
        output.write("second\n")
        disk.first_permit.set()  # both are taken as one batch, which fails as a whole
        assert disk.second_entered.wait(WAIT)  # "first" written, the thread in "second"
        with caplog.at_level(logging.ERROR):
            output.close(timeout=0.05)
        assert failures == 1
        assert disk.getvalue() == "zero\nfirst\n"
        assert [record.getMessage() for record in caplog.records] == [
            "could not write the findings log (?): lines lost: 1 being written as its 0.05 s"
            " ran out, which the file may hold in part"
        ]
    finally:
        disk.release.set()
