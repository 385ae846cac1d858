"""What a correct ToolTrace reconstruction must find in each fixture, written by hand.

The calls come from the scripts (``scripts.py``), not from toolwatch's output. The notes
record what inspecting the exported spans showed (``inspect_fixture.py``): where each
instrumentation puts the tool name, arguments and call id, and where it deviates from
``CONVENTIONS.md``. ``run.py`` writes ``<fixture>.expected.json`` from these tables.
"""

from __future__ import annotations

from typing import Any

__all__ = ["expected_for"]

REFUND_ARGS = {"order_id": "A-1001", "amount_usd": 25.0}
DESK_INPUT = {"input": "[scenario:refund_desk] Check order A-1001."}
DESK_REQUEST = {"request": "[scenario:refund_desk] Check order A-1001."}  # ADK's AgentTool
#: The CrewAI manager's delegation (scripts.DELEGATION_ARGS), as the model asked for it.
DELEGATE = "delegate_work_to_coworker"
DELEGATION_ARGS = {
    "task": "[scenario:crew_delegated_refund] Look up order A-1001, then refund its 25.00 USD.",
    "context": "The customer says order A-1001 arrived broken and wants a refund.",
    "coworker": "refund_agent",
}


def _call(
    tool: str,
    arguments: Any,
    status: str = "ok",
    parallel: bool = False,
    nested_in: str | None = None,
    *,
    handoff: bool = False,
    agent: str | None = None,
) -> dict[str, Any]:
    call = {
        "tool": tool,
        "arguments": arguments,
        "status": status,
        "parallel": parallel,
        "nested_in": nested_in,
    }
    if handoff:
        call["handoff"] = True  # absent: not a handoff
    if agent is not None:
        call["agent"] = agent  # absent: the agent is not checked
    return call


def _run(
    agent: str | None, calls: list[dict[str, Any]], final: str | None, refusal: bool = False
) -> dict[str, Any]:
    return {"agent": agent, "calls": calls, "refusal": refusal, "final_text_contains": final}


_REFUND_CALLS = [_call("lookup_order", {"order_id": "A-1001"}), _call("issue_refund", REFUND_ARGS)]

#: The CrewAI captures' crew: a crew's kickoff is the run, named by the crew.
_CREW = "support_crew"

SCRIPTED: dict[str, dict[str, Any]] = {
    "refund": _run("support_agent", _REFUND_CALLS, "Refund R-77"),
    "refund_stream": _run("support_agent", _REFUND_CALLS, "Refund R-77"),
    "refund_mcp": _run("support_agent", _REFUND_CALLS, "Refund R-77"),
    "tool_error_mcp": _run(
        "support_agent", [_call("charge_card", REFUND_ARGS, "error")], "could not charge the card"
    ),
    "refund_mcp_traced": _run("support_agent", _REFUND_CALLS, "Refund R-77"),
    "tool_error_mcp_traced": _run(
        "support_agent", [_call("charge_card", REFUND_ARGS, "error")], "could not charge the card"
    ),
    "parallel": _run(
        "weather_agent",
        [
            _call("get_weather", {"city": "Paris"}, parallel=True),
            _call("get_weather", {"city": "London"}, parallel=True),
        ],
        "London is rainy",
    ),
    "tool_error": _run(
        "support_agent", [_call("charge_card", REFUND_ARGS, "error")], "could not charge the card"
    ),
    "tool_crash": _run("support_agent", [_call("charge_card", REFUND_ARGS, "error")], None),
    "refusal": _run("support_agent", [], None, refusal=True),
    # The refusal stays the run's: the guardrail agent's verdict, whose model call ended
    # last, is the second run's (below).
    "refusal_output_guardrail": _run("support_agent", [], None, refusal=True),
    "refusal_input_guardrail": _run("support_agent", [], None, refusal=True),
    # The guardrail's own model call (the client's span under the guardrail span, or
    # beside the agent's turns recorded twice when no guardrail span is written) is no
    # output of the run either.
    "refusal_output_guardrail_client": _run("support_agent", [], None, refusal=True),
    # The run's final output is its tool's result: no text of the model's. The guardrail's
    # own model call after the run's last is no answer of the run.
    "tool_output_guardrail_client": _run(
        "support_agent", [_call("lookup_order", {"order_id": "A-1001"})], None
    ),
    # A blocking input guardrail tripped before the agent's model was called: the request
    # was refused, by the guardrail; its verdict is no answer of the run.
    "input_guardrail_blocking_client": _run("support_agent", [], None, refusal=True),
    "input_guardrail_blocking_stream": _run("support_agent", [], None, refusal=True),
    # An output guardrail tripped on the agent's answer, which the SDK withheld (it raised):
    # the run refused, by the guardrail, after its tool call. The withheld answer is still
    # the model's last output, the run's final text (what the guardrail stopped).
    "output_guardrail_tripped_client": _run(
        "support_agent",
        [_call("lookup_order", {"order_id": "A-1001"})],
        "paid with the card",
        refusal=True,
    ),
    # Guardrails AI: the guard calls the application's own model callable, whose answer is
    # the run's (whatever the validators said of it); the LLM-as-judge validator's own
    # model call is a check.
    "guarded_answer": _run(None, _REFUND_CALLS, "Refund R-77"),
    "guarded_answer_fails": _run(None, _REFUND_CALLS, "Refund R-77"),
    # The guard raised: the application got no answer. The run refused, for the guard; the
    # model's withheld answer is still its final text.
    "guarded_answer_raises": _run(None, _REFUND_CALLS, "Refund R-77", refusal=True),
    "guarded_answer_stream": _run(None, _REFUND_CALLS, "Refund R-77"),
    "llm_judge_validator": _run(None, _REFUND_CALLS, "Refund R-77"),
    "agent_as_tool": _run(
        "concierge",
        [
            _call("refund_desk", DESK_INPUT),
            _call("lookup_order", {"order_id": "A-1001"}, nested_in="refund_desk"),
        ],
        "eligible for a refund",
    ),
    # The output tool (final_result) is the answer, not a call of the run.
    "structured_output": _run(
        "weather_agent", [_call("get_weather", {"city": "Paris"})], "sunny, 21C"
    ),
    # One run across the handoff: the refund agent's issue_refund is verified by the triage
    # agent's lookup_order (a run per agent would page MISSING_VERIFICATION_STEP).
    "handoff": _run(
        "triage_agent",
        [
            _call("lookup_order", {"order_id": "A-1001"}),
            # "{}": not every exporter keeps it. The contrib instrumentation records the
            # request in no structured field: its handoff span stands for the call.
            _call("transfer_to_refund_agent", None, handoff=True),
            _call("issue_refund", REFUND_ARGS),
        ],
        "which you had verified",
    ),
    # Google ADK's AgentTool: the tool is named as the agent it runs (its one argument,
    # request, starts that agent's conversation), whose lookup_order is nested in it.
    "agent_tool": _run(
        "concierge",
        [
            _call("refund_desk_agent", DESK_REQUEST, agent="concierge"),
            _call(
                "lookup_order",
                {"order_id": "A-1001"},
                nested_in="refund_desk_agent",
                agent="refund_desk_agent",
            ),
        ],
        "eligible for a refund",
    ),
    # Google ADK's sub-agent transfer: one run across it, led by triage_agent, whose
    # lookup_order verifies refund_agent's issue_refund. transfer_to_agent is a tool ADK
    # runs (a span of its own), naming the agent in its agent_name argument.
    "transfer": _run(
        "triage_agent",
        [
            _call("lookup_order", {"order_id": "A-1001"}, agent="triage_agent"),
            _call(
                "transfer_to_agent",
                {"agent_name": "refund_agent"},
                handoff=True,
                agent="triage_agent",
            ),
            _call("issue_refund", REFUND_ARGS, agent="refund_agent"),
        ],
        "which you had verified",
    ),
    # A CrewAI crew: triage_agent's task looks the order up, refund_agent's task (given the
    # first task's answer as context) refunds it. One run for the crew's kickoff, named by
    # the crew (each call by its task's agent): lookup_order verifies issue_refund (a run per
    # task would page MISSING_VERIFICATION_STEP). The crew's answer is its last task's.
    "refund_crew": _run(_CREW, _REFUND_CALLS, "Refund R-77"),
    # A CrewAI crew in the hierarchical process: CrewAI's manager agent ("Crew Manager")
    # delegates the task to refund_agent, whose lookup_order and issue_refund run inside
    # the delegation, as an agent used as a tool: the delegation is the manager's call, the
    # worker's calls are the worker's, nested in it. One run, the crew's kickoff; its answer
    # is the manager's (the worker's "Refund R-77 ..." is the delegation's result).
    "crew_hierarchical": _run(
        _CREW,
        [
            _call(DELEGATE, DELEGATION_ARGS, agent="Crew Manager"),
            _call("lookup_order", {"order_id": "A-1001"}, nested_in=DELEGATE, agent="refund_agent"),
            _call("issue_refund", REFUND_ARGS, nested_in=DELEGATE, agent="refund_agent"),
        ],
        "Our refund agent issued",
    ),
}

#: Runs after the scripted one: an agent a guardrail ran is a run of its own, which checked
#: the first (every exporter: OpenLLMetry hangs it off the workflow root, the others under
#: their guardrail span).
_CHECKER = _run("guardrail_agent", [], '"is_flagged": false')
MORE_RUNS: dict[str, list[dict[str, Any]]] = {
    "refusal_output_guardrail": [_CHECKER],
    "refusal_input_guardrail": [_CHECKER],
}

