"""``listeners.HeadRefusingHandler`` on its own: what it sets of aiohttp's handler (its
internals: these tests fail, rather than the bound be lost in silence, if an aiohttp release
renames them), and what ``refusal_reason`` says of each error aiohttp's two request parsers
raise, fed real bytes: its C one (llhttp) and its Python one (``AIOHTTP_NO_EXTENSIONS``).
The integration tests (``tests/integration/test_otlp_http_heads.py``) hold a real server to
the same."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from aiohttp import web
from aiohttp.http_parser import HttpRequestParserPy

from toolwatch.listeners import (
    HEAD_LIMITS,
    MAX_HEAD_LINE,
    MAX_HEADERS,
    QUEUED_REQUESTS,
    HeadRefusingHandler,
    refusal_reason,
    text_refusal,
)
from toolwatch.model import ManualClock
from toolwatch.senders import SenderLog

SECRET = b"tok-s3cret"
CHUNKED = b"POST /v1/traces HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
REFUSED = "the request's head was refused"
FRAMING = "the request body's HTTP framing is broken"


@pytest.fixture
def handler() -> Iterator[HeadRefusingHandler]:
    """A connection's handler as the HTTP listeners make it, with no connection."""
    loop = asyncio.new_event_loop()

    async def answer(request: web.BaseRequest) -> web.StreamResponse:
        return web.Response()

    server = web.Server(answer, loop=loop)
    senders = SenderLog(ManualClock())
    yield HeadRefusingHandler(
        server, loop=loop, refusal=text_refusal, listener="http", senders=senders, **HEAD_LIMITS
    )
    loop.close()


def test_a_connection_queues_one_request_ahead_of_the_one_it_handles(
    handler: HeadRefusingHandler,
) -> None:
    """aiohttp queues 32 (``web_protocol.MAX_MSG_QUEUE_SIZE``), each head up to 8 MiB here,
    and reads again once 16 are left; the handler queues one, and reads again once it is
    taken. Fails if aiohttp no longer has these attributes: the handler then leaves them."""
    assert QUEUED_REQUESTS == 1
    assert handler._max_msg_queue_size == QUEUED_REQUESTS
    assert handler._msg_queue_resume_size == 0


def _fed(handler: HeadRefusingHandler, parser: str, data: bytes) -> str:
    """Why the handler's answer says ``data`` was refused, by ``parser``."""
    if parser == "Python":
        feed = HttpRequestParserPy(handler, handler._loop, 2**16, **HEAD_LIMITS).feed_data
    elif handler._parser is None or isinstance(handler._parser, HttpRequestParserPy):
        pytest.skip("aiohttp's C parser is not installed")
    else:
        feed = handler._parser.feed_data
    try:
        feed(data)
    except Exception as error:  # the parsers raise HttpProcessingError; any other fails below
        return refusal_reason(error)
    raise AssertionError("the parser took it")


LINE_TOO_LONG = f"a line of it (the request line, a header field) is longer than {MAX_HEAD_LINE}"

#: Each fault, the bytes showing it (a secret among them), and what the answer says of it.
FAULTS = {
    "chunk-size-not-hex": (CHUNKED + SECRET + b"\r\nabc\r\n0\r\n\r\n", FRAMING),
    "chunk-longer-than-its-size": (CHUNKED + b"3\r\nabc" + SECRET + b"\r\n0\r\n\r\n", FRAMING),
    "chunk-extension-with-lf": (CHUNKED + b"3;" + SECRET + b"\nb\r\nabc\r\n0\r\n\r\n", FRAMING),
    "long-header-line": (
        b"POST / HTTP/1.1\r\nHost: t\r\nX: " + SECRET * 7000 + b"\r\n\r\n",
        LINE_TOO_LONG,
    ),
    "long-request-line": (
        b"POST /" + SECRET * 7000 + b" HTTP/1.1\r\nHost: t\r\n\r\n",
        LINE_TOO_LONG,
    ),
    "long-line-in-http-1.0": (
        b"POST / HTTP/1.0\r\nX: " + SECRET * 7000 + b"\r\n\r\n",
        LINE_TOO_LONG,
    ),
    "too-many-fields": (
        b"POST / HTTP/1.1\r\nHost: t\r\n"
        + b"".join(b"X-%d: %s\r\n" % (n, SECRET) for n in range(MAX_HEADERS + 1))
        + b"\r\n",
        f"it has more than {MAX_HEADERS} header fields",
    ),
    "not-http": (b"{" + SECRET + b"} / HTTP/1.1\r\nHost: t\r\n\r\n", "starts with no HTTP method"),
    "tls": (b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\r\n\r\n", "no HTTP method"),
    "control-character": (
        b"POST / HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " + SECRET + b"\x01\r\n\r\n",
        "a character HTTP does not allow",
    ),
    "content-length-no-number": (
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: " + SECRET + b"\r\n\r\n",
        "a Content-Length that is no number",
    ),
    "target-not-a-url": (b"POST http://[::1 HTTP/1.1\r\nHost: t\r\n\r\n", "not a valid URL"),
}


@pytest.mark.parametrize("parser", ["C", "Python"])
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_refusal_says_what_is_at_fault_and_quotes_none_of_it(
    handler: HeadRefusingHandler, parser: str, fault: str
) -> None:
    """Was: every parser error was "the request's head was refused (...): it is not
    HTTP/1.1, or a line of it is longer than 65536 bytes, or it has more than 128 header
    fields", a broken chunked body and an HTTP/1.0 request's long line among them. Now: the
    body's framing as the receiver words it, or the head's fault by the error's kind (the
    C parser raises a plain ``BadHttpMessage`` for most: it is named in general words)."""
    data, said = FAULTS[fault]

    reason = _fed(handler, parser, data)

    assert reason.startswith(FRAMING if said == FRAMING else REFUSED)
    assert said in reason
    assert "s3cret" not in reason
    assert "HTTP/1.1" not in reason
