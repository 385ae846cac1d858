"""Review of 19141ba (outputs follow their paths): the writer thread's follow check and
SIGHUP's ``Outputs.reopen`` both open the rotated path again, and the thread's ``_followed``
overwrites the ``_latest`` file that ``replace`` had just set.

Real files in ``tmp_path``; the follow clock is injected; waits are bounded (``written``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from toolwatch.config import OutputSettings
from toolwatch.outputs import open_outputs
from toolwatch.sinks.findings import Redaction

_WAIT = 10.0  # seconds: a bound on each wait for the writer thread, never reached when it works


def test_a_rotation_with_sighup_is_opened_again_once_and_a_later_sighup_reopens_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Scenario: ``output.findings`` is a file; logrotate renames it away and its
    ``postrotate`` sends SIGHUP (docs/commands.md's recipe), more than ``FOLLOW_SECONDS`` after the
    thread last looked at the path. ``Outputs.reopen`` opens the path again and queues
    ``replace``; the thread takes that ``_Replace``, but first asks ``follow`` about the old
    file it still holds: renamed away, so it opens the path a second time, logs "opened
    again" a second time and sets ``_latest`` to that second file, which the ``_Replace``
    closes right after. A later SIGHUP (a config reload, nothing rotated) finds
    ``fileno()`` closed, so ``_rotated`` says rotated: the path is opened a third time and
    "opened again (the file there was rotated away)" is logged for a rotation that did not
    happen.

    Was: three opens and three "opened again" lines for one rotation; ``fileno()`` raises
    ``ValueError`` (closed) in between.
    Now: one open and one log line per rotation, whichever of SIGHUP and the thread sees
    it first (the thread does not follow while a SIGHUP's ``reopen`` is queued, and both run
    on the thread since the SIGHUP's open moved there); ``fileno()`` names the file at the
    path.
    Regression of 19141ba (the follow check is new in it)."""
    path = tmp_path / "findings.jsonl"
    settings = OutputSettings(findings=str(path), dump_tooltraces=None)
    now = [0.0]
    outputs = open_outputs(
        settings,
        [],
        [],
        Redaction(),
        wall_clock=lambda: 0,
        failed=lambda _: None,
        clock=lambda: now[0],
    )
    output = outputs.files[0].output
    try:
        output.write("first\n")
        assert output.written(_WAIT)
        path.rename(tmp_path / "findings.jsonl.1")
        now[0] = 5.0  # the thread looks at the path at its next batch
        with caplog.at_level(logging.INFO, logger="toolwatch.outputs"):
            outputs.reopen()  # postrotate's SIGHUP
            assert output.written(_WAIT)
            output.write("second\n")
            assert output.written(_WAIT)
            opened_by_rotation = [r for r in caplog.records if "opened again" in r.getMessage()]
            with_fileno = True
            try:
                os.fstat(output.fileno())
            except ValueError:
                with_fileno = False
            caplog.clear()
            outputs.reopen()  # a later SIGHUP: a config reload, nothing rotated
            assert output.written(_WAIT)
            reopened_later = [
                r.getMessage() for r in caplog.records if "opened again" in r.getMessage()
            ]
    finally:
        outputs.close(_WAIT)
    assert (tmp_path / "findings.jsonl.1").read_text() == "first\n"
    assert path.read_text() == "second\n"
    assert with_fileno, "BackgroundOutput.fileno() is a file the thread closed"
    assert reopened_later == [], reopened_later
    assert len(opened_by_rotation) == 1, [r.getMessage() for r in opened_by_rotation]
