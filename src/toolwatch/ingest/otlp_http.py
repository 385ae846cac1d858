"""OTLP/HTTP receiver: ``POST /v1/traces`` with protobuf or JSON bodies, optionally compressed
(gzip, deflate, zlib or zstd: ``toolwatch.ingest.http_bodies``).

Answers per the OTLP/HTTP specification, each with the request's Content-Type as sent
(parameters included): 200 with an ``ExportTraceServiceResponse`` in the
request's encoding (``partial_success`` when spans were rejected); 400 with a
``google.rpc.Status`` holding a ``google.rpc.BadRequest`` for a body that cannot be decoded;
413 when the body exceeds the cap *after* decompression (so a gzip or zstd bomb is cut off, not
inflated), or when an OTLP/JSON body holds more JSON values than a body of that cap may
(``otlp_json.MIN_BYTES_PER_VALUE``); 415 for other
content types or encodings (zstd too on a Python without it), before the body is read; 503
with ``Retry-After`` when the consumer is at capacity,
every request slot is taken (``toolwatch.ingest.slots``: checked before the body is read),
the body did not arrive within the slots' read timeout, the server shut down while the body
was arriving or decoding (the grace over), or the request came once the shutdown had begun
(``toolwatch.ingest.inflight``), as OTLP asks ("the client SHOULD honor the Retry-After
header"). The error answers aiohttp and the
bearer-token check make on the receiver's listener (404, 405, 401) carry a
``google.rpc.Status`` too, as OTLP/HTTP asks of every 4xx and 5xx.
A request that says ``Expect: 100-continue`` is answered 401, 413, 415 or 503 before its
client sends the body when it would be refused whatever the body (``HttpTraceReceiver.expect``).

A request aiohttp's parser refuses never reaches a handler: a head that is not well-formed
HTTP (a ``Content-Length`` that is no number, a character HTTP does not allow) or past
``listeners.HEAD_LIMITS`` (64 KiB a line, 128 header fields), and a chunked body whose
framing breaks (a chunk size that is no hex number, a chunk longer than its size said) in
the packets that brought its head. aiohttp's parser refuses it and closes the connection,
answered 400 with a ``google.rpc.Status`` saying which of those it is and quoting nothing
of the request (``listeners.HeadRefusingHandler``, ``http_answers.status_refusal``:
aiohttp's own answer, plain text, quoted the line at fault, a token with it), and would log
an ERROR with a traceback for each, so that any client could flood the log.
``ProtocolErrorLog`` logs those at DEBUG and counts them as ``invalid`` requests; the
handler tells the sender log who sent them (``invalid_head``). A chunked
body whose framing breaks after a handler started reading it is not told to the handler by
aiohttp's C parser (it queues the error as a next request): it is answered at the read
timeout, 503, like a body that stalls. Its Python parser (``AIOHTTP_NO_EXTENSIONS``, or a
platform without aiohttp's wheels) tells it: answered 400, the connection closed, counted
``invalid``.

Each refusal (a request answered 400, 413, 415 or 503, rejected spans) is also told to a
``toolwatch.senders.SenderLog``, which logs who sent it, a line per reason at most so often.

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
import math
import time
from dataclasses import dataclass

from aiohttp import HttpVersion11, hdrs, web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Handler
from google.protobuf import json_format
from google.protobuf.message import DecodeError as UnreadableMessage
from google.rpc import code_pb2, status_pb2

from toolwatch.engine import Admission
from toolwatch.ingest.decode_requests import decode_protobuf
from toolwatch.ingest.decode_thread import DecodeAbandonedError, DecodeThread
from toolwatch.ingest.decode_types import DecodedBatch, DecodeError, DecodeLimitError, DecodeOptions
from toolwatch.ingest.http_answers import (
    COMPRESSED,
    JSON,
    TRACES_PATH,
    ProtocolErrorLog,
    RejectError,
    content_encoding,
    message_response,
    status_bodies,
    status_response,
    unsupported,
)
from toolwatch.ingest.http_bodies import decompress
from toolwatch.ingest.inflight import InFlight, ReadAbandonedError
from toolwatch.ingest.otlp_grpc import SpanConsumer, export_response, tell_rejected
from toolwatch.ingest.otlp_json import MIN_BYTES_PER_VALUE, decode_otlp_json
from toolwatch.ingest.slots import RequestSlots
from toolwatch.listeners import framing_message
from toolwatch.metrics import PipelineMetrics
from toolwatch.senders import SenderLog, SenderOf, http_sender

__all__ = ["TRACES_PATH", "HttpTraceReceiver", "ProtocolErrorLog"]

_TRANSPORT = "http"
_OVERLOAD_MESSAGE = "toolwatch is at capacity; retry after the Retry-After delay"
_SHUTDOWN_MESSAGE = "toolwatch is shutting down; retry after the Retry-After delay"
#: The slot an ``Expect: 100-continue`` check took for its request, until the handler claims it.
_RESERVED: web.RequestKey[bool] = web.RequestKey("toolwatch_reserved_slot", bool)


@dataclass(frozen=True, slots=True)
class HttpTraceReceiver:
    """The ``/v1/traces`` route. ``max_request_bytes`` caps the body after decompression;
    the app must also set the aiohttp ``client_max_size`` to it (the cap before). Each
    request holds one of ``slots`` (shared with the gRPC receiver) while it is read,
    decoded and handled; its body is decompressed and decoded in ``decoding``'s turn (shared
    too), and ``consume`` runs on the event loop. ``in_flight`` holds the requests being
    handled, for the app's shutdown, which refuses new ones and gives up on bodies still
    arriving when its grace is over. ``senders`` is told of each refusal, with its sender."""

    consume: SpanConsumer
    options: DecodeOptions
    metrics: PipelineMetrics
    max_request_bytes: int
    retry_after_seconds: float
    slots: RequestSlots
    decoding: DecodeThread
    in_flight: InFlight
    senders: SenderLog

    def add_routes(self, app: web.Application) -> None:
        """The route, its ``Expect: 100-continue`` check (``expect``), and (outermost, so
        that it sees the token check's answers) the middleware that gives every error answer
        a ``google.rpc.Status`` body and every answer the request's Content-Type."""
        app.router.add_post(TRACES_PATH, self.handle, expect_handler=self.expect)
        app.middlewares.insert(0, status_bodies)

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
        encoding = content_encoding(request)
        if self.in_flight.draining:
            outcome, response = "aborted", self._overloaded(content_type, _SHUTDOWN_MESSAGE)
        elif (problem := unsupported(request, content_type, encoding)) is not None:
            outcome, response = "refused", status_response(problem, content_type)
        elif length is not None and length > self.max_request_bytes:
            problem = RejectError(413, f"body exceeds {self.max_request_bytes} bytes")
            outcome, response = "refused", status_response(problem, content_type)
        elif not self.slots.take():
            outcome, response = "overloaded", self._overloaded(content_type)
        else:
            request[_RESERVED] = True
            task = asyncio.current_task()
            assert task is not None  # aiohttp handles each request in a task of its own
            task.add_done_callback(lambda _: self._unclaimed(request))
            return None
        self.metrics.request_handled(_TRANSPORT, outcome, time.perf_counter() - started)
        self._tell(outcome, request, response)
        return response

    def _tell(self, outcome: str, request: web.Request, response: web.Response) -> None:
        """Tell the sender log of a request refused for its client's doing or for load (not
        one the shutdown cut off: ``aborted``), with the message it was answered."""
        reason = _REFUSALS.get(outcome)
        if reason is not None:
            sender = http_sender(_TRANSPORT, request)
            self.senders.refused(reason, sender, _answered(response))

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
        except RejectError as reject:
            outcome = "invalid" if reject.status == 400 else "refused"
            response = status_response(reject, content_type)
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
        self._tell(outcome, request, response)
        return response

    async def _handle(
        self, request: web.Request, content_type: str, reserved: bool
    ) -> tuple[str, web.Response]:
        """The request's outcome (``ok``, ``overloaded``, ``timeout``) and its answer.
        ``reserved``: the request holds the slot its ``Expect`` check took."""
        # Before the body is read, as ``expect`` checks them: a client that did not ask
        # whether to send it is not made to upload 20 MiB to be told 415. What it sends
        # still is not a next request: the answer says Connection: close.
        if (problem := unsupported(request, content_type, content_encoding(request))) is not None:
            if reserved:  # not so: the check refuses these, but a slot is never lost
                self.slots.give()
            problem.close = True
            raise problem
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
        sender = http_sender(_TRANSPORT, request)
        return await self._export(raw, content_encoding(request), content_type, sender)

    async def _export(
        self, raw: bytes, encoding: str, content_type: str, sender: SenderOf
    ) -> tuple[str, web.Response]:
        """``raw`` decompressed, decoded and offered to the consumer in the decoding turn,
        which gives back the slot ``_handle`` took: once the spans are taken, or, when this
        request stops waiting for a decode in the thread, once the thread is done with it."""
        decoded = functools.partial(self._decoded, raw, encoding, content_type)
        # Decoded as one of the largest, in the thread: a compressed body, whose size once
        # inflated is not known before (inflating it is work the loop should not do either),
        # and any OTLP/JSON body, costly however small (``toolwatch.ingest.decode_thread``).
        costly = encoding in COMPRESSED or content_type == JSON
        size = self.max_request_bytes if costly else len(raw)
        async with self.decoding.turn(self.slots.give) as turn:
            batch = await turn.decode(decoded, size)
            receipt = self.consume(batch, _TRANSPORT)
        if receipt.admission is Admission.OVERLOADED:
            return "overloaded", self._overloaded(content_type)
        tell_rejected(self.senders, batch, sender)
        return "ok", message_response(200, export_response(batch, receipt), content_type)

    async def _read(self, request: web.Request) -> bytes:
        """The body as sent; ``TimeoutError`` when it did not arrive within the slots' read
        timeout (decoding is not timed: it is no longer the client's doing),
        ``ReadAbandonedError`` when the shutdown's grace ended first."""
        try:
            with self.in_flight.reading(request.content):
                async with asyncio.timeout(self.slots.read_timeout):
                    return await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise RejectError(413, f"body exceeds {self.max_request_bytes} bytes") from None
        except (web.RequestPayloadError, HttpProcessingError) as error:
            # The body's framing broke while it was read (aiohttp's Python parser tells the
            # handler; its C parser does not, see the module's docstring). The message
            # names the kind alone: aiohttp's quotes the bytes at fault.
            message = framing_message(error)
            raise RejectError(400, message, "Transfer-Encoding", close=True) from None

    def _decoded(self, raw: bytes, encoding: str, content_type: str) -> DecodedBatch:
        """The body decompressed and decoded; in the decode thread when it is large
        (``toolwatch.ingest.decode_thread``), so it touches nothing but its arguments and
        this receiver's settings. Raises ``RejectError`` for an answer other than 200."""
        return self._decode(decompress(raw, encoding, self.max_request_bytes), content_type)

    def _overloaded(self, content_type: str, message: str = _OVERLOAD_MESSAGE) -> web.Response:
        # Retry-After is whole seconds (RFC 9110 §10.2.3): round up, never ask for less than
        # the configured delay. The body is a google.rpc.Status, as for every OTLP/HTTP 5xx.
        status = status_pb2.Status(code=code_pb2.UNAVAILABLE, message=message)
        response = message_response(503, status, content_type)
        response.headers["Retry-After"] = str(max(1, math.ceil(self.retry_after_seconds)))
        return response

    def _decode(self, body: bytes, content_type: str) -> DecodedBatch:
        try:
            if content_type == JSON:
                limit = self.max_request_bytes // MIN_BYTES_PER_VALUE
                return decode_otlp_json(body, self.options, limit)
            return decode_protobuf(body, self.options)
        except DecodeLimitError as exc:  # valid, but too costly: a limit, not bad data
            raise RejectError(413, str(exc)) from None
        except DecodeError as exc:
            raise RejectError(400, str(exc), exc.field) from None


#: The sender log's reason for each outcome of a request it is told of.
_REFUSALS = {
    "invalid": "invalid_request",
    "refused": "refused_request",
    "overloaded": "overloaded",
    "timeout": "slow_request",
}


def _answered(response: web.Response) -> str:
    """The message of a refusal's ``google.rpc.Status`` body (in protobuf or JSON, as its
    request was), else its HTTP reason."""
    body, status = response.body, status_pb2.Status()
    try:
        if not isinstance(body, bytes):
            return str(response.reason)
        if response.content_type == JSON:
            json_format.Parse(body, status, ignore_unknown_fields=True)
        else:
            status.ParseFromString(body)
    except (json_format.ParseError, UnreadableMessage):  # our own answer: never so
        return str(response.reason)
    return status.message or str(response.reason)


def _behind_middlewares(app: web.Application, handler: Handler) -> Handler:
    """``handler`` behind ``app``'s middlewares, the first outermost, as aiohttp puts a
    route's handler behind them (it runs an expect handler before them)."""
    for middleware in reversed(app.middlewares):
        handler = functools.partial(middleware, handler=handler)
    return handler


def _read_timeout_message(slots: RequestSlots) -> str:
    return f"the request body was not received within {slots.read_timeout:g} s; retry"
