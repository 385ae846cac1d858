"""Calls of one run: join requested calls with tool spans, order them, group parallel ones.

A call has two sources (CONVENTIONS §6.3): the *request* in an LLM span's output (model-issued
id, name, arguments, emission order) and the *execution* in a TOOL span (timing, status,
result, nesting). They are joined on the call id when both carry one, otherwise on
(enclosing agent, normalized tool name, k-th occurrence), which OpenAI Agents needs (its tool
spans carry no id). A call seen both ways is one call; a request with no execution span
(a hosted tool, one never run) is still a call. A tool span of a call id whose request a span
that started before took runs that request again (a retry under its id, a wrapper's span
beside the tool's): a call of its own holding the request's arguments (``_join_by_id``); so
does a span without id or arguments after a failed attempt of its tool, or beside one
(``_join_by_name``).

``build_calls`` takes a run's spans through these steps, a module each (its docstring says
what it holds; they share private helpers, package-internal):

- ``drafts``: the records calls are built from (``CallSite``, ``_Request``, ``_Draft``),
  argument parsing, and small helpers the others share;
- ``records``: tool spans that are second records of a call, not calls of their own;
- ``requested``: the requests of the run's model spans, a model call recorded twice once;
- ``by_id``: the join on the call id, an id used again and a request run again included;
- ``by_name``: the join on (agent, tool name, k-th occurrence) or on the arguments run;
- ``handoffs``: handoff spans, the executions of transfer requests (OpenAI Agents);
- ``clocks``: the time each call is ordered by, on a clock its caller can compare;
- ``ordering``: the calls in order, and their parallel groups (with ``overlaps``);
- ``delegations``: CrewAI delegations, the agent and parent of a coworker's calls;
- this module: ``build_calls``, the join of the steps above, and each call's ``ToolCall``.

Pure functions of the spans' content: the order spans arrived in never matters.
"""

from __future__ import annotations

from typing import Any, Final

from toolwatch.assembly.by_id import _join_by_id
from toolwatch.assembly.by_name import _join_by_name
from toolwatch.assembly.clocks import _requested_windows
from toolwatch.assembly.delegations import _Delegations, _delegations
from toolwatch.assembly.drafts import (
    _NO_IDS,
    CallSite,
    _Draft,
    _failed,
    append_to,
    decode_json,
    parse_arguments,
)
from toolwatch.assembly.handoffs import _with_handoffs
from toolwatch.assembly.ordering import _in_order, _parallel_groups
from toolwatch.assembly.records import _NO_RECORDS, _Records, _second_records
from toolwatch.assembly.requested import _requests
from toolwatch.model import CallStatus, SpanRecord, SpanRole
from toolwatch.model_traces import ToolCall
from toolwatch.names import NameNormalizer

__all__ = ["CallSite", "append_to", "build_calls", "decode_json", "parse_arguments"]

#: Tool spans a call's agent walks up through to the delegation it runs under (a tool nested
#: in the coworker's tool); past it, the call is its agent span's.
_MAX_DELEGATION_DEPTH: Final = 32


def build_calls(
    spans: tuple[SpanRecord, ...],
    sites: dict[bytes, CallSite],
    normalize: NameNormalizer,
    checks: frozenset[bytes] = _NO_IDS,
) -> tuple[ToolCall, ...]:
    """The run's calls, ordered, with sequence indexes, parallel groups and parents.

    ``spans`` are the run's spans sorted by (start, span id), but ``checks``: the run's model
    spans left out because their requests are not its calls (a guardrail's own model calls);
    they are model spans still, so a tool span below one is never a second record of a call
    above it (``_second_records``). ``sites`` holds every span.
    """
    joined, records = _join(spans, sites, normalize, checks)
    _requested_windows(joined, sites, spans)
    drafts, shared = _in_order(joined)
    groups = _parallel_groups(drafts, sites, shared)
    call_ids = _nested_call_ids(drafts, sites)
    delegations = _delegations(drafts, sites, spans)
    return tuple(
        _tool_call(
            d,
            i,
            groups[i],
            sites=sites,
            call_ids=call_ids,
            normalize=normalize,
            records=records,
            delegations=delegations,
        )
        for i, d in enumerate(drafts)
    )


def _nested_call_ids(drafts: list[_Draft], sites: dict[bytes, CallSite]) -> dict[bytes, str | None]:
    """Each executed call's id by its span id, for the calls nested in one (agent-as-tool);
    empty when no call is nested in another, the usual run."""
    if not any(sites[d.origin.span_id].tool is not None for d in drafts):
        return {}
    return {d.span.span_id: _call_id(d) for d in drafts if d.span is not None}


