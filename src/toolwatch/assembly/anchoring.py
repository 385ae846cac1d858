"""When a buffered trace is ready: what anchors it, and how long it waits for a parent.

``_Trace`` is the mutable state of one trace ``TraceBuffer`` (``assembly.buffer``) holds: its
spans, its agent and model spans, its root, and whether its anchor has arrived
(``anchored``) and when it next needs a look (``due_ns``); ``assembly.held_traces`` keeps
them, ``assembly.buffer`` checks and emits them. Compiled: every span passes through ``add``.

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
did arrived after the trace was evaluated, dropped as ``late``. As a root, it does not anchor
while a span of its service that ended after it (after each service's outermost agent that
ended first) waits for its local parent (``_Trace._agent_anchors``): a run it left running
in the background (an agent invoked by another service that answered, or handed off,
first), whose agent span is still to come; anchored at once, the trace was judged without
it. A local parent that never
comes (a second tracer provider exported it elsewhere, a Collector filtered it out) leaves the
trace to ``max_trace_age_ns``, or, where ``local_parent_wait_ns`` is set, is taken as gone
once the trace has been quiet that long: the agent anchors it then (only where a span waits
for a local parent, with a root or without: a trace held by a span rejected at ingest alone
waits the lost parent's wait, ``_Trace.anchored_if_local_gone``). Not by default: a live run
is quiet that long while one slow step (a reasoning model's call, a slow tool) runs, and it
would be cut in two, the rest of it dropped as ``late``.

Nor does a root anchor at the first quiet ``completion_wait_ns`` while a span of its service
ended after it, whatever that span's parent (``_Trace.ran_on``): the request answered, and a
run it left running in the background goes on, its spans exported in batches 5 s apart
(``OTEL_BSP_SCHEDULE_DELAY``), none waiting for a parent not held when they are the root's own
children (a loop on a plain model client in a task of its own): anchored at once, the trace
was judged between two batches, as its first part (a false ``MISSING_VERIFICATION_STEP``),
the rest dropped as ``late``. Such a trace is anchored by its root once quiet
``completion_wait_ns + lost_parent_wait_ns`` (``lost_parent_over``), as one that lost a parent
in export: the run's batch processor exports within that wait. Waiting loses only time, where
cutting loses the run's rest: every run left running in the background is judged
``lost_parent_wait_ns`` (5 s) later, a synchronous one (every span ended by its root's end)
still at ``completion_wait_ns``; a loop quiet longer than the two waits is cut then, and
``max_trace_age_ns`` bounds one that never stops. Until then an eviction or a drain takes the
run for one in flight (``victims._root_ended``). Only the root's own service is read: another
service's clock may be skewed against the root's, and its span, ended "after" the root, says
nothing of a run left running; a root of no ``service.name`` (``None``) is held by spans of
none. Of a trace of several roots (a gateway's span of no parent beside the request's), each
root's service is read against that root's end (``_Trace._root_ends``). Known limits (pinned
as ``xfail`` in test_assembly_wait_review6.py): ``ran_on`` sees only spans that arrived, so
a run whose first step ends after its root's export (the root sent alone, or with a
synchronous part only) is not held: the root is judged at the first quiet
``completion_wait_ns`` (as no agent run, or with that part), and the run's spans come
``late`` or, their local parent gone, wait ``max_trace_age_ns`` (holding every rooted trace
the two waits would be the fix, at a gateway's memory). And a service is not one clock: a
replica of the root's service with its clock ahead (a tool calling an endpoint of its own
service) makes a synchronous run look as if it ran on: judged ``lost_parent_wait_ns`` late,
and at a drain (or an eviction) ``shutdown`` (``evicted``), incomplete.

A span the buffer dropped for a limit (too large, no room, past the cap's enclosing spans) has
come: a span that names it as its parent waits for it no more, and the others wait as they
did, a run left running in the background for its agent span, as does what the dropped span
waited for; a dropped root anchors as a held one, and so does a dropped outermost agent span
(its ``Link`` keeps its end and service, what ``_Trace._agent_anchors`` reads: agent spans
carry big inputs and outputs, and one dropped too large held its trace, whose root is
another service's, to ``max_trace_age_ns``); the walk up from an agent span (or a model call)
passes through a dropped span as through a held one (its ``Link``: its role, its parent,
whether that parent is local): an agent whose local parent, a workflow span, was dropped too
large anchors its trace. A step dropped over the cap encloses nothing held, so it
is no parent, but what it waited for is waited for all the same, and the span it waits for
(its agent span) is one the cap takes (``_Trace.encloses``). So does a span dropped before any
span of its trace was held: what ``_Trace.came`` reads of it is kept (``assembly.limited``)
and replayed once the trace is. What a trace keeps of them (``_Trace.drops``), their links and
waits, the bytes that counts and its bounds (``DROPPED_IDS``), is ``assembly.dropped``'s
(moved from here: ``DroppedSpan``, ``Link``, ``dropped_span`` and the byte charges; what were
``_Trace.dropped_links``, ``dropped_waits``, ``_dropped_link`` and ``_awaits_undropped`` are
``DroppedSpans.links``, ``waits``, ``link`` and ``awaits``); past those bounds, or the room its
buffer has left, a dropped span is not known, as a rejected one. A span rejected at ingest
is not known (its trace id is all the decoder hands on): it may be the parent waited for, so
the root anchors the trace (whatever agent spans it holds: none says which run the span was of)
only once it has been quiet ``completion_wait_ns + lost_parent_wait_ns`` (``parent_lost``), as
it does where a parent was lost in export, and not at the next quiet ``completion_wait_ns``:
most rejected spans are a step, and a live run's batch processor exports within that wait,
where anchoring at once judged the run between two export batches and dropped its rest as
``late``. So does a trace with no root (it may be the span rejected: the request's server
span, another instrumentation's, is the span most often malformed): no outermost agent span,
nor what encloses a tool loop's model calls, anchors it before that wait, and then only one
that would, were the local parents its spans wait for gone (``_Trace.lost_parent_over``);
else it waits for ``max_trace_age_ns``. Read under a root only, a rejected root left its run
held ``max_trace_age_ns``, judged ``timed_out``, and an outermost agent span excused a
rejected step of a run it left running in the background.

A trace with no AGENT span (a loop on a plain model client: the ``openai`` client's own,
google-genai's automatic function calling) is anchored by the same walk up from its model
(LLM) calls of a tool loop, when its root is in the calling service: by the span that encloses
the calls (the loop's own, the request's server span), once it has arrived and its parent is
known to be remote: its flags say the parent is not local, and its sender is one that sets the
flags (a span of the trace, held or dropped for a limit, says the enclosing span is its local
parent). Older SDKs set none, and there the span above the model calls is as often a step of
an agent run whose AGENT span, ending last, has not come (Strands' event loop cycle, Vercel's
``ai.generateText``): anchoring on it would drop the agent span as ``late``. A chain that
leaves the buffer at the model call itself does not anchor either: a call is one step of its
run, never its end. Both are waited for as a local parent is (``local_parent_wait_ns``, else
``max_trace_age_ns``).

Only a call of a tool loop is walked from: one that requested tools (its requested calls, or
a finish reason naming them, which is kept without content capture) or ran them inside it (a
TOOL span is its child: google-genai's automatic function calling, whose span holds neither),
held or dropped for a limit (``dropped.requests_tools``, kept in its ``Link``: a loop's calls
carry its whole history, the spans most often dropped too large; walked from held calls only,
a loop whose tool-requesting call was dropped was held to ``max_trace_age_ns``, ``timed_out``).
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
"""

