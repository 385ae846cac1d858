"""The live findings stream: ``toolwatch.v1.FindingsService/Subscribe`` over gRPC.

``FindingsBroker`` is a ``FindingSink``: the pipeline publishes to it like to any sink, and it
fans each finding out to the subscriptions whose filter matches. Every subscription has its
own bounded queue (``queue_size`` findings, default 1000), and at most ``max_subscribers``
(default 64) are open at once, so memory stays bounded however many clients connect (more are
answered RESOURCE_EXHAUSTED). ``publish`` never awaits: when a
subscriber's queue is full the finding is dropped *for that subscriber* and counted
(``PipelineMetrics.stream_dropped``, ``Subscription.dropped``), so a slow or stuck client
never slows ingestion or the other subscribers.

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
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from toolwatch._proto.toolwatch.v1 import findings_pb2, findings_pb2_grpc
from toolwatch.metrics import PipelineMetrics
from toolwatch.model import Category, Clock, Finding, Severity, ToolTrace
from toolwatch.sinks.findings import Redaction, render_details

__all__ = [
    "SUBSCRIBED_METADATA",
    "FindingsBroker",
    "FindingsStreamServicer",
    "StreamFilter",
    "SubscribersFullError",
    "Subscription",
    "add_findings_service",
    "finding_message",
]

log = logging.getLogger(__name__)


#: Initial metadata sent once a subscription is live (clients may wait for it).
SUBSCRIBED_METADATA = (("toolwatch-subscribed", "1"),)


class SubscribersFullError(RuntimeError):
    """Every subscription slot of the broker is taken."""


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
    the subscriptions open at once.
    """

    def __init__(
        self,
        metrics: PipelineMetrics,
        redaction: Redaction | None = None,
        wall_clock: Clock = time.time_ns,
        queue_size: int = 1000,
        max_subscribers: int = 64,
    ) -> None:
        if queue_size < 1:
            raise ValueError(f"queue_size must be >= 1, got {queue_size}")
        if max_subscribers < 1:
            raise ValueError(f"max_subscribers must be >= 1, got {max_subscribers}")
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
        """Offers each finding to every matching subscription; never waits."""
        if not self._subscriptions:
            return
        now = self._wall_clock()
        dropped = 0
        for finding in findings:
            agent = finding.agent or trace.agent
            matching = [s for s in self._subscriptions if s.filter.matches(finding, agent)]
            if matching:
                message = finding_message(trace, finding, self._redaction, now)
                dropped += sum(not s.offer(message) for s in matching)
        if dropped:
            self._metrics.stream_dropped(dropped)

    def close(self) -> None:
        """Ends every stream after its queued findings; refuses new subscriptions."""
        self._closed = True
        for subscription in self._subscriptions:
            subscription.close()


def finding_message(
    trace: ToolTrace, finding: Finding, redaction: Redaction, time_ns: int
) -> findings_pb2.Finding:
    """``finding`` as the stream's message, details redacted and rendered as text."""
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
        agent=finding.agent or trace.agent or "",
        service=trace.service or "",
        time_unix_nano=time_ns,
        details=render_details(redaction.details(finding)),
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
        try:
            stream_filter = StreamFilter.from_request(request)
        except ValueError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            return
        if self._broker.closed:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "toolwatch is shutting down")
            return
        try:
            subscription = self._broker.subscribe(stream_filter)
        except SubscribersFullError as e:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(e))
            return
        try:
            # Headers now, so the client knows it is subscribed before any finding arrives.
            await context.send_initial_metadata(SUBSCRIBED_METADATA)
        except BaseException:
            self._broker.unsubscribe(subscription)
            raise
        await deliver(self._broker, subscription, context.write)


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
