"""Was (review of 07ff729, kept): when the path of an output's FIFO named another FIFO that
no reader had opened yet, the look said what became of the lines from the written FIFO's
name alone (``st_nlink``): a removed one's lines "are lost, counted, while no one reads it",
though its old reader may still hold and read it (a collector that makes its FIFO again
before its old process lets go of the old one: a graceful restart, a second instance
started before the first stops, ``rm`` + ``mkfifo`` under a running reader): every line
read there, none counted, yet the ERROR and README said lost and counted. And one renamed
away was "still written", its lines lost (EPIPE), counted, when no one read it.
Now: the write end is polled without waiting (``POLLERR``: no reader holds the pipe): its
lines "go to the reader that still holds it", or "are lost, counted, while no one reads
it", removed or renamed away alike.

How it is shown: real FIFOs in ``tmp_path``; the old reader a non-blocking descriptor the
test reads (kept open, or closed: no reader); the new FIFO at the path read by no one; the
thread's follow clock injected; waits bounded by ``written``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from findings_log import open_findings_log

from tests.fifos import available
from toolwatch.sinks.background_thread import FOLLOW_SECONDS

_WAIT = 10.0  # seconds: a bound on each wait for the writer thread, never reached when it works


def _two_findings_past_the_look(
    fifo: Path, then: str, read: bool, caplog: pytest.LogCaptureFixture
) -> tuple[bytes, list[str], list[str]]:
    """The findings log at ``fifo``, read by a reader the test holds; the FIFO is removed
    (``then``: ``"removed"``) or renamed away, and made again at the path, read by no one;
    the old reader goes on reading it (``read``) or has closed it. Two findings, each past
    the thread's next look. What the old reader read, the writes counted failed, and what
    the outputs logged."""
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    failures: list[str] = []
    now = [0.0]
    outputs = open_findings_log(fifo, failures.append, lambda: now[0])
    output = outputs.files[0].output
    received = b""
    try:
        if then == "removed":
            fifo.unlink()
        else:
            fifo.rename(fifo.with_suffix(".old"))
        os.mkfifo(fifo)
        if not read:
            os.close(reader)
        with caplog.at_level(logging.INFO, logger="toolwatch.outputs"):
            for line in ("first\n", "second\n"):
                now[0] += 2 * FOLLOW_SECONDS  # the thread looks at its path before writing
                output.write(line)
                assert output.written(_WAIT)
                received += available(reader) if read else b""
    finally:
        outputs.close(_WAIT)
        if read:
            os.close(reader)
    said = [r.getMessage() for r in caplog.records if r.name == "toolwatch.outputs"]
    return received, failures, said


def test_lines_still_read_through_the_removed_fifo_are_not_told_lost_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Scenario (the review's): a collector reads the findings log's FIFO; the FIFO is
    removed and made again at the path while the old collector still holds (and reads) the
    old one; the new FIFO has no reader yet; two findings, each past the thread's next look.
    Was: both read by the old collector, none counted failed, yet the thread logged "...;
    still writing to the FIFO it was, which was removed: its lines are lost, counted, while
    no one reads it".
    Now: it says the lines go to the reader that still holds the FIFO; told once."""
    fifo = tmp_path / "findings.fifo"
    os.mkfifo(fifo)
    received, failures, said = _two_findings_past_the_look(fifo, "removed", True, caplog)
    assert (received, failures) == (b"first\nsecond\n", [])
    assert said == [
        f"cannot open {fifo} (output.findings): a FIFO no reader has opened yet; still writing"
        " to the FIFO it was, which was removed: its lines go to the reader that still holds it"
    ]


@pytest.mark.parametrize(
    ("read", "received", "failures", "going_on"),
    [
        (True, b"first\nsecond\n", [], "its lines go to the reader that still holds it"),
        (
            False,
            b"",
            ["findings_log"] * 2,
            "its lines are lost, counted, while no one reads it",
        ),
    ],
    ids=["read", "unread"],
)
def test_a_fifo_renamed_away_says_whether_its_lines_are_read_or_lost(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    read: bool,
    received: bytes,
    failures: list[str],
    going_on: str,
) -> None:
    """Scenario: the findings log's FIFO is renamed away (``mv``, a collector's rotation of
    its pipe) and a FIFO made at the path, read by no one yet; the old reader still reads
    the renamed one, or has closed it; two findings past the thread's next look.
    Was: "still writing to the FIFO it was", whether its lines were read or lost (EPIPE),
    counted.
    Now: which, as the written FIFO's write end polls: read by its reader, or lost, counted
    (each line's failure: Broken pipe)."""
    fifo = tmp_path / "findings.fifo"
    os.mkfifo(fifo)
    got = _two_findings_past_the_look(fifo, "renamed", read, caplog)
    looked = (
        f"cannot open {fifo} (output.findings): a FIFO no reader has opened yet; still writing"
        f" to the FIFO it was, which was renamed away: {going_on}"
    )
    lost = [
        f"could not write the findings log ({fifo}): Broken pipe ({n} in a row)"
        for n in ("1 failure", "2 failures")
    ]
    assert got == (received, failures, [looked, *(lost if failures else [])])
