"""Google ADK (``google-adk``, tracer scope ``gcp.vertex.agent``): what its spans say beyond
the GenAI conventions ``genai`` reads, as captured from google-adk 2.13 (``google_adk__*``
fixtures; docs/observed-conventions.md).

* **Placeholder call ids.** Gemini sends no call ids. ADK gives each call one of its own
  (``adk-<uuid>``), which its tool span carries, but writes its model span's
  ``gen_ai.output.messages`` from the model's raw response, where a call without an id gets
  ``<tool name>_<index of the part>`` (``telemetry/_experimental_semconv.py``). That is no id
  of the call: read as one, no tool span ever matched its request and every call was counted
  twice. On ADK's own model spans (they carry ``gcp.vertex.agent.event_id``) such an id is
  dropped, and the request is joined with its tool span by name (``assembly.by_name``).
* **Transfers.** ADK has one transfer tool for every agent, ``transfer_to_agent``, naming the
  agent in its ``agent_name`` argument; the OpenAI Agents SDK has one per agent,
  ``transfer_to_<agent>``. ``transfer_target`` reads either.
* **OpenInference's ``output.value``** on its ``agent_run [<agent>]`` and ``invocation``
  spans is ADK's last ``Event`` as JSON (an ``LlmResponse`` with ``author``,
  ``invocation_id``, ``actions``): the answer is its content's text (``event_answer``).
* **OpenInference's model span on ADK 2.x** (openinference-instrumentation-google-adk
  1.0.5). ADK 2.x writes no ``call_llm`` span, and the instrumentation sets each model
  call's attributes on the span current when it runs, ADK's ``invoke_agent``: one span,
  kind LLM, for all of an agent's model calls, whose flattened ``llm.output_messages``
  keep an earlier call's ``tool_calls`` that no later call overwrote (a request never made
  after the last call, which answered in text). Its ``output.value``, the last call's
  ``LlmResponse``, is the one true output there: ``raw_response_summary`` reads it first.

Pure functions of the values given; no protobuf.
"""

from __future__ import annotations

from typing import Any, Final

from toolwatch.conventions.attrs import (
    TRANSFER_TOOL_PREFIX,
    OutputBuilder,
    OutputSummary,
    agent_in_tool_style,
    parse_json,
)
from toolwatch.model import RequestedCall

__all__ = [
    "EVENT_ID",
    "KEYS",
    "TRANSFER_TOOL",
    "event_answer",
    "is_transfer_tool",
    "raw_response_summary",
    "response_summary",
    "transfer_target",
    "without_placeholder_ids",
]

#: On every model and tool span ADK's own tracer writes (both of its telemetry formats).
EVENT_ID: Final = "gcp.vertex.agent.event_id"
KEYS: Final = frozenset({EVENT_ID})
#: ADK's transfer tool, and the argument naming the agent it hands the conversation to.
TRANSFER_TOOL: Final = "transfer_to_agent"
_TRANSFER_ARGUMENT: Final = "agent_name"
#: Keys of an ADK ``Event`` beside its ``LlmResponse`` fields, as ``model_dump_json`` writes.
_EVENT_KEYS: Final = ('"invocation_id"', '"author"')
#: How an ``LlmResponse`` dumped without its unset fields opens: its first field set, the
#: model's version (Gemini always sends one), else its content.
_RESPONSE_OPENINGS: Final = ('{"model_version":', '{"content":{')
# ADK's own mapping of Gemini finish reasons (others are lowercased), CONVENTIONS §1.3.
_GEMINI_FINISH_REASONS: Final = {
    "FINISH_REASON_UNSPECIFIED": "error",
    "OTHER": "error",
    "MAX_TOKENS": "length",
}


def _is_placeholder(call: RequestedCall) -> bool:
    """Whether the call's id is ADK's ``<name>_<digits>`` stand-in for a missing one."""
    call_id = call.call_id
    if call_id is None or not call.name:
        return False
    cut = len(call.name) + 1
    return (
        len(call_id) > cut
        and call_id.startswith(call.name)
        and call_id[cut - 1] == "_"
        and call_id[cut:].isdigit()
    )