_AGENTS_SDK = (
    "OpenAI Agents SDK 0.24.0 on the Responses API (non-streaming Runner.run), "
    "trace_include_sensitive_data=True. Tool spans carry NO call id (the SDK's function span "
    "has none): join the model's requested calls (call_id on the LLM span) to tool spans by "
    "(agent, tool name, k-th occurrence). "
)
_AGENTS_HANDOFF = (
    " Handoff: the SDK ends triage_agent's span and starts refund_agent's as its SIBLING "
    "under the workflow root (not nested); the model's transfer_to_refund_agent call has no "
    "tool span, its output is {'assistant': 'refund_agent'}. One run is expected, led by "
    "triage_agent, whose lookup_order verifies refund_agent's issue_refund. The handoff "
    "span: "
)
_OI_AGENTS = _AGENTS_SDK + (
    "openinference-instrumentation-openai-agents 2.6.0. Tree: 'Agent workflow' (AGENT, root) > "
    "'Agent workflow' (CHAIN, the SDK task span) > '<agent>' (AGENT, agent.name, graph.node.id) "
    "> 'turn' (CHAIN) > 'response' (LLM) and '<tool>' (TOOL). All spans INTERNAL. Tool span: "
    "tool.name, input.value = arguments JSON string, output.value, tool.description, "
    "tool.parameters. LLM span: llm.output_messages.0.message.tool_calls.N.tool_call.{id, "
    "function.name, function.arguments}; llm.finish_reason is 'stop' even when the response "
    "only requests tools. Tool results in later llm.input_messages.*.message.content are the "
    "Python repr of the return value (single quotes), not JSON. Root and agent spans carry no "
    "output.value: the final text is only in the last LLM span's llm.output_messages."
)
_OLL_AGENTS = _AGENTS_SDK + (
    "opentelemetry-instrumentation-openai-agents 0.62.4 (OpenLLMetry). Tree: 'Agent Workflow' "
    "(traceloop.span.kind=workflow) > '<agent>.agent' (gen_ai.operation.name=invoke_agent, "
    "gen_ai.agent.name) > 'openai.response' (CLIENT) and '<tool>.tool' (INTERNAL). No turn or "
    "task spans. Tool span: gen_ai.tool.name, gen_ai.tool.type=function, "
    "gen_ai.operation.name=execute_tool, gen_ai.tool.call.arguments, gen_ai.tool.call.result. "
    "LLM span: gen_ai.output.messages parts JSON with tool_call parts {name, id=call_id, "
    "arguments as an object}, gen_ai.response.finish_reasons ['tool_call'] or ['stop']. "
    "SURPRISE: in later gen_ai.input.messages the same call's tool_call part has id = the "
    "Responses item id ('fc_...') while its tool_call_response part has id = call_id "
    "('call_...'), so ids do not join across the history; tool_call_response.response is the "
    "Python repr of the return value."
)
_CONTRIB_AGENTS = _AGENTS_SDK + (
    "opentelemetry-instrumentation-openai-agents-v2 0.1.0 with "
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_and_event (no span events result). "
    "Tree: 'Agent workflow' (SERVER, gen_ai.operation.name=invoke_agent) > 'unknown' (the SDK "
    "task span: 0.1.0 predates task/turn spans, gen_ai.operation.name='unknown') > "
    "'invoke_agent <agent>' (CLIENT) > 'unknown' (turn) > 'chat <model>' (CLIENT) and "
    "'execute_tool <tool>' (INTERNAL: gen_ai.tool.name, gen_ai.tool.type=function, "
    "gen_ai.tool.call.arguments, gen_ai.tool.call.result; no gen_ai.tool.call.id). SURPRISES: "
    "gen_ai.agent.name on chat/tool/unknown spans is the instrumentor default 'OpenAI Agent' "
    "(gen_ai.agent.id='agent'); the real name is only on 'invoke_agent <agent>'. "
    "server.address='api.openai.com':443 although the client used 127.0.0.1. Chat spans' "
    "gen_ai.output.messages hold requested calls as a TEXT part containing the Python repr "
    "'ResponseFunctionToolCall(arguments=..., call_id=..., name=...)' (no tool_call parts), and "
    "later chat spans' gen_ai.input.messages hold only the user message. Final text: "
    "gen_ai.output.messages of 'invoke_agent <agent>'."
)
_LOGFIRE_AGENTS = _AGENTS_SDK + (
    "logfire 5.4.0, logfire.instrument_openai_agents() with send_to_logfire=False and the "
    "capture's exporter as an additional span processor. Span names are the message "
    "TEMPLATES ('Function: {name}', 'Agent run: {name!r}', 'Responses API with "
    "{gen_ai.request.model!r}', 'Turn {turn} for agent <agent>', 'Task: Agent workflow', "
    "'OpenAI Agents trace: {name}'), logfire.msg holds them filled in, each template field "
    "is an attribute. Tool span: name, input (arguments JSON), output, mcp_data; no call id, "
    "no GenAI keys. Agent span: name, handoffs, tools, output_type. LLM span: "
    "gen_ai.operation.name=chat, gen_ai.response.finish_reasons, response (the whole "
    "Responses API response JSON), raw_input, and 'events': a JSON array of GenAI events, the "
    "conversation so far followed by this call's output (the trailing assistant events, "
    "tool_calls [{id=call_id, type, function{name, arguments}}]). All spans INTERNAL, no "
    "span events."
)
_PYDANTIC = (
    "pydantic-ai-slim 2.68.0, OpenAIChatModel (Chat Completions, non-streaming), instrumented "
    "with Agent.instrument_all(InstrumentationSettings(...)) (Agent(instrument=...) no longer "
    "exists in 2.x). Call ids are the model's ids and are on every tool span "
    "(gen_ai.tool.call.id). Tool spans are direct children of the agent span (no 'running "
    "tools' wrapper); successful spans have status UNSET. tool_call parts in "
    "gen_ai.output.messages / pydantic_ai.all_messages carry 'arguments' as the model's JSON "
    "STRING, not an object; tool spans carry compact JSON. Final text: agent span "
    "final_result. "
)
_PYDANTIC_V5 = _PYDANTIC + (
    "Default format (version 5): 'invoke_agent <agent>' > 'chat gpt-4o-mini' (CLIENT) and "
    "'execute_tool <tool>' (gen_ai.operation.name=execute_tool, gen_ai.tool.name, "
    "gen_ai.tool.call.id, gen_ai.tool.call.arguments, gen_ai.tool.call.result, "
    "gen_ai.agent.name, gen_ai.agent.call.id, gen_ai.conversation.id, logfire.msg)."
)
_PYDANTIC_V2 = _PYDANTIC + (
    "version=2 (deprecated, warns): 'agent run' > 'chat gpt-4o-mini' and 'running tool' with "
    "tool_arguments / tool_response instead of gen_ai.tool.call.arguments / .result. "
    "SURPRISE vs CONVENTIONS: in 2.68 the v2 spans DO carry gen_ai.operation.name "
    "(invoke_agent / execute_tool) and gen_ai.agent.name, and there is no 'running tools' "
    "wrapper."
)
_STRANDS = (
    "strands-agents 1.62.0 with strands.models.openai.OpenAIModel (always streams; Chat "
    "Completions). NOTE: strands-agents[openai] pins openai<3; captured with openai 3.57.0 "
    "(installed without the extra), which worked. Tree: 'invoke_agent <agent>' (INTERNAL) > "
    "'execute_event_loop_cycle' (event_loop.cycle_id / parent_cycle_id) > 'chat' (INTERNAL, "
    "not CLIENT; no model in the name) and 'execute_tool <tool>' (gen_ai.tool.name, "
    "gen_ai.tool.call.id = the model's call id, gen_ai.tool.status success|error). "
)
_STRANDS_DEFAULT = _STRANDS + (
    "Default conventions (gen_ai.system=strands-agents): arguments are ONLY in span event "
    "'gen_ai.tool.message' (content = arguments JSON, id = call id) and results only in event "
    "'gen_ai.choice' (message = content blocks JSON); requested calls are in the chat span's "
    "'gen_ai.choice' event (message = [{toolUse: {toolUseId, name, input}}]). Final text: "
    "'gen_ai.choice' event on the invoke_agent span (with a trailing newline)."
)
_STRANDS_LATEST = _STRANDS + (
    "OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental: gen_ai.provider.name, tool spans "
    "also carry gen_ai.tool.call.arguments / gen_ai.tool.call.result attributes; messages are "
    "in 'gen_ai.client.inference.operation.details' span events (gen_ai.input.messages / "
    "gen_ai.output.messages parts JSON, tool_call_response uses 'response')."
)
_CLIENT = (
    "Hand-rolled Chat Completions tool loop (no agent framework) under one application span "
    "'support_agent' with no GenAI attributes, so no agent name is recoverable (agent: null). "
    "There are NO tool spans: every call exists only as a tool call in an LLM span's output; "
    "parallel means 'requested together in one response' (no times to overlap). "
)
_CLIENT_NOTES = {
    "openinference": _CLIENT
    + (
        "openinference-instrumentation-openai 0.1.66: spans 'ChatCompletion', kind INTERNAL "
        "(not CLIENT), flattened llm.output_messages.0.message.tool_calls.N.tool_call.{id, "
        "function.name, function.arguments}, llm.finish_reason."
    ),
    "openllmetry": _CLIENT
    + (
        "opentelemetry-instrumentation-openai 0.62.4: spans 'openai.chat' (CLIENT) in the NEW "
        "format (gen_ai.input.messages / gen_ai.output.messages parts JSON, arguments as an "
        "object), not the legacy flattened gen_ai.completion.N.tool_calls.M.*; "
        "gen_ai.response.finish_reasons normalised to 'tool_call'."
    ),
    "logfire": _CLIENT
    + (
        "logfire 5.4.0 logfire.instrument_openai() (send_to_logfire=False, the capture's "
        "exporter as an additional span processor; the application span comes from Logfire's "
        "tracer provider): spans 'Chat Completion with {request_data[model]!r}' (the message "
        "template; CLIENT, scope 'logfire.openai') in plain GenAI form: gen_ai.operation.name "
        "chat, gen_ai.input.messages / gen_ai.output.messages parts JSON with tool_call parts "
        "(arguments as an object), gen_ai.response.finish_reasons the raw 'tool_calls'."
    ),
    "otel_contrib": _CLIENT
    + (
        "opentelemetry-instrumentation-openai-v2 2.4b0 with "
        "OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental and "
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only: spans 'chat gpt-4o-mini' "
        "(CLIENT) whose instrumentation SCOPE is 'opentelemetry.util.genai.handler', not the "
        "instrumentation's name; finish reasons are the raw 'tool_calls'."
    ),
}

