"""OpenTelemetry GenAI semantic conventions (and the frameworks that emit them) at ingest."""

from __future__ import annotations

import json

from ingest_support import decode_one, event, span

from toolwatch.model import RequestedCall, SpanRole


def test_execute_tool_span_carries_name_id_arguments_result_and_error_type() -> None:
    record = decode_one(
        span(
            "execute_tool get_weather",
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "get_weather",
                "gen_ai.tool.call.id": "call_VSPy",
                "gen_ai.tool.call.arguments": '{"location": "Paris"}',
                "gen_ai.tool.call.result": "rainy, 57°F",
                "error.type": "TimeoutError",
                "gen_ai.agent.name": "weather_agent",
            },
            status=2,
        )
    )
    assert (record.role, record.convention) == (SpanRole.TOOL, "genai")
    assert record.tool_name == "get_weather"
    assert record.call_id == "call_VSPy"
    assert record.arguments == '{"location": "Paris"}'
    assert record.result == "rainy, 57°F"
    assert record.error_type == "TimeoutError"
    assert record.agent_name == "weather_agent"


def test_tool_name_is_kept_as_emitted() -> None:
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "  Lookup_Order "}
    assert decode_one(span("execute_tool x", attrs)).tool_name == "  Lookup_Order "


def test_tool_name_falls_back_to_the_span_name() -> None:
    record = decode_one(span("execute_tool lookup", {"gen_ai.operation.name": "execute_tool"}))
    assert (record.tool_name, record.call_id, record.arguments) == ("lookup", None, None)


def test_placeholder_call_id_is_none() -> None:
    attrs = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "t",
        "gen_ai.tool.call.id": "<not specified>",
    }
    assert decode_one(span("execute_tool t", attrs)).call_id is None


def test_structured_arguments_are_kept_structured() -> None:
    attrs = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "t",
        "gen_ai.tool.call.arguments": {"x": 42, "y": [1, 2]},
    }
    assert decode_one(span("execute_tool t", attrs)).arguments == {"x": 42, "y": [1, 2]}


def test_exception_event_gives_error_type_of_a_failed_tool() -> None:
    record = decode_one(
        span(
            "execute_tool t",
            {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t"},
            events=[event("exception", {"exception.type": "ValueError", "exception.message": "m"})],
            status=2,
        )
    )
    assert record.error_type == "ValueError"


def test_exception_event_of_a_successful_tool_is_not_an_error() -> None:
    record = decode_one(
        span(
            "execute_tool t",
            {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t"},
            events=[event("exception", {"exception.type": "ValueError"})],
        )
    )
    assert record.error_type is None


def test_failed_tool_without_error_details_leaves_error_type_to_the_status() -> None:
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t"}
    record = decode_one(span("execute_tool t", attrs, status=2))
    assert (record.status_code, record.error_type) == (2, None)


def _chat(output: list[dict[str, object]], **extra: object) -> dict[str, object]:
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4",
        "gen_ai.output.messages": json.dumps(output),
        **extra,
    }


def test_chat_output_holds_parallel_tool_calls_in_emission_order() -> None:
    output = [
        {
            "role": "assistant",
            "parts": [
                {"type": "text", "content": "Checking both."},
                {"type": "tool_call", "id": "c2", "name": "zeta", "arguments": {"q": 2}},
                {"type": "tool_call", "id": "c1", "name": "alpha", "arguments": {"q": 1}},
            ],
            "finish_reason": "tool_call",
        }
    ]
    attrs = _chat(output, **{"gen_ai.response.finish_reasons": ["tool_calls"]})
    record = decode_one(span("chat gpt-4", attrs, kind=3))
    assert (record.role, record.convention) == (SpanRole.LLM, "genai")
    assert record.output_tool_calls == (
        RequestedCall("zeta", "c2", {"q": 2}, 0),
        RequestedCall("alpha", "c1", {"q": 1}, 1),
    )
    assert record.output_text == "Checking both."
    assert record.finish_reasons == ("tool_calls", "tool_call")
    assert record.refusal is None
    assert record.model == "gpt-4"


def test_response_model_wins_over_request_model() -> None:
    attrs = _chat([], **{"gen_ai.response.model": "gpt-4-0613"})
    assert decode_one(span("chat gpt-4", attrs)).model == "gpt-4-0613"


def test_tool_calls_across_output_messages_keep_their_order() -> None:
    output = [
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "a", "name": "f"}]},
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "b", "name": "g"}]},
    ]
    record = decode_one(span("chat", _chat(output)))
    assert [(c.name, c.call_id, c.arguments, c.position) for c in record.output_tool_calls] == [
        ("f", "a", None, 0),
        ("g", "b", None, 1),
    ]


