"""Timeline: a completed trace's spans become one ToolTrace per agent run (DESIGN §5).

Runs. Each outermost AGENT span (one not nested in another AGENT span) is a run; every span
below it belongs to it, including nested agents (agent-as-tool: TOOL → AGENT → TOOL), whose
calls carry the outer call's id as ``parent_call_id``. Spans outside every agent form one
more run, the *residual* run, when the trace has no agent span at all or when they hold calls
(a tool called outside any agent is never lost). The residual run's span is the root if it
has one, else its only tree top; when the root is missing and several fragments remain they
are parts of one run whose root was lost, so they form one run with a synthetic root
(``run_span_id`` ``None``, times the min/max of its spans).

Orphaned second records. A TOOL span whose parent is missing from the trace, with nothing
below it in a run, that lies in time within a TOOL span of a run of the same tool
(normalized names, no other call id) is that call's second record, placed below it as if its
parent had come (``_place_second_records``): an instrumented MCP server exports its
``mcp.server`` > ``<tool>.tool`` with a batch processor of its own, and a batch boundary
between the two sends the parent after the trace was evaluated (dropped ``late``). It is a
span of the call's run, merged into the call as any second record is
(``records._second_records``), never a residual run re-making a call the run recorded. An
orphaned TOOL span that matches no call by name and time stays outside every agent: a call
of the residual run, evaluated.

Guardrails. An agent that a guardrail runs (an AGENT span below a GUARDRAIL span of the run,
no agent or tool between: the OpenAI Agents SDK's guardrail function calling ``Runner.run`` on
a checker agent) is a run of its own, without reference keys (the canary case id or shadow
pair key on the resource is the checked run's), as OpenLLMetry, which writes no guardrail
span and hangs that agent off the workflow root, shows it: it checks the run, it is not part
of it. Its model calls end after the run's own (an output guardrail runs on the final
output; an input guardrail beside the first model call), so taken as the run's they were its
last output, its verdict the run's final text, and a refusal under a guardrail read as an
answer. Nor is a model call a guardrail makes itself the run's output: one below a GUARDRAIL
span (``_guardrail_calls``), or, where no guardrail span is written (OpenLLMetry), the
client's span alone beside an agent's turns that are each recorded twice, the framework's
span with the client's inside (``_calls_beside_double_records``), or under an agent whose
instrumentation records each of its turns and recorded none (``_calls_of_no_turn``: a
blocking input guardrail that tripped; the run refused).

Workflow spans. An AGENT span that does no work of its own (no LLM or TOOL span has it as
nearest agent) but contains other AGENT spans is a workflow, not an agent run: OpenInference
and the contrib openai-agents-v2 instrumentation map the OpenAI Agents SDK *trace* to such a
root (``Agent workflow``, OpenInference kind AGENT / contrib SERVER ``invoke_agent``). It is
treated as a plain span, so the agents inside it are the runs, as with OpenLLMetry, whose
workflow root is not an agent span.

Handoffs. The OpenAI Agents SDK ends an agent's span when it hands the conversation off and
starts the next agent's as its sibling: the agents of one request are sibling runs. A run
that hands off (the call of ``transfer_to_<agent>``, or a handoff span: every exporter
writes one, most naming the agent) and the sibling run of the agent it names, started once
it ended, are one run, led by the first agent, its ``agents`` naming each
(``_joined_at_handoffs``): a refund the second agent makes is verified by the first agent's
lookup, as in one agent. A handoff span that names no one (OpenLLMetry's) hands off to a
sibling started at once (within 10 ms) when no call names one of the siblings (a renamed
handoff tool). Only the run's own agents hand off: a handoff inside an agent used as a tool
is that tool call's.

Lost nesting. OpenLLMetry's openai-agents instrumentation (0.62) parents the agent that
``as_tool()`` runs under the workflow root, a sibling of the calling agent, not under the
tool span; only time says the tool ran it. An AGENT span with no TOOL ancestor is therefore
adopted by a TOOL span when that tool belongs to another agent, has no AGENT span below it,
lies below the agent's own parent (the agent hangs from a common ancestor, not from
elsewhere) and contains the agent's whole interval; the innermost such tool wins. The tool is
then the agent's parent for run membership and ``parent_call_id``. A handoff never matches:
the next agent starts after the handing-off agent's tools have ended. What no span can tell
apart: two agents run concurrently under one orchestrator, one wholly inside a tool call of
the other, read as agent-as-tool.

Split nesting. OpenLLMetry's LangChain instrumentation (0.62) writes the agent a tool runs as
an empty AGENT span beside the span holding its work, both children of the TOOL span
(``execute_tool refund_desk`` > [``invoke_agent refund_desk_agent``, ``execute_task
refund_desk_agent``]); only time says the agent did that work. So a span that is no AGENT,
directly under a TOOL span, is adopted by an AGENT sibling (directly under the same TOOL span)
whose interval contains its own; of several, the innermost. The agent is then the work's
parent: the calls below it are that agent's, as under every other producer, not the outer
agent's. Only traces with an AGENT span directly under a TOOL span are checked.

Per run: calls come from ``toolwatch.assembly.calls``; ``error_count`` counts failed tool
calls only (an LLM or agent span in error is not a tool-call failure); ``final_text`` is the
text of the run's own last model output that requested no tool, else the run span's output
text; a refusal is a ``refusal`` on any LLM or AGENT span of the run or a refusal finish
reason, the earliest one giving the reason. The run's own outputs include those of an agent
it transferred to inside its span (ADK ``transfer_to_agent``: no TOOL span between), not
those of an agent it used as a tool (below a TOOL span): they are that tool's result.

Pure: the same set of spans gives the same ToolTraces whatever their order.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Final

from toolwatch.assembly.buffer import CompletedTrace
from toolwatch.assembly.calls import CallSite, append_to, build_calls
from toolwatch.conventions import crewai, guardrails_ai, openllmetry
from toolwatch.conventions.attrs import (
    REFUSAL_REASONS,
    TRANSFER_TOOL_PREFIX,
    agent_in_tool_style,
    is_transfer,
)
from toolwatch.conventions.fields import GUARD_RAISED
from toolwatch.model import CallStatus, SpanRecord, SpanRole, ToolCall, ToolTrace
from toolwatch.names import NameNormalizer

__all__ = ["REFUSAL_FINISH_REASONS", "build_tool_traces"]

#: Finish reasons that mean the model refused or was filtered (OpenAI ``content_filter``,
#: Vercel ``content-filter``, Gemini ``safety`` and its other blocks, Bedrock and Strands
#: ``content_filtered`` and ``guardrail_intervened``; CONVENTIONS §5, §8): the conventions'
#: ``REFUSAL_REASONS``. Compared case-folded.
REFUSAL_FINISH_REASONS: Final = REFUSAL_REASONS

# Finish reasons seen, and whether each means a refusal: ``str.casefold`` is a method call
# in compiled code, four times the cost of this lookup, on every model span. The reasons are
# a small vocabulary of short words; past these bounds (hostile input: many reasons, or long
# ones, which would stay held for the life of the process), they are folded each time.
_REFUSES: Final[dict[str, bool]] = {}
_MAX_REASONS: Final = 1024
_MAX_REASON_LENGTH: Final = 64

#: Bound on the agent-in-tool containment checks of one trace, and on its checks of work
#: beside an agent under a tool (see ``_adoptions``, ``_split_work``).
_MAX_ADOPTION_CHECKS = 25_000


@dataclass(slots=True, init=False)
class _Frame:
    """What a span hands down to its children while walking the tree. One is built per span
    of every trace: its constructor is written out, like ``CallSite``'s."""

    run: bytes | None  # outermost AGENT span id; None outside every agent
    agent: SpanRecord | None  # nearest AGENT at or above the children
    tool: SpanRecord | None  # nearest TOOL at or above the children, within the run
    parent: bytes | None  # the children's call parent (wrappers skipped)
    guarded: bool  # a GUARDRAIL at or above the children, no AGENT between: one starts a run

    def __init__(
        self,
        run: bytes | None,
        agent: SpanRecord | None,
        tool: SpanRecord | None,
        parent: bytes | None,
        guarded: bool = False,
    ) -> None:
        self.run = run
        self.agent = agent
        self.tool = tool
        self.parent = parent
        self.guarded = guarded


