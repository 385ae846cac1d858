"""Role field extraction shared by every convention.

Each convention says where its keys are (``ToolSpec``, ``AgentSpec``); this module reads them
in that priority order, then falls back to span events only for what the attributes lacked.
Values are kept as they arrived (JSON strings stay strings); model outputs are parsed,
because their tool calls must be split out in emission order, and two framework envelopes
when they may hold what no attribute does: a LangChain ``ToolMessage`` result (its call id,
its error: ``frameworks.tool_message``) and pydantic-ai's request parameters (its output tools).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable
from typing import Final

from toolwatch.conventions import (
    genai,
    google_adk,
    langsmith,
    logfire,
    openinference,
    openllmetry,
    pydantic_ai,
    vercel_ai,
)
from toolwatch.conventions.attrs import (
    REFUSAL_REASONS,
    Attributes,
    Convention,
    EventSource,
    OutputSummary,
    RoleFields,
    clean_id,
    finish_reason_list,
    first,
    first_str,
    merge_summaries,
    parse_json,
    plain_text,
)
from toolwatch.conventions.events import ToolEvents, output_events, tool_events
from toolwatch.conventions.frameworks import (
    HANDOFF_TARGET_KEYS,
    NAMED_HANDOFF_PREFIX,
    is_handoff_span,
    mcp_tool_error,
)
from toolwatch.jsontext import writable_text
from toolwatch.model import RequestedCall

__all__ = [
    "GUARD_RAISED",
    "FieldBuilder",
    "agent_fields",
    "guard_raised_refusal",
    "guardrail_fields",
    "handoff_fields",
    "llm_fields",
    "tool_fields",
    "tripwire_refusal",
]

#: Extracts a role's fields: (convention, span name, status code, attributes, events).
FieldBuilder = Callable[[Convention, str, int, Attributes, EventSource], RoleFields]

_STATUS_ERROR: Final = 2  # OTLP Status.code STATUS_CODE_ERROR
_ERROR_TYPE: Final = ("error.type",)
_BLOCKED: Final = "BLOCKED_"
_OUTPUT_TOOLS: Final = '"output_tools"'  # in the text of pydantic-ai's request parameters
_NO_OUTPUT_TOOLS: Final = '"output_tools":[]'
_AGENT_NAME: Final = ("gen_ai.agent.name",)
_MODEL: Final = (
    "gen_ai.response.model",
    "gen_ai.request.model",
    "llm.model_name",
    "ai.response.model",
)
_CONVERSATION: Final = ("gen_ai.conversation.id", "session.id")
#: A guardrail span's flag that it tripped, and its name: the contrib openai-agents
#: instrumentation's, then Logfire's (``Guardrail {name!r} {triggered=}``).
_TRIPPED: Final = (genai.GUARDRAIL_TRIGGERED, "triggered")
_GUARDRAIL_NAME: Final = (genai.GUARDRAIL_NAME, "name")
#: The OpenAI Agents SDK's error on the span a tripped guardrail stopped (its ``SpanError``:
#: the turn's for an input guardrail, the agent's for an output one), as the instrumentations
#: write it in the span's status message: OpenInference and the contrib one
#: ``Guardrail tripwire triggered: {'guardrail': 'name', ...}``, OpenLLMetry
#: ``{'message': 'Guardrail tripwire triggered', 'data': {'guardrail': 'name'}}``.
_TRIPWIRE: Final = "Guardrail tripwire triggered"
_TRIPWIRE_WITHIN: Final = 16  # characters before it: OpenLLMetry's "{'message': '"
#: The name as Python writes a string (``repr``): in single quotes, or in double quotes when it
#: holds a single quote and no double one, with backslash escapes.
_TRIPWIRE_GUARD: Final = re.compile(
    r"""'guardrail': ('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""", re.DOTALL
)
#: A Guardrails AI guard that raised (a validator's ``on_fail="exception"``, on the model's
#: output or on the messages, prompt or instructions before the model is called): the status
#: message its own spans end with (``{type}: {message}``, as OpenTelemetry's and
#: OpenInference's instrumentation record an exception; guardrails-ai's ``run/runner.py``).
_GUARD_RAISED: Final = re.compile(
    r"ValidationError: (?:Validation failed for field with errors:"
    r"|(?:Messages|Message history|Prompt|Instructions) validation failed)"
)
#: The refusal of a Guardrails AI guard that raised (``guard_raised_refusal``): the
#: application got no answer from it, unless it answered after (``assembly.timeline``).
GUARD_RAISED: Final = "guardrail validation failed"
_NO_OUTPUT: Final = OutputSummary()
_FINISH_REASONS: Final = (
    "gen_ai.response.finish_reasons",
    "gen_ai.response.finish_reason",
    "llm.finish_reason",
    "llm.stop_reason",  # OpenInference's JavaScript Bedrock instrumentation
)


