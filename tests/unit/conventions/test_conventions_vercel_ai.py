"""The Vercel AI SDK's ``ai.*`` telemetry (AI SDK 3.3 to 6, and 7's LegacyOpenTelemetry).

The shapes the captured fixtures do not show: AI SDK 4's ``args`` JSON strings in
``ai.response.toolCalls``, ``streamText`` spans, content capture off, and values of the
wrong type.
"""

from __future__ import annotations

from typing import Any

import pytest

from toolwatch.conventions import classify, recognize
from toolwatch.model import RequestedCall, SpanRole

CALLS_V4 = (
    '[{"toolCallType":"function","toolCallId":"call_1","toolName":"lookup_order",'
    '"args":"{\\"order_id\\":\\"A-1\\"}"}]'
)


def attrs(operation: str, **more: Any) -> dict[str, Any]:
    return {"ai.operationId": operation, **more}


@pytest.mark.parametrize(
    ("operation", "role"),
    [
        ("ai.toolCall", SpanRole.TOOL),
        ("ai.generateText", SpanRole.AGENT),
        ("ai.streamText", SpanRole.AGENT),
        ("ai.generateObject", SpanRole.AGENT),
        ("ai.generateText.doGenerate", SpanRole.LLM),
        ("ai.streamText.doStream", SpanRole.LLM),
        ("ai.streamObject.doStream", SpanRole.LLM),
        ("ai.embed", SpanRole.OTHER),
    ],
)
def test_the_operation_id_says_what_a_span_is(operation: str, role: SpanRole) -> None:
    found, convention = classify(operation, attrs(operation))
    assert found is role
    assert convention.name == ("vercel_ai" if role is not SpanRole.OTHER else "")


def test_a_genai_operation_name_wins_over_the_operation_id() -> None:
    found, convention = classify("x", attrs("ai.toolCall", **{"gen_ai.operation.name": "chat"}))
    assert (found, convention.name) == (SpanRole.LLM, "genai")


def test_a_tool_span_gives_name_id_arguments_and_result() -> None:
    span = attrs(
        "ai.toolCall",
        **{
            "ai.toolCall.name": "lookup_order",
            "ai.toolCall.id": "call_1",
            "ai.toolCall.args": '{"order_id":"A-1"}',
            "ai.toolCall.result": '{"status":"delivered"}',
            "ai.telemetry.functionId": "support_agent",
        },
    )
    role, convention, fields = recognize("ai.toolCall", 0, span, None)
    assert (role, convention) == (SpanRole.TOOL, "vercel_ai")
    assert fields["tool_name"] == "lookup_order"
    assert fields["call_id"] == "call_1"
    assert fields["arguments"] == '{"order_id":"A-1"}'  # parsed by the timeline
    assert fields["result"] == '{"status":"delivered"}'


def test_ai_sdk_4_calls_carry_their_arguments_as_a_json_string() -> None:
    span = attrs(
        "ai.streamText.doStream",
        **{"ai.response.toolCalls": CALLS_V4, "ai.response.finishReason": "tool-calls"},
    )
    _, _, fields = recognize("ai.streamText.doStream", 0, span, None)
    assert fields["output_tool_calls"] == (
        RequestedCall("lookup_order", "call_1", '{"order_id":"A-1"}', 0),
    )
    assert fields["finish_reasons"] == ("tool-calls",)


def test_a_run_gives_its_function_id_and_answer() -> None:
    span = attrs(
        "ai.generateText",
        **{"ai.telemetry.functionId": "support_agent", "ai.response.text": "Refund R-77 issued."},
    )
    role, _, fields = recognize("ai.generateText", 0, span, None)
    assert role is SpanRole.AGENT
    assert fields["agent_name"] == "support_agent"
    assert fields["output_text"] == "Refund R-77 issued."


def test_content_filter_is_a_refusal() -> None:
    span = attrs("ai.generateText.doGenerate", **{"ai.response.finishReason": "content-filter"})
    _, _, fields = recognize("ai.generateText.doGenerate", 0, span, None)
    assert fields["refusal"] == "content-filter"


def test_without_content_capture_calls_are_still_requested() -> None:
    calls = '[{"toolCallId":"call_1","toolName":"lookup_order"}]'  # recordInputs: false
    span = attrs("ai.generateText.doGenerate", **{"ai.response.toolCalls": calls})
    _, _, fields = recognize("ai.generateText.doGenerate", 0, span, None)
    assert fields["output_tool_calls"] == (RequestedCall("lookup_order", "call_1", None, 0),)
    assert fields["output_text"] is None


@pytest.mark.parametrize(
    "odd",
    [
        {"ai.operationId": ["ai.toolCall"]},
        {"ai.operationId": {"k": 1}},
        {"ai.operationId": "ai.generateText.doGenerate", "ai.response.toolCalls": "not json"},
        {"ai.operationId": "ai.generateText.doGenerate", "ai.response.toolCalls": [1, "x", None]},
        {"ai.operationId": "ai.generateText.doGenerate", "ai.response.toolCalls": '{"a": 1}'},
    ],
)
def test_values_of_the_wrong_type_are_read_as_absent(odd: dict[str, Any]) -> None:
    role, _, fields = recognize("span", 0, odd, None)
    assert role in (SpanRole.OTHER, SpanRole.LLM)
    assert fields.get("output_tool_calls", ()) == ()