def test_content_filter_finish_reason_is_a_refusal() -> None:
    output = [{"role": "assistant", "parts": [], "finish_reason": "content_filter"}]
    attrs = _chat(output, **{"gen_ai.response.finish_reasons": ["content_filter"]})
    record = decode_one(span("chat gpt-4", attrs))
    assert record.finish_reasons == ("content_filter",)
    assert record.refusal == "content_filter"
    assert record.output_text is None


def test_refusal_part_text_is_the_refusal() -> None:
    output = [
        {
            "role": "assistant",
            "parts": [{"type": "refusal", "content": "I can't help with that."}],
            "finish_reason": "stop",
        }
    ]
    record = decode_one(span("chat", _chat(output)))
    assert record.refusal == "I can't help with that."
    assert record.output_text is None


def test_gemini_safety_finish_reason_is_a_refusal() -> None:
    attrs = {
        "gen_ai.operation.name": "generate_content",
        "gen_ai.response.finish_reasons": "safety",
    }
    record = decode_one(span("generate_content gemini", attrs))
    assert (record.role, record.refusal) == (SpanRole.LLM, "safety")


def test_comma_joined_finish_reasons_are_split() -> None:
    attrs = {"gen_ai.operation.name": "chat", "gen_ai.response.finish_reasons": "stop,length"}
    assert decode_one(span("chat", attrs)).finish_reasons == ("stop", "length")


def test_unparseable_output_messages_give_an_empty_output() -> None:
    attrs = {"gen_ai.operation.name": "chat", "gen_ai.output.messages": '[{"role": "assis'}
    record = decode_one(span("chat", attrs))
    assert (record.role, record.output_tool_calls, record.output_text) == (SpanRole.LLM, (), None)


def test_invoke_agent_span_carries_agent_name_output_and_conversation() -> None:
    output = [{"role": "assistant", "parts": [{"type": "text", "content": "Done."}]}]
    attrs = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "planner",
        "gen_ai.conversation.id": "conv-1",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.output.messages": json.dumps(output),
    }
    record = decode_one(span("invoke_agent planner", attrs, kind=3))
    assert (record.role, record.convention) == (SpanRole.AGENT, "genai")
    assert (record.agent_name, record.output_text) == ("planner", "Done.")
    assert (record.conversation_id, record.model) == ("conv-1", "gpt-4o")
    assert record.output_tool_calls == ()


def test_agent_name_is_parsed_from_the_span_name() -> None:
    record = decode_one(span("invoke_agent triage", {"gen_ai.operation.name": "invoke_agent"}))
    assert record.agent_name == "triage"


def test_pydantic_ai_v3_agent_final_result_is_the_output() -> None:
    attrs = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "my_agent",
        "final_result": '{"my_ret":"1"}',
    }
    assert decode_one(span("invoke_agent my_agent", attrs)).output_text == '{"my_ret":"1"}'


def test_invoke_workflow_is_not_an_agent_run() -> None:
    attrs = {"gen_ai.operation.name": "invoke_workflow", "gen_ai.agent.name": "x"}
    record = decode_one(span("invoke_workflow flow", attrs))
    assert (record.role, record.convention, record.agent_name) == (SpanRole.OTHER, "genai", None)