from __future__ import annotations

from toolwatch.assembly.dropped import (
    DROPPED_SPANS_BYTES,
    DroppedSpan,
    DroppedSpans,
    Link,
    dropped_span,
    requests_tools,
)
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.model import SpanRecord, SpanRole

__all__: list[str] = []


class _Trace:
    """The mutable state of one buffered trace."""

    __slots__ = (
        "agents",
        "anchor_missing",
        "awaiting_local",
        "drops",
        "ended_verdict",
        "first_ns",
        "last_end_ns",
        "last_ns",
        "lost_parent_waited",
        "models",
        "open_parents",
        "parent_lost",
        "root_end_ns",
        "root_seen",
        "root_service",
        "roots_held",
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
        # How many roots it holds (``_root_ends``: more than one, each is read; a span's
        # parent-less because its parent is not known, or a gateway's span of its own).
        self.roots_held = 0
        self.last_end_ns = 0  # when its span that ended last ended
        self.span_limited = False
        # A span of it that may have been a parent it waits for was not taken, and which is
        # not known (rejected at ingest; past ``DROPPED_IDS``): its root, or with none its
        # outermost agent, anchors it once quiet the lost parent's wait too, in the
        # background or not (``TraceBuffer._check``).
        self.parent_lost = False
        # What it keeps of its spans dropped for a limit (``assembly.dropped``: what the
        # anchor walk reads of them, what they waited for); None until one is (most traces).
        self.drops: DroppedSpans | None = None
        self.anchor_missing = False  # checked since the last arrival: no anchor yet
        # ... and, its root come, waited the lost parent's time with a span after the root
        # waiting for its local parent (a run left running in the background): its agent
        # span is to come, and the lost parent's deadline is no longer looked at. Without a
        # root, a span of it rejected: waited that time, and nothing anchors it yet, were
        # the local parents it waits for gone.
        self.lost_parent_waited = False
        # Whether its run has ended, as an eviction asks (``victims._ended``), since the last
        # arrival; None: not asked since.
        self.ended_verdict: bool | None = None
        # ... but one, were the local parents it waits for gone: anchored at local_parent_wait
        # (``anchored_if_local_gone``)
        self.awaiting_local = False
        self.scheduled_ns: int | None = None  # when of this trace's one live heap entry
        # Once full: the parent ids of its spans that it does not hold (``encloses``).
        self.open_parents: set[bytes | None] | None = None

    def add(self, span: SpanRecord, now: int) -> None:
        self.spans[span.span_id] = span
        self.size_bytes += span.size_bytes
        self.last_ns = now
        # As ``changed``, written out: this is per span.
        self.anchor_missing = self.awaiting_local = self.lost_parent_waited = False
        self.ended_verdict = None
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
        self.roots_held += 1
        if span.end_ns >= self.root_end_ns:
            self.root_end_ns, self.root_service = span.end_ns, span.service

    def encloses(self, span: SpanRecord) -> bool:
        """Whether ``span`` is a root, or the parent of a span this trace holds, or of one it
        dropped and still waits for (``DroppedSpans.waits``: a step dropped over the cap, its
        agent span to come; dropped too, the trace would wait for it for ever). Asked of a
        full trace only: the first time, it notes those parents that it does not hold
        (O(spans), once; a few ids, its open ancestors), kept up to date by ``add`` and
        ``came``."""
        if span.parent_span_id is None:
            return True
        if self.open_parents is None:
            held = self.spans
            self.open_parents = {s.parent_span_id for s in held.values()}
            if self.drops is not None:
                self.open_parents.update(self.drops.waited_for())
            self.open_parents.difference_update(held)
        return span.span_id in self.open_parents

    def changed(self) -> None:
        """What anchors the trace may have changed (a span arrived, was dropped or was
        rejected): its checks start again from the quiet period, and what an eviction
        asked of it is asked again."""
        self.anchor_missing = self.awaiting_local = self.lost_parent_waited = False
        self.ended_verdict = None

    def dropped(self, span: SpanRecord, parent: bool, room: int) -> bool:
        """A span of this trace was dropped for a limit (``TraceBuffer._flag_limited`` flags
        the trace): it ``came``. ``parent``: it may be a parent a span of the trace, held or
        still to come, waits for (else a step dropped over the cap, which encloses nothing:
        only its wait, and a root, are noted). ``room``: the bytes the buffer has left.
        Returns whether what anchors the trace changed."""
        return self.came(dropped_span(span), room, parent)

    def came(self, span: DroppedSpan, room: int, parent: bool = True) -> bool:
        """A span of this trace dropped for a limit, once the trace is held (``dropped``) or
        before (replayed as the trace's first span is stored: ``HeldTraces._store``). A root,
        though not held, has arrived, and anchors the trace all the same. Such a span came:
        no span waits for it any more (``_awaits_local``), what the anchor walk reads of it
        (its id among them) is kept in ``drops`` (``assembly.dropped``: its ``Link``, up to
        ``DROPPED_IDS`` of them; ``_outermost`` passes through it); where its flags say its
        parent is local and the trace does not hold it, what it waited for is kept there too
        (one wait a parent and service, ``DROPPED_IDS`` at most). ``parent`` false (a step
        dropped over the cap: no parent): only its wait is kept. What they hold is counted in
        ``size_bytes`` (``DroppedSpans.keep``, and ``DROPPED_SPANS_BYTES`` for the first),
        up to ``room`` bytes. Past ``DROPPED_IDS``, or ``room``, it is as unknown as a
        rejected span (``parent_lost``). A retry of one kept changes nothing.

        Returns whether a held span names it as its parent, or a dropped one waited for it,
        or it waits (so what anchors the trace changed): O(spans), asked once per such drop
        (drops are rare, and a trace remembers ``DROPPED_IDS`` at most), never per span
        taken."""
        span_id, parent_id, end_ns, service, local, _, _ = span
        if parent_id is None:
            self.root_seen = True
            if end_ns >= self.root_end_ns:
                self.root_end_ns, self.root_service = end_ns, service
        drops = self.drops
        if parent and drops is not None and drops.link(span_id) is not None:
            return False  # known: a held span naming it came since, and restarted the checks
        wait = local and parent_id is not None and parent_id not in self.spans
        if not parent and not wait:
            return False  # nothing to keep
        own = 0  # the DroppedSpans itself, for the first
        if drops is None:
            drops, own = DroppedSpans(), DROPPED_SPANS_BYTES
        cost, waited = drops.keep(span, parent, wait, room - own)
        if cost < 0:
            self.parent_lost = True
            return False
        self.drops = drops
        self.size_bytes += own + cost
        if wait:  # so does the trace wait for its parent
            if self.open_parents is not None:  # a full trace: what encloses its spans, and this
                self.open_parents.add(parent_id)
            self.last_end_ns = max(self.last_end_ns, end_ns)
        if not parent:
            return waited
        if self.open_parents is not None:  # a full trace: its open parents are kept
            return wait or span_id in self.open_parents
        return (  # ... or a dropped span waited for it (``DroppedSpans.waits``; full: open_parents)
            wait
            or any(held.parent_span_id == span_id for held in self.spans.values())
            or any(parent == span_id for parent, _, _ in drops.waits or ())
        )

    def due_ns(self, limits: AssemblyLimits) -> int:
        """The next time this trace needs a look: quiet period over, or too old."""
        too_old = self.first_ns + limits.max_trace_age_ns
        due = too_old
        if self.awaiting_local:
            due = min(due, self.last_ns + limits.local_parent_wait_ns)
        lost_wait = self.root_seen or self.parent_lost  # ``_check`` looks at the lost parent's
        if self.anchor_missing and lost_wait and not self.lost_parent_waited:
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
            # A span rejected at ingest may be one a run left running in the background
            # waits for (``parent_lost``): no span held says which run it was of, so the root
            # anchors such a trace only once quiet the lost parent's wait (``TraceBuffer._check``).
            # So does a span of the root's service that ended after it, whatever its parent:
            # a run left running in the background (``ran_on``).
            return local_gone or (
                not self.parent_lost and not self._awaits_local() and not self.ran_on()
            )
        if self.parent_lost and not local_gone:
            # Nor does what anchors it without a root: the rejected span may be the local
            # parent its outermost agent waits for (a rejected root), or a step of a run left
            # running in the background; judged once quiet the lost parent's wait.
            return False
        settled: dict[bytes, bool] = {}
        # Agent spans dropped for a limit came too (their links keep their end and service).
        dropped = self.drops.agents() if self.drops is not None else []
        if self.agents or dropped:
            return self._agent_anchors(dropped, settled, local_gone)
        return self._model_anchors(settled, local_gone)

    def _model_anchors(self, settled: dict[bytes, bool], local_gone: bool) -> bool:
        """Whether, in a trace of no agent span and no root, what encloses a tool loop's
        model call anchors it (module docstring): walked from each model call, held or
        dropped for a limit (its ``Link`` keeps whether it requested tools: a loop's calls
        carry its whole history, the spans most often dropped too large), that requested
        tools or ran one (a TOOL span, held or dropped, names it as its parent)."""
        dropped = self.drops.models() if self.drops is not None else []
        if not self.models and not dropped:
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
        if self.drops is not None:  # a span dropped for a limit says so all the same
            said.update(self.drops.said_local())
            ran_tools.update(self.drops.tools_ran_in())
        return any(
            self._outermost(model, settled, local_gone, said)
            for model in self.models
            if model.span_id in ran_tools or requests_tools(model)
        ) or any(
            self._outermost(link, settled, local_gone, said)
            for link in dropped
            if link.span_id in ran_tools or link.requests_tools
        )

    def anchored_if_local_gone(self) -> bool:
        """Whether, unanchored, the trace would be anchored were the local parents its spans
        wait for gone: what ``local_parent_wait_ns`` cuts (``TraceBuffer._check``). Under a
        root, only where a span waits for a local parent (``_awaits_local``): a trace held by
        ``ran_on`` or ``parent_lost`` alone waits for none, and waits
        ``completion_wait_ns + lost_parent_wait_ns`` however short ``local_parent_wait_ns``
        is (read as ``anchored(local_gone=True)``, always true under a root, a run left
        running in the background was cut at ``local_parent_wait_ns``, its next batch
        ``late``; review-wait6 defect 2). Without a root, so too: where a span waits for a
        local parent, and an outermost agent span would anchor it then (read as
        ``anchored(local_gone=True)`` alone, which sets ``parent_lost`` aside, a rootless
        trace held by a span rejected was cut at ``local_parent_wait_ns``; review-wait7
        defect 7)."""
        if self.root_seen:
            return self._awaits_local()
        return self._awaits_local() and self.anchored(local_gone=True)

    def _agent_anchors(
        self, dropped: list[Link], settled: dict[bytes, bool], local_gone: bool
    ) -> bool:
        """Whether an outermost agent span anchors this trace of no root: one has arrived (held,
        or ``dropped`` for a limit) and, unless ``local_gone``, no span that ended after an
        outermost agent span of its service (each service's that ended first) waits for its
        local parent, as ``awaits_after_root`` asks of a root: a run it left running in the
        background (an agent invoked by another service that answered, or handed off, first),
        whose agent span is still to come. Each service's, and its first: read at the agent
        that ended last alone, another service's agent invoked after it (or a second turn of
        its own, ended after the run's first steps) excused the run, judged at the first quiet
        ``completion_wait``, the rest of it dropped as ``late``. O(spans) a service with an
        outermost agent span, once a check."""
        first: dict[str | None, SpanRecord | Link] = {}  # a service's that ended first
        for agent in self.agents:
            was = first.get(agent.service)
            earlier = was is None or agent.end_ns < was.end_ns
            if earlier and self._outermost(agent, settled, local_gone):
                first[agent.service] = agent
        for link in dropped:
            was = first.get(link.service)
            earlier = was is None or link.end_ns < was.end_ns
            if earlier and self._outermost(link, settled, local_gone):
                first[link.service] = link
        if not first:
            return False
        return local_gone or not any(
            self._awaits_after(agent.end_ns, agent.service) for agent in first.values()
        )

    def _awaits_local(self) -> bool:
        """Whether a span says its parent is local (the same process's, still running: it
        ends after its children, and is exported after them) and that parent has not come.
        A root usually ends last, but not that of a run a request handler left running (a
        task of its own, a worker thread: the response went out, its server span ended and
        was exported first): anchored by it, the trace was judged at the first quiet
        ``completion_wait`` between two of the run's export batches, as the calls exported
        so far, and the rest was dropped as ``late``. A parent dropped for a limit (too
        large, no room, past the cap's enclosing spans: ``drops``) came: it is not
        waited for. A parent that never comes is waited for ``lost_parent_wait_ns`` more,
        unless a span ended after the root (``awaits_after_root``), or a span of the trace
        was rejected at ingest (``parent_lost``: which one is not known, and may be that
        parent; a live run's batch processor exports within that wait, so a run left
        running in the background is not cut in two by a rejected step)."""
        if self.drops is not None:
            return self.drops.awaits(self.spans, None, None)
        held = self.spans
        return any(span.parent_local and span.parent_span_id not in held for span in held.values())

    def lost_parent_over(self) -> bool:
        """Whether its run is over, quiet ``completion_wait_ns + lost_parent_wait_ns``
        (``TraceBuffer._check``), a parent lost in export or maybe rejected at ingest
        (``parent_lost``). Its root came: a span was rejected (a run left running in the
        background exports a span within the wait), or none ended after the root waiting
        for its local parent (those of its service that ran on after it, ``ran_on``, waited
        this long for the run's next batch). No root (rejected, or another service's), a
        span rejected: what would anchor it were the local parents it waits for gone (the
        rejected span may be the one) has come."""
        if self.root_seen:
            return self.parent_lost or not self.awaits_after_root()
        return self.parent_lost and self.anchored(local_gone=True)

    def ran_on(self) -> bool:
        """Whether a span of the root's service ended after the root, whatever its parent
        (held, lost, or the root itself): the request answered, its server span ended and
        was exported, and a run it left running in the background (a task of its own, a
        worker thread) went on writing spans, exported in batches ``OTEL_BSP_SCHEDULE_DELAY``
        (5 s) apart. Its root anchors the trace only once it is quiet
        ``completion_wait_ns + lost_parent_wait_ns`` (``lost_parent_over``), not at the first
        quiet ``completion_wait_ns``, between two of those batches: the rest was dropped as
        ``late``, and the run judged as its first half. A synchronous run (every span ended
        by its root's end) is not held. Only the root's own service is read (its clock is
        the root's: another's may be skewed), each root's where it holds several
        (``_root_ends``), ``None`` as a name like any (a process that
        sets no ``service.name`` sets it on none of its spans); a span dropped for a limit
        counts where ``awaits_after_root`` reads it. O(spans), only when a span ended after
        the root (``last_end_ns``): asked once per check, never per span taken."""
        if not self.root_seen or (self.last_end_ns <= self.root_end_ns and self.roots_held < 2):
            return False
        ends = self._root_ends()
        if any(
            span.service in ends and span.end_ns > ends[span.service]
            for span in self.spans.values()
        ):
            return True
        return self.drops is not None and self.awaits_after_root()

    def _root_ends(self) -> dict[str | None, int]:
        """Each root's service, and the end of its root (of several of one service, the
        earliest): what ``ran_on`` and ``awaits_after_root`` read. The latest root's
        (``root_end_ns``, ``root_service``; a root dropped for a limit's too), and, where
        more than one is held, every held root's: a trace may hold two (a gateway's span of
        no parent beside the request's root, its clock ahead), and read at the one that
        ended last only, a run the other left running was not seen, judged at the first quiet
        ``completion_wait_ns``, its rest ``late`` (review-wait6 defect 3). Not kept: read
        from the spans held (O(spans), only where more than one root is held), so nothing
        grows with the roots; a dropped root that ended before another is not read (only the
        latest root's end and service are kept of one)."""
        ends: dict[str | None, int] = {self.root_service: self.root_end_ns}
        if self.roots_held < 2:
            return ends
        for span in self.spans.values():
            if span.parent_span_id is None and span.end_ns < ends.get(
                span.service, span.end_ns + 1
            ):
                ends[span.service] = span.end_ns
        return ends

    def awaits_after_root(self) -> bool:
        """Whether a span of the root's service that ended after the root (of each root's,
        after that root: ``_root_ends``) waits for its local parent: a run left running in
        the background, whose agent span is still to come, however long it runs
        (``local_parent_wait``, else ``max_trace_age``). A span
        that ended before the root (the run's first steps, or a sync request that lost the
        span's parent in export), or another service's (its clock is not the root's), holds
        the trace ``lost_parent_wait_ns`` more: a process's batch processor exports spans in
        the order they ended, so a parent still running is heard of by then."""
        return any(self._awaits_after(end, service) for service, end in self._root_ends().items())

    def _awaits_after(self, end_ns: int, service: str | None) -> bool:
        """Whether a span of ``service`` that ended after ``end_ns`` waits for its local
        parent: ``awaits_after_root`` (the root's end and service), or ``_agent_anchors``
        (an outermost agent span's)."""
        if self.last_end_ns <= end_ns:
            return False
        if self.drops is not None:
            return self.drops.awaits(self.spans, end_ns, service)
        held = self.spans
        return any(
            span.end_ns > end_ns
            and span.service == service
            and span.parent_local
            and span.parent_span_id not in held
            for span in held.values()
        )

    def _outermost(
        self,
        start: SpanRecord | Link,
        settled: dict[bytes, bool],
        local_gone: bool,
        said: set[bytes | None] | None = None,
    ) -> bool:
        """Whether the chain from ``start``'s parent up holds no AGENT or TOOL span and leaves
        the buffer for good (``said``: from a model call, see ``_verdict``); records that
        verdict in ``settled`` for each span it passed. A span dropped for a limit came: the
        walk passes through it as through a held one (``DroppedSpans.link``)."""
        passed: dict[bytes, None] = {}  # the walk so far, in order
        last: SpanRecord | Link = start  # the span whose parent is next
        parent = start.parent_span_id
        while parent is not None and parent not in settled and parent not in passed:
            ancestor: SpanRecord | Link | None = self.spans.get(parent)
            if ancestor is None and self.drops is not None:
                ancestor = self.drops.link(parent)
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
        last: SpanRecord | Link,
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
        if stop in self.spans or (self.drops is not None and self.drops.link(stop) is not None):
            return False  # an AGENT or TOOL span, held or dropped: the run is nested in another
        if said is not None:
            # Not the model call itself, and flags that say remote from a sender that sets
            # them: unsaid, the span may be a step of an agent run not all here yet.
            remote = last.role is not SpanRole.LLM and not last.parent_local
            return local_gone or (remote and last.span_id in said)
        # Not arrived: remote (another service's), or said nothing; a parent the span says
        # is local is the same process's and still running (a handoff's workflow span).
        return local_gone or not last.parent_local