_LANGGRAPH = (
    "LangChain 1.5.2 create_agent (LangGraph 1.2.24) with langchain-openai 1.7.4 ChatOpenAI on "
    "Chat Completions; ToolErrorMiddleware sends a tool's exception to the model. The graph "
    "runs each requested tool call in a 'tools' node of its own: parallel calls are siblings "
    "of different parents, and the synchronous tools ran one after the other, so only the "
    "model's one response requesting both says they are parallel. "
)
_LANGGRAPH_NOTES = {
    "openinference": _LANGGRAPH
    + (
        "openinference-instrumentation-langchain 0.1.80: the agent's own span is kind CHAIN "
        "for the outermost agent and AGENT for one run inside a tool; every span of a graph "
        "carries metadata JSON with lc_agent_name, the graph's span is named after it. TOOL "
        "spans have no call id and input.value is the tool's input: 'A-1001' for the "
        "single-argument lookup_order, JSON for the others; the requested arguments are in "
        "the ChatOpenAI LLM span's llm.output_messages.*.tool_calls. The agent span's "
        'output.value is the whole graph state {"messages": [...]}.'
    ),
    "openllmetry": _LANGGRAPH
    + (
        "opentelemetry-instrumentation-langchain 0.62.4: 'invoke_agent {name}' root (GenAI "
        "keys), '{name}.workflow', 'execute_task {node}' spans, 'ChatOpenAI.chat' model spans "
        "and 'execute_tool {tool}' spans with gen_ai.tool.call.arguments as JSON."
    ),
    "langsmith": _LANGGRAPH
    + (
        "langsmith 0.15.1 (langsmith[otel]) with LANGSMITH_TRACING=true and "
        "LANGSMITH_TRACING_MODE=otel: LangSmith's tracer on the global tracer provider, "
        "instrumentation scope 'langsmith', every span INTERNAL and named after its run, "
        "status OK but a failed tool's: ERROR with an 'exception' event. "
        "langsmith.span.kind is the run type (chain, llm, tool) and "
        "gen_ai.operation.name its mapping (chain, chat, execute_tool); "
        "langsmith.metadata.* flattens the run metadata (lc_agent_name on every span of a "
        "graph, the graph's own span named after it). gen_ai.prompt / gen_ai.completion are "
        "the run's inputs / outputs JSON: a tool's arguments object and its ToolMessage, a "
        "model's messages and LangChain LLMResult (generations[][].message.kwargs.tool_calls "
        "[{name, args, id}], generation_info.finish_reason), a graph's state. Tool spans carry "
        "gen_ai.tool.name and gen_ai.tool.call.id (the model's id) under 'tools' and "
        "'ToolErrorMiddleware.awrap_tool_call' chain spans."
    ),
}

_VERCEL = (
    "Vercel AI SDK (ai 7.0.173, @ai-sdk/openai 4.0.118 Chat Completions, @ai-sdk/otel 1.0.173) "
    "on Node.js 20, generateText with stopWhen stepCountIs(5) and telemetry functionId = the "
    "agent name; the SDK's JsonTraceSerializer wrote the request. "
)
_VERCEL_NOTES = {
    "otel": _VERCEL
    + (
        "OpenTelemetry integration (GenAI semconv): root 'invoke_agent {functionId}' (INTERNAL, "
        "gen_ai.agent.name); per step an 'agent_step' span 'step N' (an operation name the "
        "spec does not define) holding 'chat gpt-4o' (CLIENT, gen_ai.output.messages parts, "
        "finish reasons 'tool-calls'/'stop' in the SDK's own spelling) and the step's "
        "'execute_tool {name}' spans (gen_ai.tool.call.arguments/result as JSON strings). The "
        "root's gen_ai.output.messages repeats every tool_call part of the run: not requests."
    ),
    "legacy": _VERCEL
    + (
        "LegacyOpenTelemetry (the ai.* attributes of AI SDK 3.3-6, no gen_ai.operation.name): "
        "root 'ai.generateText' (ai.telemetry.functionId, ai.response.text), per model call "
        "'ai.generateText.doGenerate' (ai.response.toolCalls = [{toolCallId, toolName, input}], "
        "ai.response.finishReason), and 'ai.toolCall' spans (ai.toolCall.name/id/args/result) "
        "nested under the model call that asked for them. Every span is INTERNAL."
    ),
}

_GOOGLE_GENAI = (
    "google-genai 2.34.0 automatic function calling: one Models.generate_content call runs "
    "the whole loop, calling the Python functions itself, under an application span "
    "'support_agent' with no GenAI attributes (agent: null). "
    "opentelemetry-instrumentation-google-genai with gen_ai_latest_experimental and span_only: "
    "ONE 'generate_content gemini-2.5-flash' span (CLIENT) for the whole loop, whose "
    "gen_ai.output.messages hold only the final answer (the requested calls are in no span), "
    "and 'execute_tool {fn}' children of it (gen_ai.tool.name, gen_ai.tool.description; no "
    "call id). The model's parallel calls run one after the other and nothing records that "
    "they were requested together, so they cannot read as parallel. A raising tool ends its "
    "span ERROR with error.type (the model is sent the error). Refusal: Gemini's safety "
    "block, finish reason 'safety', no text. "
)
_GOOGLE_GENAI_NOTES = {
    "otel_contrib": _GOOGLE_GENAI
    + (
        "1.3b0 (util-genai 1.3b0): gen_ai.tool.call.arguments is the call's JSON object, "
        "gen_ai.tool.call.result the result JSON."
    ),
    "otel_contrib_v1_2": _GOOGLE_GENAI
    + (
        "1.2b0 (util-genai 1.2b0), the last release flattening arguments: "
        "gen_ai.tool.call.arguments is a JSON object of 'code.function.parameters.<name>.type' "
        'and \'.value\' keys, e.g. {"code.function.parameters.order_id.type": "str", '
        '"code.function.parameters.order_id.value": "A-1001"}; 0.4b0 and earlier set those '
        "keys as span attributes (CONVENTIONS §4.10)."
    ),
}

_GOOGLE_ADK = (
    "google-adk 2.13.0 LlmAgents (Runner.run_async, InMemoryRunner, non-streaming) on its "
    "Gemini model (google-genai 2.34.0) with base_url at the fake Gemini API; the tools are "
    "the scripts' plain functions (FunctionTool). Gemini sends no call ids: ADK makes them "
    "(adk-<uuid>) and puts them on the tool spans. All spans INTERNAL, the model's finish "
    "reason 'stop' also when it only asks for tools, and 'safety' (no content) for the "
    "refusal. The tool spans are children of the agent span, siblings of the model spans "
    "(not children of the model call, as CONVENTIONS 4.4 had it). "
)
_GOOGLE_ADK_NOTES = {
    "native": _GOOGLE_ADK
    + (
        "ADK's own tracer (scope gcp.vertex.agent) in its default format, schema version 2 "
        "(otel_semconv_1_44), OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only "
        "(without it no arguments, results or messages reach any span). Tree: 'invoke_workflow "
        "<root agent>' (gen_ai.operation.name invoke_workflow, gen_ai.workflow.name) > "
        "'invoke_agent <agent>' > 'generate_content <model>' (gen_ai.output.messages with "
        "tool_call parts whose ids ADK synthesises as '<name>_<index>', NOT the tool spans' "
        "call ids) and 'execute_tool <tool>' (gen_ai.tool.call.id adk-<uuid>, "
        "gen_ai.tool.call.arguments / .result JSON strings, gen_ai.tool.type FunctionTool). "
        "No call_llm span and no gcp.vertex.agent.llm_response."
    ),
    "native_v1": _GOOGLE_ADK
    + (
        "ADK's own tracer with ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1, the legacy format ADK "
        "1.x wrote: 'invocation' (no attributes) > 'invoke_agent <agent>' > 'call_llm' "
        "(gen_ai.system gcp.vertex.agent, gcp.vertex.agent.llm_request / llm_response JSON) "
        "> 'generate_content <model>' (gen_ai.operation.name generate_content, NO output "
        "messages: a second model span inside each call_llm), and 'execute_tool <tool>' "
        "siblings of call_llm (gcp.vertex.agent.tool_call_args / tool_response, "
        "gen_ai.tool.call.id, llm_request and llm_response '{}'). On the refusal call_llm "
        "carries no llm_response at all, only gen_ai.response.finish_reasons ['safety']."
    ),
    "openinference": _GOOGLE_ADK
    + (
        "openinference-instrumentation-google-adk 1.0.5 (GoogleADKInstrumentor, which swaps "
        "ADK's tracers for its own, keeping ADK's only for invoke_agent). Tree: 'invocation "
        "[<app>]' (CHAIN, output.value = the last LlmResponse JSON) > 'invoke_workflow <agent>' "
        "(CHAIN) > 'agent_run [<agent>]' (AGENT, agent.name) > 'invoke_agent <agent>' (scope "
        "gcp.vertex.agent, which ends last) > 'execute_tool <tool>' (TOOL: tool.name, "
        "input.value = arguments JSON, output.value = the FunctionResponse JSON, tool.id = "
        "the call id). With ADK 2.x (no call_llm span) OpenInference writes each model call's "
        "attributes onto that invoke_agent span: ONE span, relabelled LLM "
        "(gen_ai.operation.name generate_content), holding the LAST call's output and input "
        "and stale llm.output_messages.0.message.tool_calls of an earlier call that no later "
        "one overwrote; the last call's history (input.value) holds every earlier model "
        "turn with the calls it asked for. The calls are the tool spans; the requests of the "
        "latest turn that asked for tools are read from the flattened keys when that history "
        "confirms them as one turn."
    ),
}

