"""``toolwatch tail``: follow a toolwatch's live findings stream in a terminal (``run_tail``).

One line per finding, oldest first, or with ``--json`` the findings-log object of each
(``toolwatch.tail_format``). Findings the server lost for this subscriber are told on
``err``: ``N findings missed before the next`` or ``... since the last one printed`` (``...
before this run printed any`` when the stream's end tells them and tail has printed none),
with the setting that bounds them: its queue was full (``output.stream_queue_size``), or,
after a resume, the server let them go before the replay read them
(``output.stream_replay_size``).

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

Its exit codes, for the CLI and scripts that restart tail, are listed in
``toolwatch.tail_exits``. A secured stream (the server's ``security`` section) is reached
with a ``StreamAccess`` (``toolwatch.tail_access``); where tail is in each stream is kept in
a ``_Cursor``, and across runs in a cursor file (``toolwatch.tail_cursor``).

Threading: ``run_tail`` blocks the calling thread; the cursor file is also rewritten from a
timer thread (``toolwatch.tail_cursor``), and a stop's thread may cancel the call followed
(``toolwatch.tail_stop``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import grpc

from toolwatch._proto.toolwatch.v1 import findings_pb2, findings_pb2_grpc
from toolwatch.config.listen import parse_port
from toolwatch.sinks.stream.protocol import (
    KEEPALIVE_SECONDS,
    MISSED_AFTER_KEY,
    MISSED_FROM_REPLAY_KEY,
)
from toolwatch.tail_access import StreamAccess, _local
from toolwatch.tail_cursor import _Cursor
from toolwatch.tail_exits import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_SUPERSEDED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    _asked_to_reconnect,
    _report_error,
)
from toolwatch.tail_format import _narrow_encoding, _Printer, _use_colour
from toolwatch.tail_stop import TailStop

__all__ = ["run_tail"]


#: Seconds between attempts to subscribe again (``reconnect``): the first wait, the longest.
RECONNECT_FIRST_WAIT, RECONNECT_LONGEST_WAIT = 0.5, 10.0


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
    stop: TailStop | None = None,
) -> int:
    """Subscribes to the findings stream at ``target`` (``host:port``) and prints findings
    to ``out`` (default stdout) until the stream ends; messages go to ``err`` (default
    stderr). ``access`` reaches a secured stream (default: plaintext, no token);
    ``reconnect`` follows it across lost connections and restarts, waiting with ``sleep``
    (``clock`` says how long a subscription lasted); it pings the server every ``keepalive``
    seconds to find a connection gone silent. ``cursor_file`` keeps where tail is in
    each stream across runs: read at start (a run resumes where the last one left off) and
    rewritten after the findings printed (``CURSOR_SAVE_SECONDS``); one tail to a file (two
    would resume with one token, each ending the other's stream). ``stop`` is how signal
    handlers end it (``toolwatch.tail_stop``: never by raising inside gRPC); without, a
    ``KeyboardInterrupt`` ends it. Returns the exit code (``toolwatch.tail_exits``). Blocks
    the calling thread."""
    out = out or sys.stdout
    err = err or sys.stderr
    access = access or StreamAccess()
    printer = _printer(out, as_json, color)
    request = _subscribe_request(categories, min_severity, agents)
    if not _usable_target(target, err):
        return EXIT_USAGE
    _warn_token_in_clear(target, access, err)
    try:
        cursor = _load_cursor(cursor_file, clock, err)
        if cursor is None:
            return EXIT_USAGE
        session = _Session(target, printer, err, access, cursor, keepalive, stop or TailStop())
        return _subscriptions(session, request, reconnect, (sleep, clock))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _printer(out: TextIO, as_json: bool, color: bool | None) -> _Printer:
    """How findings are printed to ``out``: in colour when ``color`` says so, or, given
    ``None``, when ``out`` is a terminal and ``NO_COLOR`` is unset (``_use_colour``)."""
    colour = _use_colour(out) if color is None else color
    return _Printer(out, as_json, colour, _narrow_encoding(out))


def _subscribe_request(
    categories: Sequence[str], min_severity: str, agents: Sequence[str]
) -> findings_pb2.SubscribeRequest:
    """The subscription tail asks for: the filter given, with losses told in ``missed_after``
    when the server's queue for tail runs empty first (not left for the next finding's
    ``missed_before``)."""
    return findings_pb2.SubscribeRequest(
        categories=list(categories),
        min_severity=min_severity,
        agents=list(agents),
        missed_after=True,
    )


def _usable_target(target: str, err: TextIO) -> bool:
    """Whether ``target`` is ``HOST:PORT``; when not, tells ``err`` why (``_target_problem``)."""
    problem = _target_problem(target)
    if problem is not None:
        err.write(
            f"toolwatch tail: --target {target!r} is not HOST:PORT (listen.stream){problem}\n"
        )
        return False
    return True


def _warn_token_in_clear(target: str, access: StreamAccess, err: TextIO) -> None:
    """Warns on ``err`` when a bearer token would go to a host not this one without TLS."""
    host = target.rpartition(":")[0]
    if access.bearer_token_file is not None and not access.secure and not _local(host):
        err.write(
            f"toolwatch tail: warning: the bearer token goes to {target} without TLS, in clear"
            " text on the network: pass --tls-ca (or --tls) if the stream has TLS\n"
        )


def _load_cursor(
    cursor_file: Path | None, clock: Callable[[], float], err: TextIO
) -> _Cursor | None:
    """Where tail is in each stream, kept in ``cursor_file`` (``_Cursor.load``: its warnings
    told on ``err``); ``None`` when the file cannot be read or is no cursor file, told on
    ``err``."""
    try:
        return _Cursor.load(cursor_file, clock, warn=lambda m: _tell(err, m))
    except (OSError, ValueError) as e:
        err.write(f"toolwatch tail: --cursor-file {cursor_file}: {e}\n")
        return None


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
        # A stop that came while gRPC closed the channel ends tail too (``TailStop``).
        if ended.code == EXIT_INTERRUPTED or session.stop.requested:
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


@dataclass(slots=True)
class _Session:
    """A tail's subscriptions to one target: where it is in the stream, how it prints, how
    a signal stops it, whether one has subscribed (and printed a finding), and whether an
    outage has been told (and as one of the credentials)."""

    target: str
    printer: _Printer
    err: TextIO
    access: StreamAccess
    cursor: _Cursor = field(default_factory=_Cursor)
    keepalive: float = KEEPALIVE_SECONDS
    stop: TailStop = field(default_factory=TailStop)
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
                self.stop.follow(call)
                return self._follow(call)
            except KeyboardInterrupt:
                call.cancel()
                return _Ended(EXIT_INTERRUPTED, "interrupted", True)
            finally:
                self.stop.unfollow()
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
            self.stop.check()  # cancelled by a stop that came inside gRPC (``TailStop``)
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
