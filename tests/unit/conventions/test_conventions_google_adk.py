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


_TRANSFER_TOOL = {
    "gen_ai.operation.name": "execute_tool",
    "gen_ai.tool.name": "transfer_to_agent",
    google_adk.TOOL_TYPE: "TransferToAgentTool",
}


def _tool(attrs: dict[str, Any], status_code: int = 0) -> dict[str, Any]:
    found = recognize("execute_tool transfer_to_agent", status_code, attrs, None)
    assert found.role is SpanRole.TOOL
    return dict(found.fields)


@pytest.mark.parametrize(
    ("arguments", "target"),
    [
        ('{"agent_name": "Refund Agent"}', "Refund Agent"),
        ({"agent_name": "refund_agent"}, "refund_agent"),
        (None, ""),  # schema 2 without content capture: names no one
        ("{}", ""),  # the legacy format without content capture writes {}
        ("not json", ""),
    ],
)
def test_adks_transfer_tool_span_hands_off_to_the_agent_its_argument_names(
    arguments: Any, target: str
) -> None:
    attrs = dict(_TRANSFER_TOOL)
    if arguments is not None:
        attrs["gen_ai.tool.call.arguments"] = arguments
    assert _tool(attrs)["handoff_to"] == target


def test_a_transfer_to_agent_tool_of_adks_without_its_tool_type_is_told_by_its_event_id() -> None:
    attrs = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "transfer_to_agent",
        "gcp.vertex.agent.tool_call_args": '{"agent_name": "refund_agent"}',
        google_adk.EVENT_ID: "e-1",
    }
    assert _tool(attrs)["handoff_to"] == "refund_agent"


@pytest.mark.parametrize("tool_type", [None, "function", "FunctionTool"])
def test_another_tool_named_transfer_to_agent_is_read_by_name_in_assembly(
    tool_type: str | None,
) -> None:
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "transfer_to_agent"}
    if tool_type is not None:
        attrs[google_adk.TOOL_TYPE] = tool_type
    assert "handoff_to" not in _tool(attrs)


def test_adks_model_span_asking_for_a_transfer_names_the_agent_handed_to() -> None:
    transfer = {"id": "transfer_to_agent_0", "name": "transfer_to_agent"}
    attrs = _model_span(
        [{**transfer, "arguments": {"agent_name": "refund_agent"}}], **{google_adk.EVENT_ID: "e"}
    )
    found = recognize("generate_content gemini-2.5-flash", 0, attrs, None)
    assert found.fields["handoff_to"] == "refund_agent"
    assert "handoff_to" not in recognize("chat", 0, _model_span(_CALLS), None).fields
    other = _model_span([{**transfer, "arguments": {"agent_name": "refund_agent"}}])
    assert "handoff_to" not in recognize("chat", 0, other, None).fields


_CRASHED = {
    "gen_ai.operation.name": "execute_tool",
    "gen_ai.tool.name": "charge_card",
    google_adk.TOOL_TYPE: "FunctionTool",
    "gen_ai.tool.call.id": "<not specified>",
    "gcp.vertex.agent.tool_call_args": '{"order_id": "A-1001"}',
    "gcp.vertex.agent.tool_response": '{"result": "<not specified>"}',
    "error.type": "CardDeclinedError",
}


def test_a_crashed_tools_legacy_stand_in_result_is_no_result() -> None:
    fields = _tool(_CRASHED, status_code=2)
    assert (fields["result"], fields["call_id"], fields["error_type"]) == (
        None,
        None,
        "CardDeclinedError",
    )


@pytest.mark.parametrize(
    ("key", "result"),
    [
        ("gcp.vertex.agent.tool_response", '{"result": "<not specified> yet"}'),
        ("gcp.vertex.agent.tool_response", '{"result": "<not specified>", "note": 1}'),
        ("gen_ai.tool.call.result", '{"result": "<not specified>"}'),  # not ADK's legacy key
    ],
)
def test_a_result_that_is_not_adks_stand_in_is_kept(key: str, result: str) -> None:
    attrs = {k: v for k, v in _CRASHED.items() if k != "gcp.vertex.agent.tool_response"}
    attrs[key] = result
    if key != "gcp.vertex.agent.tool_response":
        del attrs[google_adk.TOOL_TYPE]
    assert _tool(attrs, status_code=2)["result"] == result


