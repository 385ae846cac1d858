"""The listeners' sockets: binding each address, or saying why it cannot be bound (in use, not
this host's, not permitted), before anything starts (``address_taken`` for every listener at
once, so a second ``serve`` with the same ports is told every conflict together), and the
OTLP/HTTP and metrics connections' request heads, bounded in size (``HEAD_LIMITS``, one
request read ahead: ``QUEUED_REQUESTS``), a request aiohttp's parser refuses answered without
quoting it (``HeadRefusingHandler``; the sites, their connections counted and their TLS
handshakes bounded in time: ``toolwatch.connection_gate``). ``App``
(``toolwatch.app_listeners``) starts the servers on them.

The HTTP sites run on the event loop, as aiohttp does; each connection's handler is made
there, one per connection.
"""

from __future__ import annotations

import errno
import itertools
import os
import socket
from collections.abc import Callable
from typing import Any

import grpc
from aiohttp import hdrs, web
from aiohttp.http_exceptions import (
    BadHttpMessage,
    BadHttpMethod,
    BadStatusLine,
    ContentLengthError,
    HttpProcessingError,
    InvalidHeader,
    InvalidURLError,
    LineTooLong,
    TransferEncodingError,
)
from aiohttp.web_request import BaseRequest

from toolwatch.config import host_addresses, is_ip_address, parse_listen_address
from toolwatch.senders import Sender, SenderLog, transport_address

__all__ = [
    "HANDSHAKE_SECONDS",
    "HEAD_LIMITS",
    "MAX_HEADERS",
    "MAX_HEAD_LINE",
    "QUEUED_REQUESTS",
    "SERVER_NAME",
    "HeadRefusal",
    "HeadRefusingHandler",
    "ListenError",
    "ListenersError",
    "StartError",
    "address_taken",
    "bind_grpc",
    "body_framing_broken",
    "format_address",
    "framing_message",
    "listening_socket",
    "name_server",
    "os_reason",
    "rebind_refused",
    "refusal_reason",
    "text_refusal",
]


#: The longest a connection may take to finish its handshake (TLS; for gRPC also HTTP/2's
#: preface): asyncio's own limit, under gRPC's 120 s. Shorter when
#: ``ingest.idle_timeout_seconds`` is.
HANDSHAKE_SECONDS = 60.0


#: The longest line of a request's head read, in bytes: the request line, and each header
#: field, name and value. aiohttp's default, 8,190, refused a long ``Authorization: Bearer``
#: JWT or tenant header that the Collector's receiver (1 MiB of headers) and toolwatch's own
#: gRPC listener (16 KiB of metadata) take.
MAX_HEAD_LINE = 64 * 1024
#: The most header fields a request may have: aiohttp's default, kept (fewer could refuse
#: a request that passed before: proxies add their own). aiohttp's Python parser counts the
#: request line and the blank line that ends the head among them: 126 fields.
MAX_HEADERS = 128
#: The requests a connection's handler reads and queues ahead of the one it handles: aiohttp
#: queues 32 (``web_protocol.MAX_MSG_QUEUE_SIZE``); OTLP exporters never pipeline.
QUEUED_REQUESTS = 1
#: aiohttp's parser limits (``RequestHandler``'s arguments). A head is at most
#: ``MAX_HEAD_LINE * (MAX_HEADERS + 1)`` bytes (8 MiB and 64 KiB; aiohttp's defaults: 1 MiB).
#: A connection holds its request's head while it arrives (at most
#: ``ingest.idle_timeout_seconds``) and while the request is handled, and meanwhile reads
#: the next request's (``QUEUED_REQUESTS``) and what one read (256 KiB) brought after it:
#: at most 16.4 MiB of heads, about twice that resident (their bytes and the header strings
#: made of them; measured: 31 MiB for two heads of 7.7 MiB, 40 MiB with aiohttp's Python
#: parser). aiohttp's queue of 32 held 33 such heads (measured: 509 MiB); with its default
#: limits, 33 heads of 1 MiB (measured: 64 MiB). The heads still arriving on all of a
#: listener's connections are bounded together (``connection_gate.HEADS_BUDGET``).
HEAD_LIMITS: dict[str, Any] = {
    "max_line_size": MAX_HEAD_LINE,
    "max_field_size": MAX_HEAD_LINE,
    "max_headers": MAX_HEADERS,
}

#: The sender log's reason for a request aiohttp's parser refused (its own: a port scan must not
#: take the line a minute of an exporter's undecodable bodies, ``invalid_request``).
INVALID_HEAD = "invalid_head"

#: The ``Server`` header of every HTTP answer: aiohttp's default names Python's and its own
#: version to anyone who reaches a listener, token or not (which known faults to try).
SERVER_NAME = "toolwatch"


