"""``toolwatch tail``'s exit codes, and the one a failed subscription ends with, with what
tail tells of it (``_report_error``).

Exit codes, for the CLI and scripts that restart tail:

- 0: the server ended the stream (toolwatch shut down cleanly);
- 1: the server could not be reached, the connection was lost, the server ended the stream
  for tail to connect again (its client CAs changed), or it no longer accepts the token tail
  subscribed with (never with ``reconnect``): try again;
- 2: the server rejected the filter (unknown category or severity) or the credentials, the
  target is no HOST:PORT or serves no findings stream, or
  a credentials file cannot be used (with ``reconnect``, only before the first subscription:
  a token refused, or a token file unusable, after it is an outage);
- 4: another client resumed with tail's token and has the stream now (``SUPERSEDED``: two
  tails given one ``cursor_file``), even with ``reconnect``, which would take it back from
  the other at each turn: give each tail its own file;
- 130: interrupted (Ctrl-C).

Threading: constants and functions of their arguments; any thread.
"""

from __future__ import annotations

from typing import Any, Final

import grpc

from toolwatch.sinks.stream.protocol import CLIENT_CAS_CHANGED, SHUTTING_DOWN, SUPERSEDED
from toolwatch.tail_access import ACCESS_FLAGS, StreamAccess

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_SUPERSEDED",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
]


EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
#: Another client resumed with tail's token and took its stream (``SUPERSEDED``): not 3,
#: ``serve``'s "could not start", which the CLI's codes share.
EXIT_SUPERSEDED = 4


#: What gRPC says of a peer that answered a connection in HTTP/1.x, and of one that answered
#: in something else that is not HTTP/2 (SSH, a mail server); a TLS server closes it.
_HTTP1_ANSWER: Final = "Trying to connect an http1.x server"
_NOT_HTTP2_ANSWER: Final = "Failed parsing HTTP/2"


def _asked_to_reconnect(error: Any) -> bool:
    """Whether the server ended the stream for its client to connect again (a CA was taken
    out of its client CA file: ``FindingsStreamServicer.reconnect_all``)."""
    return bool(
        error.code() == grpc.StatusCode.UNAVAILABLE and error.details() == CLIENT_CAS_CHANGED
    )


def _report_error(
    error: Any, target: str, connected: bool, access: StreamAccess
) -> tuple[int, str]:
    """The exit code for a failed subscription, and what to tell: a status the server ended or
    refused it with, else a connection lost once subscribed, else why the stream was not
    reached (``_unreached``)."""
    code, details = error.code(), error.details()
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return EXIT_USAGE, details
    if _asked_to_reconnect(error):
        return EXIT_UNAVAILABLE, f"{target} ended the stream: {details}"
    if code == grpc.StatusCode.ABORTED and details == SUPERSEDED:
        return EXIT_SUPERSEDED, f"{target} ended the stream: {details}"
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return _token_refused(target, connected, access)
    refused = _subscription_refused(code, details, target)
    if refused is not None:
        return refused
    if connected:
        return EXIT_UNAVAILABLE, f"lost the connection to {target}: {code.name}: {details}"
    return _unreached(code, details, target, access)


def _token_refused(target: str, connected: bool, access: StreamAccess) -> tuple[int, str]:
    """The exit code for a subscription refused its bearer token (UNAUTHENTICATED), and what
    to tell: one no longer accepted once subscribed, none given, or the one given refused."""
    if connected:  # reconnecting reads the token file again: a rotation loses nothing
        return EXIT_UNAVAILABLE, (
            f"{target} no longer accepts the bearer token (UNAUTHENTICATED): it was taken"
            " out of the server's token file"
        )
    if access.bearer_token_file is None:
        return EXIT_USAGE, (
            f"{target} wants a bearer token (UNAUTHENTICATED): pass --bearer-token-file"
            f" (or set {ACCESS_FLAGS['--bearer-token-file'][0]})"
        )
    return EXIT_USAGE, f"{target} refused the bearer token (UNAUTHENTICATED)"


def _subscription_refused(
    code: grpc.StatusCode, details: str | None, target: str
) -> tuple[int, str] | None:
    """The exit code and what to tell when the server refused the subscription for its
    client certificate, for serving no findings stream, or for its subscribers' limit;
    ``None`` for any other ``code``."""
    if code == grpc.StatusCode.PERMISSION_DENIED:
        return EXIT_USAGE, (
            f"{target} does not accept this client certificate (PERMISSION_DENIED): it names"
            " no client of the server's security.tls.client_names"
        )
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return EXIT_USAGE, (
            f"{target} answers gRPC but serves no findings stream: point --target at the"
            " server's listen.stream address (not its OTLP port)"
        )
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return EXIT_UNAVAILABLE, f"{target} refused the subscription: {details}"
    return None


def _unreached(
    code: grpc.StatusCode, details: str | None, target: str, access: StreamAccess
) -> tuple[int, str]:
    """The exit code for a subscription that never reached the findings stream, and what to
    tell: the server shutting down, a peer that is no gRPC server (``_not_grpc``), or no
    connection, with a hint at why (``_unreachable_hint``)."""
    if code == grpc.StatusCode.UNAVAILABLE and details == SHUTTING_DOWN:
        return EXIT_UNAVAILABLE, f"{target} is shutting down"
    not_grpc = _not_grpc(details, target)
    if not_grpc is not None:
        return not_grpc
    hint = _unreachable_hint(details, access)
    return EXIT_UNAVAILABLE, f"cannot reach the findings stream at {target}: {details} ({hint})"


def _not_grpc(details: str | None, target: str) -> tuple[int, str] | None:
    """The usage error when gRPC's ``details`` say the peer answered in HTTP/1.x
    (``_HTTP1_ANSWER``) or in something else that is not HTTP/2 (``_NOT_HTTP2_ANSWER``): a
    wrong address, not an outage; ``None`` otherwise."""
    if _HTTP1_ANSWER in (details or ""):
        # gRPC's own words for a peer that answered in HTTP/1.x: toolwatch's OTLP/HTTP or
        # metrics port, a wrong address, not an outage.
        return EXIT_USAGE, (
            f"{target} answers HTTP/1.x, not gRPC, so it serves no findings stream (an"
            " OTLP/HTTP or metrics port?): point --target at the server's listen.stream address"
        )
    if _NOT_HTTP2_ANSWER in (details or ""):
        return EXIT_USAGE, (
            f"{target} answers, but not in HTTP/2, so it is no gRPC server and serves no"
            " findings stream (another service's port?): point --target at the server's"
            f" listen.stream address ({details})"
        )
    return None


def _unreachable_hint(details: str | None, access: StreamAccess) -> str:
    """Why the findings stream may not be reachable, from gRPC's ``details`` and ``access``:
    nothing listening, or TLS on one side only (or the client certificate refused)."""
    if "Connection refused" in (details or ""):  # no TLS question: nothing answered
        return "nothing listens there: is serve running, and --target its listen.stream address?"
    if not access.secure:
        return "if the stream has TLS, pass --tls-ca (or --tls)"
    hint = f"is the stream plaintext? {access.tls_off()}"
    if access.cert_file is not None:  # a refusal of it by the server's handshake, too
        hint += (
            f"; or does the server's TLS handshake refuse the client certificate of"
            f" {access.given('--tls-cert')} {access.cert_file}: its CA not trusted"
            " (taken out of the client CA file?), or the certificate expired?"
        )
    return hint