_EVENT = {
    "model_version": "gemini-2.5-flash",
    "content": {"parts": [{"text": "Thinking.", "thought": True}, {"text": "Refund R-77."}]},
    "finish_reason": "STOP",
    "invocation_id": "e-1",
    "author": "support_agent",
    "actions": {},
    "id": "9b1c",
    "timestamp": 1796000000.5,
}
_REFUSED = {
    "model_version": "gemini-2.5-flash",
    "finish_reason": "SAFETY",
    "invocation_id": "e-2",
    "author": "support_agent",
    "actions": {},
    "id": "9b1d",
    "timestamp": 1796000001.5,
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


@pytest.mark.parametrize(
    "value",
    [
        {"author": "Ann", "text": "hello"},
        {"author": "Ann", "invocation_id": "i-1", "summary": "no ADK Event"},
        {"title": "t", "author": "a", "sources": [{"invocation_id": "inv-7"}]},
        {**_EVENT, "author": None},  # an Event's author is its agent's name
        {**_EVENT, "actions": []},
    ],
)
def test_an_output_value_that_is_no_adk_event_stays_as_it_is(value: dict[str, Any]) -> None:
    text = json.dumps(value)
    assert google_adk.event_answer(text) == text


def test_an_output_value_that_is_no_json_object_stays_as_it_is() -> None:
    assert google_adk.event_answer("plain answer") == "plain answer"
    assert google_adk.event_answer('["invocation_id"]') == '["invocation_id"]'


_FLAT = "llm.output_messages.0.message.tool_calls.{}.tool_call.function."


def _call(name: str, **args: Any) -> dict[str, Any]:
    return {"function_call": {"name": name, "args": args}}


def _merged_span(
    flattened: list[tuple[str, dict[str, Any]]],
    history: list[list[dict[str, Any]]] | None,
    response: dict[str, Any],
) -> dict[str, Any]:
    """OpenInference 1.0.5's one model span of an ADK 2.x agent: the flattened tool_calls
    left by earlier calls, the last call's history (a model turn per list of parts) in
    ``input.value`` and its response in ``output.value``."""
    attrs: dict[str, Any] = {
        "openinference.span.kind": "LLM",
        google_adk.EVENT_ID: "e-3",
        "output.value": json.dumps(response),
    }
    for index, (name, arguments) in enumerate(flattened):
        attrs[_FLAT.format(index) + "name"] = name
        attrs[_FLAT.format(index) + "arguments"] = json.dumps(arguments)
    if history is not None:
        turns = [{"role": "user", "parts": [{"text": "[scenario:parallel] Paris, London?"}]}]
        turns += [{"role": "model", "parts": parts} for parts in history]
        attrs["input.value"] = json.dumps({"model": "gemini-2.5-flash", "contents": turns})
    return attrs


_ANSWER = {
    "model_version": "gemini-2.5-flash",
    "content": {"parts": [{"text": "Refund R-77."}], "role": "model"},
    "finish_reason": "STOP",
}
_WEATHER = [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "London"})]


def _output(attrs: dict[str, Any]) -> tuple[list[tuple[str, Any, int]], Any, Any]:
    fields = recognize("invoke_agent weather_agent", 1, attrs, None).fields
    calls = [(c.name, json.loads(c.arguments), c.position) for c in fields["output_tool_calls"]]
    return calls, fields["output_text"], fields["finish_reasons"]


def test_adk_merged_model_span_requests_the_latest_turns_calls_its_history_confirms() -> None:
    """The parallel script: one response asked for both cities; the flattened keys hold
    them, and so does the last call's history: one model output asking for both."""
    history = [[_call("lookup_order", id="A")], [_call(n, **a) for n, a in _WEATHER]]
    attrs = _merged_span(_WEATHER, history, _ANSWER)
    assert _output(attrs) == (
        [("get_weather", {"city": "Paris"}, 0), ("get_weather", {"city": "London"}, 1)],
        "Refund R-77.",
        ("stop",),
    )


@pytest.mark.parametrize(
    "history",
    [
        # two turns' calls mixed: the later turn overwrote tool_calls.0 only
        [[_call(n, **a) for n, a in _WEATHER], [_call("issue_refund", order_id="A-1001")]],
        [[_call("get_weather", city="Paris")]],  # the history shows a turn of other calls
        None,  # no history (or cut at max_value_bytes): nothing confirms them
    ],
)
def test_adk_merged_model_span_drops_flattened_calls_its_history_does_not_confirm(
    history: list[list[dict[str, Any]]] | None,
) -> None:
    flattened = [("issue_refund", {"order_id": "A-1001"}), _WEATHER[1]]
    if history is not None and len(history) == 1:
        flattened = _WEATHER
    assert _output(_merged_span(flattened, history, _ANSWER)) == ([], "Refund R-77.", ("stop",))


def test_adk_merged_model_span_whose_last_response_asks_for_tools_requests_those() -> None:
    response = {
        "model_version": "gemini-2.5-flash",
        "content": {"parts": [_call("lookup_order", id="A")]},
        "finish_reason": "STOP",
    }
    attrs = _merged_span([("lookup_order", {"id": "A"})], [], response)
    fields = recognize("invoke_agent support_agent", 1, attrs, None).fields
    assert fields["output_tool_calls"] == (RequestedCall("lookup_order", None, {"id": "A"}, 0),)


def test_openinference_model_span_of_another_producer_reads_its_flattened_keys() -> None:
    attrs = _merged_span(_WEATHER, None, _ANSWER)
    del attrs[google_adk.EVENT_ID]
    attrs[_FLAT.format(0).replace("tool_calls.0.tool_call.function.", "content")] = "Both."
    calls, text, _ = _output(attrs)
    assert (calls, text) == (
        [("get_weather", {"city": "Paris"}, 0), ("get_weather", {"city": "London"}, 1)],
        "Both.",
    )
