"""OTLP/HTTP receiver: ``POST /v1/traces`` with protobuf or JSON bodies, optionally gzipped.

Answers per the OTLP/HTTP specification: 200 with an ``ExportTraceServiceResponse`` in the
request's encoding (``partial_success`` when spans were rejected); 400 with a
``google.rpc.Status`` holding a ``google.rpc.BadRequest`` for a body that cannot be decoded;
413 when the body exceeds the cap *after* decompression (so a gzip bomb is cut off, not
inflated); 415 for other content types or encodings; 503 with ``Retry-After`` when the
consumer is at capacity, every request slot is taken (``toolwatch.ingest.slots``: checked
before the body is read) or the body did not arrive within the slots' read timeout, as OTLP
asks ("the client SHOULD honor the Retry-After header").
"""

from __future__ import annotations

import asyncio
import math
import time
import zlib
from dataclasses import dataclass

from aiohttp import web
from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc import code_pb2, status_pb2

from toolwatch.engine import Admission
from toolwatch.ingest.decode import (
    DecodedBatch,
    DecodeError,
    DecodeOptions,
    decode_protobuf,
    decode_request,
)
from toolwatch.ingest.otlp_grpc import SpanConsumer, bad_request_status, export_response
from toolwatch.ingest.otlp_json import parse_otlp_json
from toolwatch.ingest.slots import RequestSlots
from toolwatch.metrics import PipelineMetrics

__all__ = ["TRACES_PATH", "HttpTraceReceiver"]

TRACES_PATH = "/v1/traces"
_PROTOBUF = "application/x-protobuf"
_JSON = "application/json"
_TRANSPORT = "http"
_OVERLOAD_MESSAGE = "toolwatch is at capacity; retry after the Retry-After delay"


class _RejectError(Exception):
    """An HTTP error answer: status and message; for a 400, the field at fault."""

    def __init__(self, status: int, message: str, field: str = "body") -> None:
        super().__init__(message)
        self.status = status
        self.field = field


@dataclass(frozen=True, slots=True)
class HttpTraceReceiver:
    """The ``/v1/traces`` route. ``max_request_bytes`` caps the body after decompression;
    the app must also set the aiohttp ``client_max_size`` to it (the cap before). Each
    request holds one of ``slots`` (shared with the gRPC receiver) while it is read and
    handled."""

    consume: SpanConsumer
    options: DecodeOptions
    metrics: PipelineMetrics
    max_request_bytes: int
    retry_after_seconds: float
    slots: RequestSlots

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post(TRACES_PATH, self.handle)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        content_type = request.content_type
        try:
            response = await self._handle(request, content_type)
            outcome = "overloaded" if response.status == 503 else "ok"
        except _RejectError as reject:
            outcome = "invalid" if reject.status == 400 else "refused"
            response = _status_response(reject, content_type)
        self.metrics.request_handled(_TRANSPORT, outcome, time.perf_counter() - started)
        return response

    async def _handle(self, request: web.Request, content_type: str) -> web.Response:
        if content_type not in (_PROTOBUF, _JSON):
            raise _RejectError(415, f"content type {content_type!r} is not {_PROTOBUF} or {_JSON}")
        if not self.slots.take():
            return self._overloaded(content_type)
        try:
            batch = await self._read(request, content_type)
        except TimeoutError:
            # Retryable, as OTLP/HTTP lets a client retry only 429, 502, 503 and 504. The rest
            # of the body is not waited for: the connection closes with the answer.
            response = self._overloaded(content_type, _read_timeout_message(self.slots))
            response.force_close()  # what is left of the body is not a next request
            return response
        finally:
            self.slots.give()
        if self.consume(batch, _TRANSPORT) is Admission.OVERLOADED:
            return self._overloaded(content_type)
        return _message_response(200, export_response(batch), content_type)

    async def _read(self, request: web.Request, content_type: str) -> DecodedBatch:
        """The body, decoded; ``TimeoutError`` when it did not arrive within the slots' read
        timeout (decoding is not timed: it is no longer the client's doing)."""
        try:
            async with asyncio.timeout(self.slots.read_timeout):
                raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise _RejectError(413, f"body exceeds {self.max_request_bytes} bytes") from None
        body = self._decompress(raw, request.headers.get("Content-Encoding", "identity"))
        return self._decode(body, content_type)

    def _overloaded(self, content_type: str, message: str = _OVERLOAD_MESSAGE) -> web.Response:
        # Retry-After is whole seconds (RFC 9110 §10.2.3): round up, never ask for less than
        # the configured delay. The body is a google.rpc.Status, as for every OTLP/HTTP 5xx.
        status = status_pb2.Status(code=code_pb2.UNAVAILABLE, message=message)
        response = _message_response(503, status, content_type)
        response.headers["Retry-After"] = str(max(1, math.ceil(self.retry_after_seconds)))
        return response

    def _decompress(self, raw: bytes, encoding: str) -> bytes:
        encoding = encoding.strip().lower()
        if encoding in ("", "identity"):
            return raw
        if encoding != "gzip":
            raise _RejectError(415, f"content encoding {encoding!r} is not gzip or identity")
        # RFC 1952 §2.2: a gzip body is one or more members, decompressed one after another
        # (what follows the first is not ignored: it may hold spans). The cap counts them all.
        parts: list[bytes] = []
        size, rest = 0, raw
        while rest:
            inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            try:
                part = inflater.decompress(rest, self.max_request_bytes + 1 - size)
            except zlib.error as exc:
                where = f" (member {len(parts) + 1})" if parts else ""
                raise _RejectError(400, f"body is not valid gzip{where}: {exc}") from None
            size += len(part)
            if size > self.max_request_bytes:
                raise _RejectError(413, f"decompressed body exceeds {self.max_request_bytes} bytes")
            if not inflater.eof:
                raise _RejectError(400, "body is not valid gzip: the stream is truncated")
            parts.append(part)
            rest = inflater.unused_data
        if not parts:
            raise _RejectError(400, "body is not valid gzip: it is empty")
        return b"".join(parts)

    def _decode(self, body: bytes, content_type: str) -> DecodedBatch:
        try:
            if content_type == _JSON:
                return decode_request(parse_otlp_json(body), self.options)
            return decode_protobuf(body, self.options)
        except DecodeError as exc:
            raise _RejectError(400, str(exc), exc.field) from None


def _read_timeout_message(slots: RequestSlots) -> str:
    return f"the request body was not received within {slots.read_timeout:g} s; retry"


def _message_response(status: int, message: Message, content_type: str) -> web.Response:
    if content_type == _JSON:
        text = json_format.MessageToJson(message, indent=None)
        return web.Response(status=status, text=text, content_type=_JSON)
    return web.Response(status=status, body=message.SerializeToString(), content_type=_PROTOBUF)


def _status_response(reject: _RejectError, content_type: str) -> web.Response:
    """OTLP/HTTP: error bodies are a ``google.rpc.Status`` in the request's encoding; a 400's
    details hold a ``BadRequest`` naming the bad data."""
    if reject.status == 400:
        body = bad_request_status(DecodeError(str(reject), reject.field))
    else:
        body = status_pb2.Status(code=code_pb2.FAILED_PRECONDITION, message=str(reject))
    encoding = content_type if content_type in (_PROTOBUF, _JSON) else _PROTOBUF
    return _message_response(reject.status, body, encoding)
