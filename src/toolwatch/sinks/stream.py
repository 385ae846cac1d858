"""The live findings stream: ``toolwatch.v1.FindingsService/Subscribe`` over gRPC.

``FindingsBroker`` is a ``FindingSink``: the pipeline publishes to it like to any sink, and it
fans each finding out to the subscriptions whose filter matches. Every subscription has its
own bounded queue (``queue_size`` findings, default 1000), and at most ``max_subscribers``
(default 64) are open at once, so memory stays bounded however many clients connect (more are
answered RESOURCE_EXHAUSTED). ``publish`` never awaits: when a
subscriber's queue is full the finding is dropped *for that subscriber* and counted
(``PipelineMetrics.stream_dropped``, ``Subscription.dropped``), so a slow or stuck client
never slows ingestion or the other subscribers.

Resuming. Every finding published gets the next ``sequence`` of the broker's stream (whose
random ``stream_id`` is new at every start), and the broker holds the last
``replay_size`` (default 1000) findings published, rendered and redacted as they were sent
(and, for ``INDEX_FACTOR`` times as many, what filters read: category, severity, and a digest
of each agent's name). A
client whose connection dropped subscribes again with a ``Resume``: the stream id and the
sequence of the last finding it handled, for each stream it followed. It is sent the held
findings after its cursor on this stream that pass its filter, read from the held ones as it
goes (not through its queue, which bounds live findings), then live ones: what gRPC had written
and the dropped connection lost comes again. What passes its filter and is no longer held is
told (``ResumeResult.lost``). A client with no cursor on this stream (the server restarted, or
it followed another) has seen none of it: every held finding is sent. While it replays,
findings published for it join the replay, so ``replay_size``, not its queue, bounds how far
it may fall behind; what it had still to replay when it leaves, or when the server shuts
down, is counted as a queue's findings are (``FindingsBroker.unsubscribe``).

What a subscriber leaves undelivered and still held is kept for it (``_Departed``), counted
lost at shutdown unless it resumes (or when more than ``max_subscribers`` have left since).
Each subscription has a ``token``, sent to its client (``RESUME_TOKEN_KEY``); a resume that
sends it back (``StreamCursor.token``) claims what was held for that subscription and
nothing else, so that two clients of one filter are not taken for each other, and keeps the
token: it names a client across its resumes, so a resume whose answer was lost can be tried
again with it. A resume that comes while the subscription of its token is still open (its
connection gone silent, not yet seen gone) supersedes it: that one is ended ABORTED
(``SUPERSEDED``: told to a dead connection, or to a second client sharing the token, which
must not take it for a shutdown), and what it was owed is the resume's
(``FindingsBroker._supersede``). A fresh subscription, or a resume whose token names nothing
here, gets a new random one. A resume without one (a client older than tokens) is matched by
a guess (``FindingsBroker._guess``).

``FindingsStreamServicer`` is the thin grpc.aio adapter: it validates the request, subscribes,
writes queued findings and unsubscribes when the client goes away. A write that fails ends
the stream quietly: it fails only once the call is over (the client went away with a write
pending, as a stuck subscriber does), and grpc-aio would log a yielded message's failure as a
servicer error with a traceback. ``FindingsBroker.close``
ends every stream cleanly (status OK) once the findings already queued are delivered, losses
no finding has told in its trailing metadata (``Subscription.untold``); the app's
``server.stop(grace)`` bounds how long that may take. A stream whose token is taken out
(asked before each write, and at ``recheck`` when the tokens change) is ended
UNAUTHENTICATED and counted; what it had queued is withheld, not counted lost. When a
reload takes a CA out of the client CA file, ``reconnect_all`` ends every open stream
UNAVAILABLE (``CLIENT_CAS_CHANGED``), not counted as a refusal, as if its client had left:
what it had not been sent is held for its resume. Its client connects again through a new
TLS handshake, which trusts the client CAs served then (the app closes every connection of
the stream listener, so that no call is made on one handshaken before:
``toolwatch.stream_listener``): no certificate is judged here.

Sizes. What a sender names (an agent, service, tool or field, each an attribute of up to
``ingest.max_value_bytes``) reaches every held finding, queue and index entry, so none keeps
it whole: a streamed finding carries names, its pair key, and the text in its details, cut at
``MAX_STREAM_TEXT`` characters (a metrics label's cap), the findings log keeps them whole;
filters match a fixed-size digest of each agent's case-folded name (``agent_key``), exact
however long the name; and a reload redacts the findings held and queued again by a digest of
each one's whole tool name (``_tool_key``), as ``show_fields`` names tools whole.

Threading: everything here runs on the event loop that runs the grpc.aio server. ``publish``
and ``close`` must be called from that loop's thread (they wake waiting streams through
``asyncio.Event``, which is not thread-safe).
"""

from __future__ import annotations

import asyncio
import bisect
import hashlib
import itertools
import json
import logging
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, NamedTuple, TypeVar

import grpc

from toolwatch._proto.toolwatch.v1 import findings_pb2, findings_pb2_grpc
from toolwatch.evaluation.severity import CALL_AGENT, MAX_DETAIL_ITEMS
from toolwatch.metrics import PipelineMetrics
from toolwatch.model import Category, Clock, Finding, Severity, ToolTrace, Traffic
from toolwatch.sinks.findings import Redaction, render_details

__all__ = [
    "CLIENT_CAS_CHANGED",
    "INDEX_FACTOR",
    "INDEX_MAX",
    "KEEPALIVE_SECONDS",
    "MAX_STREAM_TEXT",
    "MISSED_AFTER_KEY",
    "MISSED_FROM_REPLAY_KEY",
    "RESUME_KEY",
    "RESUME_LOST_KEY",
    "RESUME_TOKEN_KEY",
    "SHUTTING_DOWN",
    "STREAM_ID_KEY",
    "STREAM_SEQUENCE_KEY",
    "SUBSCRIBED_METADATA",
    "SUPERSEDED",
    "FindingsBroker",
    "FindingsStreamServicer",
    "Resume",
    "ResumeResult",
    "StreamFilter",
    "SubscribersFullError",
    "Subscription",
    "add_findings_service",
    "agent_key",
    "finding_message",
    "stream_server_options",
]

log = logging.getLogger(__name__)


