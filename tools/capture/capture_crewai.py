"""Capture a CrewAI crew with a CrewAI instrumentation.

``python -m tools.capture.capture_crewai INSTRUMENTATION [SCENARIO...]`` with
INSTRUMENTATION one of:

* ``openinference`` -- ``openinference-instrumentation-crewai`` alone, as its quickstart sets
  it up (``CrewAIInstrumentor().instrument(tracer_provider=...)``): a CHAIN span for the
  crew's kickoff, an AGENT span for each task's execution, a TOOL span for each tool run; no
  LLM spans (it instruments no model client);
* ``openllmetry`` -- Traceloop's ``opentelemetry-instrumentation-crewai`` with Traceloop's
  ``opentelemetry-instrumentation-openai`` on too, as ``Traceloop.init()`` would (both
  installed): the CrewAI instrumentation wraps ``crewai.llm.LLM.call``, the LiteLLM route,
  which CrewAI 1.x no longer takes for an OpenAI model (its native ``OpenAICompletion`` is a
  ``BaseLLM`` of its own), and it makes no tool spans.

CrewAI 1.15 calls the model through its native OpenAI provider (the ``openai`` client, Chat
Completions, non-streaming) with native function calling: the tools go in the request's
``tools``, the fake server's ``tool_calls`` are run and their results sent back as ``tool``
messages, and an answer without tool calls is the task's final answer. Each task's agent
starts a conversation of its own (system: role, goal, backstory; user: the task, with earlier
tasks' answers as context), so the second task of ``refund_crew`` is a scenario of its own
(``crew_refund_task``), named in its description. A tool that raises is reported to the
model as an error result and the model gets another turn.

``crew_hierarchical`` runs the hierarchical process: CrewAI makes a manager agent from
``manager_llm`` (role "Crew Manager") whose only tools are the delegation tools; the fake
model has it call ``delegate_work_to_coworker`` with a ``task`` argument that starts the
worker's conversation (``crew_delegated_refund``: the worker's user message is that task,
with the ``context`` argument), then answer with what the worker returned.

Nothing leaves the machine: the model is the fake server (``base_url``), the key a dummy,
and CrewAI's own telemetry (anonymous usage spans to telemetry.crewai.com), its tracing
(traces to CrewAI AMP) and its version check (PyPI) are switched off by their variables.
``OTEL_SDK_DISABLED`` is NOT set: it also turns off every OpenTelemetry SDK provider of the
process, the capture's included.
"""

from __future__ import annotations

import logging
import os
import tempfile
from typing import Any

# Before crewai is imported: its telemetry singleton reads these when first created.
os.environ.update(
    CREWAI_DISABLE_TELEMETRY="true",
    CREWAI_DISABLE_TRACKING="true",
    CREWAI_TRACING_ENABLED="false",
    CREWAI_DISABLE_VERSION_CHECK="true",
    CREWAI_STORAGE_DIR=tempfile.mkdtemp(prefix="capture-crewai-"),
    TRACELOOP_METRICS_ENABLED="false",
)

from crewai import LLM, Agent, Crew, Process, Task
from crewai.tools import tool

from tools.capture import scripts
from tools.capture.cli import CaptureRun, main
from tools.capture.fake_model import FakeModelServer
from tools.capture.otlp import Capture

__all__ = ["SCENARIOS", "instrument"]

SCENARIOS = ("refund", "refund_crew", "tool_error", "crew_hierarchical")
# Quiet: "Using an approximate input token count" on every model call (the fake server
# counts no tokens for CrewAI's context-window check).
logging.getLogger("crewai.llms.base_llm").setLevel(logging.ERROR)
BACKSTORY = "You are a helpful customer-support agent. Use the tools."


def instrument(name: str, capture: Capture) -> CaptureRun:
    """Instrument CrewAI with ``name`` against the capture's provider."""
    if name == "openinference":
        from openinference.instrumentation.crewai import CrewAIInstrumentor  # noqa: PLC0415

        CrewAIInstrumentor().instrument(tracer_provider=capture.provider)
        return run_scenario
    from opentelemetry.instrumentation.crewai import (  # noqa: PLC0415
        CrewAIInstrumentor as TraceloopCrewAIInstrumentor,
    )
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor  # noqa: PLC0415

    TraceloopCrewAIInstrumentor().instrument(tracer_provider=capture.provider)
    OpenAIInstrumentor().instrument(tracer_provider=capture.provider)
    return run_scenario


