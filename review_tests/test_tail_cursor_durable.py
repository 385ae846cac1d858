"""Review of ``toolwatch tail --cursor-file``: the cursor file is replaced atomically, but
never made durable, so a crash of the machine (not of tail) can leave it empty.

``_Cursor._save`` writes ``FILE.partial`` and renames it over ``FILE`` (its docstring: "a
crash leaves the old one or the new"). That holds for tail being killed; it does not hold
for the host going down (a node lost in the very incident tail is watching, a power cut, a
VM reset): no ``fsync`` of the new file's data precedes the rename, so a file system that
may commit the rename before the data (XFS, btrfs, ext4 mounted ``noauto_da_alloc`` or
``data=writeback``) can bring ``FILE`` back empty or zero-filled. tail then refuses it as
"not a tail cursor file", exit 2, before it subscribes (README: a damaged file is a usage
error): a ``tail --reconnect --cursor-file`` run by systemd or a bot fails at every restart
until someone deletes the file, and the findings the server held for it are lost meanwhile.
Rewrites happen up to ten times a second while findings come, so the window is wide.

Correct: ``fsync`` the ``.partial`` file before the rename (and the directory after it),
the usual durable-replace sequence; at ten rewrites a second the cost is small.

The test runs the real ``toolwatch tail`` under ``strace`` and reads, for each rename of the
``.partial`` file over the cursor file, whether that file was synced first. Skipped where
``strace`` is missing or may not trace.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.test_cli import clean_env, toolwatch_script
from tests.integration.test_stream import make_finding, make_trace, serve


def traced_tail(target: str, cursor_file: Path, log: Path) -> subprocess.Popen[str]:
    """``toolwatch tail --cursor-file`` under ``strace``, its syncs and renames logged."""
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed")
    probe = subprocess.run([strace, "-qq", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"strace cannot trace here: {probe.stderr.decode().strip()}")
    syscalls = "trace=fsync,fdatasync,rename,renameat,renameat2"
    command = [strace, "-f", "-qq", "-y", "-e", syscalls, "-o", str(log)]
    command += [toolwatch_script(), "tail", "--target", target, "--cursor-file", str(cursor_file)]
    return subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )


def synced_before_each_replace(log: str, cursor_file: Path) -> list[bool]:
    """For each rename of ``cursor_file``'s ``.partial`` over it, in order, whether an
    ``fsync``/``fdatasync`` of the ``.partial`` file came before it (since the last one)."""
    partial = f"{cursor_file}.partial"
    synced, replaces = False, []
    for line in log.splitlines():
        if re.search(rf"\b(fsync|fdatasync)\(\d+<{re.escape(partial)}>\)", line):
            synced = True
        elif "rename" in line and f'"{partial}"' in line and f'"{cursor_file}"' in line:
            replaces.append(synced)
            synced = False
    return replaces


def test_each_rewrite_of_the_cursor_file_is_synced_before_it_replaces_the_last(
    tmp_path: Path,
) -> None:
    cursor_file = tmp_path / "tail.cursor"
    log = tmp_path / "strace.log"

    async def scenario() -> tuple[int | None, str, str]:
        async with serve() as h:
            tail = traced_tail(h.target, cursor_file, log)
            try:
                assert tail.stdout is not None
                await asyncio.wait_for(h.broker.wait_for_subscribers(1), timeout=60)
                h.broker.publish(make_trace(), [make_finding(explanation="f1")])
                line = await asyncio.to_thread(tail.stdout.readline)
                h.broker.close()  # tail ends the stream cleanly, keeping its cursor
                _, err = await asyncio.to_thread(tail.communicate, timeout=60)
            finally:
                tail.kill()
            return tail.returncode, line, err

    code, line, err = asyncio.run(scenario())
    assert (code, line.rpartition(" — ")[2], err.endswith("(server shutting down)\n")) == (
        0,
        "f1\n",
        True,
    )
    replaces = synced_before_each_replace(log.read_text(), cursor_file)
    assert len(replaces) >= 2  # at start, on subscribing, and the cursor of f1
    assert replaces == [True] * len(replaces)
