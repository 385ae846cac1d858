"""Was (review of c3e548d): while the findings stream's address is taken, each tick's retry of
``StreamListener`` leaks memory (about 3 KB), without bound, for as long as the stream is
down.

What is wrong. ``StreamListener._bound`` (src/toolwatch/stream_listener.py) builds a new
``grpc.aio.server`` (``make_server``: options, interceptors, the servicer registered, fresh
TLS credentials) at every ``retry``, i.e. at every ``App.tick``, binds it, and on failure
stops it (``bind_grpc``: ``server.stop(None)``). gRPC does not give back what an unstarted
server took (measured apart: ``grpc.aio.server()`` then ``await server.stop(None)``, 3,000
times, grows the resident set by about 6 MB, linearly, whether or not a bind was tried, with
``gc.collect()`` between). Ticks come once a second when idle and every
``assembly.tick_seconds`` (0.01 s by default) under traffic (``tick_delay``), so a stream
down for a day costs about 250 MB idle, and a sidecar under load about 1 GB an hour, until
its memory limit kills it (taking its pod's ingestion with it), which the stream being down
was meant not to do ("ingestion and /readyz are unaffected"). STYLE.md: everything bounded.

What it should do. Cost nothing that grows while it cannot bind: find the address taken
before building a server (as ``address_taken`` does at start-up, with a plain socket), and
build one only when the address looks free; or keep one server for every attempt; and try
at a bounded rate.

How it is shown. ``stream_listener_down.stream_address_taken``: a real server with mutual
TLS, its stream listener restarted while a real socket holds its port. The process's
resident set (``/proc/self/status`` ``VmRSS``) is read across 4,000 ticks while the stream is
down, after 300 to warm up, and across 4,000 ticks once it serves again (the control: the
same ticks without a bind attempt). Fails with about 12 MB grown while down (3 KB a tick)
against nothing serving.

Now: ``_bound`` asks a plain socket first (``listeners.address_taken``) and builds no gRPC
server while the address is taken.
"""

from __future__ import annotations

from pathlib import Path

from tests.integration.conftest import StartServer
from tests.integration.stream_ca_helpers import listening_again
from tests.integration.stream_listener_down import stream_address_taken, ticks

TICKS = 4000
KIB = 1024


def resident() -> int:
    """This process's resident set now, bytes (``VmRSS``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * KIB
    raise AssertionError("no VmRSS in /proc/self/status")


def test_ticks_while_the_stream_address_is_taken_do_not_grow_memory(
    start_server: StartServer, tmp_path: Path
) -> None:
    with stream_address_taken(start_server, tmp_path) as server:
        listener = server.app.stream_listener
        assert listener is not None
        ticks(server, 300)  # warm-up
        before = resident()
        ticks(server, TICKS)
        down = resident() - before
        still_down = listener.serving
    server.call(server.app.tick)  # the port free again
    listening_again(server)
    ticks(server, 300)
    before = resident()
    ticks(server, TICKS)
    serving = resident() - before

    assert (still_down, listener.serving) == (False, True)
    # What a tick that cannot bind costs must not grow with the ticks.
    assert down < serving + 1024 * KIB, (
        f"{down // KIB} KiB grown over {TICKS} ticks down, {serving // KIB} KiB serving"
    )