def without_placeholder_ids(summary: OutputSummary) -> OutputSummary:
    """``summary`` of one of ADK's model spans with each placeholder call id dropped (see the
    module's docstring); the same object when it holds none (the usual case)."""
    calls = summary.tool_calls
    if not any(_is_placeholder(call) for call in calls):
        return summary
    kept = tuple(
        RequestedCall(call.name, None, call.arguments, call.position, call.hosted)
        if _is_placeholder(call)
        else call
        for call in calls
    )
    return OutputSummary(kept, summary.texts, summary.finish_reasons, summary.refusal)


def is_transfer_tool(name: str) -> bool:
    """Whether ``name`` is ADK's transfer tool's (any case): a tool span of it hands off."""
    return name.lower() == TRANSFER_TOOL


def transfer_target(name: str, arguments: Any) -> str:
    """The agent a transfer tool's call (``attrs.is_transfer(name)``) hands to, written as
    the OpenAI Agents SDK writes agents in tool names (``agent_in_tool_style``): ADK's
    ``transfer_to_agent`` names it in its ``agent_name`` argument (a JSON object, or its
    text), ``""`` when the arguments were not recorded (content capture off: it names no
    one); any other, ``transfer_to_<agent>``, by its name (also ``transfer_to_agent`` whose
    arguments hold no ``agent_name``: the SDK's tool for an agent named ``agent``)."""
    if is_transfer_tool(name):
        if arguments is None:
            return ""
        decoded = parse_json(arguments)
        target = decoded.get(_TRANSFER_ARGUMENT) if isinstance(decoded, dict) else None
        if isinstance(target, str) and target:
            return agent_in_tool_style(target)
    return agent_in_tool_style(name[len(TRANSFER_TOOL_PREFIX) :])


def event_answer(value: Any) -> Any:
    """The text of an ADK ``Event`` as OpenInference writes it in ``output.value`` (its
    content's text parts, thoughts left out), ``None`` when it has none (a refusal: Gemini's
    safety block has no content); any other output value as it is."""
    if not (isinstance(value, str) and value.startswith("{")):
        return value
    if not all(key in value for key in _EVENT_KEYS):
        return value
    event = parse_json(value)
    if not isinstance(event, dict):
        return value
    content = event.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    texts = [
        part["text"]
        for part in (parts if isinstance(parts, list) else ())
        if isinstance(part, dict)
        and isinstance(part.get("text"), str)
        and part["text"]
        and part.get("thought") is not True
    ]
    return "\n".join(texts) if texts else None


def _finish_reason(reason: Any) -> Any:
    if not isinstance(reason, str):
        return reason
    return _GEMINI_FINISH_REASONS.get(reason, reason.lower())


def response_summary(response: Any) -> OutputSummary | None:
    """The output of an ADK ``LlmResponse`` (decoded JSON): ``content.parts[]``
    ``function_call {id, name, args}`` and ``text`` (thoughts are not output), and
    ``finish_reason`` (a Gemini enum name, mapped as ADK maps it); ``None`` for anything that
    is no object."""
    if not isinstance(response, dict):
        return None
    builder = OutputBuilder()
    builder.finish(_finish_reason(response.get("finish_reason")))
    content = response.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    for part in parts if isinstance(parts, list) else ():
        if not isinstance(part, dict):
            continue
        call = part.get("function_call")
        if isinstance(call, dict):
            builder.call(call.get("name"), call.get("id"), call.get("args"))
        elif part.get("thought") is not True:
            builder.text(part.get("text"))
    return builder.build()


def raw_response_summary(raw: Any) -> OutputSummary | None:
    """The output of an OpenInference model span's ``output.value`` when it is ADK's
    ``LlmResponse`` (see the module's docstring), ``None`` when it is not (any other
    producer's raw response): a cheap look at how it opens before any decoding."""
    if not (isinstance(raw, str) and raw.startswith(_RESPONSE_OPENINGS)):
        return None
    return response_summary(parse_json(raw))
