"""Review of 19141ba (outputs follow their paths): ``_Follow`` asked ``_rotated`` about the
path whatever the written file is. For a FIFO (a log collector reading a named pipe) whose
reader removed it (its exit cleanup, before it creates it again at its restart), the path is
gone, so the thread creates a *regular file* there within a second: the lines go to a file no
collector reads, and the collector's ``mkfifo`` at its restart fails (``EEXIST``). A SIGHUP's
look (``_reopened``) did the same until the two became one (``outputs._Look``).

A real FIFO in ``tmp_path``, read without blocking; the follow clock is injected; waits are
bounded (``written``).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from findings_log import open_findings_log

_WAIT = 10.0  # seconds: a bound on each wait for the writer thread, never reached when it works


def test_a_fifo_removed_by_its_reader_is_not_replaced_by_a_regular_file(tmp_path: Path) -> None:
    """Scenario: ``output.findings`` is a FIFO a collector reads. The collector exits and
    removes the FIFO (its cleanup); toolwatch publishes a finding more than
    ``FOLLOW_SECONDS`` later; the collector restarts and runs ``mkfifo`` at the path.

    Was: the writer thread finds the path gone, opens it again with ``O_CREAT``: a regular
    file is created at the FIFO's path and the finding is written into it (counted written);
    the collector's ``mkfifo`` fails with ``FileExistsError`` (and a collector that does
    ``rm -f`` first leaves toolwatch writing into the removed regular file forever,
    uncounted: a FIFO at the path is "not rotated").
    Now: follow (like ``_rotated``'s own rule for what is at the path) leaves alone an
    output that is not a regular file (a FIFO, a device, ``/dev/stdout`` given as a path): the
    line goes to the FIFO it was for (no reader: ``EPIPE``, counted), nothing is created.
    Regression of 19141ba (before it only an explicit SIGHUP looked at the path). Since,
    a FIFO the reader made again at the path is opened (test_follow_fifo_made_again.py);
    a path with nothing there is still left to the reader."""
    path = tmp_path / "findings.fifo"
    os.mkfifo(path)
    reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # so that the writer's open returns
    failures: list[str] = []
    now = [0.0]
    outputs = open_findings_log(path, failures.append, lambda: now[0])
    output = outputs.files[0].output
    try:
        output.write("first\n")
        assert output.written(_WAIT)
        assert os.read(reader, 100) == b"first\n"
        os.close(reader)  # the collector exits...
        path.unlink()  # ...and removes its FIFO
        now[0] = 5.0  # the thread looks at the path at its next batch
        output.write("second\n")
        assert output.written(_WAIT)
        created = os.path.lexists(path) and not stat.S_ISFIFO(os.lstat(path).st_mode)
    finally:
        outputs.close(_WAIT)
    assert not created, "a regular file now sits at the FIFO's path: the collector's mkfifo fails"
    assert failures == ["findings_log"], failures


def test_a_sighup_while_a_fifo_is_gone_does_not_put_a_regular_file_at_its_path(
    tmp_path: Path,
) -> None:
    """Scenario: as above, but a SIGHUP (a configuration reload) comes while the collector is
    away, before the thread's next look (its clock does not move).

    Was: the SIGHUP's look (``_reopened``) had no FIFO check: it found the path gone and
    created a regular file there, into which the finding went, counted written; the
    collector's ``mkfifo`` then failed.
    Now: one look for both (``_Look``): a SIGHUP leaves a FIFO's path to its reader too; the
    finding goes to the FIFO it was for (no reader: ``EPIPE``, counted)."""
    path = tmp_path / "findings.fifo"
    os.mkfifo(path)
    reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    failures: list[str] = []
    outputs = open_findings_log(path, failures.append)
    output = outputs.files[0].output
    try:
        os.close(reader)  # the collector exits...
        path.unlink()  # ...and removes its FIFO
        outputs.reopen()  # a reload's SIGHUP meanwhile
        output.write("first\n")
        assert output.written(_WAIT)
        created = os.path.lexists(path)
    finally:
        outputs.close(_WAIT)
    assert (created, failures) == (False, ["findings_log"])
