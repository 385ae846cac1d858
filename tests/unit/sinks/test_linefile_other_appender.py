"""A line is one ``write(2)`` on a regular file, however long: on a file opened ``O_APPEND``
the kernel appends one call whole, so another process appending to the same file (a second
``serve`` on a shared volume, the old one still draining in a rolling restart, a wrapper's
``>>``) lands before or after a line, never inside it. ``destinations.lock_for`` orders this
process's threads only.

Was (review of 62be737): ``LineFile.write`` wrote a line longer than 64 Ki characters a piece
at a time (to hold its bytes a piece at a time), and the other process's lines landed between
the pieces: both lines broken, each counted written (14 of 16 long lines split).
Now: the whole line's bytes in one call again; a long line is held twice while it is written
(its text and its bytes), as docs/deployment.md's Memory section says.

Shown with a real file and a real second process appending with the same ``LineFile``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from toolwatch.sinks.linefile import LineFile

_OTHER = '{"finding":"from another serve"}'
_CHILD = f"""
import sys
from toolwatch.sinks.linefile import LineFile
out = LineFile(sys.argv[1])
sys.stdout.write("ready\\n")
sys.stdout.flush()
while True:
    out.write({_OTHER!r} + "\\n")
"""


def test_a_long_line_is_not_split_by_another_process_appending_to_the_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tooltraces.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}  # this test's toolwatch
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(path)], stdout=subprocess.PIPE, env=env, text=True
    )
    long_line = '{"tooltrace":"' + "x" * (4 * 1024 * 1024) + '"}'  # 4 Mi characters
    written = 16
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"  # it appends from now on
        ours = LineFile(str(path))
        try:
            for _ in range(written):
                assert ours.write(long_line + "\n") == len(long_line) + 1
        finally:
            ours.close()
    finally:
        child.kill()
        child.wait()
    lines = path.read_text().splitlines()
    others = lines.count(_OTHER)
    split = [
        f"line {n}: {len(line):,} characters"
        for n, line in enumerate(lines)
        if line not in (_OTHER, long_line)
    ]
    assert others > 0, "the other process appended nothing: the test showed nothing"
    assert (split, lines.count(long_line)) == ([], written), (
        f"{len(split)} line(s) are parts of a long line split by another writer's: {split[:4]}"
    )
