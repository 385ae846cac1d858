"""Resuming the findings stream: what a subscriber asks to resume (``Resume``), how it went
(``ResumeResult``), and the broker's book of what it holds for resumes (``_ResumeBook``,
which ``FindingsBroker`` is built on).

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

Threading: everything here runs on the event loop that runs the grpc.aio server, as the
broker does.
"""

from __future__ import annotations

import bisect
import itertools
import logging
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from toolwatch._proto.toolwatch.v1 import findings_pb2
from toolwatch.metrics import PipelineMetrics
from toolwatch.sinks.stream.filters import StreamFilter, _Tag
from toolwatch.sinks.stream.protocol import SHUTTING_DOWN, STREAM_ID_KEY
from toolwatch.sinks.stream.subscription import Subscription

__all__ = ["INDEX_FACTOR", "INDEX_MAX", "Resume", "ResumeResult"]

log = logging.getLogger(__name__)


#: How many more findings the broker remembers the tags of than it holds: a filtered
#: subscriber is told only of the unheld findings that pass its filter, back this far (and
#: at most ``INDEX_MAX``: a filtered subscriber's resume reads them all, on the event loop,
#: in about 6 ms; an unfiltered one's counts them without reading).
INDEX_FACTOR = 16
INDEX_MAX = 65_536


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


def _compact(sequences: list[int]) -> Sequence[int]:
    """``sequences`` (ascending, none twice) as a ``range`` when they follow one another."""
    if sequences[-1] - sequences[0] + 1 == len(sequences):
        return range(sequences[0], sequences[-1] + 1)
    return tuple(sequences)


class _ResumeBook:
    """What a ``FindingsBroker`` holds for subscribers that resume, and how a resume claims
    it (the module doc): the findings held (``held``) and the tags of more (``_index``), the
    subscribers that left with findings held for them (``_departed``) and the tokens of the
    latest that left none (``_left_empty``); and what is counted lost. ``FindingsBroker`` is
    built on it: its ``__init__`` sets the state declared here, and says what each is."""

    stream_id: str
    held: deque[_Held]
    dropped: int
    _sequence: int
    _index: deque[_Tag]
    _metrics: PipelineMetrics
    _max_subscribers: int
    _subscriptions: dict[str, Subscription]
    _superseded: set[Subscription]
    _departed: OrderedDict[str, _Departed]
    _left_empty: OrderedDict[str, None]
    _closed: bool

    @property
    def oldest_held(self) -> int:
        """The sequence of the oldest finding held (the next one to come when none is)."""
        return self.held[0].message.sequence if self.held else self._sequence + 1

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