@dataclass(frozen=True, slots=True, init=False)
class _Run:
    """One run of a trace. Its constructor is written out, as ``ToolTrace``'s is."""

    span: SpanRecord | None  # the run span; None for a synthetic root
    agent_id: bytes | None  # the run's AGENT span id; None for the residual run
    spans: tuple[SpanRecord, ...]  # sorted by (start, span id)
    end_ns: int  # the run span's end, or the last end of the runs it handed off to

    def __init__(
        self,
        span: SpanRecord | None,
        agent_id: bytes | None,
        spans: tuple[SpanRecord, ...],
        end_ns: int | None = None,
    ) -> None:
        object.__setattr__(self, "span", span)
        object.__setattr__(self, "agent_id", agent_id)
        object.__setattr__(self, "spans", spans)
        if end_ns is None:
            end_ns = span.end_ns if span is not None else max(s.end_ns for s in spans)
        object.__setattr__(self, "end_ns", end_ns)


def build_tool_traces(trace: CompletedTrace, normalize: NameNormalizer) -> list[ToolTrace]:
    """One ToolTrace per run of ``trace``, ordered by start time then run span id."""
    by_id = trace.by_id  # the buffer's, when it made the trace
    if by_id is None:
        by_id = {s.span_id: s for s in trace.spans}  # a span sent twice counts once
    spans = _in_time_order(list(by_id.values()))
    recorded = _Tree(spans, by_id, {})
    adopted = _adoptions(spans, recorded, by_id)
    tree = _Tree(spans, by_id, adopted) if adopted else recorded
    workflows = _workflows(spans, tree)
    sites = _place(spans, tree, workflows, by_id)
    if len(tree.tops) > 1:  # a fragment whose parent is missing: maybe a call's second record
        _place_second_records(spans, tree, workflows, sites, by_id, normalize=normalize)
    runs = _runs(spans, by_id, sites)
    if len(runs) > 1:
        runs = _joined_at_handoffs(runs, sites)
    above = _above_runs(runs, by_id, sites)
    built = [
        _tool_trace(trace, run, sites, normalize, above[i], by_id=by_id)
        for i, run in enumerate(runs)
    ]
    if len(built) < 2:
        return built
    return sorted(built, key=lambda t: (t.start_ns, t.run_span_id or ""))


def _in_time_order(spans: list[SpanRecord]) -> list[SpanRecord]:
    """``spans`` by (start, span id). Sorted by the start alone, then each run of equal
    starts by span id: an int key is one comparison and no tuple per span (a tuple key cost
    a ninth of the timeline's instructions), and equal starts are rare but for clocks that
    tick in milliseconds."""
    spans.sort(key=_start)
    first = 0
    for i in range(1, len(spans) + 1):
        if i < len(spans) and spans[i].start_ns == spans[first].start_ns:
            continue
        if i - first == 2:  # two spans started together, the usual tie: no sort call
            if spans[first + 1].span_id < spans[first].span_id:
                spans[first], spans[first + 1] = spans[first + 1], spans[first]
        elif i - first > 2:
            spans[first:i] = sorted(spans[first:i], key=_span_id)
        first = i
    return spans


def _start(span: SpanRecord) -> int:
    return span.start_ns


def _span_id(span: SpanRecord) -> bytes:
    return span.span_id


def _place(
    spans: list[SpanRecord],
    tree: _Tree,
    workflows: frozenset[bytes],
    by_id: dict[bytes, SpanRecord],
) -> dict[bytes, CallSite]:
    """Walk every tree top-down: each span's call site, with the run it belongs to."""
    sites: dict[bytes, CallSite] = {}
    for top in tree.tops:
        _walk_placing(top, tree, workflows, sites, by_id)
    for span in tree.unreached(spans, sites):  # each walk places more: check them all again
        if span.span_id not in sites:
            _walk_placing(span, tree, workflows, sites, by_id)
    return sites


def _walk_placing(
    top: SpanRecord,
    tree: _Tree,
    workflows: frozenset[bytes],
    sites: dict[bytes, CallSite],
    by_id: dict[bytes, SpanRecord],
    *,
    frame: _Frame | None = None,
) -> None:
    """Place ``top`` (given ``frame``, else as a tree top) and every span below it not
    placed yet."""
    if frame is None:
        frame = _Frame(None, None, None, top.parent_span_id)
    # Two stacks, of spans and of the frames they get: no (span, frame) tuple per span.
    stack, frames = [top], [frame]
    while stack:
        span, frame = stack.pop(), frames.pop()
        if span.span_id in sites:
            continue
        kids = tree.children.get(span.span_id)
        if kids is None and span.role is not SpanRole.AGENT:
            # A leaf hands down nothing and starts no run.
            sites[span.span_id] = CallSite(frame.agent, frame.tool, frame.parent, frame.run)
            continue
        inner = _descend(span, frame, workflows, by_id)
        sites[span.span_id] = CallSite(frame.agent, frame.tool, frame.parent, inner.run)
        for child in kids if kids is not None else _LEAF:
            stack.append(child)
            frames.append(inner)


_LEAF: Final[list[SpanRecord]] = []  # the children of a span that has none; never mutated


def _place_second_records(
    spans: list[SpanRecord],
    tree: _Tree,
    workflows: frozenset[bytes],
    sites: dict[bytes, CallSite],
    by_id: dict[bytes, SpanRecord],
    *,
    normalize: NameNormalizer,
) -> None:
    """Place below its call each orphaned second record of a call: a TOOL span whose parent
    is missing from the trace (not a root), outside every run with all the spans below it,
    that lies in time within a TOOL span of a run of the same tool (normalized names; no
    other call id). An instrumented MCP server's record of a call (``mcp.server`` >
    ``<tool>.tool``, inside the client's record) is exported by the server's own batch
    processor: when a batch boundary falls between its tool span and its ``mcp.server``,
    which comes after the trace was evaluated (dropped ``late``), the tool span is
    orphaned. Placed as if its parent had come (the innermost such TOOL span its parent,
    ties to the lowest span id), it is that call's second record (``records._second_records``)
    and a span of its run, not a run of its own making a call the run already recorded. An
    orphan that matches no call by name and time is left where it was: a call of the
    residual run, evaluated. Only tree tops are looked at until one is such a TOOL span."""
    orphans = [
        top
        for top in tree.tops
        if top.role is SpanRole.TOOL
        and top.tool_name is not None
        and top.parent_span_id is not None
        and top.parent_span_id not in by_id
    ]
    if not orphans:
        return
    placed: dict[str, list[SpanRecord]] = {}  # normalized tool name -> TOOL spans in a run
    for span in spans:
        if (
            span.role is SpanRole.TOOL
            and span.tool_name is not None
            and sites[span.span_id].run is not None
        ):
            append_to(placed, normalize(span.tool_name), span)
    if not placed:
        return
    for orphan in orphans:
        host = _host_call(orphan, placed.get(normalize(orphan.tool_name)))
        if host is None:
            continue
        below = _subtree(orphan, tree)
        if any(sites[span.span_id].run is not None for span in below):
            continue  # an agent below it runs a run of its own: not a mere record
        for span in below:
            del sites[span.span_id]
        site = sites[host.span_id]
        # The frame a TOOL span hands its children (``_descend``): a TOOL span is no agent,
        # no wrapper, and guards nothing.
        frame = _Frame(site.run, site.agent, host, host.span_id)
        _walk_placing(orphan, tree, workflows, sites, by_id, frame=frame)


