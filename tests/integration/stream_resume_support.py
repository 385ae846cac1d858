"""What the tests of a subscriber that resumes share: a TCP proxy that holds back, silences or
cuts its connections (``CuttableProxy``, ``proxied``), ``toolwatch tail``'s output and waits as
another thread sees them (``Lines``, ``Waits``, ``end_tail``), and a subscription as tail opens
it and resumes it (``subscribed``, ``request_after``)."""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any

from tests.integration.stream_support import Harness
from toolwatch._proto.toolwatch.v1 import findings_pb2
from toolwatch.sinks.stream.broker import FindingsBroker


class CuttableProxy:
    """A TCP proxy on loopback that can hold back what the server sends and then cut every
    connection: a network that drops a connection with findings in flight, which the server
    has written and the client never reads. It can also silence the connections open, both
    ways and without a reset: a NAT or proxy that forgot them."""

    def __init__(self, upstream_port: int) -> None:
        self._upstream_port = upstream_port
        self._flowing = True
        self._transports: list[asyncio.WriteTransport] = []
        self._silenced: set[asyncio.StreamReader] = set()  # readers whose bytes are dropped
        self._readers: list[asyncio.StreamReader] = []
        self.held_bytes = 0
        self.connections = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def hold(self) -> None:
        """From now on, what the server sends is kept here, not passed on."""
        self._flowing = False

    def silence(self) -> None:
        """What passes either way on the connections open now is dropped from now on, and
        they stay open; new connections flow."""
        self._silenced.update(self._readers)

    def cut(self) -> None:
        """Resets every connection (what was held is lost) and lets new ones flow."""
        for transport in self._transports:
            transport.abort()
        self._transports.clear()
        self._flowing = True

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._upstream_port)
        self.connections += 1
        self._transports += [writer.transport, up_writer.transport]
        self._readers += [reader, up_reader]
        await asyncio.gather(
            self._pump(reader, up_writer, held=False), self._pump(up_reader, writer, held=True)
        )

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, held: bool
    ) -> None:
        with suppress(ConnectionError):
            while data := await reader.read(65_536):
                if reader in self._silenced:
                    continue
                if held and not self._flowing:
                    self.held_bytes += len(data)
                    continue
                writer.write(data)
                await writer.drain()
        if reader not in self._silenced:  # a silent connection's end does not get through
            writer.transport.abort()


class Lines(io.StringIO):
    """tail's output, which another thread can wait on."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = threading.Condition()

    def write(self, text: str) -> int:
        with self._changed:
            count = super().write(text)
            self._changed.notify_all()
        return count

    def wait_for(self, count: int) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self.getvalue().count("\n") >= count, 10)


class Waits:
    """tail's ``sleep``: each wait blocks until the test lets it go (or ends tail, as Ctrl-C
    does), and is recorded."""

    def __init__(self) -> None:
        self.waited: list[float] = []
        self.waiting = threading.Semaphore(0)
        self._go = threading.Semaphore(0)
        self.stop = False

    def __call__(self, seconds: float) -> None:
        self.waited.append(seconds)
        self.waiting.release()
        assert self._go.acquire(timeout=10)
        if self.stop:
            raise KeyboardInterrupt

    def go(self) -> None:
        self._go.release()

    def end(self) -> None:
        self.stop = True
        self._go.release()


async def until(condition: Callable[[], bool]) -> None:
    """Waits (a bounded time) for a condition the event loop makes true."""
    for _ in range(2_000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the condition never came true")


async def in_thread(semaphore: threading.Semaphore) -> None:
    assert await asyncio.to_thread(semaphore.acquire, True, 10)


async def end_tail(broker: FindingsBroker, waits: Waits, tail: asyncio.Task[int]) -> int:
    """Ends the stream, then tail while it waits to reconnect (as Ctrl-C would); its code."""
    broker.close()
    await in_thread(waits.waiting)
    waits.end()
    return await asyncio.wait_for(tail, timeout=10)


@asynccontextmanager
async def proxied(h: Harness) -> AsyncIterator[CuttableProxy]:
    proxy = CuttableProxy(int(h.target.rpartition(":")[2]))
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()


def request_after(stream_id: str, after: int, token: str) -> findings_pb2.SubscribeRequest:
    cursor = findings_pb2.StreamCursor(stream_id=stream_id, after=after, token=token)
    return findings_pb2.SubscribeRequest(resume=[cursor], missed_after=True)


def named(message: findings_pb2.Finding) -> str:
    return message.explanation.split()[0]


async def subscribed(stub: Any) -> tuple[Any, str, int]:
    """A subscription as tail opens it (``missed_after``), once its headers came: the call,
    its resume token and the stream sequence it starts after."""
    call = stub.Subscribe(findings_pb2.SubscribeRequest(missed_after=True))
    headers = dict(await call.initial_metadata())
    return call, headers["toolwatch-resume-token"], int(headers["toolwatch-stream-sequence"])
