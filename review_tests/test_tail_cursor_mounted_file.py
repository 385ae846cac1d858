"""Review of 0c0c70f's fallback for a ``--cursor-file`` mounted on its own (``docker -v
FILE:FILE``, a Kubernetes ``subPath``): it rewrites the file in place when the rename over it
fails with EBUSY, but two ordinary forms of that very set-up still end in exit 2 before tail
subscribes, and a supervisor restarts it into the same refusal.

1. The file as it is made for the mount: Docker's ``-v`` (and a ``subPath``) creates a
   *directory* where the host path does not exist, so the file is made first, ``touch
   /srv/tail.cursor`` (or ``mktemp``, an init container's ``touch``): an empty file. tail
   refuses an empty file as "not a tail cursor file", so the in-place rewrite is never
   reached on the first run. (The commit's own test writes ``{"streams": {}}`` into the
   volume first, which no README line asks for.) An empty file holds no cursor: tail has
   printed nothing from any stream, so it is a fresh start, not damage.
2. A container whose root file system is read-only (``docker run --read-only``, Kubernetes'
   ``readOnlyRootFilesystem: true``, the hardened default), or whose user cannot write the
   directory the file is mounted into (``/tail.cursor`` as a non-root user): the only
   writable thing there is the mounted file itself, so a file mounted on its own is the
   natural way to give tail its cursor. ``_Cursor._replace`` writes ``FILE.partial`` next to
   it first; that fails (EROFS, EACCES) before any rename, the EBUSY fallback is never
   tried, and tail exits 2, though the file itself can be rewritten in place.

Both run the real ``toolwatch tail`` in a user and mount namespace of its own (``unshare``),
the volume's file bind-mounted on the cursor file as Docker does; skipped where that is not
allowed. Neither waits on time: tail's exit, or its subscription, whichever comes first.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.test_cli import clean_env, toolwatch_script
from tests.integration.test_stream import Harness, make_finding, make_trace, serve


def in_a_namespace(script: str, args: list[str], command: list[str]) -> list[str]:
    """``command`` run by ``sh -c script`` (its mounts: ``$0``, ``$1``, ... are ``args``) in
    a user and mount namespace of its own; skips the test where that is not allowed."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("unshare is not installed")
    namespace = [unshare, "--user", "--map-root-user", "--mount", "sh", "-c"]
    shifted = f'{script} && shift {len(args) - 1} && exec "$@"'
    probe = subprocess.run([*namespace, shifted, *args, "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"no such mounts in a namespace here: {probe.stderr.decode().strip()}")
    return [*namespace, shifted, *args, *command]


def follow_two(command: list[str]) -> tuple[int | None, list[str], str, str, bool]:
    """Runs ``command`` (a ``toolwatch tail --json``) against a findings stream; once it has
    subscribed, publishes f1 and f2, reads their two lines and shuts the server down. A tail
    that exits before it subscribes is waited for instead. Returns its exit code, the lines
    read, what it said, the stream id, and whether it subscribed."""

    async def scenario() -> tuple[int | None, list[str], str, str, bool]:
        async with serve() as h:
            tail = subprocess.Popen(
                [*command, "--target", h.target],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=clean_env(),
            )
            try:
                subscribed = await subscribed_or_exited(h, tail)
                lines = []
                if subscribed:
                    assert tail.stdout is not None
                    findings = [make_finding(explanation=f"f{i}") for i in (1, 2)]
                    h.broker.publish(make_trace(), findings)
                    lines = [await asyncio.to_thread(tail.stdout.readline) for _ in range(2)]
                h.broker.close()
                _, err = await asyncio.to_thread(tail.communicate, timeout=60)
            finally:
                tail.kill()
            return tail.returncode, lines, err, h.broker.stream_id, subscribed

    return asyncio.run(scenario())


async def subscribed_or_exited(h: Harness, tail: subprocess.Popen[str]) -> bool:
    """Whether ``tail`` subscribed (``True``) or exited first (``False``)."""
    subscribed = asyncio.ensure_future(h.broker.wait_for_subscribers(1))
    exited = asyncio.ensure_future(asyncio.to_thread(tail.wait, 60))
    done, _ = await asyncio.wait(
        {subscribed, exited}, timeout=60, return_when=asyncio.FIRST_COMPLETED
    )
    subscribed.cancel()
    assert done, "tail neither subscribed nor exited within a minute"
    return subscribed in done


def told_in_place(err: str, cursor_file: Path) -> int:
    """How many of tail's lines say it rewrites ``cursor_file`` in place."""
    prefix = f"toolwatch tail: --cursor-file {cursor_file}: "
    return sum(
        line.startswith(prefix) and "rewritten in place" in line for line in err.splitlines()
    )


def tail_command(cursor_file: Path) -> list[str]:
    return [toolwatch_script(), "tail", "--json", "--cursor-file", str(cursor_file)]


def test_a_cursor_file_created_empty_for_its_mount_is_followed(tmp_path: Path) -> None:
    """``touch /srv/tail.cursor && docker run -v /srv/tail.cursor:/tail.cursor ...``.
    Expected: tail follows the stream (nothing printed before: a fresh start), says once
    that it rewrites the file in place, and the volume's file ends holding its cursor.
    Actual: exit 2, "not a tail cursor file", before it subscribes, at every restart."""
    volume = tmp_path / "volume.cursor"
    volume.touch()  # what `touch` makes before the mount, so Docker mounts a file
    cursor_file = tmp_path / "tail.cursor"
    cursor_file.touch()  # the mount point
    mount = 'mount --bind "$0" "$1"'
    command = in_a_namespace(mount, [str(volume), str(cursor_file)], tail_command(cursor_file))

    code, lines, err, stream_id, subscribed = follow_two(command)

    assert (subscribed, code) == (True, 0), err
    assert told_in_place(err, cursor_file) == 1, err
    assert len(lines) == 2
    assert volume.read_text() == f'{{"streams": {{"{stream_id}": 2}}}}\n'


def test_a_cursor_file_mounted_into_a_read_only_root_is_followed(tmp_path: Path) -> None:
    """``docker run --read-only -v /srv/tail.cursor:/srv/tail/tail.cursor ...``: the
    directory tail sees the file in is read-only, the mounted file itself writable.
    Expected: as for any file mounted on its own, tail says once that it rewrites it in
    place and follows the stream; the volume's file ends holding its cursor.
    Actual: exit 2, "[Errno 30] Read-only file system: '.../tail.cursor.partial'", before
    it subscribes: the ``.partial`` copy fails before the rename whose EBUSY the fallback
    waits for."""
    volume = tmp_path / "volume.cursor"
    volume.write_text('{"streams": {}}\n')  # a valid cursor file: only the directory differs
    root = tmp_path / "root"  # the container's file system, read-only
    root.mkdir()
    cursor_file = root / "tail.cursor"
    cursor_file.touch()  # the mount point
    mounts = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && mount --bind "$1" "$2"'
    args = [str(root), str(volume), str(cursor_file)]
    command = in_a_namespace(mounts, args, tail_command(cursor_file))

    code, lines, err, stream_id, subscribed = follow_two(command)

    assert (subscribed, code) == (True, 0), err
    assert told_in_place(err, cursor_file) == 1, err
    assert len(lines) == 2
    assert volume.read_text() == f'{{"streams": {{"{stream_id}": 2}}}}\n'
