"""The findings stream's listener: its gRPC server, started on ``listen.stream`` and, when a
reload takes a CA out of the client CA file, stopped and started again on the same address,
so that every client is handshaken again (``StreamListener``).

Why a restart. A stream's connection was accepted by a TLS handshake against the client CAs
served then, and HTTP/2 keeps a connection for as many calls as its client likes: ending the
calls (``FindingsStreamServicer.reconnect_all``) would let a client whose CA was taken out
subscribe again on the connection it has, with no handshake, and stream on for as long as it
keeps it (the stream listener closes no connection at an age: ``toolwatch.connection_age``).
So the open streams are ended UNAVAILABLE (what they had not been sent is held for their
resume), the server is stopped, which sends GOAWAY on every connection and closes each once
its calls are done (those still writing to a client that does not read are cancelled after
``RESTART_GRACE_SECONDS``), and a new server is bound to the address the old one had. Each
client then connects through a new handshake, which the CAs served now decide. The broker
(the findings held, the subscribers that left) is the app's and outlives the restart; so
does the servicer, which serves each server in turn.

Meanwhile the stream refuses connections: ``toolwatch tail --reconnect`` tries again after
half a second. Should the address no longer be free when the new server binds it (another
process took the port in between), the failure is logged at ERROR, naming ``listen.stream``
and why, and the bind tried again at each ``retry`` (the app's tick) until it works, which
is logged at INFO: the server keeps ingesting and evaluating meanwhile, and ``/readyz``
stays ready (readiness routes OTLP traffic to the server, and a sidecar's is its pod's: a
findings stream down must not take the agent out of its Service). ``down`` tells that state
to ``toolwatch_stream_listening`` (0 then), which ``ToolwatchFindingsStreamDown`` alerts on.

Threading: everything here runs on the event loop that runs the servers, except ``down``,
which a scrape reads from its own thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import grpc

from toolwatch.listeners import ListenError, bind_grpc, rebind_refused

__all__ = ["RESTART_GRACE_SECONDS", "StreamListener"]

log = logging.getLogger(__name__)

#: How long a restart waits for the stream calls still open (a write to a client that does
#: not read) before it cancels them: the stream refuses new connections meanwhile.
RESTART_GRACE_SECONDS = 1.0


class StreamListener:
    """The findings stream's gRPC server, on one address for the life of the app.

    ``make_server`` builds a server with the findings service on it, not bound;
    ``credentials`` gives the credentials of the next one (``None``: plaintext), built anew
    so that it serves the TLS files current then; ``reconnect_all`` ends every open stream
    for its client to connect again (``FindingsStreamServicer.reconnect_all``).
    """

    def __init__(
        self,
        make_server: Callable[[], grpc.aio.Server],
        credentials: Callable[[], grpc.ServerCredentials | None],
        reconnect_all: Callable[[], int],
    ) -> None:
        self._make_server = make_server
        self._credentials = credentials
        self._reconnect_all = reconnect_all
        self._server: grpc.aio.Server | None = None  # serving; ``None`` while restarting
        self._address = ""  # as bound first: its port, whatever the configuration's
        self._restart: asyncio.Task[None] | None = None
        self._again = False  # a CA was taken out since the restart under way began
        self._failing = ""  # why the last bind failed, told once
        self._closing = False

    @property
    def serving(self) -> bool:
        """Whether a server is bound and started (not while it restarts)."""
        return self._server is not None

    @property
    def down(self) -> bool:
        """Whether the stream is down for want of its address: no server bound, and no
        restart under way that could still bind one, because the last bind failed (``retry``
        tries again at each tick) or the restart failed otherwise. Not while a restart is
        under way that has not failed to bind (its milliseconds are no outage), nor before
        ``start`` or from ``stop`` on (a shutdown is no outage either). Safe to read from
        another thread: it only reads what the event loop sets."""
        restart = self._restart  # read once: the loop may start another meanwhile
        return (
            self._server is None
            and not self._closing
            and restart is not None
            and (bool(self._failing) or restart.done())
        )

    async def start(self, address: str) -> str:
        """Binds the first server to ``address`` and starts it; the address bound. Raises
        ``ListenError`` when it cannot be bound."""
        server = self._make_server()
        self._address = await bind_grpc(server, "stream", address, self._credentials())
        await _started(server)
        self._server = server
        return self._address

    def client_ca_removed(self) -> None:
        """A reload took a CA out of the client CA file: every open stream ends now
        (``reconnect_all``), and the listener restarts (module doc), after the restart under
        way if there is one. Call it on the event loop."""
        if self._closing:
            return
        self._reconnect_all()
        self._again = True
        self._run()

    def retry(self) -> None:
        """Tries again to bind the address, when the last restart could not (the app's
        tick); nothing while serving or restarting. Call it on the event loop."""
        if self._server is None and not self._closing:
            self._run()

    async def settled(self) -> None:
        """Returns once no restart is under way (serving, or told it cannot bind)."""
        while self._restart is not None and not self._restart.done():
            await asyncio.shield(self._restart)

    async def stop(self, grace: float) -> None:
        """Stops the server, giving its calls ``grace`` seconds, after the restart under
        way; no restart from now on."""
        self._closing = True
        await self.settled()
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace)

    def _run(self) -> None:
        if self._restart is None or self._restart.done():
            self._restart = asyncio.get_running_loop().create_task(self._restarting())

    async def _restarting(self) -> None:
        """Closes every connection (when a CA was taken out) and binds a new server, until
        no CA was taken out since the last close; gives up at a bind that fails (``retry``
        tries again)."""
        try:
            while self._again or self._server is None:
                if self._closing:
                    return
                if self._again:
                    self._again = False
                    await self._close_connections()
                if self._closing or not await self._bound():
                    return
        except Exception as error:  # a bug here must not end the app: the next tick tries again
            if repr(error) != self._failing:  # told once for each reason in a row, as a bind
                log.exception("restarting the findings stream listener failed; trying again")
            self._failing = repr(error)

    async def _close_connections(self) -> None:
        """Stops the server: GOAWAY on every connection, each closed once its calls end, and
        those still open after ``RESTART_GRACE_SECONDS`` cancelled."""
        server, self._server = self._server, None
        if server is None:  # not bound: no connection to close
            return
        log.info(
            "closing every connection of the findings stream (listen.stream %s) and listening"
            " again, for each client to connect through a new TLS handshake: a CA was taken"
            " out of the client CA file",
            self._address,
        )
        stopping = asyncio.ensure_future(server.stop(RESTART_GRACE_SECONDS))
        # Its first step begins the server's shutdown: no call starts on it from then on.
        # Those that started since the streams were ended (a client subscribing again on
        # its connection at once) are ended too, rather than cancelled after the grace.
        await asyncio.sleep(0)
        self._reconnect_all()
        await stopping

    async def _bound(self) -> bool:
        """Binds a new server to the address and starts it; whether it could. A failure is
        logged at ERROR, once for each reason in a row."""
        # Asked of a plain socket first, in a thread (a name is resolved): a gRPC server that
        # cannot bind prints gRPC core's own ERROR line, and is not given back by gRPC once
        # stopped unstarted (about 3 KB), at every tick while the address is taken or gone;
        # and a name resolved on the event loop held it for the resolver's timeouts (reviews).
        refused = await asyncio.to_thread(rebind_refused, "stream", self._address)
        try:
            if refused is not None:
                raise refused
            credentials = self._credentials()  # before the server: one that raises leaves none
            server = self._make_server()
            await bind_grpc(server, "stream", self._address, credentials)
        except ListenError as error:
            if str(error) != self._failing:
                log.error(
                    "%s: the findings stream is down, trying again at each tick (ingestion and"
                    " /readyz are unaffected)",
                    error,
                )
            self._failing = str(error)
            return False
        await _started(server)
        self._server = server
        if self._failing:
            log.info("listening again on %s (listen.stream)", self._address)
            self._failing = ""
        return True


async def _started(server: grpc.aio.Server) -> None:
    """Starts ``server``, bound; one that fails to start is stopped, not left to the garbage
    collector (``listeners.bind_grpc`` says why)."""
    try:
        await server.start()
    except Exception:
        await server.stop(None)
        raise
