"""Timeline: a completed trace's spans become one ToolTrace per agent run (DESIGN §5).

Runs. Each outermost AGENT span (one not nested in another AGENT span) is a run; every span
below it belongs to it, including nested agents (agent-as-tool: TOOL → AGENT → TOOL), whose
calls carry the outer call's id as ``parent_call_id``. Spans outside every agent form one
more run, the *residual* run, when the trace has no agent span at all or when they hold calls
(a tool called outside any agent is never lost). The residual run's span is the root if it
has one, else its only tree top; when the root is missing and several fragments remain they
are parts of one run whose root was lost, so they form one run with a synthetic root
(``run_span_id`` ``None``, times the min/max of its spans).

Orphaned second records. A TOOL span whose parent is missing from the trace, with nothing
below it in a run, that lies in time within a TOOL span of a run of the same tool
(normalized names, no other call id) is that call's second record, placed below it as if its
parent had come (``_place_second_records``): an instrumented MCP server exports its
``mcp.server`` > ``<tool>.tool`` with a batch processor of its own, and a batch boundary
between the two sends the parent after the trace was evaluated (dropped ``late``). It is a
span of the call's run, merged into the call as any second record is
(``records._second_records``), never a residual run re-making a call the run recorded. An
orphaned TOOL span that matches no call by name and time stays outside every agent: a call
of the residual run, evaluated.

Guardrails. An agent that a guardrail runs (an AGENT span below a GUARDRAIL span of the run,
no agent or tool between: the OpenAI Agents SDK's guardrail function calling ``Runner.run`` on
a checker agent) is a run of its own, without reference keys (the canary case id or shadow
pair key on the resource is the checked run's), as OpenLLMetry, which writes no guardrail
span and hangs that agent off the workflow root, shows it: it checks the run, it is not part
of it. Its model calls end after the run's own (an output guardrail runs on the final
output; an input guardrail beside the first model call), so taken as the run's they were its
last output, its verdict the run's final text, and a refusal under a guardrail read as an
answer. Nor is a model call a guardrail makes itself the run's output: one below a GUARDRAIL
span (``_guardrail_calls``), or, where no guardrail span is written (OpenLLMetry), the
client's span alone beside an agent's turns that are each recorded twice, the framework's
span with the client's inside (``_calls_beside_double_records``), or under an agent whose
instrumentation records each of its turns and recorded none (``_calls_of_no_turn``: a
blocking input guardrail that tripped; the run refused).

Workflow spans. An AGENT span that does no work of its own (no LLM or TOOL span has it as
nearest agent) but contains other AGENT spans is a workflow, not an agent run: OpenInference
and the contrib openai-agents-v2 instrumentation map the OpenAI Agents SDK *trace* to such a
root (``Agent workflow``, OpenInference kind AGENT / contrib SERVER ``invoke_agent``). It is
treated as a plain span, so the agents inside it are the runs, as with OpenLLMetry, whose
workflow root is not an agent span.

Handoffs. The OpenAI Agents SDK ends an agent's span when it hands the conversation off and
starts the next agent's as its sibling: the agents of one request are sibling runs. A run
that hands off (the call of ``transfer_to_<agent>``, or a handoff span: every exporter
writes one, most naming the agent) and the sibling run of the agent it names, started once
it ended, are one run, led by the first agent, its ``agents`` naming each
(``_joined_at_handoffs``): a refund the second agent makes is verified by the first agent's
lookup, as in one agent. A handoff span that names no one (OpenLLMetry's) hands off to a
sibling started at once (within 10 ms) when no call names one of the siblings (a renamed
handoff tool). Only the run's own agents hand off: a handoff inside an agent used as a tool
is that tool call's.

Lost nesting. OpenLLMetry's openai-agents instrumentation (0.62) parents the agent that
``as_tool()`` runs under the workflow root, a sibling of the calling agent, not under the
tool span; only time says the tool ran it. An AGENT span with no TOOL ancestor is therefore
adopted by a TOOL span when that tool belongs to another agent, has no AGENT span below it,
lies below the agent's own parent (the agent hangs from a common ancestor, not from
elsewhere) and contains the agent's whole interval; the innermost such tool wins. The tool is
then the agent's parent for run membership and ``parent_call_id``. A handoff never matches:
the next agent starts after the handing-off agent's tools have ended. What no span can tell
apart: two agents run concurrently under one orchestrator, one wholly inside a tool call of
the other, read as agent-as-tool.

Split nesting. OpenLLMetry's LangChain instrumentation (0.62) writes the agent a tool runs as
an empty AGENT span beside the span holding its work, both children of the TOOL span
(``execute_tool refund_desk`` > [``invoke_agent refund_desk_agent``, ``execute_task
refund_desk_agent``]); only time says the agent did that work. So a span that is no AGENT,
directly under a TOOL span, is adopted by an AGENT sibling (directly under the same TOOL span)
whose interval contains its own; of several, the innermost. The agent is then the work's
parent: the calls below it are that agent's, as under every other producer, not the outer
agent's. Only traces with an AGENT span directly under a TOOL span are checked.

Per run: calls come from ``toolwatch.assembly.calls``; ``error_count`` counts failed tool
calls only (an LLM or agent span in error is not a tool-call failure); ``final_text`` is the
text of the run's own last model output that requested no tool, else the run span's output
text; a refusal is a ``refusal`` on any LLM or AGENT span of the run or a refusal finish
reason, the earliest one giving the reason. The run's own outputs include those of an agent
it transferred to inside its span (ADK ``transfer_to_agent``: no TOOL span between), not
those of an agent it used as a tool (below a TOOL span): they are that tool's result.

The work is split by step, a module each (they share private helpers, package-internal):
``tree`` (the spans' tree, in time order; workflows; "Lost nesting" and "Split nesting"),
``missing`` (a run whose model spans' input histories show earlier model calls it does not
hold, and name no tool call or one it does not know: judged incomplete, ``missing_spans``,
whatever the buffer said),
``placing`` (each span's call site and run; "Orphaned second records"), ``runs`` (the runs;
"Handoffs"), ``checks`` (a guardrail's own model calls; "Guardrails"), ``keys`` (each run's
reference keys, from its spans and those above it), ``outputs`` (its final text and
refusal), and this module: ``build_tool_traces``, each run's ToolTrace.

Pure: the same set of spans gives the same ToolTraces whatever their order.
"""