_GUARDRAILS = (
    "Guardrails AI on a hand-rolled Chat Completions tool loop under one application span "
    "'support_agent' (no GenAI attributes, so agent: null; no tool spans, the calls are the "
    "requests in the ChatCompletion spans' llm.output_messages, OpenInference's "
    "OpenAIInstrumentor). The loop's last call goes through a Guard with an llm_api callable "
    "that sends the loop's conversation (guarded_answer*), or the answer is checked after by "
    "guard.validate with a validator that calls the model itself (llm_judge_validator). "
)
_GUARDRAILS_NOTES = {
    "native": _GUARDRAILS
    + (
        "guardrails-ai 0.11.0's own tracing (scope 'guardrails-ai', on the global provider): "
        "'guard' > 'step' > 'call' > the client's 'ChatCompletion', each of the three with "
        "guardrails.version, type 'guardrails/guard[/step[/call]]', guard.name and "
        "openinference.span.kind GUARDRAIL ('call' also gets llm.input_messages / "
        "llm.output_messages, the input wrong: a default system message and an empty user "
        "one); '<validator>.validate' (GUARDRAIL, validator.name, on_fail_descriptor, no "
        "guardrails.version) under 'step', with the judge's ChatCompletion under it. The "
        "guard's spans are no guardrail's: the model call under them is the application's "
        "own. Validators run in an executor without the OpenTelemetry context unless "
        "GUARDRAILS_RUN_SYNC=true (set for the judge): else the judge's call starts a trace "
        "of its own."
    ),
    "openinference": _GUARDRAILS
    + (
        "openinference-instrumentation-guardrails 0.1.27 on guardrails-ai 0.5.0 (the newest "
        "it instruments): 'Runner.step' (GUARDRAIL, input.value only) > 'step' > 'call' > "
        "'ArbitraryCallable.__call__' (LLM, input.value only) > 'ChatCompletion'; guardrails' "
        "own 'step', 'call' and '<validator>.validate' (on_fail_descriptor, args, "
        "instance_id, input: the metadata, not the text) carry no kind, and "
        "'AsyncValidatorService.after_run_validator' holds validator_name, "
        "validator_on_fail and the outcome in output.value. No guard span, no guard name."
    ),
}

_CREWAI = (
    "crewai 1.15.30 (Crew.kickoff_async, which runs Crew.kickoff in a worker thread; "
    "Process.sequential, one task per agent, tasks named; crew_hierarchical: below) on its "
    "native OpenAI provider: the openai 2.54.0 client, Chat Completions, non-streaming, "
    "native function calling (tools in the request, tool results as 'tool' messages; no "
    "ReAct text, no LiteLLM). Each task's "
    "agent starts a conversation of its own (system: role, backstory, goal; user: 'Current "
    "Task: <description>', then 'This is the context you're working with:' and the earlier "
    "tasks' answers). Agent names are the roles. A tool's exception becomes the tool result "
    "'Error executing tool: <message>' and the model answers. CrewAI's telemetry, tracing and "
    "version check off (CREWAI_DISABLE_TELEMETRY, CREWAI_DISABLE_TRACKING, "
    "CREWAI_TRACING_ENABLED=false, CREWAI_DISABLE_VERSION_CHECK); OTEL_SDK_DISABLED unset (it "
    "would disable the capture's provider too). "
)
_CREWAI_NOTES = {
    "openinference": _CREWAI
    + (
        "openinference-instrumentation-crewai 1.1.21 alone (its quickstart's setup; it makes "
        "no LLM spans). Tree, all INTERNAL: '<crew name>.kickoff' (CHAIN, root: crew_key, "
        "crew_id, crew_inputs, crew_agents and crew_tasks JSON, input.value '{}', output.value "
        "= the CrewOutput JSON, raw = the last task's answer) > '<role>.<task name>."
        "_execute_core' (AGENT, one per TASK, the tasks as siblings under the crew: NO "
        "agent.name; graph.node.id = role, graph.node.parent_id = the previous agent's role "
        "(agents list order), task_key, task_id, task_name, crew_key, crew_id; input.value = "
        "the agent, context and tools as Python reprs; output.value = the TaskOutput JSON: "
        "raw = the task's answer, and messages = the task's whole conversation, with the "
        "model's tool_calls and their ids) > '<tool>.run' (TOOL: tool.name, input.value = "
        "arguments JSON, output.value = the return value as JSON, tool.description (CrewAI's "
        "'Tool Name: ... Tool Arguments: ...' text), tool.parameters, tool.description_updated, "
        "tool.cache_function, tool.result_as_answer, tool.current_usage_count; no call id). "
        "Without a task name the agent span is '<role>._execute_core'. Final text: the "
        "'raw' of the AGENT (TaskOutput) or CHAIN (CrewOutput) span's output.value JSON; the "
        "whole JSON, which also holds the conversation, is no answer."
    ),
    "openllmetry": _CREWAI
    + (
        "opentelemetry-instrumentation-crewai 0.62.4 with opentelemetry-instrumentation-openai "
        "0.62.4 on too (as Traceloop.init() would: the CrewAI one wraps crewai.llm.LLM.call, "
        "the LiteLLM route CrewAI 1.x does not take for OpenAI, so it makes no model span; "
        "it makes NO tool spans either). Tree: 'crewai.workflow' (INTERNAL, root: "
        "gen_ai.provider.name=crewai, gen_ai.operation.name=invoke_agent, NO "
        "traceloop.span.kind, crewai.crew.name, crewai.crew.tasks / .agents JSON, "
        "crewai.crew.result = the last task's answer) > '<task description>.task' (one per "
        "task: traceloop.span.kind=task, gen_ai.operation.name=invoke_agent, crewai.task.agent "
        "= role, traceloop.entity.output = the task's answer) > '<role>.agent' "
        "(traceloop.span.kind=agent, gen_ai.operation.name=invoke_agent, gen_ai.agent.name = "
        "role, gen_ai.agent.id, crewai.agent.*) > 'openai.chat' (CLIENT: gen_ai.input.messages "
        "/ gen_ai.output.messages parts JSON, tool_call parts {name, id = call id, arguments "
        "as an object}, gen_ai.response.finish_reasons ['tool_call'] or ['stop'], "
        "gen_ai.tool.definitions). The calls exist only as the model's requests; their results "
        "only in the next chat span's tool_call_response parts (Python repr). Three levels "
        "of invoke_agent spans per task: workflow, task and agent."
    ),
}

#: The MCP scenarios captured again on the releases of 2026-12-07 (requirements-mcp-v2.txt).
_MCP_V2 = (
    " Captured again with the latest releases of 2026-12-07 (requirements-mcp-v2.txt): "
    "mcp 2.1.1 (the newest strands-agents 1.62 allows), openai 3.63.0, the same "
    "instrumentation. The mcp 2.x client writes spans of its own (scope mcp-python-sdk, "
    "kind CLIENT, mcp.method.name and jsonrpc.request.id only): 'MCP send tools/list' under "
    "the SDK's listing span, 'MCP send tools/call <tool>' inside the SDK's function span "
    "(status unset, even when the server answers isError), and 'MCP send server/discover' "
    "at the connection, a trace of its own, left out of the fixture."
)

_BASE_NOTES: dict[tuple[str, str], str] = {
    ("openai_agents", "openinference"): _OI_AGENTS,
    ("openai_agents", "openllmetry"): _OLL_AGENTS,
    ("openai_agents", "otel_contrib"): _CONTRIB_AGENTS,
    ("openai_agents", "logfire"): _LOGFIRE_AGENTS,
    ("openai_agents", "openinference_mcp_v2"): _OI_AGENTS + _MCP_V2,
    ("openai_agents", "otel_contrib_mcp_v2"): _CONTRIB_AGENTS + _MCP_V2,
    ("pydantic_ai", "native_v5"): _PYDANTIC_V5,
    ("pydantic_ai", "native_v2"): _PYDANTIC_V2,
    ("strands", "native"): _STRANDS_DEFAULT,
    ("strands", "native_latest"): _STRANDS_LATEST,
    **{("openai_client", name): text for name, text in _CLIENT_NOTES.items()},
    **{("langgraph", name): text for name, text in _LANGGRAPH_NOTES.items()},
    **{("vercel_ai", name): text for name, text in _VERCEL_NOTES.items()},
    **{("google_genai", name): text for name, text in _GOOGLE_GENAI_NOTES.items()},
    **{("google_adk", name): text for name, text in _GOOGLE_ADK_NOTES.items()},
    **{("guardrails", name): text for name, text in _GUARDRAILS_NOTES.items()},
    **{("crewai", name): text for name, text in _CREWAI_NOTES.items()},
}

