"""The thread's own look at its path and a SIGHUP's are one look (``outputs._Look``), which
keeps whether the path could not be opened: the thread tells an outage once, whichever of the
two saw it first, and tells the next outage, whichever of the two saw the last one end.

Review of the two near-copies they were (``_Follow``, ``_reopened``): only ``_Follow`` kept that
state, so what a SIGHUP saw was not known to it. Real files in ``tmp_path``; the follow clock
is injected; waits are bounded (``written``)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from findings_log import FollowedLog

_WAIT = 10.0  # seconds: a bound on each wait for the writer thread, never reached when it works


def _looks(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the looks logged: each path that could not be opened, or was opened again."""
    said = [r.getMessage() for r in caplog.records if r.module == "outputs"]  # not linefile's
    return [m.split(" (output.findings)")[0] for m in said]


def test_an_outage_a_sighup_told_is_not_told_again_by_the_thread(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Scenario: ``rm -rf`` of the log's directory, then a SIGHUP (a reload) before the
    thread's next look; findings after it, past that look.
    Was: the SIGHUP told it, then the thread told it again (its own first failure).
    Now: the SIGHUP tells it (each SIGHUP is answered); the thread's look says nothing new."""
    log = FollowedLog(tmp_path / "logs")
    try:
        log.write("written\n")
        shutil.rmtree(log.logs)
        with caplog.at_level(logging.INFO, logger="toolwatch.outputs"):
            log.sighup()
            log.write("lost\n")
            log.write("lost too\n")
    finally:
        log.outputs.close(_WAIT)
    assert _looks(caplog) == [f"cannot open {log.path}"]


def test_an_outage_after_a_sighup_ended_the_last_one_is_told_by_the_thread(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Scenario: the log's directory removed (the thread tells it), made again, and a SIGHUP
    opens the path before the thread looks; a week later the directory is removed again.
    Was: the thread still held the first outage for going on (a SIGHUP's open did not end
    it for the thread): the second "cannot open" was never logged by it. And the SIGHUP's
    open said "the file there was rotated away", whatever happened (here nothing was
    rotated: the directory was removed with the file, its lines lost meanwhile).
    Now: told, as the first was; the open says what became of the file written."""
    log = FollowedLog(tmp_path / "logs")
    try:
        log.write("written\n")
        with caplog.at_level(logging.INFO, logger="toolwatch.outputs"):
            shutil.rmtree(log.logs)
            log.write("lost\n")
            log.logs.mkdir()
            log.sighup()
            log.write("at the path again\n")
            shutil.rmtree(log.logs)
            log.write("lost again\n")
    finally:
        log.outputs.close(_WAIT)
    assert _looks(caplog) == [
        f"cannot open {log.path}",
        f"output.findings: {log.path} opened again (the file written was removed, and the path"
        " could not be opened until now)",
        f"cannot open {log.path}",
    ]
