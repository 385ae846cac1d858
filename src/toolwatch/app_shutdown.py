"""The App's graceful shutdown, SIGTERM's path (``GracefulShutdown``, a part of
``toolwatch.app.App``): stop accepting on both OTLP listeners at once (waiting up to the
grace for the requests in flight, their bodies' arrival and decodes included), evaluate what
is buffered, flush the outputs, end the findings streams, keep ``/metrics`` up for a last
scrape when one is due, close the listeners.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import grpc
from aiohttp import web

from toolwatch.config import Config
from toolwatch.engine import Engine
from toolwatch.ingest.decode_thread import DecodeThread
from toolwatch.ingest.inflight import InFlight
from toolwatch.outputs import Outputs
from toolwatch.sinks.stream.broker import FindingsBroker
from toolwatch.stream_listener import StreamListener

__all__ = ["OUTPUTS_CLOSE_SECONDS", "GracefulShutdown"]

log = logging.getLogger("toolwatch")

#: At shutdown, the least the outputs' threads are given to write the drain's findings, when
#: the grace is already over.
OUTPUTS_CLOSE_SECONDS = 1.0


class GracefulShutdown:
    """``App.stop`` and its steps, and what it knows of the scrapes of ``/metrics`` (the
    last one's wait, ``hurry``). The attributes annotated here are the App's
    (``App.__init__``)."""

    config: Config
    engine: Engine
    broker: FindingsBroker
    addresses: dict[str, str]
    stream_listener: StreamListener | None
    interrupted: bool
    _outputs: Outputs
    _decoding: DecodeThread
    _http_in_flight: InFlight
    _grpc: grpc.aio.Server | None
    _runners: list[web.AppRunner]
    _ticker: asyncio.Task[None] | None
    _ready: bool
    _stopped: bool
    _outputs_closed: bool
    _scraped: asyncio.Event
    _scraped_activity: int | None
    _hurried: bool

    async def stop(self, grace: float | None = None) -> None:
        """Stop accepting, evaluate everything buffered, flush the sinks, close listeners.
        Idempotent: a second call returns at once."""
        if self._stopped:
            return
        self._stopped = True
        grace = self.config.shutdown_grace_seconds if grace is None else grace
        self._ready = False
        # A request whose body still arrives or decodes when the grace is over is given up
        # (answered as retryable, none of its spans taken), as gRPC cancels its calls then:
        # aiohttp would wait for a body until the read timeout, past the grace.
        loop = asyncio.get_running_loop()
        grace_ends = loop.time() + grace
        await self._stop_receivers(loop, grace)
        self._decoding.close()
        await self._stop_ticker()
        drained = self.engine.drain()  # ends the findings streams once their queues are sent
        self._outputs_closed = True
        # Written by their threads meanwhile: what a blocked output still holds once the
        # grace is over (a second at least, for the drain's findings) is lost, counted.
        waited = max(grace_ends - loop.time(), OUTPUTS_CLOSE_SECONDS)
        await loop.run_in_executor(None, self._outputs.close, waited)
        await self._stop_stream(grace)
        self._scraped.clear()  # from here on a scrape reads what the drain and the streams counted
        if drained or self._ticker is not None:  # not when a listener failed to start
            log.info("drained %d buffered trace(s) at shutdown", drained)
        await self._last_scrape()
        for runner in self._runners[1:]:
            await runner.cleanup()

    async def _stop_receivers(self, loop: asyncio.AbstractEventLoop, grace: float) -> None:
        """Both OTLP receivers stop accepting now and share the ``grace``; what still arrives
        or decodes at its end is given up (``_give_up``). One failing to stop neither cuts
        the other short nor keeps what is buffered from being evaluated: logged."""
        # A request whose body still arrives or decodes when the grace is over is given up
        # (answered as retryable, none of its spans taken), as gRPC cancels its calls then:
        # aiohttp would wait for a body until the read timeout, past the grace.
        give_up = loop.call_later(grace, self._give_up)
        try:
            stopping = [self._stop_otlp_http(runner) for runner in self._runners[:1]]
            if self._grpc is not None:
                stopping.append(self._grpc.stop(grace))
            for error in await asyncio.gather(*stopping, return_exceptions=True):
                if isinstance(error, Exception):
                    log.error("a receiver failed to stop: %s", error, exc_info=error)
        finally:
            give_up.cancel()

    async def _stop_ticker(self) -> None:
        """The ticker cancelled, and waited for, if it started."""
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker

    async def _stop_stream(self, grace: float) -> None:
        """The findings stream's listener stopped, if it started, and its subscribers given
        a second to leave."""
        if self.stream_listener is not None:
            # A subscriber that does not take its queue by then loses it, counted as its
            # call ends, which can come just after ``stop`` returns.
            await self.stream_listener.stop(min(grace, 1.0))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self.broker.wait_for_subscribers(0)

    async def _stop_otlp_http(self, runner: web.AppRunner) -> None:
        """What gRPC's ``stop(grace)`` does, for OTLP/HTTP (``toolwatch.ingest.inflight``):
        no new connection, and no new request on one kept alive, from now on; the requests
        in flight answered (``_give_up`` ends those still waiting at the grace); then the
        connections closed. Not ``runner.cleanup()`` alone: it stops reading every
        connection at once, so a body still arriving would wait in vain for the grace."""
        for site in list(runner.sites):
            await site.stop()  # closes the listening socket
        self._http_in_flight.drain()
        await self._http_in_flight.drained()
        await runner.cleanup()

    def _give_up(self) -> None:
        """The shutdown's grace is over: the OTLP/HTTP requests still reading their body,
        and the decodes of either receiver, are answered as retryable at once."""
        self._decoding.abandon()
        self._http_in_flight.abandon()

    async def _last_scrape(self) -> None:
        """Keep ``/metrics`` up after the drain until it is scraped once more, at most
        ``shutdown_metrics_linger_seconds``: the findings of the drain are counted after
        the last regular scrape, and a restarted process counts from zero, so without it
        their alerts would never fire. Only when something has scraped this process: one
        nobody watches (a laptop's ``make serve``) exits at once, and so does one whose last
        scrape came after the engine or the findings stream last counted something
        (``_activity``): nothing new to read; nor one stopped with Ctrl-C from a terminal
        (``interrupted``): someone done with it, not a rollout. Logs how the wait ended: the
        scrape came, a second signal skipped it (also one in the grace, before it began), or
        the time ran out."""
        linger = self.config.shutdown_metrics_linger_seconds
        scraped = self._scraped_activity
        if linger <= 0 or scraped is None or "metrics" not in self.addresses:
            return
        if self._activity() == scraped:
            return
        if self.interrupted:
            log.info(
                "not waiting for a last scrape of /metrics: stopped with Ctrl-C in a terminal"
                " (a Prometheus that scrapes it reads the drain's counts only until then)"
            )
            return
        # A second signal in the grace skips the wait before it starts; one in it ends it.
        if not self._hurried and not await self._scraped_within(linger):
            return
        if self._hurried:
            log.info("second signal: not waiting for a last scrape")
        else:
            log.info("last scrape served; exiting")

    async def _scraped_within(self, linger: float) -> bool:
        """Waits up to ``linger`` seconds for a scrape of ``/metrics`` or a second signal
        (``hurry``); whether one came."""
        log.info("waiting up to %gs for a last scrape of /metrics (signal again to skip)", linger)
        try:
            await asyncio.wait_for(self._scraped.wait(), linger)
        except TimeoutError:
            log.warning("no scrape of /metrics within %gs of the drain", linger)
            return False
        return True

    def hurry(self) -> None:
        """A second SIGTERM or Ctrl-C: finish the shutdown without waiting for a scrape (the
        drain still completes)."""
        self._hurried = True
        self._scraped.set()

    def _activity(self) -> int:
        """Grows whenever a counter the drain may move does: the engine's (``Engine.activity``)
        and the findings stream's losses (a subscriber's queue lost at shutdown)."""
        return self.engine.activity + self.broker.dropped

    def _was_scraped(self) -> None:
        self._scraped_activity = self._activity()
        self._scraped.set()
