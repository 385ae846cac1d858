"""A model call's input history: how many model calls of its run came before it, and the
ids of the tool calls they issued.

A model span's input is the conversation sent to the model. The messages from the model
(role ``assistant`` or ``model``, with or without tool calls) after the last user message are
the run's earlier model calls (``prior_turns``), consecutive ones counting once: earlier turns
of a conversation come before the current user message, so they do not count; a sub-agent
started with a fresh history shows fewer; a trailing message from the model (a prefill the
model is asked to continue) is not a call. The timeline compares the number with the model
spans the trace holds (``assembly.missing``): a trace that holds fewer lost spans (a rollout
or scale step sent them to another replica, or they never came).

From the same messages (the window: the model's after the last user message, the trailing
ones left out) ``read_history`` also gives the ids of the tool calls the model issued, up to
``MAX_CALL_IDS``, nearest the span first, each cut to
``MAX_ID_CHARS`` (``cut_id``): the timeline counts the history as evidence only when one of
them is known nowhere in the trace before the span (``assembly.missing``). Where each
producer writes them (those of the fixtures):

* GenAI parts ``{"type": "tool_call", "id"}`` (and ``server_tool_call``): OpenLLMetry,
  the contrib OpenAI instrumentation, pydantic-ai, Strands' latest convention, the Vercel AI
  SDK's GenAI export, Logfire's OpenAI client spans, Google ADK (its own ids there, not the
  ``adk-`` ids its tool spans carry);
* the Responses API's ``function_call`` items' ``call_id`` (Logfire's ``raw_input``; not the
  item's ``id``, ``fc_``: the one OpenLLMetry's OpenAI Agents history names instead);
* Chat Completions ``tool_calls[].id``, Anthropic ``tool_use`` blocks' ``id``, the Vercel AI
  SDK's ``tool-call`` parts' ``toolCallId``, Bedrock's ``toolUse.toolUseId`` (Strands'
  per-message events' ``content``), Gemini's ``functionCall.id`` where the API set one;
* OpenInference's ``llm.input_messages.<i>.message.tool_calls.<k>.tool_call.id``: a
  message's first ``INDEXED_CALLS`` calls (``INDEXED_ID_KEYS``; a message with more,
  ``INDEXED_MORE_KEYS``, makes the ids not comparable); OpenInference's Google ADK spans
  record none.

A window with no id (text turns only; a producer that records none) gives ``()``: the count
alone is then the evidence; so does one whose ids cannot tell a lost call from one the trace
holds (``_ids_in``: more than ``MAX_CALL_IDS`` ids, a message with calls not read, an id that
repeats).

Read where the producer records the whole history:

* GenAI ``gen_ai.input.messages`` (parts JSON, v1.37+) on the span, or on its
  ``gen_ai.client.inference.operation.details`` event (Strands' latest convention); the
  Vercel AI SDK's ``ai.prompt.messages`` (its message JSON); Logfire's ``raw_input`` (the
  Responses API's input items: a ``function_call`` is the model's, a
  ``function_call_output`` a tool's). A ``user`` message whose parts
  are all tool results (Gemini's function responses, Bedrock's ``toolResult``) is a tool's
  answer, not a user's turn. One reading (``_message_list``) serves a list decoded from the
  text pruned to the fields read (``history_messages``, the fast path) and one decoded
  whole (a text of another shape, a value that arrived decoded).
* OpenInference's flattened ``llm.input_messages.<i>.message.role`` (read up to
  ``MAX_INDEXED`` messages; only when the span also recorded an output, so that an SDK's
  attribute limit did not cut the history).
* The per-message events of GenAI v1.28-1.36 (``gen_ai.user.message``,
  ``gen_ai.assistant.message``, ``gen_ai.tool.message``: Strands' default convention); an
  assistant event's ids from its ``content`` blocks (its ``tool_calls`` field is not read).

``UNREAD`` (-1) everywhere else, and for a history that cannot be read whole (not JSON, cut
at ``ingest.max_value_bytes``, no user message, a gap in the indexes): no evidence either
way. Pure functions of the recognizers' inputs; no protobuf here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final, TypeAlias

from toolwatch.conventions.attrs import Attributes, EventSource, SpanEvent, clean_id, parse_json
from toolwatch.conventions.history_messages import pruned

__all__ = [
    "EVENT_NAMES",
    "ID_KEYS",
    "INDEXED_ID_KEYS",
    "INDEXED_MORE_KEYS",
    "INDEXED_ROLE_KEYS",
    "ITEM_ROLES",
    "KEYS",
    "MAX_CALL_IDS",
    "MAX_ID_CHARS",
    "MAX_INDEXED",
    "NO_HISTORY",
    "TOOL_RESULT_TYPES",
    "UNREAD",
    "History",
    "cut_id",
    "read_history",
]

#: The turns ``read_history`` gives when the span carries no readable input history.
UNREAD: Final = -1
#: A history's reading: the earlier model calls it shows (``UNREAD``: none readable) and the
#: ids of the tool calls they issued (at most ``MAX_CALL_IDS``, nearest the span first).
History: TypeAlias = tuple[int, tuple[str, ...]]
#: The reading of a span that carries no readable history.
NO_HISTORY: Final[History] = (UNREAD, ())
#: Tool-call ids kept a span, nearest the span first (``_ids_in``): a window naming more
#: gives none (the count decides), as any of those not kept may be a lost call's; a bound, as
#: a history can hold thousands of calls.
MAX_CALL_IDS: Final = 32
#: The characters of an id kept (``cut_id``): real ids are under 64 (``call_`` + 24,
#: ``toolu_`` + 24, ``tooluse_`` + 22); a longer one is compared by its first 128 on both
#: sides, the history's and the run's.
MAX_ID_CHARS: Final = 128

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
#: OpenInference input messages' tool-call ids read (of a message asking for calls at once,
#: its first ``INDEXED_CALLS``), only with the histories (ingest asks for them then).
INDEXED_CALLS: Final = 4
#: ``INDEXED_ID_KEYS[i][k]``: message ``i``'s call ``k``'s id.
INDEXED_ID_KEYS: Final = tuple(
    tuple(
        f"llm.input_messages.{i}.message.tool_calls.{k}.tool_call.id" for k in range(INDEXED_CALLS)
    )
    for i in range(MAX_INDEXED)
)
#: An OpenInference output's first role: the span recorded an output, so the SDK's attribute
#: limit (128 by default) did not cut its input messages, set before it.
_OUTPUT_ROLE: Final = "llm.output_messages.0.message.role"

#: Span attribute keys read here.
KEYS: Final = frozenset({_INPUT_MESSAGES, _VERCEL_MESSAGES, _RAW_INPUT, *INDEXED_ROLE_KEYS})
#: An OpenInference input message's call past those read: only whether it is there is read
#: (its ids are then not compared, ``_indexed_ids``).
INDEXED_MORE_KEYS: Final = tuple(
    f"llm.input_messages.{i}.message.tool_calls.{INDEXED_CALLS}.tool_call.id"
    for i in range(MAX_INDEXED)
)
#: Span attribute keys read here when histories are read (``DecodeOptions.read_histories``).
ID_KEYS: Final = frozenset({*(k for ks in INDEXED_ID_KEYS for k in ks), *INDEXED_MORE_KEYS})
#: Span events read here (beside ``events.EVENT_NAMES``).
EVENT_NAMES: Final = frozenset({_USER_EVENT, _ASSISTANT_EVENT})

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
_MODEL_ROLES: Final = frozenset({"assistant", "model"})
_TOOL_RESULT_KEYS: Final = frozenset({"toolResult", "functionResponse", "function_response"})
#: Parts that carry a call the model issued, under ``id`` (GenAI, Anthropic) or
#: ``toolCallId`` (the Vercel AI SDK).
_CALL_TYPES: Final = frozenset({"tool_call", "server_tool_call", "tool_use", "tool-call"})


def read_history(attrs: Attributes, events: EventSource) -> History:
    """A model span's input history read: the number of earlier model calls of its run it
    shows (``UNREAD`` when it shows no readable history) and the ids of the tool calls
    those issued (``()`` when it names none)."""
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
    return NO_HISTORY


def cut_id(call_id: str) -> str:
    """A call id as kept: its first ``MAX_ID_CHARS`` characters."""
    return call_id if len(call_id) <= MAX_ID_CHARS else call_id[:MAX_ID_CHARS]


def _messages(value: Any) -> History:
    """A message list: its text pruned to the fields read (``history_messages``), else
    decoded whole (a text of another shape, a value that arrived decoded)."""
    messages = pruned(value) if isinstance(value, str) else None
    if messages is None:
        messages = parse_json(value)
    return _message_list(messages)


def _message_list(messages: Any) -> History:
    """The one reading of a decoded message list (``{"role", "parts"|"content"}`` objects,
    Responses API items), pruned or whole: each message's role (a ``user`` message of tool
    results only: ``tool``; an item: ``ITEM_ROLES``), then the ids in the window."""
    if not isinstance(messages, list) or not messages:
        return NO_HISTORY
    roles: list[str] = []
    for message in messages:
        if not isinstance(message, dict):
            return NO_HISTORY
        role = message.get("role")
        if not isinstance(role, str):
            kind = message.get("type")
            role = ITEM_ROLES.get(kind) if isinstance(kind, str) else None
            if role is None:
                return NO_HISTORY
        if role == "user" and _tool_results_only(message):
            role = "tool"
        roles.append(role)
    return _read(roles, lambda i: _message_ids(messages[i]))


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


def _message_ids(message: dict[str, Any]) -> list[Any]:
    """The ids of the calls a model message issued, as they came (each checked by
    ``_ids_in``): a Responses API ``function_call`` item's ``call_id``, Chat Completions
    ``tool_calls[].id``, and its parts' (``_part_ids``)."""
    if message.get("type") == "function_call":
        return [message.get("call_id")]
    found: list[Any] = []
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        found.extend(call.get("id") for call in calls if isinstance(call, dict))
    parts = message.get("parts")
    if parts is None:
        parts = message.get("content")
    if isinstance(parts, list):
        found.extend(_part_ids(parts))
    return found


