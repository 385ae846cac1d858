"""A message list's JSON text pruned to the fields ``conventions.history`` reads, without
building the rest (its fast path).

A model span's input history can be tens of KiB, nearly all of it message content no rule
reads. msgspec's decoder given the few fields the reading needs (each message's ``role`` or
item ``type``, its parts' ``type``, whether a part is a Bedrock or Gemini tool result, and
the ids of the tool calls the model issued) skips the rest without building it: 40 µs for a
37 KiB history where the whole decode took 130 µs (``json.loads``: 200 µs). ``pruned``
gives what it kept as plain lists and dicts, the shape the JSON had, so that one reading
(``history._message_list``) serves it and a value that arrived decoded alike.

Not compiled (``toolwatch.compiled``): its classes derive from msgspec's ``Struct``, which a
compiled class cannot. ``pruned`` answers ``None`` for a text of another shape (a part that
is no object, a role or an id that is no string), and ``history`` then reads the text whole.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

__all__ = ["pruned"]


class _Present(msgspec.Struct, omit_defaults=True):
    """A block whose contents are not read (a tool's answer): only that it is there."""


class _ToolUse(msgspec.Struct, omit_defaults=True):
    toolUseId: str | None = None  # noqa: N815 - Bedrock's key


class _FunctionCall(msgspec.Struct, omit_defaults=True):
    id: str | None = None  # Gemini's, when the API set one


class _ChatCall(msgspec.Struct, omit_defaults=True):
    id: str | None = None  # Chat Completions ``tool_calls[].id``


class _Part(msgspec.Struct, omit_defaults=True):
    type: str | None = None
    id: str | None = None  # GenAI ``tool_call``, Anthropic ``tool_use``
    toolCallId: str | None = None  # noqa: N815 - the Vercel AI SDK's ``tool-call``
    toolUse: _ToolUse | None = None  # noqa: N815 - Bedrock's
    functionCall: _FunctionCall | None = None  # noqa: N815 - Gemini's
    # Bedrock's and Gemini's tool results name their block instead of typing it.
    toolResult: _Present | None = None  # noqa: N815 - the producers' key
    functionResponse: _Present | None = None  # noqa: N815 - the producers' key
    function_response: _Present | None = None


class _Message(msgspec.Struct, omit_defaults=True):
    role: str | None = None
    type: str | None = None
    parts: list[_Part] | None = None
    content: str | list[_Part] | None = None
    tool_calls: list[_ChatCall] | None = None
    call_id: str | None = None  # a Responses API ``function_call`` item's


_DECODE: Final = msgspec.json.Decoder(list[_Message]).decode


def pruned(text: str) -> list[Any] | None:
    """The messages of ``text`` with only the fields ``history`` reads (a field that was
    absent or ``null``: left out), ``[]`` for a text that is no JSON at all (not JSON, cut),
    ``None`` for a JSON text of another shape."""
    try:
        messages = _DECODE(text)
    except msgspec.ValidationError:
        return None
    except msgspec.DecodeError:
        return []
    kept: list[Any] = msgspec.to_builtins(messages)
    return kept
