"""``toolwatch tail``: follow a toolwatch's live findings stream in a terminal.

One line per finding, oldest first::

    2026-11-29T20:31:02Z CRITICAL DANGEROUS_ACTION_DRIFT agent=refund-bot tool=issue_refund
    trace=4bf92f3577b34da6a3ce929d0e0e4736 span=b7ad6b7169203331 — <explanation>

(on one line; ``agent=``, ``tool=``, ``field=`` and ``span=`` appear when the finding has them:
the span tells apart the findings of one run that say the same; ``call_agent=`` follows
``agent=`` when another agent of the run made the finding's call (one used as a tool or handed
over to: ``details["call_agent"]``), the agent an alert's ``agent`` label does not name;
``case=`` names the golden case a finding was judged against, ``source_trace=`` and ``pair=``
the shadow source run and pair key; ``traffic=shadow`` marks a shadow candidate's finding,
which pages no one), or with
``--json`` the findings-log object of each finding, plus ``stream`` and ``sequence`` (its
place in the server's stream, from a server that numbers findings). The severity and category
are coloured when ``out`` is a terminal and ``NO_COLOR`` is unset (https://no-color.org);
``color=True`` or
``False`` forces the choice. Findings the server lost for this subscriber are told on
``err``: ``N findings missed before the next`` or ``... since the last one printed`` (``...
before this run printed any`` when the stream's end tells them and tail has printed none),
with the setting that bounds them: its queue was full (``output.stream_queue_size``), or,
after a resume, the server let them go before the replay read them
(``output.stream_replay_size``).
On an ``out`` whose encoding cannot hold a character of a finding (a Latin-1 locale, a
Windows redirect in its ANSI code page), the line has it as an escape (``\\u2014``), and a
``--json`` line escapes every non-ASCII character, still JSON.

With ``reconnect`` (``--reconnect``) tail follows the stream across lost connections and
server restarts: it subscribes again, waiting 0.5 s, then twice as long after each failure up
to 10 s, and resumes where it left off (``SubscribeRequest.resume``, the cursors of the streams
it followed, each with the token the server gave its last subscription there, so that what
the server held for that subscription is claimed as tail's, not another client's), so the
findings gRPC had written and a dropped connection lost are sent
again while the server still holds them (``output.stream_replay_size``); what it no longer
holds, or a restart, is told on ``err``. Once it has subscribed, a refused bearer token or a
token file it cannot use is an outage too, not a usage error: the server's and tail's token
files are rotated apart (two Secrets, each synced on its own), so tail reads its file again
at each attempt and subscribes once the file holds a token the server accepts. A stream the
server ends because a CA was taken out of its client CA file (``CLIENT_CAS_CHANGED``) is no
outage: tail subscribes again after the first wait, on a new connection whose TLS handshake
the server decides with the CAs it trusts now, and resumes; a refusal there is told as an
outage begins (each attempt reads ``--tls-cert`` again). A stream another client took over,
resuming with tail's token (``SUPERSEDED``: a second tail given the same cursor file), is
not subscribed again: the two would take it from each other at every turn.

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

A secured stream (the server's ``security`` section) is reached with a ``StreamAccess``: TLS
with the server's CA, a client certificate for mutual TLS, a bearer-token file.
"""

from __future__ import annotations

import codecs
import errno
import json
import os
import re
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol, TextIO

import grpc

from toolwatch._proto.toolwatch.v1 import findings_pb2, findings_pb2_grpc
from toolwatch.config.listen import is_loopback, parse_port
from toolwatch.config.security import read_token_file
from toolwatch.evaluation.severity import CALL_AGENT
from toolwatch.sinks.findings import format_timestamp
from toolwatch.sinks.stream.protocol import (
    CLIENT_CAS_CHANGED,
    KEEPALIVE_SECONDS,
    MISSED_AFTER_KEY,
    MISSED_FROM_REPLAY_KEY,
    RESUME_KEY,
    RESUME_LOST_KEY,
    RESUME_TOKEN_KEY,
    SHUTTING_DOWN,
    STREAM_ID_KEY,
    STREAM_SEQUENCE_KEY,
    SUPERSEDED,
)

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_SUPERSEDED",
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
#: Another client resumed with tail's token and took its stream (``SUPERSEDED``): not 3,
#: ``serve``'s "could not start", which the CLI's codes share.
EXIT_SUPERSEDED = 4
#: What gRPC says of a peer that answered a connection in HTTP/1.x, and of one that answered
#: in something else that is not HTTP/2 (SSH, a mail server); a TLS server closes it.
_HTTP1_ANSWER: Final = "Trying to connect an http1.x server"
_NOT_HTTP2_ANSWER: Final = "Failed parsing HTTP/2"


# The receive window stays at HTTP/2's 64 KiB: with BDP probing gRPC grows it to megabytes,
# and a tail that stops reading (Ctrl-Z, a full pipe) would hold thousands of findings the
# server has written and cannot count if the connection then drops. With 64 KiB the server's
# writes wait, its queue for this subscriber fills, and what it loses it counts and tells.
# Each subscription gets a new channel with subchannels of its own: in gRPC's global pool the
# next channel would share the last one's connection backoff, so an attempt right after a
# refused one (the server coming back) could fail at once, without trying.
# Keepalive pings find a connection gone silent without a reset, which would otherwise leave
# tail waiting forever (the server allows them, sinks.stream.protocol.stream_server_options): a ping
# every ``keepalive`` seconds, and a connection whose ping is not answered within a third of
# that is dropped, so a silent connection is found in at most 4/3 of it. gRPC core since
# its ping rework times a keepalive ping out by ``ping_timeout_ms`` (default a minute), no
# longer by ``keepalive_timeout_ms``: both are set.
def _channel_options(keepalive: float) -> tuple[tuple[str, int], ...]:
    timeout_ms = round(keepalive * 1000 / 3)
    return (
        ("grpc.http2.bdp_probe", 0),
        ("grpc.use_local_subchannel_pool", 1),
        ("grpc.keepalive_time_ms", round(keepalive * 1000)),
        ("grpc.keepalive_timeout_ms", timeout_ms),
        ("grpc.http2.ping_timeout_ms", timeout_ms),
        ("grpc.http2.max_pings_without_data", 0),
    )


