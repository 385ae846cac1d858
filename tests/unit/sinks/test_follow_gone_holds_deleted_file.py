"""Review of 19141ba (outputs follow their paths): a file removed with its directory loses
its lines (``_gone``), but the writer thread keeps the removed file open: its disk space is
not freed until the directory comes back and a line is written, or the process restarts.

Real files in ``tmp_path``; the follow clock is injected; waits are bounded (``written``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from toolwatch.config import OutputSettings
from toolwatch.outputs import open_outputs
from toolwatch.sinks.findings import Redaction

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
    outputs = open_outputs(
        OutputSettings(findings=str(path), dump_tooltraces=None),
        [],
        [],
        Redaction(),
        wall_clock=lambda: 0,
        failed=failures.append,
        clock=lambda: now[0],
    )
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
