"""The server: builds the engine and sinks from the configuration and owns the lifecycle of
every listener (OTLP/gRPC, OTLP/HTTP, metrics, findings stream).

Everything runs on one asyncio event loop: receivers decode and hand batches to the engine,
a ticker completes due traces, sinks publish. Only the decoding of large request bodies runs
elsewhere, one at a time in a worker thread (``toolwatch.ingest.decode_thread``), so that
the loop keeps serving meanwhile; the batch comes back to the loop for the engine.

``App`` is built here, with its start-up and its ticker; its other parts are modules of
their own: starting each listener (``toolwatch.app_listeners``), the SIGTERM path
(``App.stop``, ``toolwatch.app_shutdown``) and the SIGHUP one (``App.reload``,
``toolwatch.app_reload``). ``toolwatch.serving`` runs an App from signal to signal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import grpc
from aiohttp import web
from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

from toolwatch import __version__, compiled_state
from toolwatch.app_listeners import ListenerStartup
from toolwatch.app_reload import ConfigReload
from toolwatch.app_shutdown import GracefulShutdown
from toolwatch.build_revision import RevisionError, revision
from toolwatch.config import LISTENERS, Config, unrunnable_decoder
from toolwatch.engine import Engine, EngineParts, Receipt
from toolwatch.engine_setup import (
    build_references,
    conversation_scope,
    evaluation_pipeline,
    findings_redaction,
    known_tools,
)
from toolwatch.ingest.compressed_streams import ZSTD_UNAVAILABLE
from toolwatch.ingest.decode_requests import scanner
from toolwatch.ingest.decode_thread import DecodeThread, off_loop_bytes
from toolwatch.ingest.decode_types import DecodedBatch
from toolwatch.ingest.inflight import InFlight
from toolwatch.ingest.scan import COMPILED_UNAVAILABLE
from toolwatch.ingest.slots import RequestSlots
from toolwatch.listeners import ListenError, ListenersError, StartError, address_taken
from toolwatch.model import Clock, monotonic_clock
from toolwatch.names import NameNormalizer
from toolwatch.namespace_watch import NamespaceWatch
from toolwatch.outputs import OutputError, Outputs, open_outputs, output_paths
from toolwatch.process_tuning import keep_created_series
from toolwatch.references.golden import GoldenCaseSet
from toolwatch.references.shadow import ShadowJoiner
from toolwatch.security import ListenerSecurity
from toolwatch.senders import SenderLog
from toolwatch.sinks.findings import FindingSink
from toolwatch.sinks.prometheus import BufferState, PrometheusMetrics
from toolwatch.sinks.stream.broker import FindingsBroker
from toolwatch.stream_listener import StreamListener

__all__ = ["App", "tick_delay"]

log = logging.getLogger("toolwatch")

#: The longest the ticker sleeps, busy or idle: TLS reloads and shadow expiry wait for it.
_HOUSEKEEPING_SECONDS = 1.0


class App(ListenerStartup, GracefulShutdown, ConfigReload):
    """One toolwatch server. Create, ``await start()``, later ``await stop()``.

    ``clock`` drives assembly (inject a ``ManualClock`` in tests); ``wall_clock`` stamps
    findings and the metrics' timestamps. ``extra_sinks`` receive every finding too (e.g. an
    ``InMemoryFindingSink``). ``defaults``: ``config`` is the built-in defaults (``serve``
    given no file), which the caller has warned of (``Config.judging_warnings``).
    """

    def __init__(
        self,
        config: Config,
        *,
        clock: Clock = monotonic_clock,
        wall_clock: Callable[[], int] = time.time_ns,
        registry: CollectorRegistry | None = None,
        extra_sinks: tuple[FindingSink, ...] = (),
        defaults: bool = False,
    ) -> None:
        self.config = config
        self._defaults = defaults
        self._clock = clock
        #: Stopped with Ctrl-C from a terminal (``serve``'s standard input is one, and SIGINT
        #: came): nothing waits for a last scrape at shutdown, as a one-off ``curl`` of
        #: ``/metrics`` counted as a scraper. Not a SIGTERM there: ``docker stop`` of a
        #: ``docker run -it``, a rollout of a pod with ``tty: true``.
        self.interrupted = False
        keep_created_series()
        self.registry = _with_process_collectors(registry)
        golden, normalize = build_references(config)
        self._golden = golden  # as loaded: kept by a reload that cannot apply golden
        self._set_up_decoding(config)
        self.metrics = self._build_metrics(config, golden, wall_clock)
        self._namespaces = NamespaceWatch(config.policy.guarded_tools(), self.metrics)
        normalize = config.policy.normalizer(self._namespaces)
        #: Who sends what the listeners refuse: a warning per reason and listener at most once a
        #: minute, on the app's clock.
        self.senders = SenderLog(clock)
        self._security = ListenerSecurity(
            config.security, clock, self.metrics, senders=self.senders
        )
        self._redaction = findings_redaction(config)
        self.broker = self._build_broker(config, wall_clock)
        self._outputs = self._open_outputs(wall_clock, extra_sinks)
        self.engine = self._build_engine(config, clock, golden, normalize)
        self._set_up_lifecycle()

    def _set_up_decoding(self, config: Config) -> None:
        """The decoder ``config`` asks for (a ``StartError`` when this build cannot run it,
        as serve's ``check_hot_path`` refuses it), the request slots and the decode thread
        both receivers share."""
        self._decode_options = config.decode_options()
        unrunnable = unrunnable_decoder(config)  # as serve's check_hot_path refuses it
        if unrunnable is not None:
            raise StartError(f"ingest.decoder: {unrunnable}")
        self._compiled = scanner(self._decode_options).compiled
        self._hot_path = compiled_state.state()
        self._slots = RequestSlots(
            config.ingest.max_concurrent_requests, config.ingest.read_timeout_seconds
        )
        # Both receivers': one decode at a time; a large body in the thread.
        self._decoding = DecodeThread(off_loop_bytes(self._compiled))
        self._http_in_flight = InFlight()  # the OTLP/HTTP requests, for the shutdown

    def _build_metrics(
        self, config: Config, golden: GoldenCaseSet | None, wall_clock: Callable[[], int]
    ) -> PrometheusMetrics:
        """The metrics on ``self.registry``; what they read at scrape time (the buffer, the
        stream's subscribers, the request slots) is read through ``self`` then."""
        return PrometheusMetrics(
            self.registry,
            version=__version__,
            revision=self._revision(),
            decoder="compiled" if self._compiled else "reference",
            hot_path="compiled" if self._hot_path.all_compiled else "python",
            agents=sorted(config.named_agents()),
            tools=known_tools(config, golden),
            label_value_cap=config.metrics.label_value_cap,
            agent_tool_pair_cap=config.metrics.agent_tool_pair_cap,
            buffer_state=self._buffer_state,
            stream_subscribers=lambda: self.broker.subscriber_count,
            requests_in_flight=lambda: self._slots.in_use,
            stream_listening=self._stream_listening,
            wall_clock=lambda: wall_clock() / 1e9,
        )

    def _build_broker(self, config: Config, wall_clock: Callable[[], int]) -> FindingsBroker:
        """The findings stream's broker, bounded as ``config.output`` says."""
        return FindingsBroker(
            self.metrics,
            self._redaction,
            wall_clock=wall_clock,
            queue_size=config.output.stream_queue_size,
            max_subscribers=config.output.stream_max_subscribers,
            replay_size=config.output.stream_replay_size,
        )

    def _build_engine(
        self, config: Config, clock: Clock, golden: GoldenCaseSet | None, normalize: NameNormalizer
    ) -> Engine:
        """The engine: assembly, evaluation and the outputs its findings go to."""
        shadow = ShadowJoiner(config.shadow, clock, self.metrics) if config.shadow.enabled else None
        #: The bounds the engine's buffer holds runs under, for their gauges: a reload
        #: leaves ``assembly`` as it runs (``RELOADED_SECTIONS``), and the engine keeps them.
        self._limits = config.assembly.limits()
        parts = EngineParts(
            limits=self._limits,
            evaluation=evaluation_pipeline(config),
            normalize=normalize,
            findings=self._outputs.findings,
            tooltraces=self._outputs.tooltraces,
            golden=golden,
            shadow=shadow,
            conversations=conversation_scope(config),
            agents=config.named_agents(),
            published=self._outputs.write_queued,
        )
        return Engine(parts, clock, self.metrics)

    def _set_up_lifecycle(self) -> None:
        """What ``start``, ``stop`` and the ticker keep: nothing listening or started yet."""
        self.addresses: dict[str, str] = {}
        self._grpc: grpc.aio.Server | None = None
        #: The findings stream's server, once started (``StreamListener``).
        self.stream_listener: StreamListener | None = None
        self._runners: list[web.AppRunner] = []
        self._ticker: asyncio.Task[None] | None = None
        self._arrived = asyncio.Event()  # spans offered since the ticker last went idle
        self._ready = False
        self._stopped = False
        self._outputs_closed = False  # at shutdown, once the drain's findings are written
        self._scraped = asyncio.Event()  # set by every /metrics scrape
        self._scraped_activity: int | None = None  # ``_activity`` at the last scrape, if any
        self._hurried = False  # a second signal: no wait for a last scrape

    def _buffer_state(self) -> BufferState:
        """What the engine's buffer holds, and the bounds it holds it under: read at scrape
        time, from the scraping thread."""
        buffer, limits = self.engine.buffer, self._limits
        return BufferState(
            buffer.buffered_traces,
            buffer.buffered_spans,
            buffer.buffered_bytes,
            buffer.overdue_ns() / 1e9,
            buffer.remembered_traces,
            max_traces=limits.max_traces,
            max_spans=limits.max_buffered_spans,
            max_bytes=limits.max_buffered_bytes,
        )

    @staticmethod
    def _revision() -> str:
        """``toolwatch_build_info{revision}``: the build's (``build_revision``); an App built
        without ``serve``'s checks refuses one that is no revision as ``serve`` does."""
        try:
            return revision()
        except RevisionError as error:
            raise StartError(str(error)) from None

    def _stream_listening(self) -> bool | None:
        """``toolwatch_stream_listening``: whether the findings stream is not down for want of
        its address (``StreamListener.down``); ``None``, no series, before its listener
        started. Read from the scraping thread."""
        listener = self.stream_listener
        return None if listener is None else not listener.down

    def outputs_written(self, timeout: float = 10.0) -> bool:
        """Waits up to ``timeout`` seconds for the findings log's and the ToolTrace dump's
        threads to have written what was published to them, or lost it (counted: a full disk,
        a removed directory); whether they have. For tests and tools that read the files while
        the server runs."""
        return self._outputs.written(timeout)

    def _open_outputs(self, wall_clock: Clock, extra: tuple[FindingSink, ...]) -> Outputs:
        metrics = self.metrics
        try:
            return open_outputs(
                self.config.output,
                [self.broker, *extra],
                ["stream", *("extra" for _ in extra)],  # OUTPUTS, sink by sink
                self._redaction,
                wall_clock=wall_clock,
                failed=metrics.output_failed,
                clock=lambda: self._clock() / 1e9,
            )
        except OutputError as exc:
            raise StartError(str(exc)) from exc

    async def start(self) -> None:
        """Bind every listener (port 0 picks a free one) and start the ticker. Logs the bound
        addresses in one parseable line. A listener that cannot bind raises ``ListenError``
        (a ``StartError``) once the ones already started are closed again; several whose
        ports are taken before any is bound, ``ListenersError``, naming each."""
        listen = self.config.listen
        found = (address_taken(n, getattr(listen, n)) for n in LISTENERS)
        conflicts = [e for e in found if e is not None]
        if conflicts:  # every one told at once, before gRPC logs its own line about one
            await self.stop(grace=0)  # the outputs opened, closed again
            raise conflicts[0] if len(conflicts) == 1 else ListenersError(conflicts)
        try:
            self.addresses["grpc"] = await self._start_otlp_grpc(listen.grpc)
            self.addresses["http"] = await self._start_http(
                "http", listen.http, self._otlp_http_app()
            )
            self.addresses["metrics"] = await self._start_http(
                "metrics", listen.metrics, self._metrics_app()
            )
            self.addresses["stream"] = await self._start_stream(listen.stream)
        except ListenError:
            await self.stop(grace=0)
            raise
        self._ticker = asyncio.get_running_loop().create_task(self._tick_forever())
        self._ready = True
        for warning in self.config.warnings(addresses=self.addresses, defaults=self._defaults):
            log.warning("%s", warning)
        log.info("listening %s", " ".join(f"{k}={v}" for k, v in self.addresses.items()))
        where = output_paths(self.config.output)  # a relative path is serve's directory's
        log.info("outputs %s", " ".join(f"{k}={v}" for k, v in where.items()))
        if not self._compiled and self.config.ingest.decoder == "auto":
            log.warning(
                "OTLP decoding runs on the reference scanner, a third more CPU per span: %s",
                COMPILED_UNAVAILABLE,
            )
        if ZSTD_UNAVAILABLE:  # a Collector set to compression: zstd loses every batch
            log.warning("OTLP/HTTP refuses Content-Encoding zstd (415): %s", ZSTD_UNAVAILABLE)
        hot_path = self._hot_path
        log_hot_path = log.info if hot_path.all_compiled and not hot_path.stale else log.warning
        log_hot_path("hot path: %s", hot_path.describe())

    def tick(self) -> int:
        """What the ticker does every ``assembly.tick_seconds``: reload TLS files that
        changed (a client CA taken out restarts the findings stream's listener), bind that
        listener again if its restart could not, and complete the traces that are due.
        Returns how many were completed. Call it on the event loop."""
        self._security.refresh()
        if self.stream_listener is not None:
            self.stream_listener.retry()
        return self.engine.tick()

    async def _tick_forever(self) -> None:
        period = self.config.assembly.tick_seconds
        while True:
            await self._until_next_tick(period)
            try:
                self.tick()
            except Exception:  # a bug met on one trace must not stop completing the others
                log.exception("completing buffered traces failed; the next tick goes on")

    async def _until_next_tick(self, period: float) -> None:
        """Sleep until the next trace is due, but at least ``period``; with nothing buffered,
        until spans arrive. Never longer than ``_HOUSEKEEPING_SECONDS`` (or ``period``, if
        longer): a tick also reloads TLS files and expires shadow halves. Every wake-up costs
        a sidecar CPU even when idle (about 250 µs on a shared VM: 2.6% of a core at 100
        ticks a second)."""
        longest = max(period, _HOUSEKEEPING_SECONDS)
        if self.engine.buffer.next_due_ns() is None:
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(longest):
                    await self._arrived.wait()
        due = self.engine.buffer.next_due_ns()
        if due is not None:
            await asyncio.sleep(tick_delay(self._clock(), due, period, longest))

    def _offer(self, batch: DecodedBatch, transport: str) -> Receipt:
        """The receivers' consumer: the engine's, and a wake-up for an idle ticker."""
        receipt = self.engine.admit(batch, transport)
        self._arrived.set()
        return receipt


def tick_delay(now_ns: int, due_ns: int, period: float, longest: float) -> float:
    """Seconds until the tick for a trace due at ``due_ns``: at least ``period`` (ticks stay
    that far apart under load, where something is always nearly due), at most ``longest``."""
    return min(max(period, (due_ns - now_ns) / 1e9), longest)


def _with_process_collectors(registry: CollectorRegistry | None) -> CollectorRegistry:
    """``registry``, or a new one, with what the default registry would have: process_*
    (resident memory, CPU, open files), python_gc_*, python_info. Read at scrape time only."""
    registry = registry if registry is not None else CollectorRegistry()
    ProcessCollector(registry=registry)
    GCCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry
