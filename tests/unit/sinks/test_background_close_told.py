"""``BackgroundOutput.close`` tells in one log line what a shutdown's grace left unwritten,
the lines still queued and those being written apart (review of 2e11f06). Was: it told them to
the output's ``WriteFailures`` line by line, which logs an outage's 1st, 2nd, 4th, 8th...
failure in a row only, so the lines being written, told last ("the file may hold part of
them"), were logged only when their place in the streak was a power of two: not with two
lines queued and one being written, nor at all once the output was already losing lines
before the shutdown (a blocked output's usual state when its grace runs out). Now: one
line, whatever the outage logged before (``WriteFailures.lost``): lines (a publication may hold
several) not written and lines being written apart, the grace named as the output's thread
had it (a second review: the writes of a batch not begun were told as being written, writes
as lines, and the second output's grace as what was left of one deadline, 0 s).

The output's thread is held in its write by a ``PermitFile`` that never gets a permit until
the test ends; ``close``'s own timeout bounds the wait, no sleeps."""

from __future__ import annotations

import errno
import io
import logging
import os
import threading
from pathlib import Path

import pytest
from permit_file import WAIT, PermitFile

from toolwatch.config import OutputSettings
from toolwatch.outputs import open_outputs
from toolwatch.sinks.background import BackgroundOutput
from toolwatch.sinks.findings import Redaction
from toolwatch.sinks.linefile import WriteFailures

_TOLD = (
    "could not write the findings log (?): the shutdown's 0.05 s ran out with 2 line(s) not"
    " written and 1 being written, which the file may hold in part"
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
    the thread writes them one by one; ``zero`` waits for ``go``; ``second`` blocks until
    the test ends."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()
        self.zero_entered = threading.Event()
        self.second_entered = threading.Event()
        self.release = threading.Event()

    def write(self, text: str, /) -> int:
        if text.count("\n") > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        if text == "zero\n":
            self.zero_entered.set()
            assert self.go.wait(WAIT)
        if text == "second\n":
            self.second_entered.set()
            assert self.release.wait(WAIT)
        return super().write(text)

    def fileno(self) -> int:
        return -1


def _counting() -> tuple[list[int], WriteFailures]:
    failures = [0]

    def failed() -> None:
        failures[0] += 1

    return failures, WriteFailures("the findings log", failed, logging.getLogger(__name__))


def test_close_tells_as_being_written_only_the_line_the_system_is_taking(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Scenario: a batch of three lines fails as a whole on a full disk; the thread writes
    "first" (told), blocks in "second"; "third" waits its turn in the batch; the shutdown's
    0.05 s run out.
    Was: the whole batch counted lost ("first" too, told written already), then (1c9223f)
    "2 being written as its 0.05 s ran out, which the file may hold in part" ("third" was
    never written: the file holds none of it). Now: "second" being written, "third" not."""
    failures, told = _counting()
    disk = _FullForBatches()
    output = BackgroundOutput(disk, told)
    try:
        output.write("zero\n")
        assert disk.zero_entered.wait(WAIT)  # the thread writes it: the next three wait
        for line in ("first\n", "second\n", "third\n"):
            output.write(line)
        disk.go.set()  # taken as one batch, which fails as a whole: one by one
        assert disk.second_entered.wait(WAIT)  # "first" written, the thread in "second"
        with caplog.at_level(logging.ERROR):
            output.close(timeout=0.05)
    finally:
        disk.release.set()
    assert failures[0] == 2
    assert disk.getvalue() == "zero\nfirst\n"
    assert [record.getMessage() for record in caplog.records] == [
        "could not write the findings log (?): the shutdown's 0.05 s ran out with 1 line(s)"
        " not written and 1 being written, which the file may hold in part"
    ]


def test_close_counts_the_lines_of_a_publication_it_tells_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Scenario: the findings log's thread is blocked writing one line; a run with three
    findings is published (one write of three lines, as ``JsonLinesFindingSink`` writes
    it); the shutdown's 0.05 s run out.
    Was: "lines lost: 1 not written within 0.05 s of the shutdown" (one write).
    Now: the three findings not written are counted as lines; the metric counts writes."""
    failures, told = _counting()
    stream = PermitFile()
    output = BackgroundOutput(stream, told)
    try:
        output.write("taken\n")
        assert stream.entered.acquire(timeout=WAIT)  # the thread blocks in its write
        output.write('{"finding": 1}\n{"finding": 2}\n{"finding": 3}\n')
        with caplog.at_level(logging.ERROR):
            output.close(timeout=0.05)
    finally:
        stream.permits.release()
    assert failures[0] == 2  # two writes
    assert [record.getMessage() for record in caplog.records] == [
        "could not write the findings log (?): the shutdown's 0.05 s ran out with 3 line(s)"
        " not written and 1 being written, which the file may hold in part"
    ]


def test_each_blocked_output_tells_the_grace_its_thread_had(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Scenario: the findings log and the ToolTrace dump are FIFOs whose reader stopped
    reading (one stalled collector); each thread is blocked in a write larger than the
    pipe's buffer, one more line queued behind it; ``Outputs.close(0.2)``.
    Was: the dump's line said its line was "not written within 0 s of the shutdown" (what
    was left of one deadline). Now: both name the 0.2 s both threads had (``stop_taking``
    told both at once)."""
    readers = []
    paths = []
    for name in ("findings.fifo", "dump.fifo"):
        path = tmp_path / name
        os.mkfifo(path)
        readers.append(os.open(path, os.O_RDONLY | os.O_NONBLOCK))  # opened, never read
        paths.append(str(path))
    outputs = open_outputs(
        OutputSettings(findings=paths[0], dump_tooltraces=paths[1]),
        [],
        [],
        Redaction(),
        wall_clock=lambda: 0,
        failed=lambda _label: None,
    )
    big = "x" * (1024 * 1024) + "\n"  # more than a pipe holds: the write blocks
    try:
        for file in outputs.files:
            file.output.write(big)
            file.output.write("queued\n")
        with caplog.at_level(logging.ERROR, logger="toolwatch.outputs"):
            outputs.close(0.2)
    finally:
        for reader in readers:
            os.close(reader)  # the blocked writes fail (EPIPE): the threads end
    told = sorted(record.getMessage() for record in caplog.records)
    assert len(told) == 2, told
    for message in told:
        assert "the shutdown's 0.2 s ran out with 1 line(s) not written and 1 being" in message