#: Initial metadata sent once a subscription is live (clients may wait for it).
SUBSCRIBED_METADATA = (("toolwatch-subscribed", "1"),)
#: Initial metadata keys (findings.proto, FindingsService): the stream, the sequence a new
#: subscriber's cursor starts at, and how a resume went.
STREAM_ID_KEY = "toolwatch-stream-id"
STREAM_SEQUENCE_KEY = "toolwatch-stream-sequence"
RESUME_KEY = "toolwatch-resume"
RESUME_LOST_KEY = "toolwatch-resume-lost"
#: Initial metadata: the subscription's token, which a resume sends back (``StreamCursor.token``)
#: to claim what was held for it (``FindingsBroker._resumes``).
RESUME_TOKEN_KEY = "toolwatch-resume-token"
#: Trailing metadata of a stream the server ended: losses not told in a finding
#: (``Subscription.untold``), and how many of them its replay lost.
MISSED_AFTER_KEY = "toolwatch-missed-after"
MISSED_FROM_REPLAY_KEY = "toolwatch-missed-from-replay"
#: Keepalive: a subscriber's connection can go silent without a reset (a NAT or proxy that
#: forgot it). A client that only reads would wait on it forever, and the server would keep
#: its subscription, and one of ``max_subscribers`` slots, for hours. Clients ping
#: (``toolwatch tail`` every ``KEEPALIVE_SECONDS``); the server pings each client too.
KEEPALIVE_SECONDS = 30


def stream_server_options(keepalive: float = KEEPALIVE_SECONDS) -> tuple[tuple[str, int], ...]:
    """gRPC options of the findings stream's server, for clients that ping every
    ``keepalive`` seconds: it takes their pings even while it has no finding to send (gRPC's
    default refuses more than one in 5 minutes), and pings each client every twice that
    itself, so the subscription of a connection gone silent ends, and its findings are
    counted, within 2⅓ ``keepalive`` (gRPC core times a ping out by ``ping_timeout_ms`` since
    its ping rework, by ``keepalive_timeout_ms`` before: both are set)."""
    timeout_ms = round(keepalive * 1000 / 3)
    return (
        ("grpc.http2.min_ping_interval_without_data_ms", timeout_ms),
        ("grpc.keepalive_time_ms", round(keepalive * 2000)),
        ("grpc.keepalive_timeout_ms", timeout_ms),
        ("grpc.http2.ping_timeout_ms", timeout_ms),
        ("grpc.http2.max_pings_without_data", 0),  # an idle stream sends no data
    )


#: The details of the UNAVAILABLE a subscription gets from a server shutting down.
SHUTTING_DOWN = "toolwatch is shutting down"
#: The details of the UNAVAILABLE every open subscription gets when a reload takes a CA out
#: of the client CA file (``FindingsStreamServicer.reconnect_all``): its client is to
#: subscribe again, on a new connection, whose TLS handshake the CAs served now decide.
CLIENT_CAS_CHANGED = (
    "the client CAs changed (security.tls.client_ca_file): connect again, through a new TLS"
    " handshake"
)
#: The details of the ABORTED a subscription gets when another subscription resumes with its
#: token (``FindingsBroker._supersede``): two clients sharing one token take the stream from
#: each other at each resume. Its own client's resume, come before its old connection was
#: seen gone, sends it to that dead connection.
SUPERSEDED = (
    "another client resumed with this subscription's token, and has the stream now: give each"
    " client its own token (each toolwatch tail its own --cursor-file)"
)


class SubscribersFullError(RuntimeError):
    """Every subscription slot of the broker is taken."""


@dataclass(frozen=True, slots=True)
class Resume:
    """Where a subscriber left each stream it followed: stream id -> the last finding's
    sequence handled there; and, for those it has one of, stream id -> the ``token`` of its
    last subscription there (``RESUME_TOKEN_KEY``)."""

    cursors: dict[str, int]
    tokens: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_request(cls, request: findings_pb2.SubscribeRequest) -> Resume | None:
        """The resume a ``SubscribeRequest`` asks for, ``None`` for a fresh subscription.
        Raises ``ValueError`` for a cursor without a stream id."""
        if not request.resume:
            return None
        for index, cursor in enumerate(request.resume):
            if not cursor.stream_id:
                raise ValueError(
                    f"resume[{index}] has no stream_id (the {STREAM_ID_KEY} of the"
                    " subscription it resumes)"
                )
        cursors = {cursor.stream_id: cursor.after for cursor in request.resume}
        tokens = {cursor.stream_id: cursor.token for cursor in request.resume if cursor.token}
        return cls(cursors, tokens)


class ResumeResult(NamedTuple):
    """How a resume went. ``stream``: ``"same"`` (a cursor named this broker's stream) or
    ``"new"`` (none did: the server restarted, or the client followed another one; every
    finding held is sent). ``lost``: the findings after the cursor that pass the filter and
    are no longer held (at most: of those published before the index of what was published,
    every one counts)."""

    stream: Literal["same", "new"]
    lost: int


#: What filters read of a finding: its category, its severity, and the ``agent_key`` of each
#: agent it concerns (the run's, then the agent that made its call when another: a subscriber
#: for the agent used as a tool follows its calls in every run).
_Tag = tuple[Category, Severity, tuple[bytes, ...]]
#: From a call's metadata, what is asked before each write to it (``None``: nothing):
#: ``ListenerSecurity.still_accepted`` for the stream listener.
Authorize = Callable[[Any], Callable[[], bool] | None]

#: How many more findings the broker remembers the tags of than it holds: a filtered
#: subscriber is told only of the unheld findings that pass its filter, back this far (and
#: at most ``INDEX_MAX``: a filtered subscriber's resume reads them all, on the event loop,
#: in about 6 ms; an unfiltered one's counts them without reading).
INDEX_FACTOR = 16
INDEX_MAX = 65_536

#: The most characters of a name (agent, service, tool, field) and of each text in the
#: details a streamed finding carries: a longer one is cut, ``…`` its last character (as
#: ``make_finding`` cuts an explanation). The cap of a metrics label value: a longer one is
#: free text, not a name. The findings log keeps them whole.
MAX_STREAM_TEXT: Final = 128
#: Nesting a streamed finding's details keep as JSON values; deeper, a value is its text.
_MAX_STREAM_DEPTH: Final = 8
#: Bytes of an ``agent_key``: a false match is one in 2**64 a comparison.
_AGENT_KEY_BYTES: Final = 8
#: Bytes of a ``_tool_key``: a false match would show a value ``show_fields`` names of another
#: tool, so one in 2**128 a comparison.
_TOOL_KEY_BYTES: Final = 16
#: Random bytes of a subscription's ``token`` (sent as twice as many hex digits): one client
#: cannot guess another's and claim, uncounted, what is held for it.
_TOKEN_BYTES: Final = 16


def agent_key(name: str) -> bytes:
    """What the stream keeps of an agent's name to match filters on: a BLAKE2b digest of it
    case-folded, ``_AGENT_KEY_BYTES`` long whatever the name's length (``Refund-Bot`` and
    ``refund-bot`` have one key)."""
    folded = name.casefold().encode("utf-8", "surrogatepass")
    return hashlib.blake2b(folded, digest_size=_AGENT_KEY_BYTES).digest()


def _tool_key(name: str) -> bytes:
    """What the stream keeps of a finding's tool name to redact it again on a reload: a
    BLAKE2b digest of the name whole (not case-folded, as ``show_fields`` matches it),
    ``_TOOL_KEY_BYTES`` long whatever the name's length."""
    whole = name.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(whole, digest_size=_TOOL_KEY_BYTES).digest()


