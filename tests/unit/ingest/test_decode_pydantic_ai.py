"""pydantic-ai v1/v2 spans (no gen_ai.operation.name) at ingest."""

from __future__ import annotations

from ingest_support import decode_one, span

from toolwatch.model import SpanRole


def test_running_tool_span_with_tool_arguments_and_response() -> None:
    record = decode_one(
        span(
            "running tool",
            {
                "gen_ai.tool.name": "roulette_wheel",
                "gen_ai.tool.call.id": "call_idvalue",
                "tool_arguments": '{"square": 18}',
                "tool_response": "winner",
                "logfire.msg": "running tool: roulette_wheel",
            },
        )
    )
    assert (record.role, record.convention) == (SpanRole.TOOL, "pydantic_ai")
    assert (record.tool_name, record.call_id) == ("roulette_wheel", "call_idvalue")
    assert (record.arguments, record.result) == ('{"square": 18}', "winner")


def test_tool_name_attribute_alone_makes_a_tool_span() -> None:
    record = decode_one(span("do thing", {"gen_ai.tool.name": "f", "gen_ai.tool.call.id": "c"}))
    assert (record.role, record.convention, record.tool_name) == (SpanRole.TOOL, "genai", "f")


def test_running_tools_wrapper() -> None:
    attrs = {"tools": ["a", "b"], "logfire.msg": "running 2 tools"}
    record = decode_one(span("running tools", attrs))
    assert (record.role, record.convention) == (SpanRole.WRAPPER, "pydantic_ai")


def test_agent_run_span() -> None:
    attrs = {"agent_name": "my_agent", "model_name": "test", "final_result": "done"}
    record = decode_one(span("agent run", attrs))
    assert (record.role, record.convention) == (SpanRole.AGENT, "pydantic_ai")
    assert (record.agent_name, record.output_text) == ("my_agent", "done")
