"""Transport security and bearer-token authentication of the listeners.

``ListenerSecurity`` turns the validated ``security`` section into what each server needs:
gRPC server credentials and an auth interceptor (OTLP/gRPC, findings stream), an
``ssl.SSLContext`` and an auth middleware (OTLP/HTTP, metrics). With ``tls.client_ca_file``
both require a client certificate signed by that CA (mutual TLS).

Authentication follows RFC 6750: the client sends ``authorization: Bearer <token>``
(gRPC metadata or HTTP header). A missing or wrong token is answered UNAUTHENTICATED (gRPC)
or 401 with ``WWW-Authenticate: Bearer`` (HTTP), with no detail saying which, and counted
with ``PipelineMetrics.auth_failed(listener)``. The gRPC health service and the metrics
listener's ``/healthz`` and ``/readyz`` stay open: kubelet probes cannot send a token.

Tokens live in a file (``TokenFile``), one per line so a new token can be added before the
old one is removed; the file is re-read when it changes, without a restart. Certificates
are read once at start-up.

Threading: the interceptors and middlewares run on the servers' event loop; ``TokenFile``
is not thread-safe.
"""

from __future__ import annotations

import hmac
import logging
import os
import ssl
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import grpc
from aiohttp import hdrs, web
from aiohttp.typedefs import Handler, Middleware

from toolwatch.config import SecuritySettings, TlsSettings, read_token_file
from toolwatch.metrics import PipelineMetrics
from toolwatch.model import Clock

__all__ = [
    "HEALTH_SERVICE",
    "BearerTokenInterceptor",
    "ListenerSecurity",
    "TokenFile",
    "bearer_token",
    "bearer_token_middleware",
    "server_credentials",
    "server_ssl_context",
]

log = logging.getLogger(__name__)

#: The gRPC health service (grpc.health.v1), open to clients without a token.
HEALTH_SERVICE = "grpc.health.v1.Health"