#: Seconds between attempts to subscribe again (``reconnect``): the first wait, the longest.
RECONNECT_FIRST_WAIT, RECONNECT_LONGEST_WAIT = 0.5, 10.0


#: ``StreamAccess``'s flags: their environment variable and help.
ACCESS_FLAGS: Final[Mapping[str, tuple[str, str]]] = {
    "--tls-ca": ("TOOLWATCH_TAIL_TLS_CA", "CA certificate (PEM) of the server; turns TLS on"),
    "--tls-cert": ("TOOLWATCH_TAIL_TLS_CERT", "client certificate (PEM) for mutual TLS"),
    "--tls-key": ("TOOLWATCH_TAIL_TLS_KEY", "client private key (PEM) for mutual TLS"),
    "--bearer-token-file": ("TOOLWATCH_TAIL_BEARER_TOKEN_FILE", "send this file's first token"),
}


@dataclass(frozen=True, slots=True)
class StreamAccess:
    """How to reach a secured findings stream.

    TLS is on when ``tls`` is true or a CA or client certificate is given; ``ca_file`` (PEM)
    is the CA that signed the server's certificate (default: the system's roots).
    ``cert_file`` and ``key_file`` (PEM, together) are the client certificate for mutual
    TLS. The first token of ``bearer_token_file`` is sent as ``authorization: Bearer``.
    ``from_env`` names the ``TOOLWATCH_TAIL_*`` variable that gave a file, by its flag, so
    that an error names what the operator set.
    """

    tls: bool = False
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    bearer_token_file: Path | None = None
    from_env: Mapping[str, str] = field(default_factory=dict)

    def given(self, flag: str) -> str:
        """How the file of ``flag`` was given: the flag, or the variable that set it."""
        return self.from_env.get(flag, flag)

    def tls_off(self) -> str:
        """What turns TLS off again: each flag to drop, or variable to unset, that turned it on."""
        on = [("--tls", self.tls), ("--tls-ca", self.ca_file), ("--tls-cert", self.cert_file)]
        steps = [
            f"unset {self.from_env[flag]}" if flag in self.from_env else f"drop {flag}"
            for flag, given in on
            if given
        ]
        return " and ".join(steps)

    @property
    def secure(self) -> bool:
        """Whether the channel has TLS."""
        return bool(self.tls or self.ca_file or self.cert_file)

    def channel(self, target: str, keepalive: float = KEEPALIVE_SECONDS) -> grpc.Channel:
        """A channel to ``target`` that pings every ``keepalive`` seconds. Raises
        ``ValueError`` naming the flag and the file for one that cannot be read or holds no
        PEM certificate (or key) that fits: gRPC takes any bytes, and each handshake then
        fails as if the server could not be reached."""
        if (self.cert_file is None) != (self.key_file is None):
            given, missing = ("--tls-cert", "--tls-key")[:: 1 if self.key_file is None else -1]
            raise ValueError(
                f"{self.given(given)} without {missing} (or {ACCESS_FLAGS[missing][0]}):"
                " a client certificate needs both"
            )
        options = _channel_options(keepalive)
        if not self.secure:
            return grpc.insecure_channel(target, options=options)
        chain, key = _client_certificate(self.cert_file, self.key_file, self.given)
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_ca_certificates(self.ca_file, self.given("--tls-ca")),
            private_key=key,
            certificate_chain=chain,
        )
        return grpc.secure_channel(target, credentials, options=options)

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The call metadata. Raises ``ValueError`` naming the flag for an unusable token
        file."""
        path = self.bearer_token_file
        if path is None:
            return ()
        given = self.given("--bearer-token-file")
        try:
            token = read_token_file(path)[0]
        except OSError as e:
            raise ValueError(f"{given}: {path}: cannot read: {e.strerror or e}") from None
        except ValueError as e:
            raise ValueError(f"{given}: {e}") from None
        return (("authorization", f"Bearer {token}"),)


def _local(host: str) -> bool:
    """Whether the host part of a gRPC target is this machine: a loopback name or address,
    as ``dns:///localhost``, ``ipv4:127.0.0.1`` or ``[::1]`` write it too, or a unix socket."""
    if host.startswith(("unix:", "unix-abstract:")):
        return True
    name = host.rpartition("/")[2].removeprefix("ipv4:").removeprefix("ipv6:")
    return is_loopback(name.strip("[]"))


def _read(flag: str, path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise ValueError(f"{flag}: {path}: cannot read: {e.strerror or e}") from None


def _ca_certificates(path: Path | None, given: str) -> bytes | None:
    """``--tls-ca``'s file (``None``: the system's roots), checked to hold PEM certificates;
    errors name it as ``given``."""
    if path is None:
        return None
    data = _read(given, path)
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=data.decode("ascii"))
    except UnicodeDecodeError:  # DER, or another binary file
        reason = "not PEM text"
    except (ssl.SSLError, ValueError) as e:  # no certificate, a broken one, an empty file
        reason = _ssl_reason(e)
    else:
        return data
    raise ValueError(f"{given}: {path}: holds no PEM CA certificate ({reason})")