class _Held(NamedTuple):
    """A published finding as the broker holds it for subscribers that resume: the message
    every subscriber is sent (rendered and redacted once), what filters read, and the
    ``_tool_key`` of its tool (``None``: a finding on no tool), what a reload redacts it again
    by (the message's tool name may be cut)."""

    message: findings_pb2.Finding  # its sequence is the finding's
    tag: _Tag
    tool_key: bytes | None


class _Departed(NamedTuple):
    """A subscriber that left with findings held for it to resume: its filter, their
    sequences, in order (``FindingsBroker.unsubscribe``): a ``range`` when they follow one
    another (a replay given up, an unfiltered queue), so that one of ``replay_size`` held
    findings costs no more than one; and its subscription's ``token``, which its resume
    claims them by."""

    filter: StreamFilter
    sequences: Sequence[int]
    token: str


@dataclass(frozen=True, slots=True)
class StreamFilter:
    """Which findings a subscriber wants. Empty ``categories``/``agents`` mean "all";
    ``agents`` holds the names case-folded (``Refund-Bot`` follows ``refund-bot``), and
    ``agent_keys`` their ``agent_key``, what a finding's tag is matched on."""

    categories: frozenset[Category] = frozenset()
    min_severity: Severity = Severity.LOW
    agents: frozenset[str] = frozenset()
    missed_after: bool = False  # the subscriber reads Finding.missed_after
    agent_keys: frozenset[bytes] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "agent_keys", frozenset(map(agent_key, self.agents)))

    @classmethod
    def from_request(cls, request: findings_pb2.SubscribeRequest) -> StreamFilter:
        """The filter a ``SubscribeRequest`` asks for. Category and severity names are
        case-insensitive. Raises ``ValueError`` naming an unknown one."""
        return cls(
            categories=frozenset(_parse(Category, c.upper()) for c in request.categories),
            min_severity=_parse(Severity, (request.min_severity or "low").lower()),
            agents=frozenset(agent.casefold() for agent in request.agents),
            missed_after=request.missed_after,
        )

    @property
    def passes_all(self) -> bool:
        """Whether every finding passes (no category, severity or agent asked for)."""
        return not self.categories and self.min_severity is Severity.LOW and not self.agents

    def matches(self, finding: Finding, agent: str | None) -> bool:
        """Whether ``finding`` (of a run by ``agent``) passes this filter."""
        return self.accepts(tag_of(finding, agent))

    def accepts(self, tag: _Tag) -> bool:
        """Whether a finding of this category, severity and agents passes this filter."""
        category, severity, keys = tag
        return (
            (not self.categories or category in self.categories)
            and severity.rank >= self.min_severity.rank
            and (not self.agents or any(key in self.agent_keys for key in keys))
        )


def tag_of(finding: Finding, run_agent: str | None) -> _Tag:
    """The tag filters read of ``finding``, of a run by ``run_agent``: no name in it, so
    what it keeps is the same size whatever the names."""
    agent = finding.agent or run_agent
    called = finding.details.get(CALL_AGENT)
    agents: tuple[str, ...] = (agent,) if agent is not None else ()
    if isinstance(called, str) and called != agent:
        agents += (called,)
    return finding.category, finding.severity, tuple(map(agent_key, agents))


_Name = TypeVar("_Name", Category, Severity)


def _parse(kind: type[_Name], name: str) -> _Name:
    try:
        return kind(name)
    except ValueError:
        known = ", ".join(m.value for m in kind)
        message = f"unknown {kind.__name__.lower()} {name!r}; expected one of: {known}"
        raise ValueError(message) from None


