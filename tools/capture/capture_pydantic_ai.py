"""Capture pydantic-ai's native OpenTelemetry instrumentation (Chat Completions provider).

``python -m tools.capture.capture_pydantic_ai INSTRUMENTATION [SCENARIO...]`` with INSTRUMENTATION
``native_v5`` (``InstrumentationSettings()`` -- the default data format of this pydantic-ai
release) or ``native_v2`` (``version=2``, the deprecated ``running tool`` shape).

Scenario notes: pydantic-ai has no "non-fatal tool error" of its own; a tool reports a
failure to the model by raising ``ModelRetry`` (``tool_error``). A tool that raises any
other exception aborts the whole run (``tool_crash``; the model never gets a second turn).
Agent-as-tool is pydantic-ai's documented "agent delegation": a tool that awaits another
agent's ``run`` with the parent's usage.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry, RunContext
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from tools.capture import scripts
from tools.capture.cli import CaptureRun, main
from tools.capture.fake_model import FakeModelServer
from tools.capture.otlp import Capture

__all__ = ["SCENARIOS", "WeatherReport", "instrument"]


class WeatherReport(BaseModel):
    """The structured answer of ``structured_output``: pydantic-ai asks the model for it
    through an output tool, ``final_result``."""

    city: str
    summary: str


SCENARIOS = (
    "refund",
    "refund_stream",
    "parallel",
    "tool_error",
    "tool_crash",
    "refusal",
    "agent_as_tool",
    "structured_output",
)
INSTRUCTIONS = "You are a helpful customer-support agent. Use the tools."


def instrument(version: int | None, capture: Capture) -> CaptureRun:
    """Return a runner whose agents use ``InstrumentationSettings(version=...)``."""
    trace.set_tracer_provider(capture.provider)
    options: dict[str, Any] = {"tracer_provider": capture.provider}
    if version is not None:
        options["version"] = version
    settings = InstrumentationSettings(**options)
    # pydantic-ai 2.x dropped ``Agent(instrument=...)``; ``instrument_all`` is the documented
    # process-wide switch (the per-agent form is the ``Instrumentation`` capability).
    Agent.instrument_all(settings)

    async def run(capture: Capture, server: FakeModelServer, scenario: str) -> None:
        agent = _build_agent(scenario, server)
        prompt = scripts.prompt_for("tool_error" if scenario == "tool_crash" else scenario)
        try:
            if scenario.endswith("_stream"):  # the answer streamed as it is generated
                async with agent.run_stream(prompt) as streamed:
                    output = await streamed.get_output()
            else:
                output = (await agent.run(prompt)).output
        except Exception as error:
            print(f"  {scenario}: raised {error!r}", flush=True)
            return
        print(f"  {scenario}: output={output!r}", flush=True)

    return run


def _build_agent(scenario: str, server: FakeModelServer) -> Any:
    provider = OpenAIProvider(base_url=server.base_url, api_key="sk-fake")
    model = OpenAIChatModel("gpt-4o-mini", provider=provider)

    def agent(name: str, *tools: Any) -> Any:
        return Agent(model, name=name, instructions=INSTRUCTIONS, tools=list(tools), retries=1)

    def charge_card_retry(order_id: str, amount_usd: float) -> dict[str, Any]:
        """Charge the customer's card for an order."""
        try:
            return scripts.charge_card(order_id, amount_usd)
        except scripts.CardDeclinedError as error:
            raise ModelRetry(str(error)) from error

    if scenario == "parallel":
        return agent("weather_agent", scripts.get_weather)
    if scenario == "structured_output":
        return Agent(
            model,
            name="weather_agent",
            instructions=INSTRUCTIONS,
            tools=[scripts.get_weather],
            output_type=WeatherReport,
        )
    if scenario == "tool_error":
        charge_card_retry.__name__ = "charge_card"
        return agent("support_agent", scripts.lookup_order, charge_card_retry)
    if scenario == "agent_as_tool":
        desk = agent("refund_desk_agent", scripts.lookup_order)

        async def refund_desk(ctx: RunContext[None], input: str) -> str:
            """Ask the refund desk about an order."""
            result = await desk.run(input, usage=ctx.usage)
            return str(result.output)

        return agent("concierge", refund_desk)
    return agent("support_agent", scripts.lookup_order, scripts.issue_refund, scripts.charge_card)


if __name__ == "__main__":
    main(
        "pydantic_ai",
        {
            "native_v5": lambda capture: instrument(None, capture),
            "native_v2": lambda capture: instrument(2, capture),
        },
        SCENARIOS,
    )
