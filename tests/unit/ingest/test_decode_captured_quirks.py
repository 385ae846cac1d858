"""Quirks the captured fixtures (tests/fixtures/otlp, tools/capture/README.md) showed, at
ingest: each test is one span shaped as the named instrumentation version emitted it."""

from __future__ import annotations

import json

from ingest_support import decode_one, event, span

from toolwatch.model import RequestedCall, SpanRole

_REFUSAL = "I'm sorry, but I can't help with that request."


def test_strands_default_content_filtered_stop_reason_is_a_refusal() -> None:
    # strands-agents 1.62, default conventions: the chat span's gen_ai.choice event.
    record = decode_one(
        span(
            "chat",
            {"gen_ai.operation.name": "chat", "gen_ai.system": "strands-agents"},
            events=[event("gen_ai.choice", {"finish_reason": "content_filtered", "message": "[]"})],
        )
    )
    assert (record.role, record.finish_reasons) == (SpanRole.LLM, ("content_filtered",))
    assert (record.refusal, record.output_text) == ("content_filtered", None)


def test_strands_latest_content_filtered_output_message_is_a_refusal() -> None:
    output = [{"role": "assistant", "parts": [], "finish_reason": "content_filtered"}]
    record = decode_one(
        span(
            "chat",
            {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "strands-agents"},
            events=[
                event(
                    "gen_ai.client.inference.operation.details",
                    {"gen_ai.output.messages": json.dumps(output)},
                )
            ],
        )
    )
    assert (record.refusal, record.finish_reasons) == ("content_filtered", ("content_filtered",))


def _oi_llm(raw: object, **extra: str) -> dict[str, str]:
    return {"openinference.span.kind": "LLM", "output.value": json.dumps(raw), **extra}


def test_openinference_responses_refusal_item_in_raw_output_is_a_refusal() -> None:
    # openinference-instrumentation-openai-agents 2.6: the refusal is mapped to a text
    # content with llm.finish_reason "stop"; only output.value shows its type.
    raw = {
        "object": "response",
        "output": [{"type": "message", "content": [{"type": "refusal", "refusal": _REFUSAL}]}],
    }
    attrs = _oi_llm(
        raw,
        **{
            "llm.output_messages.0.message.contents.0.message_content.type": "text",
            "llm.output_messages.0.message.contents.0.message_content.text": _REFUSAL,
            "llm.output_messages.0.message.content": _REFUSAL,
            "llm.finish_reason": "stop",
        },
    )
    record = decode_one(span("response", attrs))
    assert (record.refusal, record.output_text, record.finish_reasons) == (
        _REFUSAL,
        None,
        ("stop",),
    )


def test_openinference_chat_completions_refusal_string_is_a_refusal() -> None:
    raw = {"choices": [{"message": {"role": "assistant", "content": None, "refusal": _REFUSAL}}]}
    record = decode_one(span("ChatCompletion", _oi_llm(raw, **{"llm.finish_reason": "stop"})))
    assert record.refusal == _REFUSAL


def test_openinference_null_refusal_in_raw_output_is_no_refusal() -> None:
    raw = {"choices": [{"message": {"role": "assistant", "content": "Hi.", "refusal": None}}]}
    attrs = _oi_llm(raw, **{"llm.output_messages.0.message.content": "Hi."})
    record = decode_one(span("ChatCompletion", attrs))
    assert (record.refusal, record.output_text) == (None, "Hi.")


def test_openinference_text_in_both_content_and_contents_counts_once() -> None:
    attrs = {
        "openinference.span.kind": "LLM",
        "llm.output_messages.0.message.contents.0.message_content.type": "text",
        "llm.output_messages.0.message.contents.0.message_content.text": "Refund R-77 issued.",
        "llm.output_messages.0.message.content": "Refund R-77 issued.",
    }
    assert decode_one(span("response", attrs)).output_text == "Refund R-77 issued."


def test_pydantic_ai_tool_call_part_arguments_stay_the_models_json_string() -> None:
    # pydantic-ai 2.68: tool_call parts carry the model's arguments string, not an object.
    output = [
        {
            "role": "assistant",
            "parts": [
                {
                    "type": "tool_call",
                    "id": "call_001",
                    "name": "lookup_order",
                    "arguments": '{"order_id": "A-1001"}',
                },
            ],
            "finish_reason": "tool_call",
        }
    ]
    attrs = {"gen_ai.operation.name": "chat", "gen_ai.output.messages": json.dumps(output)}
    record = decode_one(span("chat gpt-4o-mini", attrs))
    assert record.output_tool_calls == (
        RequestedCall("lookup_order", "call_001", '{"order_id": "A-1001"}', 0),
    )


def test_pydantic_ai_v2_running_tool_with_operation_name_reads_tool_arguments() -> None:
    # pydantic-ai 2.68 with InstrumentationSettings(version=2) sets gen_ai.operation.name.
    attrs = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "lookup_order",
        "gen_ai.tool.call.id": "call_001",
        "tool_arguments": '{"order_id":"A-1001"}',
        "tool_response": '{"status":"delivered"}',
        "gen_ai.agent.name": "support_agent",
    }
    record = decode_one(span("running tool", attrs))
    assert (record.role, record.tool_name, record.call_id) == (
        SpanRole.TOOL,
        "lookup_order",
        "call_001",
    )
    assert (record.arguments, record.result) == ('{"order_id":"A-1001"}', '{"status":"delivered"}')
    assert record.agent_name == "support_agent"


def test_pydantic_ai_v2_agent_run_with_operation_name_is_an_agent() -> None:
    attrs = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "concierge",
        "agent_name": "concierge",
        "final_result": "Done.",
    }
    record = decode_one(span("agent run", attrs))
    assert (record.role, record.agent_name, record.output_text) == (
        SpanRole.AGENT,
        "concierge",
        "Done.",
    )


def test_pydantic_ai_content_filter_with_empty_parts_is_a_refusal() -> None:
    output = [{"role": "assistant", "parts": [], "finish_reason": "content_filter"}]
    attrs = {
        "gen_ai.operation.name": "chat",
        "gen_ai.output.messages": json.dumps(output),
        "gen_ai.response.finish_reasons": ["content_filter"],
    }
    record = decode_one(span("chat gpt-4o-mini", attrs))
    assert (record.refusal, record.output_text, record.output_tool_calls) == (
        "content_filter",
        None,
        (),
    )


def test_contrib_agents_repr_text_is_never_parsed_into_calls() -> None:
    # contrib openai-agents-v2 0.1.0 writes the SDK's Python repr as a text part.
    text = "ResponseFunctionToolCall(arguments='{}', call_id='call_003', name='lookup_order')"
    output = [{"role": "assistant", "parts": [{"type": "text", "content": text}]}]
    attrs = {"gen_ai.operation.name": "chat", "gen_ai.output.messages": json.dumps(output)}
    record = decode_one(span("chat gpt-4o-mini", attrs))
    assert (record.output_tool_calls, record.output_text, record.refusal) == ((), text, None)