class Subscription:
    """One subscriber: its filter and its bounded queue of findings.

    ``offer`` enqueues without waiting and reports whether there was room; ``next`` waits for
    the next finding, or returns ``None`` once the subscription is closed and drained. Each
    lost finding is told once, in a copy made for this subscriber (the message the others get
    is shared): in ``missed_before`` of the next finding queued, or, when the queue runs empty
    first and the subscriber asked for it (``StreamFilter.missed_after``), in
    ``missed_after`` of the last one (a client that stops reading loses the newest findings,
    and no next one may come for a long time).

    A resumed subscription (``resumed``) is first sent its ``replay``, then its queue. What
    the broker let go before the replay read it is told in ``missed_before`` too, and
    ``missed_from_replay`` says how many of it: the setting that bounds those is
    ``replay_size``, not ``queue_size`` (a client tells its operator which to raise). Each
    finding is queued with the ``_tool_key`` of its tool (``None``: on no tool, or not told),
    what a reload redacts it again by.

    ``token`` is what its client resumes as: what the broker holds for it when it ends is
    claimed by a resume that sends it (``FindingsBroker._resumes``). A new one is random
    (``_TOKEN_BYTES``); a resume that claimed one passes it on.

    ``interrupt`` ends its stream for its client to subscribe again (``interrupted``): ``next``
    returns ``None`` at once, and what it was not sent stays, for ``FindingsBroker.unsubscribe``
    to hold for that resume as for a client that left. ``superseded``: a resume with its
    token took its place (``FindingsBroker._supersede``); its stream ends ABORTED
    (``SUPERSEDED``).
    """

    __slots__ = (
        "_closed",
        "_items",
        "_limit",
        "_missed",
        "_replay",
        "_replay_missed",
        "_wakeup",
        "_writing",
        "dropped",
        "filter",
        "interrupted",
        "resumed",
        "revoked",
        "superseded",
        "token",
    )

    def __init__(
        self,
        stream_filter: StreamFilter,
        queue_size: int,
        replay: _Replay | None = None,
        token: str | None = None,
    ) -> None:
        self.filter = stream_filter
        self.dropped = 0
        self.resumed: ResumeResult | None = None
        self._items: deque[tuple[findings_pb2.Finding, bytes | None]] = deque()
        self._limit = queue_size
        self._missed = 0  # lost since the last finding queued
        self._replay = replay
        self._replay_missed = 0  # lost from the replay, told with the next finding sent
        self._wakeup = asyncio.Event()
        self._writing: findings_pb2.Finding | None = None
        self._closed = False
        self.revoked = False
        self.interrupted = False
        self.superseded = False
        self.token = token or secrets.token_hex(_TOKEN_BYTES)

    def offer(self, message: findings_pb2.Finding, tool_key: bytes | None = None) -> bool:
        if self.revoked:
            return True  # withheld from a client no longer allowed: not a loss to count
        if self._replay is not None and not self._closed:
            # Still replaying: the broker holds this one too, and the replay reads it there
            # (the queue would only lose it to a long replay).
            self._replay.extend(message.sequence)
            return True
        if self._closed or len(self._items) >= self._limit:
            self.dropped += 1
            self._missed += 1
            return False
        if self._missed or self._replay_missed:  # the replay's losses, when it just ended
            message = _copy(message)
            message.missed_before = self._missed + self._replay_missed
            message.missed_from_replay = self._replay_missed
            self._missed = self._replay_missed = 0
        self._items.append((message, tool_key))
        self._wakeup.set()
        return True

    async def next(self) -> findings_pb2.Finding | None:
        self._writing = None  # the last one is written: ``deliver`` asks for the next at once
        if self.interrupted:
            return None
        if self._replay is not None and (replayed := self._replayed()) is not None:
            self._writing = replayed
            return replayed
        while not self._items or self.interrupted:
            if self._closed or self.interrupted:
                return None
            self._wakeup.clear()
            await self._wakeup.wait()
        message, _ = self._items.popleft()
        # Every loss came after ``message`` was queued; told now to a subscriber that reads
        # missed_after, else in the next finding's missed_before.
        if self._missed and not self._items and self.filter.missed_after:
            message = _copy(message)
            message.missed_after, self._missed = self._missed, 0
        self._writing = message
        return message

    def _replayed(self) -> findings_pb2.Finding | None:
        """The next finding of the replay, or ``None`` once it is done."""
        assert self._replay is not None
        held, lost = self._replay.take(self.filter)
        self.dropped += lost
        self._replay_missed += lost
        if held is None:  # its queue is empty: live findings joined the replay till now
            self._replay = None  # its losses are told with the next one queued (``offer``)
            return None
        message = held.message
        if self._replay_missed:
            message = _copy(message)
            message.missed_before = message.missed_from_replay = self._replay_missed
            self._replay_missed = 0
        return message

    @property
    def queued(self) -> int:
        """Live findings waiting in this subscriber's queue (the replay aside)."""
        return len(self._items)

    @property
    def untold(self) -> tuple[int, int]:
        """Findings lost (and counted) that no finding has told yet, and how many of them its
        replay lost: a replay whose last findings were let go before it read them, with no
        live finding queued since to tell them in ``missed_before``; a full queue's losses
        after the last finding taken when ``missed_after`` was not asked for. Told in the
        stream's trailing metadata once it has ended (``MISSED_AFTER_KEY``)."""
        return self._missed + self._replay_missed, self._replay_missed

    @property
    def writing(self) -> findings_pb2.Finding | None:
        """The finding ``next`` last returned, while its write may not be done: ``deliver``
        writes it, then asks ``next`` again without awaiting between, so seen from another
        task it is the finding being written (``None``: none is)."""
        return self._writing

    @property
    def waiting(self) -> Iterable[tuple[findings_pb2.Finding, bytes | None]]:
        """The findings queued, not yet handed to gRPC (those of its replay are held by the
        broker), each with its tool's key."""
        return self._items

    def close(self) -> None:
        """No more findings; ``next`` returns ``None`` after the queued ones."""
        self._closed = True
        self._wakeup.set()

    def revoke(self) -> None:
        """Its client's token was taken out: withhold what is queued and what comes; ``next``
        returns ``None``."""
        self.revoked = True
        self.discard()

    def interrupt(self) -> None:
        """End its stream now, for its client to subscribe again: ``next`` returns ``None``
        (at once, or once the write under way is done); what is queued, and the rest of its
        replay, stay for ``FindingsBroker.unsubscribe``."""
        self.interrupted = True
        self._wakeup.set()

    def discard(self) -> tuple[list[findings_pb2.Finding], _Replay | None]:
        """Close and let go of the queued findings and of the replay (never delivered);
        returns them: the replay's rest is what ``_Replay.rest`` says."""
        self.close()
        replay, self._replay = self._replay, None
        left = [message for message, _ in self._items]
        self._items.clear()
        return left, replay


class _Replay:
    """What a resumed subscription is sent before live findings: the held findings published
    after its cursor, up to the last one published when it subscribed, read from the broker's
    held findings as it goes. Those the broker lets go before they are read are lost."""

    __slots__ = ("_broker", "_end", "_next")

    def __init__(self, broker: FindingsBroker, after: int, end: int) -> None:
        self._broker = broker
        self._next = after + 1
        self._end = end

    def extend(self, sequence: int) -> None:
        """Read on to ``sequence``, published since (held, and offered to the subscription)."""
        self._end = max(self._end, sequence)

    def take(self, stream_filter: StreamFilter) -> tuple[_Held | None, int]:
        """The next held finding that passes ``stream_filter`` (``None``: the replay is
        done), and how many that pass it were let go before they were read."""
        held = self._broker.held
        lost = 0
        while self._next <= self._end:
            first = self._broker.oldest_held
            if self._next < first:
                gone_to = min(first, self._end + 1) - 1
                lost += self._broker.unheld_passing(self._next, gone_to, stream_filter)
                self._next = gone_to + 1
                continue
            item = held[self._next - first]
            self._next += 1
            if stream_filter.accepts(item.tag):
                break
        else:
            item = None
        if lost:
            self._broker.count_dropped(lost)
        return item, lost

    def rest(self, stream_filter: StreamFilter) -> tuple[int, list[int]]:
        """What the replay had still to send when it is given up (its client left, or the
        server shut down, before it read on): how many that pass ``stream_filter`` the broker
        has let go (``unheld_passing``), and the sequences of those it still holds, in order.
        Reads them on the event loop, once, as a resume's count does; the replay is done."""
        broker, first = self._broker, self._broker.oldest_held
        lost = broker.unheld_passing(self._next, min(first - 1, self._end), stream_filter)
        start, stop = max(self._next, first) - first, self._end - first + 1
        held = itertools.islice(broker.held, start, max(start, stop))
        kept = [item.message.sequence for item in held if stream_filter.accepts(item.tag)]
        self._next = self._end + 1
        return lost, kept


def _compact(sequences: list[int]) -> Sequence[int]:
    """``sequences`` (ascending, none twice) as a ``range`` when they follow one another."""
    if sequences[-1] - sequences[0] + 1 == len(sequences):
        return range(sequences[0], sequences[-1] + 1)
    return tuple(sequences)


def _copy(message: findings_pb2.Finding) -> findings_pb2.Finding:
    copy = findings_pb2.Finding()
    copy.CopyFrom(message)
    return copy


