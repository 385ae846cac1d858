"""Where request bodies are decoded: one at a time, all but small protobuf ones in a worker
thread, so that the event loop goes on serving while they decode.

Decoding is CPU work in proportion to the body (pure Python, measured: OTLP/JSON 60 to 360
ms a MiB, 20 MiB bodies 1.3 to 9 s; protobuf 2 to 170 ms a MiB, 3.3 s for 20 MiB of
attribute-less spans). On the event loop it stops everything else for that long: the other
receiver, the ticker (completion checks, the late window), ``/healthz`` and ``/metrics``,
so that a liveness probe can fail and have the pod killed. And the cost is per span, not per
byte: a span can take 2 bytes. So every OTLP/JSON body, every compressed one, and a
protobuf body of ``off_loop_bytes`` or more (4 KiB; 256 KiB with the compiled scanner) is
decompressed and decoded in one
worker thread while the loop serves the rest (the receivers tell which by the ``size`` they
pass). The loop still pauses where the decode holds the GIL in C (json's scanner, protobuf's
parser: up to about 40 ms; the compiled OTLP scanner's pass over 20 MiB of attribute-less
spans: 0.4 s), for a garbage collection, and while the engine takes the batch (0.3 to 0.56
s for the 74,000 attribute-less spans of 15 MiB: ``python -m bench.loop_pause``).

A smaller protobuf body is decoded on the loop, spared a hand-off to the thread. With the
reference scanner that is under 4 KiB (``OFF_LOOP_BYTES``): its worst, about 2,040 empty
spans, takes 11 ms to decode (pure Python, best of 15 runs on a 2-core VM; 8 KiB: 24 ms),
about as long as a garbage collection may pause the loop. The compiled scanner decodes a
realistic request of 120 KiB in 1 ms, and a hand-off costs more than that: sent to the
thread, ``make bench``'s requests (98-120 KiB) lost about a tenth of the server's throughput
(``python -m bench.compare``: 1.11x without the hand-off, rounds 0.82-1.45). So with it a
protobuf body decodes on the loop up to 256 KiB (``COMPILED_OFF_LOOP_BYTES``): at worst
131,072 empty spans, 141 ms (64 KiB of them: 34 ms), as long as a full collection. An OTLP/JSON
body never is, however small: protobuf's json_format, which no build compiles, takes 34 ms
for 3,948 bytes of 1,300 empty spans and 0.6 to 3 s for 64,986 bytes of 21,646; and JSON
clients send few, large requests.

One decode at a time, whichever the receiver and the thread (a ``turn``): the memory bound
counts one request being decoded (docs/deployment.md, Memory), held until the engine has
taken its spans, and the compiled scanner keeps one cache of recent strings per plan
(``_wire.c``).
The engine, the metrics and the request slots are the loop's alone: the thread runs the
decode and nothing else, and the batch is consumed on the loop before the turn passes on. A
request waits for its turn holding its body and its request slot (``toolwatch.ingest.slots``),
as it waited for the loop before; the turn gives the slot back when it ends.

A caller that stops waiting while its body decodes in the thread (a gRPC client cancels
the call; the server shuts down) cannot stop the thread: the decode runs to its end and
keeps the turn and the request's slot until then, so the body it holds stays counted. Its
batch is dropped: none of its spans was taken, so a retry delivers them once. At shutdown
(``App.stop``) ``abandon`` is called once the grace is over: callers still waiting for a
decode get ``DecodeAbandonedError`` (the receivers answer it as retryable) instead of
holding the shutdown up, and no decode starts any more. The thread is a daemon: the process
does not wait for a decode nobody waits for.

Threading: everything here but the decode itself runs on the event loop's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, Final, Generic, TypeVar

__all__ = [
    "COMPILED_OFF_LOOP_BYTES",
    "OFF_LOOP_BYTES",
    "DecodeAbandonedError",
    "DecodeThread",
    "Turn",
    "off_loop_bytes",
]

#: Bodies of this many bytes or more (after decompression, or at most) decode in the thread
#: when the reference scanner decodes them: about 2,040 protobuf spans at most are decoded
#: on the loop, 11 ms (see the module's docstring).
OFF_LOOP_BYTES: Final = 4 * 1024
#: The same with the compiled scanner: 131,072 empty spans at most, 141 ms; a realistic
#: request of 120 KiB decodes in 1 ms. Below it the hand-off to the thread costs more than it
#: saves: ``make bench``'s requests (98-120 KiB) sent to the thread cost about a tenth of the
#: server's throughput (``bench.compare``, 1.11x without the hand-off, rounds 0.82-1.45).
COMPILED_OFF_LOOP_BYTES: Final = 256 * 1024


def off_loop_bytes(compiled: bool) -> int:
    """The size from which a protobuf body decodes in the thread, by the scanner in use."""
    return COMPILED_OFF_LOOP_BYTES if compiled else OFF_LOOP_BYTES


T = TypeVar("T")


class DecodeAbandonedError(Exception):
    """The server is shutting down and no longer waits for this request's decode."""