_AUTHORIZATION = "authorization"


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` value, else ``None``. The scheme
    is case-insensitive (RFC 7235 section 2.1)."""
    if authorization is None:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class TokenFile:
    """The accepted bearer tokens, read from ``path`` (``config.read_token_file``).

    ``accepts`` compares a presented token with every accepted one in constant time. The
    file's status is looked at no more than once every ``reload_seconds`` of ``clock`` time
    (so requests cause no file I/O in between) and the file is re-read when its inode,
    modification time or size changed. A file that cannot be read or holds no valid token
    at a reload keeps the previous tokens, and the failure is logged: a half-written
    rotation never locks every client out. Raises at construction when the file is unusable.
    """

    def __init__(self, path: Path, reload_seconds: float, clock: Clock) -> None:
        self._path = path
        self._reload_ns = int(reload_seconds * 1e9)
        self._clock = clock
        self._signature = self._stat()
        self._tokens = _encode(read_token_file(path))
        self._checked_ns = clock()

    def accepts(self, token: str | None) -> bool:
        """Whether ``token`` is one of the accepted tokens."""
        self._refresh()
        if not token:
            return False
        presented = token.encode()
        matched = False
        for known in self._tokens:  # no early exit: the time spent says nothing
            matched |= hmac.compare_digest(presented, known)
        return matched

    def _refresh(self) -> None:
        now = self._clock()
        if now - self._checked_ns < self._reload_ns:
            return
        self._checked_ns = now
        try:
            signature = self._stat()
            if signature == self._signature:
                return
            tokens = read_token_file(self._path)
        except (OSError, ValueError) as exc:
            log.error("keeping the previous bearer tokens: %s", exc)
            return
        self._signature, self._tokens = signature, _encode(tokens)
        log.info("reloaded %d bearer token(s) from %s", len(tokens), self._path)

    def _stat(self) -> tuple[int, int, int]:
        status = os.stat(self._path)
        return status.st_ino, status.st_mtime_ns, status.st_size


def _encode(tokens: Iterable[str]) -> tuple[bytes, ...]:
    return tuple(token.encode() for token in tokens)


async def _refuse(request: Any, context: grpc.aio.ServicerContext) -> None:
    await context.abort(grpc.StatusCode.UNAUTHENTICATED)


# Refused calls are answered through a stream-stream handler without a deserializer: it
# runs before any request message is read (a unary handler would receive and hold the
# whole, possibly large, body first) and fits every method shape on the wire.
_REFUSAL = grpc.stream_stream_rpc_method_handler(_refuse)

_Continuation = Callable[[Any], Awaitable[Any]]


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc is untyped
    """Refuses calls without an accepted bearer token with UNAUTHENTICATED (no detail) and
    counts them for ``listener``. Calls to ``open_services`` pass without a token."""

    def __init__(
        self,
        tokens: TokenFile,
        metrics: PipelineMetrics,
        listener: str,
        open_services: frozenset[str] = frozenset({HEALTH_SERVICE}),
    ) -> None:
        self._tokens = tokens
        self._metrics = metrics
        self._listener = listener
        self._open = open_services

    async def intercept_service(self, continuation: _Continuation, details: Any) -> Any:
        service = details.method.lstrip("/").partition("/")[0]
        if service in self._open or self._tokens.accepts(_metadata_token(details)):
            return await continuation(details)
        self._metrics.auth_failed(self._listener)
        return _REFUSAL


def _metadata_token(details: Any) -> str | None:
    for key, value in details.invocation_metadata or ():
        if key == _AUTHORIZATION and isinstance(value, str):
            return bearer_token(value)
    return None


def bearer_token_middleware(
    tokens: TokenFile,
    metrics: PipelineMetrics,
    listener: str,
    open_paths: frozenset[str] = frozenset(),
) -> Middleware:
    """An aiohttp middleware answering requests without an accepted bearer token with 401,
    ``WWW-Authenticate: Bearer`` and an empty body, counted for ``listener``; requests for
    ``open_paths`` pass without a token. Runs before the handler reads the body."""

    @web.middleware
    async def require_token(request: web.Request, handler: Handler) -> web.StreamResponse:
        authorization = request.headers.get(hdrs.AUTHORIZATION)
        if request.path in open_paths or tokens.accepts(bearer_token(authorization)):
            return await handler(request)
        metrics.auth_failed(listener)
        return web.Response(status=401, headers={hdrs.WWW_AUTHENTICATE: "Bearer"})

    return require_token


def server_credentials(tls: TlsSettings) -> grpc.ServerCredentials:
    """gRPC server credentials from ``tls``; client certificates are required when it has a
    ``client_ca_file``. Raises ``OSError`` when a file cannot be read."""
    pair = (tls.key_file.read_bytes(), tls.cert_file.read_bytes())
    client_ca = tls.client_ca_file.read_bytes() if tls.client_ca_file is not None else None
    return grpc.ssl_server_credentials(
        [pair], root_certificates=client_ca, require_client_auth=client_ca is not None
    )


def server_ssl_context(tls: TlsSettings) -> ssl.SSLContext:
    """A TLS 1.2+ server context from ``tls``; client certificates are required when it has
    a ``client_ca_file``. Raises ``OSError``/``ssl.SSLError`` when the files do not load."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(tls.cert_file, tls.key_file, password=lambda: b"")
    if tls.client_ca_file is not None:
        context.load_verify_locations(cafile=tls.client_ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    context.set_alpn_protocols(["http/1.1"])  # aiohttp serves HTTP/1.1 only
    return context


class ListenerSecurity:
    """What protects each listener (``grpc``, ``http``, ``metrics``, ``stream``), built once
    from ``settings``: every file is read here, so an unusable one stops start-up. Token
    reloads are timed with ``clock``; refusals are counted on ``metrics``."""

    def __init__(self, settings: SecuritySettings, clock: Clock, metrics: PipelineMetrics) -> None:
        self._settings = settings
        self._metrics = metrics
        tls, auth = settings.tls, settings.auth
        self._ssl_context = server_ssl_context(tls) if tls is not None else None
        self._tokens = (
            TokenFile(auth.bearer_token_file, auth.reload_seconds, clock)
            if auth is not None
            else None
        )

    def protected(self, listener: str) -> bool:
        """Whether ``listener`` has TLS or authentication."""
        return self._settings.uses_tls(listener) or self._settings.uses_auth(listener)

    def grpc_credentials(self, listener: str) -> grpc.ServerCredentials | None:
        """Credentials for a secure port, or ``None`` for plaintext."""
        tls = self._settings.tls
        return server_credentials(tls) if tls and self._settings.uses_tls(listener) else None

    def grpc_interceptors(self, listener: str) -> tuple[grpc.aio.ServerInterceptor, ...]:
        if self._tokens is None or not self._settings.uses_auth(listener):
            return ()
        return (BearerTokenInterceptor(self._tokens, self._metrics, listener),)

    def ssl_context(self, listener: str) -> ssl.SSLContext | None:
        return self._ssl_context if self._settings.uses_tls(listener) else None

    def http_middlewares(
        self, listener: str, open_paths: frozenset[str] = frozenset()
    ) -> tuple[Middleware, ...]:
        if self._tokens is None or not self._settings.uses_auth(listener):
            return ()
        return (bearer_token_middleware(self._tokens, self._metrics, listener, open_paths),)
