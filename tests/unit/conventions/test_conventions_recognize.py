"""Classification priority and the attribute filter, on plain attribute dictionaries."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolwatch.conventions import (
    ATTRIBUTE_KEYS,
    ATTRIBUTE_PREFIXES,
    EVENT_ATTRIBUTE_KEYS,
    EVENT_NAMES,
    SpanEvent,
    classify,
    genai,
    openinference,
    openllmetry,
    pydantic_ai,
    recognize,
    vercel_ai,
)
from toolwatch.conventions.attrs import Convention, Recognition
from toolwatch.conventions.genai import unflatten_parameters
from toolwatch.model import RequestedCall, SpanRole

_CONVENTIONS: Sequence[Convention] = (
    genai.CONVENTION,
    openinference.CONVENTION,
    openllmetry.CONVENTION,
    pydantic_ai.CONVENTION,
    vercel_ai.CONVENTION,
)


@pytest.mark.parametrize("convention", _CONVENTIONS, ids=lambda c: c.name)
def test_every_key_a_convention_reads_passes_the_ingest_filter(convention: Convention) -> None:
    tool, agent = convention.tool, convention.agent
    read = {*tool.name, *tool.call_id, *tool.arguments, *tool.result, *agent.name, *agent.output}
    assert read - ATTRIBUTE_KEYS == set()


def test_shared_field_keys_pass_the_ingest_filter() -> None:
    shared = {
        "error.type",
        "gen_ai.agent.name",
        "gen_ai.response.model",
        "gen_ai.request.model",
        "llm.model_name",
        "gen_ai.conversation.id",
        "session.id",
        "gen_ai.response.finish_reasons",
        "gen_ai.response.finish_reason",
        "llm.finish_reason",
        "gen_ai.output.messages",
        "ai.response.model",
    }
    assert shared - ATTRIBUTE_KEYS == set()
    assert ATTRIBUTE_PREFIXES == (
        "llm.output_messages.",
        "gen_ai.completion.",
        "code.function.parameters.",  # google-genai contrib <= 0.4b0: one key per argument
    )


def test_event_filter_names_the_events_and_keys_recognizers_read() -> None:
    assert {
        "exception",
        "gen_ai.tool.message",
        "gen_ai.choice",
        "gen_ai.client.inference.operation.details",
        "gen_ai.content.completion",  # GenAI v1.26-1.27
        # GenAI v1.28-1.36's input messages (Strands): a model call's input history
        "gen_ai.user.message",
        "gen_ai.assistant.message",
    } == EVENT_NAMES
    keys = {"exception.type", "content", "id", "message", "finish_reason", "gen_ai.completion"}
    assert keys <= EVENT_ATTRIBUTE_KEYS
    assert "exception.stacktrace" not in EVENT_ATTRIBUTE_KEYS


@pytest.mark.parametrize(
    ("name", "attrs", "role", "convention"),
    [
        # explicit vendor kind beats the operation name
        (
            "x",
            {"openinference.span.kind": "LLM", "gen_ai.operation.name": "execute_tool"},
            SpanRole.LLM,
            "openinference",
        ),
        (
            "x",
            {"traceloop.span.kind": "tool", "gen_ai.operation.name": "chat"},
            SpanRole.TOOL,
            "openllmetry",
        ),
        # lower-case OpenInference kinds are tolerated
        ("x", {"openinference.span.kind": "tool"}, SpanRole.TOOL, "openinference"),
        # an unknown operation falls through to the tool-name attribute
        (
            "x",
            {"gen_ai.operation.name": "something_new", "gen_ai.tool.name": "t"},
            SpanRole.TOOL,
            "genai",
        ),
        # the operation name beats the span name
        ("running tools", {"gen_ai.operation.name": "chat"}, SpanRole.LLM, "genai"),
        ("execute_tool t", {}, SpanRole.TOOL, "genai"),
        ("invoke_agent", {}, SpanRole.AGENT, "genai"),
        ("invoke_agents_later", {}, SpanRole.OTHER, ""),
        ("agent_run [weather_agent]", {}, SpanRole.AGENT, "genai"),  # ADK <= mid-2025
        ("agent_run [weather_agent", {}, SpanRole.OTHER, ""),
        # Google ADK's native model span: no operation name
        ("call_llm", {"gcp.vertex.agent.llm_response": "{}"}, SpanRole.LLM, "genai"),
        ("call_llm", {}, SpanRole.OTHER, ""),
        ("execute_tool (merged)", {}, SpanRole.WRAPPER, "genai"),
        ("running tools", {}, SpanRole.WRAPPER, "pydantic_ai"),
        ("agent run", {}, SpanRole.AGENT, "pydantic_ai"),
        ("openai.chat", {"gen_ai.completion.0.content": "hi"}, SpanRole.LLM, "openllmetry"),
        ("GET /", {"case.id": "c"}, SpanRole.OTHER, ""),
        # values of the wrong type are not trusted
        (
            "x",
            {
                "openinference.span.kind": ["TOOL"],
                "gen_ai.operation.name": {"a": 1},
                "traceloop.span.kind": 3,
                "llm.request.type": ["chat"],
            },
            SpanRole.OTHER,
            "",
        ),
    ],
)
def test_classification_priority(
    name: str, attrs: dict[str, object], role: SpanRole, convention: str
) -> None:
    found_role, found = classify(name, attrs)
    assert (found_role, found.name) == (role, convention)


def test_events_are_loaded_only_when_attributes_lack_content() -> None:
    loads: list[int] = []

    def events() -> list[SpanEvent]:
        loads.append(1)
        return [SpanEvent("gen_ai.tool.message", {"content": '{"a": 1}', "id": "ev"})]

    attrs = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "t",
        "gen_ai.tool.call.id": "c",
        "gen_ai.tool.call.arguments": "{}",
        "gen_ai.tool.call.result": "r",
    }
    complete = recognize("execute_tool t", 0, attrs, events)
    assert (complete.fields["arguments"], loads) == ("{}", [])
    partial = recognize("execute_tool t", 0, {"gen_ai.operation.name": "execute_tool"}, events)
    assert (partial.fields["arguments"], partial.fields["call_id"], loads) == (
        '{"a": 1}',
        "ev",
        [1],
    )


_MCP_FAILED = {"content": [{"type": "text", "text": "order A-1 not found"}], "isError": True}


@pytest.mark.parametrize(
    ("key", "result", "error"),
    [
        ("gen_ai.tool.call.result", json.dumps(_MCP_FAILED), "tool_error"),
        ("output.value", json.dumps(_MCP_FAILED), "tool_error"),  # OpenInference
        ("gen_ai.tool.call.result", json.dumps({**_MCP_FAILED, "isError": False}), None),
        ("gen_ai.tool.call.result", json.dumps({"isError": True}), None),  # no MCP result
        ("gen_ai.tool.call.result", '{"isError": true, "content": "text"}', None),
        ("gen_ai.tool.call.result", 'not json, mentions "isError"', None),
    ],
)
def test_an_mcp_result_that_reports_a_failure_fails_the_call(
    key: str, result: str, error: str | None
) -> None:
    """MCP servers report a failed tool as a result with isError, and the span ends OK: a
    lookup that found nothing verified the refund after it."""
    attrs = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "lookup_order",
        key: result,
    }
    if key == "output.value":
        attrs = {"openinference.span.kind": "TOOL", "tool.name": "lookup_order", key: result}
    found = recognize("lookup_order", 0, attrs, None)
    assert (found.role, found.fields["error_type"]) == (SpanRole.TOOL, error)


_FASTMCP_FAILED = "Error executing tool lookup_order: order A-1 not found"


@pytest.mark.parametrize(
    ("tool", "result", "error"),
    [
        # The OpenAI Agents SDK hands the model the content alone, as one text item.
        ("lookup_order", json.dumps({"type": "text", "text": _FASTMCP_FAILED}), "tool_error"),
        ("lookup_order", json.dumps([{"type": "text", "text": _FASTMCP_FAILED}]), "tool_error"),
        ("lookup_order", _FASTMCP_FAILED, "tool_error"),
        ("lookup_order", "Error executing tool lookup_order", "tool_error"),  # Logfire's cut
        ("billing__lookup_order", _FASTMCP_FAILED, "tool_error"),  # a client's namespace
        ("billing.lookup_order", _FASTMCP_FAILED, "tool_error"),
        # Another tool's failure, quoted or relayed, is not this call's.
        ("issue_refund", _FASTMCP_FAILED, None),
        ("xlookup_order", _FASTMCP_FAILED, None),
        ("lookup_order", "Error executing tool lookup_order_v2: timed out", None),
        ("lookup_order", json.dumps({"type": "image", "text": _FASTMCP_FAILED}), None),
        ("lookup_order", json.dumps({"order": "A-1", "note": _FASTMCP_FAILED}), None),
        ("lookup_order", "Found A-1. " + _FASTMCP_FAILED, None),
        ("lookup_order", json.dumps({"type": "text", "text": "Found A-1"}), None),
    ],
)
def test_fastmcp_wording_of_a_failure_of_the_same_tool_fails_the_call(
    tool: str, result: str, error: str | None
) -> None:
    """FastMCP answers a tool that raised with ``isError`` and the text ``Error executing tool
    <name>: <reason>``; the OpenAI Agents SDK keeps only the text (as a content item) and ends
    its span OK, so under OpenInference, OTel contrib and Logfire that text is the only sign
    that a lookup failed, and a failed lookup must not verify the refund after it."""
    attrs = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
        "gen_ai.tool.call.result": result,
    }
    found = recognize(tool, 0, attrs, None)
    assert (found.role, found.fields["error_type"]) == (SpanRole.TOOL, error)


def test_older_adk_agent_run_span_is_an_agent_named_by_its_span_name() -> None:
    # google/adk-python base_agent.py (<= mid-2025): no attributes on the agent span.
    found = recognize("agent_run [weather_agent]", 0, {}, None)
    assert (found.role, found.convention, found.fields["agent_name"]) == (
        SpanRole.AGENT,
        "genai",
        "weather_agent",
    )


@pytest.mark.parametrize(
    "operation",
    [
        "chat.completions",
        "chat.streaming_completions",
        "text.completions",
        "text.streaming_completions",
    ],
)
def test_semantic_kernel_completion_operations_are_model_calls(operation: str) -> None:
    # Semantic Kernel (Python) model_diagnostics: its own operation names, content on a
    # gen_ai.choice event, the singular finish reason key.
    function = {"name": "Orders-lookup", "arguments": "{}"}
    call = {"id": "c1", "type": "function", "function": function}
    message = json.dumps({"role": "assistant", "content": None, "tool_calls": [call]})
    attrs = {
        "gen_ai.operation.name": operation,
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.response.finish_reason": "tool_calls",
    }

    def events() -> list[SpanEvent]:
        return [SpanEvent("gen_ai.choice", {"finish_reason": "tool_calls", "message": message})]

    found = recognize(f"{operation} gpt-4o", 0, attrs, events)
    assert (found.role, found.convention, found.fields["model"]) == (
        SpanRole.LLM,
        "genai",
        "gpt-4o",
    )
    assert found.fields["output_tool_calls"] == (RequestedCall("Orders-lookup", "c1", "{}", 0),)


def test_adk_call_llm_span_output_comes_from_its_llm_response() -> None:
    # google/adk-python telemetry.py trace_call_llm: LlmResponse.model_dump_json().
    parts = [
        {"text": "Let me check.", "thought": True},
        {"text": "Checking Paris."},
        {"function_call": {"id": "adk-1", "name": "get_weather", "args": {"city": "Paris"}}},
    ]
    response = {"content": {"role": "model", "parts": parts}, "finish_reason": "STOP"}
    attrs = {
        "gen_ai.system": "gcp.vertex.agent",
        "gen_ai.request.model": "gemini-2.0-flash",
        "gcp.vertex.agent.llm_response": json.dumps(response),
    }
    found = recognize("call_llm", 0, attrs, None)
    assert (found.role, found.fields["model"], found.fields["finish_reasons"]) == (
        SpanRole.LLM,
        "gemini-2.0-flash",
        ("stop",),
    )
    assert found.fields["output_tool_calls"] == (
        RequestedCall("get_weather", "adk-1", {"city": "Paris"}, 0),
    )
    assert found.fields["output_text"] == "Checking Paris."

    blocked = {**attrs, "gcp.vertex.agent.llm_response": '{"finish_reason": "SAFETY"}'}
    found = recognize("call_llm", 0, blocked, None)
    assert (found.fields["refusal"], found.fields["output_text"]) == ("safety", None)


def test_other_spans_have_no_fields() -> None:
    assert recognize("GET /", 0, {}, None) == Recognition(SpanRole.OTHER, "", {})


def test_legacy_genai_parameters_nested_too_deep_stay_as_they_came() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    flat = {
        "code.function.parameters.ids.value": deep,
        "code.function.parameters.ids.type": "list",
        "code.function.parameters.order.value": '{"id": "A-1"}',
        "code.function.parameters.order.type": "dict",
    }
    assert unflatten_parameters(flat) == {"ids": deep, "order": {"id": "A-1"}}


def test_a_genai_server_tool_call_part_is_a_hosted_request_and_a_tool_call_part_is_not() -> None:
    parts = [
        {
            "type": "server_tool_call",
            "id": "ws_1",
            "name": "web_search",
            "server_tool_call": {"type": "web_search", "query": "refund policy"},
        },
        {
            "type": "tool_call",
            "id": "call_2",
            "name": "lookup_order",
            "arguments": {"order_id": "A-1"},
        },
    ]
    attrs = {
        "gen_ai.operation.name": "chat",
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": parts}]),
    }
    requested = recognize("chat gpt-4o", 0, attrs, None).fields["output_tool_calls"]
    assert [(c.name, c.call_id, c.hosted, c.arguments) for c in requested] == [
        ("web_search", "ws_1", True, {"type": "web_search", "query": "refund policy"}),
        ("lookup_order", "call_2", False, {"order_id": "A-1"}),
    ]


def test_a_pydantic_ai_builtin_tool_call_is_a_hosted_request() -> None:
    # pydantic-ai (_otel_messages.ToolCallPart) marks a provider-run call "builtin": true.
    parts = [
        {"type": "tool_call", "id": "mcp_1", "name": "mcp_server:orders", "builtin": True},
        {"type": "tool_call_response", "id": "mcp_1", "name": "mcp_server:orders", "builtin": True},
        {"type": "tool_call", "id": "call_2", "name": "issue_refund", "builtin": "yes"},
    ]
    attrs = {
        "gen_ai.operation.name": "chat",
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": parts}]),
    }
    requested = recognize("chat gpt-4o", 0, attrs, None).fields["output_tool_calls"]
    assert [(c.name, c.hosted) for c in requested] == [
        ("mcp_server:orders", True),
        ("issue_refund", False),  # only a JSON true marks it
    ]


def test_pydantic_ais_output_tool_is_the_answer_not_a_call() -> None:
    """pydantic-ai answers a structured output_type through the output tool final_result,
    which runs no tool: the request is left out when model_request_parameters names it."""
    output = [
        {
            "role": "assistant",
            "parts": [
                {"type": "tool_call", "id": "c1", "name": "get_weather", "arguments": "{}"},
                {"type": "tool_call", "id": "c2", "name": "final_result", "arguments": "{}"},
            ],
        }
    ]
    attrs = {"gen_ai.operation.name": "chat", "gen_ai.output.messages": json.dumps(output)}
    both = recognize("chat gpt-4o", 0, attrs, None).fields["output_tool_calls"]
    assert [call.name for call in both] == ["get_weather", "final_result"]
    attrs["model_request_parameters"] = json.dumps(
        {
            "function_tools": [{"name": "get_weather", "kind": "function"}],
            "output_tools": [{"name": "final_result", "kind": "output"}],
        }
    )
    (call,) = recognize("chat gpt-4o", 0, attrs, None).fields["output_tool_calls"]
    assert call.name == "get_weather"


@pytest.mark.parametrize(
    "parameters",
    [
        {"output_tools": [{"name": ["final_result"]}]},  # a name that is no string
        {"output_tools": "final_result"},
        {"output_tools": []},
    ],
)
def test_odd_output_tool_lists_leave_the_calls_alone(parameters: dict[str, object]) -> None:
    output = [{"role": "assistant", "parts": [{"type": "tool_call", "id": "c", "name": "t"}]}]
    attrs = {
        "gen_ai.operation.name": "chat",
        "gen_ai.output.messages": json.dumps(output),
        "model_request_parameters": json.dumps(parameters, separators=(",", ":")),
    }
    (call,) = recognize("chat m", 0, attrs, None).fields["output_tool_calls"]
    assert call.name == "t"


@pytest.mark.parametrize(
    ("name", "attrs", "target"),
    [
        ("handoff to refund_agent", {"openinference.span.kind": "TOOL"}, "refund_agent"),
        (
            "agent_handoff OpenAI Agent",
            {"gen_ai.operation.name": "agent_handoff", "gen_ai.handoff.to_agent": "refunds"},
            "refunds",
        ),
        ("Handoff: {from_agent} → {to_agent}", {"to_agent": "refunds"}, "refunds"),
        ("triage → unknown.handoff", {"traceloop.span.kind": "handoff"}, ""),  # names none
        ("turn", {"to_agent": "refunds"}, None),  # no handoff span: nothing read
    ],
)
def test_a_handoff_span_names_the_agent_it_hands_to(
    name: str, attrs: dict[str, object], target: str | None
) -> None:
    role, _, fields = recognize(name, 0, attrs, None)
    assert role is SpanRole.OTHER
    assert fields.get("tool_name") == target


@pytest.mark.parametrize(
    ("name", "attrs", "convention"),
    [
        # the OpenAI Agents SDK's guardrail span, as each exporter that writes one names it
        ("output_safety", {"openinference.span.kind": "GUARDRAIL"}, "openinference"),
        (
            "guardrail_check",
            {"gen_ai.operation.name": "guardrail_check", "gen_ai.guardrail.name": "output_safety"},
            "genai",
        ),
        (
            "Guardrail {name!r} {triggered=}",
            {"logfire.msg_template": "Guardrail {name!r} {triggered=}", "name": "output_safety"},
            "logfire",
        ),
        ("apply_guardrail", {"gen_ai.operation.name": "apply_guardrail"}, "genai"),
        # Guardrails AI's validators: its own tracing (0.5.1 on) and guardrails-ai 0.5.0's
        # under openinference-instrumentation-guardrails, which has no kind
        (
            "toolwatch/llm-judge.validate",
            {
                "openinference.span.kind": "GUARDRAIL",
                "validator.name": "toolwatch/llm-judge",
                "on_fail_descriptor": "noop",
            },
            "guardrails_ai",
        ),
        ("toolwatch/llm-judge.validate", {"on_fail_descriptor": "noop"}, "guardrails_ai"),
        # a GUARDRAIL span of the openai-agents instrumentation named like a runner's step
        ("Runner.check", {"openinference.span.kind": "GUARDRAIL"}, "openinference"),
    ],
)
def test_a_guardrail_span_is_a_guardrail_with_no_fields(
    name: str, attrs: dict[str, object], convention: str
) -> None:
    """An agent a guardrail runs is a run of its own (``assembly/timeline.py``): the
    guardrail span has to be told from a plain span."""
    assert recognize(name, 0, attrs, None) == Recognition(SpanRole.GUARDRAIL, convention, {})


@pytest.mark.parametrize(
    ("name", "attrs", "convention"),
    [
        # guardrails-ai 0.11.0's own tracing: guard > step > call > the client's model span
        (
            "guard",
            {
                "openinference.span.kind": "GUARDRAIL",
                "guardrails.version": "0.11.0",
                "type": "guardrails/guard",
            },
            "guardrails_ai",
        ),
        (
            "call",
            {
                "openinference.span.kind": "GUARDRAIL",
                "guardrails.version": "0.11.0",
                "llm.output_messages.0.message.content": "Refund R-77 was issued.",
            },
            "guardrails_ai",
        ),
        # openinference-instrumentation-guardrails' span around guardrails-ai 0.5.0's step
        (
            "Runner.step",
            {"openinference.span.kind": "GUARDRAIL", "input.value": "{}"},
            "openinference",
        ),
        ("StreamRunner.step", {"openinference.span.kind": "GUARDRAIL"}, "openinference"),
    ],
)
def test_a_guardrails_ai_guard_around_the_applications_call_is_a_plain_span(
    name: str, attrs: dict[str, object], convention: str
) -> None:
    """A Guard calls the application's own model callable: the model span below it is the
    run's step, not a guardrail's check (``conventions.guardrails_ai``)."""
    assert recognize(name, 0, attrs, None) == Recognition(SpanRole.OTHER, convention, {})


@pytest.mark.parametrize(
    ("name", "attrs", "refusal"),
    [
        (
            "guardrail_check",
            {
                "gen_ai.operation.name": "guardrail_check",
                "gen_ai.guardrail.name": "input_safety",
                "gen_ai.guardrail.triggered": True,
            },
            "guardrail input_safety tripped",
        ),
        (
            "Guardrail {name!r} {triggered=}",
            {
                "logfire.msg_template": "Guardrail {name!r} {triggered=}",
                "name": "output_safety",
                "triggered": True,
            },
            "guardrail output_safety tripped",
        ),
        (
            "guardrail_check",
            {"gen_ai.operation.name": "guardrail_check", "gen_ai.guardrail.triggered": True},
            "guardrail tripped",
        ),
        # not tripped, or not a boolean that says so
        (
            "guardrail_check",
            {"gen_ai.operation.name": "guardrail_check", "gen_ai.guardrail.triggered": False},
            None,
        ),
        (
            "Guardrail {name!r} {triggered=}",
            {"logfire.msg_template": "Guardrail {name!r} {triggered=}", "triggered": "yes"},
            None,
        ),
    ],
)
def test_a_guardrail_that_tripped_carries_the_refusal_it_made(
    name: str, attrs: dict[str, object], refusal: str | None
) -> None:
    role, _, fields = recognize(name, 0, attrs, None)
    assert (role, fields.get("refusal")) == (SpanRole.GUARDRAIL, refusal)


@pytest.mark.parametrize(
    ("message", "refusal"),
    [
        # OpenInference and the contrib instrumentation: "{message}: {data}"
        (
            "Guardrail tripwire triggered: {'guardrail': 'input_safety'}",
            "guardrail input_safety tripped",
        ),
        (
            "Guardrail tripwire triggered: {'guardrail': 'pii', 'type': 'input_guardrail'}",
            "guardrail pii tripped",
        ),
        # OpenLLMetry: the SpanError's repr
        (
            "{'message': 'Guardrail tripwire triggered', 'data': {'guardrail': 'output_safety'}}",
            "guardrail output_safety tripped",
        ),
        # a name with a quote is repr'd in double quotes
        ("Guardrail tripwire triggered: {'guardrail': \"o'brien\"}", "guardrail o'brien tripped"),
        # with both quote kinds, or a backslash, Python escapes them
        (
            "Guardrail tripwire triggered: {'guardrail': 'say \"no\" to o\\'brien'}",
            'guardrail say "no" to o\'brien tripped',
        ),
        (
            r"Guardrail tripwire triggered: {'guardrail': 'C:\\rules\\pii'}",
            r"guardrail C:\rules\pii tripped",
        ),
        # a name cut off by the message's limit, or an escape Python does not know
        ("Guardrail tripwire triggered: {'guardrail': 'long name cut", "guardrail tripped"),
        (r"Guardrail tripwire triggered: {'guardrail': '\N{no such name}'}", "guardrail tripped"),
        # an escape that spells a lone surrogate: no output could carry it
        (r"Guardrail tripwire triggered: {'guardrail': 'a\ud800b'}", "guardrail a\ufffdb tripped"),
        ("Guardrail tripwire triggered: None", "guardrail tripped"),
        ("Guardrail tripwire triggered", "guardrail tripped"),
        # another error, or the words far into another message
        ("Error running tool (non-fatal): {'tool_name': 'x'}", None),
        ("timeout; the log says: Guardrail tripwire triggered: {'guardrail': 'g'}", None),
        ("", None),
    ],
)
def test_an_error_status_that_says_a_guardrail_tripped_refuses(
    message: str, refusal: str | None
) -> None:
    """The OpenAI Agents SDK records a trip only as the stopped span's error (the turn's for
    an input guardrail, the agent's for an output one): the message is read whatever the
    span's role (real captures: ``openai_agents__*__output_guardrail_tripped_client``)."""
    for name, attrs, role in (
        ("turn", {"openinference.span.kind": "CHAIN"}, SpanRole.OTHER),
        ("support_agent", {"openinference.span.kind": "AGENT"}, SpanRole.AGENT),
    ):
        found = recognize(name, 2, attrs, None, message)
        assert (found.role, found.fields.get("refusal")) == (role, refusal)
    assert recognize("turn", 2, {"openinference.span.kind": "CHAIN"}, None).fields == {}


