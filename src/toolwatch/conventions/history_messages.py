"""The roles of a message list's JSON text, read without building its contents
(``conventions.history``'s fast path).

A model span's input history can be tens of KiB, nearly all of it message content no rule
reads. msgspec's decoder given the few fields the count needs (each message's ``role`` or
item ``type``, its parts' ``type``, and whether a part is a Bedrock or Gemini tool result)
skips the rest without building it: 40 µs for a 37 KiB history where the whole decode took
130 µs (``json.loads``: 200 µs). Not compiled (``toolwatch.compiled``): its classes derive
from msgspec's ``Struct``, which a compiled class cannot. ``message_roles`` answers ``None``
for a text of another shape (a part that is no object, a role that is no string), and
``history`` then reads the text whole, as it reads a value that arrived already decoded.
"""

from __future__ import annotations

from typing import Final

import msgspec

__all__ = ["ITEM_ROLES", "TOOL_RESULT_TYPES", "message_roles"]

#: Parts (or content blocks) that carry a tool's answer back to the model.
TOOL_RESULT_TYPES: Final = frozenset(
    {"tool_call_response", "tool_result", "tool-result", "function_response"}
)
#: The Responses API's input items without a role: what the model asked for, and what came
#: back (an item of another type makes the history unread).
ITEM_ROLES: Final[dict[object, str]] = {
    "function_call": "assistant",
    "reasoning": "assistant",
    "function_call_output": "tool",
}


class _Part(msgspec.Struct):
    type: str | None = None
    # Bedrock's and Gemini's tool results name their block instead of typing it.
    toolResult: msgspec.Raw | None = None  # noqa: N815 - the producers' key
    functionResponse: msgspec.Raw | None = None  # noqa: N815 - the producers' key
    function_response: msgspec.Raw | None = None

    def tool_result(self) -> bool:
        if self.type is not None:
            return self.type in TOOL_RESULT_TYPES
        return (
            self.toolResult is not None
            or self.functionResponse is not None
            or self.function_response is not None
        )


class _Message(msgspec.Struct):
    role: str | None = None
    type: str | None = None
    parts: list[_Part] | None = None
    content: str | list[_Part] | None = None


_DECODE: Final = msgspec.json.Decoder(list[_Message]).decode


def message_roles(text: str) -> list[str] | None:
    """Each message's role (a ``user`` message of tool results only: ``tool``; a Responses
    API item: ``ITEM_ROLES``), ``[]`` for a text that is no message list at all (not JSON,
    cut), ``None`` for a JSON text of another shape, or one with an item of unknown type."""
    try:
        messages = _DECODE(text)
    except msgspec.ValidationError:
        return None
    except msgspec.DecodeError:
        return []
    roles = []
    for message in messages:
        role = message.role
        if role is None:
            role = ITEM_ROLES.get(message.type)
            if role is None:
                return None
        elif role == "user":
            parts = message.parts if message.parts is not None else message.content
            if isinstance(parts, list) and parts and all(p.tool_result() for p in parts):
                role = "tool"
        roles.append(role)
    return roles