def _client_certificate(
    cert: Path | None, key: Path | None, given: Callable[[str], str]
) -> tuple[bytes | None, bytes | None]:
    """``--tls-cert``'s chain and ``--tls-key``'s key (PEM), checked to load together;
    errors name each as ``given`` says it was given."""
    if cert is None or key is None:
        return None, None
    named_cert, named_key = given("--tls-cert"), given("--tls-key")
    chain, private = _read(named_cert, cert), _read(named_key, key)
    try:  # an encrypted key is refused: gRPC takes none, and OpenSSL would prompt for it
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(cert, key, password=lambda: b"")
    except (ssl.SSLError, OSError) as e:
        raise ValueError(
            f"{named_cert} {cert} with {named_key} {key}: not a PEM certificate chain and its"
            f" unencrypted private key ({_ssl_reason(e)})"
        ) from None
    return chain, private


def _ssl_reason(error: Exception) -> str:
    """OpenSSL's reason (``NO_START_LINE``: ``no start line``), else the error's words
    without the place in Python's source that raised it."""
    reason = getattr(error, "reason", None)
    if reason:
        return str(reason).replace("_", " ").lower()
    return re.sub(r" \(_ssl\.c:\d+\)$", "", str(error))


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
    reconnect: bool = False,
    cursor_file: Path | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    keepalive: float = KEEPALIVE_SECONDS,
) -> int:
    """Subscribes to the findings stream at ``target`` (``host:port``) and prints findings
    to ``out`` (default stdout) until the stream ends; messages go to ``err`` (default
    stderr). ``access`` reaches a secured stream (default: plaintext, no token);
    ``reconnect`` follows it across lost connections and restarts, waiting with ``sleep``
    (``clock`` says how long a subscription lasted); it pings the server every ``keepalive``
    seconds to find a connection gone silent. ``cursor_file`` keeps where tail is in
    each stream across runs: read at start (a run resumes where the last one left off) and
    rewritten after the findings printed (``CURSOR_SAVE_SECONDS``); one tail to a file (two
    would resume with one token, each ending the other's stream). Returns the exit code
    (module docstring). Blocks the calling thread."""
    out = out or sys.stdout
    err = err or sys.stderr
    access = access or StreamAccess()
    colour = _use_colour(out) if color is None else color
    printer = _Printer(out, as_json, colour, _narrow_encoding(out))
    request = findings_pb2.SubscribeRequest(
        categories=list(categories),
        min_severity=min_severity,
        agents=list(agents),
        missed_after=True,
    )
    problem = _target_problem(target)
    if problem is not None:
        err.write(
            f"toolwatch tail: --target {target!r} is not HOST:PORT (listen.stream){problem}\n"
        )
        return EXIT_USAGE
    host = target.rpartition(":")[0]
    if access.bearer_token_file is not None and not access.secure and not _local(host):
        err.write(
            f"toolwatch tail: warning: the bearer token goes to {target} without TLS, in clear"
            " text on the network: pass --tls-ca (or --tls) if the stream has TLS\n"
        )
    try:
        try:
            cursor = _Cursor.load(cursor_file, clock, warn=lambda m: _tell(err, m))
        except (OSError, ValueError) as e:
            err.write(f"toolwatch tail: --cursor-file {cursor_file}: {e}\n")
            return EXIT_USAGE
        session = _Session(target, printer, err, access, cursor, keepalive)
        return _subscriptions(session, request, reconnect, (sleep, clock))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _target_problem(target: str) -> str | None:
    """What makes ``target`` no ``HOST:PORT`` (``""``: no port, or no host), or ``None``.
    Checked before dialling, as ``listen.*`` addresses are checked: without a port gRPC dials
    443 unasked, a port above 65535 modulo 65536 (another service's, perhaps), port 0 and one
    in other digits than ASCII not at all; each an outage that ``--reconnect`` would retry
    forever."""
    host, colon, port = target.rpartition(":")
    if not colon or not host:
        return ""
    try:
        number = parse_port(port)
    except ValueError as e:
        return f": {e}"
    # A listener binds port 0 (any free one); nothing can be dialled there.
    return ": port 0 is a listener's (any free port), not one to dial" if number == 0 else None


def _subscriptions(
    session: _Session,
    request: findings_pb2.SubscribeRequest,
    reconnect: bool,
    timing: tuple[Callable[[float], None], Callable[[], float]],
) -> int:
    """Subscribes, and with ``reconnect`` subscribes again after each outage; the exit code.
    An outage is told once, whatever the number of attempts it takes; the wait between them
    (``timing``: sleep, clock) starts again after a subscription that delivered findings,
    ended cleanly or lasted the longest wait (one that fails right after subscribing keeps
    growing it)."""
    err, (sleep, clock) = session.err, timing
    wait = RECONNECT_FIRST_WAIT
    while True:
        started = clock()
        ended = session.subscribe(request)
        if ended.code == EXIT_INTERRUPTED:
            return EXIT_INTERRUPTED
        if ended.connected:
            session.cursor.lost_connection = ended.code != EXIT_OK
            lasted = clock() - started >= RECONNECT_LONGEST_WAIT
            if ended.delivered or ended.code == EXIT_OK or lasted or ended.asked_to_reconnect:
                wait = RECONNECT_FIRST_WAIT
        # Credentials that worked in this run and fail now are being rotated: an outage.
        outage = ended.code in (EXIT_OK, EXIT_UNAVAILABLE) or (
            ended.credentials and session.subscribed
        )
        if not reconnect or not outage:
            # Not even with ``reconnect``: the other client would take the stream back.
            held = "; not reconnecting" if reconnect and ended.code == EXIT_SUPERSEDED else ""
            err.write(f"toolwatch tail: {ended.message}{held}\n")
            return ended.code
        if ended.asked_to_reconnect:  # no outage: a refusal of the next attempt is told
            err.write(f"toolwatch tail: {ended.message}; reconnecting\n")
        elif not session.outage or (ended.credentials and not session.outage_credentials):
            token_file = session.access.bearer_token_file
            reading = (
                f", reading {token_file} again at each attempt"
                if ended.credentials and token_file is not None
                else ""
            )
            err.write(f"toolwatch tail: {ended.message}; reconnecting{reading}\n")
            session.outage = True
            session.outage_credentials |= ended.credentials
        sleep(wait)
        wait = min(2 * wait, RECONNECT_LONGEST_WAIT)