class FindingsBroker:
    """Fans published findings out to subscriptions. A ``FindingSink``; see the module doc.

    ``redaction`` hides detail values as in the findings log; ``wall_clock`` (Unix ns) stamps
    each publication; ``queue_size`` bounds every subscription's queue, ``max_subscribers``
    the subscriptions open at once, ``replay_size`` the findings held for resuming (0: none).
    """

    def __init__(
        self,
        metrics: PipelineMetrics,
        redaction: Redaction | None = None,
        *,
        wall_clock: Clock = time.time_ns,
        queue_size: int = 1000,
        max_subscribers: int = 64,
        replay_size: int = 1000,
    ) -> None:
        if queue_size < 1:
            raise ValueError(f"queue_size must be >= 1, got {queue_size}")
        if max_subscribers < 1:
            raise ValueError(f"max_subscribers must be >= 1, got {max_subscribers}")
        if replay_size < 0:
            raise ValueError(f"replay_size must be >= 0, got {replay_size}")
        self.stream_id = secrets.token_hex(8)
        self._sequence = 0  # the last finding published
        self.held: deque[_Held] = deque(maxlen=replay_size)  # read by resumed subscriptions
        self._index: deque[_Tag] = deque(maxlen=min(INDEX_FACTOR * replay_size, INDEX_MAX))
        self._metrics = metrics
        self._redaction = redaction or Redaction()
        self._wall_clock = wall_clock
        self._queue_size = queue_size
        self._max_subscribers = max_subscribers
        self._subscriptions: dict[str, Subscription] = {}  # open, by token
        # Superseded by a resume (``_supersede``), their ``Subscribe`` not returned yet (one
        # may wait on a write to a silent connection): each still takes a slot, so that a
        # client resuming again and again cannot keep calls open beyond them.
        self._superseded: set[Subscription] = set()
        # Subscribers that left with findings held for their resume, not resumed yet, by
        # token, oldest first: what they were promised goes with the process at shutdown
        # (``close``). The most recent ``max_subscribers`` are remembered; an older one is
        # let go, what it held counted then (``_keep``).
        self._departed: OrderedDict[str, _Departed] = OrderedDict()
        # The tokens of the latest ``max_subscribers`` that left nothing held, or whose held
        # findings were let go (``_keep``): a resume that sends one still names a
        # subscription of this broker, and keeps it.
        self._left_empty: OrderedDict[str, None] = OrderedDict()
        self._changed = asyncio.Event()
        self._closed = False
        #: Findings counted lost to subscribers (``count_dropped``) since start-up.
        self.dropped = 0

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def sequence(self) -> int:
        """The sequence of the last finding published (0: none yet)."""
        return self._sequence

    @property
    def oldest_held(self) -> int:
        """The sequence of the oldest finding held (the next one to come when none is)."""
        return self.held[0].message.sequence if self.held else self._sequence + 1

    @property
    def subscriber_count(self) -> int:
        """Subscriptions whose call is open, those superseded by a resume (``_supersede``)
        whose call has not ended included: what ``max_subscribers`` bounds, and what
        ``SubscribersFullError`` says (also exported as ``toolwatch_stream_subscribers``).
        One more than ``max_subscribers`` while a resume that took the last slot of the
        subscription it superseded waits for that one's call to end."""
        return len(self._subscriptions) + len(self._superseded)

    @property
    def subscriptions(self) -> tuple[Subscription, ...]:
        """The open subscriptions, in no particular order."""
        return tuple(self._subscriptions.values())

    def subscribe(self, stream_filter: StreamFilter, resume: Resume | None = None) -> Subscription:
        """A new subscription, resuming ``resume`` if given (``Subscription.resumed`` says
        how). Raises ``RuntimeError`` once the broker is closed, and ``SubscribersFullError``
        when ``max_subscribers`` are open, those superseded whose call has not ended among
        them (a resume that supersedes one takes its slot)."""
        if self._closed:
            raise RuntimeError("the findings broker is closed")
        token = resume.tokens.get(self.stream_id, "") if resume is not None else ""
        # A resume that supersedes an open subscription takes its slot (``_supersede``).
        if self.subscriber_count - (token in self._subscriptions) >= self._max_subscribers:
            raise SubscribersFullError(
                f"the findings stream already has {self.subscriber_count} subscribers, at"
                f" most {self._max_subscribers} (output.stream_max_subscribers); retry when one"
                " leaves"
            )
        replay, resumed, kept = None, None, None
        if resume is not None:
            kind: Literal["same", "new"] = "same" if self.stream_id in resume.cursors else "new"
            after = resume.cursors.get(self.stream_id, 0)
            oldest = self.oldest_held
            if self.held.maxlen:  # nothing to replay from when nothing is held
                replay = _Replay(self, max(after, oldest - 1), self._sequence)
            resumed = ResumeResult(kind, self.unheld_passing(after + 1, oldest - 1, stream_filter))
            if kind == "same":
                kept = self._resumes(stream_filter, after, token)
        subscription = Subscription(stream_filter, self._queue_size, replay, kept)
        subscription.resumed = resumed
        self._subscriptions[subscription.token] = subscription
        self._changed.set()
        return subscription

    def _resumes(self, stream_filter: StreamFilter, after: int, token: str) -> str | None:
        """A subscriber resumes after ``after``: the departed subscriber it is, if any, is no
        longer waited for, and what was held for it and let go since it left is counted
        (``_let_go``; the resume tells it in ``ResumeResult.lost``, and is sent the rest).
        With a ``token``, the subscription of that token: still open, it is superseded
        (``_supersede``); else the one that left with it, or none: a token this broker holds
        nothing for (its subscription left nothing held, was forgotten, or another server's)
        claims nothing, so no client takes another's. Without one (a client older than
        tokens), the one ``_guess`` names.

        Returns the token the resumed subscription keeps: ``token`` when it names one of the
        broker's subscriptions (open, departed, or among the latest that left nothing held),
        so that a resume whose answer was lost can be tried again with it; else ``None``, a
        new one (a token another server issued, or a client made up, is not taken)."""
        # Looked up by token as a key: no departed subscriber's is compared, or guessed from.
        if not token:
            departed = self._guess(stream_filter, after)
        elif (open_ := self._subscriptions.get(token)) is not None:
            departed = self._supersede(open_, after)
        elif (departed := self._departed.pop(token, None)) is None:
            if token not in self._left_empty:
                return None  # another server's, forgotten, or made up: not taken
            del self._left_empty[token]
        if departed is not None and (gone := self._let_go(departed, stream_filter)):
            self.count_dropped(gone)
            log.warning(
                "a findings stream subscriber resumed after %d findings held for it were let go"
                " (output.stream_replay_size; counted in toolwatch_stream_dropped_findings_total)",
                gone,
            )
        return token or None

    def _let_go(self, departed: _Departed, stream_filter: StreamFilter) -> int:
        """Of the findings held for ``departed``, how many the broker has let go since that
        pass ``stream_filter``, the filter it resumes with: it claims them whatever its
        filter now, and one its new filter rejects, held or not, is neither sent nor counted
        (its client no longer asks for it, and ``ResumeResult.lost`` tells what passes)."""
        gone = departed.sequences[: bisect.bisect_left(departed.sequences, self.oldest_held)]
        if not gone or departed.filter == stream_filter:
            return len(gone)
        # Each one published before the index counts, as in ``unheld_passing``.
        indexed_from = self._sequence - len(self._index) + 1
        return sum(
            s < indexed_from or stream_filter.accepts(self._index[s - indexed_from]) for s in gone
        )

    def _supersede(self, subscription: Subscription, after: int) -> _Departed | None:
        """Ends ``subscription``, still open when a resume after ``after`` sent its token
        (its connection gone silent and not seen gone yet, or a client that subscribed
        again): it leaves as if its connection were gone, with the finding it was writing,
        and what it would hold for a resume is returned for the resume to claim, not kept.
        Of what it was owed, those up to ``after`` its client has (none is counted), those
        after it the resume is sent while held (its replay: none counted), and those let go
        are counted now, once, as at a leave (the resume tells them, ``ResumeResult.lost``).
        Its ``Subscribe`` ends ABORTED (``SUPERSEDED``) when its writing does; its
        ``unsubscribe`` then holds and counts nothing."""
        del self._subscriptions[subscription.token]
        self._superseded.add(subscription)
        subscription.superseded = True
        log.info(
            "a findings stream subscriber resumed while its last subscription was open (a"
            " connection not seen gone yet): that one is ended, what it was owed is the resume's"
        )
        return self._leave(subscription, subscription.writing, after)

    def _guess(self, stream_filter: StreamFilter, after: int) -> _Departed | None:
        """Takes out the departed subscriber a resume without a token most likely is: the
        earliest of those of its filter, else of those some of whose held findings it is
        sent. One it is sent none of is another's (a client that left nothing held and
        resumes), still counted lost at shutdown. Of two clients of one filter it may take
        the other's."""
        later = [d for d in self._departed.values() if d.sequences[-1] > after]
        same = [d for d in later if d.filter == stream_filter]
        found = same or [d for d in later if self._sends_any(d, stream_filter, after)]
        # The one whose first held finding follows the cursor closest: a client resumes
        # after the last it handled, and what was held for it comes next. (One whose held
        # findings start at or before the cursor is another, slower client.)
        following = [d for d in found if d.sequences[0] > after]
        if not (following or found):
            return None
        return self._departed.pop(min(following or found, key=lambda d: d.sequences[0]).token)

    def _sends_any(self, departed: _Departed, stream_filter: StreamFilter, after: int) -> bool:
        """Whether a resume after ``after`` with ``stream_filter`` is sent one of the findings
        held for ``departed`` (those no longer held are sent to no one)."""
        oldest, held = self.oldest_held, self.held
        places = (s - oldest for s in departed.sequences if s > after)
        return any(stream_filter.accepts(held[p].tag) for p in places if 0 <= p < len(held))

    def check_resume(self, resume: Resume) -> None:
        """Raises ``ValueError`` when ``resume`` names a finding of this stream not yet
        published (a cursor that cannot be this stream's)."""
        after = resume.cursors.get(self.stream_id, 0)
        if after > self._sequence:
            raise ValueError(
                f"resume cursor {after} is past the last finding of stream {self.stream_id}"
                f" ({self._sequence})"
            )

    def count_dropped(self, count: int) -> None:
        """``count`` findings lost to a subscriber (``toolwatch_stream_dropped_findings_total``)."""
        self.dropped += count
        self._metrics.stream_dropped(count)

    def unheld_passing(self, first: int, last: int, stream_filter: StreamFilter) -> int:
        """Of the findings ``first``..``last`` (no longer held), how many pass the filter, by
        the index of what was published; each one published before the index counts."""
        if last < first:
            return 0
        if stream_filter.passes_all:
            return last - first + 1
        indexed_from = self._sequence - len(self._index) + 1
        unknown = max(0, min(last, indexed_from - 1) - first + 1)
        start = max(first, indexed_from) - indexed_from
        tags = itertools.islice(self._index, start, max(start, last - indexed_from + 1))
        return unknown + sum(stream_filter.accepts(tag) for tag in tags)

    def unsubscribe(
        self,
        subscription: Subscription,
        unsent: findings_pb2.Finding | None = None,
        withheld: bool = False,
    ) -> None:
        """End ``subscription``. Findings still queued for it (its client stopped reading and
        the connection was lost, say), ``unsent``, taken from its queue for a write that
        failed, and, when it was still replaying after a resume, the rest of its replay (it
        holds no queue then: what is published joins the replay): those no longer held for a
        resume (all of them once the broker is closed: the server is shutting down) are
        counted as dropped and logged, never lost unseen; the others are logged, and a client
        that resumes gets them (``close`` counts them if none does). ``withheld``: the
        subscriber's token was taken out, so none is counted lost to a slow client. One
        superseded by a resume (``_supersede``) left then: nothing more."""
        if subscription in self._superseded:
            self._superseded.discard(subscription)
            subscription.discard()
        elif self._subscriptions.get(subscription.token) is subscription:
            del self._subscriptions[subscription.token]
            if withheld:
                left, _ = subscription.discard()
                if left or unsent is not None:
                    log.info(
                        "withheld %d findings from a stream whose token was taken out",
                        len(left) + (unsent is not None),
                    )
            elif (departed := self._leave(subscription, unsent)) is not None:
                self._keep(departed)
            else:
                self._left_nothing(subscription.token)
        self._changed.set()

    def _left_nothing(self, token: str) -> None:
        """Remembers ``token``, of a subscription that left nothing held for its resume (or
        whose held findings were let go, counted, by ``_keep``), among the latest
        ``max_subscribers``: a resume that sends it claims nothing, and keeps it."""
        self._left_empty[token] = None
        if len(self._left_empty) > self._max_subscribers:
            self._left_empty.popitem(last=False)

    def _leave(
        self, subscription: Subscription, unsent: findings_pb2.Finding | None, handled: int = 0
    ) -> _Departed | None:
        """Closes ``subscription``, counts what it was owed after ``handled`` (its client
        has those up to it) and is no longer held (or all of it, once the broker is
        closed), and returns what is still held for its resume, if any (``unsubscribe``)."""
        left, replay = subscription.discard()
        owed = [message.sequence for message in left]
        if unsent is not None:
            owed.append(unsent.sequence)
        lost = 0
        if replay is not None:  # stuck in its replay: what it had yet to read is owed too
            lost, still_held = replay.rest(subscription.filter)
            owed += still_held
        owed = [sequence for sequence in owed if sequence > handled]
        if self._closed:  # shutting down: what it holds goes with the process
            lost += len(owed)
            kept = []
            why = f"{SHUTTING_DOWN}, none is held for a resume; "
        else:
            oldest = self.oldest_held
            lost += sum(sequence < oldest for sequence in owed)
            kept = sorted(sequence for sequence in owed if sequence >= oldest)
            why = ""
        if lost:
            self.count_dropped(lost)
            log.warning(
                "a findings stream subscriber left with %d findings undelivered"
                " (%scounted in toolwatch_stream_dropped_findings_total)",
                lost,
                why,
            )
        return _Departed(subscription.filter, _compact(kept), subscription.token) if kept else None

    def _keep(self, departed: _Departed) -> None:
        """Holds ``departed`` for its resume. Past ``max_subscribers`` of them the oldest is let
        go, what it held counted lost then, as at shutdown (``close``): its resume, if it
        comes, claims nothing, so counts none of it again."""
        if len(self._departed) >= self._max_subscribers:
            _, oldest = self._departed.popitem(last=False)
            self._left_nothing(oldest.token)  # a resume with it still keeps it
            self.count_dropped(len(oldest.sequences))
            log.warning(
                "%d findings held for a findings stream subscriber that left and has not"
                " resumed are let go: %d more left since (output.stream_max_subscribers;"
                " counted in toolwatch_stream_dropped_findings_total)",
                len(oldest.sequences),
                self._max_subscribers,
            )
        self._departed[departed.token] = departed
        log.info(
            "a findings stream subscriber left with %d findings undelivered, held for"
            " it if it resumes (output.stream_replay_size)",
            len(departed.sequences),
        )

    async def wait_for_subscribers(self, count: int) -> None:
        """Returns once exactly ``count`` subscriptions are open (``subscriber_count``): for
        tests and tools that must not publish before a client listens, or must see a client
        gone."""
        while self.subscriber_count != count:
            self._changed.clear()
            await self._changed.wait()

    def publish(
        self, trace: ToolTrace, findings: Sequence[Finding], traffic: Traffic = Traffic.LIVE
    ) -> None:
        """Numbers and holds each finding, and offers it to every matching subscription;
        never waits."""
        if not findings:
            return
        now = self._wall_clock()
        holding = self.held.maxlen != 0
        dropped = 0
        for finding in findings:
            tag = tag_of(finding, trace.agent)
            matching = [s for s in self._subscriptions.values() if s.filter.accepts(tag)]
            # Rendered before it is numbered: one that fails to render (an output failure,
            # counted by the caller) takes no number, and the held stay numbered without a
            # gap, as a resume reads them.
            message = None
            if matching or holding:
                sequence = self._sequence + 1
                message = finding_message(
                    trace, finding, self._redaction, now, sequence, traffic=traffic
                )
            self._sequence += 1
            self._index.append(tag)
            if message is not None:
                key = _tool_key(finding.tool) if finding.tool else None
                self.held.append(_Held(message, tag, key))
                dropped += sum(not s.offer(message, key) for s in matching)
        if dropped:
            self.count_dropped(dropped)

    def redact_with(self, redaction: Redaction) -> int:
        """Redact the findings published from now on by ``redaction`` (a reload), and those
        held or queued, not yet sent, again: a value it hides is no longer sent, to a client
        that resumes either; one it still shows stays shown. It decides on each finding's
        whole tool name, as publishing did, not on the name sent (cut past
        ``MAX_STREAM_TEXT``). A value hidden when the finding was published stays hidden:
        it is not held. Returns how many findings were redacted again."""
        self._redaction = redaction
        # Held and queued findings know their tool by its key: a tool show_fields names is
        # found whole by its key; one it names nowhere is redacted as no tool (the entries
        # for any tool alone apply to it, as they would to its whole name).
        named = {_tool_key(tool): tool for tool in redaction.named_tools()}
        waiting = {id(held.message): (held.message, held.tool_key) for held in self.held}
        for subscription in self._subscriptions.values():
            waiting.update((id(message), (message, key)) for message, key in subscription.waiting)
        for message, key in waiting.values():
            tool = named.get(key) if key is not None else None
            details = redaction.redact_rendered(tool, message.details)
            message.details.clear()
            message.details.update(details)
        return len(waiting)

    def close(self) -> None:
        """Ends every stream after its queued findings; refuses new subscriptions. Findings
        held for subscribers that left and have not resumed go with the process: counted as
        dropped and logged."""
        self._closed = True
        unsent = sum(len(departed.sequences) for departed in self._departed.values())
        if unsent:
            self.count_dropped(unsent)
            log.warning(
                "%d findings held for %d findings stream subscriber(s) that left and did"
                " not resume go with the process (%scounted in"
                " toolwatch_stream_dropped_findings_total)",
                unsent,
                len(self._departed),
                f"{SHUTTING_DOWN}; ",
            )
            self._departed.clear()
        for subscription in self._subscriptions.values():
            subscription.close()


