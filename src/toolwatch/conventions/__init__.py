"""Convention recognizers: what a span is (agent run, tool execution, model call, wrapper,
other) and its role's fields, whatever instrumentation wrote it (CONVENTIONS.md).

CONVENTIONS.md ("CONVENTIONS.md §N" throughout) is the team's design notes, kept outside this
repository, not shipped; see docs/observed-conventions.md and docs/instrumenting.md instead.

``recognize`` classifies in Langfuse's proven priority (CONVENTIONS.md §6 step 2): an
explicit vendor kind (``openinference.span.kind``, ``traceloop.span.kind``,
``langsmith.span.kind``) > ``gen_ai.operation.name`` > Google ADK's ``call_llm`` span > the
Vercel AI SDK's ``ai.operationId`` > Logfire's message template > Guardrails AI's own spans
(``guardrails.version`` on those around the application's model call, ``on_fail_descriptor``
on its validators; with the OpenInference kind GUARDRAIL they are told apart by that rule)
> a tool-name / call-id attribute (pydantic-ai v1/v2) > legacy OpenLLMetry LLM attributes >
span names. Ingest reads only ``ATTRIBUTE_KEYS`` (exact) and ``ATTRIBUTE_PREFIXES``
(flattened keys) and decodes only ``EVENT_NAMES`` events, with only their
``EVENT_ATTRIBUTE_KEYS``. Pure functions; no protobuf here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from toolwatch.conventions import (
    crewai,
    genai,
    google_adk,
    guardrails_ai,
    history,
    langsmith,
    logfire,
    openinference,
    openllmetry,
    pydantic_ai,
    vercel_ai,
)
from toolwatch.conventions.attrs import (
    AgentSpec,
    Attributes,
    Convention,
    EventSource,
    Recognition,
    RoleFields,
    SpanEvent,
    ToolSpec,
)
from toolwatch.conventions.events import EVENT_ATTRIBUTE_KEYS
from toolwatch.conventions.events import EVENT_NAMES as _OUTPUT_EVENT_NAMES
from toolwatch.conventions.fields import (
    FieldBuilder,
    agent_fields,
    guard_raised_refusal,
    guardrail_fields,
    handoff_fields,
    llm_fields,
    tool_fields,
    tripwire_refusal,
)
from toolwatch.model import SpanRole

__all__ = [
    "ATTRIBUTE_KEYS",
    "ATTRIBUTE_PREFIXES",
    "EVENT_ATTRIBUTE_KEYS",
    "EVENT_NAMES",
    "Attributes",
    "EventSource",
    "Recognition",
    "RoleFields",
    "SpanEvent",
    "classify",
    "recognize",
]

#: Every exact attribute key a recognizer reads (besides configured reference keys).
ATTRIBUTE_KEYS: Final[frozenset[str]] = (
    genai.KEYS
    | google_adk.KEYS
    | crewai.KEYS
    | openinference.KEYS
    | openllmetry.KEYS
    | pydantic_ai.KEYS
    | vercel_ai.KEYS
    | logfire.KEYS
    | langsmith.KEYS
    | guardrails_ai.KEYS
    | history.KEYS
)
#: The span events ingest decodes: those the recognizers read a span's output and a tool's
#: call from, and the per-message events a model call's input history is read from.
EVENT_NAMES: Final[frozenset[str]] = _OUTPUT_EVENT_NAMES | history.EVENT_NAMES
#: Prefixes of the flattened, indexed keys a recognizer reads.
ATTRIBUTE_PREFIXES: Final[tuple[str, ...]] = (
    openinference.OUTPUT_PREFIX,
    openllmetry.COMPLETION_PREFIX,
    genai.PARAMETERS_PREFIX,
)

_Rule = Callable[[str, Attributes], tuple[SpanRole, Convention] | None]

# Highest priority first; the first rule that decides wins. A rule with a trigger key is
# consulted only when the span has that key (a dict lookup is cheaper than a call).
_NAME_RULES: Final[tuple[tuple[str | None, _Rule], ...]] = (
    (None, pydantic_ai.classify_by_name),
    (None, genai.classify_by_name),
)
_RULES: Final[tuple[tuple[str | None, _Rule], ...]] = (
    # (Guardrails AI's own spans with the OpenInference kind are told apart there.)
    # A CrewAI crew's own span: a run, whose agents work its tasks (its OpenInference kind
    # says CHAIN; OpenLLMetry's is an agent span with no name).
    (crewai.CREW_NAME, crewai.classify_crew),
    (crewai.CREW_KEY, crewai.classify_crew),
    ("openinference.span.kind", openinference.classify),
    ("traceloop.span.kind", openllmetry.classify),
    (langsmith.SPAN_KIND, langsmith.classify),
    (genai.OPERATION_NAME, genai.classify),
    (genai.ADK_LLM_RESPONSE, genai.classify_adk_call_llm),
    (vercel_ai.OPERATION_ID, vercel_ai.classify),
    (logfire.MSG_TEMPLATE, logfire.classify),
    # Guardrails AI's spans without a kind: guardrails-ai 0.5.0's validators.
    (guardrails_ai.VERSION, guardrails_ai.classify_guard),
    (guardrails_ai.VALIDATOR, guardrails_ai.classify_guard),
    (None, pydantic_ai.classify_tool_keys),
    (None, openllmetry.classify_legacy_llm),
    *_NAME_RULES,
)

_FIELD_BUILDERS: Final[dict[SpanRole, FieldBuilder]] = {
    SpanRole.TOOL: tool_fields,
    SpanRole.LLM: llm_fields,
    SpanRole.AGENT: agent_fields,
    SpanRole.GUARDRAIL: guardrail_fields,
}

_UNRECOGNIZED: Final = Convention(
    name="",
    tool=ToolSpec((), (), (), (), name_from_span=lambda name: None),
    agent=AgentSpec((), (), name_from_span=lambda name: None),
)


def classify(name: str, attrs: Attributes) -> tuple[SpanRole, Convention]:
    """The span's role and the convention that decided it (``OTHER`` and ``""`` if none)."""
    for trigger, rule in _RULES if attrs else _NAME_RULES:
        if trigger is None or trigger in attrs:
            found = rule(name, attrs)
            if found is not None:
                return found
    return SpanRole.OTHER, _UNRECOGNIZED


