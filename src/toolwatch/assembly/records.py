"""Second records of a call: the tool spans inside the execution of another of the same
tool (an MCP client's record inside the framework's, an instrumented server's inside the
client's, an attempt of a call retried), merged into that call, not calls of their own.
"""

from __future__ import annotations

from typing import Final

from toolwatch.assembly.drafts import _MAX_HOPS, CallSite, _ended
from toolwatch.model import SpanRecord, SpanRole
from toolwatch.names import NameNormalizer

__all__: list[str] = []


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
    normalize: NameNormalizer,
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
    (``placing._place_second_records``), so it is read here as any other. A tool that calls
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
            or normalize.name(span.tool_name) != normalize.name(outer.tool_name)
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