@given(st.text(min_size=1, max_size=40))
def test_any_guardrail_name_reads_back_from_the_sdk_messages(guard: str) -> None:
    """Whatever the name (quotes, backslashes, control characters), as each exporter writes
    the error: OpenInference and contrib ``{message}: {data}``, OpenLLMetry the error's repr."""
    data = {"guardrail": guard, "type": "input_guardrail"}
    for message in (
        f"Guardrail tripwire triggered: {data!r}",
        repr({"message": "Guardrail tripwire triggered", "data": data}),
    ):
        found = recognize("turn", 2, {"openinference.span.kind": "CHAIN"}, None, message)
        assert found.fields.get("refusal") == f"guardrail {guard} tripped"


@pytest.mark.parametrize(
    ("message", "refusal"),
    [
        (
            "ValidationError: Validation failed for field with errors: The answer shows ids.",
            "guardrail validation failed",
        ),
        # input validators: the guard raises before the model is called (guardrails-ai 0.11.0)
        (
            "ValidationError: Messages validation failed: incorrect_value='x'",
            "guardrail validation failed",
        ),
        ("ValidationError: Messages validation failed", "guardrail validation failed"),
        ("ValidationError: Message history validation failed", "guardrail validation failed"),
        ("ValidationError: Prompt validation failed", "guardrail validation failed"),
        ("ValidationError: Instructions validation failed", "guardrail validation failed"),
        ("ValueError: Validation failed for field with errors: x", None),
        ("1 validation error for Verdict", None),  # pydantic's
    ],
)
def test_a_guardrails_ai_guard_that_raised_refuses(message: str, refusal: str | None) -> None:
    """``on_fail="exception"``: the guard and its step end ERROR with the ValidationError's
    message, and the application gets no answer (real captures:
    ``guardrails__*__guarded_answer_raises``); OpenInference's ``Runner.step`` too."""
    attrs = {"guardrails.version": "0.11.0", "type": "guardrails/guard"}
    found = recognize("guard", 2, attrs, None, message)
    assert (found.role, found.fields.get("refusal")) == (SpanRole.OTHER, refusal)
    runner = recognize("Runner.step", 2, {"openinference.span.kind": "GUARDRAIL"}, None, message)
    assert (runner.role, runner.fields.get("refusal")) == (SpanRole.OTHER, refusal)