def recognize(
    name: str,
    status_code: int,
    attrs: Attributes,
    events: EventSource,
    status_message: str | None = None,
) -> Recognition:
    """Classify a span and extract its role's fields.

    ``attrs`` are the span's filtered attributes (resource attributes are not included);
    ``events`` loads its relevant events, or is ``None`` when it has none;
    ``status_message`` is an ERROR span's status message (``None`` for any other span): one
    that says a guardrail tripped refuses: the OpenAI Agents SDK's, whatever the span's role
    (its turn or agent span; ``fields.tripwire_refusal``), or one of Guardrails AI's own spans
    saying its guard raised (``fields.guard_raised_refusal``). Never raises on well-typed
    input of any shape (values are checked, not trusted).
    """
    role, convention = classify(name, attrs)
    build = _FIELD_BUILDERS.get(role)
    if build is not None:
        fields = build(convention, name, status_code, attrs, events)
    else:
        fields = handoff_fields(name, attrs) if role is SpanRole.OTHER else RoleFields()
    if status_message is not None:
        refusal = tripwire_refusal(status_message)
        if refusal is None and (
            convention.name == guardrails_ai.NAME or name in guardrails_ai.RUNNER_STEPS
        ):
            refusal = guard_raised_refusal(status_message)
        if refusal is not None:
            fields = fields.copy()  # a builder's may be shared
            fields["refusal"] = refusal
    return Recognition(role, convention.name, fields)
