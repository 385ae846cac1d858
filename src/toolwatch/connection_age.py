"""How long a connection to the OTLP receivers or the metrics listener is served: until it
is ``ingest.max_connection_age_seconds`` old, then its client connects again.

A client certificate is checked once per connection, at its handshake, against the client CA
served then: a client CA taken out of ``tls.client_ca_file`` (``toolwatch.tls``) stops new
handshakes only. OTLP exporters (the Collector, the SDKs) keep one connection for as long as
they run, HTTP/2 for gRPC, kept alive for HTTP, so without a bound a client whose CA was
taken out would be served for as long as it stayed connected. Closed at an age, every
connection is made again within it, and its client checked against the client CA of the
moment (clients also spread again over the replicas behind a Service).

- gRPC (``grpc_options``): gRPC's ``max_connection_age`` sends GOAWAY at the age (spread
  ±10% by gRPC), then gives the calls in flight the grace to finish before it closes the
  connection. A client opens a new connection for its next call (the OpenTelemetry exporters
  and the Collector do; a call started as the GOAWAY came is retried there by gRPC itself).
- HTTP (``http_middleware``): aiohttp has no such bound. A connection's age counts from its
  first request, the first the application is told of it (the request comes within
  ``ingest.idle_timeout_seconds`` of the handshake, or the connection is closed); the first
  answer at or past the age is sent ``Connection: close`` and the connection closed after
  it. The request is served: the client's next one opens a new connection.

Not for the findings stream: a subscription is one call for as long as ``toolwatch tail``
runs, which a closed connection would end. Instead, when a reload takes a CA out of the
client CA file, every open stream is ended UNAVAILABLE and every connection of the stream
listener closed (``ListenerSecurity.on_client_ca_removed``,
``FindingsStreamServicer.reconnect_all``, ``toolwatch.stream_listener``): its client
connects again, through a new handshake, which the CAs served then decide (one whose CA was
taken out is refused there), and resumes where it left off. Adding a CA, or writing the same
ones again, ends no stream.
"""

from __future__ import annotations

import asyncio
import weakref

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from toolwatch.model import Clock
from toolwatch.sections import seconds_to_ns

__all__ = ["grpc_options", "http_middleware"]


def grpc_options(max_age_seconds: float, grace_seconds: float) -> tuple[tuple[str, int], ...]:
    """gRPC server options closing each connection at ``max_age_seconds`` (GOAWAY), the
    calls in flight then given ``grace_seconds`` to finish."""
    return (
        ("grpc.max_connection_age_ms", round(max_age_seconds * 1000)),
        ("grpc.max_connection_age_grace_ms", round(grace_seconds * 1000)),
    )


def http_middleware(max_age_seconds: float, clock: Clock) -> Middleware:
    """An aiohttp middleware that closes a connection once ``max_age_seconds`` of ``clock``
    (ns) have passed since its first request: the answer that ends at or past the age is
    sent ``Connection: close``. Put it outermost, so that it sees every answer (a refusal of
    another middleware included) as it is sent."""
    max_age_ns = seconds_to_ns(max_age_seconds)
    # By transport: one per connection, gone with it.
    first_requests: weakref.WeakKeyDictionary[asyncio.BaseTransport, int] = (
        weakref.WeakKeyDictionary()
    )

    @web.middleware
    async def close_when_old(request: web.Request, handler: Handler) -> web.StreamResponse:
        transport = request.transport
        if transport is None:  # the client has gone: nothing to keep alive
            return await handler(request)
        first = first_requests.setdefault(transport, clock())
        try:
            response = await handler(request)
        except web.HTTPException as answer:  # aiohttp sends it as the answer it is
            if clock() - first >= max_age_ns:
                answer.force_close()
            raise
        if clock() - first >= max_age_ns:
            response.force_close()
        return response

    return close_when_old
