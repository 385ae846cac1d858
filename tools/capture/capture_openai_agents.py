"""Capture the OpenAI Agents SDK (Responses API) under four OTel bridges.

``python -m tools.capture.capture_openai_agents INSTRUMENTATION [SCENARIO...]`` with INSTRUMENTATION
one of:

* ``openinference`` -- ``openinference-instrumentation-openai-agents`` (exclusive processor,
  its default, so the SDK's own exporter to OpenAI is replaced);
* ``openllmetry`` -- Traceloop's ``opentelemetry-instrumentation-openai-agents``, with
  ``replace_existing_processors=True`` for the same reason;
* ``otel_contrib`` -- ``opentelemetry-instrumentation-openai-agents-v2``. It *appends* its
  processor, so the SDK's default processors are cleared first. It installs into the same
  module path as Traceloop's package, so it lives in an overlay directory put first on
  ``sys.path`` by ``run.py`` (see README). Content capture is switched on with
  ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_and_event``;
* ``logfire`` -- Pydantic Logfire's ``logfire.instrument_openai_agents()``, in a virtualenv of
  its own (``requirements-logfire.txt``), configured not to send anywhere
  (``send_to_logfire=False``) with the capture's exporter as an extra span processor: its
  own tracer provider is what the application would run;
* ``openinference_mcp_v2``, ``otel_contrib_mcp_v2`` -- the first and the third again, on the
  MCP scenarios alone, in ``.venv-capture-mcp-v2`` (``requirements-mcp-v2.txt``: mcp 2.x,
  whose client writes spans of its own).

The SDK is told to include sensitive data (tool inputs/outputs) in its spans.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from agents import (
    Agent,
    GuardrailFunctionOutput,
    OpenAIResponsesModel,
    RunConfig,
    RunErrorHandlerInput,
    RunErrorHandlerResult,
    Runner,
    function_tool,
    input_guardrail,
    output_guardrail,
    set_trace_processors,
)
from agents import trace as agents_trace
from agents.exceptions import (
    InputGuardrailTripwireTriggered,
    ModelRefusalError,
    OutputGuardrailTripwireTriggered,
)
from agents.mcp import MCPServerStdio
from openai import AsyncOpenAI
from opentelemetry import trace
from pydantic import BaseModel

from tools.capture import mcp_server, scripts
from tools.capture.cli import CaptureRun, main
from tools.capture.fake_model import FakeModelServer
from tools.capture.otlp import Capture, configure_logfire

__all__ = ["SCENARIOS", "instrument"]

SCENARIOS = (
    "refund",
    "parallel",
    "tool_error",
    "refusal",
    "agent_as_tool",
    "handoff",
    "refusal_output_guardrail",
    "refusal_input_guardrail",
    "refusal_output_guardrail_client",
    "tool_output_guardrail_client",
    "input_guardrail_blocking_client",
    "output_guardrail_tripped_client",
    "refund_stream",
    "input_guardrail_blocking_stream",
    "refund_mcp",
    "tool_error_mcp",
    "refund_mcp_traced",
    "tool_error_mcp_traced",
)
#: The tools from an MCP server (a process of its own).
MCP_SCENARIOS = ("refund_mcp", "tool_error_mcp", "refund_mcp_traced", "tool_error_mcp_traced")
#: The MCP server traced too, as OpenLLMetry's MCP instrumentation traces a server: its
#: client half (under openllmetry alone, as Traceloop.init() sets it up) puts the trace in
#: each request's _meta, so the server's spans join the run's trace.
TRACED_MCP_SCENARIOS = ("refund_mcp_traced", "tool_error_mcp_traced")
#: The name of the root span of a run's trace, per instrumentation.
_RUN_ROOTS = {
    "openinference": "Agent workflow",
    "openllmetry": "Agent Workflow",
    "otel_contrib": "Agent workflow",
    "logfire": "OpenAI Agents trace: {name}",
}
#: Where the traced server runs (requirements-mcp-server.txt; see README).
MCP_SERVER_PYTHON = Path(__file__).resolve().parents[2] / ".venv-capture-mcp-server/bin/python"
#: The main agent refuses under an output guardrail that calls the model client itself, no
#: agent: the client's own instrumentation (enabled beside the SDK's, as Traceloop.init()
#: or logfire.instrument_openai() do) records that call under the guardrail span.
CLIENT_GUARDRAIL = "refusal_output_guardrail_client"
#: The run's final output is its first tool's result; an output guardrail that calls the
#: client checks it after the run's last model call.
TOOL_OUTPUT_GUARDRAIL = "tool_output_guardrail_client"
#: A blocking input guardrail (``run_in_parallel=False``) that calls the client and trips
#: before any model call of the agent.
BLOCKING_GUARDRAIL = "input_guardrail_blocking_client"
#: The same, the run streamed (``Runner.run_streamed``): the SDK runs input guardrails on
#: another path there, and attaches the trip's error to another span.
BLOCKING_GUARDRAIL_STREAM = "input_guardrail_blocking_stream"
#: An output guardrail that calls the client flags the agent's answer and trips: the SDK
#: raises and the answer is withheld.
TRIPPED_OUTPUT_GUARDRAIL = "output_guardrail_tripped_client"
#: Scenarios whose guardrail calls the model client itself, instrumented for them alone.
CLIENT_GUARDRAILS = (
    CLIENT_GUARDRAIL,
    TOOL_OUTPUT_GUARDRAIL,
    BLOCKING_GUARDRAIL,
    BLOCKING_GUARDRAIL_STREAM,
    TRIPPED_OUTPUT_GUARDRAIL,
)
#: Scenarios whose main agent refuses under a guardrail: the run has a ``model_refusal``
#: error handler, so the refusal becomes the final output and the run goes on (without one
#: the SDK raises and output guardrails never run).
GUARDRAILED = ("refusal_output_guardrail", "refusal_input_guardrail", CLIENT_GUARDRAIL)


def instrument(name: str, capture: Capture) -> CaptureRun:
    """Instrument the SDK with bridge ``name`` against the capture's tracer provider.

    The instrumentation modules are imported here, not at the top: OpenLLMetry's and the
    contrib package share one module path, and which one is importable depends on the
    overlay this process was started with.
    """
    trace.set_tracer_provider(capture.provider)
    if name == "openinference":
        from openinference.instrumentation.openai_agents import (  # noqa: PLC0415
            OpenAIAgentsInstrumentor,
        )

        OpenAIAgentsInstrumentor().instrument(tracer_provider=capture.provider)
    elif name == "openllmetry":
        from opentelemetry.instrumentation.openai_agents import (  # noqa: PLC0415
            OpenAIAgentsInstrumentor as TraceloopInstrumentor,
        )

        TraceloopInstrumentor(replace_existing_processors=True).instrument(
            tracer_provider=capture.provider
        )
    elif name == "logfire":
        _instrument_logfire(capture)
    else:
        _instrument_contrib(capture)
    return partial(run_scenario, instrumentation=name)


def _client_instrumented(name: str, capture: Capture, client: AsyncOpenAI) -> Callable[[], None]:
    """Instruments the OpenAI client as the family of ``name`` does beside its agents
    instrumentation; returns the undo. Logfire instruments ``client`` alone; the others
    patch every client of the process (the agent's model calls get a client span too)."""
    if name == "logfire":
        import logfire  # noqa: PLC0415

        logfire.instrument_openai(client)  # a client made for this scenario alone
        return lambda: None
    if name == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor  # noqa: PLC0415
    elif name == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor  # noqa: PLC0415
    else:
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor  # noqa: PLC0415
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=capture.provider)
    if name == "openllmetry":
        return partial(_uninstrument_openllmetry_openai, instrumentor)
    return instrumentor.uninstrument


