"""The join of tool spans with requests on the call id: the only request of an id, or, of
an id used again (ADK's ``"<not specified>"``, two agents each numbering from ``call_0``),
the one its agent's last model call before the span asked for; and a span whose request
another span took, which ran that request again (a retry under its id).
"""

from __future__ import annotations

import bisect
from typing import TypeAlias

from toolwatch.assembly.clocks import _context
from toolwatch.assembly.drafts import (
    _MAX_HOPS,
    CallSite,
    _Draft,
    _raw_name,
    _Request,
    _scope,
    append_to,
)
from toolwatch.model import SpanRecord, SpanRole
from toolwatch.names import NameNormalizer, namespaced

__all__: list[str] = []


def _join_by_id(
    executions: list[SpanRecord],
    requests: list[_Request],
    sites: dict[bytes, CallSite],
    normalize: NameNormalizer,
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
    but one run out stays so: a run of thousands of requests of one id is read once).
    ``last``: by service, the request a span of that service took last and that span's start
    (spans are taken in start order: one service's in its own clock's)."""

    __slots__ = ("first", "last", "outputs", "starts", "taken")

    def __init__(self) -> None:
        self.outputs: list[list[_Request]] = []
        self.starts: list[int] = []
        self.taken: list[int] = []
        self.first = 0
        self.last: dict[str | None, tuple[_Request, int]] = {}

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
    normalize: NameNormalizer,
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
    if asked is None:
        return None
    at = _sent_at(span, asked, senders)
    request = asked.take(span.start_ns if at is None else at)
    if request is not None:
        asked.last[span.service] = (request, span.start_ns)
    return request


def _asked_of(
    span: SpanRecord,
    call_id: str,
    reused: _Reused,
    sites: dict[bytes, CallSite],
    normalize: NameNormalizer,
) -> _Asked | None:
    """The requests under ``call_id`` of ``span``'s agent and tool (or the tool it names in
    a namespace, ``_namesake``), of a run that uses a call id again."""
    tools = reused.get((_scope(sites[span.span_id]), call_id))
    if tools is None:
        return None
    name = normalize.name(_raw_name(span))
    asked = tools.get(name)
    return asked if asked is not None else _namesake(name, tools)


def _sent_at(span: SpanRecord, asked: _Asked, senders: _Senders) -> int | None:
    """When ``span`` started on the clock of the model calls that asked (``_Senders.sent``
    for a span another service wrote); ``None`` for one of another service that no span on
    that clock sent: its own clock is all there is."""
    service = asked.outputs[0][0].llm.service
    if span.service != service:
        return senders.sent(span, service)
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

    def sent(self, span: SpanRecord, service: str | None) -> int | None:
        """The start of ``span``'s nearest ancestor that ``service`` wrote, below its agent
        span (whose start precedes every turn) and at most ``_MAX_HOPS`` up; else
        ``None``. Not one above a model call: a turn's step span (Strands'
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
        return None

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
    span: SpanRecord, request: _Request | None, normalize: NameNormalizer
) -> _Request | None:
    """``request``, of ``span``'s unique call id and taken by a span that started before,
    when ``span`` ran it again: a span of its tool (``_namesake``'s: a name in a namespace is
    that name); a span of another tool under the id is a call of its own."""
    if request is None:
        return None
    name = normalize.name(_raw_name(span))
    asked = request.name
    if name == asked or namespaced(asked, (name,)) is not None:
        return request
    return request if namespaced(name, (asked,)) is not None else None


def _run_again(
    span: SpanRecord,
    call_id: str,
    reused: _Reused,
    senders: _Senders,
    normalize: NameNormalizer,
) -> _Request | None:
    """The request ``span`` ran again, of a run that uses a call id again, when
    ``_take_again`` paired it with none: of its agent's and tool's, ``_Asked.again``, timed
    as ``_take_again`` times it. A span of another service that no span on the model's
    clock sent (a tool host, its clock off, no client span recorded) cannot be set against
    the model calls by its own start: it ran again the request the last span of its service
    took (an SDK's retry on that host), unless the agent started a model call since, read
    on the model's clock through that span's offset (its start less the end of the model
    call it ran the request of): a turn whose requests were not recorded."""
    asked = _asked_of(span, call_id, reused, senders.sites, normalize)
    if asked is None:
        return None
    started = _sent_at(span, asked, senders)
    if started is None:
        last = asked.last.get(span.service)
        if last is None:
            return None
        taken, taken_at = last
        asked_at = max(taken.llm.start_ns, taken.llm.end_ns)
        on_model_clock = span.start_ns - (taken_at - asked_at)
        return None if senders.turned(taken.llm, on_model_clock) else taken
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
