"""Was (review of e825c5c (stream listener: a retry asks ``listeners.address_taken`` before building
a gRPC server): for ``listen.stream`` on a host name, every tick's retry resolves the name on
the event loop, several times, and a name that no longer resolves still builds a gRPC server
at every tick; with a resolver that is slow or down, each tick holds the event loop (OTLP
ingestion, the other listeners, the ticks) for the resolver's timeouts, over and over.

What is wrong. ``StreamListener._bound`` (src/toolwatch/stream_listener.py) runs on the event
loop, from ``retry`` at every ``App.tick`` (every second idle, every ``assembly.tick_seconds``
under traffic) while the stream is down. For a named host (anything but an IP address and
``localhost``) it calls, synchronously: ``address_taken`` → ``_held_elsewhere`` →
``host_addresses`` (``getaddrinfo``), then ``listening_socket`` (``getaddrinfo``, and the bind
resolves again); a name that does not resolve fails the plain socket with a ``gaierror``,
not ``EADDRINUSE``, so ``address_taken`` answers ``None`` and ``bind_grpc`` goes on:
``_held_elsewhere`` (``getaddrinfo``), gRPC's own blocking resolution in
``add_secure_port``, and ``_why_not_bound`` (``getaddrinfo``). Each blocks the loop's thread
for as long as the resolver takes: with the resolver unreachable, ``timeout`` times ``attempts``
(5 s, twice, by glibc's default) for each, every tick. A server is built and stopped unstarted at
each tick too (the leak and gRPC core's ERROR line e825c5c meant to end). The stream being
down was meant to leave ingestion alone (docs/security.md: "ingestion goes on").

What it should do. Not resolve on the event loop at a retry (resolve in an executor, e.g.
``loop.getaddrinfo``, or bind the addresses resolved when the listener first bound), and
build no gRPC server for a bind the plain socket has seen fail.

How it is shown. In namespaces of its own (``unshare -n -m``: a network namespace, and
``/etc/hosts`` and ``/etc/resolv.conf`` bind-mounted from files of the test, so nothing of the
host changes), a real ``StreamListener`` with real grpc.aio servers binds
``stream.review.test:0``, a name the test's hosts file gives 127.0.0.1. The name is then taken
out of that file; the resolver (``nameserver 127.0.0.1``, ``timeout:1 attempts:1``) is a UDP
socket on port 53 that never answers, as a DNS server that is down. A client CA taken out
restarts the listener, and two ticks' retries run while a task ticks every 10 ms on the
same loop. Fails with the loop held for seconds at each retry (the longest gap between two
10 ms beats) and a server built at each retry. Skipped where the namespaces cannot be made.

Now: the probe runs in a thread (``asyncio.to_thread(listeners.rebind_refused, ...)``), and a
name that does not resolve is a bind refused: no gRPC server, whose own bind resolves on the
loop.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

NAME = "stream.review.test"
RETRIES = 2

#: Run in the namespaces: the listener's life as the app drives it, with a beat on its loop.
_CHILD = """
import asyncio, json, socket, sys
import grpc
from toolwatch.stream_listener import StreamListener

name, hosts_file, retries = sys.argv[1], sys.argv[2], int(sys.argv[3])
built = []

def make_server():
    built.append(1)
    return grpc.aio.server(options=[("grpc.so_reuseport", 0)])  # as the app builds it

silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # a DNS server that is down
silent.bind(("127.0.0.1", 53))

async def main():
    loop = asyncio.get_running_loop()
    gaps = []

    async def beat():
        last = loop.time()
        while True:
            await asyncio.sleep(0.01)
            now = loop.time()
            gaps.append(now - last)
            last = now

    listener = StreamListener(make_server, lambda: None, lambda: 0)
    address = await listener.start(f"{name}:0")
    with open(hosts_file, "w") as hosts:  # in place: the bind mount follows
        hosts.write("127.0.0.1 localhost\\n")
    listener.client_ca_removed()  # a client CA taken out: the listener restarts
    await listener.settled()
    restart = [len(built), listener.down]
    beating = loop.create_task(beat())
    await asyncio.sleep(0.05)
    for _ in range(retries):  # the app's ticks
        listener.retry()
        await listener.settled()
        await asyncio.sleep(0.05)
    beating.cancel()
    said = [address, restart, len(built), listener.down, round(max(gaps), 2)]
    await listener.stop(0)
    return said

print(json.dumps(asyncio.run(main())), flush=True)
"""


def _in_namespaces(hosts: Path, resolv: Path) -> list[str]:
    unshare, ip = shutil.which("unshare"), shutil.which("ip")
    if unshare is None or ip is None:
        pytest.skip("unshare or ip is not installed")
    mounts = f"mount --bind {hosts} /etc/hosts && mount --bind {resolv} /etc/resolv.conf"
    probe = subprocess.run(
        [unshare, "-n", "-m", "sh", "-c", f"{mounts} && ip link set lo up"],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip(f"no network and mount namespaces here: {probe.stderr.decode().strip()}")
    return [unshare, "-n", "-m", "sh", "-c", f'{mounts} && ip link set lo up && exec "$0" "$@"']


def test_retries_for_a_named_stream_host_do_not_hold_the_event_loop(tmp_path: Path) -> None:
    hosts, resolv = tmp_path / "hosts", tmp_path / "resolv.conf"
    hosts.write_text(f"127.0.0.1 localhost\n127.0.0.1 {NAME}\n")
    resolv.write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
    command = [*_in_namespaces(hosts, resolv), sys.executable, "-c", _CHILD]
    command += [NAME, str(hosts), str(RETRIES)]
    env = os.environ | {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=300, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    address, restart, built, down, longest_gap = json.loads(done.stdout)

    # The first server alone: the restart's bind is asked of a plain socket too.
    assert (address.startswith(f"{NAME}:"), restart, down) == (True, [1, True], True)
    # Each retry: no server built, and the loop not held for the resolver's timeouts.
    assert (built, longest_gap < 0.5) == (1, True), (
        f"{built - 1} servers built by {RETRIES} retries; the loop was held {longest_gap} s"
    )
