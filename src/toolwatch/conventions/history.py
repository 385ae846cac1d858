"""A model call's input history: how many model calls of its run came before it.

A model span's input is the conversation sent to the model. The messages from the model
(role ``assistant`` or ``model``, with or without tool calls) after the last user message are
the run's earlier model calls (``prior_turns``), consecutive ones counting once: earlier turns
of a conversation come before the current user message, so they do not count; a sub-agent
started with a fresh history shows fewer; a trailing message from the model (a prefill the
model is asked to continue) is not a call. The timeline compares the number with the model
spans the trace holds (``assembly.missing``): a trace that holds fewer lost spans (a rollout
or scale step sent them to another replica, or they never came).

Read where the producer records the whole history:

* GenAI ``gen_ai.input.messages`` (parts JSON, v1.37+) on the span, or on its
  ``gen_ai.client.inference.operation.details`` event (Strands' latest convention); the
  Vercel AI SDK's ``ai.prompt.messages`` (its message JSON); Logfire's ``raw_input`` (the
  Responses API's input items: a ``function_call`` is the model's, a
  ``function_call_output`` a tool's). A ``user`` message whose parts
  are all tool results (Gemini's function responses, Bedrock's ``toolResult``) is a tool's
  answer, not a user's turn.
* OpenInference's flattened ``llm.input_messages.<i>.message.role`` (read up to
  ``MAX_INDEXED`` messages; only when the span also recorded an output, so that an SDK's
  attribute limit did not cut the history).
* The per-message events of GenAI v1.28-1.36 (``gen_ai.user.message``,
  ``gen_ai.assistant.message``, ``gen_ai.tool.message``: Strands' default convention).

``-1`` everywhere else, and for a history that cannot be read whole (not JSON, cut at
``ingest.max_value_bytes``, no user message, a gap in the indexes): no evidence either way.
Pure functions of the recognizers' inputs; no protobuf here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from toolwatch.conventions.attrs import Attributes, EventSource, SpanEvent, parse_json
from toolwatch.conventions.history_messages import ITEM_ROLES, TOOL_RESULT_TYPES, message_roles

__all__ = [
    "EVENT_NAMES",
    "INDEXED_ROLE_KEYS",
    "KEYS",
    "MAX_INDEXED",
    "UNREAD",
    "prior_turns",
]

#: What ``prior_turns`` says when the span carries no readable input history.
UNREAD: Final = -1

_INPUT_MESSAGES: Final = "gen_ai.input.messages"
_VERCEL_MESSAGES: Final = "ai.prompt.messages"
_RAW_INPUT: Final = "raw_input"  # Logfire's OpenAI Agents spans: the Responses API's input
_DETAILS: Final = "gen_ai.client.inference.operation.details"
_USER_EVENT: Final = "gen_ai.user.message"
_ASSISTANT_EVENT: Final = "gen_ai.assistant.message"
_TOOL_EVENT: Final = "gen_ai.tool.message"

#: OpenInference input messages read: the role keys of the first ``MAX_INDEXED`` (exact keys,
#: so that ingest converts no message content for them). A history with a role at the last
#: index may go on beyond it: not read.
MAX_INDEXED: Final = 256
INDEXED_ROLE_KEYS: Final = tuple(f"llm.input_messages.{i}.message.role" for i in range(MAX_INDEXED))
#: An OpenInference output's first role: the span recorded an output, so the SDK's attribute
#: limit (128 by default) did not cut its input messages, set before it.
_OUTPUT_ROLE: Final = "llm.output_messages.0.message.role"

#: Span attribute keys read here.
KEYS: Final = frozenset({_INPUT_MESSAGES, _VERCEL_MESSAGES, _RAW_INPUT, *INDEXED_ROLE_KEYS})
#: Span events read here (beside ``events.EVENT_NAMES``).
EVENT_NAMES: Final = frozenset({_USER_EVENT, _ASSISTANT_EVENT})

_MODEL_ROLES: Final = frozenset({"assistant", "model"})
_TOOL_RESULT_KEYS: Final = frozenset({"toolResult", "functionResponse", "function_response"})


def prior_turns(attrs: Attributes, events: EventSource) -> int:
    """The number of earlier model calls of this run a model span's input shows, ``UNREAD``
    (-1) when it shows no readable history."""
    value = attrs.get(_INPUT_MESSAGES)
    if value is None:
        value = attrs.get(_VERCEL_MESSAGES)
        if value is None:
            value = attrs.get(_RAW_INPUT)
    if value is not None:
        return _messages(value)
    if INDEXED_ROLE_KEYS[0] in attrs:
        return _indexed(attrs)
    if events is not None:
        return _from_events(events())
    return UNREAD


def _messages(value: Any) -> int:
    """Count over a message list: its text read for the roles alone (``history_messages``),
    else decoded whole (a text of another shape, a value that arrived decoded)."""
    if isinstance(value, str):
        roles = message_roles(value)
        if roles is not None:
            return _count(roles) if roles else UNREAD
    return _message_list(parse_json(value))


def _message_list(messages: Any) -> int:
    """Count over a decoded message list (``{"role", "parts"|"content"}`` objects)."""
    if not isinstance(messages, list) or not messages:
        return UNREAD
    roles: list[str] = []
    for message in messages:
        if not isinstance(message, dict):
            return UNREAD
        role = message.get("role")
        if not isinstance(role, str):
            role = ITEM_ROLES.get(message.get("type"))
            if role is None:
                return UNREAD
        if role == "user" and _tool_results_only(message):
            role = "tool"
        roles.append(role)
    return _count(roles)


def _tool_results_only(message: dict[str, Any]) -> bool:
    """Whether a ``user`` message only carries tool results (Gemini, Bedrock, Anthropic)."""
    parts = message.get("parts")
    if parts is None:
        parts = message.get("content")
    if not isinstance(parts, list) or not parts:
        return False
    return all(_tool_result(part) for part in parts)


def _tool_result(part: Any) -> bool:
    if not isinstance(part, dict):
        return False
    kind = part.get("type")
    if isinstance(kind, str):
        return kind in TOOL_RESULT_TYPES
    return any(key in part for key in _TOOL_RESULT_KEYS)


def _indexed(attrs: Attributes) -> int:
    """OpenInference: the roles at indexes 0, 1, ... until the first missing one; a role
    past that gap (a message whose role was not recorded: which turn it was is unknown)
    makes the history unread."""
    if _OUTPUT_ROLE not in attrs:
        return UNREAD
    roles: list[str] = []
    for key in INDEXED_ROLE_KEYS:
        role = attrs.get(key)
        if not isinstance(role, str):
            break
        roles.append(role)
    if len(roles) == MAX_INDEXED:
        return UNREAD
    if any(key in attrs for key in INDEXED_ROLE_KEYS[len(roles) + 1 :]):
        return UNREAD
    return _count(roles)


def _from_events(events: Sequence[SpanEvent]) -> int:
    """GenAI events: a details event's ``gen_ai.input.messages``, else one event a message."""
    roles: list[str] = []
    for event in events:
        name = event.name
        if name == _DETAILS:
            messages = event.attributes.get(_INPUT_MESSAGES)
            if messages is not None:
                return _messages(messages)
        elif name == _USER_EVENT:
            content = parse_json(event.attributes.get("content"))
            user = not (isinstance(content, list) and content and all(map(_tool_result, content)))
            roles.append("user" if user else "tool")
        elif name == _ASSISTANT_EVENT:
            roles.append("assistant")
        elif name == _TOOL_EVENT:
            roles.append("tool")
    return _count(roles) if roles else UNREAD


def _count(roles: list[str]) -> int:
    """The model's turns after the last user message: each run of consecutive messages from
    the model counts once (the Responses API's input holds one item per requested call,
    each an ``assistant`` message for OpenInference and OpenLLMetry), and a trailing one not
    at all; ``UNREAD`` when no message is the user's."""
    last_user = -1
    for i, role in enumerate(roles):
        if role == "user":
            last_user = i
    if last_user < 0:
        return UNREAD
    end = len(roles)
    while end > last_user + 1 and roles[end - 1] in _MODEL_ROLES:
        end -= 1
    turns = 0
    previous_model = False
    for i in range(last_user + 1, end):
        model = roles[i] in _MODEL_ROLES
        if model and not previous_model:
            turns += 1
        previous_model = model
    return turns
