"""Review of 19141ba (outputs follow their paths): a file removed with its directory loses
its lines (``_gone``), but the writer thread keeps the removed file open: its disk space is
not freed until the directory comes back and a line is written, or the process restarts.

Real files in ``tmp_path``; the follow clock is injected; waits are bounded (``written``).
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest
from findings_log import open_findings_log

_WAIT = 10.0  # seconds: a bound on each wait for the writer thread, never reached when it works


def _held_deleted(path: Path) -> list[str]:
    """This process's descriptors on ``path`` removed ("(deleted)" in /proc/self/fd)."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        with_target = (
            os.readlink(f"/proc/self/fd/{fd}") if os.path.islink(f"/proc/self/fd/{fd}") else ""
        )
        if with_target == f"{path} (deleted)":
            held.append(fd)
    return held


def test_a_log_removed_with_its_directory_is_not_held_open_once_its_lines_are_lost(
    tmp_path: Path,
) -> None:
    """Scenario: the findings log has grown large; an operator (or a cleanup job) frees the
    disk with ``rm -rf`` of its directory. The next finding, more than ``FOLLOW_SECONDS``
    later, is lost and counted (the path cannot be created: expected, 19141ba).

    Was: the thread still holds the removed file open (``_gone`` only stops the writes), so
    none of its space is freed: the ``rm -rf`` that was to free the disk frees nothing until
    the directory is created again and a line written, or toolwatch restarts (on a full disk
    whose log was removed to make room, the space stays taken).
    Now: once ``follow`` says the removed file's lines are lost, the thread closes it (it
    writes nothing more to it) and writes again only to a file opened at the path.
    Older in part: before 19141ba the removed file was held and written to; since 19141ba
    nothing goes to it, so holding it serves nothing."""
    logs = tmp_path / "logs"
    logs.mkdir()
    path = logs / "findings.jsonl"
    failures: list[str] = []
    now = [0.0]
    outputs = open_findings_log(path, failures.append, lambda: now[0])
    output = outputs.files[0].output
    try:
        output.write("x" * 1000 + "\n")
        assert output.written(_WAIT)
        shutil.rmtree(logs)
        now[0] = 5.0  # the thread looks at the path at its next batch
        output.write("lost\n")
        assert output.written(_WAIT)
        assert failures == ["findings_log"]  # counted lost, as 19141ba means
        held = _held_deleted(path)
    finally:
        outputs.close(_WAIT)
    assert held == [], f"descriptors {held} still hold the removed {path}"


def test_a_sighup_that_finds_the_log_removed_with_its_directory_loses_the_next_lines_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Scenario: as above, but logrotate's SIGHUP (or a reload's) comes after the ``rm -rf``
    and before the thread's next look at its path (its clock does not move); a finding then.

    Was: the SIGHUP's look logged "the file written was removed: its lines will be lost,
    counted", yet returned nothing to act on: the finding went into the removed file,
    counted written, and the file stayed open, until the thread's own look a second later.
    Now: one look for both (``outputs._Look``): the SIGHUP's, like the thread's, says why
    the lines are lost; the finding is counted lost and the removed file is closed."""
    logs = tmp_path / "logs"
    logs.mkdir()
    path = logs / "findings.jsonl"
    failures: list[str] = []
    outputs = open_findings_log(path, failures.append)
    output = outputs.files[0].output
    try:
        output.write("written\n")
        assert output.written(_WAIT)
        shutil.rmtree(logs)
        with caplog.at_level(logging.ERROR, logger="toolwatch.outputs"):
            outputs.reopen()
            output.write("lost\n")
            assert output.written(_WAIT)
        held = _held_deleted(path)
    finally:
        outputs.close(_WAIT)
    assert (failures, held) == (["findings_log"], [])
    assert [r.getMessage() for r in caplog.records] == [
        f"cannot open {path} (output.findings): No such file or directory; the file written"
        " was removed: its lines will be lost, counted",
        f"could not write the findings log ({path}): No such file or directory (1 failure in"
        " a row)",
    ]
