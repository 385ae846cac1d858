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
old one is removed; the file is re-read when it changes, without a restart. So are the
certificate, its key and the client CA (``CertificateFiles``): a rotated certificate (by
cert-manager, say) is served on new connections — gRPC takes it at the next handshake, the
HTTP listeners at the next ``ListenerSecurity.refresh`` (the server's tick). Connections
already open keep the certificate they were made with.

Threading: the interceptors and middlewares run on the servers' event loop; ``TokenFile``
is not thread-safe; ``CertificateFiles`` is (gRPC asks for certificates from its threads).
"""

from __future__ import annotations

import hmac
import logging
import os
import ssl
import threading
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
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
    "CertificateFiles",
    "Certificates",
    "ListenerSecurity",
    "TokenFile",
    "bearer_token",
    "bearer_token_middleware",
    "client_certificate_middleware",
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


_Signature = tuple[tuple[int, int, int], ...]


class _Watch:
    """Files looked at no more than once every ``reload_seconds`` of ``clock`` time (so
    requests cause no file I/O in between). ``changed`` returns their state when a look
    finds that the inode, modification time or size of one of them differs from the state
    last ``accept``-ed, else ``None``; it raises ``OSError`` when one cannot be looked at."""

    __slots__ = ("_checked_ns", "_clock", "_paths", "_reload_ns", "_signature")

    def __init__(self, paths: Sequence[Path], reload_seconds: float, clock: Clock) -> None:
        self._paths = tuple(paths)
        self._reload_ns = int(reload_seconds * 1e9)
        self._clock = clock
        self._signature = self._stat()
        self._checked_ns = clock()

    def changed(self) -> _Signature | None:
        now = self._clock()
        if now - self._checked_ns < self._reload_ns:
            return None
        self._checked_ns = now
        signature = self._stat()
        return signature if signature != self._signature else None

    def accept(self, signature: _Signature) -> None:
        self._signature = signature

    def _stat(self) -> _Signature:
        return tuple(_file_state(path) for path in self._paths)


def _file_state(path: Path) -> tuple[int, int, int]:
    status = os.stat(path)
    return status.st_ino, status.st_mtime_ns, status.st_size


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
        self._watch = _Watch((path,), reload_seconds, clock)
        self._tokens = _encode(read_token_file(path))
        self._on_failure = on_failure

    def accepts(self, token: str | None) -> bool:
        """Whether ``token`` is one of the accepted tokens."""
        self._refresh()
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

    def _refresh(self) -> None:
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


@dataclass(frozen=True, slots=True)
class Certificates:
    """One loaded set of TLS files as PEM bytes; ``generation`` counts the sets loaded."""

    cert: bytes
    key: bytes
    client_ca: bytes | None
    generation: int


class CertificateFiles:
    """The certificate chain, its key and the client CA of ``tls``, re-read when they change.

    ``refresh`` looks at the files no more than once every ``tls.reload_seconds`` of
    ``clock`` time and reloads them when one changed. A set that does not load — a
    half-written rotation: the new certificate with the old key — keeps the previous set
    (``current``), and the failure is logged, as for tokens. Raises ``OSError`` or
    ``ssl.SSLError`` at construction when the files do not load. Thread-safe.
    """

    def __init__(
        self, tls: TlsSettings, clock: Clock, on_failure: Callable[[], None] = lambda: None
    ) -> None:
        self._tls = tls
        self._on_failure = on_failure
        self._paths = [p for p in (tls.cert_file, tls.key_file, tls.client_ca_file) if p]
        self._lock = threading.Lock()
        self._watch = _Watch(self._paths, tls.reload_seconds, clock)
        self.current = self._load(0)

    def refresh(self) -> bool:
        """Reload the files if they changed; whether a new set is now ``current``."""
        with self._lock:
            try:
                signature = self._watch.changed()
                if signature is None:
                    return False
                loaded = self._load(self.current.generation + 1)
            except (OSError, ssl.SSLError) as exc:
                log.error("keeping the previous TLS certificate: %s", exc)
                self._on_failure()
                return False
            self._watch.accept(signature)
            self.current = loaded
        log.info("reloaded the TLS certificate %s", self._tls.cert_file)
        return True

    def _load(self, generation: int) -> Certificates:
        """The files' bytes, once OpenSSL has loaded those very bytes as a server context."""
        tls = self._tls
        read = [path.read_bytes() for path in self._paths]
        _server_context(tls)  # raises on a certificate that is not the key's, or bad PEM
        if [path.read_bytes() for path in self._paths] != read:
            raise OSError(f"{tls.cert_file} or its key changed while being read")
        return Certificates(read[0], read[1], read[2] if len(read) > 2 else None, generation)


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


def client_certificate_middleware(
    metrics: PipelineMetrics, listener: str, open_paths: frozenset[str]
) -> Middleware:
    """An aiohttp middleware for a listener whose TLS lets clients without a certificate
    finish the handshake (one that presents a certificate the client CA did not sign never
    does): requests on such a connection are answered 401 with an empty body and counted for
    ``listener``, except those for ``open_paths``."""

    @web.middleware
    async def require_certificate(request: web.Request, handler: Handler) -> web.StreamResponse:
        transport = request.transport
        verified = transport is not None and bool(transport.get_extra_info("peercert"))
        if verified or request.path in open_paths:
            return await handler(request)
        metrics.auth_failed(listener)
        return web.Response(status=401)

    return require_certificate


def _certificate_configuration(certificates: Certificates) -> Any:
    return grpc.ssl_server_certificate_configuration(
        [(certificates.key, certificates.cert)], root_certificates=certificates.client_ca
    )


class _CertificateFetcher:
    """gRPC's ``certificate_configuration_fetcher``: called before every TLS handshake of a
    new connection, it returns the new configuration when the files changed, else ``None``
    (keep the current one)."""

    def __init__(self, files: CertificateFiles) -> None:
        self._files = files
        self._served = files.current.generation

    def __call__(self) -> Any:
        self._files.refresh()
        current = self._files.current
        if current.generation == self._served:
            return None
        self._served = current.generation
        return _certificate_configuration(current)


def server_credentials(files: CertificateFiles) -> grpc.ServerCredentials:
    """gRPC server credentials that follow ``files``; client certificates are required when
    there is a client CA."""
    current = files.current
    return grpc.dynamic_ssl_server_credentials(
        _certificate_configuration(current),
        _CertificateFetcher(files),
        require_client_authentication=current.client_ca is not None,
    )


def _server_context(tls: TlsSettings, verify_mode: ssl.VerifyMode | None = None) -> ssl.SSLContext:
    """``verify_mode`` defaults to requiring client certificates when there is a client CA."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_files(context, tls)
    if verify_mode is None:
        verify_mode = ssl.CERT_REQUIRED if tls.client_ca_file is not None else ssl.CERT_NONE
    context.verify_mode = verify_mode
    context.set_alpn_protocols(["http/1.1"])  # aiohttp serves HTTP/1.1 only
    return context


def _load_files(context: ssl.SSLContext, tls: TlsSettings) -> None:
    context.load_cert_chain(tls.cert_file, tls.key_file, password=lambda: b"")
    if tls.client_ca_file is not None:
        context.load_verify_locations(cafile=tls.client_ca_file)


def server_ssl_context(tls: TlsSettings) -> ssl.SSLContext:
    """A TLS 1.2+ server context from ``tls``; client certificates are required when it has
    a ``client_ca_file``. Raises ``OSError``/``ssl.SSLError`` when the files do not load."""
    return _server_context(tls)


class _ServedContext:
    """The HTTPS context a listener serves, and the live one its SNI callback (called for
    every handshake, with or without SNI) hands each new connection. A reload builds a new
    live context and never loads into one in use: OpenSSL loading into a live context that
    then fails has already dropped its key."""

    def __init__(self, tls: TlsSettings, verify_mode: ssl.VerifyMode) -> None:
        self._verify_mode = verify_mode
        self.served = _server_context(tls, verify_mode)
        self.live = self.served
        self.served.sni_callback = self._select

    def fresh(self, tls: TlsSettings) -> ssl.SSLContext:
        """A new context from the files as they are now; raises when they do not load."""
        return _server_context(tls, self._verify_mode)

    def _select(
        self, connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, served: Any
    ) -> None:
        if self.live is not served:
            connection.context = self.live


class ListenerSecurity:
    """What protects each listener (``grpc``, ``http``, ``metrics``, ``stream``), built once
    from ``settings``: every file is read here, so an unusable one stops start-up. Token
    reloads are timed with ``clock``; refusals are counted on ``metrics``."""

    def __init__(self, settings: SecuritySettings, clock: Clock, metrics: PipelineMetrics) -> None:
        self._settings = settings
        self._metrics = metrics
        tls, auth = settings.tls, settings.auth
        self._certificates = (
            CertificateFiles(tls, clock, lambda: metrics.reload_failed("certificate"))
            if tls is not None
            else None
        )
        # By verify mode. With a client CA the metrics listener lets a client without a
        # certificate finish the handshake, so that probes (which have none) reach /healthz
        # and /readyz; ``client_certificate_middleware`` refuses it every other path.
        self._contexts: dict[ssl.VerifyMode, _ServedContext] = {}
        if tls is not None:
            for listener in tls.listeners:
                mode = self._verify_mode(listener)
                if mode not in self._contexts:
                    self._contexts[mode] = _ServedContext(tls, mode)
        self._context_generation = 0
        self._tokens = (
            TokenFile(
                auth.bearer_token_file,
                auth.reload_seconds,
                clock,
                lambda: metrics.reload_failed("tokens"),
            )
            if auth is not None
            else None
        )

    def refresh(self) -> None:
        """Reload the TLS files if they changed, for the HTTPS listeners' new connections
        too (a removed client CA is no longer trusted there). Call it on the event loop that
        serves them (the server's tick does)."""
        files, tls = self._certificates, self._settings.tls
        if files is None or not self._contexts or tls is None:
            return
        files.refresh()
        if files.current.generation == self._context_generation:
            return
        try:
            fresh = {mode: served.fresh(tls) for mode, served in self._contexts.items()}
        except (OSError, ssl.SSLError) as exc:  # changed again since: the next look retries
            log.error("keeping the previous TLS certificate for HTTPS: %s", exc)
            self._metrics.reload_failed("certificate")
            return
        for mode, context in fresh.items():
            self._contexts[mode].live = context
        self._context_generation = files.current.generation

    def _verify_mode(self, listener: str) -> ssl.VerifyMode:
        tls = self._settings.tls
        if tls is None or tls.client_ca_file is None:
            return ssl.CERT_NONE
        return ssl.CERT_OPTIONAL if listener == "metrics" else ssl.CERT_REQUIRED

    def exposure(self, listener: str) -> str | None:
        """What is wrong with ``listener`` if it is reachable beyond loopback, or ``None``."""
        tls, auth = self._settings.uses_tls(listener), self._settings.uses_auth(listener)
        if not tls and not auth:
            return "without TLS or authentication"
        if not tls:
            return "without TLS: its bearer tokens cross the network in clear text"
        return None

    def grpc_credentials(self, listener: str) -> grpc.ServerCredentials | None:
        """Credentials for a secure port, or ``None`` for plaintext."""
        files = self._certificates
        return server_credentials(files) if files and self._settings.uses_tls(listener) else None

    def grpc_interceptors(self, listener: str) -> tuple[grpc.aio.ServerInterceptor, ...]:
        if self._tokens is None or not self._settings.uses_auth(listener):
            return ()
        return (BearerTokenInterceptor(self._tokens, self._metrics, listener),)

    def ssl_context(self, listener: str) -> ssl.SSLContext | None:
        if not self._settings.uses_tls(listener):
            return None
        return self._contexts[self._verify_mode(listener)].served

    def http_middlewares(
        self, listener: str, open_paths: frozenset[str] = frozenset()
    ) -> tuple[Middleware, ...]:
        middlewares: list[Middleware] = []
        if self._settings.uses_tls(listener) and self._verify_mode(listener) is ssl.CERT_OPTIONAL:
            middlewares.append(client_certificate_middleware(self._metrics, listener, open_paths))
        if self._tokens is not None and self._settings.uses_auth(listener):
            middlewares.append(
                bearer_token_middleware(self._tokens, self._metrics, listener, open_paths)
            )
        return tuple(middlewares)
