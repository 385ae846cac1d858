"""The time each call is ordered by, on a clock its caller can compare: another service's
subtree fitted into the tool span that called it, a tool service's span moved into the
window its request allows, and one holding no request by as much as its host's call
nearest it. The calls' recorded times stay theirs.
"""

from __future__ import annotations

import bisect

from toolwatch.assembly.drafts import _MAX_HOPS, CallSite, _Draft, _interval, _scope, append_to
from toolwatch.model import SpanRecord

__all__: list[str] = []


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
    wrote below it are in its clock once fitted), its reruns on its host too
    (``_shift_reruns``), and that host's spans that hold no request by the shift of its
    call nearest them (``_shift_hosts``). A clock a second ahead or behind put a lookup
    after the refund it verified, or a refund before its lookup. A span of the model
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
        _shift_reruns(drafts, shifts)
        _shift_hosts(drafts, sites, remote, shifts)
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


def _shift_reruns(drafts: list[_Draft], shifts: dict[bytes, int]) -> None:
    """Move each call that ran a moved call's request again (``_Draft.again``: a retry, a
    wrapper's span) by as much as that call, when the same service wrote both: one host's
    clock, so the attempts of one request keep their order (a retry a second behind sorted
    before its own first attempt, and before the lookup that verified the refund)."""
    taken = {
        id(d.request): d.span
        for d in drafts
        if d.request is not None and d.span is not None and d.span.span_id in shifts
    }
    if not taken:
        return
    for d in drafts:
        again, span = d.again, d.span
        if again is None or span is None:
            continue
        first = taken.get(id(again))
        if first is None or first.service != span.service:
            continue
        shift = shifts[first.span_id]
        d.moved = d.at + shift
        shifts[span.span_id] = shift  # and the calls nested in it (``_shift_nested``)


#: Where a host's span sits: its agent, its nearest tool span, its service. One such
#: host's calls are on one clock, moved by its tool span's offset when fitted.
_Host = tuple[bytes | None, bytes | None, str | None]


def _shift_hosts(
    drafts: list[_Draft],
    sites: dict[bytes, CallSite],
    remote: list[tuple[_Draft, SpanRecord, SpanRecord]],
    shifts: dict[bytes, int],
) -> None:
    """Move each tool span that holds no request (its model output streamed and its
    requests not recorded, or none recorded for that turn) by the offset its host shows in
    the run: the shift of the host's call placed by its request's window (``remote``: of
    the same service, agent and tool span; 0 for one its window held as it was) that
    started nearest it on the host's own clock, the earlier of two as near. Left on its raw
    clock while its host's other calls moved, a refund on a host a second behind sorted
    before the lookup that verified it, or its raw interval joined a slow call's parallel
    group (a false ``MISSING_VERIFICATION_STEP``); ahead, a lookup sorted after its refund.

    A host's calls can disagree: a window moves its call by the least that puts it inside,
    so a call the host queued a while moves less, or not at all, than one run at once. The
    nearest one's shift keeps the span in its order with that call, the one of the host's
    that its clock puts closest and so the likeliest to be put out of order (one host's
    order is what happened there: a farther call's larger shift could carry the span past a
    nearer call); and a drifting clock agrees best with the nearest reading. The spans of
    the service of the agent's model calls (none of theirs is ever placed by a window), and
    a rerun whose first attempt its host ran (``_shift_reruns`` put it on that attempt's
    clock), keep theirs. Run only when a call moved: a run of one service pays nothing."""
    shown: dict[_Host, list[tuple[int, int]]] = {}  # host -> (start, shift) of its calls
    first: dict[int, SpanRecord] = {}  # id(request) -> the remote span that took it
    for d, placed, _ in remote:
        append_to(shown, _host(placed, sites), (placed.start_ns, shifts.get(placed.span_id, 0)))
        first[id(d.request)] = placed
    for calls in shown.values():
        calls.sort()
    for d in drafts:
        span = d.span
        if span is None or d.request is not None or span.span_id in shifts:
            continue
        taken = first.get(id(d.again)) if d.again is not None else None
        if taken is not None and taken.service == span.service:
            continue
        calls_of_host = shown.get(_host(span, sites))
        if calls_of_host is None:
            continue
        shift = _nearest(calls_of_host, span.start_ns)
        if shift:
            d.moved = d.at + shift
            shifts[span.span_id] = shift  # and the calls nested in it (``_shift_nested``)


def _host(span: SpanRecord, sites: dict[bytes, CallSite]) -> _Host:
    site = sites[span.span_id]
    return _scope(site), site.tool.span_id if site.tool is not None else None, span.service


def _nearest(calls: list[tuple[int, int]], start: int) -> int:
    """The shift of the call of ``calls`` (by start) that started nearest ``start``, the
    earlier of two as near."""
    after = bisect.bisect_right(calls, start, key=_start)
    if after == len(calls) or (
        after > 0 and start - calls[after - 1][0] <= calls[after][0] - start
    ):
        return calls[after - 1][1]
    return calls[after][1]


def _start(call: tuple[int, int]) -> int:
    return call[0]


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