@dataclass(frozen=True, slots=True)
class _Ended:
    """How one subscription ended: the exit code, what to tell, whether it had subscribed,
    how many findings it delivered, whether it failed for its credentials (a refused bearer
    token, a credentials file that cannot be used), and whether the server ended it for tail
    to connect again (``CLIENT_CAS_CHANGED``)."""

    code: int
    message: str
    connected: bool
    delivered: int = 0
    credentials: bool = False
    asked_to_reconnect: bool = False


#: How many streams' cursors tail keeps (and sends when it resumes): the latest.
KEPT_CURSORS = 16
#: The shortest time between two rewrites of the cursor file while findings come: a rewrite
#: takes about 140 µs on ext4, which held tail to about 7,000 findings a second when each
#: one was kept at once, fewer than a burst the server sends (and whatever tail cannot read
#: in time, the server's queue for it loses). At most ten a second, the last of a burst a
#: tenth of a second after it (from a timer thread), and when a subscription ends: a tail
#: killed outright (SIGKILL) prints again, on its next run, what it printed in its last
#: tenth of a second; one that ends any other way (the CLI takes SIGTERM as Ctrl-C), at
#: most the finding it was printing.
CURSOR_SAVE_SECONDS = 0.1


class _Timer(Protocol):
    def cancel(self) -> None: ...


def _start_timer(delay: float, action: Callable[[], None]) -> _Timer:
    timer = threading.Timer(delay, action)
    timer.daemon = True  # an exit does not wait for it: flush() saves what it would
    timer.start()
    return timer


def _no_warning(_message: str) -> None:
    pass


