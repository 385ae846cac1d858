"""The OTLP/HTTP requests in flight, for the shutdown (``App.stop``), which gives them the
grace gRPC's ``stop(grace)`` gives its calls, and no more.

At SIGTERM the app closes the listening socket and calls ``drain``: from then on a request
that comes on a connection kept alive is refused unread (503 + ``Retry-After``, the
connection closed: the client sends it again elsewhere), while the requests in flight go
on, a body still arriving included (aiohttp's own shutdown stops reading every connection
at once, so such a body could never arrive); ``drained`` returns once they are answered.
When the grace is over, ``abandon`` ends the reads still waiting for a body: the receiver
answers them as retryable at once (nothing of them was taken) instead of at the read
timeout, past the grace. A request waiting for its decode is given up by
``DecodeThread.abandon`` at the same moment; once a body is decoded, the engine takes its
spans in the same step, so no decoded span is left behind uncounted.

Only the event loop's thread uses it, so nothing here locks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Protocol

__all__ = ["Body", "InFlight", "ReadAbandonedError"]


class ReadAbandonedError(Exception):
    """The server is shutting down and no longer waits for this request's body."""


class Body(Protocol):
    """A request body being read (aiohttp's ``StreamReader``): a read waiting on it raises
    what ``set_exception`` is given."""

    def set_exception(self, exc: BaseException) -> None: ...


class InFlight:
    """The requests being handled (``handling``) and the bodies among them being read
    (``reading``); ``drain``, ``drained`` and ``abandon`` are the shutdown's."""

    __slots__ = ("_abandoned", "_bodies", "_handled", "_idle", "draining")

    def __init__(self) -> None:
        self.draining = False  # a new request is refused
        self._abandoned = False
        self._handled = 0
        self._bodies: set[Body] = set()
        self._idle: asyncio.Future[None] | None = None  # what ``drained`` waits for

    @property
    def handled(self) -> int:
        """Requests being handled now."""
        return self._handled

    @contextlib.contextmanager
    def handling(self) -> Iterator[None]:
        """While a request is handled, from its route to its answer."""
        self._handled += 1
        try:
            yield
        finally:
            self._handled -= 1
            idle = self._idle
            if not self._handled and idle is not None and not idle.done():
                idle.set_result(None)

    @contextlib.contextmanager
    def reading(self, body: Body) -> Iterator[None]:
        """While ``body`` is read; ``ReadAbandonedError`` once the reads are given up."""
        if self._abandoned:
            raise _abandoned()
        self._bodies.add(body)
        try:
            yield
        finally:
            self._bodies.discard(body)

    def drain(self) -> None:
        """Shutdown: every request that comes from now on is refused."""
        self.draining = True

    async def drained(self) -> None:
        """Returns once no request is being handled."""
        if self._handled:
            self._idle = asyncio.get_running_loop().create_future()
            await self._idle

    def abandon(self) -> None:
        """The grace is over: a read waiting for a body raises ``ReadAbandonedError`` now,
        and so does every later one."""
        self._abandoned = True
        for body in self._bodies:
            body.set_exception(_abandoned())


def _abandoned() -> ReadAbandonedError:
    return ReadAbandonedError("the server is shutting down: retry")