#: The modules whose classes OpenLLMetry's openai instrumentation patches (0.62.4).
_OPENLLMETRY_OPENAI_MODULES = (
    "openai.resources.chat.completions",
    "openai.resources.completions",
    "openai.resources.embeddings",
    "openai.resources.images",
    "openai.resources.responses",
    "openai.resources.beta.assistants",
    "openai.resources.beta.chat.completions",
    "openai.resources.beta.threads.runs",
    "openai.resources.beta.threads.messages",
    "openai.resources.beta.realtime.realtime",
)
#: Where its wrapper functions live (not ``openai_agents``: the dot).
_OPENLLMETRY_OPENAI = "opentelemetry.instrumentation.openai."


def _uninstrument_openllmetry_openai(instrumentor: Any) -> None:
    """Turn OpenLLMetry's openai instrumentation off for the scenarios after this one.

    Works around two bugs of opentelemetry-instrumentation-openai 0.62.4:

    * its ``uninstrument()`` undoes nothing: it calls ``unwrap("openai.resources.responses",
      "AsyncResponses.create")`` and the like, and opentelemetry-instrumentation's
      ``unwrap`` looks the dotted ``"Class.method"`` up as ONE attribute of the module, finds
      none, and returns. Every patched method stays wrapped, so the later scenarios of the
      process got its client spans too. The wrappers are taken off here, by hand.
    * it keeps every Responses API response it traced in a module-level dict by response id
      (``v1.responses_wrappers.responses``), never emptied, and merges a new response with
      the same id into the cached one (its start time and trace context): a later
      scenario's call whose id an earlier scenario had used was joined to the earlier
      trace, and its span was missing from the fixture. The fake server's ids are unique
      in the process now too; the cache is emptied as well.
    """
    from opentelemetry.instrumentation.openai.v1 import responses_wrappers  # noqa: PLC0415

    instrumentor.uninstrument()  # its flag, so that the next scenario can instrument again
    removed = []
    for module_name in _OPENLLMETRY_OPENAI_MODULES:
        module = sys.modules.get(module_name)
        for owner in vars(module).values() if module is not None else ():
            if not isinstance(owner, type):  # the patched classes, as the module exports them
                continue
            for attribute, value in list(vars(owner).items()):
                wrapper = getattr(value, "_self_wrapper", None)
                if getattr(wrapper, "__module__", "").startswith(_OPENLLMETRY_OPENAI):
                    setattr(owner, attribute, value.__wrapped__)
                    removed.append(f"{owner.__name__}.{attribute}")
    if "AsyncResponses.create" not in removed:  # the one the scenarios call
        raise RuntimeError(f"OpenLLMetry's openai wrappers not found (took off {removed})")
    responses_wrappers.responses.clear()


