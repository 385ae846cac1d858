"""Timeline: a completed trace's spans become one ToolTrace per agent run (DESIGN §5).

Runs. Each outermost AGENT span (one not nested in another AGENT span) is a run; every span
below it belongs to it, including nested agents (agent-as-tool: TOOL → AGENT → TOOL), whose
calls carry the outer call's id as ``parent_call_id``. Spans outside every agent form one
more run, the *residual* run, when the trace has no agent span at all or when they hold calls
(a tool called outside any agent is never lost). The residual run's span is the root if it
has one, else its only tree top; when the root is missing and several fragments remain they
are parts of one run whose root was lost, so they form one run with a synthetic root
(``run_span_id`` ``None``, times the min/max of its spans).

Per run: calls come from ``toolwatch.assembly.calls``; ``error_count`` counts failed tool
calls only (an LLM or agent span in error is not a tool-call failure); ``final_text`` is the
text of the run's own last model output that requested no tool (nested agents' outputs are
theirs, not the run's), else the run span's output text; a refusal is a ``refusal`` on any
LLM or AGENT span of the run or a refusal finish reason, the earliest one giving the reason.

Pure: the same set of spans gives the same ToolTraces whatever their order.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from toolwatch.assembly.buffer import CompletedTrace
from toolwatch.assembly.calls import CallSite, build_calls
from toolwatch.model import CallStatus, SpanRecord, SpanRole, ToolTrace
from toolwatch.names import NameNormalizer

__all__ = ["REFUSAL_FINISH_REASONS", "build_tool_traces"]

#: Finish reasons that mean the model refused or was filtered (OpenAI ``content_filter``,
#: Vercel ``content-filter``, Gemini ``safety``; CONVENTIONS §5, §8). Compared case-folded.
REFUSAL_FINISH_REASONS = frozenset({"content_filter", "content-filter", "safety", "refusal"})


@dataclass(frozen=True, slots=True)
class _Frame:
    """What a span hands down to its children while walking the tree."""

    run: bytes | None  # outermost AGENT span id; None outside every agent
    agent: SpanRecord | None  # nearest AGENT at or above the children
    tool: SpanRecord | None  # nearest TOOL at or above the children, within the run
    parent: bytes | None  # the children's call parent (wrappers skipped)


@dataclass(frozen=True, slots=True)
class _Run:
    span: SpanRecord | None  # the run span; None for a synthetic root
    agent_id: bytes | None  # the run's AGENT span id; None for the residual run
    spans: tuple[SpanRecord, ...]  # sorted by (start, span id)


def build_tool_traces(trace: CompletedTrace, normalize: NameNormalizer) -> list[ToolTrace]:
    """One ToolTrace per run of ``trace``, ordered by start time then run span id."""
    spans = sorted({s.span_id: s for s in trace.spans}.values(), key=_order)
    sites, members = _place(spans)
    runs = _runs(spans, members)
    built = [_tool_trace(trace, run, sites, normalize) for run in runs]
    return sorted(built, key=lambda t: (t.start_ns, t.run_span_id or ""))


def _order(span: SpanRecord) -> tuple[int, bytes]:
    return span.start_ns, span.span_id


def _place(
    spans: Sequence[SpanRecord],
) -> tuple[dict[bytes, CallSite], dict[bytes | None, list[SpanRecord]]]:
    """Walk every tree top-down: each span's call site, and the spans of each run."""
    children = _children(spans)
    sites: dict[bytes, CallSite] = {}
    members: dict[bytes | None, list[SpanRecord]] = defaultdict(list)
    tops = [s for s in spans if s.parent_span_id is None or s.parent_span_id not in children]
    # Spans caught in a parent cycle are reachable from no top; start from them in order.
    for top in [*tops, *spans]:
        stack = [(top, _Frame(None, None, None, top.parent_span_id))]
        while stack:
            span, frame = stack.pop()
            if span.span_id in sites:
                continue
            sites[span.span_id] = CallSite(frame.agent, frame.tool, frame.parent)
            below = _descend(span, frame)
            members[below.run].append(span)
            stack.extend((child, below) for child in children[span.span_id])
    return sites, members


def _children(spans: Sequence[SpanRecord]) -> dict[bytes, list[SpanRecord]]:
    """Children per span id; every span has an entry, spans with a missing parent are
    nobody's child."""
    children: dict[bytes, list[SpanRecord]] = {s.span_id: [] for s in spans}
    for s in spans:
        if s.parent_span_id is not None and s.parent_span_id in children:
            children[s.parent_span_id].append(s)
    return children


