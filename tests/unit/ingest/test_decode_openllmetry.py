"""OpenLLMetry / Traceloop spans at ingest."""

from __future__ import annotations

import json

from ingest_support import decode_one, span

from toolwatch.model import RequestedCall, SpanRole


def test_decorated_tool_uses_kwargs_of_the_entity_input() -> None:
    entity_input = json.dumps({"args": [], "kwargs": {"city": "Paris", "days": 3}})
    record = decode_one(
        span(
            "get_weather.tool",
            {
                "traceloop.span.kind": "tool",
                "traceloop.entity.name": "get_weather",
                "traceloop.entity.input": entity_input,
                "traceloop.entity.output": '"sunny"',
            },
        )
    )
    assert (record.role, record.convention) == (SpanRole.TOOL, "openllmetry")
    assert record.tool_name == "get_weather"
    assert record.arguments == {"city": "Paris", "days": 3}
    assert record.result == '"sunny"'
    assert record.call_id is None


def test_decorated_tool_with_positional_args_keeps_the_envelope() -> None:
    entity_input = json.dumps({"args": ["Paris"], "kwargs": {}})
    attrs = {"traceloop.span.kind": "tool", "traceloop.entity.input": entity_input}
    assert decode_one(span("get_weather.tool", attrs)).arguments == entity_input


def test_tool_name_from_the_span_name_suffix() -> None:
    record = decode_one(span("lookup_order.tool", {"traceloop.span.kind": "tool"}))
    assert record.tool_name == "lookup_order"


def test_genai_tool_arguments_win_over_entity_input() -> None:
    attrs = {
        "traceloop.span.kind": "tool",
        "gen_ai.tool.name": "refund",
        "gen_ai.tool.call.arguments": '{"order_id": "A1"}',
        "gen_ai.tool.call.result": '{"ok": true}',
        "traceloop.entity.input": json.dumps({"args": [], "kwargs": {"order_id": "B2"}}),
    }
    record = decode_one(span("refund.tool", attrs))
    assert (record.tool_name, record.arguments, record.result) == (
        "refund",
        '{"order_id": "A1"}',
        '{"ok": true}',
    )


def test_langchain_tool_input_envelope_gives_its_inputs() -> None:
    wrapped = json.dumps(
        {"input_str": "{'q': 'x'}", "tags": [], "metadata": {}, "inputs": {"q": "x"}, "kwargs": {}}
    )
    attrs = {
        "traceloop.span.kind": "tool",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "search",
        "gen_ai.tool.call.arguments": wrapped,
        "traceloop.entity.input": wrapped,
    }
    assert decode_one(span("execute_tool search", attrs)).arguments == {"q": "x"}


def _legacy(**extra: object) -> dict[str, object]:
    return {
        "llm.request.type": "chat",
        "gen_ai.system": "OpenAI",
        "gen_ai.request.model": "gpt-3.5-turbo",
        "gen_ai.completion.0.role": "assistant",
        **extra,
    }


def test_legacy_completion_tool_calls() -> None:
    attrs = _legacy(
        **{
            "gen_ai.completion.0.finish_reason": "tool_calls",
            "gen_ai.completion.0.tool_calls.0.id": "call_a",
            "gen_ai.completion.0.tool_calls.0.name": "get_current_weather",
            "gen_ai.completion.0.tool_calls.0.arguments": '{"location": "Boston"}',
            "gen_ai.completion.0.tool_calls.1.id": "call_b",
            "gen_ai.completion.0.tool_calls.1.name": "get_time",
            "gen_ai.completion.0.tool_calls.1.arguments": "{}",
        }
    )
    record = decode_one(span("openai.chat", attrs, kind=3))
    assert (record.role, record.convention) == (SpanRole.LLM, "openllmetry")
    assert record.output_tool_calls == (
        RequestedCall("get_current_weather", "call_a", '{"location": "Boston"}', 0),
        RequestedCall("get_time", "call_b", "{}", 1),
    )
    assert record.finish_reasons == ("tool_calls",)
    assert record.model == "gpt-3.5-turbo"


def test_legacy_parallel_calls_one_per_completion_index_sort_numerically() -> None:
    attrs: dict[str, object] = {"llm.request.type": "chat"}
    for i in (11, 1, 10, 2):
        attrs[f"gen_ai.completion.{i}.tool_calls.0.name"] = f"t{i}"
    record = decode_one(span("openai.response", attrs))
    assert [c.name for c in record.output_tool_calls] == ["t1", "t2", "t10", "t11"]
    assert [c.position for c in record.output_tool_calls] == [0, 1, 2, 3]


def test_legacy_completion_refusal() -> None:
    attrs = _legacy(
        **{
            "gen_ai.completion.0.refusal": "I can't assist with that.",
            "gen_ai.completion.0.finish_reason": "stop",
        }
    )
    record = decode_one(span("openai.chat", attrs))
    assert record.refusal == "I can't assist with that."
    assert record.finish_reasons == ("stop",)


def test_legacy_filtered_content_is_a_refusal_not_text() -> None:
    attrs = _legacy(
        **{
            "gen_ai.completion.0.content": "FILTERED",
            "gen_ai.completion.0.finish_reason": "content_filter",
        }
    )
    record = decode_one(span("openai.chat", attrs))
    assert (record.refusal, record.output_text) == ("content_filter", None)


def test_legacy_completion_text() -> None:
    attrs = _legacy(
        **{"gen_ai.completion.0.content": "Hi!", "gen_ai.completion.0.finish_reason": "stop"}
    )
    assert decode_one(span("openai.chat", attrs)).output_text == "Hi!"


def test_agent_span_name_and_output() -> None:
    attrs = {
        "traceloop.span.kind": "agent",
        "traceloop.entity.name": "planner",
        "traceloop.entity.output": '"Plan ready"',
    }
    record = decode_one(span("planner.agent", attrs))
    assert (record.role, record.agent_name, record.output_text) == (
        SpanRole.AGENT,
        "planner",
        "Plan ready",
    )


def test_workflow_span_is_other() -> None:
    attrs = {"traceloop.span.kind": "workflow", "traceloop.workflow.name": "Agent Workflow"}
    assert decode_one(span("Agent Workflow", attrs)).role is SpanRole.OTHER


def test_handoff_span_is_other() -> None:
    attrs = {
        "traceloop.span.kind": "handoff",
        "gen_ai.operation.name": "handoff",
        "gen_ai.agent.name": "agent1",
    }
    record = decode_one(span("agent1 → agent2.handoff", attrs))
    assert (record.role, record.agent_name) == (SpanRole.OTHER, None)


def test_task_kind_falls_through_to_the_operation_name() -> None:
    attrs = {"traceloop.span.kind": "task", "gen_ai.operation.name": "chat"}
    assert decode_one(span("summarize.task", attrs)).role is SpanRole.LLM
