"""Was (review of e825c5c (stream listener: a retry while the address is taken asks a plain socket
first and builds no gRPC server): any other reason the address cannot be bound still builds,
binds and stops a gRPC server at every tick, with gRPC core's ERROR line on standard error
and the ~3 KB gRPC does not give back (the two defects the commit fixed, for "in use" only).

What is wrong. ``StreamListener._bound`` (src/toolwatch/stream_listener.py) asks
``listeners.address_taken("stream", address)`` first, but ``address_taken`` returns ``None``
for a gRPC or stream listener whenever the plain socket fails with anything but
``EADDRINUSE`` ("gRPC binds as it can ...: only a port in use is sure to fail"). That
excuse is about start-up (a wildcard on a host without IPv6); at a retry the address is an
IP this listener bound before, and a plain socket that cannot bind it (``EADDRNOTAVAIL``:
the address is no longer this host's: a secondary or VPN interface address, a VIP moved,
a DHCP renumbering, at the moment a client CA taken out restarts the listener) means gRPC
cannot either. So each tick (every second idle, every ``assembly.tick_seconds`` = 0.01 s
under traffic) builds a ``grpc.aio.server`` (interceptors, servicer, fresh TLS credentials in
the app), has gRPC core print ``Failed to add port to server`` at ERROR on descriptor 2 (the
log toolwatch's own ERROR is said once in), and stops it unstarted, leaking what the review
tests of c3e548d measured (about 3 KB each), for as long as the address is away. Meanwhile
the gauge reads 0 and ToolwatchFindingsStreamDown's runbook says "another process took the
port" (``ss -ltnp`` finds none).

What it should do. At a retry, not hand gRPC a bind a plain socket has just seen fail for a
reason that holds for gRPC too (at least ``EADDRNOTAVAIL`` and ``EACCES`` on an IP address),
as it does for a port in use: build no server, print nothing, until the address can be bound.

How it is shown. In a network namespace of its own (``unshare -n``, so nothing of the host
changes), a real ``StreamListener`` with real grpc.aio servers binds 10.123.45.67:0, an
address added to the namespace's loopback; the address is then deleted (``ip addr del``), a
client CA taken out restarts the listener (``client_ca_removed``), and ten ticks' retries run.
The servers built and gRPC core's lines on the child's standard error are counted. Fails with
a server built and a gRPC ERROR line at each retry (11 of each: the restart's and ten), where
the restart's one attempt should be all. Skipped where ``unshare -n`` or ``ip`` is not
permitted.

Now: every bind of a restart, its first too, is asked of a plain socket first
(``listeners.rebind_refused``): EADDRNOTAVAIL, EACCES and a name that does not resolve build no
server either.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

ADDRESS = "10.123.45.67"
RETRIES = 10
GRPC_BIND_ERROR = "Failed to add port to server"

#: Run in the namespace: the listener's life as the app drives it, counted.
_CHILD = """
import asyncio, json, subprocess, sys
import grpc
from toolwatch.stream_listener import StreamListener

ip_address, retries = sys.argv[1], int(sys.argv[2])
built = []

def make_server():
    built.append(1)
    return grpc.aio.server(options=[("grpc.so_reuseport", 0)])  # as the app builds it

async def main():
    listener = StreamListener(make_server, lambda: None, lambda: 0)
    address = await listener.start(f"{ip_address}:0")
    subprocess.run(["ip", "addr", "del", f"{ip_address}/32", "dev", "lo"], check=True)
    listener.client_ca_removed()  # a client CA taken out: the listener restarts
    await listener.settled()
    restart = [len(built), listener.down]
    for _ in range(retries):  # the app's ticks
        listener.retry()
        await listener.settled()
    said = [address, restart, len(built), listener.down, listener.serving]
    await listener.stop(0)
    return said

print(json.dumps(asyncio.run(main())), flush=True)
"""


def _in_a_namespace() -> list[str]:
    unshare, ip = shutil.which("unshare"), shutil.which("ip")
    if unshare is None or ip is None:
        pytest.skip("unshare or ip is not installed")
    probe = subprocess.run(
        [unshare, "-n", ip, "link", "set", "lo", "up"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        pytest.skip(f"no network namespace here: {probe.stderr.decode().strip()}")
    setup = f'ip link set lo up && ip addr add {ADDRESS}/32 dev lo && exec "$0" "$@"'
    return [unshare, "-n", "sh", "-c", setup]


def test_retries_while_the_stream_address_is_gone_build_no_grpc_server() -> None:
    command = [*_in_a_namespace(), sys.executable, "-c", _CHILD, ADDRESS, str(RETRIES)]
    env = os.environ | {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    address, restart, built, down, serving = json.loads(done.stdout)
    grpc_lines = [line for line in done.stderr.splitlines() if GRPC_BIND_ERROR in line]

    bound = address.startswith(f"{ADDRESS}:")
    # The first server alone: the restart's bind is asked of a plain socket too.
    assert (bound, restart, down, serving) == (True, [1, True], True, False)
    assert (built, len(grpc_lines)) == (1, 0), (
        f"{built} servers built, {len(grpc_lines)} gRPC core lines, first: {grpc_lines[:1]}"
    )
