"""What the trace buffer holds: the traces in flight (``_Trace``, ``assembly.anchoring``) in
first-arrival order, their spans and bytes counted against the bounds (``_admission`` and the
checks ``add`` makes room by; a trace's bytes count what it keeps of its spans dropped, in the
room its request's spans leave: ``_reserved``), the trace ids a limit or ingest flagged
before their trace came and what is kept of the spans dropped (``assembly.limited``,
replayed by ``_store``), the ids of emitted agent runs (``assembly.remembered``) and the heap
of the traces' deadlines.

``HeldTraces`` is the base class of ``TraceBuffer`` (``assembly.buffer``), which decides
what happens to each span and each trace: taken, dropped, evicted, checked, emitted. Compiled,
as ``assembly.buffer`` is (a compiled class derives from compiled classes only).

Not thread-safe: call every method from one event loop.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from collections.abc import Sequence

from toolwatch.assembly.anchoring import _Trace
from toolwatch.assembly.dropped import dropped_span, keep_cost
from toolwatch.assembly.limited import Limited, LimitedTraces
from toolwatch.assembly.limits import ENCLOSING_SPANS, AssemblyLimits
from toolwatch.assembly.refusals import Refusals
from toolwatch.assembly.remembered import RememberedTraces
from toolwatch.metrics import PipelineMetrics
from toolwatch.model import Clock, SpanRecord

__all__ = ["HeldTraces"]


def _kept_wait(
    span: SpanRecord,
    trace: _Trace | None,
    parents: set[bytes | None],
    parent: bool,
    room: int,
) -> bool:
    """``span`` is dropped (``HeldTraces._takes``; ``parent``: its link is kept too): where
    its flags say its parent is local and its trace does not hold it, what it waited for is
    kept (``_Trace.came``), and that parent encloses it: noted in ``parents``. Read, a step
    and its agent span in one request to a full trace counted the agent span as one the cap
    drops, and a full buffer admitted the request, then dropped the agent span
    ``buffer_full``. Only where ``came`` would keep it (``dropped.keep_cost``: fewer than
    ``DROPPED_IDS`` waits, and its bytes fit in ``room``, the buffer's free bytes now): else
    the agent span encloses nothing, and a request that takes no room was refused until the
    buffer stalled (review-wait7 defect 4). A trace not held keeps it until it comes
    (``assembly.limited``): taken as kept. Returns False: not taken."""
    parent_id = span.parent_span_id
    if not span.parent_local or parent_id is None:
        return False
    if trace is not None:
        if parent_id in trace.spans:
            return False
        cost = keep_cost(trace.drops, dropped_span(span), parent)
        if cost < 0 or (cost > 0 and cost > room):
            return False
    parents.add(parent_id)
    return False


class HeldTraces:
    """The traces ``TraceBuffer`` holds, their counts, bounds and deadlines (module
    docstring)."""

    def __init__(self, limits: AssemblyLimits, clock: Clock, metrics: PipelineMetrics) -> None:
        self._limits = limits
        self._clock = clock
        self._metrics = metrics
        # Trace id -> live trace, in first-arrival order. An OrderedDict, not a dict:
        # eviction takes the oldest, and a dict would scan past every trace emitted before it
        # (``python -m bench.eviction``: an evicting add took 24 µs at 100,000 traces, 6 now).
        self._traces: OrderedDict[bytes, _Trace] = OrderedDict()
        self._deadlines: list[tuple[int, int, _Trace]] = []
        self._tiebreak = itertools.count()
        # The ids of emitted agent runs, for the late window: 23-32 bytes each compiled, where
        # an OrderedDict of the ids took 166-191 (``python -m bench.remembered``).
        self._emitted = RememberedTraces(limits.late_span_window_ns, limits.max_remembered_traces)
        # Trace ids not buffered yet whose span a limit dropped or ingest rejected, and what
        # is kept of the spans dropped: flagged when they arrive, the spans replayed.
        self._limited = LimitedTraces(limits.max_traces)
        self._spans = 0
        self._bytes = 0
        # While ``add`` takes a request (``TraceBuffer._take``): its spans, and where it is;
        # the bytes its spans after each will take, read once a drop asks (``_reserved``).
        self._request: Sequence[SpanRecord] = ()
        self._at = 0
        self._reserves: list[int] | None = None
        self._reserves_from = 0
        # Under backpressure, the refusals that may stall the buffer (``_admission``).
        self._refusals = Refusals(limits.max_refusal_ns, limits.tick_ns)

    @property
    def buffered_traces(self) -> int:
        return len(self._traces)

    @property
    def buffered_spans(self) -> int:
        return self._spans

    @property
    def buffered_bytes(self) -> int:
        return self._bytes

    @property
    def remembered_traces(self) -> int:
        """Ids of emitted agent runs remembered for the late window."""
        return len(self._emitted)

    def next_due_ns(self) -> int | None:
        """When a buffered trace may next need a :meth:`poll` (``None``: nothing buffered).

        A stale heap entry only makes it early. Spans arriving later never make it earlier:
        a trace is due at the latest ``completion_wait`` after its last span, so a new span
        is due no sooner than anything already buffered."""
        if not self._traces or not self._deadlines:
            return None
        return self._deadlines[0][0]

    def overdue_ns(self) -> int:
        """How long ago, by the clock now, the earliest completion check still to make fell
        due (:meth:`next_due_ns`); 0 when none has. Each trace's check falls due no later
        than its quiet period's end or its ``max_trace_age_ns``, and every :meth:`poll` makes
        the checks due, so between polls this stays under the ticker's period: it grows only
        while nothing polls (assembly stuck). Long runs do not raise it: a trace whose anchor
        has not arrived is next due at ``max_trace_age_ns``."""
        due = self.next_due_ns()
        return 0 if due is None else max(0, self._clock() - due)

    def has_room(self, spans: Sequence[SpanRecord], size_bytes: int) -> bool:
        """Whether ``TraceBuffer.admit`` would take a request of ``spans`` (``size_bytes`` in
        all) now, taking nothing: asked as ``admit`` asks (``_admission``), a refusal counted
        towards a stall. A question (for tests): an ``add`` after it does not evict for a
        stall, as ``admit`` would."""
        return self._admission(spans, size_bytes) is not None

    def _admission(self, spans: Sequence[SpanRecord], size_bytes: int) -> bool | None:
        """Whether to take a request of ``spans`` (``size_bytes`` in all) now: ``None`` to
        refuse it, else whether taking it may evict. Whether its spans, its bytes and the
        traces it would start (its trace ids not buffered yet) fit.

        Taken, evicting, under ``evict_oldest``. Under ``backpressure`` a receiver answers
        a refusal with a retryable status, for ``max_refusal_ns`` at most
        (``assembly.refusals``): past it the buffer is stalled, full of runs in flight that
        the refused requests would end, and the request is taken by evicting, as under
        ``evict_oldest``.

        A request bigger than the whole buffer (more spans, bytes or new traces than it can
        ever hold) is let through, evicting nothing (``add`` takes what fits and drops the
        rest, ``buffer_full``): refusing it would make the client retry something that can
        never fit. A span ``add`` drops takes no room and is not counted (``_room_taken``;
        what its trace keeps of it takes only the room the request leaves, ``_reserved``):
        one bigger than the whole buffer (``span_too_large``; counted, it let an ordinary
        request through as one that can never fit), a retry of one held
        (``duplicate``), one of a run judged already (``late``: nor does it start a trace),
        one over its trace's cap (``trace_span_limit``). Counted, a full buffer refused
        them, and their senders retried what would have been dropped at once.
        """
        lim = self._limits
        if lim.overflow == "evict_oldest":
            return True
        now = self._clock()
        self._emitted.forget(now)  # as add does first: a late span is one add drops late
        fits = self._room_for(spans, size_bytes)
        if fits is None:
            return False  # can never fit
        refusals = self._refusals
        refusals.settle(
            lim.max_buffered_spans - self._spans,
            lim.max_buffered_bytes - self._bytes,
            lim.max_traces - len(self._traces),
        )
        if fits:
            return False
        count, size_bytes = self._room_taken(spans, size_bytes)
        refusals.refused(now, count, size_bytes, self._new_traces(spans))
        return True if refusals.stalled(now, self.next_due_ns()) else None

    def _new_traces(self, spans: Sequence[SpanRecord]) -> int:
        """How many traces ``spans`` would start (spans too large for the buffer and spans of
        an emitted run, dropped ``late``, aside)."""
        most = self._limits.max_buffered_bytes
        return len(
            {
                s.trace_id
                for s in spans
                if s.trace_id not in self._traces
                and s.size_bytes <= most
                and s.trace_id not in self._emitted
            }
        )

    def _room_taken(self, spans: Sequence[SpanRecord], size_bytes: int) -> tuple[int, int]:
        """The spans and bytes of a request that take room, when all of them would not fit:
        not a span ``add`` drops (bigger than the whole buffer, of an emitted run, one held
        already, or over its trace's cap), each judged as ``add`` judges it, in order, after
        the request's spans before it (a span sent twice; a run's last spans, each enclosing
        the one before it, coming past its cap together; a step dropped, and the agent span
        it waits for: ``_takes``)."""
        lim = self._limits
        count = len(spans)
        if (
            self._spans + count <= lim.max_buffered_spans
            and self._bytes + size_bytes <= lim.max_buffered_bytes
        ):
            return count, size_bytes
        # Per trace the request touches: the span ids it brings that add would take, and
        # their parents (what a later span of the request encloses).
        taken: dict[bytes, tuple[set[bytes], set[bytes | None]]] = {}
        for span in spans:
            if not self._takes(span, taken):
                count -= 1
                size_bytes -= span.size_bytes
        return count, size_bytes

    def _takes(
        self, span: SpanRecord, taken: dict[bytes, tuple[set[bytes], set[bytes | None]]]
    ) -> bool:
        """Whether ``add`` would take ``span`` after the spans of its request in ``taken``
        (``_room_taken``); if so, noted there. One it drops too large or over the cap keeps
        what it waited for (``_Trace.came``): that parent, noted too, encloses it, and is taken
        past the cap (``_kept_wait``)."""
        lim = self._limits
        trace = self._traces.get(span.trace_id)
        if trace is None and span.trace_id in self._emitted:
            return False
        ids, parents = taken.setdefault(span.trace_id, (set(), set()))
        if span.span_id in ids or (trace is not None and span.span_id in trace.spans):
            return False
        room = lim.max_buffered_bytes - self._bytes
        if span.size_bytes > lim.max_buffered_bytes:
            return _kept_wait(span, trace, parents, True, room)
        held, cap = len(ids), lim.max_spans_per_trace
        if trace is not None:
            held += len(trace.spans)
        if held >= cap:
            encloses = span.span_id in parents or (
                span.parent_span_id is None if trace is None else trace.encloses(span)
            )
            full = held >= cap + ENCLOSING_SPANS
            if full or not encloses:
                return _kept_wait(span, trace, parents, full and encloses, room)
        ids.add(span.span_id)
        parents.add(span.parent_span_id)
        return True

    def _reserved(self) -> int:
        """The bytes the spans of the request ``add`` takes (``TraceBuffer._take``) after the
        one it is at will take (``_takes``), which what a trace keeps of a span dropped may
        not take (``_flag_limited``, ``_replay``): ``admit`` said they fit, and counted no
        such memory. Not those it drops (over their trace's cap, duplicates, late, too large):
        counted, a step dropped over the cap lost its wait where a large span its request
        drops came after it. Walked once a request, from the first span that asks (a drop
        held, a replay): O(the request's spans after it), and a request that drops nothing
        pays nothing for it."""
        spans, at = self._request, self._at
        if at + 1 >= len(spans):
            return 0
        reserves = self._reserves
        if reserves is None:
            taken: dict[bytes, tuple[set[bytes], set[bytes | None]]] = {}
            sizes = [s.size_bytes if self._takes(s, taken) else 0 for s in spans[at:]]
            reserves = [0] * len(sizes)  # at k: the sizes after k
            for k in range(len(sizes) - 1, 0, -1):
                reserves[k - 1] = reserves[k] + sizes[k]
            self._reserves, self._reserves_from = reserves, at
        return reserves[at - self._reserves_from]

    def _room_for(self, spans: Sequence[SpanRecord], size_bytes: int) -> bool | None:
        """Whether a request fits under every bound now; ``None`` when it can never fit."""
        lim = self._limits
        count, size_bytes = self._room_taken(spans, size_bytes)
        if count > lim.max_buffered_spans or size_bytes > lim.max_buffered_bytes:
            return None
        if (
            self._spans + count > lim.max_buffered_spans
            or self._bytes + size_bytes > lim.max_buffered_bytes
        ):
            return False
        room = lim.max_traces - len(self._traces)
        if count <= room:
            return True  # even if each span started a trace of its own
        new = self._new_traces(spans)
        if new > lim.max_traces:
            return None
        return new <= room

    def _over_the_cap(self, trace: _Trace, span: SpanRecord) -> bool:
        """Whether ``trace`` is full for ``span``: it holds ``max_spans_per_trace`` spans and
        ``span`` does not enclose them, or ``ENCLOSING_SPANS`` more already
        (``assembly.buffer``'s docstring)."""
        held, cap = len(trace.spans), self._limits.max_spans_per_trace
        return held >= cap and (held >= cap + ENCLOSING_SPANS or not trace.encloses(span))

    def _flag_limited(
        self,
        trace_id: bytes,
        trace: _Trace | None,
        span: SpanRecord | None = None,
        maybe_parent: bool = True,
    ) -> None:
        """Flag ``trace`` incomplete for a dropped or rejected span (``span``, when one was
        dropped: a root anchors the trace all the same), or, its trace not held, remember it
        until it is (``assembly.limited``; ``_store`` replays a dropped span, and a rejected
        one is not known: ``_Trace.parent_lost``). ``maybe_parent``: the dropped span may be a
        parent a span of the trace waits for (``_Trace.dropped``); what the trace keeps of it
        is counted in its bytes, in the room left (``_reserved``: not the room the rest of its
        request takes). Where what
        anchors the trace changed, its checks start again (``_Trace.changed``), rescheduled
        no earlier than now: else a trace found unanchored before would wait for
        ``max_trace_age_ns``. A rejected span (``span`` None) is an arrival of its trace:
        its quiet period starts again, as its root anchors it only once quiet the lost
        parent's wait (a live run exports within it)."""
        if trace is None:
            # Kept until the trace comes (``assembly.limited``), then replayed (``_store``):
            # such a span may be a parent (nothing of the trace is held to say otherwise).
            self._limited.flag(trace_id, None if span is None else dropped_span(span))
            return
        trace.span_limited = True
        if span is None:
            now = self._clock()
            trace.parent_lost = True
            trace.last_ns = max(trace.last_ns, now)
            trace.changed()
            self._schedule(trace, now)
            return
        rooted, lost, held = trace.root_seen, trace.parent_lost, trace.size_bytes
        room = self._limits.max_buffered_bytes - self._bytes - self._reserved()
        named = trace.dropped(span, maybe_parent, room)
        self._bytes += trace.size_bytes - held  # what the trace keeps of the span
        if named or (trace.root_seen and not rooted) or (trace.parent_lost and not lost):
            trace.changed()
            self._schedule(trace, self._clock())

    def _fits(self, spans: Sequence[SpanRecord]) -> bool:
        """Whether the whole batch fits under every bound even if each span started a trace
        of its own: then no span of it can need an eviction."""
        lim, n = self._limits, len(spans)
        return (
            len(self._traces) + n <= lim.max_traces
            and self._spans + n <= lim.max_buffered_spans
            and self._bytes + sum(span.size_bytes for span in spans) <= lim.max_buffered_bytes
        )

    def _exceeded(self, new_trace: bool, size_bytes: int) -> str | None:
        """The bound one more span of ``size_bytes`` would break, if any."""
        lim = self._limits
        if new_trace and len(self._traces) >= lim.max_traces:
            return "max_traces"
        if self._spans + 1 > lim.max_buffered_spans:
            return "max_buffered_spans"
        if self._bytes + size_bytes > lim.max_buffered_bytes:
            return "max_buffered_bytes"
        return None

    def _store(self, span: SpanRecord, now: int) -> None:
        trace = self._traces.get(span.trace_id)
        if trace is None:
            trace = self._traces[span.trace_id] = _Trace(span.trace_id, now)
            limited = self._limited.take(span.trace_id)
            if limited is not None:
                self._replay(trace, limited, span.size_bytes)
        trace.add(span, now)
        self._spans += 1
        self._bytes += span.size_bytes
        self._schedule(trace)

    def _replay(self, trace: _Trace, limited: Limited, size_bytes: int) -> None:
        """Flag a trace whose first span (``size_bytes``) is being stored, cut before it was
        held (``assembly.limited``): a span not known, and the spans dropped, replayed as
        they would have been once it was held (``_Trace.came``), what they hold counted in
        the room the span leaves."""
        lost, kept = limited
        trace.span_limited = True
        trace.parent_lost = lost
        room = self._limits.max_buffered_bytes - self._bytes - size_bytes - self._reserved()
        for dropped in kept:
            trace.came(dropped, room - trace.size_bytes)
        self._bytes += trace.size_bytes

    def _schedule(self, trace: _Trace, not_before: int = 0) -> None:
        """Keep one live heap entry per trace, no later than its due time (nor earlier than
        ``not_before``: a check rescheduled outside an arrival, whose due time may have
        passed, is not read as overdue). A later due time (more spans arrived) is picked up
        when the early entry pops; an earlier one needs a new entry, and the old one goes
        stale."""
        due = max(trace.due_ns(self._limits), not_before)
        if trace.scheduled_ns is None or due < trace.scheduled_ns:
            trace.scheduled_ns = due
            heapq.heappush(self._deadlines, (due, next(self._tiebreak), trace))

    def _compact(self) -> None:
        """Rebuild the heap when stale entries outnumber live ones (bounded memory)."""
        if len(self._deadlines) <= 2 * len(self._traces) + 64:
            return
        self._deadlines = [
            (trace.scheduled_ns, next(self._tiebreak), trace)
            for trace in self._traces.values()
            if trace.scheduled_ns is not None
        ]
        heapq.heapify(self._deadlines)
