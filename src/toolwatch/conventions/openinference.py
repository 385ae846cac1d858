"""OpenInference (Arize) conventions, CONVENTIONS.md §2.

Every span carries ``openinference.span.kind``; the OTel span kind is not used. TOOL spans
keep the tool input in ``input.value`` (often double-encoded JSON, kept as it arrived: the
timeline parses it) and the result in ``output.value``. LLM spans flatten their output into
``llm.output_messages.<i>.message.tool_calls.<j>.tool_call.{id,function.name,
function.arguments}``. The openai-agents instrumentation records handoffs as TOOL spans named
``handoff to <agent>``: those are plain spans here (no tool of the agent's), read as the
execution of the model's transfer call (``assembly.handoffs``).

LangChain agents (``create_agent``, LangGraph) are graphs: openinference-instrumentation-
langchain marks a nested one AGENT but the outermost one CHAIN; both carry the agent's name
as ``lc_agent_name`` in the ``metadata`` JSON on every span of the graph, and the graph's own
span is named after it, which is how the outermost one is told apart from its nodes. Their
``output.value`` is the graph's whole state, ``{"messages": [...]}``: the answer is the last
AI message. The google-adk instrumentation's is ADK's last ``Event`` as JSON: the answer is
its text (``google_adk.event_answer``).

Refusals have no key of their own (§2.2): the openai and openai-agents instrumentations map
a refusal to an ordinary text content. Only the raw provider response kept in the LLM span's
``output.value`` still shows it, as a Responses ``{"type": "refusal", "refusal": ...}``
content item or a Chat Completions ``message.refusal`` string; that raw JSON is parsed only
when a cheap pattern scan finds such a refusal in it.
"""

from __future__ import annotations

import re
from typing import Any, Final

from toolwatch.conventions import google_adk, guardrails_ai
from toolwatch.conventions.attrs import (
    AgentSpec,
    Attributes,
    Convention,
    OutputBuilder,
    OutputSummary,
    ToolSpec,
    group_indexed,
    parse_json,
    span_name_as_is,
)
from toolwatch.conventions.frameworks import NAMED_HANDOFF_PREFIX, langgraph_answer, tool_message
from toolwatch.model import SpanRole

__all__ = ["CONVENTION", "KEYS", "OUTPUT_PREFIX", "classify", "output_summary", "raw_refusal"]

_SPAN_KIND: Final = "openinference.span.kind"
OUTPUT_PREFIX: Final = "llm.output_messages."
_RAW_OUTPUT: Final = "output.value"
_RAW_INPUT: Final = "input.value"
_METADATA: Final = "metadata"
_LC_AGENT: Final = '"lc_agent_name"'  # the key in ``metadata`` of every span of a LangChain agent
# A Responses refusal item, a Chat Completions refusal that is a string (it is null in every
# ordinary answer, so a bare '"refusal"' match would parse every response), or an Anthropic
# Messages response that stopped for a refusal.
_RAW_REFUSAL: Final = re.compile(
    r'"type"\s*:\s*"refusal"|"refusal"\s*:\s*"|"stop_reason"\s*:\s*"refusal"'
)
#: The role a thinking block's output message is given (Anthropic's, by instrumentations that
#: record it as a message of its own): private reasoning, not output.
_THINKING: Final = "thinking"

#: Exact keys this module reads; flattened output keys are matched by ``OUTPUT_PREFIX``.
KEYS: Final = frozenset(
    {
        _SPAN_KIND,
        "tool.name",
        "tool.id",
        "tool_call.id",
        _RAW_INPUT,
        _RAW_OUTPUT,
        "llm.model_name",
        "llm.finish_reason",
        "llm.stop_reason",  # the JavaScript Bedrock instrumentation's (Converse stopReason)
        "agent.name",
        "session.id",
        _METADATA,
    }
)

# Every OpenInference kind is an explicit statement, so all of them decide the role.
_KIND_ROLES: Final = {
    "TOOL": SpanRole.TOOL,
    "LLM": SpanRole.LLM,
    "AGENT": SpanRole.AGENT,
    "GUARDRAIL": SpanRole.GUARDRAIL,
}


def _answer(value: Any) -> Any:
    """An AGENT or CHAIN span's answer: the last AI message of a LangGraph state, the text of
    Google ADK's last ``Event`` (``google_adk.event_answer``), else the value as it is."""
    return google_adk.event_answer(langgraph_answer(value))


CONVENTION: Final = Convention(
    name="openinference",
    tool=ToolSpec(
        name=("tool.name", "gen_ai.tool.name"),
        call_id=("tool.id", "tool_call.id", "gen_ai.tool.call.id"),
        arguments=("input.value", "gen_ai.tool.call.arguments"),
        result=("output.value", "gen_ai.tool.call.result"),
        name_from_span=span_name_as_is,
        read_result=tool_message,
    ),
    agent=AgentSpec(
        name=("agent.name", "gen_ai.agent.name"),
        output=("output.value",),
        name_from_span=span_name_as_is,
        unwrap_output=_answer,
    ),
)


