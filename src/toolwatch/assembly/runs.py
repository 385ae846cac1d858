"""The runs of a trace (``timeline``): one per outermost agent, and the residual run; runs
that hand the conversation over joined into one (the ``timeline`` docstring's "Runs" and
"Handoffs").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from toolwatch.assembly.calls import CallSite, append_to
from toolwatch.assembly.tree import _in_time_order
from toolwatch.conventions.frameworks import TRANSFER_TOOL_PREFIX, agent_in_tool_style, is_transfer
from toolwatch.model import SpanRecord, SpanRole

__all__: list[str] = []


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
    """The handoff of ``run``: the spans of the run's own agents, not of one it used as a tool
    (below a TOOL span), that hand over and the agent each names: a span whose recognition
    read its target (``SpanRecord.handoff_to``: Google ADK's ``transfer_to_agent``, its tool
    span and the model span asking for it), ``transfer_to_<agent>`` calls (requested, or run
    as tool spans: the OpenAI Agents SDK's, named for their agent) and handoff spans (the
    agent they name in ``tool_name``, see ``conventions.handoff_fields``); ``None`` if it has
    none. One that names no one (ADK's without its arguments, OpenLLMetry's handoff span)
    makes it ``unnamed``."""
    at: int | None = None
    targets: set[str] = set()
    unnamed = False
    for span in run.spans:  # in time order
        names = _handoff_names(span)
        if names is None or sites[span.span_id].tool is not None:
            continue  # an agent used as a tool hands off inside that tool's call
        if names:
            at = span.start_ns if at is None else at
            for name in names:
                if name:
                    targets.add(agent_in_tool_style(name))
                else:
                    unnamed = True
    return None if at is None else _Handoff(at, frozenset(targets), unnamed)


def _handoff_names(span: SpanRecord) -> list[str] | None:
    """The agents ``span`` hands over to as written (``""``: it names no one), ``[]`` if a
    model span asks for no transfer; ``None`` when it is no span that could."""
    role = span.role
    if span.handoff_to is not None:
        return [span.handoff_to]
    if role is SpanRole.LLM:
        return [
            c.name[len(TRANSFER_TOOL_PREFIX) :]
            for c in span.output_tool_calls
            if is_transfer(c.name)
        ]
    if role is SpanRole.TOOL and span.tool_name is not None and is_transfer(span.tool_name):
        return [span.tool_name[len(TRANSFER_TOOL_PREFIX) :]]
    if role is SpanRole.OTHER and span.tool_name is not None:  # a handoff span
        return [span.tool_name]
    return None


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