def test_adk_merged_tool_span_is_a_wrapper() -> None:
    attrs = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "(merged tools)",
        "gen_ai.tool.call.id": "evt-1",
    }
    record = decode_one(span("execute_tool (merged)", attrs))
    assert (record.role, record.tool_name, record.call_id) == (SpanRole.WRAPPER, None, None)


def test_adk_native_tool_arguments_and_response() -> None:
    attrs = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "bake_cake",
        "gen_ai.tool.call.id": "adk-1",
        "gcp.vertex.agent.tool_call_args": '{"query": "duplo"}',
        "gcp.vertex.agent.tool_response": '{"result": "cake"}',
    }
    record = decode_one(span("execute_tool_bake_cake", attrs))
    assert (record.tool_name, record.arguments, record.result) == (
        "bake_cake",
        '{"query": "duplo"}',
        '{"result": "cake"}',
    )


def test_strands_tool_span_takes_arguments_and_result_from_events() -> None:
    record = decode_one(
        span(
            "execute_tool calculator",
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "calculator",
                "gen_ai.tool.call.id": "tooluse_1",
                "gen_ai.system": "strands-agents",
            },
            events=[
                event(
                    "gen_ai.tool.message",
                    {"role": "tool", "content": '{"expression": "2+2"}', "id": "tooluse_1"},
                ),
                event("gen_ai.choice", {"message": '[{"text": "4"}]', "id": "tooluse_1"}),
            ],
        )
    )
    assert (record.role, record.tool_name, record.call_id) == (
        SpanRole.TOOL,
        "calculator",
        "tooluse_1",
    )
    assert record.arguments == '{"expression": "2+2"}'
    assert record.result == '[{"text": "4"}]'


def test_strands_latest_conventions_tool_events() -> None:
    inputs = [
        {
            "role": "tool",
            "parts": [
                {
                    "type": "tool_call",
                    "name": "calc",
                    "id": "tu_2",
                    "arguments": {"expression": "1+1"},
                }
            ],
        }
    ]
    outputs = [
        {
            "role": "tool",
            "parts": [{"type": "tool_call_response", "id": "tu_2", "response": [{"text": "2"}]}],
        }
    ]
    details = "gen_ai.client.inference.operation.details"
    record = decode_one(
        span(
            "execute_tool calc",
            {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "calc"},
            events=[
                event(details, {"gen_ai.input.messages": json.dumps(inputs)}),
                event(details, {"gen_ai.output.messages": json.dumps(outputs)}),
            ],
        )
    )
    assert (record.call_id, record.arguments, record.result) == (
        "tu_2",
        {"expression": "1+1"},
        [{"text": "2"}],
    )


def test_strands_chat_span_tool_use_blocks_in_choice_event() -> None:
    message = [
        {"text": "Let me compute."},
        {"toolUse": {"toolUseId": "tu_1", "name": "calculator", "input": {"e": "2+2"}}},
        {"toolUse": {"toolUseId": "tu_2", "name": "clock", "input": {}}},
    ]
    record = decode_one(
        span(
            "chat",
            {"gen_ai.operation.name": "chat", "gen_ai.request.model": "claude"},
            events=[
                event("gen_ai.user.message", {"content": '[{"text": "hi"}]'}),
                event(
                    "gen_ai.choice", {"finish_reason": "tool_use", "message": json.dumps(message)}
                ),
            ],
        )
    )
    assert record.output_tool_calls == (
        RequestedCall("calculator", "tu_1", {"e": "2+2"}, 0),
        RequestedCall("clock", "tu_2", {}, 1),
    )
    assert (record.output_text, record.finish_reasons) == ("Let me compute.", ("tool_use",))


