"""Pydantic Logfire's spans at ingest: roles by message template, fields by template field."""

from __future__ import annotations

import json

from ingest_support import decode_one, span

from toolwatch.model import RequestedCall, SpanRole

_TEMPLATE = "logfire.msg_template"


def test_function_span_is_a_tool_call_named_by_its_name_field() -> None:
    record = decode_one(
        span(
            "Function: {name}",
            {
                _TEMPLATE: "Function: {name}",
                "logfire.msg": "Function: lookup_order",
                "name": "lookup_order",
                "input": '{"order_id": "A-1001"}',
                "output": '{"status": "delivered"}',
            },
            status=2,
        )
    )
    assert (record.role, record.convention) == (SpanRole.TOOL, "logfire")
    assert (record.tool_name, record.call_id) == ("lookup_order", None)
    assert record.arguments == '{"order_id": "A-1001"}'
    assert record.result == '{"status": "delivered"}'
    assert record.status_code == 2


def test_agent_run_span_is_an_agent_run_named_by_its_name_field() -> None:
    attrs = {_TEMPLATE: "Agent run: {name!r}", "name": "support_agent", "tools": ["a"]}
    record = decode_one(span("Agent run: {name!r}", attrs))
    assert (record.role, record.agent_name) == (SpanRole.AGENT, "support_agent")


def test_other_templates_and_non_text_templates_decide_nothing() -> None:
    for template in ("Turn {turn} for agent x", "Task: Agent workflow", ["Function: {name}"]):
        record = decode_one(span("x", {_TEMPLATE: template, "name": "lookup_order"}))
        assert record.role is SpanRole.OTHER, template


def _llm(events: list[dict[str, object]]) -> dict[str, object]:
    return {
        "gen_ai.operation.name": "chat",
        _TEMPLATE: "Responses API with {gen_ai.request.model!r}",
        "events": json.dumps(events),
    }


_HISTORY = [
    {"event.name": "gen_ai.user.message", "role": "user", "content": "refund A-1001"},
    {
        "event.name": "gen_ai.assistant.message",
        "role": "assistant",
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "lookup_order"}}],
    },
    {"event.name": "gen_ai.tool.message", "role": "tool", "id": "call_1", "content": "{}"},
]


def test_only_the_trailing_assistant_events_are_the_calls_output() -> None:
    output = {
        "event.name": "gen_ai.assistant.message",
        "role": "assistant",
        "tool_calls": [
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "issue_refund", "arguments": '{"order_id": "A-1001"}'},
            },
            {"id": "call_3", "type": "function", "function": {"name": "send_email"}},
        ],
    }
    record = decode_one(span("Responses API", _llm([*_HISTORY, output])))
    assert record.role is SpanRole.LLM
    assert record.output_tool_calls == (
        RequestedCall("issue_refund", "call_2", '{"order_id": "A-1001"}', 0),
        RequestedCall("send_email", "call_3", None, 1),
    )


def test_a_final_answer_and_a_refusal_are_read_from_the_output_events() -> None:
    answer = {"event.name": "gen_ai.assistant.message", "role": "assistant", "content": "Done."}
    assert decode_one(span("r", _llm([*_HISTORY, answer]))).output_text == "Done."
    refusal = {
        "event.name": "gen_ai.unknown",
        "role": "assistant",
        "content": "refusal\n\nSee JSON for details",
        "data": {"type": "refusal", "refusal": "I can't help with that."},
    }
    record = decode_one(span("r", _llm([*_HISTORY, refusal])))
    assert (record.refusal, record.output_text) == ("I can't help with that.", None)


def test_events_that_end_with_the_conversation_hold_no_output() -> None:
    record = decode_one(span("r", _llm(_HISTORY)))
    assert (record.output_tool_calls, record.output_text) == ((), None)


def test_events_that_are_not_a_json_array_are_ignored() -> None:
    for events in ("not json", '{"role": "assistant"}', "[1, null, []]"):
        attrs = {**_llm([]), "events": events}
        record = decode_one(span("r", attrs))
        assert (record.role, record.output_tool_calls) == (SpanRole.LLM, ()), events
