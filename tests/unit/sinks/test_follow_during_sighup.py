"""A SIGHUP that comes while the thread is opening the rotated path again keeps its file as the
one the queue ends on (review of ``BackgroundOutput._followed``, 89e28d3; test_follow_sighup_race.py
is the SIGHUP before the thread looks). Was: ``_latest`` was overwritten, as follows. Now: the
thread writes to the file it opened until the SIGHUP's ``_Replace``, which closes it.

``_followed`` asks, under the lock, whether a SIGHUP's file waits (``replaced``), then calls
``follow`` without the lock (``os.stat``, ``os.open``: the time a rotation's SIGHUP arrives
in), then sets ``_latest`` to what it opened, whatever ``replace`` set meanwhile. The
``_Replace`` queued then closes that file after the batch, so ``fileno()`` ("the descriptor of
the file written once the queue is through") raises ``ValueError``, and every later SIGHUP
(a configuration reload, nothing rotated) finds the output "rotated": it opens the path again
and logs "opened again (the file there was rotated away)" for a rotation that did not happen,
once per SIGHUP until the thread looks again.

Real files; the real ``_Look`` of ``open_outputs``, held after it opened the path until the
test (the event loop) has run ``Outputs.reopen``; the follow clock is injected. No sleeps."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
from permit_file import PermitFile

from toolwatch.engine import DiscardToolTraces
from toolwatch.outputs import _DUMP, _FINDINGS_LOG, Outputs, _File, _Look, _Why, open_text
from toolwatch.sinks import background_thread
from toolwatch.sinks.background import BackgroundOutput
from toolwatch.sinks.background_thread import FOLLOW_SECONDS
from toolwatch.sinks.findings import FanOutSink
from toolwatch.sinks.linefile import TextOutput, WriteFailures

_WAIT = 10.0  # seconds: a bound on each wait, never reached when the code works
_REOPENED = "opened again"  # any path opened again: the later SIGHUP opens none


def test_a_sighup_while_the_thread_follows_keeps_the_file_it_opened(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Scenario: logrotate renames the findings log away (no ``create``) and sends SIGHUP; the
    thread, due to look at its path, has just opened it again when the SIGHUP's
    ``Outputs.reopen`` runs, which opens it too and queues ``replace``. Later a SIGHUP comes
    with nothing rotated (a configuration reload).
    Was: ``_latest`` was the thread's file, closed by the ``_Replace``: ``fileno()`` raised
    ValueError, and the later SIGHUP logged a rotation and opened the path a third time.
    Now: ``fileno()`` names the SIGHUP's file, the later SIGHUP opens nothing and logs no
    rotation; every line at the path."""
    path = tmp_path / "findings.jsonl"
    now = [0.0]
    real = _Look(_FINDINGS_LOG, str(path))
    following, reopened = threading.Event(), threading.Event()

    def follow(stream: TextOutput) -> TextOutput | OSError | None:
        found = real(stream, _Why.FOLLOW)
        if found is not None:
            following.set()  # opened: the SIGHUP comes now
            assert reopened.wait(_WAIT)
        return found

    output = BackgroundOutput(
        open_text("output.findings", str(path)),
        WriteFailures("the findings log", lambda: None, logging.getLogger(__name__)),
        follow=follow,
        clock=lambda: now[0],
    )
    outputs = Outputs(
        FanOutSink([]), DiscardToolTraces(), None, (_File(_FINDINGS_LOG, output, real),)
    )
    try:
        output.write("one\n")
        assert output.written(_WAIT)
        path.rename(tmp_path / "findings.jsonl.1")  # logrotate, nocreate
        now[0] = FOLLOW_SECONDS  # the thread looks at its path before the next batch
        output.write("two\n")
        output.write_queued()
        assert following.wait(_WAIT)
        with caplog.at_level(logging.INFO, logger="toolwatch.outputs"):
            outputs.reopen()  # the rotation's SIGHUP, on the event loop
            reopened.set()
            output.write("three\n")
            assert output.written(_WAIT)
            try:
                descriptor: int | str = output.fileno()
            except ValueError as error:
                descriptor = f"ValueError: {error}"
            caplog.clear()
            outputs.reopen()  # a later SIGHUP: nothing rotated
            assert output.written(_WAIT)
        later = [r.getMessage() for r in caplog.records if _REOPENED in r.getMessage()]
    finally:
        reopened.set()
        output.close(_WAIT)
    assert (tmp_path / "findings.jsonl.1").read_text() == "one\n"
    assert path.read_text() == "two\nthree\n"
    assert (isinstance(descriptor, int), later) == (True, []), (
        f"fileno(): {descriptor}; a SIGHUP with nothing rotated logged {later}"
    )


def test_a_sighup_whose_path_cannot_be_opened_says_whether_the_file_was_removed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A rotation's SIGHUP where the path cannot be opened (its directory removed with the
    file). Was (review of c2f74b0): "still writing to the file it was", though the file was
    removed and its lines were about to be lost. Now: that it was removed, and that its lines
    will be lost, counted (at once: the SIGHUP's look says so, as the thread's own does)."""
    directory = tmp_path / "logs"
    directory.mkdir()
    path = directory / "findings.jsonl"
    output = BackgroundOutput(
        open_text("output.findings", str(path)),
        WriteFailures("the findings log", lambda: None, logging.getLogger(__name__)),
    )
    look = _Look(_FINDINGS_LOG, str(path))
    outputs = Outputs(
        FanOutSink([]), DiscardToolTraces(), None, (_File(_FINDINGS_LOG, output, look),)
    )
    try:
        path.unlink()
        directory.rmdir()
        with caplog.at_level(logging.ERROR, logger="toolwatch.outputs"):
            outputs.reopen()
            assert output.written(_WAIT)
    finally:
        output.close(_WAIT)
    assert [r.getMessage() for r in caplog.records] == [
        f"cannot open {path} (output.findings): No such file or directory; the file written"
        " was removed: its lines will be lost, counted"
    ]


def test_written_asks_every_output_at_once_and_waits_its_timeout_in_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Outputs.written`` with the findings log blocked and the dump healthy. Was: it asked
    each output in turn with the whole timeout, stopping at the first that said False: the
    dump was never asked (its lines waited for the thread's gathering), and with both slow it
    waited twice the timeout. Now: both are asked at once; the timeout is for all of them."""
    monkeypatch.setattr(background_thread, "GATHER_SECONDS", _WAIT)  # only an ask writes at once
    blocked = PermitFile()
    dump = tmp_path / "tooltraces.jsonl"
    files = (
        _File(_FINDINGS_LOG, BackgroundOutput(blocked, _told()), None),
        _File(
            _DUMP, BackgroundOutput(open_text("output.dump_tooltraces", str(dump)), _told()), None
        ),
    )
    outputs = Outputs(FanOutSink([]), DiscardToolTraces(), None, files)
    try:
        files[0].output.write("taken\n")
        files[0].output.write_queued()
        assert blocked.entered.acquire(timeout=_WAIT)  # the findings log is blocked
        files[0].output.write("waiting\n")
        files[1].output.write("a tooltrace\n")
        assert not outputs.written(1.0)
        assert dump.read_text() == "a tooltrace\n"
    finally:
        blocked.permits.release()
        blocked.permits.release()
        outputs.close(_WAIT)


def _told() -> WriteFailures:
    return WriteFailures("an output", lambda: None, logging.getLogger(__name__))