_AGENTS_TOOL_ERROR = (
    " Tool error: status ERROR, no exception event, no error.type; the status message is "
    "\"Error running tool (non-fatal): {'tool_name': 'charge_card', 'error': 'Tool execution "
    "failed. Error details are redacted.'}\" (SDK 0.24 redacts the exception text even with "
    "sensitive data on); the recorded result is 'An error occurred while running the tool. "
    "Please try again.'"
)
_AGENTS_REFUSAL = (
    " Refusal: SDK 0.24 raises ModelRefusalError (no run error handler), so the agent span "
    "ends with status ERROR 'Error in agent run: ...Model refused to produce output: ...'. "
)

_AGENTS_GUARDRAIL = (
    " Guardrail: support_agent refuses; a model_refusal run error handler makes the refusal "
    "text the final output (without one the SDK raises and output guardrails never run). "
    "The guardrail function runs guardrail_agent with Runner.run in the same trace "
    "(output_type GuardrailVerdict; the fake model answers it 0.3 s late, a slower model), "
    "so its model span ends after support_agent's refusing one: taken as the run's, it "
    "was the run's last output (refusal lost, the verdict JSON its final text). "
)
_AGENTS_GUARDRAIL_WHERE = {
    "output": "The output guardrail runs after the final output, under support_agent's span. ",
    "input": (
        "The input guardrail (run_in_parallel, the default) runs beside the first model "
        "call, under support_agent's turn span. "
    ),
}
_AGENTS_GUARDRAIL_SPANS = {
    "openinference": (
        "'<guardrail name>' (openinference.span.kind GUARDRAIL) > 'Agent workflow' (CHAIN) > "
        "'guardrail_agent' (AGENT) > turn > response."
    ),
    "openllmetry": (
        "SURPRISE: no guardrail span at all, and 'guardrail_agent.agent' hangs off the "
        "'Agent Workflow' root, a sibling of 'support_agent.agent' (as with as_tool())."
    ),
    "otel_contrib": (
        "'guardrail_check' (gen_ai.operation.name=guardrail_check, gen_ai.guardrail.name, "
        "gen_ai.guardrail.triggered) > 'unknown' > 'invoke_agent guardrail_agent' > 'unknown' "
        "> 'chat ...'. The refusal is also on 'invoke_agent support_agent' (the repr in its "
        "output messages), which ends OK here."
    ),
    "logfire": (
        "'Guardrail {name!r} {triggered=}' (name, triggered) > 'Task: Agent workflow' > "
        "'Agent run: {name!r}' (guardrail_agent) > turn > 'Responses API ...'."
    ),
}

_AGENTS_CLIENT_GUARDRAIL = (
    " Guardrail: support_agent refuses; a model_refusal run error handler makes the refusal "
    "text the final output. The output guardrail's function calls the model client itself "
    "(client.responses.create, no agent; the fake model answers it 0.3 s late), with the "
    "client instrumented beside the SDK as the same family does it. "
)
_AGENTS_CLIENT_GUARDRAIL_SPANS = {
    "openinference": (
        "OpenAIInstrumentor (openinference-instrumentation-openai 0.1.66) patches every "
        "client: 'output_safety' (GUARDRAIL) > 'Response' (LLM, the guardrail's call), and "
        "the agent's own model call twice, 'response' (the SDK's) > 'Response' (the client's)."
    ),
    "openllmetry": (
        "OpenAIInstrumentor (opentelemetry-instrumentation-openai 0.62.4) patches every "
        "client. SURPRISE: no guardrail span, so the guardrail's 'openai.response' (scope "
        "opentelemetry.instrumentation.openai.v1) hangs directly off 'support_agent.agent', "
        "like the agent's own calls ('openai.response' too, CLIENT). Only the shape tells it "
        "apart: the agent's call is recorded twice, the SDK's span (scope "
        "opentelemetry.instrumentation.openai_agents) with the client's directly inside, "
        "while the guardrail's is the client's alone, no model span above or below it. "
        "toolwatch reads such a call beside turns recorded twice as a check "
        "(_calls_beside_double_records): the refusal is the run's, the verdict no answer."
    ),
    "otel_contrib": (
        "opentelemetry-instrumentation-openai-v2 2.4b0 records Chat Completions only: the "
        "guardrail's Responses call leaves no span, 'guardrail_check' has no child."
    ),
    "logfire": (
        "logfire.instrument_openai(guard_client), that client alone: 'Guardrail {name!r} "
        "{triggered=}' > 'Responses API with {gen_ai.request.model!r}' (scope logfire.openai)."
    ),
}

