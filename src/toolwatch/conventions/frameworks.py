"""What particular frameworks write into span names and values, read wherever a convention
meets it: the OpenAI Agents SDK's handoff spans and ``transfer_to_<agent>`` tools, LangChain's
``ToolMessage`` results (a call id and a handled error), an MCP server's failed results,
LangGraph's final state and CrewAI's outputs (the run's answer), LangChain's message content.

Several conventions' recognizers (OpenInference, LangSmith, OpenLLMetry, CrewAI's, the
shared field readers) and assembly (handoffs, runs) meet the same framework, so its readers
live here once, built on ``conventions.attrs``' value helpers (``parse_json``), not in any
one convention's module. Pure functions of their arguments; safe from any thread.
"""

from __future__ import annotations

import re
from typing import Any, Final

from toolwatch.conventions.attrs import parse_json

__all__ = [
    "HANDOFF_SPAN_PREFIXES",
    "HANDOFF_SPAN_SUFFIX",
    "HANDOFF_TARGET_KEYS",
    "NAMED_HANDOFF_PREFIX",
    "TRANSFER_TOOL_PREFIX",
    "agent_in_tool_style",
    "content_text",
    "crew_answer",
    "is_handoff_span",
    "is_transfer",
    "langgraph_answer",
    "mcp_tool_error",
    "tool_message",
]


#: The OpenAI Agents SDK's handoff spans, as each exporter names them: OpenInference
#: ``handoff to <agent>``, the contrib instrumentation ``agent_handoff …``, Logfire
#: ``Handoff: {from_agent} → {to_agent}``, OpenLLMetry ``<agent> → <agent>.handoff``.
NAMED_HANDOFF_PREFIX: Final = "handoff to "  # OpenInference's, followed by the agent's name


HANDOFF_SPAN_PREFIXES: Final = (NAMED_HANDOFF_PREFIX, "agent_handoff", "Handoff: ")


HANDOFF_SPAN_SUFFIX: Final = ".handoff"


#: Where a handoff span names the agent handed to, besides OpenInference's span name: the
#: contrib instrumentation, Logfire. (OpenLLMetry's does not know it when it starts.)
HANDOFF_TARGET_KEYS: Final = ("gen_ai.handoff.to_agent", "to_agent")


def is_handoff_span(name: str) -> bool:
    return name.startswith(HANDOFF_SPAN_PREFIXES) or name.endswith(HANDOFF_SPAN_SUFFIX)


#: The tool the OpenAI Agents SDK's model calls to hand off: ``transfer_to_<agent>``, the
#: agent's name written as ``agent_in_tool_style`` does.
TRANSFER_TOOL_PREFIX: Final = "transfer_to_"


_NOT_IN_TOOL_NAMES: Final = re.compile(r"[^a-zA-Z0-9_]")


def is_transfer(name: str) -> bool:
    """Whether ``name`` is a handoff tool's, ``transfer_to_…`` in any case."""
    return name[: len(TRANSFER_TOOL_PREFIX)].lower() == TRANSFER_TOOL_PREFIX


def agent_in_tool_style(name: str) -> str:
    """An agent's name as the SDK writes it in its handoff tool's name: characters other
    than ASCII letters, digits and ``_`` replaced by ``_``, then lower case."""
    return _NOT_IN_TOOL_NAMES.sub("_", name).lower()


#: In the text of every LangChain ``ToolMessage`` result, and in few other results.
_TOOL_CALL_ID: Final = '"tool_call_id"'


def tool_message(result: Any) -> tuple[str | None, str | None]:
    """The call id and error of a tool result that is a LangChain ``ToolMessage``, as
    OpenInference (``{"type": "tool", "data": {...}}``), LangSmith (``{"output": {...}}``) or
    OpenLLMetry (``{"output": {"lc": 1, ..., "kwargs": {...}}}``) record it: a tool run by
    LangGraph's ToolNode carries the model's call id there, not on its span, and a tool error
    it handled (``handle_tool_error``) only there, as ``status: "error"`` (error type
    ``error``). ``(None, None)`` for any other result."""
    if isinstance(result, str):
        if _TOOL_CALL_ID not in result:
            return None, None
        result = parse_json(result)
    for _ in range(3):  # the envelopes above, outermost first
        if not isinstance(result, dict):
            return None, None
        if "tool_call_id" in result:
            break
        inner = result.get("output")
        if inner is None:
            inner = result.get("kwargs") if result.get("lc") else result.get("data")
        result = inner
    if not isinstance(result, dict) or result.get("type") != "tool":
        return None, None
    call_id = result.get("tool_call_id")
    error = "error" if result.get("status") == "error" else None
    return (call_id if isinstance(call_id, str) else None), error


