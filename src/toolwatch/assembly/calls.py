"""Calls of one run: join requested calls with tool spans, order them, group parallel ones.

A call has two sources (CONVENTIONS §6.3): the *request* in an LLM span's output (model-issued
id, name, arguments, emission order) and the *execution* in a TOOL span (timing, status,
result, nesting). They are joined on the call id when both carry one, otherwise on
(enclosing agent, normalized tool name, k-th occurrence), which OpenAI Agents needs (its tool
spans carry no id). A call seen both ways is one call; a request with no execution span
(a hosted tool, one never run) is still a call. A tool span of a call id whose request a span
that started before took runs that request again (a retry under its id, a wrapper's span
beside the tool's): a call of its own holding the request's arguments (``_join_by_id``).

Handoffs (OpenAI Agents SDK, CONVENTIONS §6.5): the model requests ``transfer_to_<agent>``
and no tool span runs it, but every exporter writes a handoff span under the agent handing
off. That span is the request's execution: of the requests the agent's last model output
before it asked and nothing ran, the first ``transfer_to_`` request of the agent it names
(the SDK runs the first handoff an output asks for), else the first ``transfer_to_`` one,
else the first (a handoff tool renamed); with none (the contrib instrumentation records the
request in no structured field) a span that names its agent is a call of its own,
``transfer_to_<agent>``, so the handoff is a call whichever instrumentation exported it. A
call joined to a handoff span is marked ``handoff``; the span's status is not the call's
(the SDK marks the handoff it ran failed when the output asked for several).

CrewAI delegations (``conventions.crewai``): a delegation runs the coworker its arguments
name, an agent used as a tool that no instrumentation writes as one. Under a delegation's
tool span with no agent span between (OpenInference writes none for the coworker), however
deep in the coworker's tools, the calls are the coworker's: named as the role of the run's
agent span CrewAI matches the name to (``crewai.role_key``), else as CrewAI cleans it
(``crewai.coworker``). A delegation only asked for (no tool span: OpenLLMetry) is the parent
of the calls of the agent span it ran: right below the delegating agent (no tool span
between), of the role it names, started after the model asked; of several, asked for last
before the agent started, then first asked. One delegation runs one agent.

Pure functions of the spans' content: the order spans arrived in never matters.
"""

from __future__ import annotations

import bisect
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeAlias, TypeVar

from toolwatch.assembly.overlaps import Execution, overlapping_pairs
from toolwatch.conventions import crewai
from toolwatch.conventions.attrs import TRANSFER_TOOL_PREFIX, agent_in_tool_style, is_transfer
from toolwatch.jsontext import loads
from toolwatch.model import CallStatus, RequestedCall, SpanRecord, SpanRole, ToolCall
from toolwatch.names import namespaced

__all__ = ["CallSite", "append_to", "build_calls", "decode_json", "parse_arguments"]

K = TypeVar("K")
V = TypeVar("V")

_OTLP_STATUS_ERROR: Final = 2  # OTLP Status.code ERROR
_MAX_DECODE_DEPTH: Final = 8  # JSON nested in JSON strings; deeper than this is not arguments
_DECORATOR_KEYS: Final = frozenset({"args", "kwargs", "sanitize_inputs_outputs"})
#: Requests of one tool an execution's arguments are compared with, the next in line: a
#: model's parallel calls are a few (each comparison decodes a request's JSON, and reading
#: every waiting request took quadratic time in a run of thousands of calls of one tool).
_MAX_ARGUMENT_MATCHES: Final = 32
_NO_IDS: Final[frozenset[bytes]] = frozenset()
#: Bound on the (coworker agent, delegation asked for) pairs one run compares; past it (a
#: pathological run: a crew delegates a few times), no delegation is the parent of a call.
_MAX_DELEGATION_CHECKS: Final = 25_000
#: Tool spans a call's agent walks up through to the delegation it runs under (a tool nested
#: in the coworker's tool); past it, the call is its agent span's.
_MAX_DELEGATION_DEPTH: Final = 32

# The records below are built one per span or call of every trace: their constructors are
# written out, so that compiled (``toolwatch.compiled``) they are native. A named tuple's or
# a frozen dataclass's constructor stays interpreted Python; it cost several times the
# instructions (``make bench-instructions``). Never mutated after construction.


@dataclass(slots=True, init=False)
class CallSite:
    """Where a span sits in its run's tree, as the timeline computed it.

    ``agent``: nearest AGENT strict ancestor. ``tool``: nearest TOOL strict ancestor inside
    the same run (agent-as-tool). ``parent``: parent span id after skipping WRAPPER spans
    (``None`` for a span without parent). ``run``: the span id of the AGENT span whose run
    the span belongs to (``None`` outside every agent).
    """

    agent: SpanRecord | None
    tool: SpanRecord | None
    parent: bytes | None
    run: bytes | None

    def __init__(
        self,
        agent: SpanRecord | None,
        tool: SpanRecord | None,
        parent: bytes | None,
        run: bytes | None,
    ) -> None:
        self.agent = agent
        self.tool = tool
        self.parent = parent
        self.run = run


@dataclass(slots=True, init=False)
class _Request:
    llm: SpanRecord
    call: RequestedCall
    name: str  # normalized
    position: int  # emission order within the run
    parsed: tuple[Any] | None  # its arguments parsed, once asked (``arguments``)

    def __init__(self, llm: SpanRecord, call: RequestedCall, name: str, position: int) -> None:
        self.llm = llm
        self.call = call
        self.name = name
        self.position = position
        self.parsed = None

    def arguments(self) -> Any:
        """The requested arguments parsed, once: an execution without an id compares them
        with up to ``_MAX_ARGUMENT_MATCHES`` requests', and each with as many executions."""
        parsed = self.parsed
        if parsed is None:
            parsed = self.parsed = (parse_arguments(self.call.arguments)[0],)
        return parsed[0]


@dataclass(slots=True, init=False)
class _Draft:
    """One call being built: an execution, a request, or both (never neither). ``handoff``:
    the execution is a handoff span. ``moved``: the time it is ordered by, when its span's
    is not (``_requested_windows``); ``None``: its ``start_ns``. ``again``: of a span that
    ran a request another span took (``_join_by_id``: a retry under its id), that request,
    whose arguments it ran; the call is no request's."""

    span: SpanRecord | None
    request: _Request | None
    handoff: bool
    moved: int | None
    again: _Request | None

    def __init__(
        self, span: SpanRecord | None, request: _Request | None, handoff: bool = False
    ) -> None:
        self.span = span
        self.request = request
        self.handoff = handoff
        self.moved = None
        self.again = None

    @property
    def origin(self) -> SpanRecord:
        """The span the call is placed by: its tool span, else the requesting LLM span."""
        if self.span is not None:
            return self.span
        assert self.request is not None
        return self.request.llm

    @property
    def raw_name(self) -> str:
        """The tool span's name, else the request's (a handoff span's too), else, for a
        handoff span alone, the SDK's transfer tool's for the agent it names."""
        if self.span is not None and not self.handoff:
            return _raw_name(self.span)
        if self.request is not None:
            return self.request.call.name
        assert self.span is not None and self.span.tool_name is not None
        return TRANSFER_TOOL_PREFIX + agent_in_tool_style(self.span.tool_name)

    @property
    def start_ns(self) -> int:
        """A request-only call starts when the model asked for it (its LLM span ended)."""
        return self.span.start_ns if self.span is not None else self.origin.end_ns

    @property
    def at(self) -> int:
        """The time the call is ordered by: its start, unless ``moved``."""
        moved = self.moved
        return moved if moved is not None else self.start_ns


