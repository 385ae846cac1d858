"""CrewAI delegations: the coworker a delegation runs, whose calls are the coworker's, and
the agent span a delegation only asked for ran, the parent of its calls.

CrewAI delegations (``conventions.crewai``): a delegation runs the coworker its arguments
name, an agent used as a tool that no instrumentation writes as one. Under a delegation's
tool span with no agent span between (OpenInference writes none for the coworker), however
deep in the coworker's tools, the calls are the coworker's: named as the role of the run's
agent span CrewAI matches the name to (``crewai.role_key``), else as CrewAI cleans it
(``crewai.coworker``). A delegation only asked for (no tool span: OpenLLMetry) is the parent
of the calls of the agent span it ran: right below the delegating agent (no tool span
between), of the role it names, started after the model asked; of several, asked for last
before the agent started, then first asked. One delegation runs one agent.
"""

from __future__ import annotations

from typing import Final

from toolwatch.assembly.drafts import CallSite, _Draft, parse_arguments
from toolwatch.conventions import crewai
from toolwatch.model import SpanRecord, SpanRole

__all__: list[str] = []

#: Bound on the (coworker agent, delegation asked for) pairs one run compares; past it (a
#: pathological run: a crew delegates a few times), no delegation is the parent of a call.
_MAX_DELEGATION_CHECKS: Final = 25_000


class _Delegations:
    """A run's CrewAI delegations (module docstring): ``coworkers`` maps a delegation's tool
    span id to the coworker its arguments name; ``parents`` maps a coworker's agent span id
    to the id of the delegation, only asked for, that ran it."""

    __slots__ = ("coworkers", "parents")

    def __init__(self, coworkers: dict[bytes, str], parents: dict[bytes, str]) -> None:
        self.coworkers = coworkers
        self.parents = parents


_NO_DELEGATIONS: Final = _Delegations({}, {})  # never written to


def _delegations(
    drafts: list[_Draft], sites: dict[bytes, CallSite], spans: tuple[SpanRecord, ...]
) -> _Delegations:
    """The run's CrewAI delegations; ``_NO_DELEGATIONS`` after one name look-up per call
    when it made none, the usual run."""
    coworkers: dict[bytes, str] = {}
    asked: list[_Draft] = []
    for draft in drafts:
        span = draft.span
        if span is not None:
            if span.tool_name in crewai.DELEGATION_TOOLS:
                named = crewai.coworker(parse_arguments(span.arguments)[0])
                if named is not None:
                    coworkers[span.span_id] = named
        elif draft.request is not None and draft.request.call.name in crewai.DELEGATION_TOOLS:
            asked.append(draft)
    if not coworkers and not asked:
        return _NO_DELEGATIONS
    if coworkers:
        _as_roles(coworkers, spans)
    return _Delegations(coworkers, _delegated_agents(asked, drafts, sites) if asked else {})


def _as_roles(coworkers: dict[bytes, str], spans: tuple[SpanRecord, ...]) -> None:
    """Rewrite each named coworker as the role of the run's agent span CrewAI matches it to
    (``crewai.role_key``; the first started, of several), so that the coworker's calls are
    that agent's, as it spells itself; a coworker no agent span runs keeps its cleaned name.
    """
    roles: dict[str, str] = {}
    for span in spans:
        name = span.agent_name
        if span.role is SpanRole.AGENT and name is not None:
            roles.setdefault(crewai.role_key(name), name)
    for span_id, named in coworkers.items():
        coworkers[span_id] = roles.get(crewai.role_key(named), named)


def _delegated_agents(
    asked: list[_Draft], drafts: list[_Draft], sites: dict[bytes, CallSite]
) -> dict[bytes, str]:
    """Agent span id -> the id of the delegation in ``asked`` (only asked for, in call
    order) that ran it, for the agents the run's calls were made in (module docstring)."""
    workers: dict[bytes, SpanRecord] = {}
    for draft in drafts:
        agent = sites[draft.origin.span_id].agent
        if agent is not None and agent.agent_name is not None:
            workers.setdefault(agent.span_id, agent)
    if len(workers) * len(asked) > _MAX_DELEGATION_CHECKS:
        return {}
    # Each name's CrewAI key computed once, not once per (agent, delegation) pair: a
    # coworker's name is as long as an attribute may be.
    named: list[str | None] = []
    for draft in asked:
        request = draft.request
        coworker = crewai.coworker(request.arguments()) if request is not None else None
        named.append(crewai.role_key(coworker) if coworker is not None else None)
    parents: dict[bytes, str] = {}
    taken: set[int] = set()
    for worker in sorted(workers.values(), key=_start_key):  # the first started runs first
        chosen = _delegation_of(worker, asked, named, taken, sites)
        request = asked[chosen].request if chosen is not None else None
        if chosen is not None and request is not None and request.call.call_id is not None:
            taken.add(chosen)
            parents[worker.span_id] = request.call.call_id
    return parents


def _delegation_of(
    worker: SpanRecord,
    asked: list[_Draft],
    named: list[str | None],
    taken: set[int],
    sites: dict[bytes, CallSite],
) -> int | None:
    """The index in ``asked`` of the delegation that ran ``worker``, if one did;
    ``named[i]``: the ``crewai.role_key`` of the coworker ``asked[i]`` names."""
    above = sites[worker.span_id]
    role = worker.agent_name
    if above.tool is not None or above.agent is None or role is None:
        return None
    key = crewai.role_key(role)
    chosen: int | None = None
    chosen_end = -1
    for i, draft in enumerate(asked):
        request = draft.request
        if request is None or i in taken or request.call.call_id is None:
            continue
        llm = request.llm
        if (
            llm.end_ns <= worker.start_ns
            and llm.end_ns > chosen_end
            and named[i] == key
            and sites[llm.span_id].agent is above.agent
        ):
            chosen, chosen_end = i, llm.end_ns
    return chosen


def _start_key(span: SpanRecord) -> tuple[int, bytes]:
    return (span.start_ns, span.span_id)