def _descend(span: SpanRecord, frame: _Frame) -> _Frame:
    """The frame ``span`` hands its children. An AGENT span outside every run starts one,
    and TOOL ancestors outside that run are not its calls' parents."""
    starts_run = frame.run is None and span.role is SpanRole.AGENT
    run = span.span_id if starts_run else frame.run
    tool = None if starts_run else frame.tool
    return _Frame(
        run=run,
        agent=span if span.role is SpanRole.AGENT else frame.agent,
        tool=span if span.role is SpanRole.TOOL else tool,
        parent=frame.parent if span.role is SpanRole.WRAPPER else span.span_id,
    )


def _runs(spans: Sequence[SpanRecord], members: dict[bytes | None, list[SpanRecord]]) -> list[_Run]:
    by_id = {s.span_id: s for s in spans}
    runs = [
        _Run(by_id[key], key, tuple(sorted(group, key=_order)))
        for key, group in members.items()
        if key is not None
    ]
    residual = tuple(sorted(members.get(None, ()), key=_order))
    if residual and (not runs or any(_holds_calls(s) for s in residual)):
        runs.append(_Run(_residual_root(residual), None, residual))
    return runs


def _holds_calls(span: SpanRecord) -> bool:
    return span.role is SpanRole.TOOL or (
        span.role is SpanRole.LLM and bool(span.output_tool_calls)
    )


def _residual_root(spans: Sequence[SpanRecord]) -> SpanRecord | None:
    """The root (no parent), else the only tree top, else ``None`` (synthetic root)."""
    ids = {s.span_id for s in spans}
    tops = [s for s in spans if s.parent_span_id not in ids]
    roots = [s for s in tops if s.parent_span_id is None]
    if len(roots) == 1:
        return roots[0]
    return tops[0] if len(tops) == 1 else None


def _tool_trace(
    trace: CompletedTrace,
    run: _Run,
    sites: dict[bytes, CallSite],
    normalize: NameNormalizer,
) -> ToolTrace:
    calls = build_calls(run.spans, sites, normalize)
    refusal = _refusal(run.spans)
    return ToolTrace(
        trace_id=trace.trace_id.hex(),
        run_span_id=run.span.span_id.hex() if run.span is not None else None,
        service=_first(run, lambda s: s.service),
        agent=_first(run, lambda s: s.agent_name),
        model=_first(run, lambda s: s.model if s.role is SpanRole.LLM else None),
        calls=calls,
        final_text=_final_text(run, sites),
        refusal=refusal is not None,
        refusal_reason=refusal,
        error_count=sum(c.status is CallStatus.ERROR for c in calls),
        complete=trace.complete,
        incomplete_reason=trace.incomplete_reason,
        start_ns=run.span.start_ns if run.span else min(s.start_ns for s in run.spans),
        end_ns=run.span.end_ns if run.span else max(s.end_ns for s in run.spans),
        span_count=len(run.spans),
        conversation_id=_first(run, lambda s: s.conversation_id),
        reference_keys=_reference_keys(run),
    )


def _by_precedence(run: _Run) -> Iterable[SpanRecord]:
    """The run span first, then the run's spans from the earliest."""
    if run.span is not None:
        yield run.span
    yield from run.spans


def _first(run: _Run, field: Callable[[SpanRecord], Any]) -> Any:
    """The first value of ``field`` that is not ``None``, by precedence."""
    return next((v for v in map(field, _by_precedence(run)) if v is not None), None)


def _reference_keys(run: _Run) -> dict[str, str]:
    """Configured attributes merged over the run: the run span wins, then the earliest."""
    merged: dict[str, str] = {}
    for span in _by_precedence(run):
        for key, value in span.reference_keys:
            merged.setdefault(key, value)
    return merged


def _final_text(run: _Run, sites: dict[bytes, CallSite]) -> str | None:
    """The run's own last model output that requested no tool, else the run span's."""
    answers = [
        s
        for s in run.spans
        if s.role is SpanRole.LLM
        and s.output_text
        and not s.output_tool_calls
        and _agent_id(sites[s.span_id]) == run.agent_id
    ]
    if answers:
        return max(answers, key=lambda s: (s.end_ns, s.start_ns, s.span_id)).output_text
    return run.span.output_text if run.span is not None else None


def _agent_id(site: CallSite) -> bytes | None:
    return site.agent.span_id if site.agent is not None else None


def _refusal(spans: Iterable[SpanRecord]) -> str | None:
    """The earliest refusal's reason (its text, or the finish reason), if any."""
    for span in spans:
        if span.role not in (SpanRole.LLM, SpanRole.AGENT):
            continue
        if span.refusal is not None:
            return span.refusal or "refusal"
        reason = next(
            (r for r in span.finish_reasons if r.casefold() in REFUSAL_FINISH_REASONS), None
        )
        if reason is not None:
            return reason
    return None
