"""A SIGHUP's reopen is run, and the thread follows its path again, though the lines before the
reopen raised (review of c2f74b0). Was: a batch whose lines before the ``_Reopen`` raised (a
defect: ``_run`` catches "a defect here must not end the thread") dropped the reopen, and
``_reopens`` stayed above 0 for good, as follows. Now: ``_run``'s ``except`` runs the batch's
reopens not run yet (``_reopened``, once each), which always take themselves off
``_reopens``.

``BackgroundOutput._write`` runs a batch's items in order; ``_reopens -= 1`` is in the
``finally`` around ``item.reopen(stream)`` only, so when ``_write_lines`` of the lines before
it raises, the reopen is neither run nor taken off ``_reopens``. ``_run``'s ``except`` counts
the batch's lines lost and ``_done_items`` counts the reopen done. Two consequences:

* the SIGHUP is lost without a word: the findings go on to the file logrotate renamed away
  (and compresses, or deletes after ``rotate N``), not to the path a log shipper reads;
* ``_followed`` returns at once "while a SIGHUP's reopen waits" (``if self._reopens``): the
  thread never follows its path again, so a later rotation without SIGHUP, or a cleanup
  that removed the file, is never noticed: docs/commands.md's "Without the signal they follow
  their paths too, a second later at most" is off for the life of the process.

The defect stands in as a ``MemoryError`` from writing one line (what encoding a large
ToolTrace line can raise); any exception but ``OSError``/``ValueError`` does the same. Real
files in ``tmp_path``, the reopen ``Outputs.reopen`` queues, the follow ``serve`` uses; the
follow clock injected; waits bounded by ``written``'s timeout and a gate the test opens."""

from __future__ import annotations

import functools
import logging
import threading
from pathlib import Path

from toolwatch.outputs import _FINDINGS_LOG, _Look, _Why
from toolwatch.sinks.background import BackgroundOutput
from toolwatch.sinks.background_thread import FOLLOW_SECONDS
from toolwatch.sinks.linefile import LineFile, WriteFailures

_WAIT = 10.0  # seconds: a bound on each wait, never reached when the code works
_DEFECT = "defect\n"  # the line whose writing raises


class _Defective:
    """The findings log (a ``LineFile``) whose first write waits at ``gate`` (so that the
    test queues the next batch meanwhile) and whose write of ``_DEFECT`` raises."""

    def __init__(self, path: Path) -> None:
        self._file = LineFile(str(path))
        self.name = str(path)
        self.gate = threading.Event()
        self.entered = threading.Event()

    def write(self, text: str, /) -> int:
        if not self.entered.is_set():
            self.entered.set()
            assert self.gate.wait(_WAIT), "the test never opened the gate"
        if text == _DEFECT:
            raise MemoryError("a defect while writing")
        return self._file.write(text)

    def flush(self) -> None:
        self._file.flush()

    def fileno(self) -> int:
        return self._file.fileno()

    def close(self) -> None:
        self._file.close()


def _output(path: Path, now: list[float]) -> tuple[BackgroundOutput, _Defective]:
    stream = _Defective(path)
    failures = WriteFailures("the findings log", lambda: None, logging.getLogger(__name__))
    follow = functools.partial(_Look(_FINDINGS_LOG, str(path)), why=_Why.FOLLOW)
    return BackgroundOutput(stream, failures, follow=follow, clock=lambda: now[0]), stream


def _defect_then_sighup(
    output: BackgroundOutput, stream: _Defective, path: Path, rotated: Path | None = None
) -> None:
    """A batch of ``_DEFECT`` then a SIGHUP's reopen (``Outputs.reopen``), taken together;
    ``path`` renamed to ``rotated`` first, if given (logrotate, then its postrotate)."""
    output.write("first\n")
    assert stream.entered.wait(_WAIT)  # the thread is in its first batch's write
    output.write(_DEFECT)
    if rotated is not None:
        path.rename(rotated)
    output.reopen(functools.partial(_Look(_FINDINGS_LOG, str(path)), why=_Why.SIGHUP))
    stream.gate.set()
    assert output.written(_WAIT)


def test_a_sighup_queued_behind_a_batch_that_raised_still_opens_the_rotated_path(
    tmp_path: Path,
) -> None:
    """Scenario: logrotate renames the findings log away and sends SIGHUP; the line queued
    just before the SIGHUP cannot be written (a defect: counted lost, logged); a finding
    comes after the SIGHUP.
    Now: the rotated path opened again, the later finding in the new file there.
    Was: the reopen was dropped with the failed batch: the later finding went to the
    renamed file, no file at the path."""
    path = tmp_path / "findings.jsonl"
    rotated = tmp_path / "findings.jsonl.1"
    now = [0.0]
    output, stream = _output(path, now)
    try:
        _defect_then_sighup(output, stream, path, rotated)
        output.write("after the sighup\n")
        assert output.written(_WAIT)
    finally:
        output.close(_WAIT)
    at_path = path.read_text() if path.exists() else None
    assert (rotated.read_text(), at_path) == ("first\n", "after the sighup\n")


def test_the_thread_follows_its_path_after_a_batch_with_a_sighup_raised(
    tmp_path: Path,
) -> None:
    """Scenario: a SIGHUP (a configuration reload: nothing rotated) queued behind a line
    that cannot be written (a defect); later the findings log is renamed away without a
    signal (a rotation whose postrotate sends none), and more than ``FOLLOW_SECONDS``
    pass; a finding comes.
    Now: the thread follows its path (docs/commands.md: "a second later at most"): the finding
    in a new file at the path.
    Was: ``_reopens`` stayed 1, so ``_followed`` never asked ``follow`` again: the finding
    went to the renamed file, and every later one will."""
    path = tmp_path / "findings.jsonl"
    renamed = tmp_path / "findings.jsonl.old"
    now = [0.0]
    output, stream = _output(path, now)
    try:
        _defect_then_sighup(output, stream, path)
        path.rename(renamed)
        now[0] = 10 * FOLLOW_SECONDS
        output.write("later\n")
        assert output.written(_WAIT)
        now[0] = 20 * FOLLOW_SECONDS
        output.write("later still\n")
        assert output.written(_WAIT)
    finally:
        output.close(_WAIT)
    at_path = path.read_text() if path.exists() else None
    assert (renamed.read_text(), at_path) == ("first\n", "later\nlater still\n")
