"""Was (review of 84567f8) (FIFO outputs: start-up never waits for a reader): ``open_text`` now
opens every output path ``O_WRONLY|O_APPEND|O_CREAT|O_NONBLOCK`` (``output_files._opened``),
regular files included, so that a FIFO without a reader fails at once (ENXIO). The commit
takes ``O_NONBLOCK`` to be harmless on a regular file; it is not on Linux: an open that
would break a file lease fails at once with EWOULDBLOCK when ``O_NONBLOCK`` is given
(open(2), fcntl(2) "Leases"), where a blocking open sends the holder its break signal and
waits for it to let go (at most ``/proc/sys/fs/lease-break-time``, 45 s by default).

Leases are what the kernel NFS server's delegations and Samba's kernel oplocks are made of:
a findings log in a directory the host exports over NFS or SMB, read by a client (a log
analyst's share, a shipper on another host) that holds a read delegation/oplock on it. Then
``serve`` refuses to start: ``App.__init__`` turns the ``OutputError`` into a ``StartError``
with "cannot open PATH (output.findings): Resource temporarily unavailable", a reason that
says nothing of a lease, for a file ``check-config`` calls ok (it only asks ``access``).
Before 84567f8 the start-up open was blocking: the holder was told to let go, and the file
was opened once it had. The thread's look opens a regular file's path the same way now
(``_Look._open``'s ``open_text``, the commit's point 3), so a reopen after a rotation fails
the same way (its lines go on into the renamed file, or are lost, counted, if it was
removed, until the next look).

What it should do: open a regular file as before, waiting for a lease's break (only a FIFO
without a reader must not be waited for): for example, retry without ``O_NONBLOCK`` when
the non-blocking open fails with EAGAIN and the path is not a FIFO.

How it is shown: a real lease. A child process opens the existing findings log read-only,
takes a read lease (``F_SETLEASE``, ``F_RDLCK``), and lets it go when the kernel tells it
to (``SIGIO``), as a lease holder does; ``open_outputs`` (what ``App.__init__`` calls) is run
in a thread joined for a bounded time; then one line is written and the file read back.
Skipped where the file system or the kernel refuses leases.

Now: a non-blocking open that fails with EAGAIN on a path that holds no FIFO is made again
blocking (``output_files._opened``).
"""

from __future__ import annotations

import select
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from toolwatch.config import OutputSettings
from toolwatch.outputs import OutputError, Outputs, open_outputs
from toolwatch.sinks.findings import Redaction

_WAIT = 10.0  # seconds: a bound on each wait, never reached when it works

#: Holds a read lease on argv[1] until the kernel asks for it (SIGIO: another process opens
#: the file to write), lets it go then, and exits once its standard input is closed.
_HOLDER = """
import fcntl, os, signal, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
def let_go(signum, frame):
    fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
signal.signal(signal.SIGIO, let_go)
try:
    fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
except OSError as error:
    print("refused", error.strerror, flush=True)
    sys.exit(0)
print("held", flush=True)
sys.stdin.read()
"""


def _holder(path: Path) -> subprocess.Popen[str]:
    """A process holding a read lease on ``path`` (skips the test where none can be taken)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    ready, _, _ = select.select([holder.stdout], [], [], _WAIT)
    said = holder.stdout.readline() if ready else ""
    if said.startswith("refused"):
        holder.wait(_WAIT)
        pytest.skip(f"no lease can be taken here: {said.strip()}")
    assert said == "held\n", f"the lease holder said {said!r}"
    return holder


def test_start_up_opens_a_findings_log_a_reader_holds_a_lease_on(tmp_path: Path) -> None:
    """Scenario: the findings log exists (a line from the last run); a reader holds a read
    lease on it (an NFS client's delegation, an SMB oplock) and gives it up when asked;
    ``serve`` starts (``open_outputs``) and writes one finding.
    Was (before 84567f8), and should be: the open waits for the lease's break, the finding
    is appended, nothing fails.
    Now: ``open_outputs`` raises at once, "cannot open PATH (output.findings): Resource
    temporarily unavailable" (``serve`` exits at start-up)."""
    path = tmp_path / "findings.jsonl"
    path.write_text("earlier\n")
    holder = _holder(path)
    failures: list[str] = []
    outcome: list[Outputs | OutputError] = []

    def start() -> None:
        try:
            outcome.append(
                open_outputs(
                    OutputSettings(findings=str(path), dump_tooltraces=None),
                    [],
                    [],
                    Redaction(),
                    wall_clock=lambda: 0,
                    failed=failures.append,
                    clock=lambda: 0.0,
                )
            )
        except OutputError as exc:
            outcome.append(exc)

    try:
        opening = threading.Thread(target=start, name="start-up", daemon=True)
        opening.start()
        opening.join(_WAIT)
        assert not opening.is_alive(), f"open_outputs waited {_WAIT:g} s and more"
        opened = outcome[0]
        refused = str(opened) if isinstance(opened, OutputError) else None
        if isinstance(opened, Outputs):
            output = opened.files[0].output
            output.write("finding\n")
            assert output.written(_WAIT)
            opened.close(_WAIT)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(_WAIT)
    assert (refused, path.read_text(), failures) == (None, "earlier\nfinding\n", [])