async def name_server(request: web.Request, response: web.StreamResponse) -> None:
    """An ``on_response_prepare`` signal giving ``response`` the ``Server`` header
    ``SERVER_NAME`` (aiohttp sets its own only where none is)."""
    response.headers[hdrs.SERVER] = SERVER_NAME


#: The answer to a request aiohttp's parser refuses: its status and why, in words that quote
#: nothing of the request.
HeadRefusal = Callable[[int, str], web.Response]


def text_refusal(status: int, reason: str) -> web.Response:
    """A ``HeadRefusal`` in plain text (the metrics listener's)."""
    return web.Response(status=status, text=reason)


class HeadRefusingHandler(web.RequestHandler):
    """aiohttp's handler of one connection, given ``HEAD_LIMITS``, that reads one request
    ahead of the one being handled, not 32, and answers a request its parser refuses (a head
    not HTTP or past those limits, a chunked body whose framing breaks in the packets that
    brought the head) with ``refusal``, saying which (``refusal_reason``): aiohttp's own
    answer is text quoting the first 100 bytes of the line at fault (a bearer token), made
    before any middleware runs, so none can replace it. aiohttp offers no other way to
    answer it (aio-libs/aiohttp#3287, #9882): ``handle_error`` is the method its parser
    errors reach. The error is logged as aiohttp logs it (``ProtocolErrorLog``: at DEBUG),
    and told to ``senders`` (``invalid_head`` on ``listener``): who sent it, in the
    sender log's rate-limited line, with the answer."""

    __slots__ = ("_listener", "_refusal", "_senders")

    def __init__(
        self,
        manager: web.Server,
        *,
        refusal: HeadRefusal,
        listener: str,
        senders: SenderLog,
        **options: Any,
    ) -> None:
        super().__init__(manager, **options)
        self._refusal = refusal
        self._listener = listener
        self._senders = senders
        # aiohttp reads on while a request is handled, and queues up to 32 pipelined requests
        # (web_protocol.MAX_MSG_QUEUE_SIZE) before it stops reading: each head up to
        # HEAD_LIMITS, 32 x 8 MiB on one connection whose export waits for its decoding turn.
        # OTLP exporters send one request and wait for its answer: one queued is enough.
        # aiohttp's internals (3.14.1 and later, which pyproject requires; before, it queued
        # without bound and had neither):
        # tests/unit/test_listeners_heads.py fails if they go.
        if hasattr(self, "_max_msg_queue_size"):
            self._max_msg_queue_size = QUEUED_REQUESTS
            self._msg_queue_resume_size = 0  # read again once the queued one is taken

    @property
    def idle(self) -> bool:
        """Whether no request is being handled, nor its head complete: the handler waits for
        one (idle keep-alive, or a head arriving). aiohttp's own test before it closes an idle
        keep-alive connection (``RequestHandler._process_keepalive``); the gate closes such a
        connection to make room for a new one (``toolwatch.connection_gate``)."""
        waiter = self._waiter
        return waiter is not None and not waiter.done()

    @property
    def requests_parsed(self) -> int:
        """How many requests' heads its parser completed on this connection (aiohttp's
        count): a rise says a head ended."""
        return int(self._request_count)

    def parsed_bytes(self, newest: int) -> int | None:
        """About how many bytes the ``newest`` requests its parser completed came in: each
        head as clients write it (``_head_size``) and what its body received so far;
        ``None`` when they are no longer queued."""
        messages = self._messages
        if len(messages) < newest:
            return None
        total = 0
        for message, payload in itertools.islice(reversed(messages), newest):
            total += _head_size(message) + int(getattr(payload, "total_bytes", 0))
        return total

    @property
    def newest_payload(self) -> Any:
        """The body of the newest request its parser completed, while it is queued."""
        return self._messages[-1][1] if self._messages else None

    @property
    def reading_paused(self) -> bool:
        """Whether aiohttp itself stopped reading the connection (its queue of requests is
        full): then it, not the gate, reads again."""
        return bool(self._buffer_paused)

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        answer = super().handle_error(request, status, exc, message)  # logs it; closes
        if not isinstance(exc, HttpProcessingError):
            return answer
        reason = refusal_reason(exc)
        refused = self._refusal(status, reason)
        refused.headers[hdrs.SERVER] = SERVER_NAME  # no app here: its signal does not run
        transport = self.transport
        peer = transport_address(transport) if transport is not None else "unknown"
        self._senders.refused(INVALID_HEAD, Sender(self._listener, peer), reason)
        refused.force_close()
        return refused


