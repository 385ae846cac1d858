"""The decoding turn: one decode at a time, a large one in the worker thread; a caller that
stops waiting leaves the turn and its slot held until the thread is done with the body.

Each test runs its own event loop (``asyncio.run``); work in the thread blocks on a
``threading.Event`` the test sets, so that what happens meanwhile is seen in order, not
timed.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import traceback
import weakref
from collections.abc import Callable

import pytest

from toolwatch.ingest.decode_thread import DecodeAbandonedError, DecodeThread

LARGE = 1_000  # the tests' off_loop_bytes: a size of LARGE or more decodes in the thread
SMALL = LARGE - 1
#: A hang guard only: how long a test waits for the thread before failing instead.
GUARD_SECONDS = 10


class Held:
    """Work that records where it ran and, in the thread, waits for ``release`` to return."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log
        self.started = threading.Event()
        self.release = threading.Event()
        self.ran_on: threading.Thread | None = None

    @property
    def thread(self) -> str:
        return "" if self.ran_on is None else self.ran_on.name

    def __call__(self) -> str:
        self.ran_on = threading.current_thread()
        self.log.append(f"{self.name} started")
        self.started.set()
        if self.thread == "toolwatch-decode":
            assert self.release.wait(GUARD_SECONDS)
        self.log.append(f"{self.name} ended")
        return self.name


class Slot:
    """A request slot's ``give``: counts the calls, and tells the loop when one comes."""

    def __init__(self) -> None:
        self.given = 0
        self.event = asyncio.Event()

    def give(self) -> None:
        self.given += 1
        self.event.set()


async def started(work: Held) -> None:
    """Until ``work`` has started in the thread (the thread is real: this is its pace)."""
    assert await asyncio.to_thread(work.started.wait, GUARD_SECONDS)


async def decode(decoding: DecodeThread, work: Callable[[], str], size: int, slot: Slot) -> str:
    async with decoding.turn(slot.give) as turn:
        return await turn.decode(work, size)


def test_a_small_body_decodes_on_the_loop_and_a_large_one_in_the_thread() -> None:
    log: list[str] = []
    small, large = Held("small", log), Held("large", log)

    async def run() -> None:
        decoding = DecodeThread(LARGE)
        large.release.set()
        assert await decode(decoding, small, SMALL, Slot()) == "small"
        assert await decode(decoding, large, LARGE, Slot()) == "large"
        decoding.close()

    asyncio.run(run())
    assert (small.thread, large.thread) == ("MainThread", "toolwatch-decode")


def test_one_decode_at_a_time_the_next_waits_for_the_turn_even_on_the_loop() -> None:
    log: list[str] = []
    first, second = Held("first", log), Held("second", log)

    async def run() -> None:
        decoding = DecodeThread(LARGE)
        one = asyncio.create_task(decode(decoding, first, LARGE, Slot()))
        await started(first)
        two = asyncio.create_task(decode(decoding, second, SMALL, Slot()))
        await asyncio.sleep(0)  # the second runs up to its wait for the turn
        first.release.set()
        assert [await one, await two] == ["first", "second"]
        decoding.close()

    asyncio.run(run())
    assert log == ["first started", "first ended", "second started", "second ended"]


def test_the_slot_is_given_back_once_when_the_turn_ends() -> None:
    async def run() -> list[int]:
        decoding = DecodeThread(LARGE)
        slot = Slot()
        given: list[int] = []
        async with decoding.turn(slot.give) as turn:
            await turn.decode(lambda: "", SMALL)
            given.append(slot.given)  # still held while the spans are taken
        given.append(slot.given)
        return given

    assert asyncio.run(run()) == [0, 1]


def test_a_caller_cancelled_mid_decode_holds_the_turn_and_slot_until_the_thread_is_done() -> None:
    log: list[str] = []
    cancelled, waiting = Held("cancelled", log), Held("waiting", log)

    async def run() -> None:
        decoding = DecodeThread(LARGE)
        slot, next_slot = Slot(), Slot()
        gone = asyncio.create_task(decode(decoding, cancelled, LARGE, slot))
        await started(cancelled)
        after = asyncio.create_task(decode(decoding, waiting, SMALL, next_slot))
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        await asyncio.sleep(0)  # the waiting one would decode now if the turn were free
        assert (slot.given, log) == (0, ["cancelled started"])

        cancelled.release.set()
        await slot.event.wait()  # given when the thread is done with the body
        assert await after == "waiting"
        assert (slot.given, next_slot.given) == (1, 1)
        decoding.close()

    asyncio.run(run())
    assert log == ["cancelled started", "cancelled ended", "waiting started", "waiting ended"]


