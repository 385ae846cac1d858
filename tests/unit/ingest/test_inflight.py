"""The OTLP/HTTP requests in flight, as the shutdown sees them: ``drained`` waits for those
being handled, ``abandon`` ends the reads still waiting for a body.

Each test runs its own event loop (``asyncio.run``); what happens is seen in order, never
timed.
"""

from __future__ import annotations

import asyncio

import pytest

from toolwatch.ingest.inflight import InFlight, ReadAbandonedError


class Body:
    """A body whose read waits until it is given an error (``set_exception``)."""

    def __init__(self) -> None:
        self.arrived: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    def set_exception(self, exc: BaseException) -> None:
        self.arrived.set_exception(exc)


def test_drained_returns_at_once_with_no_request_in_flight() -> None:
    async def run() -> None:
        in_flight = InFlight()
        in_flight.drain()
        drained = in_flight.drained()
        with pytest.raises(StopIteration):  # returned at its first step: no wait at all
            drained.send(None)

    asyncio.run(run())


def test_drained_returns_once_every_request_in_flight_is_answered() -> None:
    async def run() -> list[str]:
        in_flight = InFlight()
        seen: list[str] = []
        answer = [asyncio.Event(), asyncio.Event()]

        async def request(number: int) -> None:
            with in_flight.handling():
                await answer[number].wait()
            seen.append(f"answered {number}")

        requests = [asyncio.create_task(request(n)) for n in (0, 1)]
        await asyncio.sleep(0)  # both are being handled
        in_flight.drain()
        drained = asyncio.create_task(in_flight.drained())
        for number in (0, 1):
            await asyncio.sleep(0)
            seen.append(f"drained: {drained.done()}")
            answer[number].set()
        await drained
        seen.append(f"handled: {in_flight.handled}")
        await asyncio.gather(*requests)
        return seen

    assert asyncio.run(run()) == [
        "drained: False",
        "answered 0",
        "drained: False",
        "answered 1",
        "handled: 0",
    ]


def test_abandon_ends_a_read_waiting_for_its_body_and_every_later_read() -> None:
    async def run() -> None:
        in_flight = InFlight()
        body = Body()
        with in_flight.handling(), in_flight.reading(body):
            in_flight.abandon()
            with pytest.raises(ReadAbandonedError, match="shutting down"):
                await body.arrived
        with pytest.raises(ReadAbandonedError), in_flight.reading(Body()):
            pytest.fail("a read begun after the grace must not wait for its body")

    asyncio.run(run())


def test_abandon_leaves_the_bodies_already_read_alone() -> None:
    async def run() -> None:
        in_flight = InFlight()
        body = Body()
        with in_flight.reading(body):
            body.arrived.set_result(b"spans")
        in_flight.abandon()
        assert body.arrived.result() == b"spans"  # not handed an error it would not read

    asyncio.run(run())
