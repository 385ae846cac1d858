"""OTLP/HTTP receiver: ``POST /v1/traces`` with protobuf or JSON bodies, optionally gzip- or
deflate-compressed.

Answers per the OTLP/HTTP specification, each with the request's Content-Type as sent
(parameters included): 200 with an ``ExportTraceServiceResponse`` in the
request's encoding (``partial_success`` when spans were rejected); 400 with a
``google.rpc.Status`` holding a ``google.rpc.BadRequest`` for a body that cannot be decoded;
413 when the body exceeds the cap *after* decompression (so a gzip bomb is cut off, not
inflated), or when an OTLP/JSON body holds more JSON values than a body of that cap may
(``otlp_json.MIN_BYTES_PER_VALUE``); 415 for other
content types or encodings; 503 with ``Retry-After`` when the consumer is at capacity,
every request slot is taken (``toolwatch.ingest.slots``: checked before the body is read),
the body did not arrive within the slots' read timeout, the server shut down while the body
was arriving or decoding (the grace over), or the request came once the shutdown had begun
(``toolwatch.ingest.inflight``), as OTLP asks ("the client SHOULD honor the Retry-After
header"). The error answers aiohttp and the
bearer-token check make on the receiver's listener (404, 405, 401) carry a
``google.rpc.Status`` too, as OTLP/HTTP asks of every 4xx and 5xx.
A request that says ``Expect: 100-continue`` is answered 401, 413, 415 or 503 before its
client sends the body when it would be refused whatever the body (``HttpTraceReceiver.expect``).

A request that is not well-formed HTTP (a ``Content-Length`` that is no number, a bad first
chunk size) never reaches a handler: aiohttp's parser answers it 400 in plain text and closes
the connection, and would log an ERROR with a traceback for each, so that any client could
flood the log. ``ProtocolErrorLog`` logs those at DEBUG and counts them as ``invalid``
requests. A chunked body whose framing breaks after a handler started reading it is not
told to the handler by aiohttp's C parser (it queues the error as a next request): it is
answered at the read timeout, 503, like a body that stalls. Its Python parser
(``AIOHTTP_NO_EXTENSIONS``, or a platform without aiohttp's wheels) tells it: answered 400,
the connection closed, counted ``invalid``.

A body is decompressed and decoded in the decoding turn it shares with the gRPC receiver
(``toolwatch.ingest.decode_thread``): one at a time, an OTLP/JSON, compressed or large one
in the decode thread while the event loop serves the rest (a 20 MiB OTLP/JSON body is
seconds of CPU).
What runs there reads only the body and the receiver's settings, and raises what it would
raise on the loop: the answer is the same. The batch is offered to ``consume`` on the loop.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import sys
import time
import zlib
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from aiohttp import HttpVersion11, hdrs, web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Handler
from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc import code_pb2, status_pb2

from toolwatch.engine import Admission
from toolwatch.ingest.decode import (
    DecodedBatch,
    DecodeError,
    DecodeLimitError,
    DecodeOptions,
    decode_protobuf,
)
from toolwatch.ingest.decode_thread import DecodeAbandonedError, DecodeThread
from toolwatch.ingest.inflight import InFlight, ReadAbandonedError
from toolwatch.ingest.otlp_grpc import SpanConsumer, bad_request_status, export_response
from toolwatch.ingest.otlp_json import MIN_BYTES_PER_VALUE, decode_otlp_json
from toolwatch.ingest.slots import RequestSlots
from toolwatch.metrics import PipelineMetrics

__all__ = ["TRACES_PATH", "HttpTraceReceiver", "ProtocolErrorLog"]

TRACES_PATH = "/v1/traces"
_PROTOBUF = "application/x-protobuf"
_JSON = "application/json"
_TRANSPORT = "http"
_GZIP_WBITS = 16 + zlib.MAX_WBITS  # a gzip member (RFC 1952)
_ZLIB_WBITS = zlib.MAX_WBITS  # a zlib stream (RFC 1950): what "deflate" names (RFC 9110)
_RAW_WBITS = -zlib.MAX_WBITS  # bare deflate data (RFC 1951), which some clients send instead
#: The google.rpc code of each HTTP error toolwatch's handler does not answer itself.
_STATUS_CODES = {
    401: code_pb2.UNAUTHENTICATED,
    403: code_pb2.PERMISSION_DENIED,
    404: code_pb2.NOT_FOUND,
    405: code_pb2.UNIMPLEMENTED,
    413: code_pb2.RESOURCE_EXHAUSTED,
    415: code_pb2.INVALID_ARGUMENT,
}
#: Headers of such an answer that a client acts on, kept when its body is replaced.
_KEPT_HEADERS = (hdrs.ALLOW, hdrs.WWW_AUTHENTICATE, hdrs.RETRY_AFTER)
_OVERLOAD_MESSAGE = "toolwatch is at capacity; retry after the Retry-After delay"
_SHUTDOWN_MESSAGE = "toolwatch is shutting down; retry after the Retry-After delay"
_IDENTITY = ("", "identity")
_COMPRESSED = ("gzip", "x-gzip", "deflate")
#: The slot an ``Expect: 100-continue`` check took for its request, until the handler claims it.
_RESERVED: web.RequestKey[bool] = web.RequestKey("toolwatch_reserved_slot", bool)


class ProtocolErrorLog(logging.LoggerAdapter[logging.Logger]):
    """The logger to give aiohttp's request handler (``AppRunner(logger=...)``): a request
    its parser refused (not HTTP as RFC 9112 has it) is logged at DEBUG by the error's kind
    alone (aiohttp's message quotes the line at fault: an ``Authorization`` header, say) and
    handed to ``refused``, not logged as an ERROR with a traceback; so is a body the shutdown
    gave up (``ReadAbandonedError``, already answered); everything else is logged as aiohttp
    logs it."""

    def __init__(self, logger: logging.Logger, refused: Callable[[], None] | None = None) -> None:
        super().__init__(logger, {})
        self._refused = refused

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, Any]:
        return msg, kwargs

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        # aiohttp logs a refused request with .exception, or (a connection's first request
        # with a bad method) with .debug: both pass the error as exc_info.
        error = kwargs.get("exc_info")
        if error is True:
            error = sys.exc_info()[1]
        if isinstance(error, HttpProcessingError):
            if self._refused is not None:
                self._refused()
            name, code = type(error).__name__, error.code
            super().log(logging.DEBUG, "refused a request that is not HTTP: %s (%d)", name, code)
            return
        if isinstance(error, ReadAbandonedError):
            # The shutdown gave the body up and the request was answered (503, counted
            # aborted); aiohttp, reading what is left of it before closing, meets the error
            # again: no fault to report.
            super().log(logging.DEBUG, "shutdown: gave up a request body still arriving")
            return
        super().log(level, msg, *args, **kwargs)


class _RejectError(Exception):
    """An HTTP error answer: status and message; the field at fault (a 400's body field, a
    415's header)."""

    def __init__(self, status: int, message: str, field: str = "body", close: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.field = field
        self.close = close  # what follows on the connection cannot be read as a request


@dataclass(frozen=True, slots=True)
class HttpTraceReceiver:
    """The ``/v1/traces`` route. ``max_request_bytes`` caps the body after decompression;
    the app must also set the aiohttp ``client_max_size`` to it (the cap before). Each
    request holds one of ``slots`` (shared with the gRPC receiver) while it is read,
    decoded and handled; its body is decompressed and decoded in ``decoding``'s turn (shared
    too), and ``consume`` runs on the event loop. ``in_flight`` holds the requests being
    handled, for the app's shutdown, which refuses new ones and gives up on bodies still
    arriving when its grace is over."""

    consume: SpanConsumer
    options: DecodeOptions
    metrics: PipelineMetrics
    max_request_bytes: int
    retry_after_seconds: float
    slots: RequestSlots
    decoding: DecodeThread
    in_flight: InFlight

    def add_routes(self, app: web.Application) -> None:
        """The route, its ``Expect: 100-continue`` check (``expect``), and (outermost, so
        that it sees the token check's answers) the middleware that gives every error answer
        a ``google.rpc.Status`` body and every answer the request's Content-Type."""
        app.router.add_post(TRACES_PATH, self.handle, expect_handler=self.expect)
        app.middlewares.insert(0, _status_bodies)

    async def expect(self, request: web.Request) -> web.StreamResponse | None:
        """A request that says ``Expect: 100-continue`` (curl's for bodies over 1 MiB, .NET
        Framework's for every POST) is checked before its client sends the body: the app's
        middlewares (the token check: 401) run around the checks that need no body
        (shutdown, content type and coding: 415, a ``Content-Length`` over
        ``max_request_bytes``: 413, a request slot: 503 + ``Retry-After``), and a refusal
        is the answer instead of ``100 Continue`` (RFC 9110 §10.1.1), the connection closed
        (the client may send the body or not). aiohttp's own handler answered 100 first,
        and a client uploaded 20 MiB to be told 413 or 503.

        Admitted, the request holds the slot it was checked for (``_RESERVED``): the
        handler claims it instead of taking another, so a client told to go on is not
        refused for want of one once its body is sent, and the slot is counted once. One
        the handler never claims (a middleware refused the request the second time, the
        connection went away) is given back when the request's task ends."""
        if request.version < HttpVersion11:
            return None  # RFC 9110 §10.1.1: an HTTP/1.0 request's expectation is ignored
        go_on = web.Response(status=100)

        async def before_body(request: web.Request) -> web.StreamResponse:
            expected = request.headers.get(hdrs.EXPECT, "")
            if expected.lower() != "100-continue":  # RFC 9110 §10.1.1: 417 for another
                raise web.HTTPExpectationFailed(reason=f"unknown expectation {expected!r:.40}")
            refusal = self._refused_unread(request)
            return go_on if refusal is None else refusal

        answer = await _behind_middlewares(request.app, before_body)(request)
        if answer is not go_on:
            answer.force_close()
            return answer
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0  # as aiohttp's handler: the answer's head is not out
        return None

    def _refused_unread(self, request: web.Request) -> web.Response | None:
        """The answer to a request whose body will not be read, counted; ``None`` once a
        slot is taken for it (``_RESERVED``, given back if never claimed)."""
        started = time.perf_counter()
        content_type = request.content_type
        length = request.content_length
        encoding = _content_encoding(request)
        if self.in_flight.draining:
            outcome, response = "aborted", self._overloaded(content_type, _SHUTDOWN_MESSAGE)
        elif (problem := _unsupported(request, content_type, encoding)) is not None:
            outcome, response = "refused", _status_response(problem, content_type)
        elif length is not None and length > self.max_request_bytes:
            problem = _RejectError(413, f"body exceeds {self.max_request_bytes} bytes")
            outcome, response = "refused", _status_response(problem, content_type)
        elif not self.slots.take():
            outcome, response = "overloaded", self._overloaded(content_type)
        else:
            request[_RESERVED] = True
            task = asyncio.current_task()
            assert task is not None  # aiohttp handles each request in a task of its own
            task.add_done_callback(lambda _: self._unclaimed(request))
            return None
        self.metrics.request_handled(_TRANSPORT, outcome, time.perf_counter() - started)
        return response

    def _unclaimed(self, request: web.Request) -> None:
        if request.pop(_RESERVED, False):
            self.slots.give()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        reserved = request.pop(_RESERVED, False)  # the slot ``expect`` took, now the handler's
        if self.in_flight.draining:
            # The shutdown has closed the listener: this came on a connection kept alive.
            # Refused unread and the connection closed, so that the client sends it to
            # another instance, as gRPC refuses a call once it stops.
            if reserved:
                self.slots.give()
            self.metrics.request_handled(_TRANSPORT, "aborted", 0.0)
            response = self._overloaded(request.content_type, _SHUTDOWN_MESSAGE)
            response.force_close()
            return response
        with self.in_flight.handling():
            return await self._answer(request, reserved)

    async def _answer(self, request: web.Request, reserved: bool) -> web.StreamResponse:
        started = time.perf_counter()
        content_type = request.content_type
        try:
            outcome, response = await self._handle(request, content_type, reserved)
        except _RejectError as reject:
            outcome = "invalid" if reject.status == 400 else "refused"
            response = _status_response(reject, content_type)
            if reject.close:
                response.force_close()
        except ConnectionError:
            # The client went away before its whole body arrived: nothing was taken from it,
            # and there is no one to answer. Counted; not aiohttp's ERROR log with a traceback.
            outcome = "aborted"
            response = web.Response(status=400)
            response.force_close()
        except (DecodeAbandonedError, ReadAbandonedError):
            # Shutdown, the grace over while the body arrived, decoded or waited for its
            # turn: none of its spans was taken, so the client may send them again elsewhere.
            outcome = "aborted"
            response = self._overloaded(content_type, _SHUTDOWN_MESSAGE)
            response.force_close()
        except asyncio.CancelledError:  # shutdown cut the request off: nothing was taken
            self.metrics.request_handled(_TRANSPORT, "aborted", time.perf_counter() - started)
            raise
        self.metrics.request_handled(_TRANSPORT, outcome, time.perf_counter() - started)
        return response

    async def _handle(
        self, request: web.Request, content_type: str, reserved: bool
    ) -> tuple[str, web.Response]:
        """The request's outcome (``ok``, ``overloaded``, ``timeout``) and its answer.
        ``reserved``: the request holds the slot its ``Expect`` check took."""
        if content_type not in (_PROTOBUF, _JSON):
            if reserved:  # not so: the check refuses these, but a slot is never lost
                self.slots.give()
            raise _unsupported_type(request, content_type)
        if not reserved and not self.slots.take():
            return "overloaded", self._overloaded(content_type)
        try:
            raw = await self._read(request)
        except TimeoutError:
            self.slots.give()
            # Retryable, as OTLP/HTTP lets a client retry only 429, 502, 503 and 504. The rest
            # of the body is not waited for: the connection closes with the answer.
            response = self._overloaded(content_type, _read_timeout_message(self.slots))
            response.force_close()  # what is left of the body is not a next request
            return "timeout", response
        except BaseException:
            self.slots.give()
            raise
        return await self._export(raw, _content_encoding(request), content_type)

    async def _export(
        self, raw: bytes, encoding: str, content_type: str
    ) -> tuple[str, web.Response]:
        """``raw`` decompressed, decoded and offered to the consumer in the decoding turn,
        which gives back the slot ``_handle`` took: once the spans are taken, or, when this
        request stops waiting for a decode in the thread, once the thread is done with it."""
        decoded = functools.partial(self._decoded, raw, encoding, content_type)
        # Decoded as one of the largest, in the thread: a compressed body, whose size once
        # inflated is not known before (inflating it is work the loop should not do either),
        # and any OTLP/JSON body, costly however small (``toolwatch.ingest.decode_thread``).
        costly = encoding in _COMPRESSED or content_type == _JSON
        size = self.max_request_bytes if costly else len(raw)
        async with self.decoding.turn(self.slots.give) as turn:
            batch = await turn.decode(decoded, size)
            receipt = self.consume(batch, _TRANSPORT)
        if receipt.admission is Admission.OVERLOADED:
            return "overloaded", self._overloaded(content_type)
        return "ok", _message_response(200, export_response(batch, receipt), content_type)

    async def _read(self, request: web.Request) -> bytes:
        """The body as sent; ``TimeoutError`` when it did not arrive within the slots' read
        timeout (decoding is not timed: it is no longer the client's doing),
        ``ReadAbandonedError`` when the shutdown's grace ended first."""
        try:
            with self.in_flight.reading(request.content):
                async with asyncio.timeout(self.slots.read_timeout):
                    return await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise _RejectError(413, f"body exceeds {self.max_request_bytes} bytes") from None
        except (web.RequestPayloadError, HttpProcessingError) as error:
            # The body's framing broke while it was read (aiohttp's Python parser tells the
            # handler; its C parser does not, see the module's docstring). The message
            # names the kind alone: aiohttp's quotes the bytes at fault.
            message = _framing_message(error)
            raise _RejectError(400, message, "Transfer-Encoding", close=True) from None

    def _decoded(self, raw: bytes, encoding: str, content_type: str) -> DecodedBatch:
        """The body decompressed and decoded; in the decode thread when it is large
        (``toolwatch.ingest.decode_thread``), so it touches nothing but its arguments and
        this receiver's settings. Raises ``_RejectError`` for an answer other than 200."""
        return self._decode(self._decompress(raw, encoding), content_type)

    def _overloaded(self, content_type: str, message: str = _OVERLOAD_MESSAGE) -> web.Response:
        # Retry-After is whole seconds (RFC 9110 §10.2.3): round up, never ask for less than
        # the configured delay. The body is a google.rpc.Status, as for every OTLP/HTTP 5xx.
        status = status_pb2.Status(code=code_pb2.UNAVAILABLE, message=message)
        response = _message_response(503, status, content_type)
        response.headers["Retry-After"] = str(max(1, math.ceil(self.retry_after_seconds)))
        return response

    def _decompress(self, raw: bytes, encoding: str) -> bytes:
        if encoding in _IDENTITY:
            return raw
        if encoding in ("gzip", "x-gzip"):  # RFC 9110 §8.4.1.3: x-gzip is gzip
            return self._inflate(raw, "gzip", _GZIP_WBITS, members=True)
        if encoding == "deflate":  # the OpenTelemetry SDKs' Compression.Deflate
            return self._inflate(raw, "deflate", _deflate_wbits(raw), members=False)
        raise _unsupported_encoding(encoding)

    def _inflate(self, raw: bytes, name: str, wbits: int, members: bool) -> bytes:
        """``raw`` decompressed, never past the cap. RFC 1952 §2.2: a gzip body is one or
        more members, decompressed one after another (what follows the first is not ignored:
        it may hold spans), and the cap counts them all; a deflate body is one stream."""
        parts: list[bytes] = []
        size, rest = 0, raw
        while rest:
            inflater = zlib.decompressobj(wbits=wbits)
            try:
                part = inflater.decompress(rest, self.max_request_bytes + 1 - size)
            except zlib.error as exc:
                where = f" (member {len(parts) + 1})" if parts else ""
                raise _RejectError(400, f"body is not valid {name}{where}: {exc}") from None
            size += len(part)
            if size > self.max_request_bytes:
                raise _RejectError(413, f"decompressed body exceeds {self.max_request_bytes} bytes")
            if not inflater.eof:
                raise _RejectError(400, f"body is not valid {name}: the stream is truncated")
            parts.append(part)
            rest = inflater.unused_data
            if rest and not members:
                raise _RejectError(400, f"body is not valid {name}: data after the stream")
        if not parts:
            raise _RejectError(400, f"body is not valid {name}: it is empty")
        return b"".join(parts)

    def _decode(self, body: bytes, content_type: str) -> DecodedBatch:
        try:
            if content_type == _JSON:
                limit = self.max_request_bytes // MIN_BYTES_PER_VALUE
                return decode_otlp_json(body, self.options, limit)
            return decode_protobuf(body, self.options)
        except DecodeLimitError as exc:  # valid, but too costly: a limit, not bad data
            raise _RejectError(413, str(exc)) from None
        except DecodeError as exc:
            raise _RejectError(400, str(exc), exc.field) from None


def _content_encoding(request: web.Request) -> str:
    return request.headers.get(hdrs.CONTENT_ENCODING, "identity").strip().lower()


def _unsupported_type(request: web.Request, content_type: str) -> _RejectError:
    sent = request.headers.get(hdrs.CONTENT_TYPE)  # aiohttp's default is not the client's
    said = f"content type {content_type!r} is not" if sent else "no content type: send"
    return _RejectError(415, f"{said} {_PROTOBUF} or {_JSON}")


def _unsupported_encoding(encoding: str) -> _RejectError:
    message = f"content encoding {encoding!r} is not gzip, deflate or identity"
    return _RejectError(415, message, hdrs.CONTENT_ENCODING)


def _unsupported(request: web.Request, content_type: str, encoding: str) -> _RejectError | None:
    """Why a request will be refused 415 whatever its body, if it will."""
    if content_type not in (_PROTOBUF, _JSON):
        return _unsupported_type(request, content_type)
    if encoding not in _IDENTITY and encoding not in _COMPRESSED:
        return _unsupported_encoding(encoding)
    return None


def _behind_middlewares(app: web.Application, handler: Handler) -> Handler:
    """``handler`` behind ``app``'s middlewares, the first outermost, as aiohttp puts a
    route's handler behind them (it runs an expect handler before them)."""
    for middleware in reversed(app.middlewares):
        handler = functools.partial(middleware, handler=handler)
    return handler


def _deflate_wbits(raw: bytes) -> int:
    """A zlib stream's, or bare deflate data's: a zlib header is a deflate method byte and
    a check value that makes the first two bytes a multiple of 31 (RFC 1950 §2.2)."""
    if len(raw) >= 2 and raw[0] & 0x0F == 8 and (raw[0] << 8 | raw[1]) % 31 == 0:
        return _ZLIB_WBITS
    return _RAW_WBITS


@web.middleware
async def _status_bodies(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Give an error answer that is not already one (aiohttp's own, a middleware's) a
    ``google.rpc.Status`` body in the request's encoding, keeping its status and the
    headers a client acts on. A 401's or 403's Status says nothing more than its code."""
    try:
        response = await handler(request)
    except web.HTTPException as error:
        if error.status < 400:
            raise
        response = web.Response(status=error.status, reason=error.reason, headers=error.headers)
    if response.status < 400 or response.content_type in (_PROTOBUF, _JSON):
        _echo_content_type(request, response)
        return response
    code = _STATUS_CODES.get(response.status, code_pb2.UNKNOWN)
    message = "" if response.status in (401, 403) else _error_message(request, response)
    encoding = _JSON if request.content_type == _JSON else _PROTOBUF
    answer = _message_response(
        response.status, status_pb2.Status(code=code, message=message), encoding
    )
    for name in _KEPT_HEADERS:
        if name in response.headers:
            answer.headers[name] = response.headers[name]
    if response.keep_alive is False:  # None until prepared: closed only when it was forced
        answer.force_close()
    _echo_content_type(request, answer)
    return answer


def _echo_content_type(request: web.Request, response: web.StreamResponse) -> None:
    """OTLP/HTTP: "The server MUST use the same Content-Type in the response as it received
    in the request": the request's header as sent, parameters included (``application/json;
    charset=utf-8``), on an answer in its encoding. A value that is not printable ASCII
    (aiohttp reads headers as UTF-8) is answered as the bare media type."""
    sent = request.headers.get(hdrs.CONTENT_TYPE)
    if sent is None or not (sent.isascii() and sent.isprintable()):
        return
    if response.content_type == request.content_type and sent != response.content_type:
        response.headers[hdrs.CONTENT_TYPE] = sent


def _error_message(request: web.Request, response: web.StreamResponse) -> str:
    if response.status in (404, 405):
        return (
            f"{request.method} {request.path}: {response.reason}; "
            f"OTLP traces are sent as POST {TRACES_PATH}"
        )
    return f"{request.method} {request.path}: {response.reason}"


def _framing_message(error: Exception) -> str:
    """Named by the parser's error kind (``RequestPayloadError`` wraps it)."""
    kind = type(error.__cause__ or error).__name__
    return f"the request body's HTTP framing is broken ({kind}); nothing was read"


def _read_timeout_message(slots: RequestSlots) -> str:
    return f"the request body was not received within {slots.read_timeout:g} s; retry"


def _message_response(status: int, message: Message, content_type: str) -> web.Response:
    if content_type == _JSON:
        # As bytes: given text, aiohttp would add "; charset=utf-8", and OTLP asks for the
        # request's Content-Type exactly (``_echo_content_type``; the Collector sends it
        # bare and reads a partial success only then).
        text = json_format.MessageToJson(message, indent=None)
        return web.Response(status=status, body=text.encode(), content_type=_JSON)
    return web.Response(status=status, body=message.SerializeToString(), content_type=_PROTOBUF)


def _status_response(reject: _RejectError, content_type: str) -> web.Response:
    """OTLP/HTTP: error bodies are a ``google.rpc.Status`` in the request's encoding; a 400's
    details hold a ``BadRequest`` naming the bad data."""
    if reject.status == 400:
        body = bad_request_status(DecodeError(str(reject), reject.field))
    else:
        code = _STATUS_CODES.get(reject.status, code_pb2.FAILED_PRECONDITION)
        body = status_pb2.Status(code=code, message=str(reject))
    encoding = content_type if content_type in (_PROTOBUF, _JSON) else _PROTOBUF
    response = _message_response(reject.status, body, encoding)
    if reject.status == 415 and reject.field == "Content-Encoding":
        # RFC 7694 §3: a 415 for the request's content coding names the codings accepted.
        response.headers[hdrs.ACCEPT_ENCODING] = "gzip, deflate, identity"
    return response