def _host_call(record: SpanRecord, tools: list[SpanRecord] | None) -> SpanRecord | None:
    """The innermost of ``tools`` whose interval holds ``record``'s and whose call id, if
    both have one, is ``record``'s; ties to the lowest span id."""
    best: SpanRecord | None = None
    for tool in tools or ():
        if (
            tool.start_ns <= record.start_ns
            and record.end_ns <= tool.end_ns
            and (record.call_id is None or tool.call_id in (None, record.call_id))
            and (
                best is None
                or (tool.end_ns - tool.start_ns, -tool.start_ns, tool.span_id)
                < (best.end_ns - best.start_ns, -best.start_ns, best.span_id)
            )
        ):
            best = tool
    return best


def _subtree(top: SpanRecord, tree: _Tree) -> list[SpanRecord]:
    """``top`` and every span below it."""
    found: list[SpanRecord] = []
    seen: set[bytes] = set()
    stack = [top]
    while stack:
        span = stack.pop()
        if span.span_id not in seen:
            seen.add(span.span_id)
            found.append(span)
            stack.extend(tree.of(span.span_id))
    return found


class _Tree:
    """The spans' tree: ``children`` per span id, with adopted agents under their tool and
    adopted work under its agent (``_adoptions``), for the spans that have any (a list per
    span, most of them empty, cost a fifteenth of the timeline's instructions), and the
    ``tops``, the spans that are nobody's child (no parent, or one not in the trace). Spans
    in a parent cycle are neither: they are walked from themselves."""

    __slots__ = ("children", "tops")

    def __init__(
        self, spans: list[SpanRecord], by_id: dict[bytes, SpanRecord], adopted: dict[bytes, bytes]
    ) -> None:
        self.children: dict[bytes, list[SpanRecord]] = {}
        self.tops: list[SpanRecord] = []
        for s in spans:
            parent = adopted.get(s.span_id, s.parent_span_id) if adopted else s.parent_span_id
            if parent is not None and parent in by_id:
                append_to(self.children, parent, s)
            else:
                self.tops.append(s)

    def unreached(self, spans: list[SpanRecord], reached: Collection[bytes]) -> list[SpanRecord]:
        """The ``spans`` the walks from the tops left out of ``reached``, in order: those in a
        parent cycle, where no top leads (none, usually: no pass over the spans then)."""
        if len(reached) == len(spans):
            return []
        return [span for span in spans if span.span_id not in reached]

    def of(self, span_id: bytes) -> list[SpanRecord]:
        """The children of ``span_id`` (read only)."""
        kids = self.children.get(span_id)
        return kids if kids is not None else _LEAF


class _Shape:
    """The tree as recorded: depth-first entry and exit ticks, so that ``y`` is below ``x``
    iff ``enter[x] < enter[y] < leave[x]``, and the spans with a TOOL or AGENT above them.
    Built in one pass; spans in a parent cycle are walked from themselves."""

    __slots__ = ("agent_ticks", "enter", "leave", "under_agent", "under_tool")

    def __init__(self, spans: list[SpanRecord], tree: _Tree) -> None:
        self.enter: dict[bytes, int] = {}
        self.leave: dict[bytes, int] = {}
        self.under_tool: set[bytes] = set()
        self.under_agent: set[bytes] = set()
        for top in [*tree.tops, *tree.unreached(spans, self.enter)]:
            self._walk(top, tree)  # skips what an earlier walk entered
        ticks = (self.enter[s.span_id] for s in spans if s.role is SpanRole.AGENT)
        self.agent_ticks = sorted(ticks)

    def _walk(self, top: SpanRecord, tree: _Tree) -> None:
        stack: list[tuple[SpanRecord, bool, bool, bool]] = [(top, False, False, False)]
        while stack:
            span, leaving, tool_above, agent_above = stack.pop()
            if leaving:
                self.leave[span.span_id] = len(self.enter)
                continue
            if span.span_id in self.enter:
                continue
            self.enter[span.span_id] = len(self.enter)
            if tool_above:
                self.under_tool.add(span.span_id)
            if agent_above:
                self.under_agent.add(span.span_id)
            stack.append((span, True, tool_above, agent_above))
            tool_below = tool_above or span.role is SpanRole.TOOL
            agent_below = agent_above or span.role is SpanRole.AGENT
            stack.extend((c, False, tool_below, agent_below) for c in tree.of(span.span_id))

    def below(self, span_id: bytes, ancestor: bytes | None) -> bool:
        """Whether ``span_id`` lies strictly below ``ancestor``."""
        if ancestor is None or ancestor not in self.enter:
            return False
        return self.enter[ancestor] < self.enter[span_id] < self.leave[ancestor]

    def holds_agent(self, span_id: bytes) -> bool:
        """Whether an AGENT span lies strictly below ``span_id``."""
        first = bisect.bisect_right(self.agent_ticks, self.enter[span_id])
        return first < len(self.agent_ticks) and self.agent_ticks[first] < self.leave[span_id]


def _adoptions(
    spans: list[SpanRecord], tree: _Tree, by_id: dict[bytes, SpanRecord]
) -> dict[bytes, bytes]:
    """Span id -> the id of its adopted parent: for agents whose producer lost the nesting,
    the TOOL span that ran them (``_host_tool``); for work whose producer split it from its
    agent, that AGENT span (``_split_work``). See the module docstring for the rules.

    Linear in the spans plus one containment check per (agent with no TOOL above, candidate
    tool) pair, and per (agent directly under a TOOL span, sibling) pair; a trace needing
    more than ``_MAX_ADOPTION_CHECKS`` agent-in-tool checks (only a pathological one: real
    traces have a few outermost agents) keeps its recorded tree of agents.
    """
    agents = [s for s in spans if s.role is SpanRole.AGENT]
    if not agents:
        return {}
    adopted = _split_work(agents, tree, by_id)
    if len(agents) < 2:
        return adopted
    shape = _Shape(spans, tree)
    orphans = [s for s in agents if s.span_id not in shape.under_tool]
    tools = [
        t
        for t in spans
        if t.role is SpanRole.TOOL
        and t.span_id in shape.under_agent
        and not shape.holds_agent(t.span_id)
    ]
    if len(orphans) * len(tools) > _MAX_ADOPTION_CHECKS:
        return adopted
    hosts = {a.span_id: _host_tool(a, tools, shape) for a in orphans}
    adopted.update((agent, host.span_id) for agent, host in hosts.items() if host is not None)
    return adopted


def _split_work(
    agents: list[SpanRecord], tree: _Tree, by_id: dict[bytes, SpanRecord]
) -> dict[bytes, bytes]:
    """Span id -> the id of the AGENT span that did its work, for spans (no AGENT) directly
    under a TOOL span beside an AGENT span whose interval holds theirs (OpenLLMetry's
    LangChain agent-as-tool); the innermost such agent wins. Empty, after one parent
    look-up per agent, unless an agent lies directly under a tool; empty too past
    ``_MAX_ADOPTION_CHECKS`` (agent, sibling) checks (a pathological trace keeps its tree)."""
    found: dict[bytes, SpanRecord] = {}
    checks = 0
    for agent in agents:
        parent = agent.parent_span_id
        tool = by_id.get(parent) if parent is not None else None
        if tool is None or tool.role is not SpanRole.TOOL:
            continue
        siblings = tree.of(tool.span_id)
        checks += len(siblings)
        if checks > _MAX_ADOPTION_CHECKS:
            return {}
        for work in siblings:
            if (
                work.role is SpanRole.AGENT
                or work.start_ns < agent.start_ns
                or agent.end_ns < work.end_ns
            ):
                continue
            held = found.get(work.span_id)
            if held is None or _inner_key(agent) > _inner_key(held):
                found[work.span_id] = agent
    return {work: agent.span_id for work, agent in found.items()}


def _inner_key(span: SpanRecord) -> tuple[int, int, bytes]:
    """Of spans that all hold one interval, the innermost has the greatest key."""
    return (span.start_ns, -span.end_ns, span.span_id)


def _host_tool(agent: SpanRecord, tools: Sequence[SpanRecord], shape: _Shape) -> SpanRecord | None:
    """The innermost tool whose interval holds ``agent``'s and that lies below the agent's
    parent but not below the agent (the agent hangs from a common ancestor). Of several,
    one named after the agent wins (``as_tool(tool_name="refund_desk")`` runs
    ``refund_desk_agent``): two agents used as tools at once each lie inside both calls."""
    hosts = [
        t
        for t in tools
        if t.start_ns <= agent.start_ns
        and agent.end_ns <= t.end_ns
        and shape.below(t.span_id, agent.parent_span_id)
        and not shape.below(t.span_id, agent.span_id)
    ]
    if len(hosts) > 1 and agent.agent_name:
        named = [t for t in hosts if _names_each_other(t.tool_name, agent.agent_name)]
        hosts = named or hosts
    return max(hosts, key=lambda t: (t.start_ns, -t.end_ns, t.span_id), default=None)


def _names_each_other(tool: str | None, agent: str) -> bool:
    """Whether one name starts with the other, case aside: ``refund_desk`` and
    ``Refund_Desk_Agent``."""
    if not tool:
        return False
    tool, agent = tool.lower(), agent.lower()
    return agent.startswith(tool) or tool.startswith(agent)


def _workflows(spans: list[SpanRecord], tree: _Tree) -> frozenset[bytes]:
    """The AGENT spans that are workflows: only agents below them, no work of their own. A
    CrewAI crew's span never is: its agents work its tasks, one request (``crewai``)."""
    return frozenset(
        s.span_id
        for s in spans
        if s.role is SpanRole.AGENT and s.convention != crewai.NAME and _only_agents_below(s, tree)
    )


def _only_agents_below(agent: SpanRecord, tree: _Tree) -> bool:
    """Down to the next AGENT spans, no LLM or TOOL span, and at least one AGENT span."""
    stack = list(tree.of(agent.span_id))
    seen = {agent.span_id}
    holds_agent = False
    while stack:
        span = stack.pop()
        if span.span_id in seen:
            continue
        seen.add(span.span_id)
        if span.role is SpanRole.AGENT:
            holds_agent = True
        elif span.role in (SpanRole.LLM, SpanRole.TOOL):
            return False
        else:
            stack.extend(tree.of(span.span_id))
    return holds_agent


def _descend(
    span: SpanRecord, frame: _Frame, workflows: frozenset[bytes], by_id: dict[bytes, SpanRecord]
) -> _Frame:
    """The frame ``span`` hands its children. An AGENT span (not a workflow) outside every
    run, or that a guardrail runs, starts one, and TOOL ancestors outside that run are not
    its calls' parents. A Guardrails AI guard's own GUARDRAIL spans run no checker."""
    role = span.role
    if (
        role is SpanRole.GUARDRAIL
        and span.parent_span_id is not None
        and _part_of_guard(span, by_id.get(span.parent_span_id))
    ):
        role = SpanRole.OTHER
    is_agent = role is SpanRole.AGENT and span.span_id not in workflows
    starts_run = is_agent and (frame.run is None or frame.guarded)
    run = span.span_id if starts_run else frame.run
    tool = None if starts_run else frame.tool
    return _Frame(
        run=run,
        agent=span if is_agent else frame.agent,
        tool=span if role is SpanRole.TOOL else tool,
        parent=frame.parent if role is SpanRole.WRAPPER else span.span_id,
        # Only a guardrail on the run's own agent (no TOOL between: one wrapping an agent used
        # as a tool guards the tool's work, which stays the caller's) runs a checker.
        guarded=(role is SpanRole.GUARDRAIL and tool is None)
        or (frame.guarded and not is_agent and role is not SpanRole.TOOL),
    )


def _runs(
    spans: list[SpanRecord], by_id: dict[bytes, SpanRecord], sites: dict[bytes, CallSite]
) -> list[_Run]:
    """The runs, each with its spans in the order of ``spans`` (sorted by start, span id)."""
    members: dict[bytes | None, list[SpanRecord]] = {}
    for span in spans:
        append_to(members, sites[span.span_id].run, span)
    runs = [
        _Run(by_id[key], key, tuple(group)) for key, group in members.items() if key is not None
    ]
    residual = tuple(members.get(None, ()))
    if residual and (not runs or any(_holds_calls(s) for s in residual)):
        runs.append(_Run(_residual_root(residual), None, residual))
    return runs


def _joined_at_handoffs(runs: list[_Run], sites: dict[bytes, CallSite]) -> list[_Run]:
    """Runs that hand the conversation over to another agent, joined with it into one run.

    The OpenAI Agents SDK ends agent A's span at a handoff and starts agent B's as its
    sibling (CONVENTIONS §6.5): one user request, one run, whose checks span both agents
    (B's refund is verified by A's lookup). So B continues the run of the sibling A that
    handed off to it (``_handoff``: to B's agent when it names one) and ended last before B
    started; each A hands off once (requests run at once under one trace stay apart). A
    chain of handoffs is one run, led by the first agent. Sibling runs with no handoff stay
    apart."""
    by_parent: dict[bytes | None, list[_Run]] = {}
    for run in runs:
        if run.span is not None and run.agent_id is not None:
            append_to(by_parent, run.span.parent_span_id, run)
    led_by: dict[int, _Run] = {}  # id(run) -> the run that leads its chain
    for siblings in by_parent.values():
        if len(siblings) > 1:
            _chain(siblings, sites, led_by)
    if not led_by:
        return runs
    members: dict[int, list[SpanRecord]] = {}
    ends: dict[int, int] = {}
    for run in runs:
        lead = id(led_by.get(id(run), run))
        members.setdefault(lead, []).extend(run.spans)
        ends[lead] = max(ends.get(lead, run.end_ns), run.end_ns)
    return [
        _Run(run.span, run.agent_id, tuple(_in_time_order(members[id(run)])), ends[id(run)])
        for run in runs
        if id(run) not in led_by
    ]


def _chain(siblings: list[_Run], sites: dict[bytes, CallSite], led_by: dict[int, _Run]) -> None:
    """For each of ``siblings`` (runs of one parent), the run that handed off to it, if any,
    recorded in ``led_by`` as the run leading that one's chain. A run is matched against
    the handoffs not taken yet (the last ``_OPEN_HANDOFFS`` of them)."""
    siblings.sort(key=_run_start)
    named = {_agent_of(run) for run in siblings} - {None}
    handoffs: dict[int, _Handoff] = {}
    open_: list[int] = []  # indexes of runs whose handoff no run has taken yet
    for index, run in enumerate(siblings):
        start, agent = _run_start(run), _agent_of(run)
        best = -1
        for earlier in open_:
            handoff, previous = handoffs[earlier], siblings[earlier]
            if (
                handoff.at <= start
                and previous.end_ns <= start
                and handoff.hands_to(agent, named, start - previous.end_ns)
                and (best < 0 or previous.end_ns > siblings[best].end_ns)
            ):
                best = earlier
        if best >= 0:
            open_.remove(best)
            previous = siblings[best]
            led_by[id(run)] = led_by.get(id(previous), previous)
        found = _handoff(run, sites)
        if found is not None:
            handoffs[index] = found
            open_.append(index)
            if len(open_) > _OPEN_HANDOFFS:
                del open_[0]


#: Handoffs waiting for the run they hand to, at most: one per request running at once under
#: one trace.
_OPEN_HANDOFFS: Final = 256
#: A handoff span that names no agent (OpenLLMetry's) hands to a sibling no call names only
#: when it starts right as the handing-off run ends: the SDK starts the next agent at once.
_UNNAMED_HANDOFF_GAP_NS: Final = 10_000_000


def _agent_of(run: _Run) -> str | None:
    name = run.span.agent_name if run.span is not None else None
    return agent_in_tool_style(name) if name else None


def _run_start(run: _Run) -> int:
    return run.span.start_ns if run.span is not None else 0


@dataclass(frozen=True, slots=True)
class _Handoff:
    """Where a run handed the conversation over: when (its first sign), to whom the signs
    name (agents as the SDK writes them in tool names), and whether a sign named no one."""

    at: int
    targets: frozenset[str]
    unnamed: bool

    def hands_to(self, agent: str | None, siblings: set[str | None], gap_ns: int) -> bool:
        """Whether it may hand over to ``agent``, whose run started ``gap_ns`` after it
        ended: one it names; or, when it names none of the ``siblings``' agents (a
        ``transfer_to_account`` tool; a handoff tool renamed) and a handoff span named no
        one, any that started at once."""
        if agent is not None and agent in self.targets:
            return True
        return (
            self.unnamed and gap_ns <= _UNNAMED_HANDOFF_GAP_NS and self.targets.isdisjoint(siblings)
        )


def _handoff(run: _Run, sites: dict[bytes, CallSite]) -> _Handoff | None:
    """The handoff of ``run``: ``transfer_to_`` calls (requested, or run as tool spans) and
    handoff spans (the agent they name in ``tool_name``, see ``conventions.handoff_fields``)
    of the run's own agents, not of one it used as a tool (below a TOOL span); ``None`` if
    it has none."""
    at: int | None = None
    targets: set[str] = set()
    unnamed = False
    for span in run.spans:  # in time order
        role = span.role
        if sites[span.span_id].tool is not None:
            continue  # an agent used as a tool hands off inside that tool's call
        if role is SpanRole.LLM:
            names = [
                c.name[len(TRANSFER_TOOL_PREFIX) :]
                for c in span.output_tool_calls
                if is_transfer(c.name)
            ]
        elif role is SpanRole.TOOL and span.tool_name is not None and is_transfer(span.tool_name):
            names = [span.tool_name[len(TRANSFER_TOOL_PREFIX) :]]
        elif role is SpanRole.OTHER and span.tool_name is not None:  # a handoff span
            names = [span.tool_name] if span.tool_name else []
            unnamed = unnamed or not names
            at = span.start_ns if at is None else at
        else:
            continue
        if names:
            targets.update(agent_in_tool_style(name) for name in names)
            at = span.start_ns if at is None else at
    return None if at is None else _Handoff(at, frozenset(targets), unnamed)


def _holds_calls(span: SpanRecord) -> bool:
    return span.role is SpanRole.TOOL or (
        span.role is SpanRole.LLM and bool(span.output_tool_calls)
    )


def _residual_root(spans: tuple[SpanRecord, ...]) -> SpanRecord | None:
    """The root (no parent), else the only tree top, else ``None`` (synthetic root)."""
    ids = {s.span_id for s in spans}
    tops = [s for s in spans if s.parent_span_id not in ids]
    roots = [s for s in tops if s.parent_span_id is None]
    if len(roots) == 1:
        return roots[0]
    return tops[0] if len(tops) == 1 else None


def _tool_trace(
    trace: CompletedTrace,
    run: _Run,
    sites: dict[bytes, CallSite],
    normalize: NameNormalizer,
    above: _Above,
    *,
    by_id: dict[bytes, SpanRecord],
) -> ToolTrace:
    keyed, own, shared = above
    ranked = _by_precedence(run)
    identity = _Identity(ranked)
    checks = _guardrail_calls(run) if identity.guarded else _NO_SPANS
    unheld = _calls_beside_double_records(run, sites, by_id)
    if unheld:
        checks = checks | unheld
    # The calls a guardrail's own check asked for (a classifier by function calling) are
    # not the agent's.
    made = tuple(s for s in run.spans if s.span_id not in checks) if checks else run.spans
    calls = build_calls(made, sites, normalize, checks)
    refusal = _refusal(run, sites, checks)
    if refusal is None and unheld and not any(s.role is SpanRole.LLM for s in made):
        # A guardrail's check, and no turn of the agent's after it (``_calls_of_no_turn``):
        # the only thing that stops the SDK between the two is the guardrail tripping.
        refusal = NO_TURN_AFTER_CHECK
    # A run whose agent has an agent above it is a guardrail's checker (only a guardrail
    # starts a run below another's): the canary case id or shadow pair key its resource
    # carries is the checked run's, so the checker is judged by the policy alone.
    checker = run.agent_id is not None and sites[run.agent_id].agent is not None
    return ToolTrace(
        trace_id=trace.trace_id.hex(),
        run_span_id=run.span.span_id.hex() if run.span is not None else None,
        service=identity.service,
        agent=identity.agent,
        model=identity.model,
        calls=calls,
        final_text=_final_text(run, sites, checks),
        refusal=refusal is not None,
        refusal_reason=refusal,
        error_count=sum(c.status is CallStatus.ERROR for c in calls),
        complete=trace.complete,
        incomplete_reason=trace.incomplete_reason,
        start_ns=run.span.start_ns if run.span else min(s.start_ns for s in run.spans),
        end_ns=run.end_ns,
        span_count=len(run.spans),
        conversation_id=identity.conversation_id,
        reference_keys={} if checker else _reference_keys(ranked if keyed is None else keyed, own),
        agents=_agents(run, identity.agent, calls),
        shared_keys=None if checker or not shared else _reference_keys((), shared),
    )


def _agents(run: _Run, agent: str | None, calls: tuple[ToolCall, ...]) -> tuple[str, ...]:
    """The run's agent, then each other agent named by an AGENT span of the run, then any
    other agent a call was made by (a coworker a CrewAI delegation ran, which OpenInference
    writes no span for), once."""
    names = [agent] if agent is not None else []
    seen = set(names)  # a run of thousands of agents (handoffs) would search the list each time
    for span in run.spans:  # in time order
        name = span.agent_name
        if span.role is SpanRole.AGENT and name is not None and name not in seen:
            names.append(name)
            seen.add(name)
    for call in calls:
        name = call.agent
        if name is not None and name not in seen:
            names.append(name)
            seen.add(name)
    return tuple(names)


def _by_precedence(run: _Run) -> tuple[SpanRecord, ...]:
    """The run span first, then the run's spans from the earliest."""
    return run.spans if run.span is None else (run.span, *run.spans)


class _Identity:
    """Who ran the run: for each field, the first value that is not ``None`` by precedence
    (the model from LLM spans only). One pass over the spans for the four fields."""

    __slots__ = ("agent", "conversation_id", "guarded", "model", "service")

    def __init__(self, ranked: tuple[SpanRecord, ...]) -> None:
        self.service: str | None = None
        self.agent: str | None = None
        self.model: str | None = None
        self.conversation_id: str | None = None
        self.guarded = False  # the run holds a GUARDRAIL span
        for span in ranked:
            if span.role is SpanRole.GUARDRAIL:
                self.guarded = True
            if self.service is None:
                self.service = span.service
            if self.agent is None:
                self.agent = span.agent_name
            if self.model is None and span.role is SpanRole.LLM:
                self.model = span.model
            if self.conversation_id is None:
                self.conversation_id = span.conversation_id


def _reference_keys(ranked: Sequence[SpanRecord], above: Sequence[SpanRecord]) -> dict[str, str]:
    """Configured attributes merged over the run (the run span wins, then the earliest),
    then over spans above it (``_above_runs``), nearest first."""
    merged: dict[str, str] = {}
    for span in ranked:
        for key, value in span.reference_keys:
            merged.setdefault(key, value)
    for span in above:
        for key, value in span.reference_keys:
            merged.setdefault(key, value)
    return merged


#: Where a run's reference keys come from (``_above_runs``): the spans whose keys are its
#: own in their order (``None``: the run's, run span first, then the earliest), then the
#: spans above it that are its alone, and the spans above it and another run.
_Above = tuple[Sequence[SpanRecord] | None, Sequence[SpanRecord], Sequence[SpanRecord]]
_NOTHING_ABOVE: Final[_Above] = (None, (), ())


def _above_runs(
    runs: list[_Run], by_id: dict[bytes, SpanRecord], sites: dict[bytes, CallSite]
) -> list[_Above]:
    """For each run, where its reference keys come from. Its own spans' keys are its own;
    so are those of the spans above its agent's span that belong to no agent's run (a
    request's server span, a workflow's) and hold no other run's work, nearest first (a
    canary's case id on its request's span). Those of a span above several are the runs'
    shared keys: whose they are no span says (a title agent, a moderation agent, a
    guardrail's checker beside the canary's agent; the handler's own tool calls beside it,
    the residual run), and a wrong guess pages: the run given the canary's case id did not
    do the canary's work. When the runs lie in different fragments of the tree (a run hangs
    from a parent that never arrived, below a gateway toolwatch does not hear from, and
    another from the request's span), no span says which runs it holds, and every span
    above a run is shared.

    The residual run's keys are those of its spans that make calls and of the spans above
    them, nearest first; the other spans outside every agent (another request's, under one
    batch root) are none of its business. Alone in its trace (no agent span at all: a
    client-only tool loop) it has every span's keys, as any run alone has its own.

    What no span can tell: a model call outside every agent that calls no tool (a
    client-only canary that refuses) is no run, so a title agent beside it takes the
    request span's keys."""
    if len(runs) == 1:
        only = runs[0]
        if only.agent_id is None or only.span is None or only.span.parent_span_id is None:
            return [_NOTHING_ABOVE]  # the usual trace: one run, its agent the root
    chains: list[list[SpanRecord]] = []
    tops: set[bytes] = set()
    residual: _Run | None = None
    for run in runs:
        chain: list[SpanRecord] = []
        if run.agent_id is None:
            residual = run
        elif run.span is not None:
            _walk_up(run.span, by_id, sites, chain, tops)
        chains.append(chain)
    if residual is None and not any(chains):
        return [_NOTHING_ABOVE] * len(runs)  # no span above an agent
    if len(runs) == 1:
        return [(None, chains[0], [])]  # one run: what is above it is its own
    held: list[SpanRecord] = []  # the residual run's calls and the spans above them
    if residual is not None:
        makers = [s for s in residual.spans if _holds_calls(s)]
        held = _with_ancestors(makers, by_id, sites, tops)
    holders: dict[bytes, int] = {}
    for keyed in (*chains, held):
        for span in keyed:
            holders[span.span_id] = holders.get(span.span_id, 0) + 1
    known = len(tops) <= 1
    found: list[_Above] = []
    for run, chain in zip(runs, chains, strict=True):
        if run.agent_id is None:
            own = [s for s in held if known and holders[s.span_id] == 1]
            found.append((own, [], [s for s in held if not known or holders[s.span_id] > 1]))
            continue
        alone = [s for s in chain if known and holders[s.span_id] == 1]
        found.append((None, alone, [s for s in chain if not known or holders[s.span_id] > 1]))
    return found


def _walk_up(
    span: SpanRecord,
    by_id: dict[bytes, SpanRecord],
    sites: dict[bytes, CallSite],
    chain: list[SpanRecord],
    tops: set[bytes],
    *,
    walked: set[bytes] | None = None,
) -> None:
    """Appends to ``chain`` the spans above ``span`` that belong to no agent's run, nearest
    first, and to ``tops`` the top of its fragment of the tree (a root, or the span whose
    parent never arrived); none when the walk ends in an agent's run (a guardrail's checker
    below the run it checks: that run's fragment). A walk cut at the bound counts as a
    fragment of its own. A walk reaching a span in ``walked`` stops there: an earlier walk
    went on from it."""
    seen: set[bytes] = set()
    top = span
    parent = span.parent_span_id
    while parent is not None and parent not in seen:
        if walked is not None and parent in walked:
            return
        above = by_id.get(parent)
        if above is None or len(chain) == _MAX_ANCESTORS:
            break
        if sites[above.span_id].run is not None:
            return
        chain.append(above)
        seen.add(parent)
        top = above
        parent = above.parent_span_id
    tops.add(top.span_id)


def _with_ancestors(
    spans: list[SpanRecord],
    by_id: dict[bytes, SpanRecord],
    sites: dict[bytes, CallSite],
    tops: set[bytes],
) -> list[SpanRecord]:
    """``spans`` (in time order), then the spans above each, nearest first, each once. Each
    walk stops where an earlier one went, so nested calls cost one walk up in all."""
    found = list(spans)
    walked = {s.span_id for s in spans}
    for span in spans:
        chain: list[SpanRecord] = []
        _walk_up(span, by_id, sites, chain, tops, walked=walked)
        for above in chain:
            walked.add(above.span_id)
            found.append(above)
    return found


#: Spans above a run read for its reference keys at most (a deep chain a producer made
#: costs no more).
_MAX_ANCESTORS: Final = 64


def _guardrail_calls(run: _Run) -> frozenset[bytes]:
    """The model calls a guardrail of the run made itself (an LLM span below a GUARDRAIL
    span, no AGENT between: an OpenAI Agents SDK guardrail function calling the model
    client, a Guardrails AI validator judging by a model): they check the run, they are not
    its output (an output guardrail's ends after the run's answer, and read as the run's it
    was its last output, a refusal read as an answer; a tripped input guardrail's verdict
    would be the answer the run never gave), and the calls they ask for are not the run's.
    A Guardrails AI guard around the application's own model call is no guardrail here
    (``conventions.guardrails_ai``): that call is the run's step."""
    by_id: dict[bytes, SpanRecord] | None = None
    checks: list[bytes] = []
    for span in run.spans:
        if span.role is SpanRole.LLM:
            if by_id is None:
                by_id = {s.span_id: s for s in run.spans}
            if _below_guardrail(span, by_id):
                checks.append(span.span_id)
    return frozenset(checks) if checks else _NO_SPANS


def _calls_beside_double_records(
    run: _Run, sites: dict[bytes, CallSite], by_id: dict[bytes, SpanRecord]
) -> frozenset[bytes]:
    """The model calls made beside an agent whose own turns are each recorded twice, with
    no guardrail span to say so: they are checks (``_guardrail_calls``), not its turns.

    OpenLLMetry, with its ``openai`` instrumentation on beside its openai-agents one (as
    ``Traceloop.init()`` does), records each of the agent's model calls twice: the SDK's
    model span directly under the agent span, the client's directly inside it. It writes no
    guardrail span, so a guardrail function calling the client itself leaves the client's
    span alone, directly under the agent: no model span above it (no SDK span: the SDK did
    not make the call) and none below. Read as the agent's, an output guardrail's verdict
    was the run's final text and hid its refusal (``*__refusal_output_guardrail_client``).

    So a model span is one here when all of these hold: its parent is an AGENT span of the
    run; that agent span also directly holds a model span holding another as its child (a
    turn recorded twice); it holds no model span itself; and it looks like those inner
    records, the client's (same name, kind and convention). Each condition keeps the rule
    off what it must not touch:

    * a framework that records each model call once (CrewAI with OpenLLMetry: the client's
      spans directly under the agent) has no turn recorded twice, so none is excluded;
    * a model call outside every agent (an own loop on the client beside a Guardrails AI
      guard whose callable span holds the client's) or below a plain span, a tool's or a
      turn's (a tool that calls the model), is not beside the agent's turns;
    * per agent: in a run of several (a handoff, an agent an agent transferred to), one
      recording its turns twice says nothing of the other's;
    * a model span that looks like the framework's records, not the client's (a turn made
      through a model the client instrumentation does not patch, under an instrumentation
      that names its spans apart), is the agent's turn.

    With no turn recorded twice the agent may have made no turn at all: a blocking input
    guardrail (``run_in_parallel=False``) that trips before the agent's model is called
    (``*__input_guardrail_blocking_client``, ``_stream``) leaves the guardrail's call alone
    under the agent, the run's only model span, its verdict read as the agent's answer and
    the refusal hidden. Where the agent's span is OpenLLMetry's openai-agents instrumentation's
    (``_records_each_turn``), that instrumentation records every turn the agent takes, as a
    model span of a status (it sets OK or ERROR on each span it writes); the client's span
    of a call not streamed has none. So a model span directly under such an agent span, of
    no status and holding no model span, is one here too when the agent holds no model
    span of a status: the SDK recorded no turn of that agent (``_calls_of_no_turn``). A
    plain loop on the client under OpenLLMetry (its client spans ARE the turns) has no such
    agent span, nor has CrewAI (its agent span hangs off a task span), so theirs stay turns.

    What no span tells apart: a framework whose spans look like the client's (OpenLLMetry:
    both ``openai.response``, CLIENT) and one of whose turns lost its client record (a span
    dropped) reads that turn as a check; and an agent whose every SDK record was dropped
    reads the client's records of its turns as checks. A guardrail whose own client call
    streams (the client's span then ends OK) before the agent's first turn is still read as
    the agent's. The calls such a check asks for are not the run's; tool spans are (the SDK
    runs only the tools its own model asked for, and a tool span joined to a check's
    request would be hidden from the policy if the join were wrong)."""
    models = [s for s in run.spans if s.role is SpanRole.LLM]
    if len(models) < 3:  # a turn recorded twice and a call beside it, at least
        # ... or a call under an agent that made no turn (one model span, usually).
        return _calls_of_no_turn(models, sites, by_id) if models else _NO_SPANS
    # Most runs record each call once: one set and one pass tell, no map of every span.
    by_model = {s.span_id: s for s in models}
    inner: dict[bytes, set[tuple[str, int, str]]] = {}  # agent span id -> its inner records' looks
    for span in models:
        parent = span.parent_span_id
        outer = by_model.get(parent) if parent is not None else None
        if outer is None:
            continue
        agent = sites[outer.span_id].agent  # its nearest agent: its parent, for a turn
        if agent is not None and outer.parent_span_id == agent.span_id:
            inner.setdefault(agent.span_id, set()).add(_look(span))
    if not inner:
        return _calls_of_no_turn(models, sites, by_id)
    holding = _wrappers(run.spans)
    found = [
        s.span_id
        for s in models
        if s.parent_span_id in inner
        and s.span_id not in holding
        and _look(s) in inner[s.parent_span_id]
    ]
    return frozenset(found) if found else _NO_SPANS


def _calls_of_no_turn(
    models: list[SpanRecord], sites: dict[bytes, CallSite], by_id: dict[bytes, SpanRecord]
) -> frozenset[bytes]:
    """The model spans directly under an agent whose instrumentation records each of its
    turns (``_records_each_turn``) and recorded none: of no status (the client's, not the
    framework's), holding no model span, their agent holding no model span of a status
    (``_calls_beside_double_records``). ``models``: the run's model spans, none with no
    turn recorded twice beside it in its agent."""
    unset: list[SpanRecord] | None = None
    turned: set[bytes] | None = None  # agents holding a model span of a status: a turn
    for span in models:
        agent = sites[span.span_id].agent
        if agent is None or span.parent_span_id != agent.span_id:
            continue
        if span.status_code != _STATUS_UNSET:
            if turned is None:
                turned = set()
            turned.add(agent.span_id)
        elif agent.convention == _OPENLLMETRY:
            if unset is None:
                unset = []
            unset.append(span)
    if unset is None:  # the usual run: no client-only call under an OpenLLMetry agent
        return _NO_SPANS
    outer = {s.parent_span_id for s in models}  # a span holding a model span is a turn
    found = [
        s.span_id
        for s in unset
        if (turned is None or s.parent_span_id not in turned)
        and s.span_id not in outer
        and _records_each_turn(sites[s.span_id].agent, by_id)
    ]
    return frozenset(found) if found else _NO_SPANS


#: The refusal reason of a run whose agent took no turn after a guardrail's check
#: (``_calls_of_no_turn``): a blocking input guardrail tripped, unrecorded (OpenLLMetry).
NO_TURN_AFTER_CHECK: Final = "guardrail check stopped the run before the agent's first turn"
#: OTLP's status code of a span whose instrumentation set none.
_STATUS_UNSET: Final = 0
_OPENLLMETRY: Final = openllmetry.CONVENTION.name
#: The root span OpenLLMetry's openai-agents instrumentation (0.62) writes for the SDK's
#: trace, whatever the workflow's name (``traceloop.span.kind`` ``workflow``).
_AGENTS_WORKFLOW: Final = "Agent Workflow"


def _records_each_turn(agent: SpanRecord | None, by_id: dict[bytes, SpanRecord]) -> bool:
    """Whether ``agent`` is the span of OpenLLMetry's openai-agents instrumentation, which
    writes a model span for each turn the agent takes: an OpenLLMetry agent span whose
    parent, as recorded, is that instrumentation's workflow root (an agent run as a tool, or
    handed off to, hangs from it too). CrewAI's agent spans hang off a task span."""
    if agent is None or agent.convention != _OPENLLMETRY or agent.parent_span_id is None:
        return False
    parent = by_id.get(agent.parent_span_id)
    return (
        parent is not None
        and parent.name == _AGENTS_WORKFLOW
        and parent.convention == _OPENLLMETRY
        and parent.role is SpanRole.OTHER
    )


def _look(span: SpanRecord) -> tuple[str, int, str]:
    """What tells one producer's model spans from another's, as far as a record says."""
    return (span.name, span.kind, span.convention)


def _in_agent_above(span: SpanRecord, by_id: dict[bytes, SpanRecord]) -> list[SpanRecord]:
    """The run's spans above ``span`` up to its nearest AGENT span (not included), nearest
    first, at most ``_MAX_ANCESTORS``."""
    found: list[SpanRecord] = []
    parent = span.parent_span_id
    while parent is not None and len(found) < _MAX_ANCESTORS:
        above = by_id.get(parent)
        if above is None or above.role is SpanRole.AGENT:
            break
        found.append(above)
        parent = above.parent_span_id
    return found


def _models_above(span: SpanRecord, by_id: dict[bytes, SpanRecord]) -> list[bytes]:
    """The model spans above ``span`` in its agent, nearest first."""
    return [a.span_id for a in _in_agent_above(span, by_id) if a.role is SpanRole.LLM]


def _below_guardrail(span: SpanRecord, by_id: dict[bytes, SpanRecord]) -> bool:
    above = _in_agent_above(span, by_id)
    return any(
        a.role is SpanRole.GUARDRAIL
        and not _part_of_guard(a, above[i + 1] if i + 1 < len(above) else None)
        for i, a in enumerate(above)
    )


#: The spans of a streaming Guardrails AI guard that carry only the kind GUARDRAIL, not
#: ``guardrails.version`` (guardrails-ai 0.11.0 writes its attributes only for a call that
#: is no stream), under the guard's ``step``: its ``call``, and the span each chunk is
#: validated in (``stream_guard_span``; ``async_stream_span`` for an async guard, from
#: guardrails' source, not captured here), inside which the application's code runs.
_STREAMING_GUARD_SPANS: Final = frozenset({"call", "stream_guard_span", "async_stream_span"})


def _part_of_guard(guardrail: SpanRecord, parent: SpanRecord | None) -> bool:
    """A streaming Guardrails AI guard's own ``call`` (or ``stream_guard_span``): kind
    GUARDRAIL alone, right below the guard's ``step`` (``conventions.guardrails_ai``). The
    application's model call inside it is the run's, as in a guard that does not stream."""
    return (
        parent is not None
        and guardrail.name in _STREAMING_GUARD_SPANS
        and parent.name == "step"
        and parent.convention == guardrails_ai.NAME
        and guardrail.convention != guardrails_ai.NAME
    )


_NO_SPANS: Final[frozenset[bytes]] = frozenset()


def _final_text(run: _Run, sites: dict[bytes, CallSite], checks: frozenset[bytes]) -> str | None:
    """The run's own last model output that requested no tool, else the run span's; not a
    guardrail's check (``checks``: ``_guardrail_calls``, ``_calls_beside_double_records``)."""
    answers = [
        s
        for s in run.spans
        if s.role is SpanRole.LLM
        and s.output_text
        and not s.output_tool_calls
        and s.span_id not in checks
        and _speaks_for_run(sites[s.span_id], run)
    ]
    if answers:
        return max(answers, key=lambda s: (s.end_ns, s.start_ns, s.span_id)).output_text
    return run.span.output_text if run.span is not None else None


def _speaks_for_run(site: CallSite, run: _Run) -> bool:
    """Whether a span's output is its run's: its nearest agent is the run's, or an agent the
    run handed over to inside itself (no TOOL span between: ADK's ``transfer_to_agent``).
    An agent below a TOOL span is used as a tool: its output is the tool's result. (The
    TOOL check only runs for spans of a nested agent.)"""
    agent = site.agent
    return (agent.span_id if agent is not None else None) == run.agent_id or site.tool is None


def _refusal(run: _Run, sites: dict[bytes, CallSite], checks: frozenset[bytes]) -> str | None:
    """The run's refusal reason (its text, or the finish reason), if it refused: the run
    span's own, else that of the run's last output. Its outputs are the LLM spans that speak
    for it (an agent it handed over to included; one used as a tool not: that refusal is its
    caller's result to handle) and the refusals on the spans of agents it handed over to
    (their own final word). A model span that holds an agent (ADK's call_llm, inside which
    transfer_to_agent's agent runs) is not one: it ends after that agent's outputs, and its
    own output was the transfer. A model call that refused and was followed by one that
    answered (a content filter the agent retried past) is not the run's refusal. Nor is a
    guardrail's own model call one of its outputs (``checks``: ``_guardrail_calls``,
    ``_calls_beside_double_records``). A guardrail of
    the run that tripped (not inside a tool's execution, an agent used as a tool included:
    that is the tool's failure) refused the run whatever the model said: the OpenAI Agents
    SDK raises, before the answer or withholding it; the first to trip is the reason. So did
    a plain span that says one tripped (``fields.tripwire_refusal``: the SDK's turn span,
    whose status message is the only word of an input guardrail's trip under OpenInference).
    A Guardrails AI guard that raised (``fields.GUARD_RAISED``) refused as a model does: it
    is the run's refusal when nothing that speaks for the run answered after it (an
    application may catch the error, and retry or fall back)."""
    if run.span is not None:
        reason = _refusal_of(run.span)
        if reason is not None:
            return reason
    models: list[SpanRecord] = []
    tripped: SpanRecord | None = None
    held: set[bytes] | None = None  # the parents of nested agents' spans
    # Spans that refuse as outputs do (the last word counts): nested agents' own spans that
    # refuse, and Guardrails AI guards that raised.
    said: list[SpanRecord] | None = None
    for span in run.spans:
        role = span.role
        if role is SpanRole.LLM:
            # A model span that recorded no output (a framework's wrapper around the
            # client's call, ending after it) says nothing of a refusal.
            if span.span_id not in checks:
                models.append(span)
        elif (
            (role is SpanRole.GUARDRAIL or role is SpanRole.OTHER)
            and span.refusal is not None
            and sites[span.span_id].tool is None
            and _speaks_for_run(sites[span.span_id], run)
        ):
            if span.refusal == GUARD_RAISED:  # weighed against the outputs after it
                if said is None:
                    said = []
                said.append(span)
            elif tripped is None or _later(tripped, span):
                tripped = span
        elif role is SpanRole.AGENT and span is not run.span:
            if held is None:
                held = set()
            if span.parent_span_id is not None:
                held.add(span.parent_span_id)
            # Its nearest agent is the run's even when a TOOL span holds it (agent-as-tool),
            # so only the TOOL check tells.
            if _refusal_of(span) is not None and sites[span.span_id].tool is None:
                if said is None:
                    said = []
                said.append(span)
    if tripped is not None:
        return _refusal_of(tripped)
    wrappers: frozenset[bytes] | None = None  # read once a model span says nothing
    last: SpanRecord | None = None
    for span in models:
        if held is not None and span.span_id in held:
            continue
        if not _says_something(span):
            if wrappers is None:
                wrappers = _wrappers(run.spans)
            if span.span_id in wrappers:
                continue  # a framework's wrapper around the client's call: the inner one speaks
        if last is not None and not _later(span, last):
            continue
        if _speaks_for_run(sites[span.span_id], run):
            last = span
    for span in said or ():
        if last is None or _later(span, last):
            last = span
    return _refusal_of(last) if last is not None else None


def _wrappers(spans: tuple[SpanRecord, ...]) -> frozenset[bytes]:
    """The model spans that hold another model span, its nearest model span above (a
    framework's wrapper around the client's call)."""
    by_id = {s.span_id: s for s in spans}
    found: set[bytes] = set()
    for span in spans:
        if span.role is SpanRole.LLM:
            above = _models_above(span, by_id)
            if above:
                found.add(above[0])
    return frozenset(found)


def _says_something(span: SpanRecord) -> bool:
    return bool(span.output_text or span.refusal or span.finish_reasons or span.output_tool_calls)


def _later(span: SpanRecord, than: SpanRecord) -> bool:
    """Whether ``span`` ended after ``than`` (ties: the later start, then span id)."""
    if span.end_ns != than.end_ns:
        return span.end_ns > than.end_ns
    return _ended(span) > _ended(than)


def _ended(span: SpanRecord) -> tuple[int, int, bytes]:
    return (span.end_ns, span.start_ns, span.span_id)


def _refusal_of(span: SpanRecord) -> str | None:
    if span.refusal is not None:
        return span.refusal or "refusal"
    for reason in span.finish_reasons:
        if _refuses(reason):
            return reason
    return None


def _refuses(reason: str) -> bool:
    """Whether a finish reason means a refusal (case-folded, remembered)."""
    known = _REFUSES.get(reason)
    if known is None:
        known = reason.casefold() in REFUSAL_FINISH_REASONS
        if len(_REFUSES) < _MAX_REASONS and len(reason) <= _MAX_REASON_LENGTH:
            _REFUSES[reason] = known
    return known