from __future__ import annotations

from toolwatch.assembly.calls import CallSite, build_calls
from toolwatch.assembly.checks import (
    _NO_SPANS,
    NO_TURN_AFTER_CHECK,
    _calls_beside_double_records,
    _guardrail_calls,
)
from toolwatch.assembly.completed import CompletedTrace
from toolwatch.assembly.keys import _Above, _above_runs, _reference_keys
from toolwatch.assembly.missing import MISSING_SPANS, TraceIds, lacks_spans
from toolwatch.assembly.outputs import REFUSAL_FINISH_REASONS, _final_text, _refusal
from toolwatch.assembly.placing import _place, _place_second_records
from toolwatch.assembly.runs import _joined_at_handoffs, _Run, _runs
from toolwatch.assembly.tree import _adoptions, _in_time_order, _Tree, _workflows
from toolwatch.model import CallStatus, SpanRecord, SpanRole
from toolwatch.model_traces import ToolCall, ToolTrace
from toolwatch.names import NameNormalizer

__all__ = ["REFUSAL_FINISH_REASONS", "build_tool_traces"]


def build_tool_traces(
    trace: CompletedTrace, normalize: NameNormalizer, *, from_history: bool = False
) -> list[ToolTrace]:
    """One ToolTrace per run of ``trace``, ordered by start time then run span id."""
    by_id = trace.by_id  # the buffer's, when it made the trace
    if by_id is None:
        by_id = {s.span_id: s for s in trace.spans}  # a span sent twice counts once
    spans = _in_time_order(list(by_id.values()))
    recorded = _Tree(spans, by_id, {})
    adopted = _adoptions(spans, recorded, by_id)
    tree = _Tree(spans, by_id, adopted) if adopted else recorded
    workflows = _workflows(spans, tree)
    sites = _place(spans, tree, workflows, by_id)
    if len(tree.tops) > 1:  # a fragment whose parent is missing: maybe a call's second record
        _place_second_records(spans, tree, workflows, sites, by_id, normalize=normalize)
    runs = _runs(spans, by_id, sites)
    if len(runs) > 1:
        runs = _joined_at_handoffs(runs, sites)
    above = _above_runs(runs, by_id, sites)
    ids = TraceIds(spans)  # read once, at a run's first question, for all the runs
    built = [
        _tool_trace(
            trace,
            run,
            sites,
            normalize,
            above[i],
            by_id=by_id,
            judged=_judged(trace, run, ids, from_history),
        )
        for i, run in enumerate(runs)
    ]
    if len(built) < 2:
        return built
    return sorted(built, key=lambda t: (t.start_ns, t.run_span_id or ""))


