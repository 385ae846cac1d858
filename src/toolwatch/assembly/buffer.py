"""Assembly: buffer spans per trace until the trace is complete (DESIGN §4).

A trace is *ready* when its anchor has arrived and none of its spans has arrived for
``completion_wait_ns``: what anchors a trace (its root, an outermost AGENT span, what encloses
a tool loop's model calls), and how long a parent a span says is local is waited for, is
``assembly.anchoring``'s (its docstring says why).

OTLP exports only ended spans, so "arrived" means "ended". A trace that never becomes ready
is emitted anyway at ``max_trace_age_ns`` after its first span arrived, flagged
``timed_out``.

Every span passed to :meth:`TraceBuffer.add` ends in exactly one place (metrics.py's
conservation law): buffered, built (``spans_built`` when its trace is emitted) or dropped
with a reason:

* ``duplicate`` — the same trace id and span id is already buffered (OTLP retries);
* ``late`` — its trace was emitted as an agent run less than ``late_span_window_ns`` ago, or
  up to 1/256 of that more (ids are forgotten in time buckets: 1.17 s of 300 s): it is never
  re-assembled into a second ToolTrace. Up to ``max_remembered_traces`` emitted trace ids are
  remembered (``toolwatch.assembly.remembered``); past that the oldest are forgotten before
  their window passed, and counted (``PipelineMetrics.remembered_traces_evicted``);
* ``trace_span_limit`` — its trace already holds ``max_spans_per_trace`` spans, and the span
  encloses none of them, or ``ENCLOSING_SPANS`` (64) more already. A run's own span (its
  root, its outermost agent's, and those between, up to the span that encloses its model
  calls) ends after everything in it, so when a run is too long, these are among the spans
  that come past the cap; dropped, the trace was never anchored: held for
  ``max_trace_age_ns`` and judged ``timed_out``, its agent name lost with its agent span.
  So a root, and a span that some span the trace holds names as its parent, is still held,
  up to 64 of them: a trace holds at most ``max_spans_per_trace + ENCLOSING_SPANS`` spans
  (all within the buffer's own bounds), and is ready as any once anchored, flagged
  ``span_limit`` if a span of it was dropped. What comes after, inside the run, is dropped;
  a root dropped all the same (past those 64, or for a byte bound) still anchors its trace;
* ``span_too_large`` — the span alone is bigger than ``max_buffered_bytes``;
* ``buffer_full`` — its trace alone fills the buffer, so no other trace can be evicted, or,
  under ``backpressure``, the buffer is full: there nothing is evicted (a request gets here
  only when ``admit`` let it through as one that can never fit, or by ``add``), unless the
  buffer is stalled (``HeldTraces._admission``: it has refused requests for
  ``max_refusal_ns``), where runs are evicted as under ``evict_oldest`` (``assembly.victims``);
* ``not_an_agent_run`` — counted when its trace is emitted, instead of built: no span of the
  trace is an agent run, a model call or a tool execution (``runs_an_agent``), as in an HTTP
  request's trace that a Collector forwarding every trace sends. Such a trace is handed out
  like any (its spans may have waited for more), and makes no ToolTrace. Its id is not
  remembered: spans of it that come later are buffered as a trace again, an agent run if an
  agent service's part of it came after the gateway's, else dropped ``not_an_agent_run`` in
  their turn (each span counted once, where it ended).

``trace_span_limit``, ``span_too_large`` and ``buffer_full`` flag the trace incomplete
(``span_limit``) when it is emitted, also when the dropped span came before any span of its
trace was buffered (up to ``max_traces`` such trace ids are remembered until their trace
arrives, and what anchoring reads of up to ``max_traces`` such spans, the oldest traces'
forgotten first: ``assembly.limited``).
So does a span the decoder rejected (:meth:`TraceBuffer.flag_rejected`): never passed here,
it is counted rejected, but its run misses it all the same. ``span_limit`` reads "a span of
the run was not taken": an incomplete run is judged against the policy alone whatever took
the span, and the counters of dropped and rejected spans say which.
What anchors such a trace is ``assembly.anchoring``'s: a span dropped here came, and is
waited for no more; a rejected one, not known, may be the parent a span waits for.

``TraceBuffer`` decides what happens to each span and each trace; what it holds (the traces,
their counts against the bounds, their deadlines) is its base class's, ``HeldTraces``
(``assembly.held_traces``); its settings are ``AssemblyLimits`` (``assembly.limits``).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Final

from toolwatch.assembly.anchoring import _Trace
from toolwatch.assembly.completed import CompletedTrace
from toolwatch.assembly.held_traces import HeldTraces
from toolwatch.assembly.limits import ENCLOSING_SPANS
from toolwatch.assembly.victims import _ended, _root_ended, _Victims
from toolwatch.model import SpanRecord, SpanRole

__all__ = [
    "NOT_AN_AGENT_RUN",
    "REPORTED_DROPS",
    "TraceBuffer",
    "runs_an_agent",
]

#: The drop reason of the spans of a trace that ``runs_an_agent`` says is none.
NOT_AN_AGENT_RUN: Final = "not_an_agent_run"

#: The drop reasons the sender hears of (OTLP partial success: spans the server did not
#: accept), each with why: a limit (and the setting that sets it), or a trace already
#: evaluated, whose spans are never assembled again (a retry of spans it held is told so
#: too: they were evaluated, this copy was not taken). ``duplicate`` is not: a retry of spans
#: still held, accepted the first time.
REPORTED_DROPS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "late": "their trace was already evaluated",
        "trace_span_limit": "over assembly.max_spans_per_trace",
        "span_too_large": "over assembly.max_buffered_bytes",
        "buffer_full": "over assembly.max_buffered_spans, max_buffered_bytes or max_traces",
    }
)


def _over(trace: _Trace) -> bool:
    """Whether ``trace``'s run is over at a drain, nothing more to come: its anchor came, or
    its root, nothing held saying its run goes on (``victims._root_ended``: no span of the
    root's service ended after the root, none rejected at ingest)."""
    return trace.anchored() or _root_ended(trace)


def runs_an_agent(spans: Iterable[SpanRecord]) -> bool:
    """Whether some span of a trace is an agent run, a model call or a tool execution (a
    guardrail check alone is none)."""
    return any(
        span.role is not SpanRole.OTHER and span.role is not SpanRole.GUARDRAIL for span in spans
    )


class TraceBuffer(HeldTraces):
    """Buffers spans per trace id and emits each trace once, complete or flagged.

    Not thread-safe: call every method from one event loop. ``add`` is O(spans) (amortized,
    plus O(log traces) per trace touched); ``poll`` pops only due deadlines from a heap with
    lazy deletion, so it does not scan the traces in flight. Memory is bounded by the limits:
    traces, spans and bytes in flight (a trace at most ``max_spans_per_trace`` spans and
    ``ENCLOSING_SPANS`` more), and ``max_remembered_traces`` emitted trace ids (about 33 bytes
    each at most).
    """

    def admit(
        self,
        spans: Sequence[SpanRecord],
        size_bytes: int,
        refused: dict[str, int] | None = None,
        rejected: Sequence[bytes] = (),
    ) -> list[CompletedTrace] | None:
        """Take a request of ``spans`` (``size_bytes`` in all) as :meth:`add` does, evicting
        when stalled too, or refuse it whole: ``None`` (``HeldTraces._admission``: the client
        retries). A request without spans flags its ``rejected`` traces (``flag_rejected``)."""
        evicts = self._admission(spans, size_bytes)
        if evicts is None:
            return None
        if spans:
            return self._add(spans, refused, rejected, evicts)
        if rejected:
            self.flag_rejected(rejected)
        return []

    def add(
        self,
        spans: Sequence[SpanRecord],
        refused: dict[str, int] | None = None,
        rejected: Sequence[bytes] = (),
    ) -> list[CompletedTrace]:
        """Buffer ``spans`` (arrival time = the clock now), not asking :meth:`admit`'s question
        (under ``backpressure`` what does not fit is dropped); return the traces evicted to
        make room, flagged ``evicted``, but those whose run had ended (``_ended``: judged as
        they came, their quiet period cut short). Never exceeds a bound. When given,
        ``refused`` also counts the dropped spans the sender hears of (``REPORTED_DROPS``),
        by reason. ``rejected``: the traces of the request's spans ingest rejected
        (``flag_rejected``): those buffered that the request brings no span of are flagged
        before its spans are taken (one evicted for them is judged with its rejection: a run
        in flight, ``evicted``, until quiet the lost parent's wait), the others after
        (flagged before, ids not buffered yet, remembered until their trace comes, could push
        out, past ``max_traces`` of them, those of the traces the request brings, or an
        earlier request flagged)."""
        return self._add(spans, refused, rejected, self._limits.overflow == "evict_oldest")

    def _add(
        self,
        spans: Sequence[SpanRecord],
        refused: dict[str, int] | None,
        rejected: Sequence[bytes],
        evicts: bool,
    ) -> list[CompletedTrace]:
        """``add``, evicting to make room only if ``evicts``."""
        now = self._clock()
        self._emitted.forget(now)
        early: set[bytes] = set()
        if rejected:
            brought = {span.trace_id for span in spans}
            early = {t for t in rejected if t in self._traces and t not in brought}
            self._flag_rejected(early)
        evicted = self._take(spans, refused, now, evicts)
        if rejected:
            self._flag_rejected(t for t in rejected if t not in early)
        return evicted

    def _take(
        self, spans: Sequence[SpanRecord], refused: dict[str, int] | None, now: int, evicts: bool
    ) -> list[CompletedTrace]:
        """``add``'s spans, each buffered or dropped, and the traces evicted for them."""
        evicted: list[CompletedTrace] = []
        dropped: Counter[str] = Counter()
        roomy = self._fits(spans)  # the usual case: no span of the batch needs room made
        # What may be evicted (none of the request's traces), read at the first eviction.
        victims: _Victims | None = None
        # Where the request is: the bytes its spans after it will take are what the memory of
        # a span dropped may not take (``HeldTraces._reserved``, walked only if one asks).
        # Reset at the start and in a ``finally``: a request that raised leaves none of its
        # reserves to the next.
        self._request, self._reserves = spans, None
        try:
            for at, span in enumerate(spans):
                self._at = at
                reason = self._drop_reason(span)
                if reason is None and not roomy:
                    if victims is None and evicts:
                        victims = _Victims(self._traces, {s.trace_id for s in spans})
                    if not self._make_room(span, victims, now, evicted):
                        reason = "buffer_full"
                if reason is None:
                    self._store(span, now)
                else:
                    dropped[reason] += 1
        finally:
            self._request, self._at, self._reserves = (), 0, None
        for reason, n in dropped.items():
            self._metrics.spans_dropped(n, reason)
            if refused is not None and reason in REPORTED_DROPS:
                refused[reason] = refused.get(reason, 0) + n
        self._compact()
        return evicted

    def flag_rejected(self, trace_ids: Iterable[bytes]) -> None:
        """Flag incomplete (``span_limit``) the traces of spans rejected at ingest
        (``DecodedBatch.rejected_traces``), as a span a limit drops flags its trace, also
        before it arrives: the run would be judged whole without a call, and against its
        golden case or shadow source that reads as drift. A trace already emitted is left
        alone: its run was judged, and the rejected span would have been late."""
        self._emitted.forget(self._clock())  # as add does first: a run forgotten is new
        self._flag_rejected(trace_ids)

    def _flag_rejected(self, trace_ids: Iterable[bytes]) -> None:
        """``flag_rejected`` with the emitted ids forgotten already (``add`` did, now)."""
        for trace_id in trace_ids:
            trace = self._traces.get(trace_id)
            if trace is not None or trace_id not in self._emitted:
                self._flag_limited(trace_id, trace)

    def poll(self) -> list[CompletedTrace]:
        """Emit the traces that became ready or too old, in deadline order."""
        now = self._clock()
        self._emitted.forget(now)
        ready: list[CompletedTrace] = []
        while self._deadlines and self._deadlines[0][0] <= now:
            when, _, trace = heapq.heappop(self._deadlines)
            if self._traces.get(trace.trace_id) is not trace or trace.scheduled_ns != when:
                continue  # stale entry: the trace was emitted or rescheduled earlier
            trace.scheduled_ns = None
            if trace.due_ns(self._limits) > when:
                self._schedule(trace)  # spans arrived since: back in line at the real time
                continue
            completed = self._check(trace, now)
            if completed is not None:
                ready.append(completed)
        self._compact()
        return ready

    def drain(self) -> list[CompletedTrace]:
        """Emit everything (shutdown): ready traces as :meth:`poll` would, then the rest,
        oldest first: a trace whose anchor has arrived as ready (``complete``, or
        ``span_limit``), though not quiet for ``completion_wait_ns`` yet, and only the others
        flagged ``shutdown`` (``_over``). Nothing more can arrive, so the wait for stragglers
        buys nothing; a run that ended just before a SIGTERM (any rolling restart) was judged
        incomplete, against the policy only, without its golden case or shadow source. A
        trace whose root came with a span of it rejected at ingest is one of the others until
        ``poll`` judged it (quiet ``completion_wait_ns + lost_parent_wait_ns``): the rejected
        span may be a step of a run its request left in the background, a synchronous
        request's as well (the rejection is counted at ingest all the same). So is one with a
        span of the root's service that ended after the root (``_Trace.ran_on``): its run,
        left running in the background, may go on."""
        out = self.poll()
        now = self._clock()
        for trace in list(self._traces.values()):
            out.append(self._emit(trace, now, None if _over(trace) else "shutdown"))
        self._deadlines.clear()
        return out

    def _drop_reason(self, span: SpanRecord) -> str | None:
        trace = self._traces.get(span.trace_id)
        # A buffered trace's id is not remembered (a span of a remembered trace is dropped,
        # not stored), so only a trace's first span, or a late one, is looked up there.
        if trace is None and span.trace_id in self._emitted:
            return "late"
        if trace is not None and span.span_id in trace.spans:
            return "duplicate"
        reason = None
        maybe_parent = True
        if trace is not None and self._over_the_cap(trace, span):
            reason = "trace_span_limit"
            # A step over the cap encloses nothing held (else it would be taken), so it is
            # no parent the trace waits for (nor of a span to come: that too would enclose
            # nothing); past the enclosing spans, it is if it encloses a span held. What it
            # waited for is kept all the same (``_Trace.came``).
            full = self._limits.max_spans_per_trace + ENCLOSING_SPANS
            maybe_parent = len(trace.spans) >= full and trace.encloses(span)
        elif span.size_bytes > self._limits.max_buffered_bytes:
            reason = "span_too_large"
        if reason is not None:
            self._flag_limited(span.trace_id, trace, span, maybe_parent)
        return reason

    def _make_room(
        self, span: SpanRecord, victims: _Victims | None, now: int, evicted: list[CompletedTrace]
    ) -> bool:
        """Evict other traces (``victims``, ``None``: none) until ``span`` fits; false if it
        cannot. Under ``backpressure`` only when ``admit`` took the request by evicting (the
        buffer stalled): else the operator chose to refuse rather than judge runs in flight
        early, and a request gets here only when ``admit`` let it through as one that can
        never fit (or by ``add``, without asking), so what does not fit is dropped."""
        trace = self._traces.get(span.trace_id)
        while (bound := self._exceeded(trace is None, span.size_bytes)) is not None:
            victim = victims.take() if victims is not None else None
            if victim is None:
                self._flag_limited(span.trace_id, trace, span)
                return False
            self._metrics.trace_evicted(bound)
            evicted.append(self._emit(victim, now, None if _ended(victim) else "evicted"))
        return True

    def _check(self, trace: _Trace, now: int) -> CompletedTrace | None:
        lim = self._limits
        quiet = now - trace.last_ns
        if not trace.anchor_missing and quiet >= lim.completion_wait_ns:
            if trace.anchored():
                return self._emit(trace, now, None)
            trace.anchor_missing = True
            trace.awaiting_local = lim.local_parent_wait_ns > 0 and trace.anchored_if_local_gone()
        if trace.awaiting_local and quiet >= lim.local_parent_wait_ns:
            # The local parent never came (exported elsewhere, filtered out): the agent
            # anchors after all, as it would under a remote parent.
            return self._emit(trace, now, None)
        if (
            (trace.root_seen or trace.parent_lost)
            and not trace.lost_parent_waited
            and quiet >= lim.completion_wait_ns + lim.lost_parent_wait_ns
        ):
            if trace.lost_parent_over():
                # A parent lost in export, or maybe rejected at ingest, or a run left running
                # in the background quiet since (``_Trace.ran_on``): the run is over (such a
                # run exports a span within the wait).
                return self._emit(trace, now, None)
            # A run left running in the background: its agent span is to come. Or, no root,
            # nothing that would anchor the trace if the rejected span were the parent it
            # waits for. Its deadline is no longer this one, passed (rescheduled at it, poll
            # would pop it for ever).
            trace.lost_parent_waited = True
        if now - trace.first_ns >= lim.max_trace_age_ns:
            return self._emit(trace, now, "timed_out")
        self._schedule(trace)
        return None

    def _emit(self, trace: _Trace, now: int, cause: str | None) -> CompletedTrace:
        """Remove ``trace`` and hand it out. ``cause`` (timed_out, evicted, shutdown) wins
        over ``span_limit``, which only replaces what would otherwise be complete.

        Only the id of an agent run is remembered (``late``): a trace that makes no ToolTrace
        can make no second one, and its id, remembered, dropped the agent service's part of
        the trace that came after the gateway's (a batch processor's delay apart) as late."""
        del self._traces[trace.trace_id]
        self._spans -= len(trace.spans)
        self._bytes -= trace.size_bytes
        agent_run = runs_an_agent(trace.spans.values())
        if agent_run:
            self._remember(trace.trace_id, now)
            self._metrics.spans_built(len(trace.spans))
        else:
            self._metrics.spans_dropped(len(trace.spans), NOT_AN_AGENT_RUN)
        reason = cause if cause is not None else ("span_limit" if trace.span_limited else None)
        return CompletedTrace(
            trace_id=trace.trace_id,
            spans=tuple(trace.spans.values()),
            complete=reason is None,
            incomplete_reason=reason,
            first_arrival_ns=trace.first_ns,
            last_arrival_ns=trace.last_ns,
            by_id=trace.spans,  # the trace leaves the buffer: its dict goes with it
            agent_run=agent_run,
        )

    def _remember(self, trace_id: bytes, now: int) -> None:
        forgotten = self._emitted.add(trace_id, now)
        if forgotten:
            self._metrics.remembered_traces_evicted(forgotten)
