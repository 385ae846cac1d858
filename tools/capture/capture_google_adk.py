"""Capture Google ADK ``LlmAgent`` runs against the fake Gemini API.

``python -m tools.capture.capture_google_adk INSTRUMENTATION [SCENARIO...]`` with
INSTRUMENTATION one of (all in ``.venv-capture-google-adk``, ``tools/capture/README.md``):

* ``native`` -- ADK's own tracer (scope ``gcp.vertex.agent``) in its default telemetry
  format, schema version 2 (``otel_semconv_1_44``: ``invoke_workflow`` above
  ``invoke_agent``, no ``call_llm`` span, tool content in ``gen_ai.tool.call.*``);
* ``native_v1`` -- the same tracer with ``ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1``, the
  legacy format (``invocation``, ``call_llm`` with ``gcp.vertex.agent.llm_response``,
  ``gcp.vertex.agent.tool_call_args``) that ADK 1.x wrote and that CONVENTIONS §4.4
  describes;
* ``openinference`` -- ``openinference-instrumentation-google-adk``'s
  ``GoogleADKInstrumentor`` (which also turns ADK's own tracer off, as its quickstart
  does by instrumenting the process).

Each agent's model is ADK's ``Gemini`` with ``base_url`` at the fake server (the Gemini
API's ``generateContent``, non-streaming: ``Runner.run_async`` with the default
``RunConfig``). Tools are the plain functions of ``scripts.py`` (ADK wraps each in a
``FunctionTool``). A tool that raises ends the run (``tool_crash``) unless the agent's
``on_tool_error_callback`` turns the error into the tool's result (``tool_error``: the model
is sent it and answers). ADK's tracer reads the global tracer provider, so the capture's is
made global before the first run. ``agent_as_tool`` wraps ``refund_desk_agent`` in an
``AgentTool``; ``transfer`` gives ``triage_agent`` a sub-agent, ``refund_agent``, which
the model transfers to with ADK's ``transfer_to_agent`` tool.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models import Gemini
from google.adk.runners import InMemoryRunner
from google.adk.tools.agent_tool import AgentTool
from google.genai import types
from opentelemetry import trace

from tools.capture import scripts
from tools.capture.cli import CaptureRun, main
from tools.capture.fake_model import GEMINI_MODEL, FakeModelServer
from tools.capture.otlp import Capture

__all__ = ["SCENARIOS", "instrument"]

SCENARIOS = (
    "refund",
    "parallel",
    "tool_error",
    "tool_crash",
    "refusal",
    "agent_tool",
    "transfer",
)
INSTRUCTIONS = "You are a helpful customer-support agent. Use the tools."
_USER = "customer-1"


def instrument(name: str, capture: Capture) -> CaptureRun:
    """Set up the tracer ``name`` says, on the capture's provider (made global: ADK's own
    tracer is a module-level proxy of the global one)."""
    if name == "native_v1":
        os.environ["ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN"] = "1"
    else:
        os.environ.pop("ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN", None)
    if name == "native":
        # Schema 2 records no content at all without it (no arguments, no output).
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "span_only"
    trace.set_tracer_provider(capture.provider)
    if name == "openinference":
        from openinference.instrumentation.google_adk import (  # noqa: PLC0415
            GoogleADKInstrumentor,
        )

        GoogleADKInstrumentor().instrument(tracer_provider=capture.provider)
    return run_scenario


async def run_scenario(capture: Capture, server: FakeModelServer, scenario: str) -> None:
    """One ``Runner.run_async`` of the scenario's root agent, in a new session."""
    runner = InMemoryRunner(agent=_build_agent(scenario, server), app_name="support_app")
    session = await runner.session_service.create_session(app_name="support_app", user_id=_USER)
    prompt = scripts.prompt_for("tool_error" if scenario == "tool_crash" else scenario)
    message = types.Content(role="user", parts=[types.Part(text=prompt)])
    last = None
    try:
        async for event in runner.run_async(
            user_id=_USER, session_id=session.id, new_message=message
        ):
            last = event
    except scripts.CardDeclinedError as error:  # tool_crash: ADK lets the tool's error out
        print(f"  {scenario}: raised {error!r}", flush=True)
        return
    finally:
        await runner.close()  # the model's client, before asyncio.run closes its loop
    text = None
    if last is not None and last.content is not None and last.content.parts:
        text = " ".join(part.text or "" for part in last.content.parts).strip()
    finish = last.finish_reason if last is not None else None
    author = last.author if last is not None else None
    print(f"  {scenario}: author={author} finish={finish} text={text!r}", flush=True)


def _build_agent(scenario: str, server: FakeModelServer) -> LlmAgent:
    model = Gemini(
        model=GEMINI_MODEL,
        base_url=server.root_url,  # the client adds /v1beta
        client_kwargs={"api_key": "fake-key"},  # a dummy: the server is the local fake
    )
    tools: dict[str, Callable[..., Any]] = {
        name: getattr(scripts, name)
        for name in ("lookup_order", "issue_refund", "get_weather", "charge_card")
    }

    def agent(name: str, *tools: Any, **more: Any) -> LlmAgent:
        return LlmAgent(name=name, model=model, instruction=INSTRUCTIONS, tools=list(tools), **more)

    if scenario == "parallel":
        return agent("weather_agent", tools["get_weather"])
    if scenario == "agent_tool":
        desk = agent(
            "refund_desk_agent", tools["lookup_order"], description="Answers order questions."
        )
        return agent("concierge", AgentTool(agent=desk))
    if scenario == "transfer":
        refund = agent(
            "refund_agent", tools["issue_refund"], description="Refunds verified orders."
        )
        return agent("triage_agent", tools["lookup_order"], sub_agents=[refund])
    support = (tools["lookup_order"], tools["issue_refund"], tools["charge_card"])
    if scenario == "tool_error":
        return agent("support_agent", *support, on_tool_error_callback=_error_result)
    return agent("support_agent", *support)


def _error_result(
    tool: Any, args: dict[str, Any], context: Any, error: Exception
) -> dict[str, Any]:
    """``on_tool_error_callback``: ADK's documented way to hand a tool's failure to the model
    (without one the exception ends the run: ``tool_crash``)."""
    return {"error": f"{type(error).__name__}: {error}"}


if __name__ == "__main__":
    main(
        "google_adk",
        {name: partial(instrument, name) for name in ("native", "native_v1", "openinference")},
        SCENARIOS,
    )