@pytest.mark.parametrize(
    ("name", "attrs", "role"),
    [
        ("invoke_agent support_agent", {"gen_ai.operation.name": "invoke_agent"}, SpanRole.AGENT),
        ("POST /chat", {}, SpanRole.OTHER),  # the application's own span
        ("execute_tool charge_card", {"gen_ai.tool.name": "charge_card"}, SpanRole.TOOL),
    ],
)
def test_a_guards_error_escaping_through_other_spans_refuses_on_none_of_them(
    name: str, attrs: dict[str, object], role: SpanRole
) -> None:
    """An exception escaping a span is written on each span it crosses (pydantic-ai's agent
    span, OpenTelemetry's ``start_as_current_span``): a guard that raised inside a tool is the
    tool's failure, whatever the agent and application spans above say."""
    message = "ValidationError: Validation failed for field with errors: no card numbers."
    found = recognize(name, 2, attrs, None, message)
    assert (found.role, found.fields.get("refusal")) == (role, None)


_BLOCKED = "Sorry, the model cannot answer this question."


@pytest.mark.parametrize(
    ("attrs", "refusal", "output_text"),
    [
        # OpenInference's JavaScript Bedrock instrumentation: the Converse stopReason in
        # llm.stop_reason, the guardrail's canned text as the message
        (
            {
                "openinference.span.kind": "LLM",
                "llm.stop_reason": "guardrail_intervened",
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.content": _BLOCKED,
            },
            "guardrail_intervened",
            _BLOCKED,
        ),
        # OpenInference's Anthropic instrumentation: the raw Messages response stopped for a
        # refusal (no finish-reason key), its text block the refusal's words
        (
            {
                "openinference.span.kind": "LLM",
                "output.value": json.dumps(
                    {
                        "type": "message",
                        "content": [{"type": "text", "text": "I can't help with that."}],
                        "stop_reason": "refusal",
                    }
                ),
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.content": "I can't help with that.",
            },
            "I can't help with that.",
            None,
        ),
        # a thinking block recorded as a message of its own: reasoning, not the answer
        (
            {
                "openinference.span.kind": "LLM",
                "llm.output_messages.0.message.role": "thinking",
                "llm.output_messages.0.message.content": "The fraud score is 0.93...",
                "llm.output_messages.1.message.role": "assistant",
                "llm.output_messages.1.message.content": "Your refund was issued.",
            },
            None,
            "Your refund was issued.",
        ),
        # ...the response's stop reason is on the first completion, the thinking one
        (
            {
                "llm.request.type": "chat",
                "gen_ai.system": "Anthropic",
                "gen_ai.completion.0.role": "thinking",
                "gen_ai.completion.0.finish_reason": "refusal",
                "gen_ai.completion.0.content": "This asks for something unsafe...",
                "gen_ai.completion.1.role": "assistant",
                "gen_ai.completion.1.content": "I can't help with that.",
            },
            "refusal",
            "I can't help with that.",
        ),
        # OpenLLMetry's Anthropic instrumentation: the thinking block a completion of its own
        (
            {
                "llm.request.type": "chat",
                "gen_ai.system": "Anthropic",
                "gen_ai.completion.0.role": "thinking",
                "gen_ai.completion.0.content": "The fraud score is 0.93...",
                "gen_ai.completion.1.role": "assistant",
                "gen_ai.completion.1.content": "Your refund was issued.",
            },
            None,
            "Your refund was issued.",
        ),
    ],
)
def test_provider_specific_refusals_and_reasoning_read_as_they_mean(
    attrs: dict[str, object], refusal: str | None, output_text: str | None
) -> None:
    found = recognize("chat", 3, attrs, None)
    assert found.role == SpanRole.LLM
    assert (found.fields.get("refusal"), found.fields.get("output_text")) == (refusal, output_text)