def _head_size(message: Any) -> int:
    """A parsed head's size as clients write it (``METHOD path HTTP/1.1``, each field
    ``name: value``, CRLFs); 0 for a head refused (its connection closes). A field written
    without the space counts a byte more than it took: what follows the head is then
    counted a byte short a field, no more."""
    raw_headers = getattr(message, "raw_headers", None)
    if raw_headers is None:
        return 0
    line = len(message.method) + len(message.path) + len(" HTTP/1.1\r\n") + 1
    return line + sum(len(name) + len(value) + 4 for name, value in raw_headers) + 2


def refusal_reason(error: HttpProcessingError) -> str:
    """Why aiohttp's parser refused a request, by its error's kind alone (its message
    quotes the request): the body's framing (``framing_message``), or what of the head."""
    if body_framing_broken(error):
        return framing_message(error)
    why = _HEAD_FAULTS.get(type(error), _MALFORMED_HEAD)
    if type(error) is BadHttpMessage and error.message.startswith("Too many headers"):
        why = f"it has more than {MAX_HEADERS} header fields"  # aiohttp's words, both parsers
    return f"the request's head was refused ({type(error).__name__}): {why}"


def body_framing_broken(error: HttpProcessingError) -> bool:
    """Whether ``error`` is about a request body's framing (a chunk size that is no hex
    number, a chunk longer than its size said), not its head: aiohttp's Python parser raises
    ``TransferEncodingError`` (or ``ContentLengthError``), its C parser (llhttp) a
    ``BadHttpMessage`` whose message starts with llhttp's reason, every one of its
    chunked-body reasons naming a chunk ("Invalid character in chunk size", "Expected LF
    after chunk data"). The rest of that message quotes the bytes at fault."""
    if isinstance(error, TransferEncodingError | ContentLengthError):
        return True
    reason = error.message.partition(":\n")[0]
    return type(error) is BadHttpMessage and "chunk" in reason.lower()


def framing_message(error: Exception) -> str:
    """Named by the parser's error kind (``RequestPayloadError`` wraps it)."""
    kind = type(error.__cause__ or error).__name__
    return f"the request body's HTTP framing is broken ({kind}); nothing was read"


#: What of a refused head each parser error says, by its kind (both parsers raise these;
#: llhttp's other faults are plain ``BadHttpMessage``).
_HEAD_FAULTS: dict[type[HttpProcessingError], str] = {
    LineTooLong: f"a line of it (the request line, a header field) is longer than {MAX_HEAD_LINE}"
    " bytes",
    BadHttpMethod: "its request line starts with no HTTP method (not HTTP: TLS sent to a"
    " listener without TLS, say)",
    BadStatusLine: "its request line is not HTTP/1.x's (a method, a target and a version,"
    " ending in CRLF)",
    InvalidURLError: "its request target is not a valid URL",
    InvalidHeader: "a header field is malformed (a character HTTP does not allow in its name or"
    " value, a Content-Length that is no number)",
}
_MALFORMED_HEAD = (
    "it is not well-formed HTTP/1.x (such as a header field with a character HTTP does not"
    " allow, a Content-Length that is no number or given twice, no Host header, lines not"
    " ending in CRLF)"
)


class StartError(Exception):
    """toolwatch cannot start as configured; the message says what and why."""


class ListenError(StartError):
    """A listener could not bind its address (in use, not this host's, not permitted)."""

    def __init__(self, listener: str, address: str, reason: str) -> None:
        super().__init__(f"cannot listen on {address} (listen.{listener}): {reason}")
        self.listener = listener


class ListenersError(StartError):
    """Several listeners cannot bind their addresses (a second ``serve`` with the same
    ports): each one's ``ListenError``, told together rather than one per attempt."""

    def __init__(self, errors: list[ListenError]) -> None:
        super().__init__("\n".join(map(str, errors)))
        self.errors = errors


def address_taken(listener: str, address: str) -> ListenError | None:
    """Why ``listener`` cannot bind ``address`` as things stand (a port in use, an address
    not this host's, not permitted), found by binding it and letting go; ``None`` when it
    can, or when its port is 0 (any free one). The bind itself can still fail (taken in
    between): it is told then."""
    _host, port = parse_listen_address(address)
    if port == 0:
        return None
    if listener in ("grpc", "stream") and (held := _held_error(listener, address)):
        return held
    try:
        listening_socket(address).close()
    except OSError as exc:
        # gRPC binds as it can (a wildcard on a host without IPv6, say): of its listeners,
        # only a port in use is sure to fail; the bind tells any other reason.
        if listener in ("grpc", "stream") and exc.errno != errno.EADDRINUSE:
            return None
        return ListenError(listener, address, os_reason(exc))
    return None


#: What a plain socket's bind fails with that gRPC's would too, for an address bound before.
_SURE_FAILURES = frozenset({errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES})


