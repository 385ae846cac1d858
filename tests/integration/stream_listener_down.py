"""What the review tests of a findings stream listener that cannot listen again share: a real
server with mutual TLS whose stream listener restarts (a client CA taken out) while another
socket takes its port, as test_security_stream_ca_address_taken.py does it: a client that
reads nothing holds the old server's stop for its grace while a finding larger than its
receive window is written, and a real socket takes the port meanwhile."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import trustme

from tests.integration.conftest import RunningServer, StartServer, until
from tests.integration.pki_support import make_pki
from tests.integration.stream_ca_helpers import (
    RELOAD_SECONDS,
    being_written,
    ca_channel,
    listening_again,
    mutual_tls,
    publish,
    subscribe,
    take_address,
    write_cas,
)
from tests.integration.stream_support import BIG, NO_BDP


@contextmanager
def stream_address_taken(start_server: StartServer, tmp_path: Path) -> Iterator[RunningServer]:
    """A server whose stream listener restarted and could not bind its address again (taken
    by a socket of this process), until the block ends; then the port is free again."""
    pki = make_pki(tmp_path)
    path = tmp_path / "client-ca.pem"
    write_cas(path, [pki.clients, trustme.CA()])
    server = start_server(**mutual_tls(pki, path))
    address = server.address("stream")
    taken: list[socket.socket] = []
    try:
        with ca_channel(address, pki, pki.clients, NO_BDP) as stuck_channel:
            stuck = subscribe(stuck_channel)  # reads nothing from now on
            publish(server, "x" * BIG)
            assert until(lambda: being_written(server))
            write_cas(path, [pki.clients])  # the other CA taken out: the listener restarts
            server.clock.advance(RELOAD_SECONDS)
            server.call(server.app.tick)
            assert until(lambda: take_address(address, taken))  # another process takes the port
            listening_again(server)
            stuck.cancel()
        yield server
    finally:
        for sock in taken:
            sock.close()


def ticks(server: RunningServer, count: int) -> None:
    """``count`` of the app's ticks, each after the last one's bind attempt is done (as
    ticks ``assembly.tick_seconds`` apart under traffic would be)."""
    listener = server.app.stream_listener
    assert listener is not None

    async def run() -> None:
        for _ in range(count):
            server.app.tick()
            await listener.settled()

    asyncio.run_coroutine_threadsafe(run(), server.loop).result(timeout=600)
