"""Who sends what toolwatch refuses: a rate-limited warning per reason (``SenderLog``).

The counters say how much was refused (``toolwatch_spans_rejected_total{reason}``, the
requests' ``outcome``s, ``toolwatch_auth_failures_total``), never by whom: an exporter whose
token rotation was missed, an SDK upgrade writing bad ids, a Collector retrying into a full
buffer. Each refusal is told to ``SenderLog.refused`` with its sender (``Sender``: the
listener, the peer's address, and the names of its client certificate under mutual TLS),
a reason, and one example of the message its client was answered with (the OTLP
``partial_success`` or error status text, which holds ids and counts, never argument values;
nor a token: the token checks answer with no detail, and the example says only whether a
token was sent). The reasons it logs, every one:

* a span reject reason, ``metrics.REJECT_REASONS`` (``invalid_trace_id``,
  ``invalid_span_id``, ``invalid_parent_span_id``, ``too_many_attributes``,
  ``malformed_attributes``, ``malformed_span``): spans of an accepted request rejected;
* ``invalid_request``: a body that could not be decoded (400 / INVALID_ARGUMENT);
* ``invalid_head``: an HTTP request's head aiohttp's parser refused (400: past the head's
  limits, or not HTTP), on the OTLP/HTTP and metrics listeners;
* ``refused_request``: an OTLP/HTTP request refused whatever its body (413, 415);
* ``overloaded``: the buffer or the request slots full (503 / UNAVAILABLE, retryable);
* ``slow_request``: a request whose body did not arrive within ``ingest.read_timeout_seconds``
  (503 / DEADLINE_EXCEEDED, retryable): its slot went back to the other clients;
* ``unauthenticated``: no accepted bearer token (401 / UNAUTHENTICATED);
* ``permission_denied``: no client certificate, or one whose names are not in
  ``tls.client_names`` (403 / PERMISSION_DENIED);
* ``tls_handshake``: an HTTP listener's TLS handshake that failed (OpenSSL's reason), or was
  not done in time (``toolwatch.connection_gate``);
* ``connection_limit``: a connection to an HTTP listener closed as soon as accepted, that
  listener's ``ingest.max_connections`` being open, each handling a request;
* ``connection_limit_idle``: an idle connection to an HTTP listener (no request being handled)
  closed to make room for a new one at ``ingest.max_connections``;
* ``heads_budget``: the connection with the largest request head still arriving, closed when
  the heads arriving on its listener passed ``connection_gate.HEADS_BUDGET``;
* ``answer_unread``: a connection whose client read none of its answer for
  ``ingest.read_timeout_seconds``, closed.

The refusals of a connection (the last five) are logged as such, not as a request's.

At most one WARNING per reason and listener per ``interval_seconds`` of the injected clock
(as OpenTelemetry's ``BatchProcessor`` logs a full queue once, not per span): the first
refusal of a reason on a listener is logged, those after it within the interval are
counted, and the next line of that reason on that listener, once the interval has passed,
says how many were left unlogged since the last (and how many spans they held). The last
ones of a burst are told by the next refusal of their reason; the counters have them at
once. The state is bounded: the reasons above times the four listeners.

What a client chose (the example, its certificate's names) is escaped onto one line as
``ascii`` escapes it (the example quoted too): a line break in a common name must not forge
a record. An example is cut at ``_EXAMPLE_CHARS`` characters of its escaped text.

Threading: called from the event loop only (the receivers, the interceptors, the
middlewares); not thread-safe.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from toolwatch.client_names import certificate_names
from toolwatch.model import Clock

__all__ = [
    "DEFAULT_INTERVAL_SECONDS",
    "Sender",
    "SenderLog",
    "SenderOf",
    "Unread",
    "grpc_sender",
    "http_sender",
    "transport_address",
]

_log = logging.getLogger(__name__)

#: How often each reason may be logged, at most.
DEFAULT_INTERVAL_SECONDS: Final = 60.0
#: What an example keeps of a client's answer, in characters of its escaped text: it is one
#: line of a log, not the answer.
_EXAMPLE_CHARS: Final = 300
#: The names of a client certificate a line shows, at most.
_SHOWN_NAMES: Final = 3


@dataclass(frozen=True, slots=True)
class Sender:
    """Who sent a refused request: ``listener`` (``grpc``, ``http``, ``metrics``, ``stream``),
    ``peer`` (its address as the server saw it: ``ipv4:10.0.0.7:51234`` from gRPC,
    ``10.0.0.7:51234`` from HTTP; ``unknown`` when the connection is gone) and ``client``
    (the names of its client certificate under mutual TLS, else ``None``), written escaped
    as an example is (``_escaped``): a client chose them."""

    listener: str
    peer: str
    client: str | None = None

    def __str__(self) -> str:
        client = f" (client certificate {_escaped(self.client)})" if self.client else ""
        return f"{self.listener} from {self.peer}{client}"


@dataclass(frozen=True, slots=True)
class Unread:
    """A sender read only if its line is logged (reading a certificate's names costs): its
    ``listener``, which the rate limit is keyed by, and ``read``, which gives the rest."""

    listener: str
    read: Callable[[], Sender]


#: A sender, or one read when its line is logged.
SenderOf = Sender | Unread


@dataclass(slots=True)
class _Quiet:
    """A reason's state on a listener: when it was last logged, and what came since, unlogged."""

    logged_ns: int
    refusals: int = 0
    spans: int = 0


#: What a line says was refused, by the reasons that refuse a connection, not a request.
_CONNECTION_REFUSALS: Final = {
    "tls_handshake": "connection refused",
    "connection_limit": "connection refused",
    "connection_limit_idle": "idle connection closed",
    "heads_budget": "connection closed",
    "answer_unread": "connection closed",
}


class SenderLog:
    """Logs refusals with their sender, at most one line per reason and listener per
    ``interval_seconds`` of ``clock`` (monotonic ns: the app's, injected in tests), counting
    the rest for the next line."""

    def __init__(
        self,
        clock: Clock,
        interval_seconds: float = DEFAULT_INTERVAL_SECONDS,
        logger: logging.Logger = _log,
    ) -> None:
        if not interval_seconds > 0:
            raise ValueError(f"interval_seconds must be positive, got {interval_seconds!r}")
        self._clock = clock
        self._interval_ns = int(interval_seconds * 1e9)
        self._logger = logger
        self._quiet: dict[tuple[str, str], _Quiet] = {}  # by (reason, listener): bounded

    def refused(self, reason: str, sender: SenderOf, example: str, spans: int = 0) -> None:
        """One refusal for ``reason`` (``spans`` of its request's spans refused, 0 for a
        refusal counted by request), from ``sender``, answered with ``example``."""
        now = self._clock()
        key = (reason, sender.listener)
        quiet = self._quiet.get(key)
        if quiet is not None and now - quiet.logged_ns < self._interval_ns:
            quiet.refusals += 1
            quiet.spans += spans
            return
        since = "" if quiet is None else _unlogged(quiet)
        self._quiet[key] = _Quiet(now)
        who = sender if isinstance(sender, Sender) else sender.read()
        what = f"{_spans(spans)} rejected" if spans else _what(reason)
        self._logger.warning("%s (%s) on %s: %s%s", what, reason, who, _one_line(example), since)


def _what(reason: str) -> str:
    return _CONNECTION_REFUSALS.get(reason, "request refused")


def _unlogged(quiet: _Quiet) -> str:
    if not quiet.refusals:
        return ""
    spans = f" ({_spans(quiet.spans)})" if quiet.spans else ""
    return f"; {quiet.refusals} more since the last line of this reason{spans}, not logged"


def _spans(n: int) -> str:
    return f"{n} span{'s' if n != 1 else ''}"


def _one_line(text: str) -> str:
    """``text`` as ``ascii`` writes it (quoted; control and non-ASCII characters, the
    backslash and the quote escaped), its escaped text cut to ``_EXAMPLE_CHARS`` characters,
    never inside an escape, with ``...`` after the closing quote when cut: one line whatever
    a client's data put in it."""
    quote = '"' if "'" in text and '"' not in text else "'"  # as ascii chooses
    kept: list[str] = []
    size = 0
    for char in text:
        escaped = "\\" + quote if char == quote else _escaped(char)
        if size + len(escaped) > _EXAMPLE_CHARS:
            return quote + "".join(kept) + quote + "..."
        kept.append(escaped)
        size += len(escaped)
    return quote + "".join(kept) + quote


def _escaped(text: str) -> str:
    """``text`` on one printable line: each character as ``ascii`` escapes it (control and
    non-ASCII characters, the backslash), quotes left as they are."""
    return "".join(ascii(char)[1:-1] for char in text)


def _client(certificate: bytes | None) -> str | None:
    names = sorted(certificate_names(certificate)) if certificate else []
    if not names:
        return None
    more = f" and {len(names) - _SHOWN_NAMES} more" if len(names) > _SHOWN_NAMES else ""
    return ",".join(names[:_SHOWN_NAMES]) + more


def grpc_sender(listener: str, context: Any) -> Unread:
    """The sender of a gRPC call on ``listener`` (``context``: its ``ServicerContext``), read
    if its line is logged."""
    return Unread(listener, functools.partial(_read_grpc, listener, context))


def http_sender(listener: str, request: Any) -> Unread:
    """The sender of an aiohttp ``request`` on ``listener``, read if its line is logged."""
    return Unread(listener, functools.partial(_read_http, listener, request))


def _read_grpc(listener: str, context: Any) -> Sender:
    pems = context.auth_context().get("x509_pem_cert", ())
    return Sender(listener, context.peer() or "unknown", _client(pems[0] if pems else None))


def _read_http(listener: str, request: Any) -> Sender:
    transport = request.transport
    if transport is None:  # the connection is gone
        return Sender(listener, "unknown")
    tls = transport.get_extra_info("ssl_object")
    certificate = tls.getpeercert(binary_form=True) if tls is not None else None
    return Sender(listener, transport_address(transport), _client(certificate))


def transport_address(transport: Any) -> str:
    """An asyncio transport's peer as ``host:port``, an IPv6 host bracketed as in a URL."""
    peer = transport.get_extra_info("peername")
    if not (isinstance(peer, tuple) and len(peer) >= 2):
        return "unknown"
    host, port = peer[0], peer[1]
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
