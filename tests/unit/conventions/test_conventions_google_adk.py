"""Google ADK's spans beyond the GenAI conventions (``conventions.google_adk``), as
google-adk 2.13 and openinference-instrumentation-google-adk 1.0.5 write them (captured:
``google_adk__*`` fixtures)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from toolwatch.conventions import google_adk, recognize
from toolwatch.model import RequestedCall, SpanRole

_CALLS = [
    {"id": "get_weather_0", "name": "get_weather", "arguments": {"city": "Paris"}},
    {"id": "get_weather_1", "name": "get_weather", "arguments": {"city": "London"}},
]


def _model_span(parts: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """ADK 2.x's ``generate_content`` span, its calls as ``gen_ai.output.messages`` parts."""
    message = {"role": "assistant", "parts": [{**p, "type": "tool_call"} for p in parts]}
    return {
        "gen_ai.operation.name": "generate_content",
        "gen_ai.output.messages": json.dumps([{**message, "finish_reason": "stop"}]),
        **extra,
    }


def _requested(attrs: dict[str, Any]) -> list[tuple[str, str | None]]:
    found = recognize("generate_content gemini-2.5-flash", 0, attrs, None)
    assert found.role is SpanRole.LLM
    calls = found.fields["output_tool_calls"]
    return [(c.name, c.call_id) for c in calls]


def test_adks_placeholder_call_ids_on_its_model_spans_are_no_call_ids() -> None:
    attrs = _model_span(_CALLS, **{google_adk.EVENT_ID: "e-1"})
    assert _requested(attrs) == [("get_weather", None), ("get_weather", None)]


def test_ids_of_that_form_from_another_producer_are_kept() -> None:
    assert _requested(_model_span(_CALLS)) == [
        ("get_weather", "get_weather_0"),
        ("get_weather", "get_weather_1"),
    ]


@pytest.mark.parametrize("call_id", ["adk-5f1c", "get_weather_", "get_weather_x1", "lookup_0"])
def test_an_id_the_model_or_adk_gave_is_kept_on_adks_model_spans(call_id: str) -> None:
    attrs = _model_span(
        [{"id": call_id, "name": "get_weather", "arguments": {}}], **{google_adk.EVENT_ID: "e"}
    )
    assert _requested(attrs) == [("get_weather", call_id)]


@pytest.mark.parametrize(
    ("name", "arguments", "target"),
    [
        ("transfer_to_agent", '{"agent_name": "Refund Agent"}', "refund_agent"),
        ("transfer_to_agent", {"agent_name": "refund_agent"}, "refund_agent"),
        ("Transfer_To_Agent", {"agent_name": "billing"}, "billing"),
        ("transfer_to_agent", None, ""),  # content capture off: names no one
        ("transfer_to_agent", "{}", "agent"),  # the SDK's tool for an agent named "agent"
        ("transfer_to_agent", "not json", "agent"),
        ("transfer_to_refund_agent", "{}", "refund_agent"),  # the OpenAI Agents SDK's
    ],
)
def test_a_transfer_names_its_agent_by_argument_or_tool_name(
    name: str, arguments: Any, target: str
) -> None:
    assert google_adk.transfer_target(name, arguments) == target


_EVENT = {
    "model_version": "gemini-2.5-flash",
    "content": {"parts": [{"text": "Thinking.", "thought": True}, {"text": "Refund R-77."}]},
    "finish_reason": "STOP",
    "invocation_id": "e-1",
    "author": "support_agent",
    "actions": {},
}
_REFUSED = {
    "model_version": "gemini-2.5-flash",
    "finish_reason": "SAFETY",
    "invocation_id": "e-2",
    "author": "support_agent",
    "actions": {},
}


def test_openinference_agent_output_that_is_an_adk_event_is_its_text() -> None:
    attrs = {
        "openinference.span.kind": "AGENT",
        "agent.name": "support_agent",
        "output.value": json.dumps(_EVENT),
    }
    found = recognize("agent_run [support_agent]", 1, attrs, None)
    assert (found.role, found.fields["output_text"]) == (SpanRole.AGENT, "Refund R-77.")


def test_openinference_agent_output_of_a_refused_adk_event_has_no_text() -> None:
    attrs = {"openinference.span.kind": "AGENT", "output.value": json.dumps(_REFUSED)}
    assert recognize("agent_run [support_agent]", 1, attrs, None).fields["output_text"] is None


def test_an_output_value_that_is_no_adk_event_stays_as_it_is() -> None:
    text = json.dumps({"author": "Ann", "text": "hello"})
    assert google_adk.event_answer(text) == text
    assert google_adk.event_answer("plain answer") == "plain answer"


def test_openinference_model_span_on_adk_reads_its_response_not_stale_flattened_calls() -> None:
    """OpenInference 1.0.5 on ADK 2.x writes every model call onto one span: the last call
    answered in text, the flattened tool_calls are an earlier call's."""
    stale = "llm.output_messages.0.message.tool_calls.0.tool_call.function."
    attrs = {
        "openinference.span.kind": "LLM",
        stale + "name": "issue_refund",
        stale + "arguments": '{"order_id": "A-1001"}',
        "output.value": json.dumps({k: v for k, v in _EVENT.items() if k != "author"}),
    }
    found = recognize("invoke_agent support_agent", 1, attrs, None)
    assert (found.fields["output_tool_calls"], found.fields["output_text"]) == (
        (),
        "Refund R-77.",
    )
    assert found.fields["finish_reasons"] == ("stop",)


def test_openinference_model_span_on_adk_reads_the_calls_its_response_asks_for() -> None:
    response = {
        "model_version": "gemini-2.5-flash",
        "content": {"parts": [{"function_call": {"name": "lookup_order", "args": {"id": "A"}}}]},
        "finish_reason": "STOP",
    }
    attrs = {"openinference.span.kind": "LLM", "output.value": json.dumps(response)}
    found = recognize("invoke_agent support_agent", 1, attrs, None)
    assert found.fields["output_tool_calls"] == (
        RequestedCall("lookup_order", None, {"id": "A"}, 0),
    )
