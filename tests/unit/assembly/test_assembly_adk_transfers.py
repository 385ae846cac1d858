"""Google ADK's sub-agent transfer: one tool, ``transfer_to_agent``, for every agent, the
agent named in its ``agent_name`` argument (captured: ``google_adk__*__transfer``). ADK 2.x
starts the agent it transfers to as a sibling of the one that transferred, under the
workflow span: one run, as an OpenAI Agents SDK handoff is. Recognition reads the agent
(``SpanRecord.handoff_to``, ``conventions.google_adk``) on ADK's spans only; the spans here
carry it as recognition gives it."""

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
        tool(4, 2, "transfer_to_agent", 20, 25, handoff_to="refund_agent"),
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
        llm(
            3,
            2,
            2,
            10,
            ask("transfer_to_agent", None, {"agent_name": "refund_agent"}),
            handoff_to="refund_agent",
        ),
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
        tool(3, 2, "transfer_to_agent", 20, 25, handoff_to="auditor"),
        agent(4, 1, "refund_agent", 61, 150),
    )

    assert [t.agent for t in build(spans)] == ["triage_agent", "refund_agent"]


def test_a_transfer_without_recorded_arguments_hands_off_to_the_agent_started_at_once() -> None:
    """Content capture off: the transfer names no one, as OpenLLMetry's handoff span, so it
    hands off to the sibling that starts right as it ends (ADK starts it at once)."""
    spans = adk_workflow(
        agent(2, 1, "triage_agent", 1, 60),
        tool(3, 2, "transfer_to_agent", 20, 25, handoff_to=""),
        agent(4, 1, "refund_agent", 61, 150),
    )

    assert [t.agents for t in build(spans)] == [("triage_agent", "refund_agent")]


def test_a_transfer_to_agent_tool_recognition_read_no_target_of_is_the_sdks() -> None:
    """Another producer's ``transfer_to_agent`` (no ``handoff_to``): the OpenAI Agents SDK's
    tool for an agent named ``agent``, no handoff to a sibling of another name."""
    spans = adk_workflow(
        agent(2, 1, "intake_agent", 1, 60),
        tool(3, 2, "transfer_to_agent", 20, 25),
        agent(4, 1, "billing_agent", 60, 150),
    )

    traces = build(spans)
    assert [t.agents for t in traces] == [("intake_agent",), ("billing_agent",)]
    assert [c.handoff for c in traces[0].calls] == [False]


def test_the_openai_agents_sdks_transfer_tools_still_name_their_agent() -> None:
    spans = adk_workflow(
        agent(2, 1, "triage_agent", 1, 60),
        llm(3, 2, 2, 10, ask("transfer_to_refund_agent", "call_1", "{}")),
        agent(4, 1, "refund_agent", 61, 150),
    )

    assert [t.agents for t in build(spans)] == [("triage_agent", "refund_agent")]


def test_a_joined_run_whose_model_spans_give_no_answer_answers_with_its_last_agent() -> None:
    """OpenInference on ADK 2.x: each agent's one model span requested tools (an earlier
    call's), so no model output is an answer; the agent transferred to spoke last, and its
    span holds the answer (ADK's last Event's text), not the first agent's (the transfer's
    Event: no text)."""
    spans = adk_workflow(
        agent(2, 1, "triage_agent", 1, 60),
        llm(3, 2, 2, 59, ask("transfer_to_agent", None, "{}"), handoff_to="refund_agent"),
        tool(4, 3, "transfer_to_agent", 20, 25, handoff_to="refund_agent"),
        agent(5, 1, "refund_agent", 61, 150, output_text="Refund R-77 was issued."),
        llm(6, 5, 62, 149, ask("issue_refund", None, "{}"), output_text="Refund R-77 was issued."),
        tool(7, 6, "issue_refund", 70, 80),
    )

    (trace,) = build(spans)
    assert (trace.agents, trace.final_text) == (
        ("triage_agent", "refund_agent"),
        "Refund R-77 was issued.",
    )