def finding_message(
    trace: ToolTrace,
    finding: Finding,
    redaction: Redaction,
    time_ns: int,
    sequence: int = 0,
    *,
    traffic: Traffic = Traffic.LIVE,
) -> findings_pb2.Finding:
    """``finding`` as the stream's message, details redacted and rendered as text; names, the
    case id and pair key, and the texts in details, cut at ``MAX_STREAM_TEXT`` characters
    (the explanation is bounded by ``make_finding``)."""
    message = findings_pb2.Finding(
        category=str(finding.category),
        severity=str(finding.severity),
        evaluator=finding.evaluator,
        reference=str(finding.reference),
        case_id=_cut(finding.case_id or ""),
        source_trace_id=finding.source_trace_id or "",
        pair_key=_cut(finding.pair_key or ""),
        explanation=finding.explanation,
        trace_id=finding.trace_id,
        span_id=finding.span_id or "",
        tool=_cut(finding.tool or ""),
        field=_cut(finding.field or ""),
        agent=_cut(finding.agent or trace.agent or ""),
        service=_cut(trace.service or ""),
        time_unix_nano=time_ns,
        details=render_details(_cut_texts(redaction.details(finding))),
        sequence=sequence,
        traffic=str(traffic),
    )
    if finding.score is not None:
        message.score = finding.score
    return message