def _join(
    spans: tuple[SpanRecord, ...],
    sites: dict[bytes, CallSite],
    normalize: NameNormalizer,
    checks: frozenset[bytes],
) -> tuple[list[_Draft], _Records]:
    """The run's calls, unordered: its tool spans, but second records of a call
    (``_second_records``), joined to the requests of its model spans, handoff spans added;
    and the second records."""
    executions: list[SpanRecord] = []
    handoffs: list[SpanRecord] = []  # plain spans with a tool name: handoff spans
    for span in spans:
        role = span.role
        if role is SpanRole.TOOL:
            executions.append(span)
        elif role is SpanRole.OTHER and span.tool_name is not None:
            handoffs.append(span)
    records = _NO_RECORDS
    # Whether a tool span sits inside another's execution (rarely; never with one tool span).
    if len(executions) > 1 and any(sites[s.span_id].tool is not None for s in executions):
        records = _second_records(executions, spans, sites, normalize, checks)
        if records.own:
            executions = [s for s in executions if s.span_id not in records.own]
    requests = _requests(spans, sites, normalize)
    drafts, executions, requests = _join_by_id(executions, requests, sites, normalize, spans)
    drafts += _join_by_name(executions, requests, sites, normalize, spans)
    if handoffs:
        drafts = _with_handoffs(drafts, handoffs, spans, sites)
    return drafts, records


def _call_id(draft: _Draft) -> str | None:
    """The span's call id, else its request's: the one it took, or ran again (a span without
    an id run again, ``_join_by_name``, is an attempt of that request: ``loops`` tells its
    request's attempts by it)."""
    if draft.span is not None and draft.span.call_id is not None:
        return draft.span.call_id
    request = draft.request if draft.request is not None else draft.again
    return request.call.call_id if request is not None else None


def _tool_call(
    draft: _Draft,
    index: int,
    group: int | None,
    *,
    sites: dict[bytes, CallSite],
    call_ids: dict[bytes, str | None],
    normalize: NameNormalizer,
    records: _Records,
    delegations: _Delegations,
) -> ToolCall:
    span, origin, raw_name, request = draft.span, draft.origin, draft.raw_name, draft.request
    # A handoff span's status is not a failed call: the SDK marks the one it ran with the
    # error "Multiple handoffs requested" when the output asked for more.
    executed = None if draft.handoff else span
    failed = executed is not None and _failed(executed)
    error_type = executed.error_type if executed is not None else None
    if executed is not None and records.last:
        final = records.last.get(executed.span_id)  # its last second record: how it ended
        if final is not None and _failed(final):
            failed, error_type = True, error_type or final.error_type
    site = sites[origin.span_id]
    arguments, error = _arguments(draft)
    return ToolCall(
        tool_name=normalize.name(raw_name),
        raw_name=raw_name,
        arguments=arguments,
        arguments_error=error,
        call_id=_call_id(draft),
        parent_call_id=_parent_call_id(site, call_ids, records, delegations),
        sequence_index=index,
        parallel_group=group,
        status=CallStatus.ERROR if failed else CallStatus.OK,
        error_type=error_type,
        agent=_agent(site, origin, sites, delegations),
        span_id=span.span_id.hex() if span is not None else None,
        start_ns=draft.start_ns,
        end_ns=span.end_ns if span is not None else None,
        result=decode_json(span.result)[0] if span is not None else None,
        hosted=request is not None and request.call.hosted,
        handoff=draft.handoff or (executed is not None and executed.handoff_to is not None),
        rerun=draft.again is not None,
        service=origin.service,  # the tool span's, else the asking model call's: its producer
    )


def _arguments(draft: _Draft) -> tuple[Any, str | None]:
    """The executed arguments when the tool span recorded them, else the requested ones,
    parsed. Except: executed arguments that are no JSON object, where the request's are one,
    are the tool's input rather than its arguments (LangChain's single-argument tools
    record ``"A-1001"`` for the model's ``{"order_id": "A-1001"}``), so the request's win."""
    executed = draft.span.arguments if draft.span is not None else None
    asked_for = draft.request if draft.request is not None else draft.again
    requested = asked_for.call.arguments if asked_for is not None else None
    parsed = parse_arguments(executed if executed is not None else requested)
    if executed is None or requested is None or isinstance(parsed[0], dict):
        return parsed
    asked = parse_arguments(requested)
    return asked if isinstance(asked[0], dict) else parsed


def _parent_call_id(
    site: CallSite, call_ids: dict[bytes, str | None], records: _Records, delegations: _Delegations
) -> str | None:
    """The enclosing tool call's id, or its span id in hex when it has none (the call's own
    record's, when the nearest tool span is a second record of it); with no tool span
    above, the CrewAI delegation only asked for that ran the call's agent."""
    tool = site.tool
    if tool is None:
        if delegations.parents and site.agent is not None:
            return delegations.parents.get(site.agent.span_id)
        return None
    if records.own:
        tool = records.own.get(tool.span_id, tool)
    call_id = call_ids.get(tool.span_id, tool.call_id)
    return call_id if call_id is not None else tool.span_id.hex()


def _agent(
    site: CallSite, origin: SpanRecord, sites: dict[bytes, CallSite], delegations: _Delegations
) -> str | None:
    """The nearest agent's name, else the call's own span's; but the coworker the nearest
    CrewAI delegation above names, when no agent span lies between the two (a tool nested
    in the coworker's tool is the coworker's call too)."""
    tool = site.tool
    if tool is not None and delegations.coworkers:
        for _ in range(_MAX_DELEGATION_DEPTH):
            above = sites[tool.span_id]
            if above.agent is not site.agent:  # an agent span between
                break
            named = delegations.coworkers.get(tool.span_id)
            if named is not None:
                return named
            if above.tool is None:
                break
            tool = above.tool
    if site.agent is not None and site.agent.agent_name is not None:
        return site.agent.agent_name
    return origin.agent_name
