"""Assembly: buffer spans per trace until the trace is complete (DESIGN §4).

A trace is *ready* when its anchor has arrived and none of its spans has arrived for
``completion_wait_ns``. The anchor is the root span (no parent), once no span of the trace
waits for a parent its flags say is local (``_Trace._awaits_local``: a run left running in
the background after its request's span, the root, ended), or, when the root never comes
(its parent lives in another service), an outermost AGENT span: one whose ancestor chain among
the buffered spans holds no AGENT and no TOOL span and leaves the buffer. A TOOL ancestor
disqualifies it too, because an agent invoked as a tool is nested in an outer run that has not
finished yet (CONVENTIONS §6.5). So does a chain that leaves the buffer at a span whose flags
say its parent is not remote (``SpanRecord.parent_local``): that parent is the same process's,
still running, and will be exported. Without that, an agent that handed off (or a first turn)
anchored its trace while the workflow span above it was still open, and what the next agent
did arrived after the trace was evaluated, dropped as ``late``. A local parent that never
comes (a second tracer provider exported it elsewhere, a Collector filtered it out) leaves the
trace to ``max_trace_age_ns``, or, where ``local_parent_wait_ns`` is set, is taken as gone
once the trace has been quiet that long: the agent anchors it then. Not by default: a live run
is quiet that long while one slow step (a reasoning model's call, a slow tool) runs, and it
would be cut in two, the rest of it dropped as ``late``.

A trace with no AGENT span (a loop on a plain model client: the ``openai`` client's own,
google-genai's automatic function calling) is anchored by the same walk up from its model
(LLM) calls of a tool loop, when its root is in the calling service: by the span that encloses
the calls (the loop's own, the request's server span), once it has arrived and its parent is
known to be remote: its flags say the parent is not local, and its sender is one that sets the
flags (a span of the trace says the enclosing span is its local parent). Older SDKs set none,
and there the span above the model calls is as often a step of an agent run whose AGENT span,
ending last, has not come (Strands' event loop cycle, Vercel's ``ai.generateText``): anchoring
on it would drop the agent span as ``late``. A chain that leaves the buffer at the model call
itself does not anchor either: a call is one step of its run, never its end. Both are waited
for as a local parent is (``local_parent_wait_ns``, else ``max_trace_age_ns``).

Only a call of a tool loop is walked from: one that requested tools (its requested calls, or
a finish reason naming them, which is kept without content capture) or ran them inside it (a
TOOL span is its child: google-genai's automatic function calling, whose span holds neither).
A service whose model calls request no tool (a summarizer or a classifier) is as often a tool
of another service's agent run, its parent that agent's TOOL span: in a gateway, where both
services' spans reach one toolwatch, its part ends first, and its batch processor sends it
first. Anchored on it, the trace was judged as that part alone after ``completion_wait_ns``,
and the agent's run, AGENT span and all, was dropped as ``late``: a silent missed page. Such
a trace waits for its root (or ``max_trace_age_ns``). Two other remedies were weighed. Not
remembering a trace anchored under a remote parent would let the agent's part be judged on
its own, but also an OTLP retry of the first part, or its stragglers, judged a second time
(double pages, or a partial run's false ones); opting into the anchor by a setting would give
up what it buys (a loop under a caller judged after the wait, not at ``max_trace_age_ns``)
everywhere by default. A called service that is itself a tool loop, or writes an AGENT span,
still anchors the trace on its own part when it arrives before its caller's TOOL span: the
caller's run is then dropped as ``late`` (docs/how-it-works.md).

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
  only when ``has_room`` let it through as one that can never fit, or without asking);
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
arrives). So does a span the decoder rejected (:meth:`TraceBuffer.flag_rejected`): never
passed here, it is counted rejected, but its run misses it all the same. ``span_limit``
reads "a span of the run was not taken": an incomplete run is judged against the policy
alone whatever took the span, and the counters of dropped and rejected spans say which.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from toolwatch.assembly.remembered import RememberedTraces
from toolwatch.metrics import PipelineMetrics
from toolwatch.model import Clock, SpanRecord, SpanRole

__all__ = [
    "ENCLOSING_SPANS",
    "NOT_AN_AGENT_RUN",
    "REPORTED_DROPS",
    "AssemblyLimits",
    "CompletedTrace",
    "TraceBuffer",
    "runs_an_agent",
]

#: The drop reason of the spans of a trace that ``runs_an_agent`` says is none.
NOT_AN_AGENT_RUN: Final = "not_an_agent_run"

#: How many spans over ``max_spans_per_trace`` a trace still takes when they enclose what it
#: holds (module docstring): its open ancestors when it filled, a few in a run of steps one
#: after another, more where many ran in parallel.
ENCLOSING_SPANS: Final = 64
_OVERFLOW_POLICIES: Final = frozenset({"backpressure", "evict_oldest"})
#: Finish reasons (lower-cased) of a model call that stopped to have tools run
#: (``_requests_tools``).
_TOOL_FINISHES: Final = frozenset(
    {"tool_calls", "tool_call", "tool_use", "tool-calls", "function_call"}
)
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


#: How much longer than ``completion_wait`` a rooted trace waits, by default, for a local
#: parent that a span which ended before the root names (``_Trace.awaits_after_root``;
#: ``AssemblyLimits.lost_parent_wait_ns``): the OpenTelemetry SDKs' batch processors export
#: every 5 s (``OTEL_BSP_SCHEDULE_DELAY``), so a parent still running comes, or a span of its
#: that ended since does, within one such delay; one that does not was lost (an export given
#: up, a full queue, a filter), and the run is over.
LOST_PARENT_WAIT_NS: Final = 5_000_000_000


@dataclass(frozen=True, slots=True)
class AssemblyLimits:
    """Completion timing (nanoseconds of the injected clock) and memory bounds.

    ``overflow`` is what a receiver does when a request does not fit: ``backpressure``
    refuses it with a retryable status (see :meth:`TraceBuffer.has_room`); ``evict_oldest``
    accepts it and evicts the oldest traces, evaluating them as incomplete.
    ``missing_spans_from_history``: the timeline judges a run whose model spans' input
    histories show model calls the trace does not hold ``missing_spans``
    (``assembly.missing``).
    """

    completion_wait_ns: int = 2_000_000_000
    max_trace_age_ns: int = 300_000_000_000
    local_parent_wait_ns: int = 0  # off: such a trace waits for max_trace_age_ns
    lost_parent_wait_ns: int = LOST_PARENT_WAIT_NS
    late_span_window_ns: int = 300_000_000_000
    max_traces: int = 10_000
    max_spans_per_trace: int = 5_000
    max_buffered_spans: int = 200_000
    max_buffered_bytes: int = 256 * 2**20
    max_remembered_traces: int = 2_000_000
    overflow: str = "backpressure"
    missing_spans_from_history: bool = False

    def __post_init__(self) -> None:
        for name in ("completion_wait_ns", "max_trace_age_ns", "max_traces"):
            _require(name, getattr(self, name), minimum=1)
        for name in ("max_spans_per_trace", "max_buffered_spans", "max_buffered_bytes"):
            _require(name, getattr(self, name), minimum=1)
        _require("late_span_window_ns", self.late_span_window_ns, minimum=0)
        _require("local_parent_wait_ns", self.local_parent_wait_ns, minimum=0)
        _require("lost_parent_wait_ns", self.lost_parent_wait_ns, minimum=1)
        _require("max_remembered_traces", self.max_remembered_traces, minimum=0)
        if self.overflow not in _OVERFLOW_POLICIES:
            allowed = ", ".join(sorted(_OVERFLOW_POLICIES))
            raise ValueError(f"overflow: {self.overflow!r} is not one of {allowed}")


def runs_an_agent(spans: Iterable[SpanRecord]) -> bool:
    """Whether some span of a trace is an agent run, a model call or a tool execution (a
    guardrail check alone is none)."""
    return any(
        span.role is not SpanRole.OTHER and span.role is not SpanRole.GUARDRAIL for span in spans
    )


def _requests_tools(model: SpanRecord) -> bool:
    """Whether a model call asked for tools: it recorded the calls it requested, or a finish
    reason that names them (kept without content capture: OpenAI's ``tool_calls``, the GenAI
    conventions' ``tool_call``, Anthropic's and Bedrock's ``tool_use``, the Vercel AI SDK's
    ``tool-calls``, OpenAI's older ``function_call``). Gemini says ``STOP`` either way."""
    return bool(model.output_tool_calls) or any(
        reason.lower() in _TOOL_FINISHES for reason in model.finish_reasons
    )


def _require(name: str, value: int, minimum: int) -> None:
    if value < minimum:
        raise ValueError(f"{name}: must be at least {minimum}, got {value}")


@dataclass(frozen=True, slots=True, init=False)
class CompletedTrace:
    """A trace handed to the timeline: its distinct spans in arrival order.

        ``incomplete_reason`` is ``None`` when ``complete``, else ``timed_out``, ``evicted``,
        ``span_limit`` or ``shutdown``. Arrival times are clock readings, not span times.
        ``agent_run`` is false for a trace with no agent, model or tool span (its spans were
    counted dropped, ``not_an_agent_run``: it makes no ToolTrace). ``by_id``, when given, holds
    ``spans`` by span id (the buffer hands over the dict it kept
        them in, so the timeline does not build another); never mutated, and not compared.
        Its constructor is written out, as ``ToolTrace``'s is (one is built per trace).
    """

    trace_id: bytes
    spans: tuple[SpanRecord, ...]
    complete: bool
    incomplete_reason: str | None
    first_arrival_ns: int
    last_arrival_ns: int
    by_id: dict[bytes, SpanRecord] | None = field(default=None, compare=False, repr=False)
    agent_run: bool = True  # ``runs_an_agent(spans)``, worked out once, by the buffer

    def __init__(  # noqa: PLR0917 - the fields, in the order a dataclass would take them
        self,
        trace_id: bytes,
        spans: tuple[SpanRecord, ...],
        complete: bool,
        incomplete_reason: str | None,
        first_arrival_ns: int,
        last_arrival_ns: int,
        by_id: dict[bytes, SpanRecord] | None = None,
        agent_run: bool = True,
    ) -> None:
        object.__setattr__(self, "trace_id", trace_id)
        object.__setattr__(self, "spans", spans)
        object.__setattr__(self, "complete", complete)
        object.__setattr__(self, "incomplete_reason", incomplete_reason)
        object.__setattr__(self, "first_arrival_ns", first_arrival_ns)
        object.__setattr__(self, "last_arrival_ns", last_arrival_ns)
        object.__setattr__(self, "by_id", by_id)
        object.__setattr__(self, "agent_run", agent_run)


class _Trace:
    """The mutable state of one buffered trace."""

    __slots__ = (
        "agents",
        "anchor_missing",
        "awaiting_local",
        "first_ns",
        "last_end_ns",
        "last_ns",
        "models",
        "open_parents",
        "root_end_ns",
        "root_seen",
        "root_service",
        "scheduled_ns",
        "size_bytes",
        "span_limited",
        "spans",
        "trace_id",
    )

    def __init__(self, trace_id: bytes, now: int) -> None:
        self.trace_id = trace_id
        self.spans: dict[bytes, SpanRecord] = {}
        self.agents: list[SpanRecord] = []
        self.models: list[SpanRecord] = []  # LLM spans: what anchors a trace of no agent
        self.size_bytes = 0
        self.first_ns = now
        self.last_ns = now
        self.root_seen = False
        self.root_end_ns = 0  # when its root (the latest of them) ended, once one came
        self.root_service: str | None = None  # that root's service
        self.last_end_ns = 0  # when its span that ended last ended
        self.span_limited = False
        self.anchor_missing = False  # checked since the last arrival: no anchor yet
        # ... but one, were the local parents it waits for gone: anchored at local_parent_wait
        self.awaiting_local = False
        self.scheduled_ns: int | None = None  # when of this trace's one live heap entry
        # Once full: the parent ids of its spans that it does not hold (``encloses``).
        self.open_parents: set[bytes | None] | None = None

    def add(self, span: SpanRecord, now: int) -> None:
        self.spans[span.span_id] = span
        self.size_bytes += span.size_bytes
        self.last_ns = now
        self.anchor_missing = self.awaiting_local = False
        self.last_end_ns = max(self.last_end_ns, span.end_ns)
        if span.parent_span_id is None:
            self._root(span)
        if span.role is SpanRole.AGENT:
            self.agents.append(span)
        elif span.role is SpanRole.LLM:
            self.models.append(span)
        if self.open_parents is not None:
            self.open_parents.discard(span.span_id)
            if span.parent_span_id not in self.spans:
                self.open_parents.add(span.parent_span_id)

    def _root(self, span: SpanRecord) -> None:
        self.root_seen = True
        if span.end_ns >= self.root_end_ns:
            self.root_end_ns, self.root_service = span.end_ns, span.service

    def encloses(self, span: SpanRecord) -> bool:
        """Whether ``span`` is a root, or the parent of a span this trace holds. Asked of a
        full trace only: the first time, it notes its spans' parents that it does not hold
        (O(spans), once; a few ids, its open ancestors), kept up to date by ``add``."""
        if span.parent_span_id is None:
            return True
        if self.open_parents is None:
            held = self.spans
            self.open_parents = {s.parent_span_id for s in held.values()}
            self.open_parents.difference_update(held)
        return span.span_id in self.open_parents

    def dropped(self, span: SpanRecord) -> None:
        """A span of this trace was dropped for a limit (``TraceBuffer._flag_limited`` flags
        the trace): a root, though not held, has arrived, and anchors the trace all the same."""
        if span.parent_span_id is None:
            self._root(span)

    def due_ns(self, limits: AssemblyLimits) -> int:
        """The next time this trace needs a look: quiet period over, or too old."""
        too_old = self.first_ns + limits.max_trace_age_ns
        due = too_old
        if self.awaiting_local:
            due = min(due, self.last_ns + limits.local_parent_wait_ns)
        if self.anchor_missing and self.root_seen:
            due = min(due, self.last_ns + limits.completion_wait_ns + limits.lost_parent_wait_ns)
        if self.anchor_missing:
            return due
        return min(self.last_ns + limits.completion_wait_ns, too_old)

    def anchored(self, local_gone: bool = False) -> bool:
        """Whether the root, an outermost agent span or, in a trace of no agent span, what
        encloses a tool loop's model call (module docstring) has arrived; ``local_gone``:
        counting a parent that its span says is local as gone too.

        The verdict of every ancestor walked through is kept for the next walk, so many
        agents (or model calls) under one long chain, or a parent cycle, cost O(spans), not
        O(agents x spans)."""
        if self.root_seen:
            # ... and no span waits for a parent its flags say is local: a run the request
            # left running in the background, its root ended first (``_awaits_local``).
            return local_gone or self.span_limited or not self._awaits_local()
        settled: dict[bytes, bool] = {}
        if self.agents:
            return any(self._outermost(agent, settled, local_gone) for agent in self.agents)
        if not self.models:
            return False
        # The spans some span says are its local parent: their sender says where parents are;
        # and the model calls that ran a tool inside them (their TOOL spans' parents).
        said: set[bytes | None] = set()
        ran_tools: set[bytes | None] = set()
        for span in self.spans.values():
            if span.parent_local:
                said.add(span.parent_span_id)
            if span.role is SpanRole.TOOL:
                ran_tools.add(span.parent_span_id)
        return any(
            self._outermost(model, settled, local_gone, said)
            for model in self.models
            if model.span_id in ran_tools or _requests_tools(model)
        )

    def _awaits_local(self) -> bool:
        """Whether a span says its parent is local (the same process's, still running: it
        ends after its children, and is exported after them) and that parent has not come.
        A root usually ends last, but not that of a run a request handler left running (a
        task of its own, a worker thread: the response went out, its server span ended and
        was exported first): anchored by it, the trace was judged at the first quiet
        ``completion_wait`` between two of the run's export batches, as the calls exported
        so far, and the rest was dropped as ``late``. A trace that lost a span to a limit
        or to ingest (``span_limited``) may have lost that parent: its root anchors it.
        A parent that never comes is waited for ``lost_parent_wait_ns`` more, unless a span
        ended after the root (``awaits_after_root``)."""
        held = self.spans
        return any(span.parent_local and span.parent_span_id not in held for span in held.values())

    def awaits_after_root(self) -> bool:
        """Whether a span of the root's service that ended after the root did waits for its
        local parent: a run left running in the background, whose agent span is still to
        come, however long it runs (``local_parent_wait``, else ``max_trace_age``). A span
        that ended before the root (the run's first steps, or a sync request that lost the
        span's parent in export), or another service's (its clock is not the root's), holds
        the trace ``lost_parent_wait_ns`` more: a process's batch processor exports spans in
        the order they ended, so a parent still running is heard of by then."""
        root_end, service = self.root_end_ns, self.root_service
        if self.last_end_ns <= root_end:
            return False
        held = self.spans
        return any(
            span.end_ns > root_end
            and span.service == service
            and span.parent_local
            and span.parent_span_id not in held
            for span in held.values()
        )

    def _outermost(
        self,
        start: SpanRecord,
        settled: dict[bytes, bool],
        local_gone: bool,
        said: set[bytes | None] | None = None,
    ) -> bool:
        """Whether the chain from ``start``'s parent up holds no AGENT or TOOL span and leaves
        the buffer for good (``said``: from a model call, see ``_verdict``); records that
        verdict in ``settled`` for each span it passed."""
        passed: dict[bytes, None] = {}  # the walk so far, in order
        last, parent = start, start.parent_span_id  # last: the span whose parent is next
        while parent is not None and parent not in settled and parent not in passed:
            ancestor = self.spans.get(parent)
            if ancestor is None or ancestor.role in (SpanRole.AGENT, SpanRole.TOOL):
                break
            passed[parent] = None
            last, parent = ancestor, ancestor.parent_span_id
        verdict = self._verdict(parent, settled, passed, last, local_gone, said)
        settled.update(dict.fromkeys(passed, verdict))
        return verdict

    def _verdict(  # noqa: PLR0917 - the walk's state, passed on
        self,
        stop: bytes | None,
        settled: dict[bytes, bool],
        passed: dict[bytes, None],
        last: SpanRecord,
        local_gone: bool,
        said: set[bytes | None] | None,
    ) -> bool:
        """The outcome of a walk that stopped at the span id ``stop``, ``last``'s parent.
        ``said`` (a walk from a model call): the span ids that spans say are their local
        parent; such a walk leaves at a parent known to be remote, or waits as for a local
        one (module docstring)."""
        if stop is None:
            return True
        if stop in settled:
            return settled[stop]
        if stop in passed:
            return False  # a parent cycle never leaves the buffer
        if stop in self.spans:
            return False  # an AGENT or TOOL span: the run is nested in another
        if said is not None:
            # Not the model call itself, and flags that say remote from a sender that sets
            # them: unsaid, the span may be a step of an agent run not all here yet.
            remote = last.role is not SpanRole.LLM and not last.parent_local
            return local_gone or (remote and last.span_id in said)
        # Not arrived: remote (another service's), or said nothing; a parent the span says
        # is local is the same process's and still running (a handoff's workflow span).
        return local_gone or not last.parent_local


class TraceBuffer:
    """Buffers spans per trace id and emits each trace once, complete or flagged.

    Not thread-safe: call every method from one event loop. ``add`` is O(spans) (amortized,
    plus O(log traces) per trace touched); ``poll`` pops only due deadlines from a heap with
    lazy deletion, so it does not scan the traces in flight. Memory is bounded by the limits:
    traces, spans and bytes in flight (a trace at most ``max_spans_per_trace`` spans and
    ``ENCLOSING_SPANS`` more), and ``max_remembered_traces`` emitted trace ids (about 33 bytes
    each at most).
    """

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
        # Trace ids not buffered yet whose span a limit dropped: flagged when they arrive.
        self._limited: OrderedDict[bytes, None] = OrderedDict()
        self._spans = 0
        self._bytes = 0

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
        """Whether a request of ``spans`` (``size_bytes`` in all) fits now: its spans, its
        bytes, and the traces it would start (its trace ids not buffered yet).

        Always true under ``evict_oldest``. Under ``backpressure`` a receiver answers
        ``False`` with a retryable status. A request bigger than the whole buffer (more
        spans, bytes or new traces than it can ever hold) is let through (``add`` takes what
        fits and drops the rest, ``buffer_full``, evicting nothing): refusing it would make
        the client retry something that can never fit. A span bigger than the whole buffer
        takes no room (``add`` drops it, ``span_too_large``) and is not counted: counted, it
        let an ordinary request through as one that can never fit.
        """
        lim = self._limits
        if lim.overflow == "evict_oldest":
            return True
        count = len(spans)
        if self._bytes + size_bytes > lim.max_buffered_bytes:  # only then can one be too big
            too_large = [s.size_bytes for s in spans if s.size_bytes > lim.max_buffered_bytes]
            count -= len(too_large)
            size_bytes -= sum(too_large)
        if count > lim.max_buffered_spans or size_bytes > lim.max_buffered_bytes:
            return True
        if (
            self._spans + count > lim.max_buffered_spans
            or self._bytes + size_bytes > lim.max_buffered_bytes
        ):
            return False
        room = lim.max_traces - len(self._traces)
        if count <= room:
            return True  # even if each span started a trace of its own
        new = len(
            {
                s.trace_id
                for s in spans
                if s.trace_id not in self._traces and s.size_bytes <= lim.max_buffered_bytes
            }
        )
        return new <= room or new > lim.max_traces

    def add(
        self, spans: Sequence[SpanRecord], refused: dict[str, int] | None = None
    ) -> list[CompletedTrace]:
        """Buffer ``spans`` (arrival time = the clock now); return the traces evicted to
        make room, flagged ``evicted``. Never exceeds a bound. When given, ``refused`` also
        counts the dropped spans the sender hears of (``REPORTED_DROPS``), by reason."""
        now = self._clock()
        self._emitted.forget(now)
        evicted: list[CompletedTrace] = []
        dropped: Counter[str] = Counter()
        roomy = self._fits(spans)  # the usual case: no span of the batch needs room made
        for span in spans:
            reason = self._drop_reason(span)
            if reason is None and not roomy and not self._make_room(span, now, evicted):
                reason = "buffer_full"
            if reason is None:
                self._store(span, now)
            else:
                dropped[reason] += 1
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
        flagged ``shutdown``. Nothing more can arrive, so the wait for stragglers buys
        nothing; a run that ended just before a SIGTERM (any rolling restart) was judged
        incomplete, against the policy only, without its golden case or shadow source."""
        out = self.poll()
        now = self._clock()
        for trace in list(self._traces.values()):
            over = trace.anchored() or (trace.root_seen and not trace.awaits_after_root())
            out.append(self._emit(trace, now, None if over else "shutdown"))
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
        if trace is not None and self._over_the_cap(trace, span):
            reason = "trace_span_limit"
        elif span.size_bytes > self._limits.max_buffered_bytes:
            reason = "span_too_large"
        if reason is not None:
            self._flag_limited(span.trace_id, trace)
            if trace is not None:
                trace.dropped(span)
        return reason

    def _over_the_cap(self, trace: _Trace, span: SpanRecord) -> bool:
        """Whether ``trace`` is full for ``span``: it holds ``max_spans_per_trace`` spans and
        ``span`` does not enclose them, or ``ENCLOSING_SPANS`` more already (module
        docstring)."""
        held, cap = len(trace.spans), self._limits.max_spans_per_trace
        return held >= cap and (held >= cap + ENCLOSING_SPANS or not trace.encloses(span))

    def _flag_limited(self, trace_id: bytes, trace: _Trace | None) -> None:
        """Flag ``trace`` incomplete for a dropped span, or remember its id until it comes."""
        if trace is not None:
            trace.span_limited = True
            return
        self._limited[trace_id] = None
        if len(self._limited) > self._limits.max_traces:
            self._limited.popitem(last=False)

    def _fits(self, spans: Sequence[SpanRecord]) -> bool:
        """Whether the whole batch fits under every bound even if each span started a trace
        of its own: then no span of it can need an eviction."""
        lim, n = self._limits, len(spans)
        return (
            len(self._traces) + n <= lim.max_traces
            and self._spans + n <= lim.max_buffered_spans
            and self._bytes + sum(span.size_bytes for span in spans) <= lim.max_buffered_bytes
        )

    def _make_room(self, span: SpanRecord, now: int, evicted: list[CompletedTrace]) -> bool:
        """Evict the oldest other traces until ``span`` fits; false if it cannot. Under
        ``backpressure`` nothing is evicted: the operator chose to refuse rather than judge
        runs in flight early, and a request gets here only when ``has_room`` let it through
        as one that can never fit (or without asking), so what does not fit is dropped."""
        own = self._traces.get(span.trace_id)
        evicts = self._limits.overflow == "evict_oldest"
        while (bound := self._exceeded(own is None, span.size_bytes)) is not None:
            victim = self._oldest_other(span.trace_id) if evicts else None
            if victim is None:
                self._flag_limited(span.trace_id, own)
                if own is not None:
                    own.dropped(span)
                return False
            self._metrics.trace_evicted(bound)
            evicted.append(self._emit(victim, now, "evicted"))
        return True

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

    def _oldest_other(self, trace_id: bytes) -> _Trace | None:
        oldest = iter(self._traces.values())
        victim = next(oldest, None)
        if victim is not None and victim.trace_id == trace_id:
            victim = next(oldest, None)
        return victim

    def _store(self, span: SpanRecord, now: int) -> None:
        trace = self._traces.get(span.trace_id)
        if trace is None:
            trace = self._traces[span.trace_id] = _Trace(span.trace_id, now)
            if self._limited and span.trace_id in self._limited:
                del self._limited[span.trace_id]
                trace.span_limited = True
        trace.add(span, now)
        self._spans += 1
        self._bytes += span.size_bytes
        self._schedule(trace)

    def _schedule(self, trace: _Trace) -> None:
        """Keep one live heap entry per trace, no later than its due time. A later due time
        (more spans arrived) is picked up when the early entry pops; an earlier one needs a
        new entry, and the old one goes stale."""
        due = trace.due_ns(self._limits)
        if trace.scheduled_ns is None or due < trace.scheduled_ns:
            trace.scheduled_ns = due
            heapq.heappush(self._deadlines, (due, next(self._tiebreak), trace))

    def _check(self, trace: _Trace, now: int) -> CompletedTrace | None:
        lim = self._limits
        quiet = now - trace.last_ns
        if not trace.anchor_missing and quiet >= lim.completion_wait_ns:
            if trace.anchored():
                return self._emit(trace, now, None)
            trace.anchor_missing = True
            trace.awaiting_local = lim.local_parent_wait_ns > 0 and trace.anchored(local_gone=True)
        if trace.awaiting_local and quiet >= lim.local_parent_wait_ns:
            # The local parent never came (exported elsewhere, filtered out): the agent
            # anchors after all, as it would under a remote parent.
            return self._emit(trace, now, None)
        if (
            trace.root_seen
            and quiet >= lim.completion_wait_ns + lim.lost_parent_wait_ns
            and not trace.awaits_after_root()
        ):
            return self._emit(trace, now, None)  # a parent lost in export: the run is over
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
