"""OTLP/HTTP answers: the errors the receiver (``otlp_http``) refuses a request with, and the
bodies OTLP/HTTP asks of them, a ``google.rpc.Status`` in the request's encoding with the
request's Content-Type as sent; the middleware that gives aiohttp's own error answers (404,
405, a bearer-token check's 401) such a body, and the answer to a request aiohttp's parser
refuses (``status_refusal``, which no middleware sees); and the log adapter that keeps
requests aiohttp's parser refused (not HTTP) out of the ERROR log (``ProtocolErrorLog``)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, MutableMapping
from typing import Any

from aiohttp import hdrs, web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Handler
from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc import code_pb2, status_pb2

from toolwatch.ingest.compressed_streams import ZSTD_UNAVAILABLE
from toolwatch.ingest.decode_types import DecodeError
from toolwatch.ingest.inflight import ReadAbandonedError
from toolwatch.ingest.otlp_grpc import bad_request_status

__all__ = [
    "ACCEPTED_ENCODINGS",
    "COMPRESSED",
    "IDENTITY",
    "JSON",
    "PROTOBUF",
    "STATUS_CODES",
    "TRACES_PATH",
    "ProtocolErrorLog",
    "RejectError",
    "content_encoding",
    "echo_content_type",
    "message_response",
    "status_bodies",
    "status_refusal",
    "status_response",
    "unsupported",
    "unsupported_encoding",
    "unsupported_type",
]

TRACES_PATH = "/v1/traces"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
IDENTITY = ("", "identity")
#: The compressed codings read: zstd only on a Python that can (``ZSTD_UNAVAILABLE``).
COMPRESSED = ("gzip", "x-gzip", "deflate", "zlib", *(() if ZSTD_UNAVAILABLE else ("zstd",)))
#: The codings accepted, as a 415 lists them (``Accept-Encoding``, RFC 7694 §3).
ACCEPTED_ENCODINGS = ", ".join(c for c in (*COMPRESSED, "identity") if c != "x-gzip")
#: The google.rpc code of each HTTP error toolwatch's handler does not answer itself.
STATUS_CODES = {
    401: code_pb2.UNAUTHENTICATED,
    403: code_pb2.PERMISSION_DENIED,
    404: code_pb2.NOT_FOUND,
    405: code_pb2.UNIMPLEMENTED,
    413: code_pb2.RESOURCE_EXHAUSTED,
    415: code_pb2.INVALID_ARGUMENT,
}
#: Headers of such an answer that a client acts on, kept when its body is replaced.
_KEPT_HEADERS = (hdrs.ALLOW, hdrs.WWW_AUTHENTICATE, hdrs.RETRY_AFTER)


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


class RejectError(Exception):
    """An HTTP error answer: status and message; the field at fault (a 400's body field, a
    415's header)."""

    def __init__(self, status: int, message: str, field: str = "body", close: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.field = field
        self.close = close  # what follows on the connection cannot be read as a request


def content_encoding(request: web.Request) -> str:
    return request.headers.get(hdrs.CONTENT_ENCODING, "identity").strip().lower()


def unsupported_type(request: web.Request, content_type: str) -> RejectError:
    sent = request.headers.get(hdrs.CONTENT_TYPE)  # aiohttp's default is not the client's
    said = f"content type {content_type!r} is not" if sent else "no content type: send"
    return RejectError(415, f"{said} {PROTOBUF} or {JSON}")


def unsupported_encoding(encoding: str) -> RejectError:
    message = f"content encoding {encoding!r} is not one of {ACCEPTED_ENCODINGS}"
    return RejectError(415, message, hdrs.CONTENT_ENCODING)


def unsupported(request: web.Request, content_type: str, encoding: str) -> RejectError | None:
    """Why a request will be refused 415 whatever its body, if it will."""
    if content_type not in (PROTOBUF, JSON):
        return unsupported_type(request, content_type)
    if encoding not in IDENTITY and encoding not in COMPRESSED:
        return unsupported_encoding(encoding)
    return None


@web.middleware
async def status_bodies(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Give an error answer that is not already one (aiohttp's own, a middleware's) a
    ``google.rpc.Status`` body in the request's encoding, keeping its status and the
    headers a client acts on. A 401's or 403's Status says nothing more than its code."""
    try:
        response = await handler(request)
    except web.HTTPException as error:
        if error.status < 400:
            raise
        response = web.Response(status=error.status, reason=error.reason, headers=error.headers)
    if response.status < 400 or response.content_type in (PROTOBUF, JSON):
        echo_content_type(request, response)
        return response
    code = STATUS_CODES.get(response.status, code_pb2.UNKNOWN)
    message = "" if response.status in (401, 403) else _error_message(request, response)
    encoding = JSON if request.content_type == JSON else PROTOBUF
    answer = message_response(
        response.status, status_pb2.Status(code=code, message=message), encoding
    )
    for name in _KEPT_HEADERS:
        if name in response.headers:
            answer.headers[name] = response.headers[name]
    if response.keep_alive is False:  # None until prepared: closed only when it was forced
        answer.force_close()
    echo_content_type(request, answer)
    return answer


def echo_content_type(request: web.Request, response: web.StreamResponse) -> None:
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


def message_response(status: int, message: Message, content_type: str) -> web.Response:
    if content_type == JSON:
        # As bytes: given text, aiohttp would add "; charset=utf-8", and OTLP asks for the
        # request's Content-Type exactly (``echo_content_type``; the Collector sends it
        # bare and reads a partial success only then).
        text = json_format.MessageToJson(message, indent=None)
        return web.Response(status=status, body=text.encode(), content_type=JSON)
    return web.Response(status=status, body=message.SerializeToString(), content_type=PROTOBUF)


def status_refusal(status: int, reason: str) -> web.Response:
    """The answer to a request aiohttp's parser refuses (``listeners.HeadRefusal``), a
    ``google.rpc.Status`` as OTLP/HTTP asks of every 4xx and 5xx body: in protobuf, the
    request's Content-Type being unread."""
    code = code_pb2.INVALID_ARGUMENT if status == 400 else code_pb2.UNKNOWN
    return message_response(status, status_pb2.Status(code=code, message=reason), PROTOBUF)


def status_response(reject: RejectError, content_type: str) -> web.Response:
    """OTLP/HTTP: error bodies are a ``google.rpc.Status`` in the request's encoding; a 400's
    details hold a ``BadRequest`` naming the bad data."""
    if reject.status == 400:
        body = bad_request_status(DecodeError(str(reject), reject.field))
    else:
        code = STATUS_CODES.get(reject.status, code_pb2.FAILED_PRECONDITION)
        body = status_pb2.Status(code=code, message=str(reject))
    encoding = content_type if content_type in (PROTOBUF, JSON) else PROTOBUF
    response = message_response(reject.status, body, encoding)
    if reject.status == 415 and reject.field == "Content-Encoding":
        # RFC 7694 §3: a 415 for the request's content coding names the codings accepted.
        response.headers[hdrs.ACCEPT_ENCODING] = ACCEPTED_ENCODINGS
    return response
