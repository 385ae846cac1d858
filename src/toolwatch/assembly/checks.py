"""A guardrail's own model calls (``timeline``): they check the run, they are neither its
output nor the askers of its calls (the ``timeline`` docstring's "Guardrails").
"""

from __future__ import annotations

from typing import Final

from toolwatch.assembly.calls import CallSite
from toolwatch.assembly.keys import _MAX_ANCESTORS
from toolwatch.assembly.runs import _Run
from toolwatch.conventions import guardrails_ai, openllmetry
from toolwatch.model import SpanRecord, SpanRole

__all__: list[str] = []


def _guardrail_calls(run: _Run) -> frozenset[bytes]:
    """The model calls a guardrail of the run made itself (an LLM span below a GUARDRAIL
    span, no AGENT between: an OpenAI Agents SDK guardrail function calling the model
    client, a Guardrails AI validator judging by a model): they check the run, they are not
    its output (an output guardrail's ends after the run's answer, and read as the run's it
    was its last output, a refusal read as an answer; a tripped input guardrail's verdict
    would be the answer the run never gave), and the calls they ask for are not the run's.
    A Guardrails AI guard around the application's own model call is no guardrail here
    (``conventions.guardrails_ai``): that call is the run's step."""
    by_id: dict[bytes, SpanRecord] | None = None
    checks: list[bytes] = []
    for span in run.spans:
        if span.role is SpanRole.LLM:
            if by_id is None:
                by_id = {s.span_id: s for s in run.spans}
            if _below_guardrail(span, by_id):
                checks.append(span.span_id)
    return frozenset(checks) if checks else _NO_SPANS


def _calls_beside_double_records(
    run: _Run, sites: dict[bytes, CallSite], by_id: dict[bytes, SpanRecord]
) -> frozenset[bytes]:
    """The model calls made beside an agent whose own turns are each recorded twice, with
    no guardrail span to say so: they are checks (``_guardrail_calls``), not its turns.

    OpenLLMetry, with its ``openai`` instrumentation on beside its openai-agents one (as
    ``Traceloop.init()`` does), records each of the agent's model calls twice: the SDK's
    model span directly under the agent span, the client's directly inside it. It writes no
    guardrail span, so a guardrail function calling the client itself leaves the client's
    span alone, directly under the agent: no model span above it (no SDK span: the SDK did
    not make the call) and none below. Read as the agent's, an output guardrail's verdict
    was the run's final text and hid its refusal (``*__refusal_output_guardrail_client``).

    So a model span is one here when all of these hold: its parent is an AGENT span of the
    run; that agent span also directly holds a model span holding another as its child (a
    turn recorded twice); it holds no model span itself; and it looks like those inner
    records, the client's (same name, kind and convention). Each condition keeps the rule
    off what it must not touch:

    * a framework that records each model call once (CrewAI with OpenLLMetry: the client's
      spans directly under the agent) has no turn recorded twice, so none is excluded;
    * a model call outside every agent (an own loop on the client beside a Guardrails AI
      guard whose callable span holds the client's) or below a plain span, a tool's or a
      turn's (a tool that calls the model), is not beside the agent's turns;
    * per agent: in a run of several (a handoff, an agent an agent transferred to), one
      recording its turns twice says nothing of the other's;
    * a model span that looks like the framework's records, not the client's (a turn made
      through a model the client instrumentation does not patch, under an instrumentation
      that names its spans apart), is the agent's turn.

    With no turn recorded twice the agent may have made no turn at all: a blocking input
    guardrail (``run_in_parallel=False``) that trips before the agent's model is called
    (``*__input_guardrail_blocking_client``, ``_stream``) leaves the guardrail's call alone
    under the agent, the run's only model span, its verdict read as the agent's answer and
    the refusal hidden. Where the agent's span is OpenLLMetry's openai-agents instrumentation's
    (``_records_each_turn``), that instrumentation records every turn the agent takes, as a
    model span of a status (it sets OK or ERROR on each span it writes); the client's span
    of a call not streamed has none. So a model span directly under such an agent span, of
    no status and holding no model span, is one here too when the agent holds no model
    span of a status: the SDK recorded no turn of that agent (``_calls_of_no_turn``). A
    plain loop on the client under OpenLLMetry (its client spans ARE the turns) has no such
    agent span, nor has CrewAI (its agent span hangs off a task span), so theirs stay turns.

    What no span tells apart: a framework whose spans look like the client's (OpenLLMetry:
    both ``openai.response``, CLIENT) and one of whose turns lost its client record (a span
    dropped) reads that turn as a check; and an agent whose every SDK record was dropped
    reads the client's records of its turns as checks. A guardrail whose own client call
    streams (the client's span then ends OK) before the agent's first turn is still read as
    the agent's. The calls such a check asks for are not the run's; tool spans are (the SDK
    runs only the tools its own model asked for, and a tool span joined to a check's
    request would be hidden from the policy if the join were wrong)."""
    models = [s for s in run.spans if s.role is SpanRole.LLM]
    if len(models) < 3:  # a turn recorded twice and a call beside it, at least
        # ... or a call under an agent that made no turn (one model span, usually).
        return _calls_of_no_turn(models, sites, by_id) if models else _NO_SPANS
    # Most runs record each call once: one set and one pass tell, no map of every span.
    by_model = {s.span_id: s for s in models}
    inner: dict[bytes, set[tuple[str, int, str]]] = {}  # agent span id -> its inner records' looks
    for span in models:
        parent = span.parent_span_id
        outer = by_model.get(parent) if parent is not None else None
        if outer is None:
            continue
        agent = sites[outer.span_id].agent  # its nearest agent: its parent, for a turn
        if agent is not None and outer.parent_span_id == agent.span_id:
            inner.setdefault(agent.span_id, set()).add(_look(span))
    if not inner:
        return _calls_of_no_turn(models, sites, by_id)
    holding = _wrappers(run.spans)
    found = [
        s.span_id
        for s in models
        if s.parent_span_id in inner
        and s.span_id not in holding
        and _look(s) in inner[s.parent_span_id]
    ]
    return frozenset(found) if found else _NO_SPANS


