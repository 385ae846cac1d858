"""``toolwatch tail --cursor-file``: each rewrite is durable (a crash of the machine leaves the
old cursor or the new, never an empty file), and a file mounted on its own, which no rename
can replace, or in a directory tail cannot write, is rewritten in place, told once; an empty
one (made with ``touch`` for its mount) is a fresh start.

A host going down (a node lost in the very incident tail is watching, a power cut, a VM reset)
can commit a rename before the renamed file's data on file systems that allow it (XFS,
btrfs, ext4 mounted ``noauto_da_alloc`` or ``data=writeback``): ``FILE`` comes back empty or
zero-filled, tail refuses it as "not a tail cursor file", exit 2, before it subscribes, and a
``tail --reconnect --cursor-file`` run by systemd or a bot fails at every restart until
someone deletes the file. ``_Cursor._save`` writes a copy, ``FILE.<random>.partial``, syncs
it, renames it over ``FILE`` and syncs the directory.

Whether a file was synced cannot be seen from the file, so the first test runs the real
``toolwatch tail`` under ``strace`` and reads, for each rename of a ``.partial`` copy over
the cursor file, whether that file was synced first and the directory after; skipped where
``strace`` is missing or may not trace. The others bind-mount the cursor file (and, for a
read-only root, its directory read-only) in a mount namespace of their own (``unshare``), as
Docker does; skipped where that is not allowed.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.cli_support import text_process, toolwatch_script
from tests.integration.stream_support import Harness, make_finding, make_trace, serve
from tests.strace import strace_or_skip


def traced_tail(target: str, cursor_file: Path, log: Path) -> subprocess.Popen[str]:
    """``toolwatch tail --cursor-file`` under ``strace``, its syncs and renames logged."""
    strace = strace_or_skip()
    syscalls = "trace=fsync,fdatasync,rename,renameat,renameat2"
    command = [strace, "-f", "-qq", "-y", "-e", syscalls, "-o", str(log)]
    command += [toolwatch_script(), "tail", "--target", target, "--cursor-file", str(cursor_file)]
    return text_process(command)


def syncs_around_each_replace(log: str, cursor_file: Path) -> list[tuple[bool, bool]]:
    """For each rename of a ``.partial`` copy of ``cursor_file`` (``FILE.<random>.partial``)
    over it, in order: whether an ``fsync``/``fdatasync`` of that copy came before it, and
    whether one of the cursor file's directory came after it (before the next rename)."""
    partial = re.escape(f"{cursor_file}.") + r"[^/\"<>]+\.partial"
    directory = re.escape(str(cursor_file.parent))
    synced: set[str] = set()  # the copies synced
    replaces: list[tuple[bool, bool]] = []
    for line in log.splitlines():
        if found := re.search(rf"\b(?:fsync|fdatasync)\(\d+<({partial})>\)", line):
            synced.add(found[1])
        elif re.search(rf"\bfsync\(\d+<{directory}>\)", line) and replaces:
            replaces[-1] = (replaces[-1][0], True)
        elif "rename" in line and f'"{cursor_file}"' in line:
            renamed = re.search(rf'"({partial})"', line)
            if renamed is not None:
                replaces.append((renamed[1] in synced, False))
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