def _instrument_logfire(capture: Capture) -> None:
    logfire = configure_logfire(capture, "capture-openai_agents")
    set_trace_processors([])  # drop the SDK's default exporter to api.openai.com
    logfire.instrument_openai_agents()


def _instrument_contrib(capture: Capture) -> None:
    # The contrib package is the barebones "v2" one (it has GenAISemanticProcessor); fail
    # loudly if the overlay is missing and Traceloop's same-named module was imported.
    import opentelemetry.instrumentation.openai_agents as module  # noqa: PLC0415

    if not hasattr(module, "GenAIProvider"):
        raise RuntimeError("otel_contrib: the -v2 overlay is not first on sys.path")
    os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_and_event")
    set_trace_processors([])  # drop the SDK's default exporter to api.openai.com
    module.OpenAIAgentsInstrumentor().instrument(tracer_provider=capture.provider)


async def run_scenario(
    capture: Capture, server: FakeModelServer, scenario: str, *, instrumentation: str
) -> None:
    """Run ``scenario`` once with ``Runner.run`` against the fake Responses endpoint."""
    client = AsyncOpenAI(base_url=server.base_url, api_key="sk-fake", max_retries=0, timeout=10)
    guard = AsyncOpenAI(base_url=server.base_url, api_key="sk-fake", max_retries=0, timeout=10)
    config = RunConfig(trace_include_sensitive_data=True, tracing_disabled=False)
    agent = _build_agent(scenario, client, config, guard)
    handlers: Any = {"model_refusal": _refusal_as_output} if scenario in GUARDRAILED else None
    undo = None
    if scenario in CLIENT_GUARDRAILS:
        undo = _client_instrumented(instrumentation, capture, guard)
    prompt = scripts.prompt_for(scenario)
    if scenario in MCP_SCENARIOS:
        # The tools from an MCP server (a process of its own), connected for this request
        # inside the run's trace (the SDK's trace(), which Runner.run then joins), so that
        # an MCP client's own spans of the connection are in it too.
        orders = MCPServerStdio(_mcp_server(capture, scenario), name="orders")
        if instrumentation == "openllmetry":  # Traceloop.init() instruments the MCP client too
            from opentelemetry.instrumentation.mcp import McpInstrumentor  # noqa: PLC0415

            McpInstrumentor().instrument(tracer_provider=capture.provider)
        # The connection's first request is a trace of its own when a client traces it
        # (OpenLLMetry's 'initialize.mcp'; mcp 2.x's own 'MCP send server/discover'): keep
        # only the run's trace, named by its root span.
        capture.trace_of = _RUN_ROOTS[instrumentation]
        with agents_trace("Agent workflow"):
            async with orders, client, guard:
                agent = agent.clone(tools=[], mcp_servers=[orders])
                result = await Runner.run(agent, prompt, run_config=config)
        print(f"  {scenario}: final_output={result.final_output!r}", flush=True)
        return
    try:
        async with client, guard:
            if scenario.endswith("_stream"):  # the run's events streamed as they happen
                result = Runner.run_streamed(
                    agent, prompt, run_config=config, error_handlers=handlers
                )
                async for _ in result.stream_events():
                    pass
            else:
                result = await Runner.run(agent, prompt, run_config=config, error_handlers=handlers)
    except (InputGuardrailTripwireTriggered, OutputGuardrailTripwireTriggered) as tripped:
        print(f"  {scenario}: raised {tripped!r}", flush=True)
        return
    except ModelRefusalError as refusal:
        # SDK >= 0.2x raises on a refusal unless a run error handler is configured; the
        # trace is still ended and exported, which is what the fixture is for.
        print(f"  {scenario}: raised {refusal!r}", flush=True)
        return
    finally:
        if undo is not None:
            undo()  # the scenarios after this one run as the others' instrumentation alone
    print(f"  {scenario}: final_output={result.final_output!r}", flush=True)


