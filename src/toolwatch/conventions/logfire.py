"""Pydantic Logfire's spans, CONVENTIONS.md §4.1 (the Logfire row of the OpenAI Agents table).

Logfire names a span by its message *template* and puts each field of the template in an
attribute of its own; ``logfire.msg_template`` repeats the template, ``logfire.msg`` holds it
filled in. ``logfire.instrument_openai_agents()`` (observed with logfire 5.4 on the OpenAI
Agents SDK 0.24, ``docs/observed-conventions.md``) emits:

- ``Function: {name}``: one tool execution. ``name`` is the tool, ``input`` its arguments
  (JSON), ``output`` its result; a failed tool is status ERROR with an ``error`` JSON
  attribute. No call id: the SDK's function span has none.
- ``Agent run: {name!r}``: one agent run, ``name`` the agent. An ``as_tool()`` agent's run
  nests inside the calling ``Function:`` span (through a ``Task:`` span).
- ``Responses API with {gen_ai.request.model!r}``: one model call, ``gen_ai.operation.name``
  ``chat`` (the GenAI rule classifies it). Its ``events`` attribute is a JSON array of GenAI
  events, the whole conversation so far and then this call's output: the trailing assistant
  events, whose ``tool_calls`` are ``[{id, type, function: {name, arguments}}]``. A refusal is
  an assistant event with ``data: {type: "refusal", refusal: ...}``. Older Logfire, and
  pydantic-ai's instrumentation format v1 on its chat spans, record the output as
  ``gen_ai.choice`` events instead: the assistant message is in their ``message``.

- ``Guardrail {name!r} {triggered=}``: a guardrail, ``name`` it, ``triggered`` true when it
  tripped (the run is refused).

``Task:``, ``Turn {turn} for agent …``, ``Handoff: …`` and the trace root are plain spans. A
conversation longer than ``max_value_bytes`` cuts ``events``: its requests are then lost, the
executions (``Function:``) still count.
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

__all__ = ["CONVENTION", "KEYS", "MSG_TEMPLATE", "classify", "output_summary"]

MSG_TEMPLATE: Final = "logfire.msg_template"
_EVENTS: Final = "events"
_CHOICE: Final = "gen_ai.choice"

#: Attribute keys this module reads (the generic ones only matter on Logfire's templates).
KEYS: Final = frozenset({MSG_TEMPLATE, _EVENTS, "name", "input", "output", "to_agent", "triggered"})

_ROLES: Final = {
    "Function: {name}": SpanRole.TOOL,
    "Agent run: {name!r}": SpanRole.AGENT,
    "Guardrail {name!r} {triggered=}": SpanRole.GUARDRAIL,
}

CONVENTION: Final = Convention(
    name="logfire",
    tool=ToolSpec(
        name=("name",),
        call_id=(),
        arguments=("input",),
        result=("output",),
        name_from_span=lambda name: None,  # the span name is the template
    ),
    agent=AgentSpec(name=("name",), output=(), name_from_span=lambda name: None),
)


def classify(name: str, attrs: Attributes) -> tuple[SpanRole, Convention] | None:
    """Role by Logfire's message template; ``None`` for every other template."""
    template = attrs.get(MSG_TEMPLATE)
    role = _ROLES.get(template) if isinstance(template, str) else None
    return None if role is None else (role, CONVENTION)


def output_summary(attrs: Attributes) -> OutputSummary | None:
    """This model call's output from the ``events`` attribute: its trailing assistant
    events (the events before them are the conversation it was sent)."""
    events = parse_json(attrs.get(_EVENTS)) if _EVENTS in attrs else None
    if not isinstance(events, list):
        return None
    start = len(events)
    while start > 0 and _assistant_message(events[start - 1]) is not None:
        start -= 1
    builder = OutputBuilder()
    for event in events[start:]:
        message = _assistant_message(event)
        if message is not event:  # a gen_ai.choice: the finish reason is the event's
            builder.finish(event.get("finish_reason"))
        if message is not None:
            _add_event(builder, message)
    return builder.build()


def _assistant_message(event: Any) -> dict[str, Any] | None:
    """The assistant message an event holds: the event itself (``role: assistant``), or a
    ``gen_ai.choice`` event's ``message`` (older Logfire, pydantic-ai format v1, whose choice
    is ``{"event.name": "gen_ai.choice", "index", "message": {"role": "assistant", ...}}``);
    ``None`` for any other event."""
    if not isinstance(event, dict):
        return None
    if event.get("role") == "assistant":
        return event
    message = event.get("message") if event.get("event.name") == _CHOICE else None
    if isinstance(message, dict) and message.get("role") == "assistant":
        return message
    return None


def _add_event(builder: OutputBuilder, event: dict[str, Any]) -> None:
    calls = event.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            builder.call(function.get("name"), call.get("id"), function.get("arguments"))
    data = event.get("data")
    if isinstance(data, dict) and data.get("type") == "refusal":
        refusal = data.get("refusal")
        builder.refuse(refusal if isinstance(refusal, str) and refusal else "refusal")
    elif not calls:
        builder.text(event.get("content"))
