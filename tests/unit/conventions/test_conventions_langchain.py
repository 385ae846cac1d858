"""LangChain agents under openinference-instrumentation-langchain (LangGraph graphs).

The outermost agent graph is a CHAIN span, told apart from its nodes by the ``metadata``
JSON naming the agent as the span is named; an agent's output is the graph state, whose
answer is the last AI message.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from toolwatch.conventions import classify, recognize
from toolwatch.model import SpanRole


def chain(**more: Any) -> dict[str, Any]:
    return {"openinference.span.kind": "CHAIN", **more}


def metadata(agent: str, **more: Any) -> str:
    return json.dumps({"ls_integration": "langchain_create_agent", "lc_agent_name": agent, **more})


def test_the_agent_graphs_own_chain_span_is_the_agent() -> None:
    role, convention = classify("concierge", chain(metadata=metadata("concierge")))
    assert (role, convention.name) == (SpanRole.AGENT, "openinference")


@pytest.mark.parametrize(
    ("name", "attrs"),
    [
        ("model", chain(metadata=metadata("concierge", langgraph_node="model"))),  # a node
        ("concierge", chain(metadata='{"lc_agent_name": "other"}')),
        ("concierge", chain(metadata='not json but "lc_agent_name" in it')),
        ("concierge", chain(metadata=["lc_agent_name"])),
        ("concierge", chain()),
    ],
)
def test_other_chain_spans_stay_plain_spans(name: str, attrs: dict[str, Any]) -> None:
    assert classify(name, attrs)[0] is SpanRole.OTHER


def state(*messages: dict[str, Any]) -> str:
    return json.dumps({"messages": list(messages)})


def message(kind: str, content: Any) -> dict[str, Any]:
    return {"type": kind, "data": {"content": content, "additional_kwargs": {}}}


@pytest.mark.parametrize(
    ("output", "text"),
    [
        (state(message("human", "hi"), message("ai", "Refund R-77.")), "Refund R-77."),
        (state(message("ai", "first"), message("tool", "{}"), message("ai", "last")), "last"),
        (state(message("human", "hi"), message("ai", "")), None),  # a refusal: no content
        (state(message("ai", [{"type": "text", "text": "a"}, {"type": "image"}])), "a"),
        (state(message("human", "hi")), None),
        ('{"messages": "odd"}', '{"messages": "odd"}'),
        ("plain answer", "plain answer"),
    ],
)
def test_an_agent_answers_with_the_graph_states_last_ai_message(output: str, text: Any) -> None:
    attrs = {"openinference.span.kind": "AGENT", "output.value": output}
    _, _, fields = recognize("support_agent", 0, attrs, None)
    assert fields["output_text"] == text
    assert fields["agent_name"] == "support_agent"


def tool_message(status: str, call_id: str = "call_003") -> dict[str, Any]:
    return {
        "content": "Refund service rejected the request",
        "type": "tool",
        "name": "issue_refund",
        "tool_call_id": call_id,
        "status": status,
    }


@pytest.mark.parametrize(
    ("name", "attrs"),
    [
        (  # openinference-instrumentation-langchain: message_to_dict
            "issue_refund",
            {
                "openinference.span.kind": "TOOL",
                "output.value": json.dumps({"type": "tool", "data": tool_message("error")}),
            },
        ),
        (  # LangSmith's OTel export
            "issue_refund",
            {
                "langsmith.span.kind": "tool",
                "gen_ai.completion": json.dumps({"output": tool_message("error")}),
            },
        ),
        (  # OpenLLMetry's langchain instrumentation: LangChain's own serialization
            "issue_refund.tool",
            {
                "traceloop.span.kind": "tool",
                "traceloop.entity.output": json.dumps(
                    {
                        "output": {
                            "lc": 1,
                            "type": "constructor",
                            "id": ["langchain", "schema", "messages", "ToolMessage"],
                            "kwargs": tool_message("error"),
                        },
                        "kwargs": {"name": "issue_refund"},
                    }
                ),
            },
        ),
    ],
)
def test_a_tool_message_gives_the_call_id_and_a_handled_error(
    name: str, attrs: dict[str, Any]
) -> None:
    """A tool error LangGraph's ToolNode handled (handle_tool_error) leaves the span OK:
    only the ToolMessage's status says it failed. Its tool_call_id joins the call to the
    model's request when the span carries none."""
    role, _, fields = recognize(name, 1, attrs, None)
    assert role is SpanRole.TOOL
    assert (fields["error_type"], fields["call_id"]) == ("error", "call_003")


def test_a_successful_tool_message_is_no_error() -> None:
    attrs = {
        "openinference.span.kind": "TOOL",
        "output.value": json.dumps({"type": "tool", "data": tool_message("success")}),
    }
    _, _, fields = recognize("issue_refund", 1, attrs, None)
    assert (fields["error_type"], fields["call_id"]) == (None, "call_003")


@pytest.mark.parametrize(
    "output",
    [
        '{"tool_call_id": "x"',  # cut short
        json.dumps({"tool_call_id": "x", "status": "error"}),  # no ToolMessage: no type
        json.dumps({"type": "tool", "data": {"type": "ai", "tool_call_id": "x"}}),
        json.dumps([{"tool_call_id": "x"}]),
        json.dumps(
            {"output": {"output": {"output": {"output": {"type": "tool", "tool_call_id": "x"}}}}}
        ),
    ],
)
def test_results_that_are_no_tool_message_say_nothing(output: str) -> None:
    attrs = {"openinference.span.kind": "TOOL", "output.value": output}
    _, _, fields = recognize("lookup", 1, attrs, None)
    assert (fields["error_type"], fields["call_id"]) == (None, None)


def test_a_strands_tool_whose_status_is_error_failed() -> None:
    """Strands ends a tool span OK when the tool returned an error result; only
    gen_ai.tool.status says so."""
    attrs = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "charge_card",
        "gen_ai.tool.call.id": "call_001",
        "gen_ai.tool.status": "error",
    }
    _, _, fields = recognize("execute_tool charge_card", 1, attrs, None)
    assert fields["error_type"] == "error"
    attrs["gen_ai.tool.status"] = "success"
    assert recognize("execute_tool charge_card", 1, attrs, None).fields["error_type"] is None
