"""Calls: a CrewAI delegation runs the coworker it names, an agent used as a tool that no
instrumentation writes as one (``delegations._delegations``; ``conventions.crewai``)."""

from __future__ import annotations

import time

import pytest
from assembly_support import agent, ask, build, hexid, llm, only, tool

from toolwatch.conventions import crewai
from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.policy_settings import PolicySettings
from toolwatch.evaluation.safety import Safety
from toolwatch.evaluation.settings import SafetySettings
from toolwatch.model import SpanRecord

DELEGATION = {"task": "Refund order A-1001.", "context": "It arrived broken.", "coworker": ""}


def delegating(coworker: str) -> dict[str, str]:
    return {**DELEGATION, "coworker": coworker}


def openinference_spans(coworker: str = "refund_agent") -> list[SpanRecord]:
    """A hierarchical crew under OpenInference: the manager's delegation tool span, the
    coworker's tool spans right below it, no span for the coworker."""
    return [
        agent(1, None, "support_crew", 0, 100, convention=crewai.NAME),
        agent(2, 1, "Crew Manager", 1, 99),
        tool(3, 2, "Delegate work to coworker", 10, 60, arguments=delegating(coworker)),
        tool(4, 3, "lookup_order", 20, 30, arguments='{"order_id": "A-1001"}'),
        tool(5, 3, "issue_refund", 40, 50, arguments='{"order_id": "A-1001"}'),
    ]


def openllmetry_spans(coworker: str = "refund_agent") -> list[SpanRecord]:
    """The same crew under OpenLLMetry: no tool spans; the coworker's agent span right
    under the manager's, between the model's delegation and its answer."""
    return [
        agent(1, None, "support_crew", 0, 100, convention=crewai.NAME),
        agent(2, 1, "Crew Manager", 1, 99),
        llm(3, 2, 2, 9, ask("delegate_work_to_coworker", "call_d", delegating(coworker))),
        agent(4, 2, "refund_agent", 10, 60),
        llm(5, 4, 11, 19, ask("lookup_order", "call_l", {"order_id": "A-1001"})),
        llm(6, 4, 21, 29, ask("issue_refund", "call_r", {"order_id": "A-1001"})),
        llm(7, 4, 31, 39, output_text="Refund R-77 issued."),
        llm(8, 2, 61, 70, output_text="Our refund agent issued refund R-77."),
    ]


def test_calls_below_a_delegation_with_no_coworker_span_are_the_coworkers() -> None:
    trace = only(openinference_spans())

    assert [(c.tool_name, c.agent, c.parent_call_id) for c in trace.calls] == [
        ("delegate work to coworker", "Crew Manager", None),
        ("lookup_order", "refund_agent", hexid(3)),
        ("issue_refund", "refund_agent", hexid(3)),
    ]
    assert trace.agents == ("support_crew", "Crew Manager", "refund_agent")


def test_a_delegation_only_asked_for_holds_the_calls_of_the_agent_it_ran() -> None:
    trace = only(openllmetry_spans())

    assert [(c.tool_name, c.agent, c.parent_call_id) for c in trace.calls] == [
        ("delegate_work_to_coworker", "Crew Manager", None),
        ("lookup_order", "refund_agent", "call_d"),
        ("issue_refund", "refund_agent", "call_d"),
    ]


def test_a_delegation_finds_its_coworker_as_crewai_matches_roles() -> None:
    calls = only(openllmetry_spans(coworker=' "Refund_Agent" ')).calls

    assert [c.parent_call_id for c in calls] == [None, "call_d", "call_d"]


@pytest.mark.parametrize("coworker", ["triage_agent", ""])
def test_a_delegation_to_another_or_no_coworker_holds_no_agents_calls(coworker: str) -> None:
    calls = only(openllmetry_spans(coworker=coworker)).calls

    assert [(c.agent, c.parent_call_id) for c in calls] == [
        ("Crew Manager", None),
        ("refund_agent", None),
        ("refund_agent", None),
    ]


def test_an_agent_started_before_the_delegation_was_asked_for_is_not_its() -> None:
    spans = openllmetry_spans()
    spans[2] = llm(
        3, 2, 2, 61, ask("delegate_work_to_coworker", "call_d", delegating("refund_agent"))
    )

    calls = only(spans).calls

    assert [c.parent_call_id for c in calls] == [None, None, None]


def test_each_delegation_holds_one_run_of_the_coworker() -> None:
    spans = [
        *openllmetry_spans()[:7],
        llm(8, 2, 61, 64, ask("delegate_work_to_coworker", "call_e", delegating("refund_agent"))),
        agent(9, 2, "refund_agent", 65, 80),
        llm(10, 9, 66, 70, ask("lookup_order", "call_m", {"order_id": "A-1002"})),
        llm(11, 2, 81, 90, output_text="Both refunded."),
    ]

    calls = only(spans).calls

    assert [(c.call_id, c.parent_call_id) for c in calls] == [
        ("call_d", None),
        ("call_l", "call_d"),
        ("call_r", "call_d"),
        ("call_e", None),
        ("call_m", "call_e"),
    ]


def test_an_agent_below_a_delegation_span_keeps_its_own_calls() -> None:
    spans = [
        *openinference_spans(coworker="refund_agent")[:3],
        agent(6, 3, "Refund Agent", 11, 59),
        tool(4, 6, "lookup_order", 20, 30),
    ]

    calls = only(spans).calls

    assert [(c.agent, c.parent_call_id) for c in calls] == [
        ("Crew Manager", None),
        ("Refund Agent", hexid(3)),
    ]