def _cut(text: str) -> str:
    """``text``, cut to ``MAX_STREAM_TEXT`` characters when longer, ``…`` the last one."""
    return text if len(text) <= MAX_STREAM_TEXT else text[: MAX_STREAM_TEXT - 1] + "…"


def _cut_texts(value: Any, depth: int = 0) -> Any:
    """``value`` (a detail) with every text in it ``_cut``, keys too, and every object or
    array cut to its first ``MAX_DETAIL_ITEMS`` entries, the rest counted (``"…": "N more"``,
    or a last item ``"… N more"``), at any depth (past ``_MAX_STREAM_DEPTH``, as its JSON
    text, cut): a drift on an argument object of 4,000 fields is not 100 KB as sent. It stays
    JSON as it is rendered; the findings log keeps every entry whole. (A key cut here is no
    field path ``show_fields`` names: after a reload its value shows only when an entry
    names a field it is inside, on the safe side.)"""
    if isinstance(value, str):
        return _cut(value)
    if depth >= _MAX_STREAM_DEPTH and isinstance(value, list | tuple | Mapping):
        return _cut(json.dumps(value, default=str, ensure_ascii=False))
    if isinstance(value, list | tuple):
        items = [_cut_texts(item, depth + 1) for item in value[:MAX_DETAIL_ITEMS]]
        if len(value) > MAX_DETAIL_ITEMS:
            items.append(f"… {len(value) - MAX_DETAIL_ITEMS} more")
        return items
    if isinstance(value, Mapping):
        entries = itertools.islice(value.items(), MAX_DETAIL_ITEMS)
        cut = {_cut(str(key)): _cut_texts(item, depth + 1) for key, item in entries}
        if len(value) > MAX_DETAIL_ITEMS:
            cut["…"] = f"{len(value) - MAX_DETAIL_ITEMS} more"
        return cut
    return value


