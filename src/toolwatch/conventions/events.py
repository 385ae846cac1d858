"""Span events that carry tool-call content, CONVENTIONS.md §0.4 and §4.3.

Read only when a span's attributes lack what the role needs:

* ``exception`` (OTel exceptions semconv): ``exception.type`` is the tool's error type when
  the span has no ``error.type``.
* Strands (default mode) on tool spans: ``gen_ai.tool.message`` holds the arguments in
  ``content`` and the call id in ``id``; ``gen_ai.choice`` holds the result in ``message``.
* Strands and Semantic Kernel on model and agent spans: ``gen_ai.choice`` with
  ``finish_reason`` and ``message`` (Strands: content blocks ``[{"text"}, {"toolUse"}]``; SK:
  an OpenAI-style ``{"content", "tool_calls"}`` message; agent spans: plain text, kept as it
  is when it is JSON but neither blocks nor a message, an agent's structured answer).
* GenAI v1.37+ opt-in: ``gen_ai.client.inference.operation.details`` with
  ``gen_ai.input.messages`` / ``gen_ai.output.messages`` in the parts format.
* GenAI v1.26-1.27 (and older Semantic Kernel) on model spans: ``gen_ai.content.completion``
  with ``gen_ai.completion``, a JSON array of OpenAI-style messages. Those versions have no
  tool span: the calls this event requests are the only record of them. Its companion
  ``gen_ai.content.prompt`` holds the conversation sent, which no recognizer reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from toolwatch.conventions import genai
from toolwatch.conventions.attrs import OutputBuilder, OutputSummary, SpanEvent, parse_json

__all__ = [
    "EVENT_ATTRIBUTE_KEYS",
    "EVENT_NAMES",
    "ToolEvents",
    "output_events",
    "tool_events",
]

_EXCEPTION: Final = "exception"
_TOOL_MESSAGE: Final = "gen_ai.tool.message"
_CHOICE: Final = "gen_ai.choice"
_DETAILS: Final = "gen_ai.client.inference.operation.details"
_INPUT_MESSAGES: Final = "gen_ai.input.messages"
_COMPLETION: Final = "gen_ai.content.completion"
_COMPLETION_MESSAGES: Final = "gen_ai.completion"

# The keys of a Strands (Bedrock Converse) content block, and of an OpenAI-style message: a
# ``gen_ai.choice`` message that decodes to neither is an answer that is itself JSON.
_BLOCK_KEYS: Final = frozenset(
    {
        "text",
        "toolUse",
        "toolResult",
        "reasoningContent",
        "image",
        "document",
        "video",
        "cachePoint",
        "guardContent",
        "citationsContent",
    }
)
_MESSAGE_KEYS: Final = frozenset({"role", "content", "tool_calls", "refusal"})

#: Events ingest decodes; others are never converted.
EVENT_NAMES: Final = frozenset({_EXCEPTION, _TOOL_MESSAGE, _CHOICE, _DETAILS, _COMPLETION})
#: Event attributes ingest converts (an exception's stack trace is never read).
EVENT_ATTRIBUTE_KEYS: Final = frozenset(
    {
        "exception.type",
        "content",
        "id",
        "message",
        "finish_reason",
        _INPUT_MESSAGES,
        genai.OUTPUT_MESSAGES,
        _COMPLETION_MESSAGES,
    }
)


@dataclass(slots=True, init=False)
class ToolEvents:
    """What a tool span's attributes or events say; each field ``None`` when none carried
    it. Built for every tool span, so its constructor is written out and compiled
    (``toolwatch.compiled``); a named tuple's stays interpreted. Never mutated."""

    arguments: Any
    result: Any
    call_id: Any
    error_type: str | None

    def __init__(
        self,
        arguments: Any = None,
        result: Any = None,
        call_id: Any = None,
        error_type: str | None = None,
    ) -> None:
        self.arguments = arguments
        self.result = result
        self.call_id = call_id
        self.error_type = error_type

    def fill(self, other: ToolEvents) -> ToolEvents:
        """These values, with the missing ones taken from ``other``."""
        return ToolEvents(
            _either(self.arguments, other.arguments),
            _either(self.result, other.result),
            _either(self.call_id, other.call_id),
            _either(self.error_type, other.error_type),
        )


def _either(mine: Any, theirs: Any) -> Any:
    return mine if mine is not None else theirs