@tool("lookup_order")
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order by its id."""
    return scripts.lookup_order(order_id)


@tool("issue_refund")
def issue_refund(order_id: str, amount_usd: float) -> dict[str, Any]:
    """Refund an amount in USD for an order."""
    return scripts.issue_refund(order_id, amount_usd)


@tool("charge_card")
def charge_card(order_id: str, amount_usd: float) -> dict[str, Any]:
    """Charge the customer's card for an order."""
    return scripts.charge_card(order_id, amount_usd)


def _llm(server: FakeModelServer) -> Any:
    return LLM(model="gpt-4o-mini", base_url=server.base_url, api_key="sk-fake", max_retries=0)


def _agent(server: FakeModelServer, role: str, goal: str, tools: list[Any]) -> Agent:
    return Agent(
        role=role,
        goal=goal,
        backstory=BACKSTORY,
        tools=tools,
        llm=_llm(server),
        allow_delegation=False,
        max_iter=5,
        verbose=False,
    )


def _task(scenario: str, agent: Agent, expected: str) -> Task:
    return Task(
        name=scenario,
        description=scripts.prompt_for(scenario),
        expected_output=expected,
        agent=agent,
    )


def _crew(server: FakeModelServer, scenario: str) -> Crew:
    if scenario == "refund_crew":
        triage = _agent(server, "triage_agent", "Verify orders before refunds.", [lookup_order])
        refunds = _agent(server, "refund_agent", "Refund verified orders.", [issue_refund])
        tasks = [
            _task("refund_crew", triage, "Whether the order can be refunded."),
            _task("crew_refund_task", refunds, "The refund's id and amount."),
        ]
        agents = [triage, refunds]
    elif scenario == "crew_hierarchical":
        return _hierarchical_crew(server)
    else:
        support = _agent(
            server,
            "support_agent",
            "Resolve the customer's request.",
            [lookup_order, issue_refund, charge_card],
        )
        tasks = [_task(scenario, support, "A short answer for the customer.")]
        agents = [support]
    return Crew(
        name="support_crew",
        agents=agents,
        tasks=tasks,
        process=Process.sequential,
        verbose=False,
        tracing=False,
    )


def _hierarchical_crew(server: FakeModelServer) -> Crew:
    """The hierarchical process as CrewAI's docs set it up: ``manager_llm``, so CrewAI makes
    its own manager agent (role "Crew Manager", the delegation tools its only tools) and runs
    each task with it; the task names no agent. The manager delegates to refund_agent, whose
    tools do the work."""
    refunds = _agent(
        server, "refund_agent", "Refund verified orders.", [lookup_order, issue_refund]
    )
    task = Task(
        name="crew_hierarchical",
        description=scripts.prompt_for("crew_hierarchical"),
        expected_output="A short answer for the customer.",
    )
    return Crew(
        name="support_crew",
        agents=[refunds],
        tasks=[task],
        process=Process.hierarchical,
        manager_llm=_llm(server),
        verbose=False,
        tracing=False,
    )


async def run_scenario(capture: Capture, server: FakeModelServer, scenario: str) -> None:
    """Kick the scenario's crew off once: ``Crew.kickoff_async``, which runs the synchronous
    ``Crew.kickoff`` (what both instrumentations wrap) in a worker thread; CrewAI refuses a
    synchronous kickoff from inside a running event loop."""
    crew = _crew(server, scenario)
    try:
        result = await crew.kickoff_async()
    except Exception as error:
        print(f"  {scenario}: raised {error!r}", flush=True)
        return
    print(f"  {scenario}: output={str(result.raw)!r}", flush=True)


if __name__ == "__main__":
    main(
        "crewai",
        {
            "openinference": lambda capture: instrument("openinference", capture),
            "openllmetry": lambda capture: instrument("openllmetry", capture),
        },
        SCENARIOS,
    )
