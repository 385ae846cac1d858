"""Was (review of c1855de, kept): an output that writes a FIFO was never opened again at its
path, by a SIGHUP or by the thread's own look: a collector that restarts (it removes its FIFO
and ``mkfifo``s it again) read nothing more, every line lost (EPIPE: the removed FIFO has no
reader), counted, until ``serve`` restarted; and a regular file put at a FIFO's path was no
longer opened by a SIGHUP (71198c8's did).
Now: the path is opened again when it names another file than the one written (device and
inode), at a SIGHUP and at the thread's own look alike: a FIFO without waiting for its reader
(``O_NONBLOCK``; one no reader has opened yet is looked at again later, its lines lost,
counted, nothing created), a regular file as a SIGHUP opened it at 71198c8. A FIFO's path is
still never created (test_follow_fifo.py).

How it is shown: real FIFOs and files in ``tmp_path``; a reader on the FIFO in the test
(non-blocking reads) or a collector in a child process that prints what it reads;
``Outputs.reopen`` as ``App.reload`` calls it; the thread's follow clock injected; waits
bounded by ``written`` and ``_WAIT``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from findings_log import open_findings_log

from tests.fifos import Collector, available
from toolwatch.outputs import Outputs
from toolwatch.sinks.background_thread import FOLLOW_SECONDS

_WAIT = 10.0  # seconds: a bound on each wait for the writer thread, never reached when it works


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "findings.fifo"
    os.mkfifo(path)
    return path


class _Clock:
    """The output thread's follow clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def past_the_next_look(self) -> None:
        self.now += 2 * FOLLOW_SECONDS


@contextlib.contextmanager
def _outputs(path: Path, failures: list[str], clock: _Clock | None = None) -> Iterator[Outputs]:
    """The findings log at ``path`` (a FIFO: a reader must be there), closed after. Without
    ``clock`` the thread's own look never comes: a SIGHUP alone looks."""
    outputs = open_findings_log(path, failures.append, clock or (lambda: 0.0))
    try:
        yield outputs
    finally:
        outputs.close(_WAIT)


def _write(outputs: Outputs, line: str) -> None:
    output = outputs.files[0].output
    output.write(line)
    assert output.written(_WAIT)


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the outputs logged: the looks at the path, the writes' failures by outage."""
    return [r.getMessage() for r in caplog.records if r.name == "toolwatch.outputs"]


def test_a_sighup_after_the_collector_made_its_fifo_again_sends_the_lines_to_it(
    fifo: Path,
) -> None:
    """Scenario: a collector reads the findings log's FIFO; it restarts: closes and removes
    its FIFO, ``mkfifo``s it again and opens it; the operator sends SIGHUP (or a reload
    comes); a finding is published.
    Was: the line went to the removed FIFO (EPIPE), counted lost; the collector read
    nothing, and would not until ``serve`` restarted.
    Now: the SIGHUP opens the new FIFO; the line is read there, nothing lost."""
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    failures: list[str] = []
    with _outputs(fifo, failures) as outputs:
        _write(outputs, "first\n")
        assert os.read(reader, 100) == b"first\n"
        os.close(reader)  # the collector exits, removes its FIFO...
        fifo.unlink()
        os.mkfifo(fifo)  # ...and at its restart makes it again and reads it
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        outputs.reopen()  # SIGHUP
        _write(outputs, "second\n")
        received = available(reader)
    os.close(reader)
    assert (received, failures) == (b"second\n", []), (
        f"the collector's new FIFO read {received!r}; lost: {failures}"
    )


def test_a_sighup_opens_a_regular_file_put_at_a_fifos_path(fifo: Path) -> None:
    """Scenario: the FIFO's collector is replaced by one that tails a file: the FIFO is
    removed, a regular file created at its path, and ``serve`` sent SIGHUP; a finding is
    published.
    Was (71198c8): the SIGHUP opened the file at the path; the finding went into it.
    c1855de: nothing was opened; the line went to the removed FIFO (EPIPE), counted lost,
    as every later one.
    Now: as at 71198c8."""
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    failures: list[str] = []
    with _outputs(fifo, failures) as outputs:
        os.close(reader)
        fifo.unlink()
        fifo.write_text("")  # the new shipper's file at the path
        outputs.reopen()  # SIGHUP
        _write(outputs, "second\n")
    assert (fifo.read_text(), failures) == ("second\n", []), (
        f"the file at the path holds {fifo.read_text()!r}; lost: {failures}"
    )


