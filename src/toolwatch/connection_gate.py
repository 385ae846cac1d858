"""The HTTP listeners' connections (OTLP/HTTP, metrics): at most ``ingest.max_connections``
open at once on each, and their TLS handshakes, whose failures the sender log tells.

Why a bound: each open connection holds a file descriptor, and one that sends nothing is
held for ``ingest.idle_timeout_seconds``. Anyone who can reach a listener could open
connections until the process has no descriptor left (``EMFILE``): the gRPC listeners could
accept nothing either, the findings log could not be opened again at a rotation, nor a
rotated certificate or token file read (``process_tuning.raise_open_files`` makes room for
every listener's bound). At the bound, a new connection makes room: the oldest one handling
no request (an idle keep-alive, a head or a handshake not complete) is closed, counted and
told (``connection_limit_idle``), so that a peer holding idle connections cannot keep out a
liveness probe, which does not come from loopback (kubelet's). Only when every connection is
handling a request is the new one closed as soon as it is accepted, before its handshake
(exporters retry a connection refused), counted and told (``connection_limit``): with
``ingest.max_concurrent_requests`` (16) requests read at once across both OTLP receivers,
against 512 connections, that takes slow requests on every connection, each ended by
``ingest.read_timeout_seconds``. The bound keeps a flood to the listener it floods. The
gRPC listeners are bound by gRPC itself (``grpc.max_allowed_incoming_connections``).

Why a budget of heads: a head may be 8 MiB (``listeners.HEAD_LIMITS``: long lines for bearer
JWTs, 128 fields), read before any token is checked, so 512 connections each sending most of
one and never its end would hold 4 GiB (twice that resident) on one listener, from a peer
with no credentials. The heads still arriving on a listener's connections may hold
``HEADS_BUDGET`` bytes in all (their bytes received while the connection handles no
request, from its first byte, or after its last request was handled): past it, the
connection holding the most is closed, counted and told (``heads_budget``). An exporter's
head is a few KiB; the largest one allowed fits. A head read while a request is handled is
held too, uncounted (the one request read ahead, ``listeners.QUEUED_REQUESTS``), so a
connection whose client does not read its answer (a large scrape's) reads nothing more until
it does: while its writes wait, its reads wait, and a connection whose client read none of
its answer for ``ingest.read_timeout_seconds`` is closed, counted and told
(``answer_unread``). At ``ingest.max_connections`` such a connection makes room as an idle
one does.

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

from toolwatch.listeners import HeadRefusingHandler
from toolwatch.metrics import PipelineMetrics
from toolwatch.senders import Sender, SenderLog, transport_address

__all__ = [
    "ANSWER_UNREAD",
    "CONNECTION_LIMIT",
    "CONNECTION_LIMIT_IDLE",
    "HEADS_BUDGET",
    "HEADS_OVER_BUDGET",
    "TLS_HANDSHAKE",
    "ConnectionGate",
    "GatedSite",
]

#: The sender log's reasons for the refusals here (``toolwatch.senders``).
CONNECTION_LIMIT = "connection_limit"
CONNECTION_LIMIT_IDLE = "connection_limit_idle"
TLS_HANDSHAKE = "tls_handshake"
HEADS_OVER_BUDGET = "heads_budget"
ANSWER_UNREAD = "answer_unread"

#: The bytes of request heads still arriving that one listener's connections may hold in all:
#: eight of the largest head allowed (``listeners.HEAD_LIMITS``, 8 MiB and 64 KiB), or 512
#: connections' heads of 128 KiB each; past it, the connection holding the most is closed.
HEADS_BUDGET = 64 * 1024 * 1024


class ConnectionGate:
    """One HTTP listener's (``listener``) connections: at most ``limit`` open at once (``open``
    says how many are; at the limit the oldest idle one makes room), each handshaken with
    ``ssl_context`` (``None``: plain) within ``handshake_seconds`` and then handled by a
    protocol ``make_handler`` makes (aiohttp's handler). ``protocol`` is the server's protocol
    factory. The heads arriving hold ``heads_budget`` bytes at most in all, and a connection
    whose answer is not read for ``unread_seconds`` is closed (the module docstring).
    Refusals are counted on ``metrics`` (``connection_refused``) and told to ``senders``."""

    def __init__(
        self,
        listener: str,
        limit: int,
        make_handler: Callable[[], HeadRefusingHandler],
        *,
        ssl_context: ssl.SSLContext | None,
        handshake_seconds: float,
        unread_seconds: float,
        metrics: PipelineMetrics,
        senders: SenderLog,
        heads_budget: int = HEADS_BUDGET,
    ) -> None:
        self.listener = listener
        self._limit = limit
        self._open: dict[_Connection, None] = {}  # oldest first: an ordered set
        self.make_handler = make_handler
        self.ssl_context, self._handshake_seconds = ssl_context, handshake_seconds
        self._metrics, self._senders = metrics, senders
        self._handshakes: set[asyncio.Task[None]] = set()
        self._heads_budget = heads_budget
        self._unread_seconds = unread_seconds
        self._heads = 0  # the bytes of heads arriving, on every open connection

    def protocol(self) -> asyncio.Protocol:
        """A new connection's protocol (``loop.create_server``'s factory)."""
        return _Connection(self)

    def close(self) -> None:
        """Abandon the handshakes under way (their connections are closed): the listener
        stops."""
        for task in self._handshakes:
            task.cancel()

    @property
    def heads(self) -> int:
        """The bytes of the heads arriving on the open connections, in all."""
        return self._heads

    @property
    def open(self) -> int:
        """How many connections are open (``admit`` counted, not yet ``release``d)."""
        return len(self._open)

    def admit(self, connection: _Connection, transport: asyncio.Transport) -> bool:
        """Whether ``connection``, just accepted, may stay: counted if so (``release`` when it
        ends), at the limit in place of the oldest idle one (closed and told), else closed
        and told."""
        if len(self._open) >= self._limit and not self._make_room():
            transport.abort()
            said = f"{_connections(self._limit)} handling requests (ingest.max_connections)"
            self._refused(CONNECTION_LIMIT, transport, said)
            return False
        self._open[connection] = None
        return True

    def _make_room(self) -> bool:
        """Close the oldest connection handling no request, or whose client reads not its
        answer, if one is: whether one was. A scan of at most ``limit`` connections, done
        only at the limit."""
        idlest = next((c for c in self._open if c.idle or c.unread is not None), None)
        if idlest is None:
            return False
        transport = self._evict(idlest)
        said = f"{_connections(self._limit)} open (ingest.max_connections): the oldest idle closed"
        self._refused(CONNECTION_LIMIT_IDLE, transport, said)
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
            if connection.evicted:  # told as closed to make room
                return
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

    def release(self, connection: _Connection) -> None:
        """``connection``, which ``admit`` counted, has ended."""
        self._open.pop(connection, None)
        self.head_done(connection)

    def head_grew(self, connection: _Connection, received: int) -> None:
        """``connection``, handling no request, received ``received`` bytes of a head not
        complete: past the budget, the connection holding the most is closed (``connection``
        itself, often). A scan of the open connections, done only past the budget."""
        connection.head_bytes += received
        self._heads += received
        while self._heads > self._heads_budget:
            largest = max(self._open, key=_head_bytes)
            held = largest.head_bytes
            transport = self._evict(largest)
            said = (
                f"its request head was the largest arriving ({held} bytes) when those of"
                f" {self.listener}'s connections passed {self._heads_budget} bytes in all"
            )
            self._refused(HEADS_OVER_BUDGET, transport, said)

    def _evict(self, connection: _Connection) -> asyncio.Transport:
        """Close ``connection`` (no longer counted); its transport, to tell."""
        del self._open[connection]
        self.head_done(connection)
        return connection.evict()

    def answer_waits(self, connection: _Connection, transport: asyncio.Transport) -> None:
        """``connection``'s client stopped reading its answer (the transport's buffer is
        full): read nothing more from it until it does, and close it if it does not within
        ``unread_seconds``."""
        if connection.unread is not None:
            return
        transport.pause_reading()
        loop = asyncio.get_running_loop()
        connection.unread = loop.call_later(self._unread_seconds, self._unread, connection)

    def answer_read(self, connection: _Connection, transport: asyncio.Transport) -> None:
        """``connection``'s client reads its answer again: read it again, unless aiohttp
        itself stopped reading it."""
        if connection.unread is None:
            return
        connection.unread.cancel()
        connection.unread = None
        handler = connection.handler
        if handler is None or not handler.reading_paused:
            transport.resume_reading()

    def _unread(self, connection: _Connection) -> None:
        connection.unread = None
        if connection not in self._open:
            return
        transport = self._evict(connection)
        said = (
            f"its client read none of its answer for {self._unread_seconds:g} s"
            " (ingest.read_timeout_seconds)"
        )
        self._refused(ANSWER_UNREAD, transport, said)

    def head_done(self, connection: _Connection) -> None:
        """``connection``'s head is complete (its request is handled), or it closed."""
        self._heads -= connection.head_bytes
        connection.head_bytes = 0