@dataclass(slots=True)
class _Cursor:
    """Where tail is in each server stream it has followed (stream id -> the last finding's
    sequence, or, before any, the stream's when tail subscribed), the token of its last
    subscription to each (stream id -> ``toolwatch-resume-token``, sent back when it resumes),
    and which one it follows.

    Once tail follows the stream, a file that cannot be rewritten (a full disk, a volume
    remounted read-only, a permission taken away) is told once to ``warn``, naming it and
    why, and tail carries on: the rewrite is tried again, at most every
    ``CURSOR_SAVE_SECONDS``, and told when it works again. Meanwhile the file keeps the last
    cursor written, so a run started then prints again what this one printed since."""

    streams: dict[str, int] = field(default_factory=dict)
    stream_id: str = ""
    lost_connection: bool = False  # the last live subscription ended by a lost connection
    file: Path | None = None  # where the cursors are kept across runs
    clock: Callable[[], float] = time.monotonic
    start_timer: Callable[[float, Callable[[], None]], _Timer] = _start_timer
    saved_at: float = float("-inf")  # the last rewrite, or attempt at one
    unsaved: bool = False  # the file is behind
    warn: Callable[[str], None] = _no_warning
    failing: bool = False  # the last rewrite failed, and was told
    in_place: bool = False  # the file cannot be replaced by a rename: rewritten in place
    tokens: dict[str, str] = field(default_factory=dict)  # of the streams in ``streams``
    _pending: _Timer | None = None  # a rewrite to come
    _lock: threading.Lock = field(default_factory=threading.Lock)  # the timer's thread saves

    @classmethod
    def load(
        cls,
        file: Path | None,
        clock: Callable[[], float] = time.monotonic,
        start_timer: Callable[[float, Callable[[], None]], _Timer] = _start_timer,
        warn: Callable[[str], None] = _no_warning,
    ) -> _Cursor:
        """The cursors kept in ``file`` (none if it does not exist yet, or is empty: made with
        ``touch`` for a mount of its own, before tail saved anything), and their tokens (none
        in a file written before tail kept them). Raises ``OSError`` or ``ValueError`` for a
        file that cannot be read or is not a cursor file: one whose stream ids are not all
        non-empty strings, whose sequences are not all integers a ``SubscribeRequest`` can
        carry (uint64), or whose tokens are not all strings, so that a damaged file is told,
        naming it, before tail subscribes."""
        streams: dict[str, int] = {}
        tokens: dict[str, str] = {}
        if file is not None and file.exists():
            try:
                text = file.read_text(encoding="utf-8")
                kept = json.loads(text) if text else {"streams": {}}
                streams = _kept_streams(kept["streams"])
                tokens = _kept_tokens(kept.get("tokens", {}), streams)
            except (ValueError, KeyError, TypeError):
                raise ValueError(
                    'not a tail cursor file (expected {"streams": {"<stream id>": <sequence>}},'
                    " each sequence an integer from 0 to 2**64-1, and optionally"
                    ' "tokens": {"<stream id>": "<token>"})'
                ) from None
        cursor = cls(
            streams, file=file, clock=clock, start_timer=start_timer, warn=warn, tokens=tokens
        )
        cursor.save()  # a file that cannot be written fails now, not after the first finding
        return cursor

    def save(self) -> None:
        """Rewrites the cursor file, if any, whole and durably: a copy beside it,
        ``FILE.<random>.partial``, is created (0600: it holds the tokens tail resumes as,
        and whoever reads one can resume as tail, taking what the server holds for it and
        ending its stream), written and synced, renamed over the file, and the directory
        synced, so that a crash, of tail or of the machine, leaves the old one or the new
        (never an empty file, which the next run would refuse). A file that cannot be
        replaced so (``_IN_PLACE``: mounted on its own, as a container's single-file volume,
        or in a directory tail cannot write, as a read-only root) is rewritten in place from
        then on, its mode as it was, told once to ``warn``. Raises ``OSError`` when it
        cannot."""
        with self._lock:
            self._save()

    def _save(self) -> None:
        if self.file is None:
            return
        kept: dict[str, object] = {"streams": self.streams}
        if self.tokens:  # without, as a file from before tail kept them
            kept["tokens"] = self.tokens
        text = json.dumps(kept) + "\n"
        if self.in_place:
            _rewrite(self.file, text)
        else:
            self._replace(self.file, text)
        self.saved_at, self.unsaved = self.clock(), False

    def _replace(self, file: Path, text: str) -> None:
        partial: Path | None = None
        try:
            # A name of its own, made anew, readable by its owner alone whatever the umask
            # (mkstemp's 0600): a second tail given the same file (which it should not be)
            # neither fails on this one's copy nor writes into it.
            made = tempfile.mkstemp(prefix=f"{file.name}.", suffix=".partial", dir=file.parent)
            fd, partial = made[0], Path(made[1])
            with open(fd, "w", encoding="utf-8") as copy:
                copy.write(text)
                copy.flush()
                os.fsync(copy.fileno())  # its data before the rename: never an empty file
            os.replace(partial, file)
        except OSError as e:
            if partial is not None:
                with suppress(OSError):  # a half-written copy takes no room on a full disk
                    partial.unlink()
            why = _IN_PLACE.get(e.errno or 0)
            if why is None or not file.is_file():
                raise
            # Rewritten in place instead, which a crash can leave damaged; a file that cannot
            # be written either raises here.
            _rewrite(file, text)
            self.in_place = True
            copies = f"{file.name}.*.partial"
            self.warn(
                f"--cursor-file {file}: {why.format(partial=copies, reason=e.strerror)},"
                " so it is rewritten in place: a crash while it is written can leave it"
                " damaged, and the next run then refuses it (remove it to start again); mount"
                " its directory instead"
            )
            return
        _sync_directory(file.parent)

    def _keep(self) -> None:
        """``_save`` while following the stream: a failure is told once, not raised (class
        docstring); ``unsaved`` stays set, so the rewrite is tried again."""
        try:
            self._save()
        except OSError as e:
            self.saved_at = self.clock()  # tried again no sooner than a rewrite would be
            if not self.failing:
                self.failing = True
                self.warn(
                    f"--cursor-file {self.file}: cannot rewrite it ({_os_reason(e)}); following"
                    " the stream all the same and trying again: until it is rewritten, a run"
                    " started now resumes from where it last was"
                )
            return
        if self.failing:
            self.failing = False
            self.warn(f"--cursor-file {self.file}: rewritten again")

    def flush(self) -> None:
        """Rewrites the cursor file if it is behind (at the end of a subscription)."""
        with self._lock:
            if self._pending is not None:
                self._pending.cancel()
                self._pending = None
            if self.unsaved:
                self._keep()

    def _catch_up(self) -> None:
        """The timer's: the rewrite a burst's last findings were waiting for."""
        with self._lock:
            self._pending = None
            if self.unsaved:
                self._keep()

    @property
    def sequence(self) -> int:
        return self.streams.get(self.stream_id, 0)

    def handled(self, sequence: int) -> None:
        """A finding of the current stream was printed, and is then kept (in the file at most
        ``CURSOR_SAVE_SECONDS`` later, or when the subscription ends): one printed just
        before tail is killed is printed again by the next run, never skipped."""
        if not self.stream_id:
            return
        with self._lock:
            self.streams[self.stream_id] = max(self.sequence, sequence)
            if self.file is None:
                return
            self.unsaved = True
            since = self.clock() - self.saved_at
            if since >= CURSOR_SAVE_SECONDS:
                self._keep()
            elif self._pending is None:
                self._pending = self.start_timer(CURSOR_SAVE_SECONDS - since, self._catch_up)

    def resuming(self, request: findings_pb2.SubscribeRequest) -> findings_pb2.SubscribeRequest:
        if not self.streams:
            return request
        resumed = findings_pb2.SubscribeRequest()
        resumed.CopyFrom(request)
        for stream_id, after in self.streams.items():
            token = self.tokens.get(stream_id, "")
            resumed.resume.add(stream_id=stream_id, after=after, token=token)
        return resumed

    def subscribed(self, metadata: Mapping[str, str], target: str, again: bool = True) -> str:
        """Takes the subscription's initial metadata; what to tell of the resume, if any.
        ``again``: tail subscribed before in this run (else it resumes where the cursor file
        says the last run left off)."""
        stream = metadata.get(STREAM_ID_KEY, "")  # none from a server that cannot resume
        resumed, lost = metadata.get(RESUME_KEY), int(metadata.get(RESUME_LOST_KEY) or 0)
        token = metadata.get(RESUME_TOKEN_KEY, "")  # none from a server older than tokens
        self.stream_id = stream
        with self._lock:
            if stream and resumed != "same":
                # New to tail: a fresh subscription starts where the stream is; a resumed one
                # is sent everything held, all after anything tail printed.
                start = 0 if resumed == "new" else int(metadata.get(STREAM_SEQUENCE_KEY) or 0)
                self.streams.pop(stream, None)
                self.streams[stream] = start
                while len(self.streams) > KEPT_CURSORS:
                    self.tokens.pop(forgotten := next(iter(self.streams)), None)
                    del self.streams[forgotten]
                self.unsaved = True
            if stream and self.tokens.get(stream, "") != token:
                # Kept before any finding is printed: a run killed after printing one resumes
                # as this subscription, and claims what the server holds for it.
                if token:
                    self.tokens[stream] = token
                else:
                    self.tokens.pop(stream, None)
                self.unsaved = True
            if self.unsaved:
                self._keep()
        unheld = (
            f"; up to {lost} findings that pass the filter were published since and are no"
            " longer held by the server (output.stream_replay_size): missed (its findings log"
            " has them)"
            if lost
            else ""
        )
        previous = (
            "; findings the previous one published after the last one printed, if any, are in"
            " its findings log"
            if self.lost_connection
            else ""
        )
        if again:
            verb, where = "reconnected to", "where it left off"
        else:
            verb, where = "connected to", "where the last run left off (--cursor-file)"
        if resumed == "same":
            return f"{verb} {target}, resuming {where}{unheld}"
        if resumed == "new":
            return (
                f"{verb} {target}, a stream new to tail (the server restarted, or"
                f" another one answers): what it holds is sent{previous}{unheld}"
            )
        return ""


