"""The container image's health check: ``python -m toolwatch.healthcheck [HOST:PORT]``.

Asks the metrics listener's ``/healthz`` (``127.0.0.1:9464`` by default: the image's
``--metrics-listen`` port) and exits 0 on a 200, else 1 with the reason on stderr. The
listener speaks TLS when ``security.tls.listeners`` names ``metrics`` (``--tls-cert`` puts TLS
on all four listeners by default), which the check cannot know: the server's flags, files and
environment are its own. So it asks in plain HTTP, and when the listener closes the
connection without an HTTP answer (what a TLS listener does with plain text), asks again over
TLS. A plain listener is never sent a TLS handshake, which it would wait on as an unfinished
request line.

The certificate is not verified: the check talks to its own container over loopback and
sends nothing secret, and ``/healthz`` asks for neither a bearer token nor, under mutual TLS,
a client certificate (``toolwatch.security``). Standard library only: it runs every 30 s.
"""

from __future__ import annotations

import http.client
import ssl
import sys
import time
from typing import Final

__all__ = ["DEFAULT_ADDRESS", "check", "main"]

#: The metrics listener the image's ``serve`` binds (Dockerfile ``CMD``).
DEFAULT_ADDRESS: Final = "127.0.0.1:9464"
#: Both attempts within it: under the Dockerfile's ``HEALTHCHECK --timeout=3s``.
_TIMEOUT_SECONDS: Final = 2.5
#: What a TLS listener's answer to plain HTTP looks like to an HTTP client: the connection
#: closed or reset, or a TLS alert where the status line should be.
_NOT_PLAIN_HTTP: Final = (http.client.HTTPException, ConnectionResetError, BrokenPipeError)


def check(host: str, port: int, timeout: float = _TIMEOUT_SECONDS) -> int:
    """The HTTP status of ``GET /healthz`` at ``host:port``, over plain HTTP or, when the
    listener does not speak it, TLS. Raises ``OSError`` (nothing listening, a timeout) or
    ``http.client.HTTPException``."""
    deadline = time.monotonic() + timeout
    try:
        return _get(http.client.HTTPConnection(host, port, timeout=timeout))
    except _NOT_PLAIN_HTTP:
        pass
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    left = max(deadline - time.monotonic(), 0.1)
    return _get(http.client.HTTPSConnection(host, port, timeout=left, context=context))


def _get(connection: http.client.HTTPConnection) -> int:
    try:
        connection.request("GET", "/healthz")
        return connection.getresponse().status
    finally:
        connection.close()


def main(argv: list[str] | None = None) -> int:
    """Exit status 0 when ``/healthz`` answers 200, else 1 (Docker: unhealthy)."""
    args = sys.argv[1:] if argv is None else argv
    address = args[0] if args else DEFAULT_ADDRESS
    host, _, port = address.rpartition(":")
    try:
        status = check(host.strip("[]"), int(port))
    except (OSError, ValueError, http.client.HTTPException) as exc:
        print(f"toolwatch health check of {address}: {exc!r}", file=sys.stderr)
        return 1
    if status != 200:
        print(f"toolwatch health check of {address}: HTTP {status}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
