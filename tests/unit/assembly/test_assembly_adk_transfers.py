"""Google ADK's sub-agent transfer: one tool, ``transfer_to_agent``, for every agent, the
agent named in its ``agent_name`` argument (captured: ``google_adk__*__transfer``). ADK 2.x
starts the agent it transfers to as a sibling of the one that transferred, under the
workflow span: one run, as an OpenAI Agents SDK handoff is."""

from __future__ import annotations

from assembly_support import agent, ask, build, hexid, llm, span, tool

from toolwatch.model import SpanRecord, SpanRole


def adk_workflow(*inside: SpanRecord) -> list[SpanRecord]:
    """ADK 2.x's root: ``invoke_workflow <root agent>``, no agent span of its own."""
    return [span(1, None, SpanRole.OTHER, 0, 200, name="invoke_workflow triage_agent"), *inside]


def test_a_transfer_run_as_a_tool_hands_off_to_the_agent_its_argument_names() -> None:
    spans = adk_workflow(
        agent(2, 1, "triage_agent", 1, 60),
        tool(3, 2, "lookup_order", 5, 10, arguments='{"order_id": "A-1"}'),
        tool(4, 2, "transfer_to_agent", 20, 25, arguments='{"agent_name": "refund_agent"}'),
        agent(5, 1, "refund_agent", 61, 150),
        tool(6, 5, "issue_refund", 70, 80, arguments='{"order_id": "A-1"}'),
    )

    (trace,) = build(spans)
    assert (trace.agent, trace.run_span_id, trace.agents) == (
        "triage_agent",
        hexid(2),
        ("triage_agent", "refund_agent"),
    )
    assert [(c.tool_name, c.agent, c.handoff) for c in trace.calls] == [
        ("lookup_order", "triage_agent", False),
        ("transfer_to_agent", "triage_agent", True),
        ("issue_refund", "refund_agent", False),
    ]


def test_a_transfer_only_requested_hands_off_to_the_agent_its_argument_names() -> None:
    spans = adk_workflow(
        agent(2, 1, "triage_agent", 1, 60),
        llm(3, 2, 2, 10, ask("transfer_to_agent", None, {"agent_name": "refund_agent"})),
        agent(4, 1, "billing_agent", 61, 100),
        agent(5, 1, "refund_agent", 101, 150),
    )

    assert [(t.agent, t.agents) for t in build(spans)] == [
        ("triage_agent", ("triage_agent", "refund_agent")),
        ("billing_agent", ("billing_agent",)),
    ]


def test_a_transfer_to_an_agent_no_sibling_is_hands_off_to_none() -> None:
    spans = adk_workflow(
        agent(2, 1, "triage_agent", 1, 60),
        tool(3, 2, "transfer_to_agent", 20, 25, arguments='{"agent_name": "auditor"}'),
        agent(4, 1, "refund_agent", 61, 150),
    )

    assert [t.agent for t in build(spans)] == ["triage_agent", "refund_agent"]


def test_a_transfer_without_recorded_arguments_hands_off_to_the_agent_started_at_once() -> None:
    """Content capture off: the transfer names no one, as OpenLLMetry's handoff span, so it
    hands off to the sibling that starts right as it ends (ADK starts it at once)."""
    spans = adk_workflow(
        agent(2, 1, "triage_agent", 1, 60),
        tool(3, 2, "transfer_to_agent", 20, 25),
        agent(4, 1, "refund_agent", 61, 150),
    )

    assert [t.agents for t in build(spans)] == [("triage_agent", "refund_agent")]


def test_the_openai_agents_sdks_transfer_tools_still_name_their_agent() -> None:
    spans = adk_workflow(
        agent(2, 1, "triage_agent", 1, 60),
        llm(3, 2, 2, 10, ask("transfer_to_refund_agent", "call_1", "{}")),
        agent(4, 1, "refund_agent", 61, 150),
    )

    assert [t.agents for t in build(spans)] == [("triage_agent", "refund_agent")]