#: Why ``FILE.<random>.partial`` could not replace the cursor file, by errno, where rewriting
#: the file in place may still work: a file mounted on its own (``docker -v FILE:FILE``, a
#: Kubernetes ``subPath``), which no rename replaces; a directory tail cannot write (``docker
#: run --read-only``, ``readOnlyRootFilesystem``, a non-root user's file in ``/``).
_IN_PLACE: Final = {
    errno.EBUSY: "cannot be renamed over ({reason}: a file mounted on its own?)",
    errno.EROFS: "cannot write {partial} beside it ({reason}: a read-only root?)",
    errno.EACCES: "cannot write {partial} beside it ({reason}: its directory not writable?)",
    errno.EPERM: "cannot write {partial} beside it ({reason}: its directory not writable?)",
}


def _rewrite(file: Path, text: str) -> None:
    """Writes ``text`` over ``file`` in place (no rename), then syncs it: the new text first,
    then the file cut to its length, so that it is never empty."""
    data = text.encode("utf-8")
    with file.open("r+b") as kept:
        kept.write(data)
        kept.truncate(len(data))
        kept.flush()
        os.fsync(kept.fileno())


#: What a file system that cannot sync a directory says (some network and FUSE ones): the
#: rename stands, as durable as that file system makes it.
_NO_DIRECTORY_SYNC: Final = frozenset({errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP})


