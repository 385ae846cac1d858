"""``toolwatch tail``: follow a toolwatch's live findings stream in a terminal.

One line per finding, oldest first::

    2026-11-29T20:31:02Z CRITICAL DANGEROUS_ACTION_DRIFT agent=refund-bot tool=issue_refund
    trace=4bf92f3577b34da6a3ce929d0e0e4736 span=b7ad6b7169203331 — <explanation>

(on one line; ``agent=``, ``tool=``, ``field=`` and ``span=`` appear when the finding has them:
the span tells apart the findings of one run that say the same), or with
``--json`` the findings-log object of each finding. The severity and category are coloured
when ``out`` is a terminal and ``NO_COLOR`` is unset (https://no-color.org); ``color=True`` or
``False`` forces the choice. Findings the server lost for this subscriber (its queue was
full) are told on ``err``: ``N findings missed before the next`` or ``... since the last one
printed``.

Exit codes, for the CLI and scripts that restart tail:

- 0: the server ended the stream (toolwatch shut down cleanly);
- 1: the server could not be reached, or the connection was lost;
- 2: the server rejected the filter (unknown category or severity) or the credentials, the
  target is no HOST:PORT or serves no findings stream, or
  a credentials file cannot be used;
- 130: interrupted (Ctrl-C).

A secured stream (the server's ``security`` section) is reached with a ``StreamAccess``: TLS
with the server's CA, a client certificate for mutual TLS, a bearer-token file.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TextIO

import grpc

from toolwatch._proto.toolwatch.v1 import findings_pb2, findings_pb2_grpc
from toolwatch.config import read_token_file
from toolwatch.sinks.findings import format_timestamp

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "StreamAccess",
    "format_finding_line",
    "run_tail",
    "stream_finding_record",
]

_RESET = "\x1b[0m"
_SEVERITY_COLOURS = {
    "critical": "\x1b[1;31m",  # bold red
    "high": "\x1b[31m",  # red
    "medium": "\x1b[33m",  # yellow
    "low": "\x1b[36m",  # cyan
}

EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
#: What gRPC says of a peer that answered a connection in HTTP/1.x.
_HTTP1_ANSWER: Final = "Trying to connect an http1.x server"

# The receive window stays at HTTP/2's 64 KiB: with BDP probing gRPC grows it to megabytes,
# and a tail that stops reading (Ctrl-Z, a full pipe) would hold thousands of findings the
# server has written and cannot count if the connection then drops. With 64 KiB the server's
# writes wait, its queue for this subscriber fills, and what it loses it counts and tells.
_CHANNEL_OPTIONS = (("grpc.http2.bdp_probe", 0),)


@dataclass(frozen=True, slots=True)
class StreamAccess:
    """How to reach a secured findings stream.

    TLS is on when ``tls`` is true or a CA or client certificate is given; ``ca_file`` (PEM)
    is the CA that signed the server's certificate (default: the system's roots).
    ``cert_file`` and ``key_file`` (PEM, together) are the client certificate for mutual
    TLS. The first token of ``bearer_token_file`` is sent as ``authorization: Bearer``.
    """

    tls: bool = False
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    bearer_token_file: Path | None = None

    def channel(self, target: str) -> grpc.Channel:
        """A channel to ``target``. Raises ``OSError``/``ValueError`` for unusable files."""
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("a client certificate needs both --tls-cert and --tls-key")
        if not (self.tls or self.ca_file or self.cert_file):
            return grpc.insecure_channel(target, options=_CHANNEL_OPTIONS)
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca_file),
            private_key=_read(self.key_file),
            certificate_chain=_read(self.cert_file),
        )
        return grpc.secure_channel(target, credentials, options=_CHANNEL_OPTIONS)

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The call metadata. Raises ``OSError``/``ValueError`` for an unusable token file."""
        if self.bearer_token_file is None:
            return ()
        return (("authorization", f"Bearer {read_token_file(self.bearer_token_file)[0]}"),)


def _read(path: Path | None) -> bytes | None:
    return None if path is None else path.read_bytes()


def run_tail(
    target: str,
    *,
    categories: Sequence[str] = (),
    min_severity: str = "",
    agents: Sequence[str] = (),
    as_json: bool = False,
    color: bool | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    access: StreamAccess | None = None,
) -> int:
    """Subscribes to the findings stream at ``target`` (``host:port``) and prints findings
    to ``out`` (default stdout) until the stream ends; messages go to ``err`` (default
    stderr). ``access`` reaches a secured stream (default: plaintext, no token). Returns
    the exit code (module docstring). Blocks the calling thread."""
    out = out or sys.stdout
    err = err or sys.stderr
    access = access or StreamAccess()
    printer = _Printer(out, as_json, _use_colour(out) if color is None else color)
    request = findings_pb2.SubscribeRequest(
        categories=list(categories),
        min_severity=min_severity,
        agents=list(agents),
        missed_after=True,
    )
    host, colon, port = target.rpartition(":")
    if not colon or not host or not port.isdigit():  # gRPC would dial port 443 unasked
        err.write(f"toolwatch tail: --target {target!r} is not HOST:PORT (listen.stream)\n")
        return EXIT_USAGE
    try:
        channel = access.channel(target)
    except (OSError, ValueError) as e:
        err.write(f"toolwatch tail: {e}\n")
        return EXIT_USAGE
    try:
        metadata = access.metadata()
    except (OSError, ValueError) as e:
        err.write(f"toolwatch tail: --bearer-token-file: {e}\n")
        return EXIT_USAGE
    with channel:
        stub = findings_pb2_grpc.FindingsServiceStub(channel)  # type: ignore[no-untyped-call]
        call = stub.Subscribe(request, metadata=metadata)
        try:
            return _follow(call, target, printer, err, access)
        except KeyboardInterrupt:
            call.cancel()
            return EXIT_INTERRUPTED


