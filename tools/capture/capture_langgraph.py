"""Capture a LangChain agent (``create_agent``, on LangGraph) with a LangChain instrumentation.

``python -m tools.capture.capture_langgraph INSTRUMENTATION [SCENARIO...]`` with
INSTRUMENTATION one of:

* ``openinference`` -- ``openinference-instrumentation-langchain`` (OpenInference CHAIN /
  LLM / TOOL spans from LangChain's callback system);
* ``openllmetry`` -- Traceloop's ``opentelemetry-instrumentation-langchain``;
* ``langsmith`` -- LangSmith's own tracer exporting OpenTelemetry instead of LangSmith runs
  (``LANGSMITH_TRACING=true``, ``LANGSMITH_TRACING_MODE=otel``; ``langsmith[otel]``, in a
  virtualenv of its own, ``requirements-langsmith.txt``). It takes the global tracer provider.

``langchain.agents.create_agent`` is LangChain 1's agent (LangGraph's ``create_react_agent``
moved there). The model is ``langchain-openai``'s ``ChatOpenAI`` on Chat Completions against
the fake server; the tools are the plain functions of ``scripts.py`` as LangChain tools. A
tool failure reaches the model as an error tool message through ``ToolErrorMiddleware`` (in
LangChain 1 a tool's exception otherwise ends the run). Agent-as-tool is a tool that invokes
a second agent.
"""

from __future__ import annotations

import os
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import ToolErrorMiddleware
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from opentelemetry import trace

from tools.capture import scripts
from tools.capture.cli import CaptureRun, main
from tools.capture.fake_model import FakeModelServer
from tools.capture.otlp import Capture

__all__ = ["SCENARIOS", "instrument"]

SCENARIOS = ("refund", "refund_stream", "parallel", "tool_error", "refusal", "agent_as_tool")
INSTRUCTIONS = "You are a helpful customer-support agent. Use the tools."
_AGENTS = {"parallel": "weather_agent", "agent_as_tool": "concierge"}


def instrument(name: str, capture: Capture) -> CaptureRun:
    """Instrument LangChain with ``name`` against the capture's provider."""
    trace.set_tracer_provider(capture.provider)
    if name == "langsmith":
        os.environ.update(
            LANGSMITH_TRACING="true",
            LANGSMITH_TRACING_MODE="otel",  # OpenTelemetry only: nothing to LangSmith
            LANGSMITH_API_KEY="lsv2-fake",
            LANGSMITH_PROJECT="capture-langgraph",
        )
        return run_scenario
    instrumentor: Any
    if name == "openinference":
        from openinference.instrumentation.langchain import (  # noqa: PLC0415
            LangChainInstrumentor,
        )

        instrumentor = LangChainInstrumentor()
    else:
        from opentelemetry.instrumentation.langchain import (  # noqa: PLC0415
            LangchainInstrumentor,
        )

        instrumentor = LangchainInstrumentor()
    instrumentor.instrument(tracer_provider=capture.provider)
    return run_scenario


@tool
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order by its id."""
    return scripts.lookup_order(order_id)


@tool
def issue_refund(order_id: str, amount_usd: float) -> dict[str, Any]:
    """Refund an amount in USD for an order."""
    return scripts.issue_refund(order_id, amount_usd)


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return scripts.get_weather(city)


@tool
def charge_card(order_id: str, amount_usd: float) -> dict[str, Any]:
    """Charge the customer's card for an order."""
    return scripts.charge_card(order_id, amount_usd)


def _model(server: FakeModelServer) -> ChatOpenAI:
    return ChatOpenAI(model="gpt-4o", base_url=server.base_url, api_key="sk-fake")  # type: ignore[arg-type]


def _tell_the_model(error: Exception, request: Any) -> str:
    return f"Error: {type(error).__name__}: {error}"


def _agent(server: FakeModelServer, name: str, tools: list[Any]) -> Any:
    middleware = [ToolErrorMiddleware(_tell_the_model)]
    return create_agent(
        _model(server), tools, system_prompt=INSTRUCTIONS, middleware=middleware, name=name
    )


async def run_scenario(capture: Capture, server: FakeModelServer, scenario: str) -> None:
    tools: list[Any] = [lookup_order, issue_refund, get_weather, charge_card]
    if scenario == "agent_as_tool":
        desk = _agent(server, "refund_desk_agent", [lookup_order])

        @tool
        async def refund_desk(input: str) -> str:
            """Ask the refund desk agent."""
            answer = await desk.ainvoke({"messages": [("user", input)]})
            return str(answer["messages"][-1].content)

        tools = [refund_desk]
    agent = _agent(server, _AGENTS.get(scenario, "support_agent"), tools)
    prompt = scripts.prompt_for(scenario)
    try:
        if scenario.endswith("_stream"):  # a chat UI's way: the model's tokens as they come
            answer = ""
            async for message, _ in agent.astream(
                {"messages": [("user", prompt)]}, stream_mode="messages"
            ):
                if message.type == "AIMessageChunk" and isinstance(message.content, str):
                    answer += message.content
        else:
            result = await agent.ainvoke({"messages": [("user", prompt)]})
            answer = result["messages"][-1].content
    except Exception as error:
        print(f"  {scenario}: raised {error!r}", flush=True)
        return
    print(f"  {scenario}: output={answer!r}", flush=True)


if __name__ == "__main__":
    main(
        "langgraph",
        {
            "openinference": lambda c: instrument("openinference", c),
            "openllmetry": lambda c: instrument("openllmetry", c),
            "langsmith": lambda c: instrument("langsmith", c),
        },
        SCENARIOS,
    )