_AGENTS_TOOL_OUTPUT_GUARDRAIL = (
    " tool_use_behavior='stop_on_first_tool': lookup_order's result is the run's final "
    "output; the output guardrail's function then calls the model client itself "
    "(guardrail_check), after the run's last model call, the client instrumented beside the "
    "SDK as the same family does it. "
)
_AGENTS_TOOL_OUTPUT_GUARDRAIL_SPANS = {
    "openinference": "'output_safety' (GUARDRAIL) > 'Response' (LLM).",
    "openllmetry": (
        "No guardrail span: the guardrail's 'openai.response' hangs off 'support_agent.agent'. "
        "The agent's own model call is two spans, the SDK's 'openai.response' (tool_call id "
        "'call_...') > the client's (id 'fc_...', the Responses item id): one request. The "
        "guardrail's, the client's alone beside it, is read as a check, as in "
        "*__refusal_output_guardrail_client: no final text."
    ),
    "otel_contrib": (
        "'guardrail_check' (gen_ai.guardrail.triggered false) has no child: openai-v2 records "
        "Chat Completions only. The chat span's output is the function call's Python repr as "
        "a text part, read as the run's final text."
    ),
    "logfire": "'Guardrail {name!r} {triggered=}' > 'Responses API with ...'.",
}
_AGENTS_BLOCKING_GUARDRAIL = (
    " A blocking input guardrail (run_in_parallel=False) calls the model client itself "
    "(guardrail_flag: is_flagged true) and trips before the agent's model is called: the SDK "
    "raises InputGuardrailTripwireTriggered, the turn span ends ERROR 'Guardrail tripwire "
    "triggered'. "
)
_AGENTS_BLOCKING_GUARDRAIL_SPANS = {
    "openinference": (
        "'input_safety' (GUARDRAIL, nothing else) > 'Response' (LLM, the verdict) under the "
        "ERROR turn span; no span says the guardrail tripped but the turn's status message "
        "(\"Guardrail tripwire triggered: {'guardrail': 'input_safety'}\"), which is read."
    ),
    "openllmetry": (
        "'Agent Workflow' > 'support_agent.agent' (status OK: the SDK sets the trip's error "
        "on the turn span, which OpenLLMetry does not write) > the client's 'openai.response' "
        "(scope opentelemetry.instrumentation.openai.v1, the guardrail's call, the verdict). "
        "SURPRISE: no guardrail span, and no span says the guardrail tripped. The guardrail's "
        "call hangs directly off 'support_agent.agent' as in "
        "*__refusal_output_guardrail_client, and here the agent's model was never called: no "
        "turn recorded twice (the SDK's span with the client's inside) to set it apart from, "
        "but no model span of the SDK's instrumentation (which records every turn, each with "
        "a status) under the agent either, so the client's span alone (no status) is the "
        "guardrail's check, not the agent's output (no final text); a check and no turn of "
        "the agent's after it: the run was stopped, read as refused ('guardrail check stopped "
        "the run before the agent's first turn')."
    ),
    "otel_contrib": (
        "'guardrail_check' (gen_ai.guardrail.name input_safety, gen_ai.guardrail.triggered "
        "true) under the ERROR turn span ('unknown'); no span for the guardrail's call."
    ),
    "logfire": (
        "'Guardrail {name!r} {triggered=}' (name input_safety, triggered true) > 'Responses "
        "API with ...' (the verdict), under the turn span (level error)."
    ),
}
_AGENTS_TRIPPED_OUTPUT_GUARDRAIL = (
    " The agent looks the order up and answers; an output guardrail that calls the model "
    "client itself (guardrail_flag: is_flagged true) trips on the answer: the SDK raises "
    "OutputGuardrailTripwireTriggered and the answer is withheld. "
)
_AGENTS_TRIPPED_OUTPUT_GUARDRAIL_SPANS = {
    "openinference": (
        "'output_safety' (GUARDRAIL, nothing else) > 'Response' (LLM, the verdict); the agent "
        'span ends ERROR with the status message "Guardrail tripwire triggered: '
        "{'guardrail': 'output_safety'}\", the only word of the trip."
    ),
    "openllmetry": (
        "No guardrail span: the guardrail's 'openai.response' (the client's alone) hangs off "
        "'support_agent.agent' beside the agent's turns, each recorded twice (the SDK's span "
        "with the client's inside), and is read as a check, as in "
        "*__refusal_output_guardrail_client: the withheld answer stays the final text. The "
        "agent span ends ERROR with the status message \"{'message': 'Guardrail tripwire "
        "triggered', 'data': {'guardrail': 'output_safety'}}\", which is read."
    ),
    "otel_contrib": (
        "'guardrail_check' (gen_ai.guardrail.name output_safety, gen_ai.guardrail.triggered "
        "true); 'invoke_agent support_agent' ends ERROR with the tripwire status message."
    ),
    "logfire": (
        "'Guardrail {name!r} {triggered=}' (name output_safety, triggered true) > 'Responses "
        "API with ...' (the verdict); the agent span ends ERROR without a message."
    ),
}
_AGENTS_STREAMED = (
    " Streamed instead: Runner.run_streamed, each model response read from the Responses "
    "API's server-sent events (text and function-call arguments in delta fragments), the events "
    "consumed to the end. "
)
_AGENTS_STREAMED_NOTES = {
    "refund_stream": "The spans are those of Runner.run.",
    "input_guardrail_blocking_stream": (
        "The blocking input guardrail (as *__input_guardrail_blocking_client) trips; on the "
        "streamed path the SDK sets the trip's error on the agent span, not the turn span "
        "(\"Guardrail tripwire triggered: {'guardrail': 'input_safety', 'type': "
        "'input_guardrail'}\"), so OpenLLMetry records it too (its repr of the SpanError), and "
        "no turn span is written. OpenLLMetry: the guardrail's own call hangs off the agent "
        "span; the agent's model never called (no turn recorded twice, and no model span of "
        "the SDK's instrumentation under the agent), the client's span alone is read as the "
        "guardrail's check, not its output (no final text). Logfire: the agent span is ERROR "
        "without a message; its guardrail span says triggered."
    ),
}
_AGENTS_MCP = (
    " MCP: the agent's tools come from an MCP server (tools/capture/mcp_server.py, FastMCP "
    "over stdio), connected inside the run's trace (the SDK's trace()); the SDK lists the "
    "server's tools before each turn. "
)
_AGENTS_MCP_ERROR = (
    " The server's charge_card raises: FastMCP answers the call isError with the text "
    "'Error executing tool charge_card: card declined ...'. The SDK hands that text to the "
    "model as the tool's output and ends the function span OK (it keeps no isError): "
)
_AGENTS_MCP_ERROR_SPANS = {
    "openinference_mcp_v2": (
        "no span says the call failed (the mcp client's 'MCP send tools/call charge_card' "
        "ends unset); the text is the tool span's output.value, as a text content item: "
        "FastMCP's wording of a failure of this very tool says it failed."
    ),
    "otel_contrib_mcp_v2": (
        "no span says the call failed (the mcp client's 'MCP send tools/call charge_card' "
        "ends unset); the text is gen_ai.tool.call.result, as a text content item: "
        "FastMCP's wording of a failure of this very tool says it failed."
    ),
    "openinference": (
        "no span says the call failed; the text is the tool span's output.value, as a text "
        "content item: FastMCP's wording of a failure of this very tool says it failed."
    ),
    "openllmetry": (
        "the MCP client's 'charge_card.tool' inside the SDK's says so (ERROR, error.type "
        "tool_error, entity output is_error true): the call failed."
    ),
    "otel_contrib": (
        "no span says the call failed; the text is gen_ai.tool.call.result, as a text "
        "content item: FastMCP's wording of a failure of this very tool says it failed."
    ),
    "logfire": (
        "no span says the call failed (the mcp client's 'MCP send tools/call charge_card' "
        "ends unset); the text is the function span's output, as a text content item cut "
        "to 'Error executing tool charge_card': FastMCP's wording of a failure of this very "
        "tool says it failed."
    ),
}
_AGENTS_MCP_SPANS = {
    "openinference": "'mcp_tools' (CHAIN, output.value the tool names) before each turn.",
    "openinference_mcp_v2": (
        "'mcp_tools' (CHAIN) before each turn, with the mcp client's 'MCP send tools/list' "
        "in it; each call's 'MCP send tools/call <tool>' inside the SDK's tool span: plain, "
        "each call read once."
    ),
    "otel_contrib_mcp_v2": (
        "'unknown' spans for the SDK's MCP listings, with the mcp client's 'MCP send "
        "tools/list' in them; each call's 'MCP send tools/call <tool>' inside the "
        "execute_tool span: plain, each call read once."
    ),
    "openllmetry": (
        "With OpenLLMetry's MCP client instrumentation on too (opentelemetry-instrumentation-"
        "mcp 0.62.4, as Traceloop.init() does): each tools/call is a second '<tool>.tool' span "
        "(traceloop.span.kind tool, entity input {tool_name, arguments}) inside the SDK's "
        "function span, read as one call; 'tools/list.mcp' spans; the connection's "
        "'initialize.mcp' is a trace of its own, left out of the fixture."
    ),
    "otel_contrib": "'unknown' spans (gen_ai.operation.name unknown) for the SDK's MCP listings.",
    "logfire": (
        "'MCP: list tools from server {server}' before each turn, and the mcp 2.x client's "
        "own spans ('MCP send tools/call lookup_order', kind CLIENT, mcp.method.name only; "
        "'MCP send server/discover' at the connection), no tool spans."
    ),
}
#: The MCP server traced too (OpenLLMetry's MCP instrumentation on both sides).
_AGENTS_MCP_TRACED = (
    " The server is traced as well, in a process of its own: the standalone fastmcp 2.12 "
    "under OpenLLMetry's McpInstrumentor (tools/capture/mcp_server.py with CAPTURE_MCP_SPANS, "
    "requirements-mcp-server.txt), service capture-mcp-server. The client's instrumentation "
    "writes the traceparent in each request's _meta and the server's joins that trace: per "
    "tools/call, 'mcp.server' (traceloop.span.kind server) holding the server's own "
    "'<tool>.tool' (entity input and output), and 'ResponseStreamWriter' (the response), "
    "all inside the SDK's function span beside the client's '<tool>.tool': three records "
    "of one call, read as one."
)
_AGENTS_MCP_TRACED_ERROR = (
    " The tool raises on the server: the server's 'charge_card.tool', its 'mcp.server' and "
    "'ResponseStreamWriter' end ERROR ('Error calling tool ...: card declined ...'), as the "
    "client's does: the call failed."
)
_GUARDRAILS_SCENARIOS = {
    "guarded_answer": " The validator passes.",
    "guarded_answer_fails": (
        " The validator fails with on_fail='noop': the answer passes through "
        "(validation_passed false on 'guard' natively)."
    ),
    "guarded_answer_raises": (
        " The validator fails with on_fail='exception': the guard raises ValidationError "
        "(guard and step spans ERROR with an exception event, exception.type "
        "guardrails.errors.ValidationError; status message 'ValidationError: Validation "
        "failed for field with errors: ...') and the application shows no answer: read as "
        "the run's refusal ('guardrail validation failed'), the model's answer its final text."
    ),
    "guarded_answer_stream": (
        " The answer is streamed through the guard (stream=True; the callable makes the "
        "request when called). Natively the guard's 'call' span has no guardrails.version "
        "(guardrails-ai writes its attributes only for a call that is no stream), only kind "
        "GUARDRAIL and llm.* input, beside a 'stream_guard_span' (GUARDRAIL) under 'step'; "
        "under OpenInference there is no Runner.step, and the validator runs once per chunk."
    ),
    "llm_judge_validator": (
        " The judge validator's own ChatCompletion is under '<validator>.validate': a check, "
        "not the run's output."
    ),
}