@dataclass(frozen=True, slots=True)
class _Printer:
    out: TextIO
    as_json: bool
    colour: bool

    def __call__(self, message: findings_pb2.Finding) -> None:
        if self.as_json:
            line = json.dumps(stream_finding_record(message), ensure_ascii=False)
        else:
            line = format_finding_line(message, self.colour)
        self.out.write(line + "\n")
        self.out.flush()


def _follow(call: Any, target: str, printer: _Printer, err: TextIO, access: StreamAccess) -> int:
    connected = False
    try:
        # Waits for the server's headers, sent once subscribed, or for the call to fail.
        connected = bool(call.initial_metadata())
        for message in call:
            _tell_missed(err, message.missed_before, "before the next")
            printer(message)
            _tell_missed(err, message.missed_after, "since the last one printed")
    except grpc.RpcError as e:
        return _report_error(e, target, connected, err, access)
    err.write(f"toolwatch tail: {target} ended the stream (server shutting down)\n")
    return EXIT_OK


def _tell_missed(err: TextIO, count: int, when: str) -> None:
    if count:
        err.write(
            f"toolwatch tail: {count} findings missed {when}: the server's queue for this"
            " subscriber was full (output.stream_queue_size)\n"
        )


def _report_error(
    error: Any, target: str, connected: bool, err: TextIO, access: StreamAccess
) -> int:
    code, details = error.code(), error.details()
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        err.write(f"toolwatch tail: {details}\n")
        return EXIT_USAGE
    if code == grpc.StatusCode.UNAUTHENTICATED:
        if access.bearer_token_file is None:
            err.write(
                f"toolwatch tail: {target} wants a bearer token (UNAUTHENTICATED):"
                " pass --bearer-token-file\n"
            )
        else:
            err.write(f"toolwatch tail: {target} refused the bearer token (UNAUTHENTICATED)\n")
        return EXIT_USAGE
    if code == grpc.StatusCode.UNIMPLEMENTED:
        err.write(
            f"toolwatch tail: {target} answers gRPC but serves no findings stream: point"
            " --target at the server's listen.stream address (not its OTLP port)\n"
        )
        return EXIT_USAGE
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        err.write(f"toolwatch tail: {target} refused the subscription: {details}\n")
        return EXIT_UNAVAILABLE
    if connected:
        err.write(f"toolwatch tail: lost the connection to {target}: {code.name}: {details}\n")
    elif _HTTP1_ANSWER in (details or ""):
        # gRPC's own words for a peer that answered in HTTP/1.x: toolwatch's OTLP/HTTP or
        # metrics port, a wrong address, not an outage.
        err.write(
            f"toolwatch tail: {target} answers HTTP/1.1, not gRPC, so it serves no findings"
            " stream (an OTLP/HTTP or metrics port?): point --target at the server's"
            " listen.stream address\n"
        )
        return EXIT_USAGE
    else:
        tls = bool(access.tls or access.ca_file or access.cert_file)
        hint = (
            "is the stream plaintext? drop --tls/--tls-ca"
            if tls
            else "if the stream has TLS, pass --tls-ca (or --tls)"
        )
        err.write(
            f"toolwatch tail: cannot reach the findings stream at {target}: {details} ({hint})\n"
        )
    return EXIT_UNAVAILABLE


def _use_colour(out: TextIO) -> bool:
    return out.isatty() and not os.environ.get("NO_COLOR")


def format_finding_line(message: findings_pb2.Finding, colour: bool = False) -> str:
    """The human-readable line of a stream finding (see the module docstring)."""
    seconds = message.time_unix_nano // 1_000_000_000
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
    head = f"{message.severity.upper()} {message.category}"
    if colour:
        head = _SEVERITY_COLOURS.get(message.severity, "") + head + _RESET
    labels = [f"{k}={v}" for k, v in _labels(message) if v]
    return " ".join([stamp, head, *labels]) + f" — {message.explanation}"


def _labels(message: findings_pb2.Finding) -> list[tuple[str, str]]:
    return [
        ("agent", message.agent),
        ("tool", message.tool),
        ("field", message.field),
        ("trace", message.trace_id),
        ("span", message.span_id),
    ]


def stream_finding_record(message: findings_pb2.Finding) -> dict[str, Any]:
    """A stream finding as the findings-log object (same keys; details as rendered text)."""
    return {
        "category": message.category,
        "severity": message.severity,
        "evaluator": message.evaluator,
        "reference": message.reference,
        "score": message.score if message.HasField("score") else None,
        "tool": message.tool or None,
        "field": message.field or None,
        "agent": message.agent or None,
        "explanation": message.explanation,
        "trace_id": message.trace_id,
        "span_id": message.span_id or None,
        "service": message.service or None,
        "timestamp": format_timestamp(message.time_unix_nano),
        "details": dict(message.details),
    }
