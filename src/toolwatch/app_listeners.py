"""The App's listeners as it starts them (``ListenerStartup``, a part of ``toolwatch.app.App``):
the OTLP/gRPC server with its health service, the findings stream's server, and the aiohttp
applications of the OTLP/HTTP and metrics listeners, with their connections' options
(handshake and idle timeouts, header limits, the bound on a connection's age).

Binding an address, and why it cannot be bound, is ``toolwatch.listeners``'; closing the
listeners at shutdown, ``toolwatch.app_shutdown``'s.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any

import grpc
from aiohttp import web
from aiohttp.typedefs import Middleware
from grpc_health.v1 import _async as health_async
from grpc_health.v1 import health_pb2
from prometheus_client import CollectorRegistry

from toolwatch import connection_age
from toolwatch.config import Config
from toolwatch.connection_gate import ConnectionGate, GatedSite
from toolwatch.engine import Receipt
from toolwatch.ingest.decode_thread import DecodeThread
from toolwatch.ingest.decode_types import DecodedBatch, DecodeOptions
from toolwatch.ingest.grpc_health import health_handler
from toolwatch.ingest.http_answers import status_refusal
from toolwatch.ingest.inflight import InFlight
from toolwatch.ingest.otlp_grpc import SERVICE_NAME, trace_service_handler
from toolwatch.ingest.otlp_http import HttpTraceReceiver, ProtocolErrorLog
from toolwatch.ingest.slots import RequestSlots
from toolwatch.listeners import (
    HANDSHAKE_SECONDS,
    HEAD_LIMITS,
    HeadRefusingHandler,
    ListenError,
    bind_grpc,
    format_address,
    listening_socket,
    name_server,
    os_reason,
    text_refusal,
)
from toolwatch.model import Clock
from toolwatch.security import ListenerSecurity
from toolwatch.senders import SenderLog
from toolwatch.sinks import exposition
from toolwatch.sinks.prometheus import PrometheusMetrics
from toolwatch.sinks.stream.broker import FindingsBroker
from toolwatch.sinks.stream.protocol import stream_server_options
from toolwatch.sinks.stream.service import FindingsStreamServicer
from toolwatch.stream_listener import StreamListener

__all__ = ["ListenerStartup"]

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


class ListenerStartup:
    """How ``App.start`` starts each listener, each ``_start_*`` returning the address it
    bound. The attributes annotated here are the App's (``App.__init__``); the servers
    started are kept in ``_grpc``, ``stream_listener`` and ``_runners``, for the shutdown."""

    config: Config
    registry: CollectorRegistry
    metrics: PrometheusMetrics
    broker: FindingsBroker
    stream_listener: StreamListener | None
    _clock: Clock
    _security: ListenerSecurity
    _decode_options: DecodeOptions
    _slots: RequestSlots
    _decoding: DecodeThread
    _http_in_flight: InFlight
    senders: SenderLog
    _grpc: grpc.aio.Server | None
    _runners: list[web.AppRunner]
    _ready: bool
    _offer: Callable[[DecodedBatch, str], Receipt]  # the receivers' consumer
    _was_scraped: Callable[[], None]  # every /metrics scrape

    @property
    def _handshake_seconds(self) -> float:
        return min(self.config.ingest.idle_timeout_seconds, HANDSHAKE_SECONDS)

    @property
    def _grpc_handshake_option(self) -> tuple[str, int]:
        """A gRPC connection that does not finish its handshake (TLS, HTTP/2's preface) in
        time is closed: gRPC's own limit is 120 s, a silent client's socket held as long."""
        return ("grpc.server_handshake_timeout_ms", round(self._handshake_seconds * 1000))

    @property
    def _grpc_idle_option(self) -> tuple[str, int]:
        """A gRPC connection without a call for ``ingest.idle_timeout_seconds`` is closed
        (GOAWAY), as an idle HTTP one is: gRPC keeps one for ever, so a peer could hold
        ``max_connections`` of them, none calling, and keep every client out (the findings
        stream's connections are never closed at an age). Exporters and tail connect again
        for their next call."""
        idle_ms = round(self.config.ingest.idle_timeout_seconds * 1000)
        return ("grpc.max_connection_idle_ms", idle_ms)

    @property
    def _grpc_connections_option(self) -> tuple[str, int]:
        """A gRPC listener's open connections, bounded as the HTTP listeners' are
        (``toolwatch.connection_gate``): gRPC closes one past the bound when it accepts it."""
        return ("grpc.max_allowed_incoming_connections", self.config.ingest.max_connections)

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
                self._grpc_connections_option,
                self._grpc_idle_option,
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
        options = [
            _NO_REUSEPORT,
            self._grpc_handshake_option,
            self._grpc_connections_option,
            self._grpc_idle_option,
            *stream_server_options(),
        ]

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
        app.on_response_prepare.append(name_server)
        return app

    def _metrics_app(self) -> web.Application:
        app = exposition.metrics_app(
            self.registry, ready=lambda: self._ready, scraped=self._was_scraped
        )
        app.middlewares.extend(self._security.http_middlewares("metrics", _PROBE_PATHS))
        app.middlewares.insert(0, self._connection_age_middleware())
        app.on_response_prepare.append(name_server)
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
            HeadRefusingHandler,
            loop=asyncio.get_running_loop(),
            refusal=refusal,
            listener=listener,
            senders=self.senders,
            **options,
        )
        await runner.setup()
        server = runner.server
        assert server is not None  # set by setup()
        try:
            sock = listening_socket(address)
        except OSError as exc:
            await runner.cleanup()
            raise ListenError(listener, address, os_reason(exc)) from exc
        gate = ConnectionGate(
            listener,
            self.config.ingest.max_connections,
            functools.partial(handler, server),
            ssl_context=self._security.ssl_context(listener),
            handshake_seconds=self._handshake_seconds,
            unread_seconds=self.config.ingest.read_timeout_seconds,
            metrics=self.metrics,
            senders=self.senders,
        )
        site = GatedSite(runner, sock, gate)
        await site.start()
        self._runners.append(runner)
        return format_address(sock.getsockname())