def _needs_events(found: ToolEvents, failed: bool) -> bool:
    return (
        found.arguments is None
        or found.result is None
        or found.call_id is None
        or (failed and found.error_type is None)
    )


def _tool_values(
    convention: Convention, attrs: Attributes, events: EventSource, failed: bool
) -> ToolEvents:
    spec = convention.tool
    arguments = first(attrs, spec.arguments)
    if arguments is None and spec.assemble_arguments is not None:
        arguments = spec.assemble_arguments(attrs)
    found = ToolEvents(
        arguments,
        first(attrs, spec.result),
        first(attrs, spec.call_id),
        first_str(attrs, _ERROR_TYPE),
    )
    if events is None or not _needs_events(found, failed):
        return found
    extra = tool_events(events())
    if not failed:  # a recorded-but-handled exception does not make the call fail
        extra = ToolEvents(extra.arguments, extra.result, extra.call_id)
    return found.fill(extra)


def tool_fields(
    convention: Convention, name: str, status_code: int, attrs: Attributes, events: EventSource
) -> RoleFields:
    """A tool execution: name as emitted, call id, raw arguments and result, error type."""
    spec = convention.tool
    values = _tool_values(convention, attrs, events, status_code == _STATUS_ERROR)
    call_id, error_type = clean_id(values.call_id), values.error_type
    if spec.read_result is not None and (call_id is None or error_type is None):
        said_id, said_error = spec.read_result(values.result)
        call_id = call_id if call_id is not None else clean_id(said_id)
        error_type = error_type if error_type is not None else said_error
    if error_type is None and spec.status:
        status = first_str(attrs, spec.status)
        if status is not None and status.lower() == "error":
            error_type = "error"  # failed, with no exception to name its type
    tool_name = first_str(attrs, spec.name) or spec.name_from_span(name) or name
    if error_type is None:
        error_type = mcp_tool_error(values.result, tool_name)  # an MCP server's failure
    fields: RoleFields = {
        "tool_name": tool_name,
        "call_id": call_id,
        "arguments": spec.unwrap_arguments(values.arguments),
        "result": values.result,
        "error_type": error_type,
        "agent_name": first_str(attrs, _AGENT_NAME),
    }
    if google_adk.TOOL_TYPE in attrs or google_adk.EVENT_ID in attrs:  # Google ADK's, maybe
        _read_adk_tool(fields, tool_name, attrs)
    return fields


def _read_adk_tool(fields: RoleFields, tool_name: str, attrs: Attributes) -> None:
    """What ``google_adk`` reads on a tool span of ADK's: its transfer's target, and no
    result where ADK wrote its stand-in for none."""
    fields["result"] = google_adk.tool_result(fields.get("result"), attrs)
    target = google_adk.tool_transfer(tool_name, fields.get("arguments"), attrs)
    if target is not None:
        fields["handoff_to"] = target