def test_a_restarted_collector_gets_the_lines_without_a_signal(
    fifo: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Scenario: a collector process reads the findings log's FIFO; it is restarted while
    ``serve`` runs (no SIGHUP: nothing tells toolwatch): the old process ends, the FIFO is
    removed and made again, the new process reads it. Findings before and after.
    Was: every line after the restart was lost (EPIPE), counted, until ``serve`` restarted.
    Now: the thread's own look (its next write a second later or more) opens the new FIFO,
    and says so; the new collector prints the line; nothing lost. Opened without waiting
    for a reader, the FIFO is then written blocking, as the one opened at start-up is."""
    failures: list[str] = []
    clock = _Clock()
    collector = Collector(fifo, _WAIT)
    try:
        with _outputs(fifo, failures, clock) as outputs:
            _write(outputs, "before\n")
            before = collector.printed()
            collector.end()  # the restart: the old process ends...
            fifo.unlink()  # ...its FIFO is removed and made again...
            os.mkfifo(fifo)
            collector = Collector(fifo, _WAIT)  # ...and the new process reads it
            with caplog.at_level(logging.INFO, "toolwatch.outputs"):
                clock.past_the_next_look()
                _write(outputs, "after\n")
                after = collector.printed()
                blocking = os.get_blocking(outputs.files[0].output.fileno())
    finally:
        collector.end()
    assert (before, after, failures, blocking) == ("before\n", "after\n", [], True)
    assert _said(caplog) == [
        f"output.findings: {fifo} opened again (its reader made the FIFO there again)"
    ]


def test_a_fifo_made_again_without_a_reader_yet_is_opened_once_it_has_one(
    fifo: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Scenario: the collector removes its FIFO and makes it again, but has not opened it
    yet when the next findings come (two, each past the thread's next look); then it opens
    it, and a third finding comes.
    Now: the new FIFO is opened without waiting for its reader: while it has none, it is not
    opened (told once, with what becomes of the lines), the lines go on to the removed FIFO,
    whose reader is gone: lost, counted; nothing is created at the path. Once the collector
    reads, the next look opens it and the line is read there."""
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    failures: list[str] = []
    clock = _Clock()
    with _outputs(fifo, failures, clock) as outputs:
        os.close(reader)
        fifo.unlink()
        os.mkfifo(fifo)
        with caplog.at_level(logging.INFO, "toolwatch.outputs"):
            for line in ("lost\n", "lost too\n"):
                clock.past_the_next_look()
                _write(outputs, line)
            still_a_fifo = stat.S_ISFIFO(os.lstat(fifo).st_mode)
            reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
            clock.past_the_next_look()
            _write(outputs, "read\n")
            received = available(reader)
    os.close(reader)
    assert (received, failures, still_a_fifo) == (b"read\n", ["findings_log"] * 2, True)
    assert _said(caplog) == [
        f"cannot open {fifo} (output.findings): a FIFO no reader has opened yet; still writing"
        " to the FIFO it was, which was removed: its lines are lost, counted, while no one"
        " reads it",
        f"could not write the findings log ({fifo}): Broken pipe (1 failure in a row)",
        f"could not write the findings log ({fifo}): Broken pipe (2 failures in a row)",
        f"output.findings: {fifo} opened again (its reader made the FIFO there again)",
        f"the findings log ({fifo}) is written again, after 2 failures in a row",
    ]


def test_a_fifo_put_at_a_removed_log_s_path_is_opened(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Scenario: the findings log was a regular file; the operator moves to a collector that
    reads a FIFO: removes the file, ``mkfifo``s the path, starts the collector and sends
    SIGHUP; a finding is published.
    Was: a FIFO at the path was "not rotated" (opening it could have blocked): nothing was
    opened, and the findings went on into the removed file, counted written, read by no one.
    Now: the FIFO is opened (without waiting: its reader is there), and the line read."""
    path = tmp_path / "findings.jsonl"
    failures: list[str] = []
    with _outputs(path, failures) as outputs:
        _write(outputs, "in the file\n")
        path.unlink()
        os.mkfifo(path)
        reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with caplog.at_level(logging.INFO, "toolwatch.outputs"):
            outputs.reopen()  # SIGHUP
            _write(outputs, "in the FIFO\n")
        received = available(reader)
    os.close(reader)
    assert (received, failures) == (b"in the FIFO\n", [])
    assert _said(caplog) == [
        f"output.findings: {path} opened again (the file there was removed; a FIFO is there now)"
    ]
