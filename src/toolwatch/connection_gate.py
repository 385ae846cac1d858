"""The HTTP listeners' connections (OTLP/HTTP, metrics): at most ``ingest.max_connections``
open at once on each, and their TLS handshakes, whose failures the sender log tells.

Why a bound: each open connection holds a file descriptor, and one that sends nothing is
held for ``ingest.idle_timeout_seconds``. Anyone who can reach a listener could open
connections until the process has no descriptor left (``EMFILE``): the gRPC listeners could
accept nothing either, the findings log could not be opened again at a rotation, nor a
rotated certificate or token file read. A connection past the bound is closed as soon as it
is accepted, before its handshake (exporters retry a connection refused), counted and told
to the sender log (``connection_limit``): the bound keeps such a flood to the listener it
floods. The gRPC listeners are bound by gRPC itself (``grpc.max_allowed_incoming_connections``).

Why the handshake is done here: asyncio's TLS server (``create_server(ssl=...)``) tells a
failed handshake only in its debug mode, so a client refused by it (under mutual TLS, no
client certificate, an expired one, one the client CA did not sign; a protocol older than
served; a handshake not done in time) was told nowhere. Here the handshake is
``loop.start_tls``'s, and its failure is counted and told to the sender log
(``tls_handshake``: the listener, the peer, OpenSSL's reason), rate-limited as every refusal
is. Neither counted nor told: a connection closed during the handshake (a TCP probe, a load
balancer's check), and plain HTTP from loopback (the image's ``HEALTHCHECK`` asks in plain
HTTP first: ``toolwatch.healthcheck``).

Threading: the listener's event loop only.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import Callable
from typing import Any

from aiohttp import web

from toolwatch.metrics import PipelineMetrics
from toolwatch.senders import Sender, SenderLog, transport_address

__all__ = ["CONNECTION_LIMIT", "TLS_HANDSHAKE", "ConnectionGate", "GatedSite"]

#: The sender log's reasons for the refusals here (``toolwatch.senders``).
CONNECTION_LIMIT = "connection_limit"
TLS_HANDSHAKE = "tls_handshake"


class ConnectionGate:
    """One HTTP listener's (``listener``) connections: at most ``limit`` open at once (``open``
    says how many are), each handshaken with ``ssl_context`` (``None``: plain) within
    ``handshake_seconds`` and then handled by a protocol ``make_handler`` makes (aiohttp's
    handler). ``protocol`` is the server's protocol factory. Refusals are counted on
    ``metrics`` (``connection_refused``) and told to ``senders``."""

    def __init__(
        self,
        listener: str,
        limit: int,
        make_handler: Callable[[], asyncio.Protocol],
        *,
        ssl_context: ssl.SSLContext | None,
        handshake_seconds: float,
        metrics: PipelineMetrics,
        senders: SenderLog,
    ) -> None:
        self.listener, self.open = listener, 0
        self._limit = limit
        self.make_handler = make_handler
        self.ssl_context, self._handshake_seconds = ssl_context, handshake_seconds
        self._metrics, self._senders = metrics, senders
        self._handshakes: set[asyncio.Task[None]] = set()

    def protocol(self) -> asyncio.Protocol:
        """A new connection's protocol (``loop.create_server``'s factory)."""
        return _Connection(self)

    def close(self) -> None:
        """Abandon the handshakes under way (their connections are closed): the listener
        stops."""
        for task in self._handshakes:
            task.cancel()

    def admit(self, transport: asyncio.Transport) -> bool:
        """Whether a connection just accepted may stay: counted if so (``release`` when it
        ends), else closed and told."""
        if self.open >= self._limit:
            transport.abort()
            said = f"{self._limit} connections are open (ingest.max_connections)"
            self._refused(CONNECTION_LIMIT, transport, said)
            return False
        self.open += 1
        return True

    def handshake(self, connection: _Connection, transport: asyncio.Transport) -> None:
        """Start ``connection``'s TLS handshake; ``connection.hand_over`` once done."""
        task = asyncio.get_running_loop().create_task(self._secure(connection, transport))
        self._handshakes.add(task)
        task.add_done_callback(self._handshakes.discard)

    async def _secure(self, connection: _Connection, transport: asyncio.Transport) -> None:
        assert self.ssl_context is not None  # only handshaken with a context
        loop = asyncio.get_running_loop()
        try:
            secured = await loop.start_tls(
                transport,
                connection,
                self.ssl_context,
                server_side=True,
                ssl_handshake_timeout=self._handshake_seconds,
            )
        except asyncio.CancelledError:  # the listener stops: start_tls closed it
            connection.lost_in_handshake()
            raise
        except OSError as exc:  # ssl.SSLError is one; start_tls closed the connection
            connection.lost_in_handshake()
            if (why := self._failure(exc, transport)) is not None:
                self._refused(TLS_HANDSHAKE, transport, why)
            return
        if secured is None:  # closed meanwhile
            connection.lost_in_handshake()
            return
        connection.hand_over(secured)

    def _failure(self, error: BaseException, transport: asyncio.BaseTransport) -> str | None:
        """What a failed handshake's log line says, or ``None`` when it is not told."""
        if isinstance(error, ssl.SSLError):
            reason = error.reason or type(error).__name__
            if reason == "HTTP_REQUEST" and _loopback(transport):
                return None  # the image's HEALTHCHECK asking in plain HTTP first
            return f"the TLS handshake failed: {reason}"
        if isinstance(error, ConnectionAbortedError):  # asyncio's handshake timeout
            return f"the TLS handshake was not done within {self._handshake_seconds:g} s"
        return None  # closed by the client during the handshake

    def _refused(self, reason: str, transport: asyncio.BaseTransport, said: str) -> None:
        """Count a connection refused for ``reason`` and tell the sender log."""
        self._metrics.connection_refused(self.listener, reason)
        self._senders.refused(reason, Sender(self.listener, transport_address(transport)), said)

    def release(self) -> None:
        """A connection ``admit`` counted has ended."""
        self.open -= 1


