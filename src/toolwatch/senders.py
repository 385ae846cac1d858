"""Who sends what toolwatch refuses: a rate-limited warning per reason (``SenderLog``).

The counters say how much was refused (``toolwatch_spans_rejected_total{reason}``, the
requests' ``outcome``s, ``toolwatch_auth_failures_total``), never by whom: an exporter whose
token rotation was missed, an SDK upgrade writing bad ids, a Collector retrying into a full
buffer. Each refusal is told to ``SenderLog.refused`` with its sender (``Sender``: the
listener, the peer's address, and the names of its client certificate under mutual TLS),
a reason, and one example of the message its client was answered with (the OTLP
``partial_success`` or error status text, which holds ids and counts, never argument values;
nor a token: the token checks answer with no detail, and the example says only whether a
token was sent). The reasons: a span reject reason (``metrics.REJECT_REASONS``), or
``invalid_request`` (a body that could not be decoded: 400 / INVALID_ARGUMENT),
``overloaded`` (503 / UNAVAILABLE, retryable), ``unauthenticated`` (401 / UNAUTHENTICATED:
no accepted bearer token), ``permission_denied`` (403 / PERMISSION_DENIED: no client
certificate, or one whose names are not in ``tls.client_names``).

At most one WARNING per reason per ``interval_seconds`` of the injected clock (as
OpenTelemetry's ``BatchProcessor`` logs a full queue once, not per span): the first refusal
of a reason is logged, those after it within the interval are counted, and the next line of
that reason, once the interval has passed, says how many were left unlogged since the last
(and how many spans they held). The last ones of a burst are told by the next refusal of
their reason; the counters have them at once.

Threading: called from the event loop only (the receivers, the interceptors, the
middlewares); not thread-safe.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from toolwatch.client_names import certificate_names
from toolwatch.model import Clock, monotonic_clock

__all__ = ["DEFAULT_INTERVAL_SECONDS", "Sender", "SenderLog", "grpc_sender", "http_sender"]

_log = logging.getLogger(__name__)

#: How often each reason may be logged, at most.
DEFAULT_INTERVAL_SECONDS: Final = 60.0
#: What an example keeps of a client's answer: it is one line of a log, not the answer.
_EXAMPLE_CHARS: Final = 300
#: The names of a client certificate a line shows, at most.
_SHOWN_NAMES: Final = 3


@dataclass(frozen=True, slots=True)
class Sender:
    """Who sent a refused request: ``listener`` (``grpc``, ``http``, ``metrics``, ``stream``),
    ``peer`` (its address as the server saw it: ``ipv4:10.0.0.7:51234`` from gRPC,
    ``10.0.0.7:51234`` from HTTP; ``unknown`` when the connection is gone) and ``client``
    (the names of its client certificate under mutual TLS, else ``None``)."""

    listener: str
    peer: str
    client: str | None = None

    def __str__(self) -> str:
        client = f" (client certificate {self.client})" if self.client else ""
        return f"{self.listener} from {self.peer}{client}"


#: A sender, or what gives it when a line is logged (reading a certificate's names costs).
SenderOf = Sender | Callable[[], Sender]


@dataclass(slots=True)
class _Quiet:
    """A reason's state: when it was last logged, and what came since, unlogged."""

    logged_ns: int
    refusals: int = 0
    spans: int = 0


class SenderLog:
    """Logs refusals with their sender, at most one line per reason per ``interval_seconds``
    of ``clock`` (monotonic ns; injected in tests), counting the rest for the next line."""

    def __init__(
        self,
        clock: Clock = monotonic_clock,
        interval_seconds: float = DEFAULT_INTERVAL_SECONDS,
        logger: logging.Logger = _log,
    ) -> None:
        if not interval_seconds > 0:
            raise ValueError(f"interval_seconds must be positive, got {interval_seconds!r}")
        self._clock = clock
        self._interval_ns = int(interval_seconds * 1e9)
        self._logger = logger
        self._quiet: dict[str, _Quiet] = {}

    def refused(self, reason: str, sender: SenderOf, example: str, spans: int = 0) -> None:
        """One refusal for ``reason`` (``spans`` of its request's spans refused, 0 for a
        refusal counted by request), from ``sender``, answered with ``example``."""
        now = self._clock()
        quiet = self._quiet.get(reason)
        if quiet is not None and now - quiet.logged_ns < self._interval_ns:
            quiet.refusals += 1
            quiet.spans += spans
            return
        since = "" if quiet is None else _unlogged(quiet)
        self._quiet[reason] = _Quiet(now)
        who = sender if isinstance(sender, Sender) else sender()
        what = f"{_spans(spans)} rejected" if spans else "request refused"
        self._logger.warning("%s (%s) on %s: %s%s", what, reason, who, _one_line(example), since)


def _unlogged(quiet: _Quiet) -> str:
    if not quiet.refusals:
        return ""
    spans = f" ({_spans(quiet.spans)})" if quiet.spans else ""
    return f"; {quiet.refusals} more since the last line of this reason{spans}, not logged"


def _spans(n: int) -> str:
    return f"{n} span{'s' if n != 1 else ''}"


def _one_line(text: str) -> str:
    """``text`` cut to ``_EXAMPLE_CHARS`` and quoted, control characters escaped: one line
    whatever a client's data put in it."""
    return ascii(text[:_EXAMPLE_CHARS] + ("…" if len(text) > _EXAMPLE_CHARS else ""))


def _client(certificate: bytes | None) -> str | None:
    names = sorted(certificate_names(certificate)) if certificate else []
    if not names:
        return None
    more = f" and {len(names) - _SHOWN_NAMES} more" if len(names) > _SHOWN_NAMES else ""
    return ",".join(names[:_SHOWN_NAMES]) + more


def grpc_sender(listener: str, context: Any) -> Sender:
    """The sender of a gRPC call (``context``: its ``ServicerContext``)."""
    pems = context.auth_context().get("x509_pem_cert", ())
    return Sender(listener, context.peer() or "unknown", _client(pems[0] if pems else None))


def http_sender(listener: str, request: Any) -> Sender:
    """The sender of an aiohttp ``request``."""
    transport = request.transport
    if transport is None:  # the connection is gone
        return Sender(listener, "unknown")
    tls = transport.get_extra_info("ssl_object")
    certificate = tls.getpeercert(binary_form=True) if tls is not None else None
    return Sender(listener, _address(transport.get_extra_info("peername")), _client(certificate))


def _address(peer: Any) -> str:
    """A socket's peer name as ``host:port``, an IPv6 host bracketed as in a URL."""
    if not (isinstance(peer, tuple) and len(peer) >= 2):
        return "unknown"
    host, port = peer[0], peer[1]
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
