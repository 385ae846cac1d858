"""The findings stream's broker: ``FindingsBroker``, which the pipeline publishes to.

``FindingsBroker`` is a ``FindingSink``: the pipeline publishes to it like to any sink, and it
fans each finding out to the subscriptions whose filter matches. Every subscription has its
own bounded queue (``queue_size`` findings, default 1000), and at most ``max_subscribers``
(default 64) are open at once, so memory stays bounded however many clients connect (more are
answered RESOURCE_EXHAUSTED). ``publish`` never awaits: when a
subscriber's queue is full the finding is dropped *for that subscriber* and counted
(``PipelineMetrics.stream_dropped``, ``Subscription.dropped``), so a slow or stuck client
never slows ingestion or the other subscribers. It numbers and holds what it publishes for
subscribers that resume (``toolwatch.sinks.stream.resumes``, whose ``_ResumeBook`` it is
built on).

Threading: everything here runs on the event loop that runs the grpc.aio server. ``publish``
and ``close`` must be called from that loop's thread (they wake waiting streams through
``asyncio.Event``, which is not thread-safe).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from typing import Literal

from toolwatch._proto.toolwatch.v1 import findings_pb2
from toolwatch.metrics import PipelineMetrics
from toolwatch.model import Clock, Traffic
from toolwatch.model_evaluation import Finding
from toolwatch.model_traces import ToolTrace
from toolwatch.sinks.findings import Redaction
from toolwatch.sinks.stream.filters import StreamFilter, _Tag, _tool_key, tag_of
from toolwatch.sinks.stream.messages import finding_message
from toolwatch.sinks.stream.protocol import SHUTTING_DOWN
from toolwatch.sinks.stream.resumes import (
    INDEX_FACTOR,
    INDEX_MAX,
    Resume,
    ResumeResult,
    _Departed,
    _Held,
    _ResumeBook,
)
from toolwatch.sinks.stream.subscription import Subscription, _Replay

__all__ = ["FindingsBroker", "SubscribersFullError"]

log = logging.getLogger(__name__)


class SubscribersFullError(RuntimeError):
    """Every subscription slot of the broker is taken."""


class FindingsBroker(_ResumeBook):
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
