"""``toolwatch tail --cursor-file``: each rewrite is durable (a crash of the machine leaves the
old cursor or the new, never an empty file), and a file mounted on its own, which no rename
can replace, is rewritten in place, told once.

A host going down (a node lost in the very incident tail is watching, a power cut, a VM reset)
can commit a rename before the renamed file's data on file systems that allow it (XFS,
btrfs, ext4 mounted ``noauto_da_alloc`` or ``data=writeback``): ``FILE`` comes back empty or
zero-filled, tail refuses it as "not a tail cursor file", exit 2, before it subscribes, and a
``tail --reconnect --cursor-file`` run by systemd or a bot fails at every restart until
someone deletes the file. ``_Cursor._save`` writes ``FILE.partial``, syncs it, renames it over
``FILE`` and syncs the directory.

Whether a file was synced cannot be seen from the file, so the first test runs the real
``toolwatch tail`` under ``strace`` and reads, for each rename of the ``.partial`` file over
the cursor file, whether that file was synced first and the directory after; skipped where
``strace`` is missing or may not trace. The second bind-mounts the cursor file in a mount
namespace of its own (``unshare``); skipped where that is not allowed.
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


def syncs_around_each_replace(log: str, cursor_file: Path) -> list[tuple[bool, bool]]:
    """For each rename of ``cursor_file``'s ``.partial`` over it, in order: whether an
    ``fsync``/``fdatasync`` of the ``.partial`` file came before it (since the last one), and
    whether one of the cursor file's directory came after it (before the next rename)."""
    partial, directory = f"{cursor_file}.partial", str(cursor_file.parent)
    synced, replaces = False, []
    for line in log.splitlines():
        if re.search(rf"\b(fsync|fdatasync)\(\d+<{re.escape(partial)}>\)", line):
            synced = True
        elif re.search(rf"\bfsync\(\d+<{re.escape(directory)}>\)", line) and replaces:
            replaces[-1] = (replaces[-1][0], True)
        elif "rename" in line and f'"{partial}"' in line and f'"{cursor_file}"' in line:
            replaces.append((synced, False))
            synced = False
    return replaces


def test_each_rewrite_of_the_cursor_file_is_synced_and_so_is_its_directory(
    tmp_path: Path,
) -> None:
    """Was: ``.partial`` written and renamed over the file, no sync at all (strace: no fsync).
    Now: each rewrite syncs ``.partial`` before the rename and the directory after it."""
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
    replaces = syncs_around_each_replace(log.read_text(), cursor_file)
    assert len(replaces) >= 2  # at start, on subscribing, and the cursor of f1
    assert replaces == [(True, True)] * len(replaces)


def in_a_mount_namespace(command: list[str], mounted: Path, on: Path) -> list[str]:
    """``command`` run in a user and mount namespace of its own with the file ``mounted``
    bind-mounted on the file ``on`` (as ``docker -v mounted:on`` does); skips the test where
    that is not allowed."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("unshare is not installed")
    namespace = [unshare, "--user", "--map-root-user", "--mount"]
    mount = 'mount --bind "$0" "$1" && shift && exec "$@"'
    probe = subprocess.run(
        [*namespace, "sh", "-c", mount, str(mounted), str(on), "true"],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip(f"no bind mount in a namespace here: {probe.stderr.decode().strip()}")
    return [*namespace, "sh", "-c", mount, str(mounted), str(on), *command]


def test_a_cursor_file_mounted_on_its_own_is_rewritten_in_place_and_told_once(
    tmp_path: Path,
) -> None:
    """A container's single-file volume (``docker -v /srv/tail.cursor:/tail.cursor``, a
    Kubernetes ``subPath``): no rename can replace a mount point (EBUSY).
    Was: tail refused to start ("--cursor-file FILE: [Errno 16] Device or resource busy:
    'FILE.partial' -> 'FILE'"), exit 2, and a supervisor restarted it into the same refusal.
    Now: it says once that it rewrites the file in place (a crash then can damage it) and
    follows the stream, and the volume's file keeps its cursor."""
    volume = tmp_path / "volume.cursor"  # the file on the host: what the mount shows
    volume.write_text('{"streams": {}}\n')
    cursor_file = tmp_path / "tail.cursor"  # where tail sees it
    cursor_file.write_text("")

    async def scenario() -> tuple[int | None, list[str], str, str]:
        async with serve() as h:
            command = [toolwatch_script(), "tail", "--json", "--target", h.target]
            command += ["--cursor-file", str(cursor_file)]
            tail = subprocess.Popen(
                in_a_mount_namespace(command, volume, cursor_file),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=clean_env(),
            )
            try:
                assert tail.stdout is not None
                await asyncio.wait_for(h.broker.wait_for_subscribers(1), timeout=60)
                h.broker.publish(make_trace(), [make_finding(explanation=f"f{i}") for i in (1, 2)])
                lines = [await asyncio.to_thread(tail.stdout.readline) for _ in range(2)]
                h.broker.close()
                _, err = await asyncio.to_thread(tail.communicate, timeout=60)
            finally:
                tail.kill()
            return tail.returncode, lines, err, h.broker.stream_id

    code, lines, err, stream_id = asyncio.run(scenario())
    assert (code, len(lines)) == (0, 2)
    warning, ended = err.splitlines()
    assert warning == (
        f"toolwatch tail: --cursor-file {cursor_file}: cannot be renamed over (Device or"
        " resource busy: a file mounted on its own?), so it is rewritten in place: a crash"
        " while it is written can leave it damaged, and the next run then refuses it (remove"
        " it to start again); mount its directory instead"
    )
    assert ended.endswith("ended the stream (server shutting down)")
    assert volume.read_text() == f'{{"streams": {{"{stream_id}": 2}}}}\n'
    assert cursor_file.read_text() == ""  # the mount point itself, under the mount, untouched
    assert not cursor_file.with_name("tail.cursor.partial").exists()
