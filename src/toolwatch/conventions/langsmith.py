"""The LangSmith SDK's own OpenTelemetry export, CONVENTIONS.md §4.7.

With ``LANGSMITH_TRACING_MODE=otel`` (or ``hybrid``; ``LANGSMITH_OTEL_ENABLED`` before) the
LangSmith tracer turns each LangChain / LangGraph run into a span named after the run, on the
application's tracer provider (observed with langsmith 0.15.1 on LangChain 1.5 ``create_agent``,
``docs/observed-conventions.md``). ``langsmith.span.kind`` is the run type:

- ``tool``: ``gen_ai.tool.name``, ``gen_ai.tool.call.id`` (the model's id); the arguments are
  the run's *inputs*, ``gen_ai.prompt`` (JSON), the result its outputs, ``gen_ai.completion``.
- ``llm``: ``gen_ai.completion`` is LangChain's ``LLMResult`` JSON; each generation's
  ``message.kwargs`` is the AI message: ``content``, ``tool_calls`` ``[{name, args, id}]`` in
  the model's order, ``additional_kwargs.refusal``; ``generation_info.finish_reason``.
- ``chain``: graphs and their nodes. An agent graph's own span is named as its
  ``langsmith.metadata.lc_agent_name`` (its nodes carry the same metadata under other names);
  its ``gen_ai.completion`` is the graph state, whose last AI message is the answer.

The kind decides every span it is on, as OpenInference's does; ``gen_ai.operation.name``
(``execute_tool``, ``chat``, ``chain``) is LangSmith's mapping of the same run type.
"""

from __future__ import annotations

from typing import Any, Final

from toolwatch.conventions.attrs import (
    AgentSpec,
    Attributes,
    Convention,
    OutputBuilder,
    OutputSummary,
    ToolSpec,
    parse_json,
    span_name_as_is,
)
from toolwatch.conventions.frameworks import content_text, langgraph_answer, tool_message
from toolwatch.model import SpanRole

__all__ = ["CONVENTION", "KEYS", "SPAN_KIND", "classify", "output_summary"]

SPAN_KIND: Final = "langsmith.span.kind"
_AGENT_NAME: Final = "langsmith.metadata.lc_agent_name"
_INPUTS: Final = "gen_ai.prompt"
_OUTPUTS: Final = "gen_ai.completion"

#: Attribute keys this module reads.
KEYS: Final = frozenset({SPAN_KIND, _AGENT_NAME, _INPUTS, _OUTPUTS})

_KIND_ROLES: Final = {"tool": SpanRole.TOOL, "llm": SpanRole.LLM}


CONVENTION: Final = Convention(
    name="langsmith",
    tool=ToolSpec(
        name=("gen_ai.tool.name",),
        call_id=("gen_ai.tool.call.id",),
        arguments=(_INPUTS,),
        result=(_OUTPUTS,),
        name_from_span=span_name_as_is,
        read_result=tool_message,
    ),
    agent=AgentSpec(
        name=(_AGENT_NAME,),
        output=(_OUTPUTS,),
        name_from_span=span_name_as_is,
        unwrap_output=langgraph_answer,
    ),
)


def classify(name: str, attrs: Attributes) -> tuple[SpanRole, Convention]:
    """Role by ``langsmith.span.kind``: a tool or model run, an agent graph's own span, or
    else a plain span."""
    kind = attrs.get(SPAN_KIND)
    role = _KIND_ROLES.get(kind, SpanRole.OTHER) if isinstance(kind, str) else SpanRole.OTHER
    if role is SpanRole.OTHER and name and attrs.get(_AGENT_NAME) == name:
        role = SpanRole.AGENT
    return role, CONVENTION


def output_summary(attrs: Attributes) -> OutputSummary | None:
    """A model run's output, from the ``LLMResult`` in ``gen_ai.completion``."""
    raw = attrs.get(_OUTPUTS)
    if not (isinstance(raw, str) and raw.startswith('{"generations"')):
        return None
    result = parse_json(raw)
    generations = result.get("generations") if isinstance(result, dict) else None
    if not isinstance(generations, list):
        return None
    builder = OutputBuilder()
    for group in generations:
        for generation in group if isinstance(group, list) else ():
            if isinstance(generation, dict):
                _add_generation(builder, generation)
    return builder.build()


def _add_generation(builder: OutputBuilder, generation: dict[str, Any]) -> None:
    info = generation.get("generation_info")
    if isinstance(info, dict):
        builder.finish(info.get("finish_reason"))
    message = generation.get("message")
    kwargs = message.get("kwargs") if isinstance(message, dict) else None
    if not isinstance(kwargs, dict):
        builder.text(generation.get("text"))
        return
    builder.text(content_text(kwargs.get("content")))
    calls = kwargs.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        if isinstance(call, dict):
            builder.call(call.get("name"), call.get("id"), call.get("args"))
    extra = kwargs.get("additional_kwargs")
    builder.refuse(extra.get("refusal") if isinstance(extra, dict) else None)
