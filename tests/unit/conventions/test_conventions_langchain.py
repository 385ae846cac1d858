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