def rebind_refused(listener: str, address: str) -> ListenError | None:
    """Why ``listener`` cannot bind ``address`` again, which it had bound (a restart of the
    findings stream's listener), asked of a plain socket so that no gRPC server is built for
    a bind sure to fail (gRPC core prints its own ERROR line for each, and does not give back
    what an unstarted server took): the port in use, the address no longer this host's, a
    name that no longer resolves, not permitted. ``None`` when it can be bound, or when the
    probe cannot tell (gRPC binds as it can: a wildcard on a host without IPv6). Blocking (a
    name is resolved): call it off the event loop."""
    if held := _held_error(listener, address):
        return held
    try:
        listening_socket(address).close()
    except socket.gaierror as exc:
        return ListenError(listener, address, os_reason(exc))
    except OSError as exc:
        return (
            ListenError(listener, address, os_reason(exc)) if exc.errno in _SURE_FAILURES else None
        )
    return None


async def bind_grpc(
    server: grpc.aio.Server,
    listener: str,
    address: str,
    credentials: grpc.ServerCredentials | None,
) -> str:
    """Bind ``server`` to ``address``; on failure stop it (an unstarted server left to the
    garbage collector schedules its shutdown on a loop that may be closed) and raise."""
    host, _port = parse_listen_address(address)
    if held := _held_error(listener, address):  # taken since ``address_taken`` looked
        await server.stop(None)
        raise held
    try:
        if credentials is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, credentials)
    except RuntimeError:  # grpcio raises "Failed to bind to address ..."
        port = 0
    if port == 0:
        await server.stop(None)
        raise ListenError(listener, address, _why_not_bound(address))
    return format_address((host, port))


def _held_error(listener: str, address: str) -> ListenError | None:
    """``_held_elsewhere``'s answer as the error a gRPC listener's bind is refused with."""
    held = _held_elsewhere(address)
    if held is None:
        return None
    reason = f"the port is in use on {held} (gRPC would listen on the other addresses only)"
    return ListenError(listener, address, reason)


def _why_not_bound(address: str) -> str:
    """Why gRPC could not bind ``address``, which it does not say: the system's reason for a
    plain socket on it (in use, not this host's address), else gRPC's silence."""
    try:
        listening_socket(address).close()
    except OSError as exc:
        return os_reason(exc)
    return "gRPC could not bind it (in use, or not local)"


def _held_elsewhere(address: str) -> str | None:
    """The address on which the port of a named host is taken, if one is. gRPC binds a
    name's addresses one by one and reports success if any bound: ``localhost:4317`` with
    127.0.0.1:4317 held by another process would listen on ::1 alone, and exporters sending
    to 127.0.0.1 would reach that process. An address this host does not have (no IPv6) is
    no conflict: gRPC skips it too; nor is a name that does not resolve: gRPC says so."""
    host, port = parse_listen_address(address)
    if port == 0 or is_ip_address(host):
        return None  # an IP address: gRPC's own bind fails whole
    for ip in sorted(host_addresses(host)):
        if not is_ip_address(ip):
            continue  # did not resolve
        with socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC binds
            try:
                probe.bind((ip, port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return ip
    return None


def listening_socket(address: str) -> socket.socket:
    """A listening socket on ``address``. An IPv6 one takes IPv4 clients too (as IPv4-mapped
    addresses) where the system can: ``[::]`` is then every interface of both families, as
    gRPC binds it (its sockets are dual-stack), not IPv6 alone (``create_server`` sets
    ``IPV6_V6ONLY`` otherwise), so one spelling means the same on every listener."""
    host, port = parse_listen_address(address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    if not is_ip_address(host):
        # Raises ``socket.gaierror`` for a name that does not resolve: ``create_server``
        # would raise a plain ``OSError`` carrying getaddrinfo's error number (``os_reason``).
        socket.getaddrinfo(host, port, family, socket.SOCK_STREAM)
    if family == socket.AF_INET:
        return socket.create_server((host, port), family=family, backlog=512)
    dualstack = socket.has_dualstack_ipv6()
    return socket.create_server((host, port), family=family, backlog=512, dualstack_ipv6=dualstack)


def os_reason(error: OSError) -> str:
    """The system's words for ``error``. Not ``error.strerror``, as elsewhere: the error
    ``socket.create_server`` raises appends the address to it, which the message has. A
    name that does not resolve raises ``socket.gaierror``, whose ``errno`` is getaddrinfo's
    (``EAI_NONAME``, -2), not the system's: ``os.strerror`` knows it not, its own
    ``strerror`` does."""
    if isinstance(error, socket.gaierror):
        return f"the host name does not resolve ({error.strerror or error})"
    return os.strerror(error.errno) if error.errno else str(error)


def format_address(sockname: Any) -> str:
    host, port = sockname[0], sockname[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
