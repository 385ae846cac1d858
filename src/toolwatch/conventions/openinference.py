"""OpenInference (Arize) conventions, CONVENTIONS.md §2.

Every span carries ``openinference.span.kind``; the OTel span kind is not used. TOOL spans
keep the tool input in ``input.value`` (often double-encoded JSON, kept as it arrived: the
timeline parses it) and the result in ``output.value``. LLM spans flatten their output into
``llm.output_messages.<i>.message.tool_calls.<j>.tool_call.{id,function.name,
function.arguments}``. The openai-agents instrumentation records handoffs as TOOL spans named
``handoff to <agent>``: those are agent transitions, not tool calls.
"""

from __future__ import annotations

from typing import Any

from toolwatch.conventions.attrs import (
    AgentSpec,
    Attributes,
    Convention,
    OutputBuilder,
    OutputSummary,
    ToolSpec,
    group_indexed,
)
from toolwatch.model import SpanRole

__all__ = ["CONVENTION", "KEYS", "OUTPUT_PREFIX", "classify", "output_summary"]

_SPAN_KIND = "openinference.span.kind"
OUTPUT_PREFIX = "llm.output_messages."
_HANDOFF_PREFIX = "handoff to "

#: Exact keys this module reads; flattened output keys are matched by ``OUTPUT_PREFIX``.
KEYS = frozenset(
    {
        _SPAN_KIND,
        "tool.name",
        "tool.id",
        "tool_call.id",
        "input.value",
        "output.value",
        "llm.model_name",
        "llm.finish_reason",
        "agent.name",
        "session.id",
    }
)

# Every OpenInference kind is an explicit statement, so all of them decide the role.
_KIND_ROLES = {
    "TOOL": SpanRole.TOOL,
    "LLM": SpanRole.LLM,
    "AGENT": SpanRole.AGENT,
}


def _span_name_as_is(name: str) -> str | None:
    # openai-agents names TOOL spans after the tool and AGENT spans after the agent.
    return name or None


CONVENTION = Convention(
    name="openinference",
    tool=ToolSpec(
        name=("tool.name", "gen_ai.tool.name"),
        call_id=("tool.id", "tool_call.id", "gen_ai.tool.call.id"),
        arguments=("input.value", "gen_ai.tool.call.arguments"),
        result=("output.value", "gen_ai.tool.call.result"),
        name_from_span=_span_name_as_is,
    ),
    agent=AgentSpec(
        name=("agent.name", "gen_ai.agent.name"),
        output=("output.value",),
        name_from_span=_span_name_as_is,
    ),
)


def classify(name: str, attrs: Attributes) -> tuple[SpanRole, Convention] | None:
    """Role by ``openinference.span.kind``; ``None`` when the span has no such key."""
    kind = attrs.get(_SPAN_KIND)
    if not isinstance(kind, str):
        return None
    role = _KIND_ROLES.get(kind.upper(), SpanRole.OTHER)
    if role is SpanRole.TOOL and name.startswith(_HANDOFF_PREFIX):
        role = SpanRole.OTHER
    return role, CONVENTION


def _add_message(builder: OutputBuilder, fields: dict[str, Any]) -> None:
    builder.text(fields.get("message.content"))
    contents = group_indexed(fields, "message.contents.")
    for index in sorted(contents):
        content = contents[index]
        if content.get("message_content.type", "text") == "text":
            builder.text(content.get("message_content.text"))
    calls = group_indexed(fields, "message.tool_calls.")
    for index in sorted(calls):
        call = calls[index]
        builder.call(
            call.get("tool_call.function.name"),
            call.get("tool_call.id"),
            call.get("tool_call.function.arguments"),
        )
    if "message.function_call_name" in fields:  # pre-tools OpenAI function calling
        builder.call(
            fields.get("message.function_call_name"),
            None,
            fields.get("message.function_call_arguments_json"),
        )


def output_summary(attrs: Attributes) -> OutputSummary | None:
    """The output carried by flattened ``llm.output_messages.*`` keys, if any."""
    messages = group_indexed(attrs, OUTPUT_PREFIX)
    if not messages:
        return None
    builder = OutputBuilder()
    for index in sorted(messages):
        _add_message(builder, messages[index])
    return builder.build()