_SCENARIO_NOTES: dict[tuple[str, str, str], str] = {
    **{
        ("openai_agents", name, "tool_output_guardrail_client"): _AGENTS_TOOL_OUTPUT_GUARDRAIL
        + spans
        for name, spans in _AGENTS_TOOL_OUTPUT_GUARDRAIL_SPANS.items()
    },
    **{
        ("openai_agents", name, "input_guardrail_blocking_client"): _AGENTS_BLOCKING_GUARDRAIL
        + spans
        for name, spans in _AGENTS_BLOCKING_GUARDRAIL_SPANS.items()
    },
    **{
        ("openai_agents", name, "output_guardrail_tripped_client"): (
            _AGENTS_TRIPPED_OUTPUT_GUARDRAIL + spans
        )
        for name, spans in _AGENTS_TRIPPED_OUTPUT_GUARDRAIL_SPANS.items()
    },
    **{("guardrails", "*", scenario): text for scenario, text in _GUARDRAILS_SCENARIOS.items()},
    **{
        ("openai_agents", name, "refund_mcp"): _AGENTS_MCP + spans
        for name, spans in _AGENTS_MCP_SPANS.items()
    },
    ("openai_agents", "openllmetry", "refund_mcp_traced"): _AGENTS_MCP
    + _AGENTS_MCP_SPANS["openllmetry"]
    + _AGENTS_MCP_TRACED,
    ("openai_agents", "openllmetry", "tool_error_mcp_traced"): _AGENTS_MCP
    + _AGENTS_MCP_SPANS["openllmetry"]
    + _AGENTS_MCP_TRACED
    + _AGENTS_MCP_TRACED_ERROR,
    **{
        ("openai_agents", name, "tool_error_mcp"): _AGENTS_MCP
        + spans
        + _AGENTS_MCP_ERROR
        + _AGENTS_MCP_ERROR_SPANS[name]
        for name, spans in _AGENTS_MCP_SPANS.items()
    },
    **{
        ("openai_agents", "*", scenario): _AGENTS_STREAMED + text
        for scenario, text in _AGENTS_STREAMED_NOTES.items()
    },
    ("openai_client", "*", "refund_stream"): (
        " Streamed: stream=True with stream_options.include_usage, the loop joining the "
        "chunks (text deltas; each tool call's id and name first, its arguments in fragments)."
    ),
    ("vercel_ai", "*", "refund_stream"): (
        " Streamed instead: streamText, its textStream read to the end (Chat Completions "
        "chunks). The OpenTelemetry integration writes generateText's spans; the legacy one "
        "'ai.streamText' > 'ai.streamText.doStream' > 'ai.toolCall': a tool call is a child of "
        "the model call that asked for it, not its sibling as under generateText."
    ),
    ("langgraph", "*", "refund_stream"): (
        " Streamed instead: agent.astream(stream_mode='messages'), so ChatOpenAI calls Chat "
        "Completions with stream=True (its llm.invocation_parameters still say stream false, "
        "the model's setting); the spans are those of ainvoke."
    ),
    ("pydantic_ai", "*", "refund_stream"): (
        " Streamed instead: agent.run_stream, Chat Completions chunks (text and tool-call "
        "arguments in fragments), the output read with get_output(); the spans are those of "
        "agent.run."
    ),
    **{
        ("openai_agents", name, "refusal_output_guardrail_client"): _AGENTS_CLIENT_GUARDRAIL + spans
        for name, spans in _AGENTS_CLIENT_GUARDRAIL_SPANS.items()
    },
    **{
        ("openai_agents", name, f"refusal_{where}_guardrail"): _AGENTS_GUARDRAIL
        + _AGENTS_GUARDRAIL_WHERE[where]
        + spans
        for name, spans in _AGENTS_GUARDRAIL_SPANS.items()
        for where in ("output", "input")
    },
    ("openai_agents", "openinference", "tool_error"): _AGENTS_TOOL_ERROR,
    ("openai_agents", "openllmetry", "tool_error"): _AGENTS_TOOL_ERROR.replace(
        '"Error running tool (non-fatal): {',
        "a dict repr \"{'message': 'Error running tool (non-fatal)', 'data': {",
    ),
    ("openai_agents", "otel_contrib", "tool_error"): _AGENTS_TOOL_ERROR,
    ("openai_agents", "logfire", "tool_error"): (
        " Tool error: status ERROR, logfire.level_num=17, an 'error' JSON attribute "
        "{message: 'Error running tool (non-fatal)', data: {tool_name, error}} (the SDK "
        "redacts the exception); output is the SDK's 'An error occurred while running the "
        "tool. Please try again.'"
    ),
    ("openai_agents", "logfire", "refusal"): _AGENTS_REFUSAL
    + (
        "The LLM span's last event is {event.name: 'gen_ai.unknown', role: assistant, "
        "content: 'refusal\\n\\nSee JSON for details', data: {type: 'refusal', refusal: "
        "<text>}}; finish reasons ['stop']. The agent span's 'error' attribute repeats it."
    ),
    ("openai_agents", "logfire", "agent_as_tool"): (
        " Nesting is real: 'Function: {name}' (refund_desk) > 'Task: Agent workflow' > "
        "'Agent run: {name!r}' (refund_desk_agent) > turn > 'Function: {name}' (lookup_order)."
    ),
    ("openai_agents", "openinference", "refusal"): _AGENTS_REFUSAL
    + (
        "The refusal is mapped to message_content.type='text' with the refusal text and "
        'llm.finish_reason=\'stop\'; only the raw output.value JSON shows "type":"refusal".'
    ),
    ("openai_agents", "openllmetry", "refusal"): _AGENTS_REFUSAL
    + ("The LLM span has a {type:'refusal'} output part, but finish_reasons ['stop']."),
    ("openai_agents", "otel_contrib", "refusal"): _AGENTS_REFUSAL
    + (
        "The refusal survives only as the Python repr 'ResponseOutputRefusal(refusal=...)' in a "
        "text part of gen_ai.output.messages."
    ),
    ("openai_agents", "openinference", "agent_as_tool"): (
        " Nesting is real: TOOL 'refund_desk' > 'Agent workflow' (CHAIN, a second task span) > "
        "'refund_desk_agent' (AGENT) > turn > 'lookup_order'."
    ),
    ("openai_agents", "openllmetry", "agent_as_tool"): (
        " SURPRISE: nesting is LOST. 'refund_desk_agent.agent' is a child of the 'Agent "
        "Workflow' root, a sibling of 'concierge.agent', not a child of 'refund_desk.tool'; "
        "only time containment links them. A parent-based reconstruction finds two outermost "
        "runs; the script has one run with lookup_order nested in refund_desk."
    ),
    ("openai_agents", "otel_contrib", "agent_as_tool"): (
        " Nesting is real: 'execute_tool refund_desk' > 'unknown' > "
        "'invoke_agent refund_desk_agent' > 'unknown' > 'execute_tool lookup_order'."
    ),
    ("openai_agents", "openinference", "handoff"): _AGENTS_HANDOFF
    + (
        "'handoff to refund_agent' (TOOL, input.value = from, output.value = to) under "
        "triage_agent's turn; refund_agent's AGENT span carries graph.node.parent_id = "
        "triage_agent."
    ),
    ("openai_agents", "openllmetry", "handoff"): _AGENTS_HANDOFF
    + (
        "'triage_agent → unknown.handoff' (traceloop.span.kind=handoff, "
        "gen_ai.handoff.from_agent; the target is not known when the span starts) under "
        "triage_agent.agent."
    ),
    ("openai_agents", "otel_contrib", "handoff"): _AGENTS_HANDOFF
    + (
        "'agent_handoff OpenAI Agent' (gen_ai.operation.name=agent_handoff, "
        "gen_ai.handoff.from_agent/to_agent). The model's transfer_to_refund_agent request "
        "is in no structured field: gen_ai.output.messages holds only the Python repr "
        "'ResponseFunctionToolCall(...)' as a text part, so the handoff span stands for the "
        "call (transfer_to_refund_agent, as the other instrumentations show it)."
    ),
    ("openai_agents", "logfire", "handoff"): _AGENTS_HANDOFF
    + (
        "'Handoff: {from_agent} → {to_agent}' with from_agent and to_agent; each 'Agent run' "
        "span lists its handoffs."
    ),
    ("pydantic_ai", "*", "structured_output"): (
        " output_type=WeatherReport: the model answers by calling the output tool "
        "final_result, which pydantic-ai runs as no tool (no span). The last chat span's "
        "gen_ai.output.messages still holds that tool_call part; model_request_parameters "
        "names it among output_tools, and the agent span's final_result holds the answer."
    ),
    ("pydantic_ai", "*", "tool_error"): (
        " The tool raises ModelRetry (pydantic-ai's way to report a failure to the model): "
        "status ERROR, exception event pydantic_ai.exceptions.ToolRetryError, the error text in "
        "the result attribute, pydantic_ai.tool.retry.cause='model_retry', "
        "pydantic_ai.tool.retry.attempt / max_retries; the model then answers."
    ),
    ("pydantic_ai", "*", "tool_crash"): (
        " The tool raises a plain exception, which aborts the run: the tool span and the agent "
        "span both end ERROR with an exception event (CardDeclinedError), no result attribute, "
        "no second chat span, no final text. The fake model's script is tool_error's."
    ),
    ("pydantic_ai", "*", "refusal"): (
        " pydantic-ai raises ContentFilterError: the chat span has gen_ai.output.messages "
        "[{role: assistant, parts: [], finish_reason: content_filter}] and "
        "gen_ai.response.finish_reasons ['content_filter']; the refusal TEXT is in no attribute "
        "(only in the agent span's ERROR status message, which embeds the whole response JSON)."
    ),
    ("pydantic_ai", "*", "agent_as_tool"): (
        " Agent delegation: the nested agent's span is a child of the delegating tool span; "
        "each run has its own gen_ai.agent.call.id and gen_ai.conversation.id."
    ),
    ("strands", "*", "tool_error"): (
        " The raising tool becomes an error result: status ERROR with the exception message as "
        "description, an exception event, gen_ai.tool.status='error', result text "
        "'Error: CardDeclinedError - ...'; the model then answers."
    ),
    ("strands", "*", "refusal"): (
        " SURPRISE: the finish reason is Strands' stop reason 'content_filtered' (not "
        "'content_filter'), the refusal text is dropped (empty message), and the run returns "
        "normally (no error status)."
    ),
    ("strands", "*", "agent_as_tool"): (
        " Agents as tools: 'invoke_agent refund_desk_agent' is a child of "
        "'execute_tool refund_desk'."
    ),
    ("openai_client", "*", "tool_error"): (
        " The tool raised in the application loop, which sent 'Error: card declined ...' as "
        "the tool message. No span carries any error evidence, so status can only be 'ok' "
        "(the script's truth is a failed call)."
    ),
    ("openai_client", "openinference", "refusal"): (
        " Refusal: llm.finish_reason='content_filter'; the refusal text is only in the raw "
        "output.value JSON."
    ),
    ("openai_client", "openllmetry", "refusal"): (
        " Refusal: a {type:'refusal'} part and finish_reason 'content_filter'."
    ),
    ("openai_client", "logfire", "refusal"): (
        " Refusal: the Chat 'refusal' field becomes a TEXT part holding the refusal message, "
        "finish reason 'content_filter': the run has that text as its answer."
    ),
    ("openai_client", "otel_contrib", "refusal"): (
        " Refusal: parts [] and finish_reason 'content_filter'; the text is dropped."
    ),
    ("langgraph", "*", "refusal"): (
        " Refusal: the Chat 'refusal' field is kept in the AI message's additional_kwargs, "
        "its content is empty; finish reason 'content_filter'."
    ),
    ("google_adk", "*", "tool_error"): (
        " The agent's on_tool_error_callback returns {'error': '<type>: <message>'}, the "
        "tool's result, which the model is sent; the tool span still ends ERROR (status "
        "message and error.type 'TOOL_ERROR', no exception event) and the model answers."
    ),
    ("google_adk", "*", "tool_crash"): (
        " No on_tool_error_callback: the tool's exception ends the run (Runner.run_async "
        "raises it). The tool span ends ERROR (error.type CardDeclinedError, exception "
        "events) with gen_ai.tool.call.id '<not specified>' (or no id); the agent and "
        "workflow spans end ERROR too; no second model call, no final text. The fake model's "
        "script is tool_error's."
    ),
    ("google_adk", "*", "refusal"): (
        " Refusal: Gemini's safety block, finish reason 'safety' and no content; ADK ends the "
        "run normally (the last event has no text)."
    ),
    ("google_adk", "*", "parallel"): (
        " Both calls are asked for in one response; ADK runs them one after the other (sync "
        "functions) and adds 'execute_tool (merged)' AFTER them, a sibling, not their parent "
        "(gen_ai.tool.name '(merged tools)', its call id an event id)."
    ),
    ("google_adk", "openinference", "parallel"): (
        " OpenInference's one model span holds the last call's output (text) in output.value, "
        "and, in its flattened llm.output_messages.0.message.tool_calls.0 and .1, both calls "
        "of the one response that asked for them, as does the last call's history "
        "(input.value, llm.input_messages.2): they read as asked for together."
    ),
    ("google_adk", "*", "agent_tool"): (
        " AgentTool(refund_desk_agent): a tool named as the agent, declaring one argument, "
        "request (its text starts the nested agent's session). 'execute_tool "
        "refund_desk_agent' holds the nested agent's spans: ADK runs it with a Runner of its "
        "own, so it gets a nested workflow/invocation span too."
    ),
    ("google_adk", "*", "transfer"): (
        " triage_agent (lookup_order, sub_agents=[refund_agent]) calls ADK's transfer_to_agent "
        "({'agent_name': 'refund_agent'}), a tool span of its own (gen_ai.tool.type "
        "TransferToAgentTool, result null); refund_agent's agent span starts after "
        "triage_agent's ends, its SIBLING under the workflow (or invocation) span, and is "
        "sent triage_agent's turns as quoted user text ('For context: ... [triage_agent] "
        "called tool ...'), not as function calls. Expected as ONE run, led by triage_agent, "
        "the transfer a handoff."
    ),
    ("crewai", "*", "refund_crew"): (
        " Crew of two: triage_agent (lookup_order) runs the first task, refund_agent "
        "(issue_refund) the second, whose user message carries the first task's answer as "
        "context. Expected as ONE run, led by triage_agent: the crew's kickoff is the unit of "
        "work, and the second task acts on what the first verified."
    ),
    ("crewai", "openinference", "refund_crew"): (
        " The two AGENT spans are siblings under the CHAIN kickoff span; the second's "
        "graph.node.parent_id names triage_agent."
    ),
    ("crewai", "*", "crew_hierarchical"): (
        " Hierarchical process (manager_llm): CrewAI makes its manager agent (role 'Crew "
        "Manager', its only tools 'Delegate work to coworker' and 'Ask question to coworker', "
        "delegate_work_to_coworker and ask_question_to_coworker to the model) and runs the "
        "task, which names no agent, with it. The delegation (arguments task, context, "
        "coworker = the role) runs refund_agent's Agent.execute_task on a task of that "
        "description, a conversation of its own; its answer is the delegation's result and "
        "the manager answers after it. Expected as ONE run, named by the crew: the delegation "
        "is the manager's call, the coworker's lookup_order and issue_refund are refund_agent's "
        "and nested in it (an agent used as a tool, which neither instrumentation writes as "
        "one); the crew's answer is the manager's."
    ),
    ("crewai", "openinference", "crew_hierarchical"): (
        " Tree: kickoff (CHAIN) > 'Crew Manager.crew_hierarchical._execute_core' (AGENT, "
        "graph.node.id 'Crew Manager') > 'Delegate work to coworker.run' (TOOL: tool.name "
        "'Delegate work to coworker', input.value the arguments JSON, output.value the "
        "coworker's answer as text/plain) > 'lookup_order.run', 'issue_refund.run'. NO span for "
        "refund_agent: OpenInference wraps Task._execute_core, which the delegation bypasses "
        "(it calls Agent.execute_task), so only the delegation's coworker argument names the "
        "agent of the two calls below it. The delegation's name is CrewAI's tool name (no "
        "model span records the model's delegate_work_to_coworker)."
    ),
    ("crewai", "openllmetry", "crew_hierarchical"): (
        " Tree: crewai.workflow > '<description>.task' > 'Crew Manager.agent' > [openai.chat "
        "(the delegate_work_to_coworker tool_call, id = call id), 'refund_agent.agent' > three "
        "openai.chat, openai.chat (the manager's answer; the delegation's result in its "
        "tool_call_response)]. The coworker's agent span hangs right under the manager's, "
        "between the model's request and its next call: no span stands for the delegation, "
        "which exists only as the manager's model's request; the coworker's calls are nested "
        "in it by time and by the role its coworker argument names. crewai.agent.tools on "
        "the manager's span lists the two delegation tools."
    ),
    ("crewai", "openinference", "tool_error"): (
        " Tool error: the TOOL span ends ERROR with the exception's message as description and "
        "an exception event (exception.type tools.capture.scripts.CardDeclinedError); no "
        "output.value. The AGENT and CHAIN spans end OK."
    ),
    ("crewai", "openllmetry", "tool_error"): (
        " Tool error: no tool span, so no span says the call failed; only the next chat "
        "span's tool_call_response text 'Error executing tool: card declined ...' does. "
        "Status therefore 'ok'."
    ),
    ("vercel_ai", "*", "tool_error"): (
        " Tool error: status ERROR (message 'card declined for order A-1001 (25.00 USD)') and "
        "an 'exception' event, exception.type 'CardDeclinedError'."
    ),
    ("vercel_ai", "*", "refusal"): (
        " Refusal: the SDK turns the Chat 'refusal' field into the answer's text, so the run "
        "has a final text (the refusal message); finish reason 'content-filter'."
    ),
}

