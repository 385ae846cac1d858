"""One findings stream subscriber (``Subscription``): its filter, its bounded queue of live
findings, each lost one told once; and, after a resume, its replay (``_Replay``): the
findings the broker holds after its cursor, read from them as it goes, before live ones.

Threading: everything here runs on the event loop that runs the grpc.aio server: ``offer``,
``close`` and ``interrupt`` wake ``next`` through an ``asyncio.Event``, which is not
thread-safe.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

from toolwatch._proto.toolwatch.v1 import findings_pb2
from toolwatch.sinks.stream.filters import StreamFilter

if TYPE_CHECKING:  # the broker, which builds subscriptions, imports this module
    from toolwatch.sinks.stream.broker import FindingsBroker
    from toolwatch.sinks.stream.resumes import ResumeResult, _Held

__all__ = ["Subscription"]


#: Random bytes of a subscription's ``token`` (sent as twice as many hex digits): one client
#: cannot guess another's and claim, uncounted, what is held for it.
_TOKEN_BYTES: Final = 16


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


def _copy(message: findings_pb2.Finding) -> findings_pb2.Finding:
    copy = findings_pb2.Finding()
    copy.CopyFrom(message)
    return copy
