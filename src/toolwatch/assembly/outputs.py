"""What a run said (``timeline``): its final text, and its refusal (a model's, a guardrail
that tripped, a guard that raised).
"""

from __future__ import annotations

from typing import Final

from toolwatch.assembly.calls import CallSite
from toolwatch.assembly.checks import _wrappers
from toolwatch.assembly.runs import _Run
from toolwatch.conventions.attrs import (
    REFUSAL_REASONS,
)
from toolwatch.conventions.fields import GUARD_RAISED
from toolwatch.model import SpanRecord, SpanRole

__all__ = ["REFUSAL_FINISH_REASONS"]

#: Finish reasons that mean the model refused or was filtered (OpenAI ``content_filter``,
#: Vercel ``content-filter``, Gemini ``safety`` and its other blocks, Bedrock and Strands
#: ``content_filtered`` and ``guardrail_intervened``; CONVENTIONS §5, §8): the conventions'
#: ``REFUSAL_REASONS``. Compared case-folded.
REFUSAL_FINISH_REASONS: Final = REFUSAL_REASONS

# Finish reasons seen, and whether each means a refusal: ``str.casefold`` is a method call
# in compiled code, four times the cost of this lookup, on every model span. The reasons are
# a small vocabulary of short words; past these bounds (hostile input: many reasons, or long
# ones, which would stay held for the life of the process), they are folded each time.
_REFUSES: Final[dict[str, bool]] = {}
_MAX_REASONS: Final = 1024
_MAX_REASON_LENGTH: Final = 64


def _final_text(run: _Run, sites: dict[bytes, CallSite], checks: frozenset[bytes]) -> str | None:
    """The run's own last model output that requested no tool, else the output of its last
    agent (``_last_agent``); not a guardrail's check (``checks``: ``_guardrail_calls``,
    ``_calls_beside_double_records``)."""
    answers = [
        s
        for s in run.spans
        if s.role is SpanRole.LLM
        and s.output_text
        and not s.output_tool_calls
        and s.span_id not in checks
        and _speaks_for_run(sites[s.span_id], run)
    ]
    if answers:
        return _last_ended(answers).output_text
    last = _last_agent(run, sites)
    return last.output_text if last is not None else None


def _last_ended(spans: list[SpanRecord]) -> SpanRecord:
    """The span of ``spans`` (not empty) that ended last; of those, the last started, then the
    highest span id: ``max`` by (end, start, span id), without a key tuple per span through
    an interpreted lambda (most runs have one answer)."""
    last = spans[0]
    for i in range(1, len(spans)):
        span = spans[i]
        if span.end_ns != last.end_ns:
            later = span.end_ns > last.end_ns
        elif span.start_ns != last.start_ns:
            later = span.start_ns > last.start_ns
        else:
            later = span.span_id > last.span_id
        if later:
            last = span
    return last


def _last_agent(run: _Run, sites: dict[bytes, CallSite]) -> SpanRecord | None:
    """The run span, or, in a run joined at handoffs, the span of the agent handed over to
    last (the one that ended last of the joined runs' spans): it spoke last. Where the model
    spans say no answer: OpenInference on Google ADK 2.x writes all of an agent's model calls
    on one span, whose requests (an earlier call's) make its text no answer, while each
    agent's span holds its answer."""
    last = run.span
    if last is None:
        return None
    for span in run.spans:
        if (
            span.role is SpanRole.AGENT
            and sites[span.span_id].run == span.span_id  # a joined run's own span
            and (span.end_ns, span.start_ns, span.span_id)
            > (last.end_ns, last.start_ns, last.span_id)
        ):
            last = span
    return last


def _speaks_for_run(site: CallSite, run: _Run) -> bool:
    """Whether a span's output is its run's: its nearest agent is the run's, or an agent the
    run handed over to inside itself (no TOOL span between: ADK's ``transfer_to_agent``).
    An agent below a TOOL span is used as a tool: its output is the tool's result. (The
    TOOL check only runs for spans of a nested agent.)"""
    agent = site.agent
    return (agent.span_id if agent is not None else None) == run.agent_id or site.tool is None


