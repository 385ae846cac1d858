"""OpenLLMetry / Traceloop conventions, CONVENTIONS.md §3.

traceloop-sdk decorators name spans ``{entity}.{kind}`` and set ``traceloop.span.kind``
(``workflow``, ``task``, ``agent``, ``tool``; openai-agents adds ``handoff``). Tool inputs
are ``traceloop.entity.input`` = ``{"args": [...], "kwargs": {...}}`` (langchain:
``{"input_str", "inputs", ...}``); newer versions also set ``gen_ai.tool.call.arguments``.
Legacy LLM spans (``llm.request.type``, OpenLLMetry <= 0.54) flatten the output into
``gen_ai.completion.<i>.{content, finish_reason, refusal, tool_calls.<j>.{id,name,arguments}}``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from toolwatch.conventions.attrs import (
    REFUSAL_REASONS,
    AgentSpec,
    Attributes,
    Convention,
    OutputBuilder,
    OutputSummary,
    ToolSpec,
    group_indexed,
    parse_json,
)
from toolwatch.conventions.frameworks import tool_message
from toolwatch.model import SpanRole

__all__ = [
    "COMPLETION_PREFIX",
    "CONVENTION",
    "KEYS",
    "classify",
    "classify_legacy_llm",
    "output_summary",
    "unwrap_entity_input",
]

_SPAN_KIND: Final = "traceloop.span.kind"
_REQUEST_TYPE: Final = "llm.request.type"
COMPLETION_PREFIX: Final = "gen_ai.completion."

#: Exact keys this module reads; legacy completions are matched by ``COMPLETION_PREFIX``.
KEYS: Final = frozenset(
    {
        _SPAN_KIND,
        _REQUEST_TYPE,
        "traceloop.entity.name",
        "traceloop.entity.input",
        "traceloop.entity.output",
    }
)

# ``task`` and ``unknown`` say nothing about tools: such spans fall through to the
# operation name and the other rules.
_KIND_ROLES: Final = {
    "tool": SpanRole.TOOL,
    "agent": SpanRole.AGENT,
    "workflow": SpanRole.OTHER,
    "handoff": SpanRole.OTHER,
}
_LLM_REQUEST_TYPES: Final = frozenset({"chat", "completion"})


def _strip_suffix(suffix: str) -> Callable[[str], str | None]:
    def entity_name(name: str) -> str | None:
        return (name[: -len(suffix)] or None) if name.endswith(suffix) else None

    return entity_name


def unwrap_entity_input(value: Any) -> Any:
    """The tool arguments inside a decorator envelope; ``value`` unchanged otherwise.

    ``{"args": [], "kwargs": {...}}`` gives the kwargs (positional args have no names, so an
    envelope with args is kept whole); langchain's ``{"input_str", "inputs"}`` gives inputs.
    """
    if isinstance(value, str) and '"args"' not in value and '"inputs"' not in value:
        return value
    decoded = parse_json(value)
    if not isinstance(decoded, dict):
        return value
    kwargs = decoded.get("kwargs")
    if "args" in decoded and not decoded["args"] and isinstance(kwargs, dict):
        return kwargs
    inputs = decoded.get("inputs")
    if "input_str" in decoded and isinstance(inputs, dict):
        return inputs
    return value


CONVENTION: Final = Convention(
    name="openllmetry",
    tool=ToolSpec(
        name=("gen_ai.tool.name", "traceloop.entity.name"),
        call_id=("gen_ai.tool.call.id",),
        arguments=("gen_ai.tool.call.arguments", "traceloop.entity.input"),
        result=("gen_ai.tool.call.result", "traceloop.entity.output"),
        name_from_span=_strip_suffix(".tool"),
        unwrap_arguments=unwrap_entity_input,
        read_result=tool_message,
    ),
    agent=AgentSpec(
        name=("gen_ai.agent.name", "traceloop.entity.name"),
        output=("traceloop.entity.output",),
        name_from_span=_strip_suffix(".agent"),
    ),
)


def classify(name: str, attrs: Attributes) -> tuple[SpanRole, Convention] | None:
    """Role by ``traceloop.span.kind``; ``None`` when absent or not decisive."""
    kind = attrs.get(_SPAN_KIND)
    role = _KIND_ROLES.get(kind) if isinstance(kind, str) else None
    return None if role is None else (role, CONVENTION)


def classify_legacy_llm(name: str, attrs: Attributes) -> tuple[SpanRole, Convention] | None:
    """A legacy LLM span: ``llm.request.type`` chat/completion or flattened completions."""
    request_type = attrs.get(_REQUEST_TYPE)
    if (isinstance(request_type, str) and request_type in _LLM_REQUEST_TYPES) or any(
        key.startswith(COMPLETION_PREFIX) for key in attrs
    ):
        return SpanRole.LLM, CONVENTION
    return None


#: The role OpenLLMetry's Anthropic instrumentation gives a thinking block's completion (the
#: answer and its calls follow at the next index): private reasoning, not output. Its
#: finish reason is the response's (``refusal``, ``tool_use``), written on the first
#: completion whatever its role.
_THINKING: Final = "thinking"


def _add_completion(builder: OutputBuilder, fields: dict[str, Any]) -> None:
    reason = fields.get("finish_reason")
    builder.finish(reason)  # the response's: written on the first completion, thinking or not
    builder.refuse(fields.get("refusal"))
    if isinstance(reason, str) and reason in REFUSAL_REASONS:
        builder.refuse(reason)  # content is the placeholder "FILTERED", not an answer
    elif fields.get("role") != _THINKING:
        builder.text(fields.get("content"))
    calls = group_indexed(fields, "tool_calls.")
    for index in sorted(calls):
        call = calls[index]
        builder.call(call.get("name"), call.get("id"), call.get("arguments"))


def output_summary(attrs: Attributes) -> OutputSummary | None:
    """The output carried by flattened ``gen_ai.completion.*`` keys, if any."""
    completions = group_indexed(attrs, COMPLETION_PREFIX)
    if not completions:
        return None
    builder = OutputBuilder()
    for index in sorted(completions):
        _add_completion(builder, completions[index])
    return builder.build()