_SortKey = tuple[int, int, int, bytes, int, bytes]


def decode_json(value: Any) -> tuple[Any, bool]:
    """Decode ``value`` while it is a string holding JSON (double encoding, CONVENTIONS §0).

    Returns the value and whether the *first* decode failed (the raw value was a string
    that is not JSON). A string reached by decoding that is not JSON is a legitimate value.
    JSON nested deeper than the parser's recursion limit counts as not JSON.
    """
    for depth in range(_MAX_DECODE_DEPTH):
        if not isinstance(value, str):
            return value, False
        try:
            value = loads(value)
        except (ValueError, RecursionError):  # RecursionError: "[[[[..." from a hostile span
            return value, depth == 0
    return value, False


def parse_arguments(value: Any) -> tuple[Any, str | None]:
    """Parsed tool arguments and a short parse-error reason (``None`` if fine).

    ``None`` and blank strings mean "not recorded". A decorator-shaped input
    ``{"args": [], "kwargs": {...}}`` (OpenLLMetry, smolagents) becomes its kwargs.
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        return None, None
    decoded, failed = decode_json(value)
    if failed:
        return value, "arguments are not valid JSON"
    return _unwrap_decorator(decoded), None


def _unwrap_decorator(value: Any) -> Any:
    if (
        isinstance(value, dict)
        and "kwargs" in value
        and value.keys() <= _DECORATOR_KEYS
        and value.get("args") in (None, [])
        and isinstance(value["kwargs"], dict)
    ):
        return value["kwargs"]
    return value


def build_calls(
    spans: tuple[SpanRecord, ...],
    sites: dict[bytes, CallSite],
    normalize: Callable[[Any], str],
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


def _join(
    spans: tuple[SpanRecord, ...],
    sites: dict[bytes, CallSite],
    normalize: Callable[[Any], str],
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
    drafts += _join_by_name(executions, requests, sites, normalize)
    if handoffs:
        drafts = _with_handoffs(drafts, handoffs, spans, sites)
    return drafts, records


class _Records:
    """A run's second records of its calls (``_second_records``): ``own`` maps each to its
    call's own record; ``last`` maps a call's own record's span id to its second record that
    ended last (the last attempt of a call retried, the client's record around the server's):
    how the call ended."""

    __slots__ = ("last", "own")

    def __init__(self, own: dict[bytes, SpanRecord], last: dict[bytes, SpanRecord]) -> None:
        self.own = own
        self.last = last


_NO_RECORDS: Final = _Records({}, {})  # never written to


def _second_records(
    executions: list[SpanRecord],
    spans: tuple[SpanRecord, ...],
    sites: dict[bytes, CallSite],
    normalize: Callable[[Any], str],
    checks: frozenset[bytes],
) -> _Records:
    """The tool spans inside the execution of another of the same tool, no agent or model
    span between (plain spans may be; ``checks`` are model spans too, though not in
    ``spans``) and no other call id: second records of that call, not calls of their own.
    An MCP client's instrumentation (OpenLLMetry's, which ``Traceloop.init()`` turns on)
    records each ``tools/call`` as a tool span inside the framework's function span (one
    per attempt when the SDK retries), and only it says that the server answered the call
    ``isError`` (the OpenAI Agents SDK hands the error's text to the model as the tool's
    result); an instrumented server's record sits inside the client's. The server's record
    whose parent (``mcp.server``) has not come is recognised by time instead: the timeline
    places it below the innermost TOOL span of the same tool that holds its interval
    (``timeline._place_second_records``), so it is read here as any other. A tool that calls
    itself again does so through a model or an agent, which keep the two apart, or with a
    call id of its own."""
    models: set[bytes] | None = None  # read once a candidate is found
    outer_of: dict[bytes, SpanRecord] = {}
    for span in executions:
        site = sites[span.span_id]
        outer = site.tool
        if (
            outer is None
            or span.tool_name is None
            or outer.tool_name is None
            or sites[outer.span_id].agent is not site.agent
            or (span.call_id is not None and outer.call_id not in (None, span.call_id))
            or normalize(span.tool_name) != normalize(outer.tool_name)
        ):
            continue
        if models is None:
            models = {s.span_id for s in spans if s.role is SpanRole.LLM}
            models.update(checks)
        if not _model_between(site.parent, outer.span_id, models, sites):
            outer_of[span.span_id] = outer
    if not outer_of:
        return _NO_RECORDS
    own: dict[bytes, SpanRecord] = {}
    last: dict[bytes, SpanRecord] = {}
    for span in executions:
        if span.span_id in outer_of:
            call = _own_record(span.span_id, outer_of, own).span_id
            seen = last.get(call)
            if seen is None or _ended(span) > _ended(seen):
                last[call] = span
    return _Records(own, last)


def _own_record(
    record: bytes, outer_of: dict[bytes, SpanRecord], own: dict[bytes, SpanRecord]
) -> SpanRecord:
    """The call's own record above second record ``record``: up ``outer_of`` until a record
    that is none (each step to a strict ancestor), remembered in ``own`` for every record on
    the way, so a chain is walked once whatever the order records are asked in."""
    way = [record]
    outer = outer_of[record]
    while True:
        known = own.get(outer.span_id)
        if known is not None:
            outer = known
            break
        above = outer_of.get(outer.span_id)
        if above is None:
            break
        way.append(outer.span_id)
        outer = above
    for span_id in way:
        own[span_id] = outer
    return outer


def _model_between(
    parent: bytes | None, outer: bytes, models: set[bytes], sites: dict[bytes, CallSite]
) -> bool:
    """Whether a model span is on the way up from ``parent`` to ``outer`` (or the way is
    longer than ``_MAX_HOPS``: then it is taken for one)."""
    for _ in range(_MAX_HOPS):
        if parent is None:
            return True
        if parent == outer:
            return False
        if parent in models:
            return True
        above = sites.get(parent)
        parent = above.parent if above is not None else None
    return True


def _requests(
    spans: tuple[SpanRecord, ...], sites: dict[bytes, CallSite], normalize: Callable[[Any], str]
) -> list[_Request]:
    """Requested calls in emission order (LLM start, span id, part index).

    A call id already requested by another LLM span of the same agent that overlaps this
    one in time is the same model call recorded by two instrumentations (a framework's chat
    span wrapping the SDK's), so it counts once (``_recorded_twice``). Sequential turns
    reusing an id (ADK sends ``"<not specified>"``) stay distinct calls, and so do two
    agents' (agents used as tools at once, each numbering its calls from ``call_0``). A
    model span below one that asked for the same tools (plain spans between, no agent or
    tool) is a second record of that call too, whatever their ids: the client's span inside
    the framework's (OpenLLMetry's client span gives a Responses call the item's id,
    ``fc_...``, where the SDK's gives its ``call_id``).
    """
    asking = [s for s in spans if s.role is SpanRole.LLM and s.output_tool_calls]
    inner = _inner_records(asking, sites) if _overlapping(asking) else _NO_IDS
    requests: list[_Request] = []
    first_llm: dict[str, SpanRecord] = {}
    by_agent: dict[tuple[bytes | None, str], SpanRecord] = {}  # read once an id is asked again
    for llm in asking:
        if llm.span_id in inner:
            continue
        calls = llm.output_tool_calls
        for call in calls if _positions_increase(calls) else sorted(calls, key=_emitted_position):
            call_id = call.call_id
            if call_id is not None:
                earlier = first_llm.setdefault(call_id, llm)
                if earlier is not llm and _recorded_twice(llm, call_id, earlier, by_agent, sites):
                    continue
            requests.append(_Request(llm, call, normalize(call.name), len(requests)))
    return requests


def _recorded_twice(
    llm: SpanRecord,
    call_id: str,
    first: SpanRecord,
    by_agent: dict[tuple[bytes | None, str], SpanRecord],
    sites: dict[bytes, CallSite],
) -> bool:
    """Whether ``llm``, asking for ``call_id`` that ``first`` (another model span) asked for
    first, is a second record of a model call: the first model span of its agent to ask for
    the id overlaps it. Both records of one model call are its agent's; another agent's
    model call overlapping it (agents used as tools at once, each asking under ``call_0``)
    is a call of its own, and dropping it lost its request's arguments. ``by_agent`` holds
    the first model span of each agent and id asked again."""
    by_agent.setdefault((_scope(sites[first.span_id]), call_id), first)
    earlier = by_agent.setdefault((_scope(sites[llm.span_id]), call_id), llm)
    return earlier is not llm and _overlap(earlier, llm)


def _overlapping(asking: list[SpanRecord]) -> bool:
    """Whether two of ``asking`` (in start order) overlap in time: a model span inside
    another must (the usual run's turns follow one another)."""
    latest_end = -1
    for llm in asking:
        if llm.start_ns <= latest_end:
            return True
        latest_end = max(latest_end, llm.end_ns)
    return False


def _inner_records(asking: list[SpanRecord], sites: dict[bytes, CallSite]) -> frozenset[bytes]:
    """The model spans among ``asking`` (each asked for calls) below another of them that
    asked for the same tool names: a second record of that model call."""
    by_id = {s.span_id: s for s in asking}
    names: dict[bytes, list[str]] = {}
    inner: list[bytes] = []
    for llm in asking:
        outer = _asking_above(llm, by_id, sites)
        if (
            outer is not None
            and len(outer.output_tool_calls) == len(llm.output_tool_calls)
            and _names(outer, names) == _names(llm, names)
        ):
            inner.append(llm.span_id)
    return frozenset(inner) if inner else _NO_IDS


#: How far above a model span another that asked is looked for (plain spans between).
_MAX_HOPS: Final = 8


def _asking_above(
    llm: SpanRecord, by_id: dict[bytes, SpanRecord], sites: dict[bytes, CallSite]
) -> SpanRecord | None:
    """The nearest model span of ``by_id`` above ``llm``, not past its agent or tool."""
    site = sites[llm.span_id]
    agent = site.agent.span_id if site.agent is not None else None
    tool = site.tool.span_id if site.tool is not None else None
    parent = site.parent
    for _ in range(_MAX_HOPS):
        if parent is None or parent in (agent, tool):
            return None
        found = by_id.get(parent)
        if found is not None:
            return found
        above = sites.get(parent)
        parent = above.parent if above is not None else None
    return None


def _names(llm: SpanRecord, known: dict[bytes, list[str]]) -> list[str]:
    """The tool names ``llm`` asked for, sorted (worked out once per span)."""
    found = known.get(llm.span_id)
    if found is None:
        found = known[llm.span_id] = sorted(call.name for call in llm.output_tool_calls)
    return found


def _emitted_position(call: RequestedCall) -> int:
    return call.position


def _positions_increase(calls: tuple[RequestedCall, ...]) -> bool:
    """Whether an output's calls are in emission order already (they usually are)."""
    return all(calls[i - 1].position < calls[i].position for i in range(1, len(calls)))


def _overlap(a: SpanRecord, b: SpanRecord) -> bool:
    return a.start_ns <= b.end_ns and b.start_ns <= a.end_ns


def _join_by_id(
    executions: list[SpanRecord],
    requests: list[_Request],
    sites: dict[bytes, CallSite],
    normalize: Callable[[Any], str],
    spans: tuple[SpanRecord, ...],
) -> tuple[list[_Draft], list[SpanRecord], list[_Request]]:
    """Pair each tool span with the unpaired request of its call id: the only one, or, of
    an id used again, the one ``_Asked.take`` chooses among its agent's. A span whose
    request another span took (they start in order) ran that request again: a framework's
    or an SDK's retry, a wrapper's span beside the tool's; it runs its arguments, so that
    the call does not read as one whose producer records none (``_ran_again``)."""
    # When no two requests share an id (the usual run) one dict holds them; otherwise (ADK's
    # "<not specified>", a model that numbers each turn's calls from ``call_0``) the
    # requests of each id by agent, tool and model call.
    unique = _by_unique_id(requests)
    reused = _asked_again(requests, sites) if unique is None else {}
    senders = _Senders(spans, sites)  # reads the spans only when a span needs its sender
    drafts: list[_Draft] = []
    unmatched: list[SpanRecord] = []
    paired = 0
    asked: dict[str | None, _Request] | None = None  # by id, once an id is run again
    for span in executions:  # in start order
        request = again = None
        call_id = span.call_id
        if call_id is not None:
            if unique is not None:
                request = unique.pop(call_id, None)
                if request is None and requests:
                    if asked is None:
                        asked = {r.call.call_id: r for r in requests}
                    again = _ran_again(span, asked.get(call_id), normalize)
            else:
                request = _take_again(span, call_id, reused, senders, normalize)
                if request is None:
                    again = _run_again(span, call_id, reused, senders, normalize)
        if request is not None:
            drafts.append(_Draft(span, request))
            paired += 1
        elif again is not None:
            draft = _Draft(span, None)
            draft.again = again
            drafts.append(draft)
        else:
            unmatched.append(span)
    if paired == len(requests):
        return drafts, unmatched, []  # every request was taken (each paired draft took one)
    taken = {d.request.position for d in drafts if d.request is not None}
    return drafts, unmatched, [r for r in requests if r.position not in taken]


def _by_unique_id(requests: list[_Request]) -> dict[str, _Request] | None:
    """The requests by call id, or ``None`` if two share one (ADK's ``"<not specified>"``)."""
    by_id: dict[str, _Request] = {}
    for r in requests:
        call_id = r.call.call_id
        if call_id is not None:
            if call_id in by_id:
                return None
            by_id[call_id] = r
    return by_id


class _Asked:
    """The requests of one tool under one call id, by the model call that asked for them:
    ``outputs[i]``, in emission order, the requests of the ``i``-th model call (in start
    order), which started at ``starts[i]``; ``taken[i]`` of them are paired (the first).
    ``first``: no output before it has a request not paired (outputs run out in any order,
    but one run out stays so: a run of thousands of requests of one id is read once)."""

    __slots__ = ("first", "outputs", "starts", "taken")

    def __init__(self) -> None:
        self.outputs: list[list[_Request]] = []
        self.starts: list[int] = []
        self.taken: list[int] = []
        self.first = 0

    def add(self, request: _Request) -> None:
        """Add the next request in emission order (model calls by start, then position)."""
        outputs = self.outputs
        if outputs and outputs[-1][0].llm is request.llm:
            outputs[-1].append(request)
            return
        outputs.append([request])
        self.starts.append(request.llm.start_ns)
        self.taken.append(0)

    def take(self, started: int) -> _Request | None:
        """The request a span of the tool that started at ``started`` ran, paired: of the last
        model call that asked for the tool before the span started (its start: a streamed
        output starts its tools before it ends), the first not paired, spans taken in start
        order; none when that output's are all paired (a call run again: a retry). A span
        that started before every request (another host's clock) takes the earliest."""
        index = bisect.bisect_right(self.starts, started) - 1
        if index < 0:
            return self.earliest()
        start = self.starts[index]
        while index >= 0 and self.starts[index] == start:  # model calls started together
            request = self._next(index)
            if request is not None:
                return request
            index -= 1
        return None

    def earliest(self) -> _Request | None:
        """The earliest request not paired, paired."""
        while self.first < len(self.outputs):
            request = self._next(self.first)
            if request is not None:
                return request
            self.first += 1
        return None

    def _next(self, index: int) -> _Request | None:
        output, taken = self.outputs[index], self.taken[index]
        if taken == len(output):
            return None
        self.taken[index] = taken + 1
        return output[taken]

    def again(self, started: int) -> _Request | None:
        """The request a span of the tool that started at ``started``, and that ``take``
        paired with none, ran again (a retry): the one request of the last model call that
        asked for the tool before the span started, paired; ``None`` where that call asked
        for several, or several calls started then (which ran again would be a guess)."""
        index = bisect.bisect_right(self.starts, started) - 1
        if index < 0 or (index > 0 and self.starts[index - 1] == self.starts[index]):
            return None
        output = self.outputs[index]
        return output[0] if len(output) == 1 and self.taken[index] == 1 else None


#: The requests of a run that uses a call id again: by the agent that asked (``_scope``)
#: and the id, then by normalized tool name.
_Reused: TypeAlias = dict[tuple[bytes | None, str], dict[str, _Asked]]


def _asked_again(requests: list[_Request], sites: dict[bytes, CallSite]) -> _Reused:
    """The requests by agent and call id, then normalized tool name, for a run that uses an
    id again. By agent: two agents used as tools at once, each numbering its calls from
    ``call_0``, ask under one id, and a span takes only its own agent's request."""
    by_id: _Reused = {}
    for r in requests:  # emission order
        call_id = r.call.call_id
        if call_id is None:
            continue
        key = (_scope(sites[r.llm.span_id]), call_id)
        tools = by_id.get(key)
        if tools is None:
            tools = by_id[key] = {}
        asked = tools.get(r.name)
        if asked is None:
            asked = tools[r.name] = _Asked()
        asked.add(r)
    return by_id


def _take_again(
    span: SpanRecord,
    call_id: str,
    reused: _Reused,
    senders: _Senders,
    normalize: Callable[[Any], str],
) -> _Request | None:
    """The request ``span`` ran, of a run that uses a call id again, paired: one of its own
    agent's (the scope ``_join_by_name`` pairs in) and tool (``_Asked.take``), never another
    tool's. Taking "the last asked for before the span started" paired the calls of one
    output that share an id (asked at one instant) in reverse, the first span with the last
    request; taking the earliest of the id whatever its tool gave a tool span another tool's
    request (its arguments, and that call lost) when an earlier turn's call of the id never
    ran; taking it whatever its agent gave a nested agent's span the request of another
    agent that asked under the same id and started its model call later. An id used again
    names no call: a span of a tool the id never asked for is a call of its own. The tool
    named in a namespace is the same tool (``_namesake``): a unique id pairs them too.

    A span another service wrote than the model calls that asked (a tool service on another
    host) is timed by another clock: it is placed by the span that sent it, its nearest
    ancestor of the model calls' service below the agent (the agent's HTTP client span), on
    their clock (``_Senders.sent``). A host 1.5 s behind started its span before every
    request of its tool, and it took the earliest, a turn that never ran, leaving its own
    turn's call never run. With no such ancestor its own start is all there is: before every
    request it takes the earliest not yet taken (emission order)."""
    asked = _asked_of(span, call_id, reused, senders.sites, normalize)
    return asked.take(_sent_at(span, asked, senders)) if asked is not None else None


def _asked_of(
    span: SpanRecord,
    call_id: str,
    reused: _Reused,
    sites: dict[bytes, CallSite],
    normalize: Callable[[Any], str],
) -> _Asked | None:
    """The requests under ``call_id`` of ``span``'s agent and tool (or the tool it names in
    a namespace, ``_namesake``), of a run that uses a call id again."""
    tools = reused.get((_scope(sites[span.span_id]), call_id))
    if tools is None:
        return None
    name = normalize(_raw_name(span))
    asked = tools.get(name)
    return asked if asked is not None else _namesake(name, tools)


def _sent_at(span: SpanRecord, asked: _Asked, senders: _Senders) -> int:
    """When ``span`` started on the clock of the model calls that asked (``_Senders.sent``
    for a span another service wrote)."""
    service = asked.outputs[0][0].llm.service
    if span.service != service:
        return senders.sent(span, service, span.start_ns)
    return span.start_ns


class _Senders:
    """The spans of a run by id, read (once) when a span of another service than the model
    calls that asked for it needs the span that sent it, or a span run again needs the
    agent's turns: only runs that use a call id again and have such a span pay for it."""

    __slots__ = ("_by_id", "_enclosing", "_spans", "_turns", "sites")

    def __init__(self, spans: tuple[SpanRecord, ...], sites: dict[bytes, CallSite]) -> None:
        self._spans = spans
        self._by_id: dict[bytes, SpanRecord] | None = None
        self._enclosing: set[bytes] | None = None  # the spans above a model call
        self._turns: dict[tuple[bytes | None, bytes | None], list[int]] | None = None
        self.sites = sites

    def sent(self, span: SpanRecord, service: str | None, started: int) -> int:
        """The start of ``span``'s nearest ancestor that ``service`` wrote, below its agent
        span (whose start precedes every turn) and at most ``_MAX_HOPS`` up; else
        ``started``. Not one above a model call: a turn's step span (Strands'
        ``execute_event_loop_cycle``) holding the turn's model call and, with no client
        span recorded, the tool service's span started before the model call that asked, so
        it said the previous turn sent the span."""
        by_id = self._by_id
        if by_id is None:
            by_id = self._by_id = {s.span_id: s for s in self._spans}
        enclosing = self._enclosing
        if enclosing is None:
            enclosing = self._enclosing = self._above_model_calls()
        site = self.sites[span.span_id]
        agent = site.agent.span_id if site.agent is not None else None
        parent = site.parent
        for _ in range(_MAX_HOPS):
            if parent is None or parent == agent or parent in enclosing:
                break
            above = by_id.get(parent)
            if above is None:
                break
            if above.service == service:
                return above.start_ns
            parent = self.sites[parent].parent
        return started

    def _above_model_calls(self) -> set[bytes]:
        above: set[bytes] = set()
        sites = self.sites
        for span in self._spans:
            if span.role is not SpanRole.LLM:
                continue
            parent = sites[span.span_id].parent
            for _ in range(_MAX_HOPS):
                if parent is None or parent in above:
                    break
                above.add(parent)
                site = sites.get(parent)
                parent = site.parent if site is not None else None
        return above

    def turned(self, llm: SpanRecord, started: int) -> bool:
        """Whether the agent (in its context, ``_context``) started a model call after
        ``llm`` ended and before ``started``: one whose requests were not recorded (a
        streamed output) is a turn all the same, and a span after it is no retry of
        ``llm``'s. (Not one that started within ``llm``: a second record of it.)"""
        turns = self._turns
        if turns is None:
            turns = self._turns = {}
            for span in self._spans:
                if span.role is SpanRole.LLM:
                    append_to(turns, _context(span, self.sites), span.start_ns)
            for starts in turns.values():
                starts.sort()
        starts = turns.get(_context(llm, self.sites), [])
        after = bisect.bisect_right(starts, max(llm.start_ns, llm.end_ns))
        return after < len(starts) and starts[after] < started


def _ran_again(
    span: SpanRecord, request: _Request | None, normalize: Callable[[Any], str]
) -> _Request | None:
    """``request``, of ``span``'s unique call id and taken by a span that started before,
    when ``span`` ran it again: a span of its tool (``_namesake``'s: a name in a namespace is
    that name); a span of another tool under the id is a call of its own."""
    if request is None:
        return None
    name = normalize(_raw_name(span))
    asked = request.name
    if name == asked or namespaced(asked, (name,)) is not None:
        return request
    return request if namespaced(name, (asked,)) is not None else None


def _run_again(
    span: SpanRecord,
    call_id: str,
    reused: _Reused,
    senders: _Senders,
    normalize: Callable[[Any], str],
) -> _Request | None:
    """The request ``span`` ran again, of a run that uses a call id again, when
    ``_take_again`` paired it with none: of its agent's and tool's, ``_Asked.again``, timed
    as ``_take_again`` times it."""
    asked = _asked_of(span, call_id, reused, senders.sites, normalize)
    if asked is None:
        return None
    started = _sent_at(span, asked, senders)
    request = asked.again(started)
    if request is None or senders.turned(request.llm, started):
        return None  # a model call came between: a turn whose requests were not recorded
    return request


def _namesake(name: str, tools: dict[str, _Asked]) -> _Asked | None:
    """The requests of the one tool of ``tools`` that ``name`` names in a namespace, or is
    ``name`` in one (``names.namespaced``: the model asks for an MCP server's
    ``billing__lookup_order``, the server's span names ``lookup_order``, no ``tool_prefix``
    configured). ``None`` when no tool or several are (``billing__`` and ``crm__``'s both):
    the span is then a call of its own, never a guess between two tools."""
    found = [tool for tool in tools if namespaced(tool, (name,)) is not None]
    outer = namespaced(name, tools)
    if outer is not None:
        found.append(outer)
    return tools[found[0]] if len(found) == 1 else None


def _join_by_name(
    executions: list[SpanRecord],
    requests: list[_Request],
    sites: dict[bytes, CallSite],
    normalize: Callable[[Any], str],
) -> list[_Draft]:
    """Pair the k-th execution with the k-th request of the same tool under the same agent,
    unless another of those requests asked for exactly the arguments it ran with (parallel
    calls of one tool start in any order: a thread pool). Two different ids never pair: a
    span with an id only takes a request without one."""
    if not executions and not requests:
        return []  # the usual case: every call was joined on its id
    with_id: dict[tuple[bytes | None, str], deque[_Request]] = defaultdict(deque)
    without_id: dict[tuple[bytes | None, str], deque[_Request]] = defaultdict(deque)
    for r in requests:
        queues = with_id if r.call.call_id is not None else without_id
        queues[(_scope(sites[r.llm.span_id]), r.name)].append(r)
    drafts: list[_Draft] = []
    for span in executions:
        key = (_scope(sites[span.span_id]), normalize(_raw_name(span)))
        only_without = span.call_id is not None
        pending = (without_id[key], None if only_without else with_id[key])
        request = _same_arguments(span, *pending) or _next_request(*pending)
        drafts.append(_Draft(span, request))
    leftovers = [r for queues in (with_id, without_id) for q in queues.values() for r in q]
    drafts.extend(_Draft(None, r) for r in leftovers)
    return drafts


def _with_handoffs(
    drafts: list[_Draft],
    handoffs: list[SpanRecord],
    spans: tuple[SpanRecord, ...],
    sites: dict[bytes, CallSite],
) -> list[_Draft]:
    """``drafts`` with each handoff span (in time order) joined to the request it carried
    out, or added as a call of its own when its agent's output asked for none that was not
    run (see the module's docstring); a handoff span that names no agent and finds no
    request is not a call."""
    waiting: dict[bytes, list[_Draft]] = {}  # requests never run, by the output asking them
    for d in drafts:
        if d.span is None and d.request is not None and not d.request.call.hosted:
            append_to(waiting, d.request.llm.span_id, d)
    outputs = _Outputs(spans, sites)
    for span in handoffs:
        output = outputs.before(span, sites)
        asked = waiting.get(output.span_id, []) if output is not None else []
        asked.sort(key=_emission)
        draft = _handoff_request(asked, span.tool_name or None)
        if draft is not None:
            asked.remove(draft)
            draft.span, draft.handoff = span, True
        elif span.tool_name and not asked:
            drafts.append(_Draft(span, None, handoff=True))
    return drafts


class _Outputs:
    """The run's model outputs by agent, in order of their end (then start): a run of
    thousands of handoff spans (hostile, or a long chain) finds each one's output by
    bisection, not by reading every span again."""

    __slots__ = ("_ends", "_spans")

    def __init__(self, spans: tuple[SpanRecord, ...], sites: dict[bytes, CallSite]) -> None:
        by_agent: dict[bytes | None, list[SpanRecord]] = {}
        for span in spans:
            if span.role is SpanRole.LLM:
                append_to(by_agent, _scope(sites[span.span_id]), span)
        self._spans = {agent: sorted(llms, key=_ended) for agent, llms in by_agent.items()}
        self._ends = {agent: [s.end_ns for s in llms] for agent, llms in self._spans.items()}

    def before(self, handoff: SpanRecord, sites: dict[bytes, CallSite]) -> SpanRecord | None:
        """The model output a handoff carried out: the last one of its agent that ended
        before the handoff started (the SDK hands off in the turn that asked), or ``None``."""
        agent = _scope(sites[handoff.span_id])
        ends = self._ends.get(agent)
        if not ends:
            return None
        index = bisect.bisect_right(ends, handoff.start_ns)
        return self._spans[agent][index - 1] if index else None


def _ended(span: SpanRecord) -> tuple[int, int, bytes]:
    return span.end_ns, span.start_ns, span.span_id


def _handoff_request(asked: list[_Draft], target: str | None) -> _Draft | None:
    """Of the requests one output made and nothing ran, the handoff the SDK carried out: it
    runs the first handoff an output asks for (and refuses the others). The first
    ``transfer_to_`` request of ``target`` when the span names one, else the first
    ``transfer_to_`` request, else the first request (a handoff tool renamed)."""
    wanted = TRANSFER_TOOL_PREFIX + agent_in_tool_style(target) if target else None
    transfers = [d for d in asked if d.request is not None and is_transfer(d.request.call.name)]
    for draft in transfers:
        assert draft.request is not None
        if wanted is None or agent_in_tool_style(draft.request.call.name) == wanted:
            return draft
    if transfers and wanted is None:
        return transfers[0]
    return asked[0] if asked else None


def _same_arguments(
    span: SpanRecord, first: deque[_Request], second: deque[_Request] | None
) -> _Request | None:
    """The earliest-emitted request of the two queues that asked for the arguments ``span``
    ran with, when it could be one of several (taken out of its queue); else ``None``. Only
    the first ``_MAX_ARGUMENT_MATCHES`` of each queue, the requests next in line, are read."""
    waiting = len(first) + (len(second) if second else 0)
    if waiting < 2 or span.arguments is None:
        return None
    ran = parse_arguments(span.arguments)[0]
    found: tuple[_Request, deque[_Request], int] | None = None
    for queue in (first, second) if second else (first,):
        for index, request in enumerate(queue):
            if index == _MAX_ARGUMENT_MATCHES:
                break
            if request.arguments() == ran:
                if found is None or request.position < found[0].position:
                    found = request, queue, index
                break  # a queue is in emission order
    if found is None:
        return None
    request, queue, index = found
    del queue[index]
    return request


def _next_request(first: deque[_Request], second: deque[_Request] | None) -> _Request | None:
    """Pop the earlier-emitted head of the two queues (``second`` may be off limits)."""
    if second and (not first or second[0].position < first[0].position):
        return second.popleft()
    return first.popleft() if first else None


def _scope(site: CallSite) -> bytes | None:
    return site.agent.span_id if site.agent is not None else None


def _raw_name(span: SpanRecord) -> str:
    return span.tool_name if span.tool_name is not None else span.name


def _in_order(drafts: list[_Draft]) -> tuple[list[_Draft], list[list[int]]]:
    """Calls by start time, ties broken by emission order; then the calls one LLM output
    requested are put back in the model's order within the places they took, so scheduling
    jitter between parallel tool spans never reorders them (CONVENTIONS §6.4). Also the
    places of each output's calls, for the outputs that requested two or more."""
    if not _sorted_in_time(drafts):  # they usually are: no sort, no key tuple per call
        drafts = sorted(drafts, key=_time_key)
    if _one_call_per_output(drafts):
        return drafts, []  # the usual run: nothing to put back in order, no output's group
    places: dict[bytes, list[int]] = {}
    for i, d in enumerate(drafts):
        if d.request is not None:
            append_to(places, d.request.llm.span_id, i)
    shared = [indexes for indexes in places.values() if len(indexes) > 1]
    ordered = list(drafts)
    for indexes in shared:
        if _emitted_in_order(drafts, indexes):
            continue  # the places already hold the calls in the model's order
        batch = sorted((drafts[i] for i in indexes), key=_emission)
        for i, draft in zip(indexes, batch, strict=True):
            ordered[i] = draft
    return ordered, shared


def _requested_windows(
    drafts: list[_Draft], sites: dict[bytes, CallSite], spans: tuple[SpanRecord, ...]
) -> None:
    """Order each call by a clock its caller can compare (``moved``): a host's clock is not
    another's, so two rules put another service's spans where the spans of the service they
    served say they ran.

    Under a tool span, a subtree another service wrote (an agent used as a tool that another
    host runs: ``desk``'s ``ask_billing`` span, and below it ``billing``'s agent, its model
    calls and tools) is fitted into that span's interval (``_ClockOffsets``), whole: one
    clock, so its own order stands. A clock 1.5 s behind put the nested agent's refund before
    the caller's lookup that verified it (or before the call that ran it: its lookup, then
    read as enclosing it under a shared ``call_0``, "had not returned"); ahead, its lookup
    after the caller's refund: a false ``MISSING_VERIFICATION_STEP`` page on a correct run.

    Then each call whose tool span another service wrote than the model call that asked for
    it (a tool service on another host) is ``moved`` into the window the request allows, not
    before the model call that asked for it ended, nor after the next model call of the same
    agent (and tool: a model call a tool makes is no turn of its agent) started, which the
    call's result went back to; the calls nested in it by as much (those another service
    wrote below it are in its clock once fitted). A clock a second ahead or behind put a
    lookup after the refund it verified, or a refund before its lookup. A span of the model
    call's own service keeps its time: one clock, and what it says is what happened (a tool
    that a streamed output started before the output ended; the branches of a graph run at
    once).

    The recorded times stay the calls' (``ToolCall.start_ns``). Per call, one service
    comparison, the usual run's only cost; a run whose calls more than one service made
    reads each call's nearest tool span (a dict look-up), and reads every span once only
    when a call or its model call lies below another service's tool span."""
    remote: list[tuple[_Draft, SpanRecord, SpanRecord]] = []
    services = drafts[0].origin.service if drafts else None
    mixed = False
    for d in drafts:
        span, request = d.span, d.request
        if span is not None:
            if span.service != services:
                mixed = True
            if request is not None and span.service != request.llm.service and not d.handoff:
                remote.append((d, span, request.llm))
        elif request is not None and request.llm.service != services:
            mixed = True
    clocks = _ClockOffsets.of(drafts, sites, spans) if mixed else None
    if clocks is not None:
        for d in drafts:
            offset = clocks.offset(d.origin)
            if offset:
                d.moved = d.start_ns + offset
    if not remote:
        return
    turns: dict[tuple[bytes | None, bytes | None], list[int]] = {}
    for d in drafts:
        if d.request is not None:
            llm = d.request.llm
            offset = clocks.offset(llm) if clocks is not None else 0
            append_to(turns, _context(llm, sites), llm.start_ns + offset)
    for starts in turns.values():
        starts.sort()
    shifts: dict[bytes, int] = {}  # tool span id -> how far its call moved
    for d, span, llm in remote:
        asked = max(llm.start_ns, llm.end_ns) + (clocks.offset(llm) if clocks is not None else 0)
        starts = turns[_context(llm, sites)]
        after = bisect.bisect_right(starts, asked)
        own = d.at
        at = max(own, asked)
        if after < len(starts):
            at = min(at, starts[after])
        if at != own:
            d.moved = at
            shifts[span.span_id] = at - own
    if shifts:
        _shift_nested(drafts, sites, shifts, fitted=clocks is not None)


class _ClockOffsets:
    """How far each span's time is moved to be read on its run's clock (ns, added).

    The subtree a service wrote under another's tool span (the spans whose nearest tool
    span in the run is that one, of that service) is moved by the least that puts its
    extent, its first start to its last end, inside the tool span's [start, end]; not at
    all when it fits already. One longer than the tool span cannot fit: its start is put at
    the tool span's start (its calls past the tool span's end then come after the caller's
    next ones, as on a clock that ran that much slower: the spans leave no better guess).
    The whole subtree moves by one offset (its spans share a clock: their order is never
    changed), and a tool span's own offset is added to the subtrees fitted under it, so a
    third host below the nested agent reads on the run's clock too. Spans below no tool
    span, or of their tool span's service, keep their tool span's offset (0 at the top)."""

    __slots__ = ("_groups", "_sites", "_tools")

    def __init__(
        self, groups: dict[tuple[bytes, str | None], int], sites: dict[bytes, CallSite]
    ) -> None:
        self._groups = groups  # (tool span id, service) -> that subtree's offset below it
        self._sites = sites
        self._tools: dict[bytes, int] = {}  # tool span id -> its offset, once worked out

    @staticmethod
    def of(
        drafts: list[_Draft], sites: dict[bytes, CallSite], spans: tuple[SpanRecord, ...]
    ) -> _ClockOffsets | None:
        """The offsets of a run whose calls several services made, or ``None`` when no
        call, nor the model call that asked for it, lies below another service's tool span
        (a tool service's span under the agent moves by its window alone)."""
        if not any(_below_another_service(d, sites) for d in drafts):
            return None
        extents: dict[tuple[bytes, str | None], tuple[SpanRecord, int, int]] = {}
        for span in spans:
            tool = sites[span.span_id].tool
            if tool is None or tool.service == span.service:
                continue
            key = (tool.span_id, span.service)
            start, end = _interval(span)
            seen = extents.get(key)
            if seen is not None:
                start, end = min(start, seen[1]), max(end, seen[2])
            extents[key] = (tool, start, end)
        groups = {key: _fitted(*extent) for key, extent in extents.items()}
        return _ClockOffsets(groups, sites)

    def offset(self, span: SpanRecord) -> int:
        tool = self._sites[span.span_id].tool
        if tool is None:
            return 0
        base = self._tools.get(tool.span_id)
        if base is None:
            base = self._tool_offset(tool)
        if tool.service == span.service:
            return base
        return base + self._groups.get((tool.span_id, span.service), 0)

    def _tool_offset(self, tool: SpanRecord) -> int:
        """``tool``'s offset: up its tool spans to one worked out (or the top), then down,
        each remembered, so a chain is walked once however deep."""
        way = [tool]
        base = 0
        while True:
            above = self._sites[way[-1].span_id].tool
            if above is None:
                break
            known = self._tools.get(above.span_id)
            if known is not None:
                base = known
                break
            way.append(above)
        for span in reversed(way):
            above = self._sites[span.span_id].tool
            if above is not None and above.service != span.service:
                base += self._groups.get((above.span_id, span.service), 0)
            self._tools[span.span_id] = base
        return base


def _below_another_service(draft: _Draft, sites: dict[bytes, CallSite]) -> bool:
    """Whether the call's span, or the model call that asked for it, is another service's
    than its nearest tool span."""
    origin = draft.origin
    tool = sites[origin.span_id].tool
    if tool is not None and tool.service != origin.service:
        return True
    request = draft.request
    if request is None or request.llm is origin:
        return False
    tool = sites[request.llm.span_id].tool
    return tool is not None and tool.service != request.llm.service


def _fitted(tool: SpanRecord, start: int, end: int) -> int:
    """The offset that puts [start, end] inside ``tool``'s interval: none if it is, else the
    least; a longer one starts where ``tool`` starts."""
    low, high = _interval(tool)
    if end - start > high - low or start < low:
        return low - start
    return high - end if end > high else 0


def _context(llm: SpanRecord, sites: dict[bytes, CallSite]) -> tuple[bytes | None, bytes | None]:
    """The agent and the tool a model call was made in: its turns are those of one context."""
    site = sites[llm.span_id]
    return _scope(site), site.tool.span_id if site.tool is not None else None


def _shift_nested(
    drafts: list[_Draft], sites: dict[bytes, CallSite], shifts: dict[bytes, int], *, fitted: bool
) -> None:
    """Move each call not moved into a window itself by the shift of the nearest such call
    it is nested in, when it is on that call's clock: the same service wrote both, or
    (``fitted``) any, another service's subtree below having been fitted into its call."""
    for d in drafts:
        if d.span is not None and d.span.span_id in shifts:
            continue
        origin = d.origin
        tool = sites[origin.span_id].tool
        for _ in range(_MAX_HOPS):
            if tool is None:
                break
            shift = shifts.get(tool.span_id)
            if shift is not None:
                if fitted or tool.service == origin.service:
                    d.moved = d.at + shift
                break
            tool = sites[tool.span_id].tool


def _one_call_per_output(drafts: Sequence[_Draft]) -> bool:
    """Whether no model output requested more than one of the calls."""
    return all(d.request is None or len(d.request.llm.output_tool_calls) < 2 for d in drafts)


def _sorted_in_time(drafts: list[_Draft]) -> bool:
    """Whether the drafts are sorted by ``_time_key``: by start, and where two start
    together (parallel calls often do), by the rest of the key."""
    for i in range(1, len(drafts)):
        before, start = drafts[i - 1].at, drafts[i].at
        if before > start:
            return False
        if before == start and _time_key(drafts[i]) < _time_key(drafts[i - 1]):
            return False
    return True


def _emitted_in_order(drafts: list[_Draft], indexes: list[int]) -> bool:
    """Whether the drafts at ``indexes`` are in the order their output requested them."""
    return all(
        _emission(drafts[indexes[k - 1]]) < _emission(drafts[indexes[k]])
        for k in range(1, len(indexes))
    )


def append_to(lists: dict[K, list[V]], key: K, value: V) -> None:
    """``lists[key].append(value)``, creating the list: what a ``defaultdict(list)`` does,
    without calling its factory through the interpreter on every new key."""
    values = lists.get(key)
    if values is None:
        lists[key] = [value]
    else:
        values.append(value)


def _time_key(draft: _Draft) -> _SortKey:
    if draft.request is not None:
        llm, index = draft.request.llm, draft.request.call.position
        return (draft.at, 0, llm.start_ns, llm.span_id, index, b"")
    return (draft.at, 1, 0, b"", 0, draft.origin.span_id)


def _emission(draft: _Draft) -> int:
    assert draft.request is not None
    return draft.request.position


def _parallel_groups(
    drafts: Sequence[_Draft], sites: dict[bytes, CallSite], shared: list[list[int]]
) -> list[int | None]:
    """Group number (smallest sequence index of the group) per call, or ``None``.

    Calls one model output requested together form a group (``shared``: their places): the
    model's parallel tool calls, however the framework scheduled them (LangGraph runs each
    in a node of its own, and one after the other when the tools are synchronous). So do
    executed calls of the same parent (wrappers skipped) whose intervals overlap,
    transitively: producers that record no requests. But where both calls' requests are
    recorded, they decide: a call requested by a model call that started when or after the
    other's model call had ended is not joined to it by their overlap, whatever the tool
    spans' times say (a tool span ended late, a tool service's clock ahead of the agent's):
    the model asked for it after that output. Every other overlap still joins (a call with
    no recorded request, calls of concurrent model calls), and groups that share a call are
    one group, so two such calls are one group when a third joins both.
    """
    groups: list[Sequence[int]] = [*_overlapping_executions(drafts, sites), *shared]
    if not groups:
        return [None] * len(drafts)
    leader = list(range(len(drafts)))  # union-find: 10^5 parallel calls must stay linear
    for members in groups:
        for i in members[1:]:
            _union(leader, members[0], i)
    roots = [_find(leader, i) for i in range(len(drafts))]
    sizes: dict[int, int] = {}  # not a Counter: its constructor is interpreted Python
    for root in roots:
        sizes[root] = sizes.get(root, 0) + 1
    return [root if sizes[root] > 1 else None for root in roots]


def _overlapping_executions(
    drafts: Sequence[_Draft], sites: dict[bytes, CallSite]
) -> list[Sequence[int]]:
    """Executed calls of one parent whose [start, end] intervals overlap, but for two calls
    requested by model calls one strictly after the other: the requests say they ran one
    after the other. Groups to join (``_parallel_groups``): the components of plain overlap
    (a sweep in (start, end, index) order; touching intervals are sequential), each as it
    is when its calls were requested by one model call at most (a model's parallel calls:
    no pair of them is ordered), else refined by ``overlapping_pairs``, which only such a
    component pays for. The drafts are in time order, so usually the sweep needs no sort."""
    executed = [i for i, d in enumerate(drafts) if d.span is not None]
    if not _in_interval_order(executed, drafts):
        executed.sort(key=lambda i: (_interval(drafts[i].span), i))
    groups: list[Sequence[int]] = []
    for members in _overlap_components(executed, drafts, sites):
        if _one_request(members, drafts):
            groups.append(members)
        else:  # in (start, end, index) order, as the sweep took them
            executions = [_execution(i, drafts[i], sites) for i in members]
            groups.extend(overlapping_pairs(executions))
    return groups


def _overlap_components(
    executed: list[int], drafts: Sequence[_Draft], sites: dict[bytes, CallSite]
) -> list[list[int]]:
    """The components of two or more of ``executed`` (sorted) whose intervals overlap, per
    parent, transitively."""
    sweeps: dict[bytes | None, _Sweep] = {}  # per parent: the component being swept
    found: list[list[int]] = []
    for i in executed:
        span = drafts[i].span
        assert span is not None
        parent = sites[span.span_id].parent
        start, end = _interval(span)
        sweep = sweeps.get(parent)
        if sweep is None or start >= sweep.reach:
            sweeps[parent] = _Sweep(i, end)
            continue
        if len(sweep.members) == 1:
            found.append(sweep.members)  # its second member makes it a component
        sweep.members.append(i)
        sweep.reach = max(sweep.reach, end)
    return found


@dataclass(slots=True, init=False)
class _Sweep:
    members: list[int]
    reach: int  # the latest end among the members

    def __init__(self, first: int, end: int) -> None:
        self.members = [first]
        self.reach = end


def _one_request(members: list[int], drafts: Sequence[_Draft]) -> bool:
    """Whether one model call at most requested the calls at ``members``."""
    seen: SpanRecord | None = None
    for i in members:
        request = drafts[i].request
        if request is None:
            continue
        if seen is None:
            seen = request.llm
        elif request.llm is not seen:
            return False
    return True


def _execution(index: int, draft: _Draft, sites: dict[bytes, CallSite]) -> Execution:
    span = draft.span
    assert span is not None
    start, end = _interval(span)
    request = None
    if draft.request is not None:  # the model call that requested it
        llm = draft.request.llm
        request = (llm.start_ns, max(llm.start_ns, llm.end_ns), llm.span_id)
    return Execution(index, sites[span.span_id].parent, start, end, request)


def _in_interval_order(indexes: list[int], drafts: Sequence[_Draft]) -> bool:
    """Whether the executed drafts at ``indexes`` are sorted by (start, end)."""
    previous_start = previous_end = 0
    for i in indexes:
        start, end = _interval(drafts[i].span)
        if start < previous_start or (start == previous_start and end < previous_end):
            return False
        previous_start, previous_end = start, end
    return True


def _find(leader: list[int], i: int) -> int:
    """The group's smallest index (the root), halving the path on the way."""
    while leader[i] != i:
        leader[i] = leader[leader[i]]
        i = leader[i]
    return i


def _union(leader: list[int], a: int, b: int) -> None:
    a, b = _find(leader, a), _find(leader, b)
    if a != b:
        leader[max(a, b)] = min(a, b)


def _interval(span: SpanRecord | None) -> tuple[int, int]:
    assert span is not None
    return span.start_ns, max(span.start_ns, span.end_ns)


def _call_id(draft: _Draft) -> str | None:
    if draft.span is not None and draft.span.call_id is not None:
        return draft.span.call_id
    return draft.request.call.call_id if draft.request is not None else None


def _tool_call(
    draft: _Draft,
    index: int,
    group: int | None,
    *,
    sites: dict[bytes, CallSite],
    call_ids: dict[bytes, str | None],
    normalize: Callable[[Any], str],
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
        tool_name=normalize(raw_name),
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
        handoff=draft.handoff,
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


def _failed(span: SpanRecord) -> bool:
    return span.status_code == _OTLP_STATUS_ERROR or bool(span.error_type)


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
