"""Vercel AI SDK telemetry in its ``ai.*`` attributes, CONVENTIONS.md §4.8.

AI SDK 3.3 to 6 emit these spans, and AI SDK 7 does with ``LegacyOpenTelemetry`` from
``@ai-sdk/otel`` (its ``OpenTelemetry`` integration emits GenAI spans, handled by ``genai``).
A span says what it is in ``ai.operationId``:

- ``ai.generateText`` / ``ai.streamText`` (and the object variants): one call of the SDK, the
  run. ``ai.telemetry.functionId`` names it, ``ai.response.text`` is the answer;
- ``….doGenerate`` / ``….doStream``: one model call. ``ai.response.toolCalls`` is a JSON
  array of the requested calls in the model's order, ``{toolCallId, toolName, input}`` (AI SDK
  5+; ``args``, a JSON string, before), with ``ai.response.text`` and
  ``ai.response.finishReason`` (``tool-calls``, ``stop``, ``content-filter``, …);
- ``ai.toolCall``: one tool execution, ``ai.toolCall.name`` / ``.id`` / ``.args`` /
  ``.result``; a failed tool is status ERROR with an ``exception`` event. AI SDK 7 nests it
  under the model call that requested it, earlier versions under the run.

Content capture is ``recordInputs`` / ``recordOutputs``: without it arguments, results and
texts are absent, and the calls still are.
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
)
from toolwatch.model import SpanRole

__all__ = ["CONVENTION", "KEYS", "OPERATION_ID", "classify", "output_summary"]

OPERATION_ID: Final = "ai.operationId"
_TOOL_CALLS: Final = "ai.response.toolCalls"
_TEXT: Final = "ai.response.text"
_FINISH_REASON: Final = "ai.response.finishReason"

#: Attribute keys this module reads.
KEYS: Final = frozenset(
    {
        OPERATION_ID,
        _TOOL_CALLS,
        _TEXT,
        _FINISH_REASON,
        "ai.telemetry.functionId",
        "ai.toolCall.name",
        "ai.toolCall.id",
        "ai.toolCall.args",
        "ai.toolCall.result",
        "ai.response.model",
        "ai.model.id",
    }
)

_RUNS: Final = ("ai.generateText", "ai.streamText", "ai.generateObject", "ai.streamObject")
_ROLES: Final[dict[str, SpanRole]] = {
    "ai.toolCall": SpanRole.TOOL,
    **dict.fromkeys(_RUNS, SpanRole.AGENT),
    **{f"{run}.doGenerate": SpanRole.LLM for run in _RUNS},
    **{f"{run}.doStream": SpanRole.LLM for run in _RUNS},
}


def _no_name(name: str) -> str | None:
    return None  # span names are the operation ids, never a tool's or an agent's name


CONVENTION: Final = Convention(
    name="vercel_ai",
    tool=ToolSpec(
        name=("ai.toolCall.name",),
        call_id=("ai.toolCall.id",),
        arguments=("ai.toolCall.args",),
        result=("ai.toolCall.result",),
        name_from_span=_no_name,
    ),
    agent=AgentSpec(
        name=("ai.telemetry.functionId",),
        output=(_TEXT,),
        name_from_span=_no_name,
    ),
)


def classify(name: str, attrs: Attributes) -> tuple[SpanRole, Convention] | None:
    """Role by ``ai.operationId``; ``None`` for operations that are none of these
    (``ai.embed``, …), which fall through to the next rule."""
    operation = attrs.get(OPERATION_ID)
    role = _ROLES.get(operation) if isinstance(operation, str) else None
    return None if role is None else (role, CONVENTION)


def _call(builder: OutputBuilder, item: Any) -> None:
    if isinstance(item, dict):
        arguments = item.get("input", item.get("args"))  # AI SDK 5+: input; before: args
        builder.call(item.get("toolName"), item.get("toolCallId"), arguments)


def output_summary(attrs: Attributes) -> OutputSummary | None:
    """The requested calls, text and finish reason of a model call span."""
    builder = OutputBuilder()
    calls = parse_json(attrs.get(_TOOL_CALLS))
    for item in calls if isinstance(calls, list) else ():
        _call(builder, item)
    builder.text(attrs.get(_TEXT))
    builder.finish(attrs.get(_FINISH_REASON))
    return builder.build()
