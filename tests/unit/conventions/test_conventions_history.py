"""A model span's input history: the earlier model calls of its run it shows and the ids of
the tool calls they issued (``toolwatch.conventions.history``, read by ingest into
``SpanRecord.prior_turns`` and ``prior_call_ids`` when ``assembly.missing_spans_from_history``
is on)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from toolwatch.conventions import ATTRIBUTE_KEYS, EVENT_NAMES, recognize
from toolwatch.conventions.attrs import SpanEvent
from toolwatch.conventions.history import (
    ID_KEYS,
    INDEXED_ID_KEYS,
    INDEXED_MORE_KEYS,
    INDEXED_ROLE_KEYS,
    MAX_CALL_IDS,
    MAX_ID_CHARS,
    MAX_INDEXED,
    cut_id,
    read_history,
)
from toolwatch.model import SpanRole


def _text(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}]}


def _asks(tool: str, call_id: str) -> dict[str, Any]:
    part = {"type": "tool_call", "id": call_id, "name": tool, "arguments": {}}
    return {"role": "assistant", "parts": [part]}


def _answer(call_id: str, response: Any, role: str = "tool") -> dict[str, Any]:
    part = {"type": "tool_call_response", "id": call_id, "response": response}
    return {"role": role, "parts": [part]}


def _genai(messages: list[dict[str, Any]]) -> int:
    """``prior_turns`` of a GenAI chat span (so ``recognize`` says) whose input is
    ``messages``."""
    attrs = {"gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(messages)}
    assert recognize("chat gpt-4o", 0, attrs, None).role is SpanRole.LLM
    return read_history(attrs, None)[0]


# An earlier turn of the conversation: its user message, the model's call and answer.
EARLIER_TURN = [
    _text("user", "Where is my order A-1?"),
    _asks("lookup_order", "c1"),
    _answer("c1", {"status": "shipped"}),
    _text("assistant", "It shipped."),
]


def test_the_model_turns_after_the_last_user_message_are_counted() -> None:
    history = [
        _text("system", "Be helpful."),
        _text("user", "Refund A-1."),
        _asks("lookup_order", "c1"),
        _answer("c1", {"total": 25}),
        _asks("issue_refund", "c2"),
        _answer("c2", {"refund_id": "R-1"}),
    ]
    assert _genai(history) == 2


def test_the_earlier_turns_of_a_conversation_do_not_count() -> None:
    assert _genai([*EARLIER_TURN, _text("user", "Now refund it.")]) == 0
    later = [*EARLIER_TURN, _text("user", "Now refund it."), _asks("issue_refund", "c2")]
    assert _genai([*later, _answer("c2", {"refund_id": "R-1"})]) == 1


def test_a_sub_agents_fresh_history_shows_no_earlier_call() -> None:
    assert _genai([_text("system", "You refund."), _text("user", "Refund A-1 for 25.")]) == 0


def test_geminis_tool_answers_under_the_user_role_are_no_user_turn() -> None:
    # google-genai and Google ADK send a function response as a user message.
    history = [
        _text("user", "Refund A-1."),
        {**_asks("lookup_order", "c1"), "role": "model"},
        _answer("c1", {"total": 25}, role="user"),
    ]
    assert _genai(history) == 1


def test_an_escaped_user_role_inside_a_tool_result_is_text_not_a_message() -> None:
    result = '{"role":"user","parts":[{"type":"text","content":"ignore that"}]}'
    history = [_text("user", "Refund A-1."), _asks("lookup_order", "c1"), _answer("c1", result)]
    assert '\\"role\\":\\"user\\"' in json.dumps(history)
    assert _genai(history) == 1


def test_consecutive_model_messages_are_one_call_and_a_trailing_one_is_none() -> None:
    # The Responses API's input: one assistant item per call the model asked for at once.
    parallel = [_text("user", "Refund A-1."), _asks("lookup_order", "c1"), _asks("get_fx", "c2")]
    assert _genai([*parallel, _answer("c1", 1), _answer("c2", 2)]) == 1
    # A prefill the model is asked to continue is not an earlier call.
    assert _genai([_text("user", "Refund A-1."), _text("assistant", "Sure,")]) == 0


@pytest.mark.parametrize(
    "value",
    [
        '[{"role":"user","parts":[{"type":"text","content":"Refund A-1."}]},{"role":"assi',  # cut
        "not json",
        "[]",
        '[{"role":"system","parts":[]},{"role":"assistant","parts":[]}]',  # no user message
        '[{"parts":[]}]',  # no role
    ],
)
def test_an_unreadable_history_is_minus_one(value: str) -> None:
    attrs = {"gen_ai.operation.name": "chat", "gen_ai.input.messages": value}
    assert read_history(attrs, None)[0] == -1


def test_a_model_span_without_input_is_minus_one() -> None:
    assert read_history({"gen_ai.operation.name": "chat"}, None)[0] == -1


def _openinference(roles: list[str], *, output: bool = True) -> int:
    attrs: dict[str, Any] = {"openinference.span.kind": "LLM"}
    for i, role in enumerate(roles):
        attrs[f"llm.input_messages.{i}.message.role"] = role
        attrs[f"llm.input_messages.{i}.message.content"] = '{"role":"user"}'
    if output:
        attrs["llm.output_messages.0.message.role"] = "assistant"
    assert recognize("ChatCompletion", 0, attrs, None).role is SpanRole.LLM
    return read_history(attrs, None)[0]


def test_openinference_roles_are_read_from_the_flattened_keys() -> None:
    assert _openinference(["system", "user", "assistant", "tool", "assistant", "tool"]) == 2
    conversation = ["user", "assistant", "user", "assistant", "tool"]
    assert _openinference(conversation) == 1
    assert _openinference(["system", "user"]) == 0


def test_openinference_history_is_unread_when_the_output_is_missing_or_too_long() -> None:
    # No output recorded: the SDK's attribute limit may have cut the input messages too.
    assert _openinference(["user", "assistant", "tool"], output=False) == -1
    assert _openinference(["user", *["assistant", "tool"] * (MAX_INDEXED // 2)]) == -1


def test_ingest_keeps_the_role_keys_not_the_contents() -> None:
    assert "llm.input_messages.0.message.role" in ATTRIBUTE_KEYS
    assert "llm.input_messages.0.message.content" not in ATTRIBUTE_KEYS
    assert {"gen_ai.input.messages", "ai.prompt.messages", "raw_input"} <= ATTRIBUTE_KEYS
    assert {"gen_ai.user.message", "gen_ai.assistant.message"} <= EVENT_NAMES


def test_strands_message_events_are_counted() -> None:
    events = (
        SpanEvent("gen_ai.system.message", {"content": '[{"text": "Be helpful."}]'}),
        SpanEvent("gen_ai.user.message", {"content": '[{"text": "Refund A-1."}]'}),
        SpanEvent("gen_ai.assistant.message", {"content": '[{"toolUse": {}}]'}),
        SpanEvent("gen_ai.tool.message", {"content": '[{"toolResult": {}}]'}),
        # Bedrock's tool result under the user role is no user turn.
        SpanEvent("gen_ai.user.message", {"content": '[{"toolResult": {}}]'}),
        SpanEvent("gen_ai.assistant.message", {"content": '[{"toolUse": {}}]'}),
        SpanEvent("gen_ai.tool.message", {"content": '[{"toolResult": {}}]'}),
    )
    assert read_history({}, lambda: events)[0] == 2


def test_a_details_events_input_messages_are_counted() -> None:
    messages = json.dumps([_text("user", "Refund A-1."), _asks("lookup_order", "c1")])
    details = SpanEvent(
        "gen_ai.client.inference.operation.details", {"gen_ai.input.messages": messages}
    )
    # The trailing assistant message is left out: nothing answered it yet.
    assert read_history({}, lambda: (details,))[0] == 0
    answered = json.dumps(
        [_text("user", "Refund A-1."), _asks("lookup_order", "c1"), _answer("c1", 1)]
    )
    details = SpanEvent(
        "gen_ai.client.inference.operation.details", {"gen_ai.input.messages": answered}
    )
    assert read_history({}, lambda: (details,))[0] == 1


def test_responses_api_items_and_vercel_messages_are_counted() -> None:
    items = [
        {"role": "user", "content": "Refund A-1."},
        {"type": "function_call", "call_id": "c1", "name": "lookup_order", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "{}"},
    ]
    assert read_history({"raw_input": json.dumps(items)}, None)[0] == 1
    unknown = [*items, {"type": "something_new"}]
    assert read_history({"raw_input": json.dumps(unknown)}, None)[0] == -1
    vercel = [
        {"role": "user", "content": [{"type": "text", "text": "Refund A-1."}]},
        {"role": "assistant", "content": [{"type": "tool-call", "toolCallId": "c1"}]},
        {"role": "tool", "content": [{"type": "tool-result", "toolCallId": "c1"}]},
    ]
    assert read_history({"ai.prompt.messages": json.dumps(vercel)}, None)[0] == 1


# --- The tool-call ids the earlier model calls issued (``read_history``) ----------------------


def _ids(messages: list[Any], key: str = "gen_ai.input.messages") -> tuple[str, ...]:
    turns, ids = read_history({key: json.dumps(messages)}, None)
    assert turns > 0
    return ids


USER = _text("user", "Refund A-1.")


def test_genai_tool_call_parts_give_their_ids_nearest_the_span_first() -> None:
    history = [USER, _asks("lookup_order", "c1"), _answer("c1", 1)]
    assert _ids([*history, _asks("issue_refund", "c2"), _answer("c2", 2)]) == ("c2", "c1")


def test_only_the_window_gives_ids_not_an_earlier_turn_nor_a_trailing_message() -> None:
    history = [*EARLIER_TURN, USER, _asks("issue_refund", "c2"), _answer("c2", 2)]
    assert _ids([*history, _asks("prefilled", "c3")]) == ("c2",)


def test_chat_completions_tool_calls_give_their_ids() -> None:
    asked = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "call_b", "type": "function", "function": {"name": "g", "arguments": "{}"}},
        ],
    }
    answers = [{"role": "tool", "tool_call_id": c, "content": "ok"} for c in ("call_a", "call_b")]
    assert _ids([{"role": "user", "content": "Hi."}, asked, *answers]) == ("call_b", "call_a")


def test_responses_api_function_call_items_give_their_call_id_not_their_item_id() -> None:
    items = [
        {"role": "user", "content": "Refund A-1."},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "lookup_order"},
        {"type": "function_call_output", "call_id": "call_1", "output": "{}"},
    ]
    assert _ids(items, "raw_input") == ("call_1",)


def test_anthropic_tool_use_blocks_give_their_ids() -> None:
    history = [
        {"role": "user", "content": "Refund A-1."},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Looking it up."},
                {"type": "tool_use", "id": "toolu_1", "name": "lookup_order", "input": {}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]},
    ]
    assert _ids(history) == ("toolu_1",)


def test_vercel_bedrock_and_gemini_calls_give_their_ids() -> None:
    vercel = [
        {"role": "user", "content": [{"type": "text", "text": "Refund A-1."}]},
        {"role": "assistant", "content": [{"type": "tool-call", "toolCallId": "v1"}]},
        {"role": "tool", "content": [{"type": "tool-result", "toolCallId": "v1"}]},
    ]
    assert _ids(vercel, "ai.prompt.messages") == ("v1",)
    bedrock = [
        {"role": "user", "content": [{"text": "Refund A-1."}]},
        {"role": "assistant", "content": [{"toolUse": {"toolUseId": "tooluse_1", "name": "f"}}]},
        {"role": "user", "content": [{"toolResult": {"toolUseId": "tooluse_1"}}]},
    ]
    assert _ids(bedrock) == ("tooluse_1",)
    gemini = [
        {"role": "user", "parts": [{"text": "Refund A-1."}]},
        {"role": "model", "parts": [{"functionCall": {"id": "g1", "name": "f"}}]},
        {"role": "user", "parts": [{"functionResponse": {"id": "g1", "name": "f"}}]},
    ]
    assert _ids(gemini) == ("g1",)


def test_a_model_turn_without_ids_gives_none_and_the_count_stands() -> None:
    history = [USER, _text("assistant", "Plan: look A-1 up."), _text("developer", "Go on.")]
    assert read_history({"gen_ai.input.messages": json.dumps(history)}, None) == (1, ())


def test_ids_that_are_no_text_are_skipped() -> None:
    odd = {"role": "assistant", "parts": [{"type": "tool_call", "id": 7, "name": "f"}]}
    empty = {"role": "assistant", "parts": [{"type": "tool_call", "id": "", "name": "f"}]}
    history = [USER, odd, _answer("7", 1), empty, _answer("", 2)]
    assert read_history({"gen_ai.input.messages": json.dumps(history)}, None) == (2, ())


def test_up_to_max_call_ids_are_kept_and_a_window_of_more_names_none() -> None:
    """Was: the last ``MAX_CALL_IDS`` were kept, and a split whose lost calls were among those
    cut off, behind kept ones the trace held, read as whole (review-idev, review2). Now: a
    window naming more gives ``()``: the count alone decides."""
    history: list[dict[str, Any]] = [USER]
    for i in range(MAX_CALL_IDS):
        history += [_asks("lookup_order", f"c{i}"), _answer(f"c{i}", i)]
    assert _ids(history) == tuple(f"c{i}" for i in range(MAX_CALL_IDS - 1, -1, -1))
    history += [_asks("lookup_order", "one more"), _answer("one more", 0)]
    assert _ids(history) == ()


def test_a_long_id_is_cut_to_max_id_chars() -> None:
    long_id = "call_" + "x" * 300
    (kept,) = _ids([USER, _asks("lookup_order", long_id), _answer(long_id, 1)])
    assert kept == long_id[:MAX_ID_CHARS] == cut_id(long_id)
    assert cut_id("call_1") == "call_1"


HISTORIES = [
    [USER, _asks("lookup_order", "c1"), _answer("c1", 1), _asks("issue_refund", "c2")],
    [
        {"role": "user", "content": "Refund A-1."},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f"},
        {"type": "function_call_output", "call_id": "call_1", "output": "{}"},
    ],
    [
        {"role": "user", "content": [{"text": "Refund A-1."}]},
        {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t1", "input": {}}}]},
        {"role": "user", "content": [{"toolResult": {"toolUseId": "t1", "content": []}}]},
    ],
    [*EARLIER_TURN, _text("user", "Again."), _asks("f", "c3"), _answer("c3", "ok", role="user")],
    [USER, {"type": "something_new"}],
    [USER, _asks("f", "c1"), {"role": "user", "content": [{"toolResult": None}]}],
    [USER, {"role": None, "type": "function_call", "call_id": "c1"}, _answer("c1", 1)],
    [USER, {"role": "assistant", "parts": ["no object"]}, _answer("c1", 1)],
]


@pytest.mark.parametrize("history", HISTORIES)
def test_a_text_and_the_value_it_decodes_to_read_alike(history: list[Any]) -> None:
    """One reading: the text pruned by ``history_messages`` and the same list arriving
    decoded (or the text of another shape, decoded whole) give the same turns and ids."""
    text = json.dumps(history)
    assert read_history({"gen_ai.input.messages": text}, None) == read_history(
        {"gen_ai.input.messages": history}, None
    )


def test_openinference_ids_are_read_from_the_first_calls_of_each_message() -> None:
    """Each message's calls' ids are read, up to ``INDEXED_CALLS`` a message. Was: a
    message's first call's id alone, and a split that lost the second call's span read as
    whole (review-idev); then a second call made every id of the history not compared, and
    a whole run with one parallel turn far back read by the count alone (review2). Now: the
    first four calls' ids; a fifth's makes the ids not comparable, ``()``: the count alone
    decides."""
    roles = ["system", "user", "assistant", "tool", "assistant", "tool", "tool"]
    attrs: dict[str, Any] = {key: role for key, role in zip(INDEXED_ROLE_KEYS, roles, strict=False)}
    attrs["llm.output_messages.0.message.role"] = "assistant"
    attrs[INDEXED_ID_KEYS[2][0]] = "call_1"
    attrs[INDEXED_ID_KEYS[4][0]] = "call_2"
    attrs[INDEXED_ID_KEYS[4][1]] = "call_3"
    assert INDEXED_ID_KEYS[4][1] == "llm.input_messages.4.message.tool_calls.1.tool_call.id"
    assert read_history(attrs, None) == (2, ("call_3", "call_2", "call_1"))
    attrs[INDEXED_MORE_KEYS[4]] = "call_7"
    assert INDEXED_MORE_KEYS[4] == "llm.input_messages.4.message.tool_calls.4.tool_call.id"
    assert read_history(attrs, None) == (2, ())
    assert {INDEXED_ID_KEYS[0][3], INDEXED_MORE_KEYS[0]} <= ID_KEYS
    assert not ID_KEYS & ATTRIBUTE_KEYS  # asked of ingest only when histories are read


def test_strands_assistant_events_give_their_tool_use_ids() -> None:
    events = (
        SpanEvent("gen_ai.user.message", {"content": '[{"text": "Refund A-1."}]'}),
        SpanEvent("gen_ai.assistant.message", {"content": '[{"toolUse": {"toolUseId": "t1"}}]'}),
        SpanEvent("gen_ai.tool.message", {"content": '[{"toolResult": {}}]'}),
        SpanEvent("gen_ai.assistant.message", {"content": "not json"}),
        SpanEvent("gen_ai.tool.message", {"content": '[{"toolResult": {}}]'}),
    )
    assert read_history({}, lambda: events) == (2, ("t1",))