#: Where what the spans show differs from the script's neutral expectation: the refusal
#: message is the answer's text (framework, instrumentation or "*", scenario).
_FINAL_TEXT: dict[tuple[str, str, str], str] = {
    ("vercel_ai", "*", "refusal"): "can't help with that request",
    ("openai_client", "logfire", "refusal"): "can't help with that request",
    ("openai_agents", "otel_contrib", "tool_output_guardrail_client"): "ResponseFunctionToolCall",
}


#: Where the spans do not show a refusal the run made (the notes say why): the final text
#: the run is read with instead.
_REFUSAL_UNSEEN: dict[tuple[str, str, str], str | None] = {}


#: Where the spans name a call by the framework's tool, not by what the model asked for
#: (the notes say why): script name -> recorded name, in ``tool`` and ``nested_in``.
_TOOL_NAMES: dict[tuple[str, str, str], dict[str, str]] = {
    ("crewai", "openinference", "crew_hierarchical"): {DELEGATE: "delegate work to coworker"},
}


#: Where no span says that a call failed (the notes say why): its status is "ok".
_FAILURE_UNSEEN: frozenset[tuple[str, str, str]] = frozenset(
    {
        ("crewai", "openllmetry", "tool_error"),
    }
)


def expected_for(framework: str, instrumentation: str, scenario: str) -> dict[str, Any]:
    """The expected reconstruction of one fixture, as the ``.expected.json`` document."""
    run = {**SCRIPTED[scenario], "calls": [dict(c) for c in SCRIPTED[scenario]["calls"]]}
    if framework in ("openai_client", "guardrails"):
        run["agent"] = None
        for call in run["calls"]:
            call["status"] = "ok"
    if framework == "crewai":
        run["agent"] = _CREW
    if framework == "google_genai":
        run["agent"] = None
        for call in run["calls"]:
            call["parallel"] = False  # run one after the other, requested in no span
    for key in ((framework, instrumentation, scenario), (framework, "*", scenario)):
        if key in _FINAL_TEXT:
            run["final_text_contains"] = _FINAL_TEXT[key]
    key = (framework, instrumentation, scenario)
    names = _TOOL_NAMES.get(key, {})
    for call in run["calls"]:
        call["tool"] = names.get(call["tool"], call["tool"])
        call["nested_in"] = names.get(call["nested_in"], call["nested_in"])
    if key in _FAILURE_UNSEEN:
        for call in run["calls"]:
            call["status"] = "ok"
    if key in _REFUSAL_UNSEEN:
        run["refusal"], run["final_text_contains"] = False, _REFUSAL_UNSEEN[key]
    notes = _BASE_NOTES[(framework, instrumentation)]
    notes += _SCENARIO_NOTES.get((framework, instrumentation, scenario), "")
    notes += _SCENARIO_NOTES.get((framework, "*", scenario), "")
    more = [{**extra, "calls": list(extra["calls"])} for extra in MORE_RUNS.get(scenario, ())]
    return {"runs": [run, *more], "notes": notes}
