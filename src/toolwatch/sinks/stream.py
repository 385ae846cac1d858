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
random ``stream_id`` is new at every start), and the broker holds the last ``replay_size``
(default 1000) findings published. A client whose connection dropped subscribes again with a
``Resume``: the stream id and the sequence of the last finding it handled. It is sent the held
findings after that one that pass its filter, then live ones, so what gRPC had written and the
dropped connection lost is sent again; what is no longer held is told (``ResumeResult.lost``).
On another stream's id (the server restarted) every held finding counts as after.

``FindingsStreamServicer`` is the thin grpc.aio adapter: it validates the request, subscribes,
writes queued findings and unsubscribes when the client goes away. A write that fails ends
the stream quietly: it fails only once the call is over (the client went away with a write
pending, as a stuck subscriber does), and grpc-aio would log a yielded message's failure as a
servicer error with a traceback. ``FindingsBroker.close``
ends every stream cleanly (status OK) once the findings already queued are delivered; the
app's ``server.stop(grace)`` bounds how long that may take.

Threading: everything here runs on the event loop that runs the grpc.aio server. ``publish``
and ``close`` must be called from that loop's thread (they wake waiting streams through
``asyncio.Event``, which is not thread-safe).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, TypeVar

import grpc

from toolwatch._proto.toolwatch.v1 import findings_pb2, findings_pb2_grpc
from toolwatch.metrics import PipelineMetrics
from toolwatch.model import Category, Clock, Finding, Severity, ToolTrace
from toolwatch.sinks.findings import Redaction, render_details

