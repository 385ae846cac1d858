"""The client-certificate checks of the listeners, beyond the TLS handshake's.

With ``tls.client_ca_file`` the metrics listener lets a client without a certificate finish
the handshake, so that probes reach ``/healthz`` and ``/readyz``:
``client_certificate_middleware`` answers it 403 on every other path. With
``tls.client_names`` too, the certificate must name one of them (``ClientNames``): any other
is answered PERMISSION_DENIED (gRPC, ``ClientNameInterceptor``) or 403 (HTTP,
``client_name_middleware``), with no detail, before any request message or body is read and
whatever its bearer token or method (so it learns nothing of either). Each refusal is counted
with ``PipelineMetrics.auth_failed(listener)`` and told to the listener's
``toolwatch.senders.SenderLog``. ``toolwatch.security.ListenerSecurity`` decides which
listener takes which check.

Threading: the interceptor and middlewares run on the servers' event loop.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

import grpc
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from toolwatch.client_names import certificate_names
from toolwatch.metrics import PipelineMetrics
from toolwatch.senders import SenderLog, grpc_sender, http_sender

__all__ = [
    "ClientNameInterceptor",
    "ClientNames",
    "client_certificate_middleware",
    "client_name_middleware",
]

#: The sender log's reason for the refusals here (``toolwatch.senders``).
PERMISSION_DENIED = "permission_denied"


_Continuation = Callable[[Any], Awaitable[Any]]


def client_certificate_middleware(
    metrics: PipelineMetrics,
    listener: str,
    open_paths: frozenset[str],
    *,
    senders: SenderLog,
) -> Middleware:
    """An aiohttp middleware for a listener whose TLS lets clients without a certificate
    finish the handshake (one that presents a certificate the client CA did not sign never
    does): requests on such a connection are answered 403 with an empty body and counted for
    ``listener``, except those for ``open_paths``. Not 401: RFC 9110 §15.5.2 has a 401 carry
    a ``WWW-Authenticate`` challenge, and none asks for a client certificate; a token would
    not let such a client in either. Refusals are told to ``senders``."""
    told = senders

    @web.middleware
    async def require_certificate(request: web.Request, handler: Handler) -> web.StreamResponse:
        transport = request.transport
        verified = transport is not None and bool(transport.get_extra_info("peercert"))
        if verified or request.path in open_paths:
            return await handler(request)
        metrics.auth_failed(listener)
        sender = http_sender(listener, request)
        told.refused(PERMISSION_DENIED, sender, "no client certificate")
        return web.Response(status=403)

    return require_certificate


class ClientNames:
    """The client certificates a listener accepts beside the client CA's signature: those
    whose subject common name or one of whose DNS, URI (a SPIFFE ID) or email subject
    alternative names is one of ``names``, compared exactly, as written in the certificate.

    The names are read from the certificate itself on every listener (``certificate_names``),
    not from gRPC's auth properties, which end a name at a NUL byte (``otel-collector\\0.evil``
    would read ``otel-collector``), keep only one common name and read other bytes as
    Latin-1: the same certificate is accepted or refused alike on every listener."""

    def __init__(self, names: Iterable[str]) -> None:
        self._names = frozenset(names)

    def admit(self, certificate: bytes | None) -> bool:
        """Whether ``certificate`` (DER or PEM) names an accepted client; ``False`` without
        one, or one that cannot be read."""
        return certificate is not None and not self._names.isdisjoint(
            certificate_names(certificate)
        )

    def admit_grpc(self, auth_context: Mapping[str, Sequence[bytes]]) -> bool:
        """Whether the certificate a gRPC call's connection was verified with (in its
        ``ServicerContext.auth_context()``) names an accepted client."""
        pems = auth_context.get("x509_pem_cert", ())
        return len(pems) == 1 and self.admit(pems[0])


class ClientNameInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc is untyped
    """Answers a call whose client certificate names no accepted client (``ClientNames``)
    PERMISSION_DENIED, with no detail, and counts it for ``listener``.

    An interceptor cannot see the connection's certificate, only the call's handler can (its
    context's ``auth_context``): the check is put in front of the handler. A handler that
    takes one request message is served as one that takes a stream of undecoded messages,
    so the check runs before any message is read (a unary request can be as large as the
    listener's limit). Put it before the token interceptor: the name is then checked before
    the handler that interceptor chose runs, its refusal or a method that does not exist
    included, so a client without an accepted name learns nothing of its token or of the
    methods served. Serves ``grpc.aio`` handlers, which are coroutines or async generators;
    a plain function is refused with ``TypeError`` (it would block the event loop, and its
    context's ``abort`` would not stop it)."""

    def __init__(
        self,
        names: ClientNames,
        metrics: PipelineMetrics,
        listener: str,
        *,
        senders: SenderLog,
    ) -> None:
        self._names = names
        self._metrics = metrics
        self._listener = listener
        self._senders = senders

    async def intercept_service(self, continuation: _Continuation, details: Any) -> Any:
        handler = await continuation(details)
        return self._checked(_UNIMPLEMENTED if handler is None else handler)

    async def _admit(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        if not self._names.admit_grpc(context.auth_context()):
            self._metrics.auth_failed(self._listener)
            sender = grpc_sender(self._listener, context)
            self._senders.refused(PERMISSION_DENIED, sender, _NAMED_NONE)
            await context.abort(grpc.StatusCode.PERMISSION_DENIED)  # raises

    def _checked(self, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        admit = self._admit
        decode = handler.request_deserializer
        for shape in (handler.unary_unary, handler.unary_stream):
            _require_async(shape)
        for shape in (handler.stream_unary, handler.stream_stream):
            _require_async(shape)
        if handler.unary_unary is not None or handler.unary_stream is not None:
            behaviour = handler.unary_unary or handler.unary_stream

            async def one_request(requests: Any, context: Any) -> Any:
                await admit(context)
                async for raw in requests:  # the one message, read once admitted
                    request = decode(raw) if decode is not None else raw
                    return await _finished(behaviour(request, context), context)
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no request message")

            make = (
                grpc.stream_unary_rpc_method_handler
                if handler.unary_unary is not None
                else grpc.stream_stream_rpc_method_handler
            )
            return make(one_request, response_serializer=handler.response_serializer)
        streaming = handler.stream_unary or handler.stream_stream

        async def requests_stream(requests: Any, context: Any) -> Any:
            await admit(context)
            return await _finished(streaming(requests, context), context)

        make = (
            grpc.stream_unary_rpc_method_handler
            if handler.stream_unary is not None
            else grpc.stream_stream_rpc_method_handler
        )
        return make(
            requests_stream,
            request_deserializer=decode,
            response_serializer=handler.response_serializer,
        )


async def _unimplemented(requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
    await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")  # gRPC's words


#: What a method no service serves is answered with, behind the client-name check.
_UNIMPLEMENTED = grpc.stream_stream_rpc_method_handler(_unimplemented)


def _require_async(behaviour: Any) -> None:
    if behaviour is not None and not (
        inspect.iscoroutinefunction(behaviour) or inspect.isasyncgenfunction(behaviour)
    ):
        raise TypeError(f"ClientNameInterceptor serves grpc.aio handlers: {behaviour!r} is sync")


async def _finished(result: Any, context: Any) -> Any:
    """What a handler's behaviour returned, run to its end: a coroutine awaited, the
    responses an async generator yields written to ``context``."""
    if inspect.isasyncgen(result):
        async for response in result:
            await context.write(response)
        return None
    return await result


def client_name_middleware(
    names: ClientNames,
    metrics: PipelineMetrics,
    listener: str,
    open_paths: frozenset[str],
    *,
    senders: SenderLog,
) -> Middleware:
    """An aiohttp middleware answering requests on a connection whose client certificate
    names no accepted client (``ClientNames``), or that shows none, with 403 and an empty
    body, counted for ``listener``, except those for ``open_paths``. Put it after
    ``client_certificate_middleware`` on a listener where a client without a certificate
    finishes the handshake: that refuses such a client first. Refusals are told to
    ``senders``."""
    told = senders

    @web.middleware
    async def require_name(request: web.Request, handler: Handler) -> web.StreamResponse:
        transport = request.transport
        tls = transport.get_extra_info("ssl_object") if transport is not None else None
        certificate = tls.getpeercert(binary_form=True) if tls is not None else None
        if request.path in open_paths or names.admit(certificate):
            return await handler(request)
        metrics.auth_failed(listener)
        told.refused(PERMISSION_DENIED, http_sender(listener, request), _NAMED_NONE)
        return web.Response(status=403)

    return require_name


#: What a refusal for a certificate's names says: the names themselves are the sender's.
_NAMED_NONE = "a client certificate that names no client of tls.client_names"