class _Job(Generic[T]):
    """One decode handed to the thread: ``result`` is settled on the loop when it ends (or
    by ``abandon``); ``ended`` runs on the loop once the thread has let go of the body."""

    __slots__ = ("_loop", "_work", "done", "ended", "result")

    def __init__(self, work: Callable[[], T], loop: asyncio.AbstractEventLoop) -> None:
        self._work: Callable[[], T] | None = work
        self._loop = loop
        self.result: asyncio.Future[T] = loop.create_future()
        self.done = False
        self.ended: Callable[[], None] | None = None

    def run(self) -> None:
        """In the thread: the work, then its outcome posted to the loop."""
        work, self._work = self._work, None
        assert work is not None
        value: T | None = None
        error: BaseException | None = None
        try:
            value = work()
        except BaseException as exc:  # settled either way: a caller must never wait forever
            error = exc
        del work  # the body, before the loop is told that the thread let go of it
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            self._loop.call_soon_threadsafe(self._settle, value, error)
        # The error's traceback holds this frame, and the frame its locals: the job, whose
        # result holds the error. Only a full garbage collection (rare: ``tune_gc``) frees
        # such a cycle, and with it the body and the failed decode's frames; bytes do not
        # even count toward one. So they go, as in concurrent.futures' ``_WorkItem.run``.
        del self, value, error

    def _settle(self, value: T | None, error: BaseException | None) -> None:
        self.done = True
        if not self.result.done():  # not abandoned
            if error is not None:
                self.result.set_exception(error)
            else:
                self.result.set_result(value)  # type: ignore[arg-type]
        ended, self.ended = self.ended, None  # once; and the turn is not kept
        if ended is not None:
            ended()


class DecodeThread:
    """The receivers' decodes (see the module's docstring): ``turn`` waits for the decoding
    turn, ``abandon`` ends the waits at shutdown, ``close`` lets the thread end."""

    __slots__ = ("_abandoned", "_current", "_jobs", "_lock", "_thread", "off_loop_bytes")

    def __init__(self, off_loop_bytes: int = OFF_LOOP_BYTES) -> None:
        self.off_loop_bytes = off_loop_bytes
        self._lock = asyncio.Lock()  # the turn
        self._current: Turn | None = None  # the turn held
        self._jobs: queue.SimpleQueue[_Job[object] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None  # started by the first large body
        self._abandoned = False

    def turn(self, release: Callable[[], None]) -> Turn:
        """The decoding turn, to hold with ``async with`` (waiting for it can be cancelled).
        ``release`` (the request's slot) is called once, whatever happens: when the turn is
        over, which is when the block is left, or, if it is left while its decode still
        runs in the thread, when that ends."""
        return Turn(self, release)

    def abandon(self) -> None:
        """Shutdown, the grace over: a caller waiting for a decode in the thread gets
        ``DecodeAbandonedError`` now, one waiting for the turn once it gets it, and so does
        every later decode. The turn passes on without waiting for the thread."""
        self._abandoned = True
        if self._current is not None:
            self._current.abandon()

    def close(self) -> None:
        """Let the thread end once its decode, if any, is done."""
        if self._thread is not None:
            self._jobs.put(None)
            self._thread = None

    def _submit(self, job: _Job[T]) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=_work_through, args=(self._jobs,), name="toolwatch-decode", daemon=True
            )
            self._thread.start()
        self._jobs.put(job)  # type: ignore[arg-type]


class Turn:
    """One request's decoding turn (``DecodeThread.turn``)."""

    __slots__ = ("_holding", "_job", "_left", "_owner", "_release")

    def __init__(self, owner: DecodeThread, release: Callable[[], None]) -> None:
        self._owner = owner
        self._release = release
        self._job: _Job[Any] | None = None
        self._holding = False  # the lock
        self._left = False  # the block

    async def __aenter__(self) -> Turn:
        owner = self._owner
        try:
            if owner._abandoned:
                raise _abandoned()
            await owner._lock.acquire()
        except BaseException:
            self._release()
            raise
        self._holding = True
        owner._current = self
        if owner._abandoned:  # while it waited
            self._pass_on()
            self._release()
            raise _abandoned()
        return self

    async def decode(self, work: Callable[[], T], size: int) -> T:
        """What ``work`` returns or raises. ``size``: the bytes it decodes (after
        decompression; a compressed body's cap, unknown until inflated): under
        ``off_loop_bytes`` it runs here, on the loop, else in the thread. Call once."""
        owner = self._owner
        if owner._abandoned:
            raise _abandoned()
        if size < owner.off_loop_bytes:
            return work()
        # The job is named by ``_job`` alone, which the block's end clears: an error raised
        # here has this frame in its traceback, and the job's result holds the error.
        self._job = _Job(work, asyncio.get_running_loop())
        owner._submit(self._job)
        # Shielded: a caller cancelled while the thread works leaves the job's outcome to
        # be settled (and the turn to be held) until the thread is done with the body.
        return await asyncio.shield(self._job.result)

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._left = True
        job, self._job = self._job, None  # its outcome (the batch, or an error) is not kept
        if job is None or job.done:
            self._pass_on()
            self._release()
            return
        # The thread still decodes, holding the body: the turn and the slot are given back
        # when it is done, but at shutdown the turn passes on (the next decode refuses).
        job.ended = self._ended
        if self._owner._abandoned:
            self._pass_on()

    def abandon(self) -> None:
        """``DecodeThread.abandon``, for the turn held."""
        job = self._job
        if job is not None and not job.result.done():
            job.result.set_exception(_abandoned())  # a caller still waiting leaves
        if self._left:  # its caller left before: its decode holds the turn no longer
            self._pass_on()

    def _ended(self) -> None:
        self._pass_on()
        self._release()

    def _pass_on(self) -> None:
        """Give the turn to the next request waiting for it (once)."""
        if self._holding:
            self._holding = False
            owner = self._owner
            if owner._current is self:
                owner._current = None
            owner._lock.release()


def _abandoned() -> DecodeAbandonedError:
    return DecodeAbandonedError("the server is shutting down: retry")


def _work_through(jobs: queue.SimpleQueue[_Job[object] | None]) -> None:
    """The thread: each job in turn, until told to end."""
    while (job := jobs.get()) is not None:
        job.run()
        del job  # not kept, with its outcome, while the thread waits for the next