__all__ = [
    "RESUME_KEY",
    "RESUME_LOST_KEY",
    "STREAM_ID_KEY",
    "STREAM_SEQUENCE_KEY",
    "SUBSCRIBED_METADATA",
    "FindingsBroker",
    "FindingsStreamServicer",
    "Resume",
    "ResumeResult",
    "StreamFilter",
    "SubscribersFullError",
    "Subscription",
    "add_findings_service",
    "finding_message",
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


class SubscribersFullError(RuntimeError):
    """Every subscription slot of the broker is taken."""


@dataclass(frozen=True, slots=True)
class Resume:
    """Where a subscriber left a stream: its id and the last finding's sequence handled."""

    stream_id: str
    after: int

    @classmethod
    def from_request(cls, request: findings_pb2.SubscribeRequest) -> Resume | None:
        """The resume a ``SubscribeRequest`` asks for, ``None`` for a fresh subscription.
        Raises ``ValueError`` for ``resume_after`` without ``resume_stream_id``."""
        if not request.resume_stream_id:
            if request.resume_after:
                raise ValueError(
                    f"resume_after {request.resume_after} needs resume_stream_id (the"
                    f" {STREAM_ID_KEY} of the subscription it resumes)"
                )
            return None
        return cls(request.resume_stream_id, request.resume_after)


class ResumeResult(NamedTuple):
    """How a resume went: whether the stream was this broker's (``"same"``) or another's
    (``"other"``: a restart), and how many findings after the cursor are no longer held."""

    stream: Literal["same", "other"]
    lost: int


class _Held(NamedTuple):
    """A published finding as the broker keeps it for subscribers that resume."""

    sequence: int
    finding: Finding
    agent: str | None
    service: str | None
    time_ns: int


@dataclass(frozen=True, slots=True)
class StreamFilter:
    """Which findings a subscriber wants. Empty ``categories``/``agents`` mean "all";
    ``agents`` holds the names case-folded (``Refund-Bot`` follows ``refund-bot``)."""

    categories: frozenset[Category] = frozenset()
    min_severity: Severity = Severity.LOW
    agents: frozenset[str] = frozenset()
    missed_after: bool = False  # the subscriber reads Finding.missed_after

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

    def matches(self, finding: Finding, agent: str | None) -> bool:
        """Whether ``finding`` (of a run by ``agent``) passes this filter."""
        return (
            (not self.categories or finding.category in self.categories)
            and finding.severity.rank >= self.min_severity.rank
            and (not self.agents or (agent is not None and agent.casefold() in self.agents))
        )


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
    """

    __slots__ = ("_closed", "_items", "_limit", "_missed", "_wakeup", "dropped", "filter")

    def __init__(self, stream_filter: StreamFilter, queue_size: int) -> None:
        self.filter = stream_filter
        self.dropped = 0
        self._items: deque[findings_pb2.Finding] = deque()
        self._limit = queue_size
        self._missed = 0  # lost since the last finding queued
        self._wakeup = asyncio.Event()
        self._closed = False

    def offer(self, message: findings_pb2.Finding) -> bool:
        if self._closed or len(self._items) >= self._limit:
            self.dropped += 1
            self._missed += 1
            return False
        if self._missed:
            message = _copy(message)
            message.missed_before, self._missed = self._missed, 0
        self._items.append(message)
        self._wakeup.set()
        return True

    async def next(self) -> findings_pb2.Finding | None:
        while not self._items:
            if self._closed:
                return None
            self._wakeup.clear()
            await self._wakeup.wait()
        message = self._items.popleft()
        # Every loss came after ``message`` was queued; told now to a subscriber that reads
        # missed_after, else in the next finding's missed_before.
        if self._missed and not self._items and self.filter.missed_after:
            message = _copy(message)
            message.missed_after, self._missed = self._missed, 0
        return message

    @property
    def queued(self) -> int:
        """Findings waiting in this subscriber's queue."""
        return len(self._items)

    def close(self) -> None:
        """No more findings; ``next`` returns ``None`` after the queued ones."""
        self._closed = True
        self._wakeup.set()

    def discard(self) -> int:
        """Close and let go of the queued findings; how many there were (never delivered)."""
        self.close()
        lost = len(self._items)
        self._items.clear()
        return lost


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
        self._held: deque[_Held] = deque(maxlen=replay_size)
        self._metrics = metrics
        self._redaction = redaction or Redaction()
        self._wall_clock = wall_clock
        self._queue_size = queue_size
        self._max_subscribers = max_subscribers
        self._subscriptions: set[Subscription] = set()
        self._changed = asyncio.Event()
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def sequence(self) -> int:
        """The sequence of the last finding published (0: none yet)."""
        return self._sequence

    @property
    def subscriber_count(self) -> int:
        """Open subscriptions (also exported as ``toolwatch_stream_subscribers``)."""
        return len(self._subscriptions)

    @property
    def subscriptions(self) -> tuple[Subscription, ...]:
        """The open subscriptions, in no particular order."""
        return tuple(self._subscriptions)

    def subscribe(self, stream_filter: StreamFilter) -> Subscription:
        """A new subscription. Raises ``RuntimeError`` once the broker is closed, and
        ``SubscribersFullError`` when ``max_subscribers`` are open."""
        if self._closed:
            raise RuntimeError("the findings broker is closed")
        if len(self._subscriptions) >= self._max_subscribers:
            raise SubscribersFullError(
                f"the findings stream already has {self._max_subscribers} subscribers "
                "(output.stream_max_subscribers); retry when one leaves"
            )
        subscription = Subscription(stream_filter, self._queue_size)
        self._subscriptions.add(subscription)
        self._changed.set()
        return subscription

    def check_resume(self, resume: Resume) -> None:
        """Raises ``ValueError`` when ``resume`` names a finding of this stream not yet
        published (a cursor that cannot be this stream's)."""
        if resume.stream_id == self.stream_id and resume.after > self._sequence:
            raise ValueError(
                f"resume_after {resume.after} is past the last finding of stream"
                f" {self.stream_id} ({self._sequence})"
            )

    def replay(self, subscription: Subscription, resume: Resume) -> ResumeResult:
        """Queues for ``subscription`` the held findings published after ``resume`` that
        pass its filter (call it right after ``subscribe``, before the loop publishes again);
        a queue too small for them loses the oldest, counted and told as any loss."""
        same = resume.stream_id == self.stream_id
        after = resume.after if same else 0
        oldest = self._held[0].sequence if self._held else self._sequence + 1
        dropped = 0
        for held in self._held:
            if held.sequence > after and subscription.filter.matches(held.finding, held.agent):
                message = _message(held, self._redaction)
                dropped += not subscription.offer(message)
        if dropped:
            self._metrics.stream_dropped(dropped)
        return ResumeResult("same" if same else "other", max(0, oldest - 1 - after))

    def unsubscribe(self, subscription: Subscription, unsent: int = 0) -> None:
        """End ``subscription``. Findings still queued for it (its client stopped reading and
        the connection was lost, say), and ``unsent`` ones taken from its queue whose write
        failed, are counted as dropped and logged: never lost unseen."""
        lost = subscription.discard() + unsent
        if lost:
            self._metrics.stream_dropped(lost)
            log.warning(
                "a findings stream subscriber left with %d findings undelivered"
                " (counted in toolwatch_stream_dropped_findings_total)",
                lost,
            )
        self._subscriptions.discard(subscription)
        self._changed.set()

    async def wait_for_subscribers(self, count: int) -> None:
        """Returns once exactly ``count`` subscriptions are open: for tests and tools that
        must not publish before a client listens, or must see a client gone."""
        while len(self._subscriptions) != count:
            self._changed.clear()
            await self._changed.wait()

    def publish(self, trace: ToolTrace, findings: Sequence[Finding]) -> None:
        """Numbers and holds each finding, and offers it to every matching subscription;
        never waits."""
        if not findings:
            return
        now = self._wall_clock()
        dropped = 0
        for finding in findings:
            self._sequence += 1
            held = _Held(self._sequence, finding, finding.agent or trace.agent, trace.service, now)
            self._held.append(held)
            matching = [s for s in self._subscriptions if s.filter.matches(finding, held.agent)]
            if matching:
                message = _message(held, self._redaction)
                dropped += sum(not s.offer(message) for s in matching)
        if dropped:
            self._metrics.stream_dropped(dropped)

    def close(self) -> None:
        """Ends every stream after its queued findings; refuses new subscriptions."""
        self._closed = True
        for subscription in self._subscriptions:
            subscription.close()


def finding_message(
    trace: ToolTrace, finding: Finding, redaction: Redaction, time_ns: int, sequence: int = 0
) -> findings_pb2.Finding:
    """``finding`` as the stream's message, details redacted and rendered as text."""
    held = _Held(sequence, finding, finding.agent or trace.agent, trace.service, time_ns)
    return _message(held, redaction)


def _message(held: _Held, redaction: Redaction) -> findings_pb2.Finding:
    finding = held.finding
    message = findings_pb2.Finding(
        category=str(finding.category),
        severity=str(finding.severity),
        evaluator=finding.evaluator,
        reference=str(finding.reference),
        explanation=finding.explanation,
        trace_id=finding.trace_id,
        span_id=finding.span_id or "",
        tool=finding.tool or "",
        field=finding.field or "",
        agent=held.agent or "",
        service=held.service or "",
        time_unix_nano=held.time_ns,
        details=render_details(redaction.details(finding)),
        sequence=held.sequence,
    )
    if finding.score is not None:
        message.score = finding.score
    return message


class FindingsStreamServicer(findings_pb2_grpc.FindingsServiceServicer):
    """grpc.aio servicer of ``FindingsService`` over a ``FindingsBroker``."""

    def __init__(self, broker: FindingsBroker) -> None:
        self._broker = broker

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
            await context.abort(grpc.StatusCode.UNAVAILABLE, "toolwatch is shutting down")
            return
        try:
            subscription = broker.subscribe(stream_filter)
        except SubscribersFullError as e:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(e))
            return
        # No await between subscribing and replaying: nothing is published in between.
        metadata: tuple[tuple[str, str], ...] = (
            *SUBSCRIBED_METADATA,
            (STREAM_ID_KEY, broker.stream_id),
            (STREAM_SEQUENCE_KEY, str(broker.sequence)),
        )
        if resume is not None:
            result = broker.replay(subscription, resume)
            metadata += ((RESUME_KEY, result.stream), (RESUME_LOST_KEY, str(result.lost)))
        try:
            # Headers now, so the client knows it is subscribed before any finding arrives.
            await context.send_initial_metadata(metadata)
        except BaseException:
            broker.unsubscribe(subscription)
            raise
        await deliver(broker, subscription, context.write)


async def deliver(
    broker: FindingsBroker,
    subscription: Subscription,
    write: Callable[[findings_pb2.Finding], Awaitable[None]],
) -> None:
    """Writes ``subscription``'s findings with ``write`` until it is closed and drained, a
    write fails or the call is cancelled (the client went away); then unsubscribes it,
    counting the finding whose write failed with those still queued."""
    unsent: findings_pb2.Finding | None = None
    try:
        while (unsent := await subscription.next()) is not None:
            await write(unsent)
            unsent = None
    except Exception as error:  # grpc-aio's ExecuteBatchError is not public
        log.debug("findings stream ended by a failed write: %r", error)
    finally:  # also on cancellation, a BaseException
        broker.unsubscribe(subscription, unsent=int(unsent is not None))


def add_findings_service(server: grpc.aio.Server, broker: FindingsBroker) -> FindingsStreamServicer:
    """Registers ``FindingsService`` on ``server`` (before it starts), served by ``broker``."""
    servicer = FindingsStreamServicer(broker)
    # The generated gRPC module carries no annotations.
    findings_pb2_grpc.add_FindingsServiceServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    return servicer