def test_strands_agent_span_final_text_from_choice_event() -> None:
    record = decode_one(
        span(
            "invoke_agent Strands Agents",
            {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Strands Agents"},
            events=[
                event(
                    "gen_ai.choice", {"message": "The answer is 4.\n", "finish_reason": "end_turn"}
                )
            ],
        )
    )
    assert (record.agent_name, record.output_text) == ("Strands Agents", "The answer is 4.\n")
    assert record.finish_reasons == ("end_turn",)


def test_semantic_kernel_choice_event_with_openai_style_message() -> None:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "Weather-get", "arguments": '{"city":"Oslo"}'},
            },
        ],
    }
    record = decode_one(
        span(
            "chat.completions gpt-4o",
            {"gen_ai.operation.name": "chat", "gen_ai.response.finish_reason": "tool_calls"},
            events=[
                event(
                    "gen_ai.choice",
                    {"index": 0, "finish_reason": "tool_calls", "message": json.dumps(message)},
                )
            ],
        )
    )
    assert record.output_tool_calls == (
        RequestedCall("Weather-get", "call_1", '{"city":"Oslo"}', 0),
    )
    assert record.finish_reasons == ("tool_calls",)


# --- google-genai contrib: arguments flattened per parameter (CONVENTIONS §4.10) -----------

_GOOGLE_TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "issue_refund"}


def test_flattened_arguments_json_of_google_genai_1_2_becomes_the_arguments_object() -> None:
    flattened = {
        "code.function.parameters.order_id.type": "str",
        "code.function.parameters.order_id.value": "A-1001",
        "code.function.parameters.amount_usd.type": "float",
        "code.function.parameters.amount_usd.value": 25.5,
        "code.function.parameters.items.type": "list",
        "code.function.parameters.items.value": ["a", "b"],
    }
    attrs = {**_GOOGLE_TOOL, "gen_ai.tool.call.arguments": json.dumps(flattened)}
    record = decode_one(span("execute_tool issue_refund", attrs))
    assert record.arguments == {"order_id": "A-1001", "amount_usd": 25.5, "items": ["a", "b"]}


def test_flattened_argument_attributes_of_google_genai_0_4_become_the_arguments_object() -> None:
    attrs = {
        **_GOOGLE_TOOL,
        "code.function.name": "issue_refund",
        "code.function.parameters.order_id.type": "str",
        "code.function.parameters.order_id.value": "A-1001",
        "code.function.parameters.amount_usd.type": "int",
        "code.function.parameters.amount_usd.value": 25,
        # a dict cannot be an attribute: the instrumentation JSON-encodes it
        "code.function.parameters.address.type": "dict",
        "code.function.parameters.address.value": '{"city": "Paris"}',
        "code.function.parameters.note.type": "str",
        "code.function.parameters.note.value": '{"kept": "a string"}',
    }
    record = decode_one(span("execute_tool issue_refund", attrs))
    assert record.arguments == {
        "order_id": "A-1001",
        "amount_usd": 25,
        "address": {"city": "Paris"},
        "note": '{"kept": "a string"}',
    }


def test_flattened_types_without_values_mean_arguments_not_recorded() -> None:
    attrs = {**_GOOGLE_TOOL, "code.function.parameters.order_id.type": "str"}
    assert decode_one(span("execute_tool issue_refund", attrs)).arguments is None


def test_an_arguments_object_only_partly_flattened_is_kept_as_it_came() -> None:
    mixed = json.dumps({"code.function.parameters.a.value": 1, "b": 2})
    attrs = {**_GOOGLE_TOOL, "gen_ai.tool.call.arguments": mixed}
    assert decode_one(span("execute_tool issue_refund", attrs)).arguments == mixed


def test_arguments_recorded_whole_win_over_flattened_attributes() -> None:
    attrs = {
        **_GOOGLE_TOOL,
        "gen_ai.tool.call.arguments": '{"order_id": "A-2"}',
        "code.function.parameters.order_id.value": "A-1",
    }
    assert decode_one(span("execute_tool issue_refund", attrs)).arguments == '{"order_id": "A-2"}'