class _Connection(asyncio.Protocol):
    """A connection accepted by a ``ConnectionGate``: counted while open; what it receives
    goes to its handler once made (after the handshake, under TLS), what came before held."""

    __slots__ = ("_counted", "_early", "_gate", "_handler")

    def __init__(self, gate: ConnectionGate) -> None:
        self._gate = gate
        self._handler: asyncio.Protocol | None = None
        self._early: list[bytes] = []  # sent after the handshake, before the hand-over
        self._counted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)  # a stream server's
        if not self._gate.admit(transport):
            return
        self._counted = True
        if self._gate.ssl_context is None:
            self.hand_over(transport)
        else:
            transport.pause_reading()  # the ClientHello waits for start_tls
            self._gate.handshake(self, transport)

    def hand_over(self, transport: asyncio.Transport) -> None:
        handler = self._handler = self._gate.make_handler()
        handler.connection_made(transport)
        for data in self._early:
            handler.data_received(data)
        self._early.clear()

    def lost_in_handshake(self) -> None:
        self._uncount()

    def data_received(self, data: bytes) -> None:
        if self._handler is None:
            self._early.append(data)
        else:
            self._handler.data_received(data)

    def eof_received(self) -> bool | None:
        return self._handler.eof_received() if self._handler is not None else None

    def pause_writing(self) -> None:
        if self._handler is not None:
            self._handler.pause_writing()

    def resume_writing(self) -> None:
        if self._handler is not None:
            self._handler.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._uncount()
        if self._handler is not None:
            self._handler.connection_lost(exc)

    def _uncount(self) -> None:
        if self._counted:
            self._counted = False
            self._gate.release()


class GatedSite(web.SockSite):
    """A ``SockSite`` whose connections go through ``gate``: counted against its limit,
    handshaken by it (within its time: aiohttp's site takes no handshake timeout, so a client
    that never finished one held its socket for asyncio's 60 s), then handled by what its
    ``make_handler`` makes (a ``toolwatch.listeners.HeadRefusingHandler``)."""

    __slots__ = ("_gate",)

    def __init__(self, runner: web.AppRunner, sock: socket.socket, gate: ConnectionGate) -> None:
        super().__init__(runner, sock)
        self._gate = gate

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        self._server = await asyncio.get_running_loop().create_server(
            self._gate.protocol, sock=self._sock, backlog=self._backlog
        )

    async def stop(self) -> None:
        self._gate.close()
        await super().stop()


def _loopback(transport: asyncio.BaseTransport) -> bool:
    peer: Any = transport.get_extra_info("peername")
    try:
        return isinstance(peer, tuple) and ipaddress.ip_address(peer[0]).is_loopback
    except ValueError:
        return False