def _output_fields(summary: OutputSummary | None, attrs: Attributes) -> RoleFields:
    """Finish reasons (attributes first), refusal and text of a model or agent output."""
    if summary is None:
        summary = _NO_OUTPUT
    reasons: dict[str, None] = {}  # insertion-ordered, without repeats
    for key in _FINISH_REASONS:
        value = attrs.get(key)
        if value is not None:
            for reason in finish_reason_list(value):
                reasons[reason] = None
    for reason in summary.finish_reasons:
        reasons[reason] = None
    refusal = summary.refusal
    if refusal is None:
        refusal = _refusal_reason(reasons)
    if refusal is None:
        refusal = _blocked_prompt(attrs)
    fields: RoleFields = {
        "finish_reasons": tuple(reasons),
        "refusal": refusal,
        "output_text": "\n".join(summary.texts) if summary.texts else None,
        "model": first_str(attrs, _MODEL),
    }
    return fields


def _blocked_prompt(attrs: Attributes) -> str | None:
    """A prompt the model refused to answer at all: Gemini blocks it before any candidate,
    which google-genai's instrumentation records as ``error.type`` ``BLOCKED_<reason>``."""
    error = attrs.get("error.type")
    if isinstance(error, str) and error[:8].upper() == _BLOCKED and len(error) > 8:
        return error.lower()
    return None


def _refusal_reason(reasons: Iterable[str]) -> str | None:
    for reason in reasons:
        if reason in REFUSAL_REASONS:
            return reason
    return None


def _output_messages(attrs: Attributes) -> OutputSummary | None:
    messages = attrs.get(genai.OUTPUT_MESSAGES)
    if messages is None:
        return None
    summary = genai.output_summary(messages)
    if summary is not None and google_adk.EVENT_ID in attrs:  # ADK's ids for calls without
        summary = google_adk.without_placeholder_ids(summary)
    return summary


# Output encodings in preference order: the parsed parts format first, then flattened keys.
_LLM_SOURCES: Final[tuple[Callable[[Attributes], OutputSummary | None], ...]] = (
    _output_messages,
    openinference.output_summary,
    openllmetry.output_summary,
    vercel_ai.output_summary,
    logfire.output_summary,
    langsmith.output_summary,
    genai.adk_output_summary,
)


def _has_content(summary: OutputSummary | None) -> bool:
    return summary is not None and bool(summary.tool_calls or summary.texts)


def _llm_output(attrs: Attributes, events: EventSource) -> OutputSummary | None:
    """The first encoding with calls or text (producers in transition emit two; each call
    must count once), finish reasons of those read; events only if attributes had none."""
    summary = None
    for source in _LLM_SOURCES:
        found = source(attrs)
        summary = found if summary is None else merge_summaries((summary, found))
        if _has_content(summary):
            return summary
    if events is not None:
        summary = merge_summaries((summary, output_events(events())))
    return summary


def llm_fields(
    convention: Convention, name: str, status_code: int, attrs: Attributes, events: EventSource
) -> RoleFields:
    """A model call: requested tool calls in emission order, text, finish reasons, refusal."""
    summary = _llm_output(attrs, events)
    fields = _output_fields(summary, attrs)
    calls = summary.tool_calls if summary is not None else ()
    fields["output_tool_calls"] = _without_output_tools(calls, attrs) if calls else calls
    if calls and google_adk.EVENT_ID in attrs:  # one of Google ADK's model spans
        target = google_adk.requested_transfer(calls)
        if target is not None:
            fields["handoff_to"] = target
    return fields


def guardrail_fields(
    convention: Convention, name: str, status_code: int, attrs: Attributes, events: EventSource
) -> RoleFields:
    """A guardrail that tripped refused the run (the OpenAI Agents SDK raises: an input
    guardrail's run gives no answer, an output guardrail's answer is withheld): ``refusal``
    names it. One that did not trip, or does not say, has no fields."""
    if not any(attrs.get(key) is True for key in _TRIPPED):
        return RoleFields()
    guard = first_str(attrs, _GUARDRAIL_NAME)
    fields: RoleFields = {"refusal": f"guardrail {guard} tripped" if guard else "guardrail tripped"}
    return fields