def _part_ids(parts: list[Any]) -> list[Any]:
    """The call ids of a message's parts: a GenAI ``tool_call``, an Anthropic ``tool_use``
    (``id``), a Vercel AI SDK ``tool-call`` (``toolCallId``), Bedrock's ``toolUse``
    (``toolUseId``), Gemini's ``functionCall`` (``id``, when the API set one)."""
    found: list[Any] = []
    for part in parts:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if isinstance(kind, str) and kind in _CALL_TYPES:
            call_id = part.get("id")
            found.append(call_id if call_id is not None else part.get("toolCallId"))
            continue
        block = part.get("toolUse")
        if isinstance(block, dict):
            found.append(block.get("toolUseId"))
            continue
        block = part.get("functionCall")
        if isinstance(block, dict):
            found.append(block.get("id"))
    return found


def _read(roles: list[str], ids_of: Callable[[int], list[Any] | None]) -> History:
    """The history the messages of ``roles`` make: its model turns (``_window``) and the ids
    of their calls (``_ids_in``; ``ids_of(i)``: message ``i``'s, as they came)."""
    window = _window(roles)
    if window is None:
        return NO_HISTORY
    turns, start, end = window
    return turns, _ids_in(roles, start, end, ids_of)


def _ids_in(
    roles: list[str], start: int, end: int, ids_of: Callable[[int], list[Any] | None]
) -> tuple[str, ...]:
    """The ids of the calls the model's messages in the window (``roles[start:end]``)
    issued, nearest the span first, each read as a span's (``clean_id``: a number as its
    text) and cut (``cut_id``). ``()`` (the count alone decides) where they cannot tell a
    lost call from one the trace holds: the window names more than ``MAX_CALL_IDS`` (those
    not kept may be the lost ones, behind kept ones the trace holds), a call names no id
    (Gemini's ``functionCall`` where the API set none), a message names more than was read
    (``ids_of`` gives ``None``), or an id repeats (a producer naming calls after their tool,
    Strands' Ollama provider: an id the trace holds need not be this call's)."""
    ids: list[str] = []
    for i in range(end - 1, start - 1, -1):
        if roles[i] not in _MODEL_ROLES:
            continue
        found = ids_of(i)
        if found is None:
            return ()
        named: list[str] = []
        for raw in found:
            call_id = clean_id(raw)
            if call_id is None:  # a call named by no id: it may be the lost one
                return ()
            named.append(cut_id(call_id))
        if len(ids) + len(named) > MAX_CALL_IDS:
            return ()
        named.reverse()  # the message's last call is the nearest
        ids.extend(named)
    return tuple(ids) if len(set(ids)) == len(ids) else ()