def test_a_coworker_is_named_by_either_argument_crewai_reads() -> None:
    assert crewai.coworker({"coworker": " refund_agent "}) == "refund_agent"
    assert crewai.coworker({"co_worker": "refund_agent"}) == "refund_agent"
    assert crewai.coworker({"coworker": "  "}) is None
    assert crewai.coworker({"coworker": '" "'}) is None
    assert crewai.coworker('{"coworker": "refund_agent"}') is None  # parsed arguments only
    assert crewai.same_role('"Refund\n  Agent"', "refund agent")
    assert not crewai.same_role("refund_agent", "refund agent")


def test_a_quoted_coworker_names_the_agent_crewai_ran_not_the_quotes() -> None:
    # CrewAI runs refund_agent for '"refund_agent"' (sanitize_agent_name removes the quotes)
    trace = only(openinference_spans(coworker='"refund_agent"'))

    assert [(c.tool_name, c.agent) for c in trace.calls] == [
        ("delegate work to coworker", "Crew Manager"),
        ("lookup_order", "refund_agent"),
        ("issue_refund", "refund_agent"),
    ]
    assert trace.agents == ("support_crew", "Crew Manager", "refund_agent")


def test_a_coworker_named_with_collapsed_whitespace_is_one_agent() -> None:
    trace = only(openinference_spans(coworker=" Refund \n  Agent "))

    assert [c.agent for c in trace.calls[1:]] == ["Refund Agent", "Refund Agent"]


def test_a_coworker_is_named_by_the_role_of_an_agent_span_crewai_matches() -> None:
    # the crew's first task ran the coworker's agent span: its role is the agent's spelling
    spans = [
        *openinference_spans(coworker='"refund   AGENT"'),
        agent(7, 1, "Refund Agent", 70, 80),
        tool(8, 7, "lookup_order", 71, 79, arguments='{"order_id": "A-1002"}'),
    ]

    trace = only(spans)

    assert [c.agent for c in trace.calls] == [
        "Crew Manager",
        "Refund Agent",
        "Refund Agent",
        "Refund Agent",
    ]
    assert trace.agents == ("support_crew", "Crew Manager", "Refund Agent")


def test_a_tool_nested_in_the_coworkers_tool_is_the_coworkers_call() -> None:
    spans = [*openinference_spans(), tool(6, 5, "charge_card", 42, 48, arguments='{"x": 1}')]

    calls = only(spans).calls

    assert [(c.tool_name, c.agent, c.parent_call_id) for c in calls] == [
        ("delegate work to coworker", "Crew Manager", None),
        ("lookup_order", "refund_agent", hexid(3)),
        ("issue_refund", "refund_agent", hexid(3)),
        ("charge_card", "refund_agent", hexid(5)),
    ]


def test_a_tool_nested_below_an_agent_in_the_coworkers_tool_is_that_agents() -> None:
    spans = [
        *openinference_spans(),
        agent(6, 5, "billing_agent", 41, 49),
        tool(7, 6, "charge_card", 42, 48, arguments='{"x": 1}'),
    ]

    calls = only(spans).calls

    assert [(c.tool_name, c.agent) for c in calls][-1] == ("charge_card", "billing_agent")


def test_a_quoted_coworkers_allowed_refund_is_no_dangerous_drift() -> None:
    # the policy allows refund_agent its refund; the manager ("*") may only delegate
    policy = PolicySettings.model_validate(
        {
            "dangerous_tools": ["issue_refund"],
            "allowed_tools": {
                "refund_agent": ["lookup_order", "issue_refund"],
                "*": ["delegate work to coworker"],
            },
        }
    )
    trace = only(openinference_spans(coworker='"refund_agent"'))

    result = Safety(SafetySettings(), policy)(trace, Reference())

    assert result.findings == ()


def test_a_long_coworker_name_is_not_sanitized_again_for_every_agent() -> None:
    # 12 delegations naming a 60,000-character coworker, 2,000 agents with a call: 24,000
    # pairs (under delegations._MAX_DELEGATION_CHECKS). Keying the name once per pair was ~1.4 GB
    # of string work, about 9 s for one trace; once per name, well under a second.
    asks, workers = 12, 2_000
    spans = [
        agent(1, None, "support_crew", 0, 10**6, convention=crewai.NAME),
        agent(2, 1, "Crew Manager", 1, 10**6 - 1),
    ]
    for j in range(asks):
        arguments = delegating("x" * 60_000)
        spans.append(llm(3 + j, 2, 2, 3 + j, ask("delegate_work_to_coworker", f"d{j}", arguments)))
    for i in range(workers):
        a = 10 + asks + 2 * i
        spans.append(agent(a, 2, "r", 100 + 3 * i, 101 + 3 * i))
        spans.append(llm(a + 1, a, 100 + 3 * i, 101 + 3 * i, ask("lookup_order", f"l{i}", {})))

    started = time.perf_counter()
    (trace,) = build(spans)
    seconds = time.perf_counter() - started

    assert {c.parent_call_id for c in trace.calls if c.tool_name == "lookup_order"} == {None}
    assert seconds < 2.0
