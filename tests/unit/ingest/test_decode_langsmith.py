"""The LangSmith SDK's OpenTelemetry export at ingest: roles by run type, fields from the
run's inputs and outputs."""

from __future__ import annotations

import json

from ingest_support import decode_one, span

from toolwatch.model import RequestedCall, SpanRole

_KIND = "langsmith.span.kind"
_AGENT = "langsmith.metadata.lc_agent_name"


def test_tool_run_arguments_are_its_inputs_and_its_id_the_models() -> None:
    attrs = {
        _KIND: "tool",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "lookup_order",
        "gen_ai.tool.call.id": "call_001",
        "gen_ai.prompt": '{"order_id": "A-1001"}',
        "gen_ai.completion": '{"output": {"type": "tool", "content": "{}"}}',
        _AGENT: "support_agent",
    }
    record = decode_one(span("lookup_order", attrs))
    assert (record.role, record.convention) == (SpanRole.TOOL, "langsmith")
    assert (record.tool_name, record.call_id) == ("lookup_order", "call_001")
    assert record.arguments == '{"order_id": "A-1001"}'


def _generation(kwargs: dict[str, object], finish: str) -> dict[str, object]:
    return {
        "text": "",
        "generation_info": {"finish_reason": finish},
        "message": {"lc": 1, "type": "constructor", "kwargs": kwargs},
    }


def _llm(*generations: dict[str, object]) -> dict[str, object]:
    result = {"generations": [list(generations)], "type": "LLMResult"}
    return {_KIND: "llm", "gen_ai.operation.name": "chat", "gen_ai.completion": json.dumps(result)}


def test_model_run_output_is_read_from_the_llm_result() -> None:
    calls = [
        {"name": "get_weather", "args": {"city": "Paris"}, "id": "call_1", "type": "tool_call"},
        {"name": "get_weather", "args": {"city": "London"}, "id": "call_2", "type": "tool_call"},
    ]
    kwargs = {"content": "", "tool_calls": calls, "additional_kwargs": {"refusal": None}}
    record = decode_one(span("ChatOpenAI", _llm(_generation(kwargs, "tool_calls"))))
    assert record.role is SpanRole.LLM
    assert record.output_tool_calls == (
        RequestedCall("get_weather", "call_1", {"city": "Paris"}, 0),
        RequestedCall("get_weather", "call_2", {"city": "London"}, 1),
    )
    assert (record.finish_reasons, record.output_text) == (("tool_calls",), None)


def test_model_run_answer_and_refusal() -> None:
    answer = _generation({"content": [{"type": "text", "text": "Done."}]}, "stop")
    assert decode_one(span("ChatOpenAI", _llm(answer))).output_text == "Done."
    refused = _generation({"content": "", "additional_kwargs": {"refusal": "No."}}, "stop")
    record = decode_one(span("ChatOpenAI", _llm(refused)))
    assert (record.refusal, record.output_text) == ("No.", None)


def test_agent_graph_span_is_the_agent_and_its_answer_the_last_ai_message() -> None:
    state = {
        "messages": [
            {"type": "human", "content": "refund A-1001"},
            {"type": "ai", "content": "Refunded."},
            {"type": "tool", "content": "{}"},
        ]
    }
    attrs = {_KIND: "chain", _AGENT: "support_agent", "gen_ai.completion": json.dumps(state)}
    record = decode_one(span("support_agent", attrs))
    assert (record.role, record.agent_name, record.output_text) == (
        SpanRole.AGENT,
        "support_agent",
        "Refunded.",
    )


def test_graph_nodes_and_other_runs_are_plain_spans() -> None:
    for name, kind in (("model", "chain"), ("tools", "chain"), ("retrieve", "retriever")):
        attrs = {_KIND: kind, _AGENT: "support_agent", "gen_ai.operation.name": "chain"}
        assert decode_one(span(name, attrs)).role is SpanRole.OTHER, name


def test_outputs_that_are_not_an_llm_result_hold_no_output() -> None:
    for completion in ('{"generations": "no"}', "not json", '{"output": 1}'):
        attrs = {_KIND: "llm", "gen_ai.completion": completion}
        record = decode_one(span("ChatOpenAI", attrs))
        assert (record.role, record.output_tool_calls) == (SpanRole.LLM, ()), completion