def _indexed(attrs: Attributes) -> History:
    """OpenInference: the roles at indexes 0, 1, ... until the first missing one; a role
    past that gap (a message whose role was not recorded: which turn it was is unknown)
    makes the history unread. Ids: each model message's first ``INDEXED_CALLS`` calls'
    (``INDEXED_ID_KEYS``, present only when ingest read the histories)."""
    if _OUTPUT_ROLE not in attrs:
        return NO_HISTORY
    roles: list[str] = []
    for key in INDEXED_ROLE_KEYS:
        role = attrs.get(key)
        if not isinstance(role, str):
            break
        roles.append(role)
    if len(roles) == MAX_INDEXED:
        return NO_HISTORY
    if any(key in attrs for key in INDEXED_ROLE_KEYS[len(roles) + 1 :]):
        return NO_HISTORY
    return _read(roles, lambda i: _indexed_ids(attrs, i))


def _indexed_ids(attrs: Attributes, index: int) -> list[Any] | None:
    """OpenInference message ``index``'s calls' ids (up to ``INDEXED_CALLS``); ``None`` (not
    comparable) when it issued more calls than are read."""
    if INDEXED_MORE_KEYS[index] in attrs:
        return None
    return [attrs[key] for key in INDEXED_ID_KEYS[index] if key in attrs]