def classify(name: str, attrs: Attributes) -> tuple[SpanRole, Convention] | None:
    """Role by ``openinference.span.kind``; ``None`` when the span has no such key."""
    kind = attrs.get(_SPAN_KIND)
    if not isinstance(kind, str):
        return None
    role = _KIND_ROLES.get(kind.upper(), SpanRole.OTHER)
    if role is SpanRole.TOOL and name.startswith(NAMED_HANDOFF_PREFIX):
        role = SpanRole.OTHER
    elif role is SpanRole.GUARDRAIL:
        # Guardrails AI's own spans carry this kind too: its guard around the application's
        # own model call is plain, its validators are guardrails.
        guard = guardrails_ai.classify_guard(name, attrs)
        if guard is not None:
            return guard
        if name in guardrails_ai.RUNNER_STEPS:
            role = SpanRole.OTHER  # OpenInference's span around a guard's step
    elif role is SpanRole.OTHER and _is_langchain_agent(name, attrs):
        role = SpanRole.AGENT
    return role, CONVENTION


def _is_langchain_agent(name: str, attrs: Attributes) -> bool:
    """A LangChain agent graph's own span: its ``metadata`` names the agent as the span is
    named (the graph's nodes carry the same metadata under other names)."""
    metadata = attrs.get(_METADATA)
    if not (name and isinstance(metadata, str) and _LC_AGENT in metadata):
        return False
    parsed = parse_json(metadata)
    return isinstance(parsed, dict) and parsed.get("lc_agent_name") == name


def _message_texts(fields: dict[str, Any]) -> list[Any]:
    """The text contents, else ``message.content``: instrumentations that set both (openai,
    openai-agents) put the same text in each, and it must count once."""
    contents = group_indexed(fields, "message.contents.")
    texts = [
        contents[i].get("message_content.text")
        for i in sorted(contents)
        if contents[i].get("message_content.type", "text") == "text"
    ]
    return texts or [fields.get("message.content")]


def _add_message(builder: OutputBuilder, fields: dict[str, Any], refusal: str | None) -> None:
    if fields.get("message.role") == _THINKING:
        return
    for text in _message_texts(fields):
        if text != refusal:  # the refusal mapped to a text content is not an answer
            builder.text(text)
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


def _items(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _refusal_in(response: dict[str, Any]) -> str | None:
    """A Responses refusal content item, else a Chat Completions choice's refusal, else an
    Anthropic Messages response's (``stop_reason`` refusal: its text blocks say it)."""
    if response.get("stop_reason") == "refusal":
        texts = [p.get("text") for p in _items(response.get("content")) if p.get("type") == "text"]
        said = " ".join(text for text in texts if isinstance(text, str) and text)
        return said or "refusal"
    for item in _items(response.get("output")):
        for part in _items(item.get("content")):
            if part.get("type") == "refusal":
                text = part.get("refusal")
                return text if isinstance(text, str) and text else "refusal"
    for choice in _items(response.get("choices")):
        message = choice.get("message")
        text = message.get("refusal") if isinstance(message, dict) else None
        if isinstance(text, str) and text:
            return text
    return None


def raw_refusal(attrs: Attributes) -> str | None:
    """The refusal in the raw provider response (``output.value``), if it holds one."""
    raw = attrs.get(_RAW_OUTPUT)
    if not isinstance(raw, str) or _RAW_REFUSAL.search(raw) is None:
        return None
    response = parse_json(raw)
    return _refusal_in(response) if isinstance(response, dict) else None


def output_summary(attrs: Attributes) -> OutputSummary | None:
    """The output carried by flattened ``llm.output_messages.*`` keys and the refusal in the
    raw response, if any. On Google ADK's model span (``google_adk.EVENT_ID``), which holds
    all of an agent's model calls, the last call's ``LlmResponse`` in ``output.value`` with
    the flattened calls its history confirms (``google_adk.merged_model_output``)."""
    flattened = _flattened_output(attrs)
    if google_adk.EVENT_ID in attrs:  # the flattened keys may be another call's
        return google_adk.merged_model_output(
            attrs.get(_RAW_OUTPUT), attrs.get(_RAW_INPUT), flattened
        )
    return flattened


def _flattened_output(attrs: Attributes) -> OutputSummary | None:
    messages = group_indexed(attrs, OUTPUT_PREFIX)
    refusal = raw_refusal(attrs)
    if not messages and refusal is None:
        return None
    builder = OutputBuilder()
    builder.refuse(refusal)
    for index in sorted(messages):
        _add_message(builder, messages[index], refusal)
    return builder.build()