class FindingsStreamServicer(findings_pb2_grpc.FindingsServiceServicer):
    """grpc.aio servicer of ``FindingsService`` over a ``FindingsBroker``."""

    def __init__(
        self,
        broker: FindingsBroker,
        authorize: Authorize | None = None,
        refused: Callable[[], None] = lambda: None,
    ) -> None:
        self._broker = broker
        self._authorize = authorize
        self._refused = refused
        self._checked: dict[Subscription, Callable[[], bool]] = {}  # open, with a token

    def recheck(self) -> None:
        """End the open streams whose token is no longer accepted (the tokens changed): one
        that no finding passes would otherwise never be asked. Each is revoked, then
        answered UNAUTHENTICATED and counted by its ``Subscribe``."""
        for subscription, allowed in list(self._checked.items()):
            if not allowed():
                subscription.revoke()

    def reconnect_all(self) -> int:
        """End every open stream UNAVAILABLE (``CLIENT_CAS_CHANGED``), for its client to
        connect again: a reload took a CA out of the client CA file, and a stream's
        connection was accepted by its TLS handshake against the CAs served then. Not a
        refusal (nothing counted): what a stream was not sent is held for its resume, and its
        client's next handshake, with the CAs served now, decides whether it gets back in
        (the app closes every connection of the stream listener for that:
        ``toolwatch.stream_listener``). Logs how many were ended, when any was, and returns
        it. Call it on the server's event loop."""
        if self._broker.closed:  # shutting down: each stream ends OK once drained
            return 0
        ended = [s for s in self._broker.subscriptions if not (s.revoked or s.interrupted)]
        for subscription in ended:
            subscription.interrupt()
        if ended:
            log.info(
                "a CA was taken out of the client CA file: ended %d findings stream(s)"
                " UNAVAILABLE, for their clients to connect again through a new TLS handshake",
                len(ended),
            )
        return len(ended)

    def add_to(self, server: grpc.aio.Server) -> None:
        """Registers ``FindingsService`` on ``server`` (before it starts), served by this
        servicer: one servicer serves each server the stream listener starts."""
        # The generated gRPC module carries no annotations.
        findings_pb2_grpc.add_FindingsServiceServicer_to_server(self, server)  # type: ignore[no-untyped-call]

    async def Subscribe(  # noqa: N802 (the gRPC method name)
        self, request: findings_pb2.SubscribeRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        broker = self._broker
        try:
            stream_filter = StreamFilter.from_request(request)
            resume = Resume.from_request(request)
            if resume is not None:
                broker.check_resume(resume)
        except ValueError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            return
        if broker.closed:
            await context.abort(grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN)
            return
        start = broker.sequence  # before any await: what this subscription starts after
        try:
            subscription = broker.subscribe(stream_filter, resume)
        except SubscribersFullError as e:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(e))
            return
        metadata: tuple[tuple[str, str], ...] = (
            *SUBSCRIBED_METADATA,
            (STREAM_ID_KEY, broker.stream_id),
            (STREAM_SEQUENCE_KEY, str(start)),
            (RESUME_TOKEN_KEY, subscription.token),
        )
        if (resumed := subscription.resumed) is not None:
            metadata += ((RESUME_KEY, resumed.stream), (RESUME_LOST_KEY, str(resumed.lost)))
        authorize = self._authorize
        allowed = authorize(context.invocation_metadata()) if authorize is not None else None
        if allowed is not None:  # before any await: a recheck from now on sees it
            self._checked[subscription] = allowed
            if not allowed():  # a reload since the call's headers were checked
                subscription.revoke()
        try:
            try:
                # Headers now, so the client knows it is subscribed before any finding arrives.
                await context.send_initial_metadata(metadata)
            except BaseException:
                broker.unsubscribe(subscription)
                raise
            accepted = await deliver(broker, subscription, context.write, allowed)
        finally:
            self._checked.pop(subscription, None)
        if not accepted:
            self._refused()
            await context.abort(grpc.StatusCode.UNAUTHENTICATED)
        if subscription.superseded:  # what it was owed is the resume's
            await context.abort(grpc.StatusCode.ABORTED, SUPERSEDED)
        if subscription.interrupted:  # its unsent findings are held for its resume
            await context.abort(grpc.StatusCode.UNAVAILABLE, CLIENT_CAS_CHANGED)
        missed, from_replay = subscription.untold
        if missed:  # lost after the last finding sent: told as the stream ends
            context.set_trailing_metadata(
                ((MISSED_AFTER_KEY, str(missed)), (MISSED_FROM_REPLAY_KEY, str(from_replay)))
            )


async def deliver(
    broker: FindingsBroker,
    subscription: Subscription,
    write: Callable[[findings_pb2.Finding], Awaitable[None]],
    allowed: Callable[[], bool] | None = None,
) -> bool:
    """Writes ``subscription``'s findings with ``write`` until it is closed and drained, a
    write fails, the call is cancelled (the client went away) or ``allowed`` says no (its
    token was taken out: asked before each write and when it ends); then unsubscribes it,
    with the finding not written and those still queued. ``False`` when ``allowed`` said
    no."""
    unsent: findings_pb2.Finding | None = None
    accepted = True
    try:
        while (unsent := await subscription.next()) is not None:
            if allowed is not None and not allowed():
                accepted = False
                break
            await write(unsent)
            unsent = None
        else:  # closed (the server's shutdown, a supersede), revoked (its token) or interrupted
            accepted = not subscription.revoked
    except Exception as error:  # grpc-aio's ExecuteBatchError is not public
        log.debug("findings stream ended by a failed write: %r", error)
        accepted = not subscription.revoked  # revoked while it wrote: withheld, not lost
    finally:  # also on cancellation, a BaseException
        broker.unsubscribe(subscription, unsent=unsent, withheld=not accepted)
    return accepted


def add_findings_service(
    server: grpc.aio.Server,
    broker: FindingsBroker,
    authorize: Authorize | None = None,
    refused: Callable[[], None] = lambda: None,
) -> FindingsStreamServicer:
    """Registers ``FindingsService`` on ``server`` (before it starts), served by ``broker``;
    ``authorize`` gives, from a call's metadata, whether its token is still accepted (asked
    before each write and at ``recheck``); ``refused`` counts a stream ended for it."""
    servicer = FindingsStreamServicer(broker, authorize, refused)
    servicer.add_to(server)
    return servicer
