"""Bearer-token authentication of the listeners (RFC 6750), one check per server kind.

The client sends ``authorization: Bearer <token>`` (gRPC metadata or HTTP header). A missing
or wrong token is answered UNAUTHENTICATED (gRPC, ``BearerTokenInterceptor``) or 401 with
``WWW-Authenticate: Bearer realm="toolwatch"`` (HTTP, ``bearer_token_middleware``), with no
detail saying which, counted with ``PipelineMetrics.auth_failed(listener)`` and told to the
listener's ``toolwatch.senders.SenderLog`` (whether a token was sent, never the token). The
gRPC health check (``HEALTH_CHECK``) and the paths a listener names stay open.

Tokens live in a file (``TokenFile``), one per line so a new token can be added before the
old one is removed; the file is re-read when it changes, without a restart.
``toolwatch.security.ListenerSecurity`` decides which listener takes which check.

Threading: the interceptor and middleware run on the servers' event loop; ``TokenFile`` is
not thread-safe.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import grpc
from aiohttp import hdrs, web
from aiohttp.typedefs import Handler, Middleware

from toolwatch.config.security import read_token_file
from toolwatch.metrics import PipelineMetrics
from toolwatch.model import Clock
from toolwatch.senders import SenderLog, grpc_sender, http_sender
from toolwatch.tls import FileWatch

__all__ = [
    "HEALTH_CHECK",
    "BearerTokenInterceptor",
    "TokenFile",
    "bearer_token",
    "bearer_token_middleware",
    "token_in",
]

log = logging.getLogger(__name__)

#: The gRPC health service's unary check (grpc.health.v1), open to clients without a token:
#: kubelet's gRPC probes and grpc-health-probe call it; ``toolwatch.ingest.grpc_health``
#: reads its requests a few at a time, so that they cannot take memory. Its ``Watch`` and
#: ``List`` are not: a ``Watch`` stream lasts as long as its client likes, so anyone who can
#: connect could hold as many as they please.
HEALTH_CHECK = "/grpc.health.v1.Health/Check"

_AUTHORIZATION = "authorization"
#: RFC 6750 §3: the Bearer scheme followed by at least one auth-param; no error detail.
_CHALLENGE = 'Bearer realm="toolwatch"'


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
    file is looked at no more than once every ``reload_seconds`` of ``clock`` time and
    re-read when it changed. A file that cannot be read or holds no valid token at a reload
    keeps the previous tokens, and the failure is logged: a half-written rotation never
    locks every client out. Raises at construction when the file is unusable.
    """

    def __init__(
        self,
        path: Path,
        reload_seconds: float,
        clock: Clock,
        on_failure: Callable[[], None] = lambda: None,
    ) -> None:
        self._path = path
        self._watch = FileWatch((path,), reload_seconds, clock)
        self._tokens = _encode(read_token_file(path))
        self._on_failure = on_failure
        self._on_change: list[Callable[[], None]] = []

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` each time a reload changes the accepted tokens."""
        self._on_change.append(callback)

    def accepts(self, token: str | None) -> bool:
        """Whether ``token`` is one of the accepted tokens."""
        self.refresh()
        if not token:
            return False
        try:  # undecodable header bytes arrive as surrogate escapes: compare the raw bytes
            presented = token.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:  # a surrogate no decoder made: like no accepted token
            return False
        matched = False
        for known in self._tokens:  # no early exit: the time spent says nothing
            matched |= hmac.compare_digest(presented, known)
        return matched

    def refresh(self) -> None:
        """Re-read the file if ``reload_seconds`` have passed and it changed."""
        try:
            signature = self._watch.changed()
            if signature is None:
                return
            tokens = read_token_file(self._path)
        except (OSError, ValueError) as exc:
            log.error("keeping the previous bearer tokens: %s", exc)
            self._on_failure()
            return
        self._watch.accept(signature)
        self._tokens = _encode(tokens)
        log.info("reloaded %d bearer token(s) from %s", len(tokens), self._path)
        for callback in self._on_change:
            callback()


def _encode(tokens: Iterable[str]) -> tuple[bytes, ...]:
    return tuple(token.encode() for token in tokens)


_Continuation = Callable[[Any], Awaitable[Any]]


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc is untyped
    """Refuses calls without an accepted bearer token with UNAUTHENTICATED (no detail) and
    counts them for ``listener``. Calls to ``open_methods`` (full method names) pass without
    a token.

    Refused calls are answered through a stream-stream handler without a deserializer: it
    runs before any request message is read (a unary handler would receive and hold the
    whole, possibly large, body first) and fits every method shape on the wire. It counts
    the refusal when it runs, so a check in front of it that ends the call first
    (``ClientNameInterceptor``) is the only one to count it."""

    def __init__(
        self,
        tokens: TokenFile,
        metrics: PipelineMetrics,
        listener: str,
        open_methods: frozenset[str] = frozenset({HEALTH_CHECK}),
        *,
        senders: SenderLog,
    ) -> None:
        self._tokens = tokens
        self._metrics = metrics
        self._listener = listener
        self._senders = senders
        self._open = open_methods
        self._refusal = grpc.stream_stream_rpc_method_handler(self._refuse)

    async def intercept_service(self, continuation: _Continuation, details: Any) -> Any:
        if details.method in self._open or self._tokens.accepts(_metadata_token(details)):
            return await continuation(details)
        return self._refusal

    async def _refuse(self, requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        self._metrics.auth_failed(self._listener)
        sent = token_in(context.invocation_metadata()) is not None
        sender = grpc_sender(self._listener, context)
        self._senders.refused(UNAUTHENTICATED, sender, _token_said(sent))
        await context.abort(grpc.StatusCode.UNAUTHENTICATED)


#: The sender log's reason for the refusals here (``toolwatch.senders``).
UNAUTHENTICATED = "unauthenticated"


def _token_said(sent: bool) -> str:
    """What a token refusal's log line says of the token: whether one was sent, never it."""
    return "a bearer token that is not accepted" if sent else "no bearer token"


def _metadata_token(details: Any) -> str | None:
    return token_in(details.invocation_metadata)


def token_in(metadata: Iterable[tuple[str, Any]] | None) -> str | None:
    for key, value in metadata or ():
        if key == _AUTHORIZATION and isinstance(value, str):
            return bearer_token(value)
    return None


def bearer_token_middleware(
    tokens: TokenFile,
    metrics: PipelineMetrics,
    listener: str,
    open_paths: frozenset[str] = frozenset(),
    *,
    senders: SenderLog,
) -> Middleware:
    """An aiohttp middleware answering requests without an accepted bearer token with 401,
    ``WWW-Authenticate: Bearer realm="toolwatch"`` and an empty body, counted for
    ``listener``; requests for ``open_paths`` pass without a token. Runs before the handler
    reads the body. Refusals are told to ``senders``."""
    told = senders

    @web.middleware
    async def require_token(request: web.Request, handler: Handler) -> web.StreamResponse:
        token = bearer_token(request.headers.get(hdrs.AUTHORIZATION))
        if request.path in open_paths or tokens.accepts(token):
            return await handler(request)
        metrics.auth_failed(listener)
        sender = http_sender(listener, request)
        told.refused(UNAUTHENTICATED, sender, _token_said(token is not None))
        return web.Response(status=401, headers={hdrs.WWW_AUTHENTICATE: _CHALLENGE})

    return require_token
