"""Each span's place in its trace (``timeline``): its call site (``CallSite``: nearest agent,
tool and call parent) and the run it belongs to, walking the tree top-down; and orphaned
second records of a call placed below it (the ``timeline`` docstring's "Orphaned second
records").
"""

from __future__ import annotations

from dataclasses import dataclass

from toolwatch.assembly.calls import CallSite, append_to
from toolwatch.assembly.checks import _part_of_guard
from toolwatch.assembly.tree import _LEAF, _Tree
from toolwatch.model import SpanRecord, SpanRole
from toolwatch.names import NameNormalizer

__all__: list[str] = []


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
