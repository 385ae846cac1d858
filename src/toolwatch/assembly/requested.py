"""The calls a run's model spans requested, in emission order, each model call once: a
model call two instrumentations recorded (a framework's span around the client's) asks once.
"""

from __future__ import annotations

from toolwatch.assembly.drafts import _MAX_HOPS, _NO_IDS, CallSite, _Request, _scope
from toolwatch.model import RequestedCall, SpanRecord, SpanRole
from toolwatch.names import NameNormalizer

__all__: list[str] = []


def _requests(
    spans: tuple[SpanRecord, ...], sites: dict[bytes, CallSite], normalize: NameNormalizer
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
        if not _positions_increase(calls):
            calls = tuple(sorted(calls, key=_emitted_position))
        for call in calls:  # a tuple either way: iterated natively in compiled code
            call_id = call.call_id
            if call_id is not None:
                earlier = first_llm.setdefault(call_id, llm)
                if earlier is not llm and _recorded_twice(llm, call_id, earlier, by_agent, sites):
                    continue
            requests.append(_Request(llm, call, normalize.name(call.name), len(requests)))
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
