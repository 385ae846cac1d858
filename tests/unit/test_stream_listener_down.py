"""``StreamListener.down``, what ``toolwatch_stream_listening`` reads: false while bound and
during a restart that has not failed to bind, true from a restart's failed bind until a
retry binds the address again, false again once stopped (a shutdown is no outage).

Real grpc.aio servers on a loopback port; the port is taken by a real listening socket at
the restart's bind (as another process would take it), from ``make_server``, which the
listener calls just before it binds, and which reads ``down`` there too: mid-restart, the old
server stopped and the new one not bound yet.
"""

from __future__ import annotations

import asyncio
import socket

import grpc

from toolwatch.listeners import listening_socket
from toolwatch.stream_listener import StreamListener

# As the app builds them: gRPC's SO_REUSEPORT would let a second listener share the port.
_OPTIONS = [("grpc.so_reuseport", 0)]


class _Taker:
    """``make_server`` for the listener: takes the address bound first with a listening
    socket when the restart builds its server, while ``take`` is set; and notes what
    ``listener`` says then (``down``, ``serving``) in ``seen``."""

    def __init__(self) -> None:
        self.address = ""
        self.take = False
        self.taken: list[socket.socket] = []
        self.listener: StreamListener | None = None
        self.seen: list[tuple[bool, bool]] = []

    def __call__(self) -> grpc.aio.Server:
        if self.listener is not None:
            self.seen.append((self.listener.down, self.listener.serving))
        if self.take and not self.taken:
            self.taken.append(listening_socket(self.address))
        return grpc.aio.server(options=_OPTIONS)

    def free(self) -> None:
        self.take = False
        while self.taken:
            self.taken.pop().close()


async def _states(taker: _Taker) -> list[tuple[str, bool, bool]]:
    listener = StreamListener(taker, lambda: None, lambda: 0)
    taker.listener = listener
    states = [("before start", listener.down, listener.serving)]
    taker.address = await listener.start("127.0.0.1:0")
    states.append(("bound", listener.down, listener.serving))
    taker.take = True
    listener.client_ca_removed()
    states.append(("restarting", listener.down, listener.serving))
    await listener.settled()
    states.append(("bind failed", listener.down, listener.serving))
    listener.retry()
    states.append(("retrying", listener.down, listener.serving))
    await listener.settled()
    states.append(("retry failed", listener.down, listener.serving))
    taker.free()
    listener.retry()
    await listener.settled()
    states.append(("bound again", listener.down, listener.serving))
    await listener.stop(0)
    states.append(("stopped", listener.down, listener.serving))
    return states


def test_the_stream_is_down_from_a_failed_bind_until_a_retry_binds_it() -> None:
    taker = _Taker()
    try:
        states = asyncio.run(_states(taker))
    finally:
        taker.free()
    # At each server built: the first; the restart's, mid-restart (no outage); the retry's
    # once the address is free, the failed bind still standing. A retry while it is taken
    # builds none (``_bound`` asks a plain socket first).
    assert taker.seen == [(False, False), (False, False), (True, False)]
    assert states == [
        ("before start", False, False),
        ("bound", False, True),
        ("restarting", False, True),  # the task has not begun: the old server still serves
        ("bind failed", True, False),
        ("retrying", True, False),  # a failed bind's retry is no restart: still down
        ("retry failed", True, False),
        ("bound again", False, True),
        ("stopped", False, False),
    ]
