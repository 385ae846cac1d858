"""Was (review of 07ff729, kept; the defect is older): start-up opened ``output.findings`` /
``output.dump_tooltraces`` with a blocking ``open(2)`` (``open_text``), while the follow and
a SIGHUP open a FIFO without waiting for its reader. A collector's FIFO that no reader had
opened yet (sidecars start in any order; a collector down when ``serve`` restarts) held
``open_outputs`` inside ``App.__init__``: ``serve`` bound no listener, answered no
``/healthz``, and no log line said why, for as long as the reader was away.
Now: start-up opens without waiting too (``O_NONBLOCK``, cleared once opened). A FIFO no
reader has opened yet does not stop it: the output starts with no file, one WARNING names
the setting and the path, its lines are lost, counted, and its thread, looking at its path at
each batch while it has no file, opens the FIFO at the first batch after a reader has.
Nothing is ever created at the FIFO's path. The thread's look, which creates a regular
file's path again when it finds nothing there, opens it without waiting too: a FIFO put there
between its ``stat`` and its ``open`` held the output's thread (review, lesser).

How it is shown: real FIFOs in ``tmp_path``; ``open_outputs`` (what ``App.__init__``
calls) run in a thread joined for a bounded time; readers are descriptors the test opens
without waiting, or a thread that reads the FIFO blocking; the follow clock is injected and
never moved (the thread's looks at each batch are not the second-apart follow); waits
bounded by ``written``.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
from pathlib import Path

import pytest
from findings_log import open_findings_log

from tests.fifos import available
from toolwatch.outputs import _FINDINGS_LOG, OutputError, Outputs, _Look
from toolwatch.sinks.linefile import LineFile

_BOUND = 5.0  # seconds: far more than a non-blocking open takes; the blocking one never returns
_WAIT = 10.0  # seconds: a bound on each wait for the writer thread, never reached when it works


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "findings.fifo"
    os.mkfifo(path)
    return path


def _open(fifo: Path, failures: list[str], dump: Path | None = None) -> Outputs:
    """The outputs at ``fifo`` (and ``dump``), their follow clock never moved."""
    return open_findings_log(fifo, failures.append, dump=dump)


def _started(fifo: Path, failures: list[str], dump: Path | None = None) -> Outputs:
    """``_open`` run in a thread joined for ``_BOUND`` seconds: the test fails, rather than
    hang, when it waits for a reader (a reader is then opened to let it return). Raises
    ``OutputError`` as ``open_outputs`` does."""
    outcome: list[Outputs | OutputError] = []

    def start() -> None:
        try:
            outcome.append(_open(fifo, failures, dump))
        except OutputError as exc:
            outcome.append(exc)

    opening = threading.Thread(target=start, name="start-up", daemon=True)
    opening.start()
    opening.join(_BOUND)
    hung = opening.is_alive()
    if hung:  # let the blocked open(2) return, so that nothing is left behind
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        opening.join(_WAIT)
        os.close(reader)
        for opened in outcome:
            if isinstance(opened, Outputs):
                opened.close(_WAIT)
    assert not hung, (
        f"open_outputs waited {_BOUND:g} s and more for a reader of {fifo}, in silence: "
        "serve would bind no listener until the collector opens its FIFO"
    )
    if isinstance(outcome[0], OutputError):
        raise outcome[0]
    return outcome[0]


def _write(outputs: Outputs, line: str) -> None:
    output = outputs.files[0].output
    output.write(line)
    assert output.written(_WAIT)


def _said(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    """What the outputs logged, with its level."""
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "toolwatch.outputs"]


def test_start_up_does_not_hang_on_a_fifo_no_reader_has_opened_yet(fifo: Path) -> None:
    """Scenario (the review's): ``output.findings`` is a collector's FIFO; the collector has
    made it but not opened it yet when ``serve`` starts.
    Was: ``open_outputs`` blocked in ``open(2)`` until a reader came (here: never, until the
    test opened one after ``_BOUND`` seconds).
    Now: it returns at once."""
    _started(fifo, []).close(_WAIT)


def _opened_by_a_reader(fifo: Path) -> int:
    """A descriptor that writes ``fifo``, opened once a reader is in its ``open(2)`` or has
    the FIFO open: until then an open to write that does not wait fails (ENXIO). Polled: it
    waits on a real thread's system call, not on the pipeline. The caller closes it."""
    pause = threading.Event()  # never set: its wait is the poll's pause
    for _ in range(int(_WAIT / 0.01)):
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as error:
            if error.errno != errno.ENXIO:
                raise
        pause.wait(0.01)
    raise AssertionError(f"nothing opened {fifo} to read in {_WAIT} s")


def test_a_fifo_read_later_gets_the_lines_from_the_batch_after_its_reader_came(
    fifo: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Scenario: ``serve`` starts before the collector has opened its FIFO (the ToolTrace
    dump a file); two findings; the collector opens the FIFO (a thread reading it,
    blocking, as a collector does); a third finding.
    Now: one WARNING at start-up, naming the setting and the path; the first two lines lost,
    counted and logged as a write failure is; the third read by the collector, at the next
    batch (the clock never moves: no second-apart follow needed), the FIFO "opened", and
    written blocking from then on. The dump is opened as before; nothing is created at the
    FIFO's path."""
    failures: list[str] = []
    lines: list[bytes] = []
    dump = tmp_path / "tooltraces.jsonl"
    with caplog.at_level(logging.INFO, logger="toolwatch.outputs"):
        outputs = _started(fifo, failures, dump)
        opened = None
        try:
            _write(outputs, "lost\n")
            _write(outputs, "lost too\n")
            still_a_fifo = stat.S_ISFIFO(os.lstat(fifo).st_mode)

            def collect() -> None:
                with fifo.open("rb") as reader:  # blocks until toolwatch opens it to write
                    lines.append(reader.readline())

            collector = threading.Thread(target=collect, name="collector", daemon=True)
            collector.start()
            opened = _opened_by_a_reader(fifo)  # the collector is in its open(2)
            _write(outputs, "read\n")
            collector.join(_WAIT)
            blocking = os.get_blocking(outputs.files[0].output.fileno())
        finally:
            outputs.close(_WAIT)
            if opened is not None:
                os.close(opened)
    assert (lines, failures, still_a_fifo, blocking, dump.exists()) == (
        [b"read\n"],
        ["findings_log"] * 2,
        True,
        True,
        True,
    )
    assert _said(caplog) == [
        (
            "WARNING",
            f"output.findings: {fifo} is a FIFO, and no reader has opened it yet: its lines are"
            " lost, counted, until one does",
        ),
        (
            "ERROR",
            f"could not write the findings log ({fifo}): a FIFO no reader has opened yet"
            " (1 failure in a row)",
        ),
        (
            "ERROR",
            f"could not write the findings log ({fifo}): a FIFO no reader has opened yet"
            " (2 failures in a row)",
        ),
        ("INFO", f"output.findings: {fifo} opened (a reader has opened the FIFO)"),
        ("INFO", f"the findings log ({fifo}) is written again, after 2 failures in a row"),
    ]


def test_a_sighup_before_any_reader_says_the_lines_are_lost_and_creates_nothing(
    fifo: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Scenario: ``serve`` starts before the collector has opened its FIFO; a SIGHUP (a
    reload); the collector, restarting, removes its FIFO; another SIGHUP and a finding; it
    makes the FIFO again and opens it; a finding.
    Now: each SIGHUP answered (the path cannot be opened: why, and that no file is written
    yet); the finding while the path is empty lost for that (nothing is created at a FIFO's
    path); the FIFO made again opened, and the last line read there."""
    failures: list[str] = []
    with caplog.at_level(logging.INFO, logger="toolwatch.outputs"):
        outputs = _started(fifo, failures)
        reader = None
        try:
            outputs.reopen()  # SIGHUP
            assert outputs.written(_WAIT)
            fifo.unlink()
            outputs.reopen()
            _write(outputs, "lost\n")
            created = os.path.lexists(fifo)
            os.mkfifo(fifo)
            reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
            _write(outputs, "read\n")
            received = available(reader)
        finally:
            outputs.close(_WAIT)
            if reader is not None:
                os.close(reader)
    assert (received, failures, created) == (b"read\n", ["findings_log"], False)
    assert [message for _, message in _said(caplog)[1:]] == [
        f"cannot open {fifo} (output.findings): a FIFO no reader has opened yet; no file is"
        " written yet: its lines are lost, counted",
        f"cannot open {fifo} (output.findings): No such file or directory; no file is written"
        " yet: its lines are lost, counted",
        f"could not write the findings log ({fifo}): No such file or directory (1 failure in a"
        " row)",
        f"output.findings: {fifo} opened (a reader has opened the FIFO)",
        f"the findings log ({fifo}) is written again, after 1 failure in a row",
    ]


def test_a_fifo_put_at_the_path_between_the_look_s_stat_and_its_open_does_not_hold_it(
    fifo: Path,
) -> None:
    """Scenario: the findings log (a regular file) was removed; the thread's look found
    nothing at its path (``there`` is ``None``) and opens it to create it, but a collector
    has put its FIFO there meanwhile, not opened yet.
    Was: that open (``open_text``, blocking) waited for a reader: the output's thread hung in
    it, its lines queued until lost.
    Now: it fails at once, naming the setting and why."""
    look = _Look(_FINDINGS_LOG, str(fifo))
    outcome: list[object] = []

    def open_there() -> None:
        try:
            outcome.append(look._open(True, None))  # stat found nothing: created if missing
        except OutputError as exc:
            outcome.append(exc)

    opening = threading.Thread(target=open_there, name="output thread", daemon=True)
    opening.start()
    opening.join(_BOUND)
    hung = opening.is_alive()
    if hung:  # let the blocked open(2) return
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        opening.join(_WAIT)
        os.close(reader)
    for opened in outcome:
        if isinstance(opened, LineFile):
            opened.close()
    assert not hung, f"the look's open of {fifo} waited {_BOUND:g} s and more for a reader"
    assert [str(told) for told in outcome] == [
        f"cannot open {fifo} (output.findings): a FIFO no reader has opened yet"
    ]