def _head_bytes(connection: _Connection) -> int:
    return connection.head_bytes


def _connections(n: int) -> str:
    return f"{n} connection{'s are' if n != 1 else ' is'}"


class _Connection(asyncio.Protocol):
    """A connection accepted by a ``ConnectionGate``: counted while open; what it receives
    goes to its handler once made (after the handshake, under TLS), what came before held.
    ``evicted``: closed by the gate to make room. ``head_bytes``: what it received of a head
    still arriving (``ConnectionGate.head_grew``). ``unread``: while its client reads not its
    answer, the timer that closes it (``ConnectionGate.answer_waits``)."""

    __slots__ = (
        "_counted",
        "_early",
        "_gate",
        "_handler",
        "_payload",
        "_transport",
        "evicted",
        "head_bytes",
        "unread",
    )

    def __init__(self, gate: ConnectionGate) -> None:
        self._gate = gate
        self._handler: HeadRefusingHandler | None = None
        self._transport: asyncio.Transport | None = None
        self._early: list[bytes] = []  # sent after the handshake, before the hand-over
        self._counted = self.evicted = False
        self.head_bytes = 0
        self.unread: asyncio.TimerHandle | None = None
        self._payload: Any = None  # the newest request's body (aiohttp's StreamReader)

    @property
    def handler(self) -> HeadRefusingHandler | None:
        """Its aiohttp handler, once handed over."""
        return self._handler

    @property
    def idle(self) -> bool:
        """Whether no request is being handled: its handshake or a head under way, or its
        handler waiting for one (``HeadRefusingHandler.idle``)."""
        return self._handler is None or self._handler.idle

    def evict(self) -> asyncio.Transport:
        """Close the connection (the gate no longer counts it); its transport, to tell."""
        assert self._transport is not None  # counted: made
        self._counted, self.evicted = False, True
        self._cancel_unread()
        self._transport.abort()
        return self._transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)  # a stream server's
        if not self._gate.admit(self, transport):
            return
        self._transport, self._counted = transport, True
        if self._gate.ssl_context is None:
            self.hand_over(transport)
        else:
            transport.pause_reading()  # the ClientHello waits for start_tls
            self._gate.handshake(self, transport)

    def hand_over(self, transport: asyncio.Transport) -> None:
        handler = self._handler = self._gate.make_handler()
        self._transport = transport  # under TLS, the secured one
        handler.connection_made(transport)
        early, self._early = self._early, []
        for data in early:
            self._received(handler, data)

    def lost_in_handshake(self) -> None:
        self._uncount()

    def data_received(self, data: bytes) -> None:
        if self._handler is None:
            self._early.append(data)
        else:
            self._received(self._handler, data)

    def _received(self, handler: HeadRefusingHandler, data: bytes) -> None:
        """``data`` handed to ``handler``; what of it is a head still arriving is counted
        (``ConnectionGate.head_grew``) until that head ends, read off the parser's count of
        requests and their bodies' ends."""
        parsed = handler.requests_parsed
        idle = parsed == 0 or handler.idle  # a head arriving: the first, or after a request
        body = self._body_bytes()
        handler.data_received(data)
        if not self._counted:  # evicted
            return
        ended = handler.requests_parsed - parsed
        if ended and idle:  # the head ended: what came after it and its body, the next one's
            self._gate.head_done(self)
            self._payload = handler.newest_payload
            known = handler.parsed_bytes(ended)
            after = len(data) - known if known is not None and self._payload_ended() else 0
            self._grew(after)
        elif ended:  # a head read ahead while a request is handled: held, queued
            self._payload = handler.newest_payload
            self._grew(len(data))
        elif idle:
            self._grew(len(data))
        elif self._payload_ended():  # past the body of the request handled: the next head
            self._grew(len(data) - (self._body_bytes() - body))

    def _grew(self, received: int) -> None:
        if received > 0:
            self._gate.head_grew(self, received)

    def _body_bytes(self) -> int:
        return int(getattr(self._payload, "total_bytes", 0))

    def _payload_ended(self) -> bool:
        payload = self._payload
        return payload is None or bool(payload.is_eof())

    def eof_received(self) -> bool | None:
        if self._handler is not None:
            self._handler.eof_received()  # aiohttp's: None, the transport closes itself
        return None

    def pause_writing(self) -> None:
        if self._handler is not None:
            self._handler.pause_writing()
        if self._counted and self._transport is not None:
            self._gate.answer_waits(self, self._transport)

    def resume_writing(self) -> None:
        if self._counted and self._transport is not None:
            self._gate.answer_read(self, self._transport)
        if self._handler is not None:
            self._handler.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_unread()
        self._uncount()
        if self._handler is not None:
            self._handler.connection_lost(exc)

    def _cancel_unread(self) -> None:
        if self.unread is not None:
            self.unread.cancel()
            self.unread = None

    def _uncount(self) -> None:
        if self._counted:
            self._counted = False
            self._gate.release(self)


class GatedSite(web.SockSite):
    """A ``SockSite`` whose connections go through ``gate``: counted against its limit,
    handshaken by it (within its time: aiohttp's site takes no handshake timeout, so a client
    that never finished one held its socket for asyncio's 60 s), then handled by what its
    ``make_handler`` makes (a ``toolwatch.listeners.HeadRefusingHandler``)."""

    __slots__ = ("_gate",)

    def __init__(self, runner: web.AppRunner, sock: socket.socket, gate: ConnectionGate) -> None:
        # The context only names the scheme (``name``): the gate does the handshakes.
        super().__init__(runner, sock, ssl_context=gate.ssl_context)
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
    """Whether the peer is loopback, an IPv4 one on a dual-stack listener (``::ffff:127.0.0.1``)
    included: Python 3.11's ``is_loopback`` is False for an IPv4-mapped address."""
    peer: Any = transport.get_extra_info("peername")
    if not isinstance(peer, tuple):
        return False
    try:
        address = ipaddress.ip_address(peer[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback
