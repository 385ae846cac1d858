"""The spans' tree (``timeline``): the spans in time order, each span's children, with the
agents and work whose producers lost or split their nesting adopted (the rules: the
``timeline`` docstring's "Lost nesting" and "Split nesting"), and the AGENT spans that are
workflows ("Workflow spans").
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Sequence
from typing import Final

from toolwatch.assembly.calls import append_to
from toolwatch.conventions import crewai
from toolwatch.model import SpanRecord, SpanRole

__all__: list[str] = []

#: Bound on the agent-in-tool containment checks of one trace, and on its checks of work
#: beside an agent under a tool (see ``_adoptions``, ``_split_work``).
_MAX_ADOPTION_CHECKS = 25_000

#: Traces of up to this many spans are put in time order by insertion (``_inserted``).
_INSERTED_MAX: Final = 32


def _in_time_order(spans: list[SpanRecord]) -> list[SpanRecord]:
    """``spans`` by (start, span id). Up to ``_INSERTED_MAX`` spans, by insertion
    (``_inserted``). More are sorted by the start alone, then each run of equal starts by
    span id: an int key is one comparison and no tuple per span (a tuple key cost a ninth of
    the timeline's instructions), and equal starts are rare but for clocks that tick in
    milliseconds."""
    if len(spans) <= _INSERTED_MAX:
        return _inserted(spans)
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


def _inserted(spans: list[SpanRecord]) -> list[SpanRecord]:
    """``spans`` by (start, span id), sorted in place by insertion: compiled, each step
    compares two ints, where ``list.sort`` calls its key function through the interpreter for
    every span and compares the boxed starts (500 instructions a span in ``make
    bench-instructions``). A trace arrives nearly in order (a batch holds spans as they
    ended: a parent after its children), so each span moves past a few others; ``_INSERTED_MAX``
    bounds the steps of one that arrives reversed. Stable, as ``list.sort`` is."""
    for i in range(1, len(spans)):
        span = spans[i]
        start = span.start_ns
        j = i - 1
        while j >= 0:
            before = spans[j]
            if before.start_ns < start or (
                before.start_ns == start and before.span_id <= span.span_id
            ):
                break
            spans[j + 1] = before
            j -= 1
        spans[j + 1] = span
    return spans


def _start(span: SpanRecord) -> int:
    return span.start_ns


def _span_id(span: SpanRecord) -> bytes:
    return span.span_id


_LEAF: Final[list[SpanRecord]] = []  # the children of a span that has none; never mutated


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