def _calls_of_no_turn(
    models: list[SpanRecord], sites: dict[bytes, CallSite], by_id: dict[bytes, SpanRecord]
) -> frozenset[bytes]:
    """The model spans directly under an agent whose instrumentation records each of its
    turns (``_records_each_turn``) and recorded none: of no status (the client's, not the
    framework's), holding no model span, their agent holding no model span of a status
    (``_calls_beside_double_records``). ``models``: the run's model spans, none with no
    turn recorded twice beside it in its agent."""
    unset: list[SpanRecord] | None = None
    turned: set[bytes] | None = None  # agents holding a model span of a status: a turn
    for span in models:
        agent = sites[span.span_id].agent
        if agent is None or span.parent_span_id != agent.span_id:
            continue
        if span.status_code != _STATUS_UNSET:
            if turned is None:
                turned = set()
            turned.add(agent.span_id)
        elif agent.convention == _OPENLLMETRY:
            if unset is None:
                unset = []
            unset.append(span)
    if unset is None:  # the usual run: no client-only call under an OpenLLMetry agent
        return _NO_SPANS
    outer = {s.parent_span_id for s in models}  # a span holding a model span is a turn
    found = [
        s.span_id
        for s in unset
        if (turned is None or s.parent_span_id not in turned)
        and s.span_id not in outer
        and _records_each_turn(sites[s.span_id].agent, by_id)
    ]
    return frozenset(found) if found else _NO_SPANS


#: The refusal reason of a run whose agent took no turn after a guardrail's check
#: (``_calls_of_no_turn``): a blocking input guardrail tripped, unrecorded (OpenLLMetry).
NO_TURN_AFTER_CHECK: Final = "guardrail check stopped the run before the agent's first turn"
#: OTLP's status code of a span whose instrumentation set none.
_STATUS_UNSET: Final = 0
_OPENLLMETRY: Final = openllmetry.CONVENTION.name
#: The root span OpenLLMetry's openai-agents instrumentation (0.62) writes for the SDK's
#: trace, whatever the workflow's name (``traceloop.span.kind`` ``workflow``).
_AGENTS_WORKFLOW: Final = "Agent Workflow"