def _tool_trace(
    trace: CompletedTrace,
    run: _Run,
    sites: dict[bytes, CallSite],
    normalize: NameNormalizer,
    above: _Above,
    *,
    by_id: dict[bytes, SpanRecord],
    judged: tuple[bool, str | None],
) -> ToolTrace:
    keyed, own, shared = above
    ranked = _by_precedence(run)
    identity = _Identity(ranked)
    checks = _guardrail_calls(run) if identity.guarded else _NO_SPANS
    unheld = _calls_beside_double_records(run, sites, by_id)
    if unheld:
        checks = checks | unheld
    # The calls a guardrail's own check asked for (a classifier by function calling) are
    # not the agent's.
    made = tuple(s for s in run.spans if s.span_id not in checks) if checks else run.spans
    calls = build_calls(made, sites, normalize, checks)
    refusal = _refusal(run, sites, checks)
    if refusal is None and unheld and not any(s.role is SpanRole.LLM for s in made):
        # A guardrail's check, and no turn of the agent's after it (``_calls_of_no_turn``):
        # the only thing that stops the SDK between the two is the guardrail tripping.
        refusal = NO_TURN_AFTER_CHECK
    # A run whose agent has an agent above it is a guardrail's checker (only a guardrail
    # starts a run below another's): the canary case id or shadow pair key its resource
    # carries is the checked run's, so the checker is judged by the policy alone.
    checker = run.agent_id is not None and sites[run.agent_id].agent is not None
    return ToolTrace(
        trace_id=trace.trace_id.hex(),
        run_span_id=run.span.span_id.hex() if run.span is not None else None,
        service=identity.service,
        agent=identity.agent,
        model=identity.model,
        calls=calls,
        final_text=_final_text(run, sites, checks),
        refusal=refusal is not None,
        refusal_reason=refusal,
        error_count=sum(c.status is CallStatus.ERROR for c in calls),
        complete=judged[0],
        incomplete_reason=judged[1],
        start_ns=run.span.start_ns if run.span else min(s.start_ns for s in run.spans),
        end_ns=run.end_ns,
        span_count=len(run.spans),
        conversation_id=identity.conversation_id,
        reference_keys={} if checker else _reference_keys(ranked if keyed is None else keyed, own),
        agents=_agents(run, identity.agent, calls),
        shared_keys=None if checker or not shared else _reference_keys((), shared),
    )


def _judged(
    trace: CompletedTrace, run: _Run, ids: TraceIds, from_history: bool
) -> tuple[bool, str | None]:
    """``(complete, incomplete_reason)`` of ``run``: the buffer's, unless in a trace it judged
    complete the run lacks spans its own model spans' histories show (``missing``: a history
    is a run's, the call ids it names are looked for in all the trace's spans, ``ids``; with
    ``from_history``, ``assembly.missing_spans_from_history``)."""
    if from_history and trace.complete and lacks_spans(run.spans, ids):
        return False, MISSING_SPANS
    return trace.complete, trace.incomplete_reason


def _agents(run: _Run, agent: str | None, calls: tuple[ToolCall, ...]) -> tuple[str, ...]:
    """The run's agent, then each other agent named by an AGENT span of the run, then any
    other agent a call was made by (a coworker a CrewAI delegation ran, which OpenInference
    writes no span for), once."""
    names = [agent] if agent is not None else []
    seen = set(names)  # a run of thousands of agents (handoffs) would search the list each time
    for span in run.spans:  # in time order
        name = span.agent_name
        if span.role is SpanRole.AGENT and name is not None and name not in seen:
            names.append(name)
            seen.add(name)
    for call in calls:
        name = call.agent
        if name is not None and name not in seen:
            names.append(name)
            seen.add(name)
    return tuple(names)


def _by_precedence(run: _Run) -> tuple[SpanRecord, ...]:
    """The run span first, then the run's spans from the earliest."""
    return run.spans if run.span is None else (run.span, *run.spans)


class _Identity:
    """Who ran the run: for each field, the first value that is not ``None`` by precedence
    (the model from LLM spans only). One pass over the spans for the four fields."""

    __slots__ = ("agent", "conversation_id", "guarded", "model", "service")

    def __init__(self, ranked: tuple[SpanRecord, ...]) -> None:
        self.service: str | None = None
        self.agent: str | None = None
        self.model: str | None = None
        self.conversation_id: str | None = None
        self.guarded = False  # the run holds a GUARDRAIL span
        for span in ranked:
            if span.role is SpanRole.GUARDRAIL:
                self.guarded = True
            if self.service is None:
                self.service = span.service
            if self.agent is None:
                self.agent = span.agent_name
            if self.model is None and span.role is SpanRole.LLM:
                self.model = span.model
            if self.conversation_id is None:
                self.conversation_id = span.conversation_id
