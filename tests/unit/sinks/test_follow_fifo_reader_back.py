"""Was (review of 07ff729, lesser): a write to a FIFO whose reader was gone (EPIPE: a
collector restarting, which removes its FIFO and makes it again) was lost, counted, and so
was every line after it until the thread's next look at its path, up to ``FOLLOW_SECONDS``
later: a collector back within that second lost a second of lines.
Now: a line the FIFO's reader is gone for has the thread look at its path at once, at each
batch that meets one: the FIFO its reader made again is opened, and the lines after that one
are written there. A reader that came back loses that line alone.

How it is shown: real FIFOs in ``tmp_path``, read by non-blocking descriptors the test holds
(the old collector's closed as it restarts); the thread's follow clock injected and never
moved, so that only the look at once can open the new FIFO; one batch per ``_batch``
(``GATHER_SECONDS`` raised: the thread writes when the test asks, ``written``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from findings_log import open_findings_log

from tests.fifos import available
from toolwatch.outputs import Outputs
from toolwatch.sinks import background_thread

_WAIT = 10.0  # seconds: a bound on each wait for the writer thread, never reached when it works


@pytest.fixture
def fifo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A FIFO in ``tmp_path``; the writer threads gather until asked (one batch a ``_batch``)."""
    monkeypatch.setattr(background_thread, "GATHER_SECONDS", _WAIT)
    path = tmp_path / "findings.fifo"
    os.mkfifo(path)
    return path


def _open(fifo: Path, failures: list[str]) -> Outputs:
    """The findings log at ``fifo`` (a reader must be there); its follow clock never moves."""
    return open_findings_log(fifo, failures.append)


def _batch(outputs: Outputs, *lines: str) -> None:
    """``lines`` written by the thread in one batch."""
    output = outputs.files[0].output
    for line in lines:
        output.write(line)
    assert output.written(_WAIT)


def _restarted(fifo: Path, old_reader: int) -> int:
    """The collector restarted: its old reader closed, its FIFO removed and made again, and
    read by a new reader (returned)."""
    os.close(old_reader)
    fifo.unlink()
    os.mkfifo(fifo)
    return os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "toolwatch.outputs"]


def test_a_collector_restarted_between_two_looks_loses_one_line_not_the_rest(
    fifo: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Scenario: a collector reads the findings log's FIFO; it restarts (its FIFO removed
    and made again, read by its new process) well within a second of the thread's last look;
    then three findings in one batch.
    Was: all three lost (Broken pipe), counted, until the next look a second later.
    Now: the first is lost, counted; the thread looks at once, opens the new FIFO, and the
    other two are read there."""
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    failures: list[str] = []
    outputs = _open(fifo, failures)
    try:
        _batch(outputs, "before\n")
        before = available(reader)
        reader = _restarted(fifo, reader)
        with caplog.at_level(logging.INFO, logger="toolwatch.outputs"):
            _batch(outputs, "lost\n", "read\n", "read too\n")
        after = available(reader)
    finally:
        outputs.close(_WAIT)
        os.close(reader)
    assert (before, after, failures) == (b"before\n", b"read\nread too\n", ["findings_log"])
    assert _said(caplog) == [
        f"could not write the findings log ({fifo}): Broken pipe (1 failure in a row)",
        f"output.findings: {fifo} opened again (its reader made the FIFO there again)",
        f"the findings log ({fifo}) is written again, after 1 failure in a row",
    ]


def test_each_batch_a_gone_reader_fails_looks_again_at_once(
    fifo: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Scenario: the collector stops (closes and removes its FIFO); two findings, a batch
    each; it starts again (makes the FIFO and reads it); a batch of two findings.
    Was: the four lost, counted: the thread looked at its path once a second at most.
    Now: each batch that meets the gone reader looks at once: the first two find nothing at
    the path (their lines lost, counted, nothing created there); the third opens the new
    FIFO after its first line, and the second line is read."""
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    failures: list[str] = []
    outputs = _open(fifo, failures)
    try:
        os.close(reader)
        fifo.unlink()
        with caplog.at_level(logging.INFO, logger="toolwatch.outputs"):
            _batch(outputs, "lost\n")
            _batch(outputs, "lost too\n")
            created = os.path.lexists(fifo)
            os.mkfifo(fifo)
            reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
            _batch(outputs, "lost as well\n", "read\n")
        received = available(reader)
    finally:
        outputs.close(_WAIT)
        os.close(reader)
    assert (received, failures, created) == (b"read\n", ["findings_log"] * 3, False)
    assert _said(caplog) == [
        f"could not write the findings log ({fifo}): Broken pipe (1 failure in a row)",
        f"could not write the findings log ({fifo}): Broken pipe (2 failures in a row)",
        f"output.findings: {fifo} opened again (its reader made the FIFO there again)",
        f"the findings log ({fifo}) is written again, after 3 failures in a row",
    ]