def _parts(value: Any, part_type: str) -> list[dict[str, Any]]:
    """The parts of ``part_type`` in a parts-format messages value."""
    messages = parse_json(value)
    found: list[dict[str, Any]] = []
    for message in messages if isinstance(messages, list) else ():
        parts = message.get("parts") if isinstance(message, dict) else None
        for part in parts if isinstance(parts, list) else ():
            if isinstance(part, dict) and part.get("type") == part_type:
                found.append(part)
    return found


def _details_tool_events(attrs: Any) -> ToolEvents:
    calls = _parts(attrs.get(_INPUT_MESSAGES), "tool_call")
    responses = _parts(attrs.get(genai.OUTPUT_MESSAGES), "tool_call_response")
    call = calls[0] if calls else {}
    response = responses[0] if responses else {}
    # The schema names the result "response"; the spec's example tables say "result".
    result = response.get("response", response.get("result"))
    return ToolEvents(call.get("arguments"), result, call.get("id") or response.get("id"))


def _one_tool_event(event: SpanEvent) -> ToolEvents:
    attrs = event.attributes
    if event.name == _TOOL_MESSAGE:
        return ToolEvents(arguments=attrs.get("content"), call_id=attrs.get("id"))
    if event.name == _CHOICE:
        return ToolEvents(result=attrs.get("message"), call_id=attrs.get("id"))
    if event.name == _DETAILS:
        return _details_tool_events(attrs)
    if event.name == _EXCEPTION:
        error_type = attrs.get("exception.type")
        return ToolEvents(error_type=error_type if isinstance(error_type, str) else None)
    return ToolEvents()


def tool_events(events: Sequence[SpanEvent]) -> ToolEvents:
    """Arguments, result, call id and exception type from a tool span's events; the first
    event that carries a field wins."""
    merged = ToolEvents()
    for event in events:
        merged = merged.fill(_one_tool_event(event))
    return merged


def _add_blocks(builder: OutputBuilder, blocks: list[Any]) -> None:
    """Strands / Bedrock Converse content blocks."""
    for block in blocks:
        if not isinstance(block, dict):
            continue
        builder.text(block.get("text"))
        use = block.get("toolUse")
        if isinstance(use, dict):
            builder.call(use.get("name"), use.get("toolUseId"), use.get("input"))


def _add_chat_message(builder: OutputBuilder, message: dict[str, Any]) -> None:
    """An OpenAI-style message (Semantic Kernel, GenAI v1.28-1.36 event bodies)."""
    builder.text(message.get("content"))
    builder.refuse(message.get("refusal"))
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            builder.call(function.get("name"), call.get("id"), function.get("arguments"))


def _is_content(value: Any) -> bool:
    """Whether a decoded ``message`` is content blocks (each with a block key; ``[]`` is an
    empty reply) or an OpenAI-style message, not an answer that happens to be JSON."""
    if isinstance(value, list):
        return all(isinstance(b, dict) and not _BLOCK_KEYS.isdisjoint(b) for b in value)
    return isinstance(value, dict) and not _MESSAGE_KEYS.isdisjoint(value)


def _add_choice(builder: OutputBuilder, attrs: Any) -> None:
    builder.finish(attrs.get("finish_reason"))
    message = attrs.get("message")
    if isinstance(message, str) and message.startswith(("[", "{")):
        decoded = parse_json(message)
        message = decoded if _is_content(decoded) else message
    if isinstance(message, str):
        builder.text(message)  # an agent's final answer, as plain text
    elif isinstance(message, list):
        _add_blocks(builder, message)
    elif isinstance(message, dict):
        _add_chat_message(builder, message)


def _add_completion(builder: OutputBuilder, value: Any) -> None:
    """``gen_ai.completion``: OpenAI-style messages (each may carry its finish reason)."""
    messages = parse_json(value)
    for message in messages if isinstance(messages, list) else ():
        if isinstance(message, dict):
            builder.finish(message.get("finish_reason"))
            _add_chat_message(builder, message)


def output_events(events: Sequence[SpanEvent]) -> OutputSummary | None:
    """A model's or agent's output from ``gen_ai.choice``, operation-details or
    ``gen_ai.content.completion`` events."""
    builder = OutputBuilder()
    for event in events:
        if event.name == _CHOICE:
            _add_choice(builder, event.attributes)
        elif event.name == _DETAILS:
            genai.add_output_messages(builder, event.attributes.get(genai.OUTPUT_MESSAGES))
        elif event.name == _COMPLETION:
            _add_completion(builder, event.attributes.get(_COMPLETION_MESSAGES))
    return builder.build()
