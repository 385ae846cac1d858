"""How many export requests may be in flight at once, across both receivers.

A request holds its whole body in memory from the moment it is read until the engine has
taken its spans. The receivers read bodies concurrently (every open call or connection
reads its own), but the engine takes them one at a time on the event loop; without a bound,
a burst of large requests piles up as bodies waiting their turn (measured: 100 concurrent
10 MiB gRPC requests took the server from 69 MiB to 1 GiB resident, whatever the trace
buffer's own bound). So a receiver takes a slot *before* it reads a body, and answers as
for a full buffer when none is free (UNAVAILABLE with RetryInfo, 503 with Retry-After): the
client keeps the spans and retries. Bodies in flight then stay under
``max_concurrent_requests * max_request_bytes``.

A slot is held at most ``read_timeout`` seconds waiting for its body: a client that opens a
call and sends slowly or nothing (a stalled link, a bug, a slowloris) would otherwise keep it
from every other client. Its request is answered as retryable (DEADLINE_EXCEEDED, 503) and
the slot given back.

A request decoded in the decode thread holds its slot until the thread is done with its
body, even if the request stopped waiting for it (``toolwatch.ingest.decode_thread``).

Only the event loop's thread takes and gives slots, so nothing here locks.
"""

from __future__ import annotations

__all__ = ["RequestSlots"]


class RequestSlots:
    """``limit`` slots; ``take`` one before reading a request body, ``give`` it back once
    the request is answered; a body must arrive within ``read_timeout`` seconds."""

    __slots__ = ("_in_use", "limit", "read_timeout")

    def __init__(self, limit: int, read_timeout: float = 30.0) -> None:
        if limit < 1:
            raise ValueError(f"the request limit must be at least 1, got {limit}")
        if not read_timeout > 0:
            raise ValueError(f"the read timeout must be positive, got {read_timeout}")
        self.limit = limit
        self.read_timeout = read_timeout
        self._in_use = 0

    @property
    def in_use(self) -> int:
        """Requests being read or handled now (``toolwatch_requests_in_flight``)."""
        return self._in_use

    def take(self) -> bool:
        """Take a slot; ``False`` (and nothing taken) when all ``limit`` are in use."""
        if self._in_use >= self.limit:
            return False
        self._in_use += 1
        return True

    def give(self) -> None:
        """Give back a slot taken by ``take``."""
        if self._in_use <= 0:
            raise RuntimeError("a request slot was given back that was never taken")
        self._in_use -= 1
