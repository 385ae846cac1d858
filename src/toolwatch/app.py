"""The server: builds the engine and sinks from the configuration and owns the lifecycle of
every listener (OTLP/gRPC, OTLP/HTTP, metrics, findings stream).

Everything runs on one asyncio event loop: receivers decode and hand batches to the engine,
a ticker completes due traces, sinks publish. Only the decoding of large request bodies runs
elsewhere, one at a time in a worker thread (``toolwatch.ingest.decode_thread``), so that
the loop keeps serving meanwhile; the batch comes back to the loop for the engine.
``App.stop`` is the SIGTERM path: stop accepting, on both OTLP listeners at once (waiting
up to the grace for the requests in flight, their bodies' arrival and decodes included),
evaluate what is buffered, flush sinks, close the listeners.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import signal
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import grpc
from aiohttp import web
from aiohttp.typedefs import Middleware
from grpc_health.v1 import _async as health_async
from grpc_health.v1 import health_pb2
from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    enable_created_metrics,
)

from toolwatch import __version__, compiled_state, connection_age
from toolwatch.config import (
    LISTENERS,
    Config,
    unrunnable_decoder,
)
from toolwatch.engine import Engine, EngineParts, Receipt
from toolwatch.evaluation.pipeline import EvaluationPipeline
from toolwatch.evaluation.settings import EvaluationSettings
from toolwatch.ingest.decode import DecodedBatch, scanner
from toolwatch.ingest.decode_thread import DecodeThread, off_loop_bytes
from toolwatch.ingest.grpc_health import health_handler
from toolwatch.ingest.http_answers import status_refusal
from toolwatch.ingest.inflight import InFlight
from toolwatch.ingest.otlp_grpc import SERVICE_NAME, trace_service_handler
from toolwatch.ingest.otlp_http import HttpTraceReceiver, ProtocolErrorLog
from toolwatch.ingest.scan import COMPILED_UNAVAILABLE
from toolwatch.ingest.slots import RequestSlots
from toolwatch.listeners import (
    HANDSHAKE_SECONDS,
    HEAD_LIMITS,
    HandshakeBoundSite,
    HeadRefusingHandler,
    ListenError,
    ListenersError,
    StartError,
    address_taken,
    bind_grpc,
    format_address,
    listening_socket,
    os_reason,
    text_refusal,
)
from toolwatch.model import Clock, monotonic_clock
from toolwatch.names import NameNormalizer, namespaced
from toolwatch.outputs import OutputError, Outputs, open_outputs, output_paths
from toolwatch.references.conversations import ConversationScope
from toolwatch.references.golden import GoldenCaseSet, load_golden_cases
from toolwatch.references.shadow import ShadowJoiner
from toolwatch.sections import changed_keys
from toolwatch.security import ListenerSecurity
from toolwatch.senders import SenderLog
from toolwatch.sinks import exposition
from toolwatch.sinks.findings import FindingSink, Redaction
from toolwatch.sinks.logqueue import queued_logging
from toolwatch.sinks.prometheus import BufferState, PrometheusMetrics
from toolwatch.sinks.python_reports import logged_python_reports
from toolwatch.sinks.stream.broker import FindingsBroker
from toolwatch.sinks.stream.protocol import stream_server_options
from toolwatch.sinks.stream.service import FindingsStreamServicer
from toolwatch.stream_listener import StreamListener

__all__ = [
    "RELOADED_OUTPUT",
    "RELOADED_SECTIONS",
    "App",
    "build_references",
    "serve",
    "tick_delay",
    "tune_gc",
]

log = logging.getLogger("toolwatch")

#: Kubelet probes cannot send a bearer token: these metrics-listener paths never need one.
_PROBE_PATHS = frozenset({"/healthz", "/readyz"})
# gRPC sets SO_REUSEPORT by default, so a second server on the same port would bind and take
# part of the connections: spans of one trace could reach two processes. Refuse, as HTTP does.
_NO_REUSEPORT = ("grpc.so_reuseport", 0)
#: At shutdown, once its requests are answered, how long the OTLP/HTTP listener waits for
#: what is left on a connection (an answer being written, the unread rest of a refused
#: body, which aiohttp goes on reading for up to 10 s) before it closes it. aiohttp waits
#: at most twice this.
_HTTP_CLOSE_SECONDS = 0.5
#: At shutdown, the least the outputs' threads are given to write the drain's findings, when
#: the grace is already over.
_OUTPUTS_CLOSE_SECONDS = 1.0
#: The longest the ticker sleeps, busy or idle: TLS reloads and shadow expiry wait for it.
_HOUSEKEEPING_SECONDS = 1.0
#: What a configuration reload (SIGHUP) applies: what runs are judged by. The other sections
#: set up listeners, buffers, outputs and label sets, and take a restart.
RELOADED_SECTIONS = ("policy", "golden", "evaluators")
#: The fields of ``output`` a reload applies too: which argument values findings may show.
RELOADED_OUTPUT = ("show_argument_values", "show_fields")


#: Why a reload keeps a section it applies otherwise, told after its settings that changed.
_KEPT_BECAUSE = {
    "golden": "its cases would be found by an attribute the receivers do not copy: they copy"
    " those configured at start-up",
}


def _redaction(config: Config) -> Redaction:
    """What findings may show of argument values (``output.show_*``)."""
    return Redaction(
        show_values=config.output.show_argument_values,
        show_fields=frozenset(config.output.show_fields),
    )


def _kept_keys(loaded: Config, kept: dict[str, Any]) -> dict[str, list[str]]:
    """Each one of ``kept`` (a section or a setting a reload does not apply, with its
    running value) with its settings whose values ``loaded`` changes, dotted as a file
    names them (``sections.changed_keys``)."""
    return {
        name: changed_keys(name, getattr(loaded, name), running) for name, running in kept.items()
    }


def _kept_settings(loaded: Config, kept: dict[str, Any]) -> str:
    """The settings a reload does not apply, as its warning names them (``_kept_keys``),
    and why for a section it applies otherwise (``output.stream_queue_size``,
    ``golden.cases_file (its cases would be ...)``)."""
    named = []
    for name, keys in _kept_keys(loaded, kept).items():
        because = _KEPT_BECAUSE.get(name)
        named.append(f"{', '.join(keys)} ({because})" if because else ", ".join(keys))
    return ", ".join(named)


def build_references(config: Config) -> tuple[GoldenCaseSet | None, NameNormalizer]:
    """Load the golden cases (if configured) and the tool-name normalizer."""
    normalize = config.policy.normalizer()
    cases = config.golden.cases_file
    if cases is None:
        return None, normalize
    golden = load_golden_cases(
        cases, normalize=normalize, case_id_attribute=config.golden.case_id_attribute
    )
    return golden, normalize


class App:
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
        self.registry = registry if registry is not None else CollectorRegistry()
        # What the default registry would have: process_* (resident memory, CPU, open
        # files), python_gc_*, python_info. Read at scrape time only.
        ProcessCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        golden, normalize = build_references(config)
        self._golden = golden  # as loaded: kept by a reload that cannot apply golden
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
        self.metrics = PrometheusMetrics(
            self.registry,
            version=__version__,
            decoder="compiled" if self._compiled else "reference",
            hot_path="compiled" if self._hot_path.all_compiled else "python",
            agents=sorted(config.named_agents()),
            tools=_known_tools(config, golden),
            label_value_cap=config.metrics.label_value_cap,
            agent_tool_pair_cap=config.metrics.agent_tool_pair_cap,
            buffer_state=self._buffer_state,
            stream_subscribers=lambda: self.broker.subscriber_count,
            requests_in_flight=lambda: self._slots.in_use,
            stream_listening=self._stream_listening,
            wall_clock=lambda: wall_clock() / 1e9,
        )
        self._namespaces = _NamespaceWatch(config.policy.guarded_tools(), self.metrics)
        normalize = config.policy.normalizer(self._namespaces)
        #: Who sends what the listeners refuse: a warning per reason at most once a minute.
        self.senders = SenderLog(clock)
        self._security = ListenerSecurity(
            config.security, clock, self.metrics, senders=self.senders
        )
        self._redaction = _redaction(config)
        self.broker = FindingsBroker(
            self.metrics,
            self._redaction,
            wall_clock=wall_clock,
            queue_size=config.output.stream_queue_size,
            max_subscribers=config.output.stream_max_subscribers,
            replay_size=config.output.stream_replay_size,
        )
        self._outputs = self._open_outputs(wall_clock, extra_sinks)
        shadow = ShadowJoiner(config.shadow, clock, self.metrics) if config.shadow.enabled else None
        parts = EngineParts(
            limits=config.assembly.limits(),
            evaluation=_evaluation(config),
            normalize=normalize,
            findings=self._outputs.findings,
            tooltraces=self._outputs.tooltraces,
            golden=golden,
            shadow=shadow,
            conversations=conversation_scope(config),
            agents=config.named_agents(),
            published=self._outputs.write_queued,
        )
        self.engine = Engine(parts, clock, self.metrics)
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
        buffer = self.engine.buffer
        return BufferState(
            buffer.buffered_traces,
            buffer.buffered_spans,
            buffer.buffered_bytes,
            buffer.overdue_ns() / 1e9,
            buffer.remembered_traces,
        )

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
        hot_path = self._hot_path
        log_hot_path = log.info if hot_path.all_compiled and not hot_path.stale else log.warning
        log_hot_path("hot path: %s", hot_path.describe())

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
        give_up = loop.call_later(grace, self._give_up)
        try:
            # Both stop accepting now and share the grace. One failing to stop neither cuts
            # the other short nor keeps what is buffered from being evaluated: logged.
            stopping = [self._stop_otlp_http(runner) for runner in self._runners[:1]]
            if self._grpc is not None:
                stopping.append(self._grpc.stop(grace))
            for error in await asyncio.gather(*stopping, return_exceptions=True):
                if isinstance(error, Exception):
                    log.error("a receiver failed to stop: %s", error, exc_info=error)
        finally:
            give_up.cancel()
        self._decoding.close()
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        drained = self.engine.drain()  # ends the findings streams once their queues are sent
        self._outputs_closed = True
        # Written by their threads meanwhile: what a blocked output still holds once the
        # grace is over (a second at least, for the drain's findings) is lost, counted.
        waited = max(grace_ends - loop.time(), _OUTPUTS_CLOSE_SECONDS)
        await loop.run_in_executor(None, self._outputs.close, waited)
        if self.stream_listener is not None:
            # A subscriber that does not take its queue by then loses it, counted as its
            # call ends, which can come just after ``stop`` returns.
            await self.stream_listener.stop(min(grace, 1.0))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self.broker.wait_for_subscribers(0)
        self._scraped.clear()  # from here on a scrape reads what the drain and the streams counted
        if drained or self._ticker is not None:  # not when a listener failed to start
            log.info("drained %d buffered trace(s) at shutdown", drained)
        await self._last_scrape()
        for runner in self._runners[1:]:
            await runner.cleanup()

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

    def reload(self, load: Callable[[], Config]) -> bool:
        """SIGHUP: loads the configuration again (``load``) and applies its policy, golden
        cases (the file read again) and evaluator settings to every run evaluated from now
        on, those already buffered included, and what findings may show (``RELOADED_OUTPUT``)
        to the findings not written or sent yet, and logs the warnings of how runs are now
        judged (``Config.judging_warnings``) as start-up does. Other sections that changed
        are named in a warning and take a restart (``_restart_only``). What would run, the
        new sections with the running rest, is checked as a whole. A configuration or
        golden-case file that does not load is logged, and
        ``toolwatch_config_last_reload_successful`` reads 0 until a reload works: the
        running configuration stays. Returns whether it worked.
        First, whatever the file holds, the findings log and the ToolTrace dump are opened
        again if a log rotation renamed them away (``Outputs.reopen``). Once shutting down
        (``stop``), only that: what is buffered is judged by the configuration that ran at
        SIGTERM, whenever in the grace the signal comes. Once the shutdown has closed the
        outputs (the drain's findings written), nothing: opening them again would leave
        empty files behind. Before, during the grace and the drain, a rotation still gets
        the findings written then at its path."""
        if self._outputs_closed:
            log.info("SIGHUP while shutting down: configuration and outputs left as they are")
            return False
        try:  # logrotate's HUP, whatever the configuration file says
            self._outputs.reopen()
        except Exception:  # never the reload's undoing
            log.exception("could not open the outputs again")
        if self._stopped:
            log.info(
                "SIGHUP while shutting down: the configuration is not reloaded (what is"
                " buffered is judged by the one running at SIGTERM)"
            )
            return False
        try:
            loaded = load()
            kept = self._restart_only(loaded)
            config = loaded.model_copy(update=kept)  # each section was validated on its own
            try:
                config.check_across_sections()
            except ValueError as exc:  # named as the warning of a reload that works names them
                running = [key for keys in _kept_keys(loaded, kept).values() for key in keys]
                value = "the running value" if len(running) == 1 else "the running values"
                raise ValueError(f"{exc} ({', '.join(running)}: {value} until a restart)") from None
            if "golden" in kept:  # the cases as loaded, not the file again
                golden, normalize = self._golden, config.policy.normalizer()
            else:
                golden, normalize = build_references(config)
            evaluation = _evaluation(config)
        except Exception as exc:  # ConfigError, ReferenceFileError, OSError, RecursionError...
            log_reload_failure(exc)
            self.metrics.config_reloaded(False)
            return False
        self._namespaces.reload(config.policy.guarded_tools())
        normalize = config.policy.normalizer(self._namespaces)
        agents = config.named_agents()
        self.engine.reconfigure(evaluation, normalize, golden, conversation_scope(config), agents)
        self.metrics.config_reloaded(True, _known_tools(config, golden), agents)
        self.config, self._golden = config, golden
        log.info(
            "configuration reloaded: %s apply to the runs evaluated from now on",
            ", ".join(RELOADED_SECTIONS),
        )
        for warning in config.judging_warnings(defaults=self._defaults):
            log.warning("%s", warning)  # as at start-up: what is judged may defeat itself
        self._redact_with(_redaction(config))
        if kept:
            log.warning(
                "configuration reloaded without %s, which changed: they take a restart",
                _kept_settings(loaded, kept),
            )
        return True

    def _restart_only(self, loaded: Config) -> dict[str, Any]:
        """The sections of ``loaded`` that changed but take a restart, with their running
        values: every section but ``RELOADED_SECTIONS``; ``output`` with its new
        ``RELOADED_OUTPUT`` fields; and ``golden`` when its cases are found by an attribute
        the receivers do not copy (they copy those configured at start-up: cases turned on,
        or another ``case_id_attribute``; turned off, they just match no run)."""
        running = self.config
        kept = {
            name: getattr(running, name)
            for name in type(loaded).model_fields
            if name not in RELOADED_SECTIONS and getattr(loaded, name) != getattr(running, name)
        }
        if "output" in kept:
            shown = {name: getattr(loaded.output, name) for name in RELOADED_OUTPUT}
            output = running.output.model_copy(update=shown)
            if output == loaded.output:
                del kept["output"]  # only what findings may show changed
            else:
                kept["output"] = output
        if not loaded.golden.reference_keys() <= self._decode_options.reference_keys:
            kept["golden"] = running.golden
        return kept

    def _redact_with(self, redaction: Redaction) -> None:
        """Findings written from now on show what ``redaction`` lets them; those the stream
        holds or has queued, not sent yet, are redacted again (a value shown before is
        hidden from then on, also from a client that resumes)."""
        if redaction == self._redaction:
            return
        self._redaction = redaction
        if self._outputs.log is not None:
            self._outputs.log.redact_with(redaction)
        again = self.broker.redact_with(redaction)
        log.info(
            "findings redaction reloaded (output.%s); redacted again, the findings the stream"
            " holds or has queued, not sent yet: %d",
            ", output.".join(RELOADED_OUTPUT),
            again,
        )

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

    @property
    def _handshake_seconds(self) -> float:
        return min(self.config.ingest.idle_timeout_seconds, HANDSHAKE_SECONDS)

    @property
    def _grpc_handshake_option(self) -> tuple[str, int]:
        """A gRPC connection that does not finish its handshake (TLS, HTTP/2's preface) in
        time is closed: gRPC's own limit is 120 s, a silent client's socket held as long."""
        return ("grpc.server_handshake_timeout_ms", round(self._handshake_seconds * 1000))

    @property
    def _grpc_connection_age_options(self) -> tuple[tuple[str, int], ...]:
        """Each OTLP/gRPC connection closed at ``ingest.max_connection_age_seconds``
        (``toolwatch.connection_age``). An export in flight then finishes within
        ``ingest.read_timeout_seconds``: its body arrives within it or it is answered
        DEADLINE_EXCEEDED, and exporters give up sooner (10 s the SDKs, 5 s the Collector)."""
        ingest = self.config.ingest
        return connection_age.grpc_options(
            ingest.max_connection_age_seconds, ingest.read_timeout_seconds
        )

    def _connection_age_middleware(self) -> Middleware:
        """The HTTP listeners' (OTLP, metrics) bound on a connection's age, on the app's
        clock."""
        return connection_age.http_middleware(
            self.config.ingest.max_connection_age_seconds, self._clock
        )

    async def _start_otlp_grpc(self, address: str) -> str:
        limit = self.config.ingest.max_request_bytes
        server = grpc.aio.server(
            interceptors=self._security.grpc_interceptors("grpc"),
            options=[
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", 4 * 2**20),
                ("grpc.http2.bdp_probe", int(self.config.ingest.grpc_bdp_probe)),
                self._grpc_handshake_option,
                *self._grpc_connection_age_options,
                _NO_REUSEPORT,
            ],
        )
        server.add_generic_rpc_handlers(
            (
                trace_service_handler(
                    self._offer,
                    self._decode_options,
                    self.metrics,
                    self.config.ingest.retry_after_seconds,
                    self._slots,
                    decoding=self._decoding,
                    senders=self.senders,
                ),
            )
        )
        health = health_async.HealthServicer()
        server.add_generic_rpc_handlers(
            (health_handler(health, self.config.ingest.read_timeout_seconds),)
        )
        bound = await bind_grpc(server, "grpc", address, self._security.grpc_credentials("grpc"))
        await server.start()
        for service in ("", SERVICE_NAME):
            await health.set(service, health_pb2.HealthCheckResponse.SERVING)
        self._grpc = server
        return bound

    async def _start_stream(self, address: str) -> str:
        # No connection age (``_grpc_connection_age_options``): a subscription is one call
        # for as long as ``toolwatch tail`` runs; the grace over, a closed connection would end
        # it (``tail`` without ``--reconnect`` exits), and with no grace it would outlive its
        # connection's age all the same. Its token, not its connection, is checked again;
        # when a reload takes a client CA out, every stream is ended and every connection
        # closed, for its client to connect again through a handshake the CAs served now
        # decide (``StreamListener``).
        security = self._security
        servicer = FindingsStreamServicer(
            self.broker,
            lambda metadata: security.still_accepted("stream", metadata),
            lambda: security.auth_failed("stream"),
        )
        options = [_NO_REUSEPORT, self._grpc_handshake_option, *stream_server_options()]

        def make_server() -> grpc.aio.Server:
            server = grpc.aio.server(
                interceptors=security.grpc_interceptors("stream"), options=options
            )
            servicer.add_to(server)
            return server

        listener = StreamListener(
            make_server, lambda: security.grpc_credentials("stream"), servicer.reconnect_all
        )
        bound = await listener.start(address)
        self.stream_listener = listener
        security.on_tokens_changed(servicer.recheck)
        security.on_client_ca_removed("stream", listener.client_ca_removed)
        return bound

    def _otlp_http_app(self) -> web.Application:
        limit = self.config.ingest.max_request_bytes
        app = web.Application(
            client_max_size=limit, middlewares=self._security.http_middlewares("http")
        )
        HttpTraceReceiver(
            consume=self._offer,
            options=self._decode_options,
            metrics=self.metrics,
            max_request_bytes=limit,
            retry_after_seconds=self.config.ingest.retry_after_seconds,
            slots=self._slots,
            decoding=self._decoding,
            in_flight=self._http_in_flight,
            senders=self.senders,
        ).add_routes(app)
        app.middlewares.insert(0, self._connection_age_middleware())  # sees every answer
        return app

    def _metrics_app(self) -> web.Application:
        app = exposition.metrics_app(
            self.registry, ready=lambda: self._ready, scraped=self._was_scraped
        )
        app.middlewares.extend(self._security.http_middlewares("metrics", _PROBE_PATHS))
        app.middlewares.insert(0, self._connection_age_middleware())
        return app

    def _connection_options(self, listener: str) -> dict[str, Any]:
        """The options of the HTTP listener's connection handlers (aiohttp's
        ``RequestHandler``)."""
        refused = None
        if listener == "http":  # a request that is not HTTP: an invalid OTLP/HTTP request

            def refused() -> None:
                self.metrics.request_handled("http", "invalid", 0.0)

        return {
            "auto_decompress": False,
            "access_log": None,
            "logger": ProtocolErrorLog(logging.getLogger("aiohttp.server"), refused),
            # Also closes a connection whose first request never completes its headers.
            "keepalive_timeout": self.config.ingest.idle_timeout_seconds,
            **HEAD_LIMITS,
        }

    async def _start_http(self, listener: str, address: str, app: web.Application) -> str:
        options = self._connection_options(listener)
        # The site makes each connection's handler with these options; the runner's
        # server, which it is given, holds them too.
        runner = web.AppRunner(
            app,
            # The metrics listener's last scrape, whose answer may be large and its reader
            # slow, keeps aiohttp's default.
            shutdown_timeout=_HTTP_CLOSE_SECONDS if listener == "http" else 60.0,
            **options,
        )
        refusal = status_refusal if listener == "http" else text_refusal
        handler = functools.partial(
            HeadRefusingHandler, loop=asyncio.get_running_loop(), refusal=refusal, **options
        )
        await runner.setup()
        try:
            sock = listening_socket(address)
        except OSError as exc:
            await runner.cleanup()
            raise ListenError(listener, address, os_reason(exc)) from exc
        ssl_context = self._security.ssl_context(listener)
        handshake = self._handshake_seconds
        site = HandshakeBoundSite(
            runner, sock, ssl_context=ssl_context, handshake=handshake, handler=handler
        )
        await site.start()
        self._runners.append(runner)
        return format_address(sock.getsockname())


def log_reload_failure(error: Exception) -> None:
    """Log why a reload failed, a record per line of ``error`` (a ``ConfigError`` names each
    of its errors on a line of its own): log pipelines split records at line breaks, and a
    line after the first would have no timestamp, level or logger, and be read as another
    process's. The first says the running configuration stays; each other names the reload."""
    first, *rest = str(error).splitlines() or [type(error).__name__]
    log.error("configuration reload failed; the running configuration stays: %s", first)
    for line in rest:
        if line.strip():
            log.error("configuration reload failed: %s", line.strip())


def tick_delay(now_ns: int, due_ns: int, period: float, longest: float) -> float:
    """Seconds until the tick for a trace due at ``due_ns``: at least ``period`` (ticks stay
    that far apart under load, where something is always nearly due), at most ``longest``."""
    return min(max(period, (due_ns - now_ns) / 1e9), longest)


def conversation_scope(config: Config) -> ConversationScope | None:
    """``policy.verification_scope: conversation``: how long, which tools verify, and how
    many bytes the conversations remembered may hold."""
    policy = config.policy
    if policy.verification_scope != "conversation":
        return None
    normalize = policy.normalizer()
    verifiers = frozenset(normalize(tool) for tool in policy.verification_tools)
    fields: dict[str, set[str]] = {}
    for rule in policy.binding_rules():
        fields.setdefault(rule.verification_tool, set()).add(rule.verification_field)
    ttl = round(policy.conversation_ttl_seconds * 1e9)
    bound = {tool: frozenset(names) for tool, names in fields.items()}
    return ConversationScope(
        ttl_ns=ttl,
        verifiers=verifiers,
        fields=bound,
        shadow=config.shadow,
        max_bytes=policy.conversation_max_bytes,
    )


def _evaluation(config: Config) -> EvaluationPipeline:
    """The evaluators as ``config`` sets them, with its policy."""
    settings = EvaluationSettings(policy=config.policy, evaluators=config.evaluators)
    return EvaluationPipeline(settings)


def _known_tools(config: Config, golden: GoldenCaseSet | None) -> tuple[str, ...]:
    """The tool label values kept under the cap: the tools the configuration names, spelled
    as the calls' (normalized) names are."""
    tools = set(config.named_tools())
    if golden is not None:  # normalized when the file was read
        tools |= {call.name for case in golden for call in case.expected_tools}
    return tuple(sorted(tools))


#: Namespaced names reported at most, so that a producer inventing names cannot grow the set.
_MAX_NAMESPACED = 256


class _NamespaceWatch:
    """Told each tool name the engine's normalizer works out (``NameNormalizer``): a name
    that is a guarded tool's in a namespace (``billing__issue_refund``, an MCP server's tool,
    while the policy names ``issue_refund``) escapes the policy without a sign, so each such
    name is logged once and counted (``toolwatch_namespaced_tool_names``, at most
    ``_MAX_NAMESPACED`` names) until a reload, whose normalizer works the names out again."""

    __slots__ = ("_metrics", "_names", "_tools")

    def __init__(self, tools: frozenset[str], metrics: PrometheusMetrics) -> None:
        self._tools = tools  # PolicySettings.guarded_tools()
        self._metrics = metrics
        self._names: dict[str, str] = {}  # name -> the guarded tool it is in a namespace

    def __call__(self, name: str) -> None:
        if name in self._names or len(self._names) >= _MAX_NAMESPACED:
            return
        tool = namespaced(name, self._tools)
        if tool is None:
            return
        self._names[name] = tool
        self._metrics.namespaced_tool_names(tool, sum(t == tool for t in self._names.values()))
        log.warning(
            "tool %r looks like the policy's %r in a namespace, and the policy does not apply"
            " to it: set policy.tool_prefix to a pattern that removes the namespace (or add"
            " an alias)",
            name[:128],
            tool,
        )

    def reload(self, tools: frozenset[str]) -> None:
        """A new configuration's guarded tools: what was seen is forgotten, and told again
        if it still escapes them."""
        for tool in set(self._names.values()):
            self._metrics.namespaced_tool_names(tool, 0)
        self._tools, self._names = tools, {}


#: Cyclic-GC thresholds for serving: a full collection only after 20,000 net new objects
#: (not 700), and older generations rarely. The pipeline's objects are acyclic and die by
#: reference counting; what the collector did was walk live ones, on the event loop.
_GC_THRESHOLDS = (20_000, 20, 20)


def keep_created_series() -> None:
    """Export counters' ``_created`` series whatever ``PROMETHEUS_DISABLE_CREATED_SERIES``
    says: the page alerts read ``toolwatch_regressions_created`` to fire on a regression's
    first finding, which ``increase()`` cannot see (deploy/prometheus/toolwatch-rules.yaml)."""
    if os.environ.get(_DISABLE_CREATED, "").lower() in ("true", "1", "t"):
        log.warning(
            "%s is ignored: the alert rules need toolwatch_regressions_created to page on a"
            " regression's first finding",
            _DISABLE_CREATED,
        )
    enable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus_client has no annotation here


#: prometheus_client's switch (read when it is imported) that drops ``_created`` series.
_DISABLE_CREATED = "PROMETHEUS_DISABLE_CREATED_SERIES"


def tune_gc() -> None:
    """Move everything alive after start-up (modules, configuration, the gRPC and Prometheus
    machinery) out of the collector's reach, and collect less often. Measured in a benchmark
    run (``make bench``): collections took 1.6 s of CPU and paused the event loop up to 56 ms
    (the tail of the detection latency); afterwards 0.04 s, at most 15 ms."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*_GC_THRESHOLDS)


async def serve(
    config: Config,
    reload: Callable[[], Config] | None = None,
    hung_up: Callable[[], bool] = lambda: False,
    terminated: Callable[[], bool] = lambda: False,
    interactive: bool = False,
    *,
    defaults: bool = False,
) -> int:
    """Run a server until SIGTERM or SIGINT, then shut down gracefully. Returns the exit
    code. The CLI has checked the output files (``config.check_outputs``). ``reload``
    loads the configuration again, on SIGHUP (``App.reload``, ``_HangUps``); ``hung_up``
    says whether a SIGHUP came while the process was starting, before this handler was in
    place, and ``terminated`` whether a SIGTERM or SIGINT did; ``interactive``: run from a
    terminal, where Ctrl-C skips the wait for a last scrape (``App.interrupted``); ``defaults``:
    as ``App`` takes it. Given ``reload``, SIGHUP is ignored once it returns or raises, to the
    end of the process.

    SIGTERM and SIGINT drain from before the first listener is bound (``App.start``) to the
    end: nothing is buffered before, and one that came earlier (``terminated``) stops the
    server as soon as it listens."""
    app = App(config, defaults=defaults)
    # A blocked standard error stalls nothing (lines are lost, told); what Python reports
    # itself (warnings, a thread's exception) goes through the same thread, in whole records.
    with queued_logging(), logged_python_reports():
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        received: list[int] = []

        def stopping(signum: int) -> None:
            received.append(signum)
            stop.set()

        # Before start(): a SIGTERM right after the "listening" line must drain, not kill.
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping, sig)
        if terminated():
            stop.set()
        hang_ups = _HangUps(loop, app, reload, hung_up) if reload is not None else None
        if hang_ups is not None:
            # Not ``loop.add_signal_handler``: closing the loop gives its signals their
            # default action back, and SIGHUP's ends the process, so a logrotate HUP while
            # Python exited turned a clean shutdown's 0 into death by signal. This handler
            # is swapped for SIG_IGN in one step when serve ends.
            signal.signal(signal.SIGHUP, hang_ups)
        try:
            await app.start()
            if hang_ups is not None:
                hang_ups.listening()
            tune_gc()
            await stop.wait()
            app.interrupted = interactive and received[:1] == [signal.SIGINT]
            log.info("shutting down")
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, app.hurry)
            await app.stop()
        finally:
            if reload is not None:
                signal.signal(signal.SIGHUP, signal.SIG_IGN)
        return 0


class _HangUps:
    """``serve``'s SIGHUP handler, run by Python in the main thread between two steps of the
    event loop. Until the server listens (``listening``), a SIGHUP is only remembered, as
    the CLI remembers one from before (``hung_up``): however many came, one reload once it
    listens, which reads the file again (it may have changed since start-up read it); a
    reload in the middle of ``App.start`` would have run for each. From then on each
    SIGHUP runs ``App.reload`` as one of the loop's callbacks."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        app: App,
        load: Callable[[], Config],
        hung_up: Callable[[], bool],
    ) -> None:
        self._loop = loop
        self._app = app
        self._load = load
        self._hung_up = hung_up
        self._asked = False  # a SIGHUP since this handler is in place, before ``listening``
        self._listening = False

    def __call__(self, _signum: int, _frame: FrameType | None) -> None:
        if self._listening:
            self._loop.call_soon_threadsafe(self._app.reload, self._load)
        else:
            self._asked = True

    def listening(self) -> None:
        """The server listens: the one reload the SIGHUPs that came until now ask for, if
        one came. A SIGHUP from here on reloads by itself (``__call__``)."""
        self._listening = True
        if self._asked or self._hung_up():
            self._app.reload(self._load)
