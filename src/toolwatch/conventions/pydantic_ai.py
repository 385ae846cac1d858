"""pydantic-ai instrumentation formats v1/v2 (pydantic-ai <= 1.x defaults), CONVENTIONS.md §4.2.

These spans set no ``gen_ai.operation.name``: a tool span (``running tool``) is recognized by
``gen_ai.tool.name`` / ``gen_ai.tool.call.id`` and carries ``tool_arguments`` and
``tool_response``; the agent span is ``agent run`` with ``agent_name`` and ``final_result``.
Up to 1.67 the tool spans of one step sit under a ``running tools`` wrapper. Formats v3+ use
the GenAI keys and are handled by ``genai``.
"""

from __future__ import annotations

from typing import Final

from toolwatch.conventions import genai
from toolwatch.conventions.attrs import AgentSpec, Attributes, Convention, ToolSpec
from toolwatch.model import SpanRole

__all__ = ["CONVENTION", "KEYS", "REQUEST_PARAMETERS", "classify_by_name", "classify_tool_keys"]

_TOOL_NAME: Final = "gen_ai.tool.name"
_CALL_ID: Final = "gen_ai.tool.call.id"
_TOOL_SPAN: Final = "running tool"

#: A chat span's tools offered to the model, its output tools (``final_result``) among them.
REQUEST_PARAMETERS: Final = "model_request_parameters"
#: Attribute keys this module reads (besides the GenAI ones).
KEYS: Final = frozenset(
    {"tool_arguments", "tool_response", "agent_name", "final_result", REQUEST_PARAMETERS}
)

_SPAN_NAME_ROLES: Final = {
    "running tools": SpanRole.WRAPPER,
    "agent run": SpanRole.AGENT,
    _TOOL_SPAN: SpanRole.TOOL,
}


def _no_name(name: str) -> str | None:
    return None


CONVENTION: Final = Convention(
    name="pydantic_ai",
    tool=ToolSpec(
        name=(_TOOL_NAME,),
        call_id=(_CALL_ID,),
        arguments=("tool_arguments", "gen_ai.tool.call.arguments"),
        result=("tool_response", "gen_ai.tool.call.result"),
        name_from_span=_no_name,
    ),
    agent=AgentSpec(
        name=("agent_name", "gen_ai.agent.name"),
        output=("final_result",),
        name_from_span=_no_name,
    ),
)


def classify_tool_keys(name: str, attrs: Attributes) -> tuple[SpanRole, Convention] | None:
    """A tool span told by its tool-name or call-id attribute alone (no operation name).

    Labelled pydantic_ai when it looks like pydantic-ai, else genai (a partial GenAI emitter).
    """
    if _TOOL_NAME not in attrs and _CALL_ID not in attrs:
        return None
    if name.startswith(_TOOL_SPAN) or "tool_arguments" in attrs or "tool_response" in attrs:
        return SpanRole.TOOL, CONVENTION
    return SpanRole.TOOL, genai.CONVENTION


def classify_by_name(name: str, attrs: Attributes) -> tuple[SpanRole, Convention] | None:
    """``running tools`` (wrapper), ``agent run`` (agent) and ``running tool`` (tool)."""
    role = _SPAN_NAME_ROLES.get(name)
    return None if role is None else (role, CONVENTION)
