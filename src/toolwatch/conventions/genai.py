"""OpenTelemetry GenAI semantic conventions (``gen_ai.*``), CONVENTIONS.md §1.

Classification is by ``gen_ai.operation.name`` (v1.27+): ``execute_tool`` is a tool
execution, ``chat`` / ``generate_content`` / ``text_completion`` an inference (also Semantic
Kernel's ``chat.completions``, ``text.completions`` and their ``*.streaming_completions``), and
``invoke_agent`` an agent run. The same keys are emitted by pydantic-ai v3+, Strands, Google
ADK, Semantic Kernel and OpenLLMetry's newer instrumentations. ADK's ``execute_tool
(merged)`` span groups the tool spans of one turn and is a wrapper, not a call.

Output messages (v1.37+) are a JSON array of ``{role, parts, finish_reason}``; parts of type
``tool_call`` are the model's requested calls in emission order.

Google ADK's own tracer records a model call as a ``call_llm`` span without an operation name;
its output is ``gcp.vertex.agent.llm_response``, the ADK ``LlmResponse`` as JSON
(``content.parts[]`` with ``function_call`` / ``text``, ``finish_reason``). Its tool spans
carry the same key, set to ``"{}"``, but also ``execute_tool``.

The OTel-contrib google-genai instrumentation flattens a call's arguments into
``code.function.parameters.<name>.type`` / ``.value`` keys (CONVENTIONS §4.10): as span
attributes up to 0.4b0, inside the ``gen_ai.tool.call.arguments`` JSON object in 1.0b0-1.2b0
(captured: ``google_genai__otel_contrib_v1_2__*``). Both become the arguments object.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from toolwatch.conventions import google_adk
from toolwatch.conventions.attrs import (
    AgentSpec,
    Attributes,
    Convention,
    OutputBuilder,
    OutputSummary,
    ToolSpec,
    parse_json,
)
from toolwatch.jsontext import loads
from toolwatch.model import SpanRole

__all__ = [
    "ADK_LLM_RESPONSE",
    "CONVENTION",
    "GUARDRAIL_NAME",
    "GUARDRAIL_TRIGGERED",
    "KEYS",
    "OPERATION_NAME",
    "OUTPUT_MESSAGES",
    "PARAMETERS_PREFIX",
    "add_output_messages",
    "adk_output_summary",
    "agent_from_span_name",
    "classify",
    "classify_adk_call_llm",
    "classify_by_name",
    "output_summary",
    "tool_from_span_name",
    "unflatten_parameters",
]

OPERATION_NAME: Final = "gen_ai.operation.name"
OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
_TOOL_NAME: Final = "gen_ai.tool.name"
_TOOL_STATUS: Final = "gen_ai.tool.status"  # Strands: success or error
_MERGED_TOOLS: Final = "(merged tools)"  # ADK's gen_ai.tool.name on "execute_tool (merged)"
_MERGED_SPAN: Final = "execute_tool (merged)"
_TOOL_PREFIX: Final = "execute_tool "
_AGENT_OPERATION: Final = "invoke_agent"
_AGENT_PREFIX: Final = "invoke_agent "
_ADK_AGENT_PREFIX: Final = "agent_run ["  # Google ADK <= mid-2025: ``agent_run [<name>]``
#: Google ADK's native model span: ``call_llm``, no operation name, the response as JSON.
ADK_LLM_RESPONSE: Final = "gcp.vertex.agent.llm_response"
_ADK_CALL_LLM: Final = "call_llm"
#: google-genai contrib's flattened arguments: ``<prefix><name>.type`` and ``.value``.
PARAMETERS_PREFIX: Final = "code.function.parameters."
_ENCODED_TYPES: Final = frozenset({"dict", "list", "tuple", "set"})  # JSON-encoded as attributes

#: Attribute keys this module reads. ``gcp.vertex.agent.*`` is Google ADK's native tracer.
GUARDRAIL_TRIGGERED: Final = "gen_ai.guardrail.triggered"
GUARDRAIL_NAME: Final = "gen_ai.guardrail.name"
KEYS: Final = frozenset(
    {
        OPERATION_NAME,
        OUTPUT_MESSAGES,
        _TOOL_NAME,
        "gen_ai.tool.call.id",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        _TOOL_STATUS,
        "gen_ai.handoff.to_agent",  # the contrib openai-agents instrumentation's handoff
        GUARDRAIL_TRIGGERED,  # and its guardrail span's
        GUARDRAIL_NAME,
        "gen_ai.agent.name",
        "gen_ai.conversation.id",
        "gen_ai.request.model",
        "gen_ai.response.model",
        "gen_ai.response.finish_reasons",
        "gen_ai.response.finish_reason",  # Semantic Kernel's singular, non-standard key
        "gcp.vertex.agent.tool_call_args",
        "gcp.vertex.agent.tool_response",
        ADK_LLM_RESPONSE,
        "error.type",
        "final_result",
    }
)

# Operations that decide a role on their own. Operations not listed fall through to the
# next rule (a tool-name attribute, then the span name).
_OPERATION_ROLES: Final = {
    "execute_tool": SpanRole.TOOL,
    "chat": SpanRole.LLM,
    "generate_content": SpanRole.LLM,
    "text_completion": SpanRole.LLM,
    # Semantic Kernel (Python) names its model spans' operation its own way (model_diagnostics
    # decorators: CHAT_COMPLETION_OPERATION etc.), the span `{operation} {model}`.
    "chat.completions": SpanRole.LLM,
    "chat.streaming_completions": SpanRole.LLM,
    "text.completions": SpanRole.LLM,
    "text.streaming_completions": SpanRole.LLM,
    _AGENT_OPERATION: SpanRole.AGENT,
    # Not agent runs: a trace without agent spans is rooted at its root anyway.
    "create_agent": SpanRole.OTHER,
    "invoke_workflow": SpanRole.OTHER,
    "invoke_swarm": SpanRole.OTHER,  # Strands multi-agent orchestrators
    "invoke_graph": SpanRole.OTHER,
    "handoff": SpanRole.OTHER,
    "embeddings": SpanRole.OTHER,
    "retrieval": SpanRole.OTHER,
    "apply_guardrail": SpanRole.GUARDRAIL,
    # The contrib openai-agents-v2 instrumentation's guardrail span (gen_ai.guardrail.name).
    "guardrail_check": SpanRole.GUARDRAIL,
}


def tool_from_span_name(name: str) -> str | None:
    """``execute_tool get_weather`` -> ``get_weather``."""
    if name.startswith(_TOOL_PREFIX):
        return name[len(_TOOL_PREFIX) :].strip() or None
    return None


def agent_from_span_name(name: str) -> str | None:
    """``invoke_agent planner`` -> ``planner`` (also ADK's older ``agent_run [planner]``)."""
    if name.startswith(_AGENT_PREFIX):
        return name[len(_AGENT_PREFIX) :].strip() or None
    if _is_adk_agent_run(name):
        return name[len(_ADK_AGENT_PREFIX) : -1] or None
    return None


def _is_adk_agent_run(name: str) -> bool:
    return name.startswith(_ADK_AGENT_PREFIX) and name.endswith("]")


def unflatten_parameters(flat: Mapping[str, Any]) -> dict[str, Any] | None:
    """The arguments held by ``flat``'s ``code.function.parameters.<name>.value`` keys, in
    their order, or ``None`` when it holds no value (the producer recorded types only). A
    value whose ``.type`` is a container and that arrived as a string was JSON-encoded (an
    attribute cannot hold a map): it is decoded when it is valid JSON."""
    values: dict[str, Any] = {}
    types: dict[str, Any] = {}
    for key, value in flat.items():
        if not key.startswith(PARAMETERS_PREFIX):
            continue
        name, _, field = key[len(PARAMETERS_PREFIX) :].rpartition(".")
        if name and field == "value":
            values[name] = value
        elif name and field == "type":
            types[name] = value
    if not values:
        return None
    return {name: _decoded(value, types.get(name)) for name, value in values.items()}


def _decoded(value: Any, type_name: Any) -> Any:
    if not isinstance(value, str) or type_name not in _ENCODED_TYPES:
        return value
    try:
        return loads(value)
    except (ValueError, RecursionError):  # not JSON, or nested too deep: kept as it came
        return value


def _flattened_arguments(value: Any) -> Any:
    """google-genai contrib 1.0b0-1.2b0's arguments JSON of flattened keys, as the arguments
    object; anything else unchanged (a cheap text check first: this runs on every span)."""
    if not isinstance(value, str) or PARAMETERS_PREFIX not in value:
        return value
    decoded = parse_json(value)
    if not isinstance(decoded, dict) or not decoded:
        return value
    if not all(isinstance(k, str) and k.startswith(PARAMETERS_PREFIX) for k in decoded):
        return value
    unflattened = unflatten_parameters(decoded)
    return value if unflattened is None else unflattened


CONVENTION: Final = Convention(
    name="genai",
    tool=ToolSpec(
        name=(_TOOL_NAME,),
        call_id=("gen_ai.tool.call.id",),
        arguments=(
            "gen_ai.tool.call.arguments",
            "gcp.vertex.agent.tool_call_args",
            "tool_arguments",
        ),
        result=("gen_ai.tool.call.result", "gcp.vertex.agent.tool_response", "tool_response"),
        name_from_span=tool_from_span_name,
        unwrap_arguments=_flattened_arguments,
        assemble_arguments=unflatten_parameters,
        status=(_TOOL_STATUS,),
    ),
    agent=AgentSpec(
        name=("gen_ai.agent.name", "agent_name"),
        output=("final_result",),  # pydantic-ai v3+ puts the run's output here
        name_from_span=agent_from_span_name,
    ),
)


def _is_merged(name: str, attrs: Attributes) -> bool:
    return name == _MERGED_SPAN or attrs.get(_TOOL_NAME) == _MERGED_TOOLS


def classify(name: str, attrs: Attributes) -> tuple[SpanRole, Convention] | None:
    """Role by ``gen_ai.operation.name``; ``None`` when absent or not decisive."""
    operation = attrs.get(OPERATION_NAME)
    if not isinstance(operation, str):
        return None
    role = _OPERATION_ROLES.get(operation)
    if role is None:
        return None
    if role is SpanRole.TOOL and _is_merged(name, attrs):
        role = SpanRole.WRAPPER
    return role, CONVENTION


def classify_adk_call_llm(name: str, attrs: Attributes) -> tuple[SpanRole, Convention] | None:
    """Google ADK's native ``call_llm`` span (``trace_call_llm``: ``gen_ai.system``
    ``gcp.vertex.agent``, the model, ``gcp.vertex.agent.llm_response``; no operation name)."""
    if name == _ADK_CALL_LLM and ADK_LLM_RESPONSE in attrs:
        return SpanRole.LLM, CONVENTION
    return None


def classify_by_name(name: str, attrs: Attributes) -> tuple[SpanRole, Convention] | None:
    """Last resort: the span names the spec prescribes (``execute_tool X``, ``invoke_agent X``)
    and older Google ADK's agent span name (``agent_run [X]``, which carries no attributes)."""
    if name == _MERGED_SPAN:
        return SpanRole.WRAPPER, CONVENTION
    if name.startswith(_TOOL_PREFIX):
        return SpanRole.TOOL, CONVENTION
    if name == _AGENT_OPERATION or name.startswith(_AGENT_PREFIX) or _is_adk_agent_run(name):
        return SpanRole.AGENT, CONVENTION
    return None


def _tool_call(builder: OutputBuilder, part: dict[str, Any]) -> None:
    # pydantic-ai marks a call its provider runs (a builtin tool: web search, a provider's
    # MCP server) ``"builtin": true`` on a plain tool_call part (``_otel_messages``).
    hosted = part.get("builtin") is True
    builder.call(part.get("name"), part.get("id"), part.get("arguments"), hosted=hosted)


def _server_tool_call(builder: OutputBuilder, part: dict[str, Any]) -> None:
    # A hosted tool (web search, code interpreter): requested and run by the provider.
    builder.call(part.get("name"), part.get("id"), part.get("server_tool_call"), hosted=True)


#: OTel contrib ``openai-agents-v2`` 0.1.0 writes each Responses output message as its Python
#: repr in a text part, so a refusal item survives only inside ``ResponseOutputMessage(...,
#: content=[ResponseOutputRefusal(refusal='...', type='refusal')], ...)``. A text part that is
#: such a repr as a whole (it opens with the SDK's class name, which no answer does) and holds
#: a refusal item is read as that refusal; every other text stays text.
_REPR_OPENINGS: Final = ("ResponseOutputMessage(", "ResponseOutputRefusal(")
_REPR_REFUSAL_MARK: Final = "ResponseOutputRefusal(refusal="
_REPR_REFUSAL: Final = re.compile(
    r"""ResponseOutputRefusal\(refusal=('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")"""
)


def _text(builder: OutputBuilder, part: dict[str, Any]) -> None:
    content = part.get("content")
    if (
        isinstance(content, str)
        and content.startswith(_REPR_OPENINGS)
        and _REPR_REFUSAL_MARK in content
    ):
        builder.refuse(_repr_refusal(content))  # the repr of a refused message: no answer
        return
    builder.text(content)


def _repr_refusal(content: str) -> str:
    """The refusal text of a ``ResponseOutputRefusal`` repr (its string literal read as
    Python reads it), or ``refusal`` when the repr was cut before the literal ends."""
    found = _REPR_REFUSAL.search(content)
    if found is None:
        return "refusal"
    try:
        text = ast.literal_eval(found.group(1))
    except (ValueError, SyntaxError):
        return "refusal"
    return text if isinstance(text, str) and text else "refusal"


def _refusal(builder: OutputBuilder, part: dict[str, Any]) -> None:
    # OpenLLMetry >= 0.55 emits the provider's refusal text as {"type": "refusal"}.
    content = part.get("content")
    builder.refuse(content if isinstance(content, str) and content else "refusal")


_PART_HANDLERS: Final[dict[str, Callable[[OutputBuilder, dict[str, Any]], None]]] = {
    "tool_call": _tool_call,
    "server_tool_call": _server_tool_call,
    "text": _text,
    "refusal": _refusal,
}


def _add_parts(builder: OutputBuilder, parts: Any) -> None:
    if not isinstance(parts, list):
        return
    for part in parts:
        if isinstance(part, dict):
            kind = part.get("type")
            handler = _PART_HANDLERS.get(kind) if isinstance(kind, str) else None
            if handler is not None:
                handler(builder, part)


def add_output_messages(builder: OutputBuilder, value: Any) -> None:
    """Add ``gen_ai.output.messages`` (a JSON string or an already structured array)."""
    messages = parse_json(value)
    if not isinstance(messages, list):
        return
    for message in messages:
        if isinstance(message, dict):
            builder.finish(message.get("finish_reason"))
            _add_parts(builder, message.get("parts"))


def output_summary(value: Any) -> OutputSummary | None:
    """The output carried by a ``gen_ai.output.messages`` value (parsed once)."""
    if value is None:
        return None
    builder = OutputBuilder()
    add_output_messages(builder, value)
    return builder.build()


def adk_output_summary(attrs: Attributes) -> OutputSummary | None:
    """The output in ADK's ``gcp.vertex.agent.llm_response`` (an ``LlmResponse`` as JSON,
    read by ``google_adk.response_summary``)."""
    if ADK_LLM_RESPONSE not in attrs:
        return None
    return google_adk.response_summary(parse_json(attrs.get(ADK_LLM_RESPONSE)))
