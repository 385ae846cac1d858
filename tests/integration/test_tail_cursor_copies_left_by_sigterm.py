"""Was (review of 4a4e1df): ``toolwatch tail --cursor-file FILE`` stopped by SIGTERM (or Ctrl-C)
while it rewrites the file leaves its copy ``FILE.<random>.partial`` behind, and every such
stop leaves one more: they pile up beside the cursor file, each a 0600 copy of the tokens.

What is wrong. Since 4a4e1df, ``_Cursor._replace`` (src/toolwatch/tail.py) writes each
rewrite to ``tempfile.mkstemp(prefix="FILE.", suffix=".partial")`` and removes that copy only
on an ``OSError``. The CLI turns SIGTERM into ``KeyboardInterrupt`` (``cli_tail._tail``), raised
in the main thread wherever it is, and the main thread rewrites the file itself (at
start-up, on subscribing, after a finding when the last rewrite is 0.1 s old): a SIGTERM
that lands between ``mkstemp`` and ``os.replace`` ends the rewrite with the copy on disk.
``tail`` then rewrites the file again on its way out (``flush``), under another random name,
and exits 143 as a clean stop; the first copy stays for good. Before, the copy had one fixed
name, ``FILE.partial``, which the next rewrite unlinked: at most one, gone at the next
start. Now a ``tail --reconnect`` run by a service manager gathers one more file at each
unlucky stop, for ever, in a directory an operator gave it for one file, each holding the
resume tokens (whoever reads one can resume as tail). docs/commands.md and the commit speak only
of a *crash* leaving such a copy; SIGTERM is tail's documented clean stop ("143 ... like
Ctrl-C, it first keeps its --cursor-file").

What it should do. Remove its copy however the rewrite ends (``except BaseException`` around
the write and rename, or a ``finally`` that unlinks a copy not renamed), so a stop by signal
leaves the cursor file alone beside it.

How it is shown. The real ``toolwatch tail`` under ``strace``, which sends SIGTERM to it as
it enters a chosen ``fsync`` of its main thread (``-e inject=fsync:signal=SIGTERM:when=N``;
without ``-f`` only the main thread is traced), i.e. mid-rewrite, deterministically: the 3rd
(the rewrite on subscribing to a real findings stream, after the 2 of the start-up rewrite's
copy and directory), then twice the 1st (a start-up rewrite of a later run). Each run exits
143 with a valid cursor file; the test fails on the three ``tail.cursor.*.partial`` left.
Skipped where ``strace`` is missing or may not trace.

Now: the copy is removed however the rewrite ends, a stop by signal too.
"""

from __future__ import annotations

import asyncio
import json
import stat
import subprocess
from pathlib import Path

from tests.integration.cli_support import clean_env, toolwatch_script
from tests.integration.stream_support import serve
from tests.strace import strace_or_skip


def _tail_terminated_at_fsync(target: str, cursor_file: Path, nth: int) -> tuple[int, str]:
    """``toolwatch tail --reconnect --cursor-file`` sent SIGTERM as its main thread enters its
    ``nth`` fsync; its exit code and what it said."""
    inject = f"inject=fsync:signal=SIGTERM:when={nth}"
    command = [strace_or_skip(), "-qq", "-o", "/dev/null", "-e", "trace=fsync", "-e", inject]
    command += [toolwatch_script(), "tail", "--reconnect", "--target", target]
    command += ["--cursor-file", str(cursor_file)]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=60, env=clean_env(), check=False
    )
    return done.returncode, done.stderr


def test_a_tail_stopped_by_sigterm_mid_rewrite_leaves_no_copy_of_its_cursor_file(
    tmp_path: Path,
) -> None:
    cursor_file = tmp_path / "tail.cursor"

    async def following() -> tuple[int, str]:
        async with serve() as h:
            # 1, 2: the start-up rewrite (copy, directory); 3: the one on subscribing.
            return await asyncio.to_thread(_tail_terminated_at_fsync, h.target, cursor_file, 3)

    runs = [asyncio.run(following())]
    runs += [_tail_terminated_at_fsync("127.0.0.1:9", cursor_file, 1) for _ in range(2)]

    kept = json.loads(cursor_file.read_text())
    copies = sorted(tmp_path.glob("tail.cursor.*.partial"))
    modes = {oct(stat.S_IMODE(copy.stat().st_mode)) for copy in copies}
    tokens_in_copies = sum("tokens" in copy.read_text() for copy in copies)
    assert [code for code, _ in runs] == [143, 143, 143], runs
    assert (len(kept["streams"]), len(kept["tokens"])) == (1, 1)  # the file itself is fine
    # Each SIGTERM mid-rewrite left a copy of its own, never removed.
    assert (copies, modes, tokens_in_copies) == ([], set(), 0)