#: In the text of an MCP ``CallToolResult`` that reports a failure, and in few other results.
_IS_ERROR: Final = '"isError"'


#: How the MCP Python SDK's FastMCP server words a tool that raised, the text of its
#: ``isError`` result: ``Error executing tool charge_card: card declined``.
_FASTMCP_ERROR: Final = "Error executing tool "


#: What may stand before a server's tool name in the name the client gave the tool.
_NAMESPACE_ENDS: Final = frozenset("_.:/-")


def mcp_tool_error(result: Any, tool_name: str) -> str | None:
    """``"tool_error"`` when the result of a call of ``tool_name`` reports an MCP server's
    failure, else ``None``. MCP servers report a failed tool as a result the model reads
    rather than a protocol error, and an agent's span for the call ends OK; the MCP semantic
    conventions ask instrumentations to set ``error.type`` to ``tool_error`` then, which not
    all do. The result is the ``CallToolResult`` (``isError: true`` beside its ``content``
    list), or, where the client keeps only its content (the OpenAI Agents SDK hands the
    model the text alone), a text FastMCP wrote for a failure of this very tool
    (``_FASTMCP_ERROR``): as it is, as a text content item, or as the first of a list."""
    if not isinstance(result, str):
        return _reported_failure(result)
    if _IS_ERROR in result:
        return _reported_failure(parse_json(result))
    if _FASTMCP_ERROR not in result:
        return None
    if result.startswith(_FASTMCP_ERROR):
        return "tool_error" if _names_tool(result, tool_name) else None
    content = parse_json(result)
    if isinstance(content, list) and content:
        content = content[0]
    if not isinstance(content, dict) or content.get("type") != "text":
        return None
    text = content.get("text")
    if not isinstance(text, str) or not text.startswith(_FASTMCP_ERROR):
        return None
    return "tool_error" if _names_tool(text, tool_name) else None


def _reported_failure(result: Any) -> str | None:
    """``"tool_error"`` for an MCP ``CallToolResult`` with ``isError: true``."""
    if not isinstance(result, dict) or result.get("isError") is not True:
        return None
    return "tool_error" if isinstance(result.get("content"), list) else None


def _names_tool(text: str, tool_name: str) -> bool:
    """Whether a FastMCP failure ``text`` is of ``tool_name``: the server's name for the tool
    is the client's, or ends it after a namespace (``billing__charge_card``)."""
    named = text[len(_FASTMCP_ERROR) :].partition(":")[0]
    if named == tool_name:
        return True
    cut = len(tool_name) - len(named)
    return cut > 0 and tool_name.endswith(named) and tool_name[cut - 1] in _NAMESPACE_ENDS


def langgraph_answer(value: Any) -> Any:
    """The last AI message's text of a LangGraph state (``{"messages": [...]}``), ``None``
    when it has none (a refusal, a run cut short); any other output value as it is. A
    message is LangChain's ``message_to_dict`` form (``{"type": "ai", "data": {...}}``,
    OpenInference) or its flat dump (``{"type": "ai", "content": ...}``, LangSmith)."""
    if not (isinstance(value, str) and value.startswith('{"messages"')):
        return value
    state = parse_json(value)
    messages = state.get("messages") if isinstance(state, dict) else None
    if not isinstance(messages, list):
        return value
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("type") == "ai":
            data = message.get("data")
            return content_text((data if isinstance(data, dict) else message).get("content"))
    return None


def crew_answer(value: Any) -> Any:
    """The answer of a CrewAI ``CrewOutput`` or ``TaskOutput`` as OpenInference writes them
    (JSON: ``raw`` the answer beside ``tasks_output`` or the task's ``description``); any
    other output value as it is. Asked of CrewAI's own spans alone."""
    if not (isinstance(value, str) and value.startswith("{") and '"raw"' in value):
        return value
    output = parse_json(value)
    if not isinstance(output, dict) or not ("tasks_output" in output or "description" in output):
        return value
    raw = output.get("raw")
    return raw if isinstance(raw, str) else value


def content_text(content: Any) -> str | None:
    """LangChain message content: a string, or a list of parts (``{"type": "text"}``)."""
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        content = "\n".join(t for t in texts if isinstance(t, str) and t)
    return content if isinstance(content, str) and content else None