@pytest.mark.parametrize(
    ("name", "attrs", "expected"),
    [
        # OpenInference: the crew's kickoff (CHAIN) is the run, its CrewOutput's raw the answer
        (
            "support_crew.kickoff",
            {
                "openinference.span.kind": "CHAIN",
                "crew_key": "55e3",
                "output.value": json.dumps({"raw": "Refund R-77 issued.", "tasks_output": []}),
            },
            (SpanRole.AGENT, "crewai", "support_crew", "Refund R-77 issued."),
        ),
        # ...a task's agent: named by graph.node.id (no agent.name), its TaskOutput's raw
        (
            "triage_agent.refund_crew._execute_core",
            {
                "openinference.span.kind": "AGENT",
                "crew_key": "55e3",
                "graph.node.id": "triage_agent",
                "output.value": json.dumps({"description": "Look up", "raw": "Delivered."}),
            },
            (SpanRole.AGENT, "crewai", "triage_agent", "Delivered."),
        ),
        # ...a crew left with CrewAI's default name: its span is named by its id, new for
        # every crew built; the run is named as the crew is, "crew"
        (
            "Crew_2f1c9a4e-5b7d-4e0a-9c3e-1a2b3c4d5e6f.kickoff",
            {"openinference.span.kind": "CHAIN", "crew_key": "55e3"},
            (SpanRole.AGENT, "crewai", "crew", None),
        ),
        # another instrumentation's agent span with a graph.node.id (Agno's: a random id per
        # run) is named as OpenInference names agents, and its output is not unwrapped
        (
            "Agent.run",
            {
                "openinference.span.kind": "AGENT",
                "graph.node.id": "9f8e7d6c5b4a3f2e",
                "output.value": json.dumps({"description": "d", "raw": "not CrewAI's"}),
            },
            (
                SpanRole.AGENT,
                "openinference",
                "Agent.run",
                json.dumps({"description": "d", "raw": "not CrewAI's"}),
            ),
        ),
        # ...another span of the crew's is no run
        (
            "support_crew.train",
            {"openinference.span.kind": "CHAIN", "crew_key": "55e3"},
            (SpanRole.OTHER, "openinference", None, None),
        ),
        # OpenLLMetry: the crew's workflow span, an invoke_agent span with no agent name
        (
            "crewai.workflow",
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.provider.name": "crewai",
                "crewai.crew.name": "support_crew",
                "crewai.crew.result": "Refund R-77 issued.",
            },
            (SpanRole.AGENT, "crewai", "support_crew", "Refund R-77 issued."),
        ),
    ],
)
def test_a_crewai_crew_is_an_agent_run_named_by_the_crew(
    name: str, attrs: dict[str, object], expected: tuple[object, ...]
) -> None:
    found = recognize(name, 0, attrs, None)
    fields = found.fields
    assert (found.role, found.convention, fields.get("agent_name"), fields.get("output_text")) == (
        expected
    )