def _refusal(run: _Run, sites: dict[bytes, CallSite], checks: frozenset[bytes]) -> str | None:
    """The run's refusal reason (its text, or the finish reason), if it refused: the run
    span's own, else that of the run's last output. Its outputs are the LLM spans that speak
    for it (an agent it handed over to included; one used as a tool not: that refusal is its
    caller's result to handle) and the refusals on the spans of agents it handed over to
    (their own final word). A model span that holds an agent (ADK's call_llm, inside which
    transfer_to_agent's agent runs) is not one: it ends after that agent's outputs, and its
    own output was the transfer. A model call that refused and was followed by one that
    answered (a content filter the agent retried past) is not the run's refusal. Nor is a
    guardrail's own model call one of its outputs (``checks``: ``_guardrail_calls``,
    ``_calls_beside_double_records``). A guardrail of
    the run that tripped (not inside a tool's execution, an agent used as a tool included:
    that is the tool's failure) refused the run whatever the model said: the OpenAI Agents
    SDK raises, before the answer or withholding it; the first to trip is the reason. So did
    a plain span that says one tripped (``fields.tripwire_refusal``: the SDK's turn span,
    whose status message is the only word of an input guardrail's trip under OpenInference).
    A Guardrails AI guard that raised (``fields.GUARD_RAISED``) refused as a model does: it
    is the run's refusal when nothing that speaks for the run answered after it (an
    application may catch the error, and retry or fall back)."""
    if run.span is not None:
        reason = _refusal_of(run.span)
        if reason is not None:
            return reason
    models: list[SpanRecord] = []
    tripped: SpanRecord | None = None
    held: set[bytes] | None = None  # the parents of nested agents' spans
    # Spans that refuse as outputs do (the last word counts): nested agents' own spans that
    # refuse, and Guardrails AI guards that raised.
    said: list[SpanRecord] | None = None
    for span in run.spans:
        role = span.role
        if role is SpanRole.LLM:
            # A model span that recorded no output (a framework's wrapper around the
            # client's call, ending after it) says nothing of a refusal.
            if span.span_id not in checks:
                models.append(span)
        elif (
            (role is SpanRole.GUARDRAIL or role is SpanRole.OTHER)
            and span.refusal is not None
            and sites[span.span_id].tool is None
            and _speaks_for_run(sites[span.span_id], run)
        ):
            if span.refusal == GUARD_RAISED:  # weighed against the outputs after it
                if said is None:
                    said = []
                said.append(span)
            elif tripped is None or _later(tripped, span):
                tripped = span
        elif role is SpanRole.AGENT and span is not run.span:
            if held is None:
                held = set()
            if span.parent_span_id is not None:
                held.add(span.parent_span_id)
            # Its nearest agent is the run's even when a TOOL span holds it (agent-as-tool),
            # so only the TOOL check tells.
            if _refusal_of(span) is not None and sites[span.span_id].tool is None:
                if said is None:
                    said = []
                said.append(span)
    if tripped is not None:
        return _refusal_of(tripped)
    wrappers: frozenset[bytes] | None = None  # read once a model span says nothing
    last: SpanRecord | None = None
    for span in models:
        if held is not None and span.span_id in held:
            continue
        if not _says_something(span):
            if wrappers is None:
                wrappers = _wrappers(run.spans)
            if span.span_id in wrappers:
                continue  # a framework's wrapper around the client's call: the inner one speaks
        if last is not None and not _later(span, last):
            continue
        if _speaks_for_run(sites[span.span_id], run):
            last = span
    for span in said or ():
        if last is None or _later(span, last):
            last = span
    return _refusal_of(last) if last is not None else None


def _says_something(span: SpanRecord) -> bool:
    return bool(span.output_text or span.refusal or span.finish_reasons or span.output_tool_calls)


def _later(span: SpanRecord, than: SpanRecord) -> bool:
    """Whether ``span`` ended after ``than`` (ties: the later start, then span id)."""
    if span.end_ns != than.end_ns:
        return span.end_ns > than.end_ns
    return _ended(span) > _ended(than)


def _ended(span: SpanRecord) -> tuple[int, int, bytes]:
    return (span.end_ns, span.start_ns, span.span_id)


def _refusal_of(span: SpanRecord) -> str | None:
    if span.refusal is not None:
        return span.refusal or "refusal"
    for reason in span.finish_reasons:
        if _refuses(reason):
            return reason
    return None


def _refuses(reason: str) -> bool:
    """Whether a finish reason means a refusal (case-folded, remembered)."""
    known = _REFUSES.get(reason)
    if known is None:
        known = reason.casefold() in REFUSAL_FINISH_REASONS
        if len(_REFUSES) < _MAX_REASONS and len(reason) <= _MAX_REASON_LENGTH:
            _REFUSES[reason] = known
    return known