def _sync_directory(directory: Path) -> None:
    """Syncs ``directory``, so that a rename in it survives a crash of the machine; best
    effort where the file system refuses (``_NO_DIRECTORY_SYNC``), or the directory cannot
    be opened to sync it (``EACCES``: Windows opens no directory, and one may be writable
    and not readable)."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except PermissionError:
        return
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in _NO_DIRECTORY_SYNC:
            raise
    finally:
        os.close(fd)


#: The largest sequence a cursor can hold: ``ResumeFrom.after`` is a uint64.
_LAST_SEQUENCE = 2**64 - 1


def _os_reason(error: OSError) -> str:
    """An ``OSError`` in words, with the path it names (the cursor file's
    ``FILE.<random>.partial`` copy, which is written first)."""
    reason = error.strerror or str(error)
    return f"{reason}: {error.filename}" if error.filename else reason


def _kept_tokens(kept: object, streams: Mapping[str, int]) -> dict[str, str]:
    """The ``tokens`` of a cursor file, of the streams it keeps a cursor of; raises
    ``ValueError`` unless every token is a string."""
    if not isinstance(kept, dict) or not all(isinstance(token, str) for token in kept.values()):
        raise ValueError("not a mapping of stream ids to tokens")
    return {stream: token for stream, token in kept.items() if stream in streams and token}


def _kept_streams(kept: object) -> dict[str, int]:
    """The ``streams`` of a cursor file; raises ``ValueError`` unless every stream id is a
    non-empty string and every sequence an integer from 0 to ``_LAST_SEQUENCE`` (a bool is
    none here, nor is a float: JSON's ``1e30`` or ``3.0``)."""
    if not isinstance(kept, dict) or not all(
        stream and type(after) is int and 0 <= after <= _LAST_SEQUENCE
        for stream, after in kept.items()
    ):
        raise ValueError("not a mapping of stream ids to sequences")
    return dict(kept)


@dataclass(frozen=True, slots=True)
class _Printer:
    """Prints each finding to ``out``. ``narrow``: ``out``'s encoding when it cannot hold
    every character (``_narrow_encoding``): a text line has what it cannot hold as an escape,
    as Python's ``sys.stderr`` does, and a JSON line escapes every non-ASCII character, so
    that a finding is always printed (names are what agents sent: any character)."""

    out: TextIO
    as_json: bool
    colour: bool
    narrow: str | None = None

    def __call__(self, message: findings_pb2.Finding, stream_id: str) -> None:
        if self.as_json:
            record = stream_finding_record(message)
            if stream_id:  # where it is in the stream: a consumer that restarts can dedupe
                record |= {"stream": stream_id, "sequence": message.sequence}
            # JSON's own escapes where the output is narrow: backslashreplace would write a
            # character beyond the BMP as \U0001XXXX, which is no JSON.
            ascii_only = self.narrow is not None
            line = json.dumps(record, ensure_ascii=ascii_only).translate(_JSON_ESCAPED)
        else:
            line = format_finding_line(message, self.colour)
            if self.narrow is not None:
                line = line.encode(self.narrow, "backslashreplace").decode(self.narrow)
        self.out.write(line + "\n")
        self.out.flush()


def _narrow_encoding(out: TextIO) -> str | None:
    """``out``'s encoding when it cannot hold every character (Latin-1, cp1252: a locale's,
    or the ANSI code page Windows gives a redirect), else ``None`` (UTF-8, UTF-16, or a
    stream of text, as ``io.StringIO``, with no encoding)."""
    encoding = getattr(out, "encoding", None)
    if not encoding:
        return None
    try:
        name = codecs.lookup(encoding).name
    except LookupError:  # an encoding Python does not know cannot be written to either
        return None
    return None if name.startswith("utf") else name


@dataclass(slots=True)
class _Session:
    """A tail's subscriptions to one target: where it is in the stream, how it prints,
    whether one has subscribed (and printed a finding), and whether an outage has been told
    (and as one of the credentials)."""

    target: str
    printer: _Printer
    err: TextIO
    access: StreamAccess
    cursor: _Cursor = field(default_factory=_Cursor)
    keepalive: float = KEEPALIVE_SECONDS
    subscribed: bool = False
    printed: bool = False  # a finding, in this run
    outage: bool = False
    outage_credentials: bool = False

    def subscribe(self, request: findings_pb2.SubscribeRequest) -> _Ended:
        """One subscription, from a new channel (so a reloaded token or certificate is
        used), resuming where the last one ended."""
        try:  # the files, named by their flags (``StreamAccess``)
            metadata = self.access.metadata()
            channel = self.access.channel(self.target, self.keepalive)
        except ValueError as e:
            return _Ended(EXIT_USAGE, str(e), False, credentials=True)
        with channel:
            stub = findings_pb2_grpc.FindingsServiceStub(channel)  # type: ignore[no-untyped-call]
            call = stub.Subscribe(self.cursor.resuming(request), metadata=metadata)
            try:
                return self._follow(call)
            except KeyboardInterrupt:
                call.cancel()
                return _Ended(EXIT_INTERRUPTED, "interrupted", True)
            finally:
                self.cursor.flush()

    def _follow(self, call: Any) -> _Ended:
        err, cursor, connected, delivered = self.err, self.cursor, False, 0
        try:
            # Waits for the server's headers, sent once subscribed, or for the call to fail.
            metadata = dict(call.initial_metadata() or ())
            connected = bool(metadata)
            # A call that fails before subscribing may end with no headers: no cursor news.
            if connected:
                said = cursor.subscribed(metadata, self.target, again=self.subscribed)
                if not said and self.outage:
                    said = f"connected to {self.target}"
                if said:
                    err.write(f"toolwatch tail: {said}\n")
                self.subscribed, self.outage, self.outage_credentials = True, False, False
            for message in call:
                _tell_missed(
                    err, message.missed_before, "before the next", message.missed_from_replay
                )
                self.printer(message, cursor.stream_id)
                self.printed = True
                delivered += 1
                cursor.handled(message.sequence)
                _tell_missed(err, message.missed_after, "since the last one printed")
            # Lost after the last finding sent (a replay's last ones let go, a queue's losses
            # no later finding told), told as it ends.
            trailing = dict(call.trailing_metadata() or ())
            _tell_missed(
                err,
                _count(trailing.get(MISSED_AFTER_KEY)),
                "since the last one printed" if self.printed else "before this run printed any",
                _count(trailing.get(MISSED_FROM_REPLAY_KEY)),
            )
        except grpc.RpcError as e:
            code, said = _report_error(e, self.target, connected, self.access)
            refused = e.code() == grpc.StatusCode.UNAUTHENTICATED
            credentials = refused and self.access.bearer_token_file is not None
            asked = _asked_to_reconnect(e)
            return _Ended(code, said, connected, delivered, credentials, asked)
        ended = f"{self.target} ended the stream (server shutting down)"
        return _Ended(EXIT_OK, ended, connected, delivered)


def _count(value: str | None) -> int:
    """A count the server sent in metadata; 0 for none, or for one that is no count."""
    return int(value) if value and value.isascii() and value.isdigit() else 0


def _tell(err: TextIO, message: str) -> None:
    err.write(f"toolwatch tail: {message}\n")
    err.flush()


#: Why the server lost findings for tail, naming the setting that bounds each kind.
_QUEUE_FULL = "the server's queue for this subscriber was full (output.stream_queue_size)"
_REPLAY_BEHIND = (
    "the server let go of them before this resumed subscription's replay read them"
    " (output.stream_replay_size)"
)


def _tell_missed(err: TextIO, count: int, when: str, from_replay: int = 0) -> None:
    """Tells ``count`` findings missed, ``from_replay`` of them lost from the replay
    (``Finding.missed_from_replay``), the others to the queue."""
    if not count:
        return
    from_replay = min(from_replay, count)
    if from_replay == 0:
        why = _QUEUE_FULL
    elif from_replay == count:
        why = _REPLAY_BEHIND
    else:
        why = (
            f"{from_replay} the server let go of before this resumed subscription's replay"
            f" read them (output.stream_replay_size), {count - from_replay} as its queue for"
            " this subscriber was full (output.stream_queue_size)"
        )
    err.write(f"toolwatch tail: {count} findings missed {when}: {why}\n")


def _asked_to_reconnect(error: Any) -> bool:
    """Whether the server ended the stream for its client to connect again (a CA was taken
    out of its client CA file: ``FindingsStreamServicer.reconnect_all``)."""
    return bool(
        error.code() == grpc.StatusCode.UNAVAILABLE and error.details() == CLIENT_CAS_CHANGED
    )


def _report_error(
    error: Any, target: str, connected: bool, access: StreamAccess
) -> tuple[int, str]:
    """The exit code for a failed subscription, and what to tell."""
    code, details = error.code(), error.details()
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return EXIT_USAGE, details
    if _asked_to_reconnect(error):
        return EXIT_UNAVAILABLE, f"{target} ended the stream: {details}"
    if code == grpc.StatusCode.ABORTED and details == SUPERSEDED:
        return EXIT_SUPERSEDED, f"{target} ended the stream: {details}"
    if code == grpc.StatusCode.UNAUTHENTICATED:
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
    if connected:
        return EXIT_UNAVAILABLE, f"lost the connection to {target}: {code.name}: {details}"
    if code == grpc.StatusCode.UNAVAILABLE and details == SHUTTING_DOWN:
        return EXIT_UNAVAILABLE, f"{target} is shutting down"
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
    if "Connection refused" in (details or ""):  # no TLS question: nothing answered
        hint = "nothing listens there: is serve running, and --target its listen.stream address?"
    elif access.secure:
        hint = f"is the stream plaintext? {access.tls_off()}"
        if access.cert_file is not None:  # a refusal of it by the server's handshake, too
            hint += (
                f"; or does the server's TLS handshake refuse the client certificate of"
                f" {access.given('--tls-cert')} {access.cert_file}: its CA not trusted"
                " (taken out of the client CA file?), or the certificate expired?"
            )
    else:
        hint = "if the stream has TLS, pass --tls-ca (or --tls)"
    return EXIT_UNAVAILABLE, f"cannot reach the findings stream at {target}: {details} ({hint})"


def _use_colour(out: TextIO) -> bool:
    return out.isatty() and not os.environ.get("NO_COLOR")


def format_finding_line(message: findings_pb2.Finding, colour: bool = False) -> str:
    """The human-readable line of a stream finding (see the module docstring)."""
    seconds = message.time_unix_nano // 1_000_000_000
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
    head = f"{message.severity.upper()} {message.category}"
    if colour:
        head = _SEVERITY_COLOURS.get(message.severity, "") + head + _RESET
    labels = [f"{k}={v.translate(_ESCAPED)}" for k, v in _labels(message) if v]
    return " ".join([stamp, head, *labels]) + f" — {message.explanation.translate(_ESCAPED)}"


#: Unicode's bidirectional embeddings, overrides, isolates and marks, which reorder what a
#: terminal shows, and its invisible characters (zero-width, word joiners, the byte-order
#: mark, tags), which hide text.
_BIDI_CONTROLS = (
    *range(0x202A, 0x202F),
    *range(0x2066, 0x206A),
    *range(0x200B, 0x2010),
    *range(0x2060, 0x2065),
    0x061C,
    0xFEFF,
    *range(0xE0000, 0xE0080),
)
#: Control characters written as escapes: names and explanations come from what agents sent,
#: and a terminal must not run their escape sequences or show a line break that forges a
#: finding. (C0, DEL, C1, and Unicode's line and paragraph separators.)
_ESCAPED: dict[int, str] = {
    c: ascii(chr(c))[1:-1]
    for c in (*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029, *_BIDI_CONTROLS)
}
#: The same in a JSON line (``--json``): json.dumps escapes C0 alone.
#: json.dumps writes it as JSON does: a character beyond U+FFFF (the tag characters) as its
#: UTF-16 surrogate pair of escapes.
_JSON_ESCAPED: dict[int, str] = {c: json.dumps(chr(c))[1:-1] for c in _ESCAPED if c >= 0x7F}


def _labels(message: findings_pb2.Finding) -> list[tuple[str, str]]:
    caller = message.details.get(CALL_AGENT, "")
    return [
        ("agent", message.agent),
        ("call_agent", caller if caller != message.agent else ""),  # a sub-agent's call
        ("tool", message.tool),
        ("field", message.field),
        ("trace", message.trace_id),
        ("span", message.span_id),
        ("case", message.case_id),  # what it was judged against, when not the policy
        ("source_trace", message.source_trace_id),
        ("pair", message.pair_key),
        ("traffic", message.traffic if message.traffic == "shadow" else ""),  # a candidate's
    ]


def stream_finding_record(message: findings_pb2.Finding) -> dict[str, Any]:
    """A stream finding as the findings-log object (same keys; details as rendered text)."""
    return {
        "category": message.category,
        "severity": message.severity,
        "evaluator": message.evaluator,
        "reference": message.reference,
        "case_id": message.case_id or None,
        "source_trace_id": message.source_trace_id or None,
        "pair_key": message.pair_key or None,
        "score": message.score if message.HasField("score") else None,
        "tool": message.tool or None,
        "field": message.field or None,
        "agent": message.agent or None,
        "explanation": message.explanation,
        "trace_id": message.trace_id,
        "span_id": message.span_id or None,
        "service": message.service or None,
        "traffic": message.traffic or None,
        "timestamp": format_timestamp(message.time_unix_nano),
        "details": dict(message.details),
    }
