"""The timeline gives each call the service that wrote it (``ToolCall.service``), which is
the producer ``safety`` judges a verification's missing arguments by: a success without
arguments verifies any value only where its service records none of that tool's arguments
in the run.

The run: service ``desk`` records arguments, looks A-1 up, asks ``ask_billing``, an agent used
as a tool on service ``billing`` whose GenAI instrumentation captures no content (billing's
``lookup_order``: no arguments, no call id), then refunds B-2. Billing's argument-less success
verifies any value (its producer records none), so the run does not page, whatever the
agents are called: keyed by the agent's name (review5), it paged when the two agents shared a
name (Strands' default ``Strands Agents``), when no agent span was written (agent ``None``),
and when billing's nested run wrote no agent span of its own (its calls are desk's agent).
"""

from __future__ import annotations

import pytest
from assembly_support import REFUND_POLICY, agent, ask, llm, only, span, tool

from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.safety import Safety
from toolwatch.evaluation.settings import SafetySettings
from toolwatch.model import Category, SpanRecord, SpanRole
from toolwatch.model_evaluation import EvalResult
from toolwatch.model_traces import ToolTrace

POLICY = REFUND_POLICY
A1, B2 = {"order_id": "A-1"}, {"order_id": "B-2"}


def evaluate(trace: ToolTrace) -> EvalResult:
    return Safety(SafetySettings(), POLICY)(trace, Reference())


def desk_asks_billing(desk_agent: str | None, billing_agent: str | None) -> list[SpanRecord]:
    """Desk (content captured) looks up A-1, asks billing (no content captured), whose own
    lookup of B-2 records no arguments, then refunds B-2. ``None``: no agent span."""
    if desk_agent is not None:
        spans = [agent(1, None, desk_agent, 0, 1_000, service="desk")]
    else:
        spans = [span(1, None, SpanRole.OTHER, 0, 1_000, name="handle", service="desk")]
    spans += [
        llm(2, 1, 5, 50, ask("lookup_order", "c1", A1), service="desk"),
        tool(3, 1, "lookup_order", 51, 60, call_id="c1", service="desk"),
        llm(4, 1, 70, 100, ask("ask_billing", "c2", {"q": "B-2?"}), service="desk"),
        tool(5, 1, "ask_billing", 101, 300, call_id="c2", service="desk"),
    ]
    parent = 5
    if billing_agent is not None:
        spans.append(agent(6, 5, billing_agent, 102, 299, service="billing"))
        parent = 6
    spans += [
        llm(7, parent, 110, 150, service="billing"),  # content capture off: no requests
        tool(8, parent, "lookup_order", 151, 160, service="billing"),  # no arguments, no id
        llm(9, parent, 170, 200, service="billing"),
        llm(10, 1, 310, 350, ask("issue_refund", "c3", B2), service="desk"),
        tool(11, 1, "issue_refund", 351, 360, call_id="c3", service="desk"),
        llm(12, 1, 400, 450, service="desk"),
    ]
    return spans


def test_each_call_carries_the_service_of_its_tool_span() -> None:
    trace = only(desk_asks_billing("desk", "billing"))
    assert [(c.tool_name, c.service) for c in trace.calls] == [
        ("lookup_order", "desk"),
        ("ask_billing", "desk"),
        ("lookup_order", "billing"),
        ("issue_refund", "desk"),
    ]


def test_a_call_never_run_carries_the_service_of_the_model_call_that_asked_for_it() -> None:
    trace = only(
        [
            agent(1, None, "desk", 0, 1_000, service="desk"),
            llm(2, 1, 5, 50, ask("lookup_order", "c1", A1), service="desk"),
            tool(3, 1, "lookup_order", 51, 60, call_id="c1", service="tools"),
            llm(4, 1, 70, 100, ask("lookup_order", "c2", B2), service="desk"),  # never run
            llm(5, 1, 110, 150, service="desk"),
        ]
    )
    assert [(c.call_id, c.span_id is None, c.service) for c in trace.calls] == [
        ("c1", False, "tools"),
        ("c2", True, "desk"),
    ]


@pytest.mark.parametrize(
    ("desk_agent", "billing_agent"),
    [
        ("desk", "billing"),  # distinct names: held when keyed by the agent too
        ("Strands Agents", "Strands Agents"),  # both left at Strands' default name
        (None, None),  # no agent spans at all: every call's agent is None
        ("desk", None),  # billing's nested run writes no agent span: its calls are desk's
    ],
    ids=["distinct-agent-names", "shared-default-name", "no-agent-spans", "nested-run-no-agent"],
)
def test_a_lookup_by_a_service_that_records_no_arguments_verifies_any_value(
    desk_agent: str | None, billing_agent: str | None
) -> None:
    """Billing's lookup is not read as one that lost its arguments because desk's, another
    service's, recorded them: no MISSING_VERIFICATION_STEP on issue_refund(B-2)."""
    assert evaluate(only(desk_asks_billing(desk_agent, billing_agent))).findings == ()


def test_another_agent_of_a_service_that_records_arguments_lost_its_own() -> None:
    """Two agents of one service, one instrumentation: triage's lookup of A-1 carries its
    arguments, so the refund agent's lookup, its request not paired (the model call's output
    lost), lost its own and verifies no value: issue_refund(B-2) pages. Keyed by the agent
    too, it would verify any value."""
    trace = only(
        [
            agent(1, None, "triage", 0, 1_000, service="desk"),
            llm(2, 1, 5, 50, ask("lookup_order", "c1", A1), service="desk"),
            tool(3, 1, "lookup_order", 51, 60, call_id="c1", service="desk"),
            llm(4, 1, 70, 100, ask("ask_refunds", "c2", {"q": "B-2"}), service="desk"),
            tool(5, 1, "ask_refunds", 101, 300, call_id="c2", service="desk"),
            agent(6, 5, "refunds", 102, 299, service="desk"),
            llm(7, 6, 110, 150, service="desk"),  # its request not recorded
            tool(8, 6, "lookup_order", 151, 160, service="desk"),
            llm(9, 6, 170, 200, service="desk"),
            llm(10, 1, 310, 350, ask("issue_refund", "c3", B2), service="desk"),
            tool(11, 1, "issue_refund", 351, 360, call_id="c3", service="desk"),
            llm(12, 1, 400, 450, service="desk"),
        ]
    )
    assert [c.agent for c in trace.calls if c.tool_name == "lookup_order"] == ["triage", "refunds"]
    (finding,) = evaluate(trace).findings
    assert finding.category is Category.MISSING_VERIFICATION_STEP
    assert finding.details["unrecorded_verification_calls"] == 1