def tripwire_refusal(status_message: str) -> str | None:
    """The refusal an ERROR span's status message says when it is the OpenAI Agents SDK's
    tripped guardrail (``_TRIPWIRE``), on whichever span the SDK stopped (the turn's, the
    agent's): ``guardrail <name> tripped``, as a guardrail span that says it tripped
    (``guardrail_fields``). The only place OpenInference records a trip (its guardrail span
    carries no verdict), and OpenLLMetry's (it writes no guardrail span)."""
    at = status_message.find(_TRIPWIRE, 0, _TRIPWIRE_WITHIN + len(_TRIPWIRE))
    if at < 0:
        return None
    found = _TRIPWIRE_GUARD.search(status_message, at + len(_TRIPWIRE))
    guard = _string_literal(found.group(1)) if found is not None else None
    return f"guardrail {guard} tripped" if guard else "guardrail tripped"


def _string_literal(text: str) -> str | None:
    """The string a Python string literal (a ``repr``) spells, escapes undone; ``None`` when it
    spells none (an escape it does not know: ``\\N{no such name}``)."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    # An escape may spell a lone surrogate ('\\ud800'), which no output could carry.
    return writable_text(value) if isinstance(value, str) else None


def guard_raised_refusal(status_message: str) -> str | None:
    """``GUARD_RAISED`` when the ERROR status message of one of Guardrails AI's own spans
    (its guard or step) says the guard raised a validation error. Asked of those spans only:
    the same exception, escaping through a tool, an agent or the application's own spans,
    is written on each of them too."""
    return GUARD_RAISED if _GUARD_RAISED.match(status_message) else None


def handoff_fields(name: str, attrs: Attributes) -> RoleFields:
    """A plain span: when it is a handoff span, the agent it names as handed to as
    ``tool_name`` (the handoff is a transfer tool's call), ``""`` when it names none
    (OpenLLMetry's); else nothing. So a plain span with a ``tool_name`` is a handoff span."""
    if not is_handoff_span(name):
        return RoleFields()
    target = first_str(attrs, HANDOFF_TARGET_KEYS)
    if target is None and name.startswith(NAMED_HANDOFF_PREFIX):
        target = name[len(NAMED_HANDOFF_PREFIX) :]
    fields: RoleFields = {"tool_name": target or ""}
    return fields


def _without_output_tools(
    calls: tuple[RequestedCall, ...], attrs: Attributes
) -> tuple[RequestedCall, ...]:
    """``calls`` but those of pydantic-ai's output tools (``final_result``): a structured
    answer the model returns by calling the tool pydantic-ai offers for its output type,
    which runs no tool (no span; the agent span's ``final_result`` holds it). They are the
    run's answer, not its calls. ``model_request_parameters`` names them."""
    parameters = attrs.get(pydantic_ai.REQUEST_PARAMETERS)
    if (
        not isinstance(parameters, str)
        or _OUTPUT_TOOLS not in parameters
        or _NO_OUTPUT_TOOLS in parameters  # the usual case: an output type that is text
    ):
        return calls
    offered = parse_json(parameters)
    tools = offered.get("output_tools") if isinstance(offered, dict) else None
    if not isinstance(tools, list):
        return calls
    names = {t.get("name") for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)}
    return tuple(call for call in calls if call.name not in names)


def _agent_output(
    convention: Convention, attrs: Attributes, events: EventSource
) -> OutputSummary | None:
    summary = _output_messages(attrs)
    if summary is not None and summary.texts:
        return summary
    spec = convention.agent
    text = plain_text(spec.unwrap_output(first(attrs, spec.output)))
    if text is not None:
        found = summary or _NO_OUTPUT
        return OutputSummary(found.tool_calls, (text,), found.finish_reasons, found.refusal)
    if events is not None:
        return merge_summaries((summary, output_events(events())))
    return summary


def agent_fields(
    convention: Convention, name: str, status_code: int, attrs: Attributes, events: EventSource
) -> RoleFields:
    """An agent run: agent name, final output text, conversation id, model."""
    spec = convention.agent
    fields = _output_fields(_agent_output(convention, attrs, events), attrs)
    fields["agent_name"] = first_str(attrs, spec.name) or spec.name_from_span(name)
    fields["conversation_id"] = first_str(attrs, _CONVERSATION)
    return fields
