"""Capture Strands Agents' native tracer with its OpenAI (Chat Completions) model provider.

``python -m tools.capture.capture_strands INSTRUMENTATION [SCENARIO...]`` with
INSTRUMENTATION ``native`` (default conventions: content in span events) or
``native_latest`` (``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``: the
``gen_ai.client.inference.operation.details`` events and, on tool spans,
``gen_ai.tool.call.arguments`` / ``.result`` attributes).

Strands' tracer reads the global tracer provider and the opt-in variable once, when its
singleton is first created, so each INSTRUMENTATION needs its own process. Strands'
OpenAI provider always streams, which the fake server supports. A tool that raises is
turned into an ``error`` tool result and the model gets another turn. Agent-as-tool is
Strands' documented "agents as tools" pattern: a ``@tool`` that invokes another agent.
"""

from __future__ import annotations

import os
from typing import Any

from opentelemetry import trace
from strands import Agent, tool
from strands.models.openai import OpenAIModel

from tools.capture import scripts
from tools.capture.cli import CaptureRun, main
from tools.capture.fake_model import FakeModelServer
from tools.capture.otlp import Capture

__all__ = ["SCENARIOS", "instrument"]

SCENARIOS = ("refund", "parallel", "tool_error", "refusal", "agent_as_tool")
INSTRUCTIONS = "You are a helpful customer-support agent. Use the tools."


def instrument(latest: bool, capture: Capture) -> CaptureRun:
    """Point Strands' tracer at the capture (and opt in to the latest conventions)."""
    if latest:
        os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
    else:
        os.environ.pop("OTEL_SEMCONV_STABILITY_OPT_IN", None)
    trace.set_tracer_provider(capture.provider)
    return run_scenario


async def run_scenario(capture: Capture, server: FakeModelServer, scenario: str) -> None:
    """Invoke the scenario's agent once, asynchronously."""
    agent = _build_agent(scenario, server)
    try:
        result = await agent.invoke_async(scripts.prompt_for(scenario))
    except Exception as error:
        print(f"  {scenario}: raised {error!r}", flush=True)
        return
    print(f"  {scenario}: stop_reason={result.stop_reason!r} text={str(result).strip()!r}")


def _build_agent(scenario: str, server: FakeModelServer) -> Any:
    model = OpenAIModel(
        client_args={
            "base_url": server.base_url,
            "api_key": "sk-fake",
            "max_retries": 0,
            "timeout": 10,
        },
        model_id="gpt-4o-mini",
    )

    def agent(name: str, *tools: Any) -> Any:
        return Agent(
            name=name,
            model=model,
            system_prompt=INSTRUCTIONS,
            tools=list(tools),
            callback_handler=None,
        )

    tools = {
        name: tool(getattr(scripts, name))
        for name in ("lookup_order", "issue_refund", "get_weather", "charge_card")
    }
    if scenario == "parallel":
        return agent("weather_agent", tools["get_weather"])
    if scenario == "agent_as_tool":
        desk = agent("refund_desk_agent", tools["lookup_order"])

        @tool
        async def refund_desk(input: str) -> str:
            """Ask the refund desk about an order.

            Args:
                input: The question for the refund desk.
            """
            return str(await desk.invoke_async(input)).strip()

        return agent("concierge", refund_desk)
    return agent(
        "support_agent", tools["lookup_order"], tools["issue_refund"], tools["charge_card"]
    )


if __name__ == "__main__":
    main(
        "strands",
        {
            "native": lambda capture: instrument(False, capture),
            "native_latest": lambda capture: instrument(True, capture),
        },
        SCENARIOS,
    )