def _mcp_server(capture: Capture, scenario: str) -> Any:
    """How to start the MCP server: traced for the traced scenarios, its spans merged into
    the fixture (``Capture.foreign``)."""
    if scenario not in TRACED_MCP_SCENARIOS:
        return {"command": sys.executable, "args": ["-m", "tools.capture.mcp_server"]}
    if not MCP_SERVER_PYTHON.exists():
        raise RuntimeError(f"{scenario}: create {MCP_SERVER_PYTHON.parents[1]} (README)")
    spans_file = Path(tempfile.mkdtemp(prefix="mcp-server-")) / "spans.json"
    capture.foreign.append(spans_file)
    return {
        "command": str(MCP_SERVER_PYTHON),
        "args": ["-m", "tools.capture.mcp_server"],
        "env": {mcp_server.SPANS_FILE: str(spans_file)},
    }


def _refusal_as_output(data: RunErrorHandlerInput[Any]) -> RunErrorHandlerResult:
    """A run error handler: the model's refusal text is the run's final output."""
    error = data.error
    assert isinstance(error, ModelRefusalError)
    return RunErrorHandlerResult(final_output=error.refusal)


class GuardrailVerdict(BaseModel):
    """The guardrail agent's structured answer."""

    is_flagged: bool
    reasoning: str


def _guardrails(model: Any, config: Any) -> tuple[Any, Any]:
    """An input and an output guardrail, each running ``guardrail_agent`` (its own model
    call, in the same trace: the SDK's guardrail span, then the nested agent's spans)."""
    checker = Agent(
        name="guardrail_agent",
        instructions="Flag text that asks for or gives unsafe help.",
        model=model,
        output_type=GuardrailVerdict,
    )

    async def check(text: str) -> GuardrailFunctionOutput:
        prompt = f"{scripts.prompt_for('guardrail_check')} {text}"
        result = await Runner.run(checker, prompt, run_config=config)
        verdict = result.final_output
        return GuardrailFunctionOutput(output_info=verdict, tripwire_triggered=verdict.is_flagged)

    @input_guardrail(name="input_safety")  # run_in_parallel=True, the SDK default
    async def input_safety(context: Any, agent: Any, user_input: Any) -> GuardrailFunctionOutput:
        return await check(user_input if isinstance(user_input, str) else str(user_input))

    @output_guardrail(name="output_safety")
    async def output_safety(context: Any, agent: Any, output: Any) -> GuardrailFunctionOutput:
        return await check(str(output))

    return input_safety, output_safety


async def _client_check(guard: AsyncOpenAI, script: str, text: Any) -> GuardrailFunctionOutput:
    """A guardrail's check by the model client itself, no agent (``script`` answers)."""
    prompt = f"{scripts.prompt_for(script)} {text}"
    response = await guard.responses.create(model="gpt-4o-mini", input=prompt)
    verdict = GuardrailVerdict.model_validate_json(response.output_text)
    return GuardrailFunctionOutput(output_info=verdict, tripwire_triggered=verdict.is_flagged)


