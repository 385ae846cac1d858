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
  ``transfer_to_<agent>``, which assembly reads by name. The ADK reading is decided here, on
  ADK's spans only (its transfer tool span: ``gen_ai.tool.type`` ``TransferToAgentTool``, on
  every format, content capture on or off; the model span asking for it:
  ``gcp.vertex.agent.event_id``), and carried as ``SpanRecord.handoff_to``
  (``tool_transfer``, ``requested_transfer``): another producer's tool of that name is read
  as the SDK's, a transfer to an agent named ``agent``.
* **A crashed tool's result** under the legacy format (schema 1) is ADK's stand-in
  ``{"result": "<not specified>"}`` (``gcp.vertex.agent.tool_response``), as its call id
  ``<not specified>``: no result, as schema 2 and OpenInference record it (``tool_result``).
* **OpenInference's ``output.value``** on its ``agent_run [<agent>]`` and ``invocation``
  spans is ADK's last ``Event`` as JSON (an ``LlmResponse`` with ``invocation_id``,
  ``author``, ``actions``, ``id`` and ``timestamp`` beside it): the answer is its content's
  text (``event_answer``). Those spans carry no ADK key, so the Event is told by its
  top-level keys: another agent's structured answer stays the answer.
* **OpenInference's model span on ADK 2.x** (openinference-instrumentation-google-adk
  1.0.5). ADK 2.x writes no ``call_llm`` span, and the instrumentation sets each model
  call's attributes on the span current when it runs, ADK's ``invoke_agent`` (so it carries
  ``gcp.vertex.agent.event_id``): one span, kind LLM, for all of an agent's model calls.
  Its ``output.value``, the last call's ``LlmResponse``, is the one true output there; its
  flattened ``llm.output_messages`` keep the ``tool_calls`` of earlier calls that no later
  call overwrote, the latest requesting call's when its calls were at least as many as any
  earlier one's. ``merged_model_output`` reads the response, and, when it asks for no tool,
  those flattened calls as the span's requests if the last call's history
  (``input.value``, the ``LlmRequest``) shows them as its latest model turn asking for
  tools: then calls the model asked for together read as parallel, as under ADK's tracer.

