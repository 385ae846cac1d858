"""The metrics listener: ``/metrics``, ``/healthz`` and ``/readyz`` on one aiohttp app.

- ``GET /metrics`` renders the registry in the format the scraper asks for in ``Accept``:
  the Prometheus text format 0.0.4 by default, OpenMetrics for
  ``application/openmetrics-text`` (the only format that carries exemplars, so trace ids reach
  Prometheus only when it negotiates OpenMetrics, as it does by default). The choice is
  ``prometheus_client.exposition.choose_encoder``'s, so it matches the client library's own
  HTTP server. Responses are gzip-compressed when the scraper accepts it.
- ``GET /healthz``: the process is alive and serving HTTP (liveness): always 200 ``ok``.
- ``GET /readyz``: 200 ``ready`` while ``ready()`` is true, else 503 ``not ready``
  (readiness: listeners up and not draining).

``scraped``, when given, is called after each ``/metrics`` answer is rendered (the app keeps
the listener up at shutdown until the drain's counts have been scraped).

Rendering runs on the event loop; it reads only the registry and the scrape-time collectors,
which are cheap.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

__all__ = ["metrics_app"]


def metrics_app(
    registry: CollectorRegistry,
    ready: Callable[[], bool],
    scraped: Callable[[], None] | None = None,
) -> web.Application:
    """An aiohttp application serving ``registry`` and the health endpoints."""
    endpoints = _Endpoints(registry, ready, scraped)
    app = web.Application()
    app.router.add_get("/metrics", endpoints.metrics)
    app.router.add_get("/healthz", endpoints.healthz)
    app.router.add_get("/readyz", endpoints.readyz)
    return app


class _Endpoints:
    def __init__(
        self,
        registry: CollectorRegistry,
        ready: Callable[[], bool],
        scraped: Callable[[], None] | None,
    ) -> None:
        self._registry = registry
        self._ready = ready
        self._scraped = scraped

    async def metrics(self, request: web.Request) -> web.Response:
        encode, content_type = choose_encoder(request.headers.get("Accept", ""))
        response = web.Response(body=encode(self._registry))
        # Set verbatim: the OpenMetrics type carries version and escaping parameters.
        response.headers["Content-Type"] = content_type
        response.enable_compression()
        if self._scraped is not None:
            self._scraped()
        return response

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(self, request: web.Request) -> web.Response:
        if self._ready():
            return web.Response(text="ready\n")
        return web.Response(status=503, text="not ready\n")