def _client_guardrail(guard: AsyncOpenAI, script: str = "guardrail_check") -> Any:
    """An output guardrail whose function calls the model client itself, no agent
    (``script`` is its verdict: ``guardrail_check`` flags nothing, ``guardrail_flag``
    trips)."""

    @output_guardrail(name="output_safety")
    async def output_safety(context: Any, agent: Any, output: Any) -> GuardrailFunctionOutput:
        return await _client_check(guard, script, output)

    return output_safety


def _blocking_client_guardrail(guard: AsyncOpenAI) -> Any:
    """An input guardrail run before the agent's model (not beside it) that calls the
    model client itself and flags the request."""

    @input_guardrail(name="input_safety", run_in_parallel=False)
    async def input_safety(context: Any, agent: Any, user_input: Any) -> GuardrailFunctionOutput:
        return await _client_check(guard, "guardrail_flag", user_input)

    return input_safety


def _build_agent(scenario: str, client: Any, config: Any, guard: AsyncOpenAI) -> Any:
    model = OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client)
    tools = {
        name: function_tool(getattr(scripts, name))
        for name in ("lookup_order", "issue_refund", "get_weather", "charge_card")
    }

    def agent(
        name: str,
        *tool_names: str,
        extra: list[Any] | None = None,
        handoffs: list[Any] | None = None,
    ) -> Any:
        return Agent(
            name=name,
            instructions="You are a helpful customer-support agent. Use the tools.",
            model=model,
            tools=[tools[tool] for tool in tool_names] + (extra or []),
            handoffs=handoffs or [],
        )

    if scenario == "parallel":
        return agent("weather_agent", "get_weather")
    if scenario == "agent_as_tool":
        desk = agent("refund_desk_agent", "lookup_order")
        desk_tool = desk.as_tool(
            tool_name="refund_desk", tool_description="Ask the refund desk about an order."
        )
        return agent("concierge", extra=[desk_tool])
    if scenario == "handoff":
        refunds = agent("refund_agent", "issue_refund")
        return agent("triage_agent", "lookup_order", handoffs=[refunds])
    if scenario == CLIENT_GUARDRAIL:
        main = agent("support_agent", "lookup_order", "issue_refund", "charge_card")
        return main.clone(output_guardrails=[_client_guardrail(guard)])
    if scenario == TOOL_OUTPUT_GUARDRAIL:
        main = agent("support_agent", "lookup_order")
        return main.clone(
            output_guardrails=[_client_guardrail(guard)], tool_use_behavior="stop_on_first_tool"
        )
    if scenario == TRIPPED_OUTPUT_GUARDRAIL:
        main = agent("support_agent", "lookup_order")
        return main.clone(output_guardrails=[_client_guardrail(guard, "guardrail_flag")])
    if scenario in (BLOCKING_GUARDRAIL, BLOCKING_GUARDRAIL_STREAM):
        main = agent("support_agent", "lookup_order", "issue_refund", "charge_card")
        return main.clone(input_guardrails=[_blocking_client_guardrail(guard)])
    if scenario in GUARDRAILED:
        input_safety, output_safety = _guardrails(model, config)
        main = agent("support_agent", "lookup_order", "issue_refund", "charge_card")
        if scenario == "refusal_input_guardrail":
            return main.clone(input_guardrails=[input_safety])
        return main.clone(output_guardrails=[output_safety])
    return agent("support_agent", "lookup_order", "issue_refund", "charge_card")


#: The instrumentations captured again with the mcp 2.x client (``.venv-capture-mcp-v2``,
#: requirements-mcp-v2.txt), their MCP scenarios only: the client writes spans of its own.
MCP_V2 = {"openinference_mcp_v2": "openinference", "otel_contrib_mcp_v2": "otel_contrib"}
BRIDGES = ("openinference", "openllmetry", "otel_contrib", "logfire")


def _captured_under(scenario: str) -> tuple[str, ...]:
    if scenario in TRACED_MCP_SCENARIOS:
        return ("openllmetry",)
    if scenario in MCP_SCENARIOS:
        return (*BRIDGES, *MCP_V2)
    return BRIDGES


if __name__ == "__main__":
    main(
        "openai_agents",
        {
            **{name: partial(instrument, name) for name in BRIDGES},
            **{name: partial(instrument, base) for name, base in MCP_V2.items()},
        },
        SCENARIOS,
        only={scenario: _captured_under(scenario) for scenario in SCENARIOS},
    )