def _records_each_turn(agent: SpanRecord | None, by_id: dict[bytes, SpanRecord]) -> bool:
    """Whether ``agent`` is the span of OpenLLMetry's openai-agents instrumentation, which
    writes a model span for each turn the agent takes: an OpenLLMetry agent span whose
    parent, as recorded, is that instrumentation's workflow root (an agent run as a tool, or
    handed off to, hangs from it too). CrewAI's agent spans hang off a task span."""
    if agent is None or agent.convention != _OPENLLMETRY or agent.parent_span_id is None:
        return False
    parent = by_id.get(agent.parent_span_id)
    return (
        parent is not None
        and parent.name == _AGENTS_WORKFLOW
        and parent.convention == _OPENLLMETRY
        and parent.role is SpanRole.OTHER
    )


def _look(span: SpanRecord) -> tuple[str, int, str]:
    """What tells one producer's model spans from another's, as far as a record says."""
    return (span.name, span.kind, span.convention)


def _in_agent_above(span: SpanRecord, by_id: dict[bytes, SpanRecord]) -> list[SpanRecord]:
    """The run's spans above ``span`` up to its nearest AGENT span (not included), nearest
    first, at most ``_MAX_ANCESTORS``."""
    found: list[SpanRecord] = []
    parent = span.parent_span_id
    while parent is not None and len(found) < _MAX_ANCESTORS:
        above = by_id.get(parent)
        if above is None or above.role is SpanRole.AGENT:
            break
        found.append(above)
        parent = above.parent_span_id
    return found


def _models_above(span: SpanRecord, by_id: dict[bytes, SpanRecord]) -> list[bytes]:
    """The model spans above ``span`` in its agent, nearest first."""
    return [a.span_id for a in _in_agent_above(span, by_id) if a.role is SpanRole.LLM]


def _below_guardrail(span: SpanRecord, by_id: dict[bytes, SpanRecord]) -> bool:
    above = _in_agent_above(span, by_id)
    return any(
        a.role is SpanRole.GUARDRAIL
        and not _part_of_guard(a, above[i + 1] if i + 1 < len(above) else None)
        for i, a in enumerate(above)
    )


#: The spans of a streaming Guardrails AI guard that carry only the kind GUARDRAIL, not
#: ``guardrails.version`` (guardrails-ai 0.11.0 writes its attributes only for a call that
#: is no stream), under the guard's ``step``: its ``call``, and the span each chunk is
#: validated in (``stream_guard_span``; ``async_stream_span`` for an async guard, from
#: guardrails' source, not captured here), inside which the application's code runs.
_STREAMING_GUARD_SPANS: Final = frozenset({"call", "stream_guard_span", "async_stream_span"})


def _part_of_guard(guardrail: SpanRecord, parent: SpanRecord | None) -> bool:
    """A streaming Guardrails AI guard's own ``call`` (or ``stream_guard_span``): kind
    GUARDRAIL alone, right below the guard's ``step`` (``conventions.guardrails_ai``). The
    application's model call inside it is the run's, as in a guard that does not stream."""
    return (
        parent is not None
        and guardrail.name in _STREAMING_GUARD_SPANS
        and parent.name == "step"
        and parent.convention == guardrails_ai.NAME
        and guardrail.convention != guardrails_ai.NAME
    )


_NO_SPANS: Final[frozenset[bytes]] = frozenset()


def _wrappers(spans: tuple[SpanRecord, ...]) -> frozenset[bytes]:
    """The model spans that hold another model span, its nearest model span above (a
    framework's wrapper around the client's call)."""
    by_id = {s.span_id: s for s in spans}
    found: set[bytes] = set()
    for span in spans:
        if span.role is SpanRole.LLM:
            above = _models_above(span, by_id)
            if above:
                found.add(above[0])
    return frozenset(found)
