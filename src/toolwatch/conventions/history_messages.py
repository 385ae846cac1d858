"""A message list's JSON text pruned to the fields ``conventions.history`` reads, without
building the rest (its fast path).

A model span's input history can be tens of KiB, nearly all of it message content no rule
reads. msgspec's decoder given the few fields the reading needs (each message's ``role`` or
item ``type``, its parts' ``type``, whether a part is a Bedrock or Gemini tool result, and
the ids of the tool calls the model issued) skips the rest without building it: 40 µs for a
37 KiB history where the whole decode took 130 µs (``json.loads``: 200 µs). ``pruned``
decodes into typed dicts (msgspec drops the keys they do not name): plain lists and dicts,
the shape the JSON had, so that one reading (``history._message_list``) serves it and a
value that arrived decoded alike.

Not compiled (``toolwatch.compiled``), as before: its work is msgspec's, in C, and the loop
over what it keeps is ``history``'s, compiled. ``pruned`` answers ``None`` for a text of
another shape (a part that is no object, a role or an id that is no string), and ``history``
then reads the text whole.
"""

from __future__ import annotations

from typing import Any, Final, TypedDict

import msgspec

__all__ = ["pruned"]


class _Skipped(TypedDict):
    """A block whose contents are not read (a tool's answer): only that it is there."""


class _ToolUse(TypedDict, total=False):
    toolUseId: str | None  # Bedrock's


class _FunctionCall(TypedDict, total=False):
    id: str | None  # Gemini's, when the API set one


class _ChatCall(TypedDict, total=False):
    id: str | None  # Chat Completions ``tool_calls[].id``


class _Part(TypedDict, total=False):
    type: str | None
    id: str | None  # GenAI ``tool_call``, Anthropic ``tool_use``
    toolCallId: str | None  # the Vercel AI SDK's ``tool-call``
    toolUse: _ToolUse | None  # Bedrock's
    functionCall: _FunctionCall | None  # Gemini's
    # Bedrock's and Gemini's tool results name their block instead of typing it.
    toolResult: _Skipped | None
    functionResponse: _Skipped | None
    function_response: _Skipped | None


class _Message(TypedDict, total=False):
    role: str | None
    type: str | None
    parts: list[_Part] | None
    content: str | list[_Part] | None
    tool_calls: list[_ChatCall] | None
    call_id: str | None  # a Responses API ``function_call`` item's


_DECODE: Final = msgspec.json.Decoder(list[_Message]).decode


def pruned(text: str) -> list[Any] | None:
    """The messages of ``text`` as lists and dicts holding only the keys ``history`` reads
    (a tool result's block: an empty dict), ``[]`` for a text that is no JSON at all (not
    JSON, cut), ``None`` for a JSON text of another shape."""
    try:
        messages: list[Any] = _DECODE(text)
    except msgspec.ValidationError:
        return None
    except msgspec.DecodeError:
        return []
    return messages
