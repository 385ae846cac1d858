"""A findings log removed with its directory loses its lines (``BackgroundOutput._gone``) and
is closed. Review of c1855de (lesser findings):
- a later look that found something at the path it would not open (a directory, a FIFO)
  said "go on" (``None``), and ``_looked(None)`` cleared ``_gone``: the lines were then
  written to the closed file and failed for "file closed", not for what was at the path;
- a SIGHUP that opened the path again after such a removal logged "(the file there was
  rotated away)", whatever became of the file.

Real files, directories and FIFOs in ``tmp_path``; the follow clock is injected; waits are
bounded (``written``)."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest
from findings_log import FollowedLog

_WAIT = 10.0  # seconds: a bound on each wait for the writer thread, never reached when it works


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the outputs logged: the looks at the path, the writes' failures by outage."""
    return [r.getMessage() for r in caplog.records if r.name == "toolwatch.outputs"]


def test_a_directory_at_the_path_of_a_log_removed_with_its_directory_is_why_lines_are_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Scenario: ``rm -rf`` of the log's directory (a finding lost, counted); the directory
    is made again, with a directory where the log was (a mistaken ``mkdir -p``); another
    finding.
    Was: the look found a directory, "not rotated", said go on: the line was written to the
    closed file, counted lost as "ValueError: ... file closed".
    Now: the directory cannot be opened (EISDIR): the line is lost for that, told as such."""
    log = FollowedLog(tmp_path / "logs")
    try:
        log.write("written\n")
        shutil.rmtree(log.logs)
        with caplog.at_level(logging.INFO, logger="toolwatch.outputs"):
            log.write("lost\n")
            log.path.mkdir(parents=True)
            log.write("lost too\n")
    finally:
        log.outputs.close(_WAIT)
    path = log.path
    assert log.failures == ["findings_log", "findings_log"]
    assert _said(caplog) == [
        f"cannot open {path} (output.findings): No such file or directory; the file written"
        " was removed: its lines will be lost, counted",
        f"could not write the findings log ({path}): No such file or directory (1 failure in a"
        " row)",
        f"could not write the findings log ({path}): Is a directory (2 failures in a row)",
    ]


def test_a_fifo_at_the_path_of_a_log_removed_with_its_directory_is_opened_once_it_is_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Scenario: ``rm -rf`` of the log's directory (a finding lost); the directory is made
    again with a FIFO at the log's path (a collector's), which no one reads yet; a finding;
    then its collector reads it; a finding.
    Was: the FIFO was "not rotated": the second line went to the closed file ("file
    closed"), and so did every later one, read or not: it was never opened.
    Now: a FIFO no reader has opened yet is why the second is lost; once read, it is opened
    (without waiting for a reader: it has one) and the third line read there."""
    log = FollowedLog(tmp_path / "logs")
    reader = None
    try:
        log.write("written\n")
        shutil.rmtree(log.logs)
        with caplog.at_level(logging.INFO, logger="toolwatch.outputs"):
            log.write("lost\n")
            log.logs.mkdir()
            os.mkfifo(log.path)
            log.write("lost too\n")
            reader = os.open(log.path, os.O_RDONLY | os.O_NONBLOCK)
            log.write("read\n")
            received = os.read(reader, 100)
    finally:
        log.outputs.close(_WAIT)
        if reader is not None:
            os.close(reader)
    path = log.path
    assert (received, log.failures) == (b"read\n", ["findings_log", "findings_log"])
    assert _said(caplog)[2:] == [
        f"could not write the findings log ({path}): a FIFO no reader has opened yet (2"
        " failures in a row)",
        f"output.findings: {path} opened again (the file written was removed, and the path"
        " could not be opened until now; a FIFO is there now)",
        f"the findings log ({path}) is written again, after 2 failures in a row",
    ]


def test_a_sighup_says_what_became_of_the_file_it_opens_the_path_again_for(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Scenario: the log's directory is removed and made again, then a SIGHUP before the
    thread's next look; later the log is renamed away (logrotate), and a SIGHUP.
    Was: both logged "(the file there was rotated away)".
    Now: "(the file there was removed)", then "(the file there was renamed away)"; each
    finding in the file at the path then."""
    log = FollowedLog(tmp_path / "logs")
    try:
        log.write("before\n")
        shutil.rmtree(log.logs)
        log.logs.mkdir()
        with caplog.at_level(logging.INFO, logger="toolwatch.outputs"):
            log.sighup()
            log.write("after the removal\n", after_a_look=False)
            log.path.rename(log.logs / "findings.jsonl.1")
            log.sighup()
            log.write("after the rotation\n", after_a_look=False)
    finally:
        log.outputs.close(_WAIT)
    path = log.path
    assert (log.logs / "findings.jsonl.1").read_text() == "after the removal\n"
    assert (path.read_text(), log.failures) == ("after the rotation\n", [])
    assert _said(caplog) == [
        f"output.findings: {path} opened again (the file there was removed)",
        f"output.findings: {path} opened again (the file there was renamed away)",
    ]