def test_abandon_ends_every_wait_for_a_decode_and_refuses_later_ones() -> None:
    log: list[str] = []
    running, queued, later = Held("running", log), Held("queued", log), Held("later", log)

    async def run() -> None:
        decoding = DecodeThread(LARGE)
        slots = [Slot(), Slot(), Slot()]
        first = asyncio.create_task(decode(decoding, running, LARGE, slots[0]))
        await started(running)
        second = asyncio.create_task(decode(decoding, queued, SMALL, slots[1]))
        await asyncio.sleep(0)  # waiting for the turn

        decoding.abandon()

        for task in (first, second):
            with pytest.raises(DecodeAbandonedError, match="shutting down"):
                await task
        with pytest.raises(DecodeAbandonedError):
            await decode(decoding, later, SMALL, slots[2])
        # The thread still holds the running body: its slot is given when it lets go.
        assert [slot.given for slot in slots] == [0, 1, 1]
        running.release.set()
        await slots[0].event.wait()
        decoding.close()

    asyncio.run(run())
    assert log == ["running started", "running ended"]


class FaultError(Exception):
    """What a decode raises in these tests."""


def test_what_the_thread_raises_reaches_the_caller_as_raised() -> None:
    raised = FaultError("bad body")

    def work() -> str:
        raise raised

    async def run() -> BaseException:
        decoding = DecodeThread(LARGE)
        slot = Slot()
        with pytest.raises(FaultError) as caught:
            await decode(decoding, work, LARGE, slot)
        assert slot.given == 1
        decoding.close()
        return caught.value

    error = asyncio.run(run())
    assert error is raised
    assert "raise raised" in "".join(traceback.format_tb(error.__traceback__))


class Body:
    """Stands for a request body or a decoded batch: what must not outlive its request."""


def test_a_decode_that_raises_in_the_thread_leaves_nothing_for_the_collector_to_free(
    no_automatic_gc: None,
) -> None:
    bodies: list[weakref.ref[Body]] = []
    threads: list[threading.Thread] = []

    def work() -> str:
        body = Body()  # in the failed decode's frame, which the error's traceback holds
        bodies.append(weakref.ref(body))
        threads.append(threading.current_thread())
        raise FaultError("bad body")

    async def run() -> None:
        decoding = DecodeThread(LARGE)
        with contextlib.suppress(FaultError):
            await decode(decoding, work, LARGE, Slot())
        decoding.close()

    asyncio.run(run())
    threads[0].join(GUARD_SECONDS)  # none of its frames is left
    assert bodies[0]() is None


def test_a_cancelled_callers_outcome_is_left_for_nothing_but_refcounting_to_free(
    no_automatic_gc: None,
) -> None:
    bodies: list[weakref.ref[Body]] = []
    work = Held("cancelled", [])

    def batch() -> Body:
        work()
        body = Body()
        bodies.append(weakref.ref(body))
        return body

    async def run() -> None:
        decoding = DecodeThread(LARGE)
        slot = Slot()
        gone = asyncio.create_task(decode(decoding, batch, LARGE, slot))  # type: ignore[arg-type]
        await started(work)
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        work.release.set()
        await slot.event.wait()  # the thread is done with it
        decoding.close()

    asyncio.run(run())
    assert work.ran_on is not None
    work.ran_on.join(GUARD_SECONDS)
    assert bodies[0]() is None


def test_close_lets_the_thread_end() -> None:
    work = Held("work", [])
    work.release.set()

    async def run() -> None:
        decoding = DecodeThread(LARGE)
        await decode(decoding, work, LARGE, Slot())
        decoding.close()

    asyncio.run(run())
    assert work.ran_on is not None
    work.ran_on.join(GUARD_SECONDS)
    assert not work.ran_on.is_alive()
    assert work.ran_on.daemon  # the process never waits for a decode nobody waits for