def in_a_namespace(script: str, args: list[str], command: list[str]) -> list[str]:
    """``command`` run after ``sh -c script`` (its mounts; ``$0``, ``$1``, ... are ``args``)
    in a user and mount namespace of its own; skips the test where that is not allowed."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("unshare is not installed")
    namespace = [unshare, "--user", "--map-root-user", "--mount", "sh", "-c"]
    shifted = f'{script} && shift {len(args) - 1} && exec "$@"'
    probe = subprocess.run([*namespace, shifted, *args, "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"no such mounts in a namespace here: {probe.stderr.decode().strip()}")
    return [*namespace, shifted, *args, *command]


#: ``docker -v "$0":"$1"``: the file ``$0`` bind-mounted on the file ``$1``.
BIND_MOUNT = 'mount --bind "$0" "$1"'


def follow_two(command: list[str]) -> tuple[int | None, list[str], str, str]:
    """Runs ``command`` (a ``toolwatch tail --json --cursor-file``) against a findings
    stream; once it has subscribed, publishes f1 and f2, reads their two lines and shuts the
    server down. A tail that exits before it subscribes is waited for instead (no lines).
    Returns its exit code, the lines read, what it said, and the stream id."""

    async def scenario() -> tuple[int | None, list[str], str, str]:
        async with serve() as h:
            tail = text_process([*command, "--target", h.target])
            try:
                lines = []
                if await subscribed_or_exited(h, tail):
                    assert tail.stdout is not None
                    findings = [make_finding(explanation=f"f{i}") for i in (1, 2)]
                    h.broker.publish(make_trace(), findings)
                    lines = [await asyncio.to_thread(tail.stdout.readline) for _ in range(2)]
                h.broker.close()
                _, err = await asyncio.to_thread(tail.communicate, timeout=60)
            finally:
                tail.kill()
            return tail.returncode, lines, err, h.broker.stream_id

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


def tail_command(cursor_file: Path) -> list[str]:
    return [toolwatch_script(), "tail", "--json", "--cursor-file", str(cursor_file)]


def kept_cursor(text: str, stream_id: str) -> int:
    """The sequence a cursor file's whole ``text`` keeps, of ``stream_id`` alone, beside the
    token of tail's last subscription there; nothing else in it (an in-place rewrite leaves
    nothing of a longer text after it: ``json.loads`` refuses any)."""
    kept = json.loads(text)
    assert (text[-1], list(kept), list(kept["streams"])) == (
        "\n",
        ["streams", "tokens"],
        [stream_id],
    )
    assert re.fullmatch("[0-9a-f]{32}", kept["tokens"][stream_id]), text
    sequence: int = kept["streams"][stream_id]
    return sequence


def in_place_warning(cursor_file: Path, why: str) -> str:
    return (
        f"toolwatch tail: --cursor-file {cursor_file}: {why}, so it is rewritten in place: a"
        " crash while it is written can leave it damaged, and the next run then refuses it"
        " (remove it to start again); mount its directory instead"
    )


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
    command = in_a_namespace(BIND_MOUNT, [str(volume), str(cursor_file)], tail_command(cursor_file))

    code, lines, err, stream_id = follow_two(command)

    assert (code, len(lines)) == (0, 2), err
    warning, ended = err.splitlines()
    why = "cannot be renamed over (Device or resource busy: a file mounted on its own?)"
    assert warning == in_place_warning(cursor_file, why)
    assert ended.endswith("ended the stream (server shutting down)")
    assert kept_cursor(volume.read_text(), stream_id) == 2
    assert cursor_file.read_text() == ""  # the mount point itself, under the mount, untouched
    assert sorted(tmp_path.iterdir()) == [cursor_file, volume]  # no copy left beside it


def test_a_cursor_file_created_empty_for_its_mount_is_followed(tmp_path: Path) -> None:
    """``touch /srv/tail.cursor && docker run -v /srv/tail.cursor:/tail.cursor ...``: Docker's
    ``-v`` (and a ``subPath``) makes a directory where the host path does not exist, so the
    file is made first, empty.
    Was: tail refused the empty file, "not a tail cursor file", exit 2, before it subscribed,
    at every restart: the in-place rewrite was never reached.
    Now: an empty file holds no cursor yet (tail printed nothing from any stream): tail starts
    as without one, says once that it rewrites the file in place, follows the stream, and the
    volume's file ends holding its cursor."""
    volume = tmp_path / "volume.cursor"
    volume.touch()  # what `touch` makes before the mount, so Docker mounts a file
    cursor_file = tmp_path / "tail.cursor"
    cursor_file.touch()  # the mount point
    command = in_a_namespace(BIND_MOUNT, [str(volume), str(cursor_file)], tail_command(cursor_file))

    code, lines, err, stream_id = follow_two(command)

    assert (code, [json.loads(line)["explanation"] for line in lines]) == (0, ["f1", "f2"]), err
    warning, ended = err.splitlines()
    why = "cannot be renamed over (Device or resource busy: a file mounted on its own?)"
    assert warning == in_place_warning(cursor_file, why)
    assert ended.endswith("ended the stream (server shutting down)")
    assert kept_cursor(volume.read_text(), stream_id) == 2


def test_a_cursor_file_mounted_into_a_read_only_root_is_followed(tmp_path: Path) -> None:
    """``docker run --read-only -v /srv/tail.cursor:/srv/tail/tail.cursor ...`` (Kubernetes'
    ``readOnlyRootFilesystem``, or a non-root user's file in ``/``): the directory tail sees
    the file in is read-only, the mounted file itself writable.
    Was: exit 2, "[Errno 30] Read-only file system: '.../tail.cursor.partial'", before it
    subscribed: the ``.partial`` copy failed before the rename whose EBUSY the in-place
    rewrite waited for.
    Now: a ``.partial`` copy that cannot be written (EROFS, EACCES, EPERM) is rewritten in
    place as well, told once; tail follows the stream and the volume's file ends holding its
    cursor."""
    volume = tmp_path / "volume.cursor"
    volume.write_text('{"streams": {}}\n')  # a valid cursor file: only the directory differs
    root = tmp_path / "root"  # the container's file system, read-only
    root.mkdir()
    cursor_file = root / "tail.cursor"
    cursor_file.touch()  # the mount point
    mounts = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && mount --bind "$1" "$2"'
    args = [str(root), str(volume), str(cursor_file)]
    command = in_a_namespace(mounts, args, tail_command(cursor_file))

    code, lines, err, stream_id = follow_two(command)

    assert (code, [json.loads(line)["explanation"] for line in lines]) == (0, ["f1", "f2"]), err
    warning, ended = err.splitlines()
    why = "cannot write tail.cursor.*.partial beside it (Read-only file system: a read-only root?)"
    assert warning == in_place_warning(cursor_file, why)
    assert ended.endswith("ended the stream (server shutting down)")
    assert kept_cursor(volume.read_text(), stream_id) == 2
    assert sorted(root.iterdir()) == [cursor_file]  # no copy left beside it
