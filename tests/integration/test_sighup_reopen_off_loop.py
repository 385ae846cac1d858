"""A SIGHUP's reopen of a rotated findings log waits on the output's thread, not the event loop
(review of the outputs' threads, 89e28d3). Was: ``Outputs.reopen`` looked and opened on the
event loop, as follows. Now: the output's thread does (``BackgroundOutput.reopen``), after the
lines queued before; ``/healthz`` answers while the open waits.

``background``'s docstring gives the reason the outputs have threads of their own: an output
that blocks ("a file on a hung network mount") must not stop the event loop, since with it stop
every export, the ticker, ``/metrics`` and ``/healthz`` ("a liveness probe then kills the pod,
and what was buffered with it"). The writes are off the loop; but ``App.reload``, which SIGHUP
runs on the loop (``_hung_up``: ``loop.call_soon_threadsafe``), calls ``Outputs.reopen``,
which stats the output's path and, rotated, opens it again (``open_text``: ``os.open``) right
there. logrotate's postrotate sends that SIGHUP every day: where the mount hangs, the open
waits, and the liveness probe gets no answer.

An open that waits is made here with a real file lease (``fcntl F_SETLEASE``) a second
process holds on the new file at the path: the kernel holds an open for writing until the
holder lets go (or 45 s pass), as a hung NFS mount holds it. The thread's own ``follow`` does
the same open off the loop: there it would stall that output alone."""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from tests.integration.conftest import RunningServer

_GUARD = 2.0  # seconds a probe may take: the kubelet's default timeoutSeconds is 1

_HOLDER = """
import fcntl, os, signal, sys
signal.signal(signal.SIGIO, lambda *_: None)  # told the lease is wanted: holds on
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
print("held", flush=True)
sys.stdin.readline()
fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
"""


def _healthz(server: RunningServer) -> int | str:
    url = f"http://{server.address('metrics')}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=_GUARD) as response:
            return int(response.status)
    except (TimeoutError, urllib.error.URLError) as error:
        return f"no answer within {_GUARD} s: {error}"


def test_healthz_answers_while_a_sighup_reopens_a_findings_log_the_file_system_holds(
    start_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    """Scenario: logrotate renames the findings log away and creates a new one at the path
    (``create``), then its postrotate sends SIGHUP; the file system holds the open of the new
    file (a hung mount; here a lease another process holds); the kubelet probes /healthz.
    Was: no answer: the event loop waited in ``Outputs.reopen``'s ``os.open`` until the
    file system let go. Now: 200 within the probe's timeout; the reopen waits off the loop."""
    server = start_server()
    assert _healthz(server) == 200
    path = tmp_path / "findings.jsonl"
    path.rename(tmp_path / "findings.jsonl.1")
    path.touch()
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        server.loop.call_soon_threadsafe(server.app.reload, server.load_config)  # _hung_up
        probed = _healthz(server)
    finally:
        assert holder.stdin is not None
        holder.stdin.write("go\n")
        holder.stdin.close()
        holder.wait(10)
    assert probed == 200