def _from_events(events: Sequence[SpanEvent]) -> History:
    """GenAI events: a details event's ``gen_ai.input.messages``, else one event a message
    (an assistant event's ids: its ``content`` blocks', Strands' Bedrock ``toolUse``)."""
    roles: list[str] = []
    said: list[SpanEvent] = []
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
            said.append(event)
        elif name == _ASSISTANT_EVENT:
            roles.append("assistant")
            said.append(event)
        elif name == _TOOL_EVENT:
            roles.append("tool")
            said.append(event)
    return _read(roles, lambda i: _event_ids(said[i]))


def _event_ids(event: SpanEvent) -> list[Any]:
    """The call ids of an assistant event's ``content`` blocks."""
    content = parse_json(event.attributes.get("content"))
    return _part_ids(content) if isinstance(content, list) else []


def _window(roles: list[str]) -> tuple[int, int, int] | None:
    """The model's turns after the last user message and the messages they span
    (``turns, start, end``): each run of consecutive messages from the model counts once
    (the Responses API's input holds one item per requested call, each an ``assistant``
    message for OpenInference and OpenLLMetry), and a trailing one not at all; ``None``
    when no message is the user's."""
    last_user = -1
    for i, role in enumerate(roles):
        if role == "user":
            last_user = i
    if last_user < 0:
        return None
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
    return turns, last_user + 1, end