Pure functions of the values given; no protobuf.
"""

from __future__ import annotations

from typing import Any, Final

from toolwatch.conventions.attrs import (
    Attributes,
    OutputBuilder,
    OutputSummary,
    parse_json,
)
from toolwatch.model import RequestedCall

__all__ = [
    "EVENT_ID",
    "KEYS",
    "TOOL_TYPE",
    "TRANSFER_TOOL",
    "event_answer",
    "merged_model_output",
    "requested_transfer",
    "response_summary",
    "tool_result",
    "tool_transfer",
    "without_placeholder_ids",
]

#: On every model and tool span ADK's own tracer writes (both of its telemetry formats; not on
#: a tool span whose tool raised), and on OpenInference's model span on ADK 2.x.
EVENT_ID: Final = "gcp.vertex.agent.event_id"
#: On every tool span of ADK's (every format, OpenInference's too): the tool's class name.
#: Other producers write it too (the GenAI conventions' ``function``, ``extension``, ...).
TOOL_TYPE: Final = "gen_ai.tool.type"
KEYS: Final = frozenset({EVENT_ID, TOOL_TYPE})
#: ADK's transfer tool, its class, and the argument naming the agent it hands over to.
TRANSFER_TOOL: Final = "transfer_to_agent"
_TRANSFER_TOOL_TYPE: Final = "TransferToAgentTool"
_TRANSFER_ARGUMENT: Final = "agent_name"
#: The legacy format's result key, and ADK's stand-in there for a result it never got.
_LEGACY_RESULT: Final = "gcp.vertex.agent.tool_response"
_NOT_SPECIFIED: Final = "<not specified>"
#: An ADK ``Event``'s own top-level keys beside its ``LlmResponse`` fields, as
#: ``model_dump_json`` writes them (each has a default: always written).
_EVENT_KEYS: Final = ("invocation_id", "author", "actions", "id", "timestamp")
_EVENT_MARK: Final = '"invocation_id"'  # a cheap look before any decoding
#: ``LlmResponse`` fields of which a response dumped without its unset fields has one.
_RESPONSE_KEYS: Final = ("content", "finish_reason", "error_code")
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


def _named_agent(arguments: Any) -> str:
    """The agent a ``transfer_to_agent`` call's arguments name (a JSON object, or its text);
    ``""`` when they name none (not recorded: content capture off; the legacy format's
    ``{}`` then)."""
    decoded = parse_json(arguments)
    target = decoded.get(_TRANSFER_ARGUMENT) if isinstance(decoded, dict) else None
    return target if isinstance(target, str) else ""


def tool_transfer(tool_name: str, arguments: Any, attrs: Attributes) -> str | None:
    """The agent a tool span hands the conversation to when it is ADK's transfer tool's
    (``TransferToAgentTool``; or named ``transfer_to_agent`` with ADK's event id), as its
    ``agent_name`` argument names it, ``""`` when its arguments name none; ``None`` for any
    other tool span (another producer's ``transfer_to_agent`` is the OpenAI Agents SDK's
    tool for an agent named ``agent``: assembly reads it by name)."""
    if attrs.get(TOOL_TYPE) != _TRANSFER_TOOL_TYPE and not (
        tool_name == TRANSFER_TOOL and EVENT_ID in attrs
    ):
        return None
    return _named_agent(arguments)


def requested_transfer(calls: tuple[RequestedCall, ...]) -> str | None:
    """The agent the first ``transfer_to_agent`` call one of ADK's model spans asks for hands
    over to (``""``: its arguments name none); ``None`` when it asks for none."""
    for call in calls:
        if call.name == TRANSFER_TOOL:
            return _named_agent(call.arguments)
    return None


def tool_result(result: Any, attrs: Attributes) -> Any:
    """A tool span's ``result``, but ``None`` for the legacy format's stand-in for a result
    ADK never got (a tool that raised: ``{"result": "<not specified>"}``)."""
    if not (isinstance(result, str) and _NOT_SPECIFIED in result and _LEGACY_RESULT in attrs):
        return result
    return None if parse_json(result) == {"result": _NOT_SPECIFIED} else result


def _is_event(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and all(key in value for key in _EVENT_KEYS)
        and isinstance(value["author"], str)
        and isinstance(value["actions"], dict)
    )


def event_answer(value: Any) -> Any:
    """The text of an ADK ``Event`` as OpenInference writes it in ``output.value`` (its
    content's text parts, thoughts left out), ``None`` when it has none (a refusal: Gemini's
    safety block has no content); any other output value as it is, JSON with some of those
    keys included. Only a JSON text holding ``"invocation_id"`` is decoded."""
    if not (isinstance(value, str) and value.startswith("{") and _EVENT_MARK in value):
        return value
    event = parse_json(value)
    if not _is_event(event):
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


def _function_calls(content: Any) -> list[dict[str, Any]]:
    """The ``function_call`` objects of a ``Content``'s parts, in order."""
    parts = content.get("parts") if isinstance(content, dict) else None
    calls = []
    for part in parts if isinstance(parts, list) else ():
        call = part.get("function_call") if isinstance(part, dict) else None
        if isinstance(call, dict):
            calls.append(call)
    return calls


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


def _latest_turn_asked(history: Any) -> list[tuple[Any, Any]] | None:
    """The ``(name, args)`` of the calls the latest model turn asking for tools in an
    ``LlmRequest``'s ``contents`` (as JSON) asked for; ``None`` when none did or it is no
    request (absent, or cut at ``ingest.max_value_bytes``)."""
    request = parse_json(history) if isinstance(history, str) else None
    contents = request.get("contents") if isinstance(request, dict) else None
    turns: list[Any] = contents if isinstance(contents, list) else []
    # Indexed, not reversed(): mypyc (mypy 2.4) fails on reversed() of a list[Any] (an internal
    # error, "AssertionError: Any", building the compiled hot path).
    for at in range(len(turns) - 1, -1, -1):
        content = turns[at]
        if isinstance(content, dict) and content.get("role") == "model":
            calls = _function_calls(content)
            if calls:
                return [(call.get("name"), call.get("args")) for call in calls]
    return None


def _one_turn(calls: tuple[RequestedCall, ...], history: Any) -> bool:
    """Whether ``calls`` (flattened: arguments as JSON text) are the latest model turn
    asking for tools in ``history``, all of it and nothing else."""
    asked = _latest_turn_asked(history)
    return asked is not None and asked == [(c.name, parse_json(c.arguments)) for c in calls]


def merged_model_output(
    raw: Any, history: Any, flattened: OutputSummary | None
) -> OutputSummary | None:
    """The output of OpenInference's model span on ADK 2.x (see the module's docstring) from
    its ``output.value`` (``raw``), ``input.value`` (``history``) and what its flattened
    ``llm.output_messages`` hold (``flattened``): the ``LlmResponse`` in ``raw``; when that
    asks for no tool, with ``flattened``'s calls as its requests if ``history`` shows them as
    its latest model turn asking for tools (they ran before this response: ADK runs every
    call it is asked for), else none (they would join calls of two turns). ``flattened``
    when ``raw`` is no ``LlmResponse``."""
    response = parse_json(raw) if isinstance(raw, str) else None
    if not (isinstance(response, dict) and any(key in response for key in _RESPONSE_KEYS)):
        return flattened
    summary = response_summary(response)
    if summary is None or summary.tool_calls or flattened is None or not flattened.tool_calls:
        return summary
    if not _one_turn(flattened.tool_calls, history):
        return summary
    return OutputSummary(
        flattened.tool_calls, summary.texts, summary.finish_reasons, summary.refusal
    )
