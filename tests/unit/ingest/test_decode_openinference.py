"""OpenInference spans at ingest."""

from __future__ import annotations

import json

from ingest_support import decode_one, span

from toolwatch.model import RequestedCall, SpanRole


def test_tool_span_keeps_double_encoded_input_as_it_arrived() -> None:
    double = json.dumps(json.dumps({"city": "New York"}))
    record = decode_one(
        span(
            "get_weather",
            {
                "openinference.span.kind": "TOOL",
                "tool.name": "get_weather",
                "input.value": double,
                "input.mime_type": "application/json",
                "output.value": '{"report": "sunny"}',
                "tool.id": "adk-42",
            },
        )
    )
    assert (record.role, record.convention) == (SpanRole.TOOL, "openinference")
    assert record.tool_name == "get_weather"
    assert record.arguments == double
    assert record.result == '{"report": "sunny"}'
    assert record.call_id == "adk-42"


def test_tool_span_call_id_from_unprefixed_tool_call_id() -> None:
    attrs = {"openinference.span.kind": "TOOL", "tool.name": "f", "tool_call.id": "call_7"}
    assert decode_one(span("f", attrs)).call_id == "call_7"


def test_tool_span_without_tool_name_is_named_after_the_span() -> None:
    record = decode_one(span("random_number", {"openinference.span.kind": "TOOL"}))
    assert (record.tool_name, record.call_id) == ("random_number", None)


def test_vendor_kind_wins_over_genai_operation_name() -> None:
    attrs = {
        "openinference.span.kind": "TOOL",
        "tool.name": "get_weather",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.call.id": "call_1",
    }
    record = decode_one(span("execute_tool get_weather", attrs))
    assert (record.convention, record.call_id) == ("openinference", "call_1")


def test_handoff_tool_span_is_not_a_tool_call() -> None:
    """A plain span that names the agent it hands to (``tool_name``), for the timeline."""
    attrs = {"openinference.span.kind": "TOOL", "input.value": "agent1", "output.value": "agent2"}
    record = decode_one(span("handoff to agent2", attrs))
    assert (record.role, record.tool_name, record.arguments) == (SpanRole.OTHER, "agent2", None)


def test_chain_span_is_other() -> None:
    record = decode_one(span("invocation [app]", {"openinference.span.kind": "CHAIN"}))
    assert (record.role, record.convention) == (SpanRole.OTHER, "openinference")


def _flat_call(i: int, j: int, call_id: str, name: str, arguments: str) -> dict[str, str]:
    base = f"llm.output_messages.{i}.message.tool_calls.{j}.tool_call."
    return {
        base + "id": call_id,
        base + "function.name": name,
        base + "function.arguments": arguments,
    }


def test_llm_flattened_tool_calls_are_ordered_numerically() -> None:
    attrs: dict[str, object] = {
        "openinference.span.kind": "LLM",
        "llm.model_name": "gpt-4o",
        "llm.output_messages.0.message.role": "assistant",
    }
    for j in (10, 2, 9, 0, 1):  # inserted out of order on purpose
        attrs.update(_flat_call(0, j, f"call_{j}", f"tool_{j}", json.dumps({"j": j})))
    record = decode_one(span("ChatCompletion", attrs))
    assert (record.role, record.model) == (SpanRole.LLM, "gpt-4o")
    assert [(c.name, c.call_id, c.position) for c in record.output_tool_calls] == [
        ("tool_0", "call_0", 0),
        ("tool_1", "call_1", 1),
        ("tool_2", "call_2", 2),
        ("tool_9", "call_9", 3),
        ("tool_10", "call_10", 4),
    ]
    assert record.output_tool_calls[4].arguments == '{"j": 10}'


def test_llm_tool_calls_across_messages_follow_message_order() -> None:
    attrs: dict[str, object] = {"openinference.span.kind": "LLM"}
    attrs.update(_flat_call(10, 0, "late", "b", "{}"))
    attrs.update(_flat_call(2, 0, "early", "a", "{}"))
    record = decode_one(span("llm", attrs))
    assert record.output_tool_calls == (
        RequestedCall("a", "early", "{}", 0),
        RequestedCall("b", "late", "{}", 1),
    )


def test_llm_text_output_and_finish_reason() -> None:
    attrs = {
        "openinference.span.kind": "LLM",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": "Hello there.",
        "llm.finish_reason": "stop",
    }
    record = decode_one(span("llm", attrs))
    assert (record.output_text, record.finish_reasons, record.refusal) == (
        "Hello there.",
        ("stop",),
        None,
    )


def test_llm_content_parts_text() -> None:
    attrs = {
        "openinference.span.kind": "LLM",
        "llm.output_messages.0.message.contents.0.message_content.type": "text",
        "llm.output_messages.0.message.contents.0.message_content.text": "first",
        "llm.output_messages.0.message.contents.1.message_content.type": "image",
        "llm.output_messages.0.message.contents.1.message_content.text": "not text",
        "llm.output_messages.0.message.contents.2.message_content.type": "text",
        "llm.output_messages.0.message.contents.2.message_content.text": "second",
    }
    assert decode_one(span("llm", attrs)).output_text == "first\nsecond"


def test_llm_content_filter_finish_reason_is_a_refusal() -> None:
    attrs = {"openinference.span.kind": "LLM", "llm.finish_reason": "content_filter"}
    assert decode_one(span("llm", attrs)).refusal == "content_filter"


def test_agent_span_name_output_and_session() -> None:
    attrs = {
        "openinference.span.kind": "AGENT",
        "agent.name": "triage",
        "output.value": "All done.",
        "session.id": "sess-9",
    }
    record = decode_one(span("triage", attrs))
    assert (record.role, record.convention) == (SpanRole.AGENT, "openinference")
    assert (record.agent_name, record.output_text, record.conversation_id) == (
        "triage",
        "All done.",
        "sess-9",
    )


def test_agent_span_without_agent_name_is_named_after_the_span() -> None:
    assert decode_one(span("Assistant", {"openinference.span.kind": "AGENT"})).agent_name == (
        "Assistant"
    )
