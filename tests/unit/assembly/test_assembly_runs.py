"""Which spans make a run: workflow agent spans, agents whose nesting the producer lost,
and refusal finish reasons seen in captured traces (tests/fixtures/otlp)."""

from __future__ import annotations

import pytest
from assembly_support import MS, agent, ask, build, handoff, hexid, llm, only, span, tool

from toolwatch.assembly import tree as span_tree
from toolwatch.assembly.timeline import REFUSAL_FINISH_REASONS
from toolwatch.model import SpanRecord, SpanRole


def test_strands_content_filtered_finish_reason_is_a_refusal() -> None:
    spans = [
        agent(1, None, "support_agent", 0, 100),
        llm(2, 1, 1, 50, finish_reasons=("content_filtered",)),
    ]

    trace = only(spans)
    assert (trace.refusal, trace.refusal_reason) == (True, "content_filtered")
    assert "content_filtered" in REFUSAL_FINISH_REASONS


# --- workflow agent spans -------------------------------------------------------------


def workflow_root(*inside: SpanRecord) -> list[SpanRecord]:
    """OpenInference openai-agents: the SDK trace as a root AGENT span, a CHAIN task span."""
    return [
        span(1, None, SpanRole.AGENT, 0, 200, name="Agent workflow", agent_name="Agent workflow"),
        span(2, 1, SpanRole.OTHER, 1, 199, name="Agent workflow"),
        *inside,
    ]


def test_workflow_agent_span_is_not_the_run_its_agent_is() -> None:
    spans = workflow_root(
        agent(3, 2, "support_agent", 2, 190),
        llm(4, 3, 3, 10, ask("lookup_order", "call_1", '{"order_id": "A-1"}')),
        tool(5, 3, "lookup_order", 11, 20),
        llm(6, 3, 21, 30, output_text="Refund issued."),
    )

    trace = only(spans)
    assert (trace.agent, trace.run_span_id, trace.final_text) == (
        "support_agent",
        hexid(3),
        "Refund issued.",
    )
    assert [(c.tool_name, c.call_id, c.agent) for c in trace.calls] == [
        ("lookup_order", "call_1", "support_agent")
    ]


def test_agents_inside_a_workflow_after_a_handoff_are_one_run() -> None:
    """A transfer run as a tool span (the GenAI spec's ``execute_tool transfer_to_X``)."""
    spans = workflow_root(
        agent(3, 2, "triage", 2, 60),
        tool(4, 3, "transfer_to_billing", 5, 10),
        agent(5, 2, "billing", 61, 150),
        tool(6, 5, "issue_refund", 70, 80),
    )

    traces = build(spans)
    assert [(t.agent, t.run_span_id, t.tool_names) for t in traces] == [
        ("triage", hexid(3), ("transfer_to_billing", "issue_refund")),
    ]


def test_a_transfer_tool_named_for_no_sibling_agent_is_no_handoff() -> None:
    """A bank's ``transfer_to_account`` tool, then another agent's run: two runs."""
    spans = workflow_root(
        agent(3, 2, "teller", 2, 60),
        tool(4, 3, "transfer_to_account", 5, 10),
        agent(5, 2, "auditor", 61, 150),
        tool(6, 5, "lookup_order", 70, 80),
    )
    assert [t.agent for t in build(spans)] == ["teller", "auditor"]


def test_agent_that_calls_a_model_itself_is_a_run_even_with_an_agent_inside() -> None:
    spans = [
        agent(1, None, "router", 0, 200),
        llm(2, 1, 1, 10, output_text="Routing."),
        agent(3, 1, "billing", 11, 100),
        tool(4, 3, "issue_refund", 20, 30),
    ]

    trace = only(spans)
    assert (trace.agent, trace.run_span_id, trace.final_text) == ("router", hexid(1), "Routing.")
    assert [(c.tool_name, c.agent) for c in trace.calls] == [("issue_refund", "billing")]


def test_agent_without_any_work_or_agent_inside_is_still_a_run() -> None:
    trace = only([agent(1, None, "idle", 0, 10), span(2, 1, SpanRole.OTHER, 1, 9)])

    assert (trace.agent, trace.run_span_id, trace.calls) == ("idle", hexid(1), ())


def test_workflow_inside_a_tool_is_skipped_for_the_nested_agent() -> None:
    spans = [
        agent(1, None, "concierge", 0, 200),
        tool(2, 1, "refund_desk", 10, 150, call_id="call_d"),
        agent(3, 2, "Agent workflow", 11, 149),
        agent(4, 3, "refund_desk_agent", 12, 148),
        tool(5, 4, "lookup_order", 20, 30),
    ]

    calls = only(spans).calls
    assert [(c.tool_name, c.parent_call_id, c.agent) for c in calls] == [
        ("refund_desk", None, "concierge"),
        ("lookup_order", "call_d", "refund_desk_agent"),
    ]


# --- agents whose nesting the producer lost ---------------------------------------------


def lost_nesting(nested_start: int = 18, nested_end: int = 140) -> list[SpanRecord]:
    """OpenLLMetry openai-agents 0.62: the as_tool() agent hangs from the workflow root."""
    return [
        span(1, None, SpanRole.OTHER, 0, 221, name="Agent Workflow"),
        agent(2, 1, "concierge", 1, 220),
        llm(3, 2, 2, 14, ask("refund_desk", "call_003", {"input": "check"})),
        tool(4, 2, "refund_desk", 16, 141),
        llm(5, 2, 142, 213, output_text="The refund desk says yes."),
        agent(6, 1, "refund_desk_agent", nested_start, nested_end),
        llm(7, 6, 19, 70, ask("lookup_order", "call_006", {"order_id": "A-1"})),
        tool(8, 6, "lookup_order", 73, 76),
        llm(9, 6, 79, 134, output_text="Eligible."),
    ]


def test_agent_inside_another_agents_tool_interval_is_nested_in_that_tool() -> None:
    trace = only(lost_nesting())

    assert (trace.agent, trace.run_span_id, trace.final_text, trace.span_count) == (
        "concierge",
        hexid(2),
        "The refund desk says yes.",
        9 - 1,  # every span but the workflow root
    )
    assert [(c.tool_name, c.call_id, c.parent_call_id, c.agent) for c in trace.calls] == [
        ("refund_desk", "call_003", None, "concierge"),
        ("lookup_order", "call_006", "call_003", "refund_desk_agent"),
    ]
    assert [c.parallel_group for c in trace.calls] == [None, None]


@pytest.mark.parametrize(("start", "end"), [(10, 100), (20, 150), (142, 200)])
def test_agent_not_wholly_inside_a_tool_stays_its_own_run(start: int, end: int) -> None:
    traces = build(lost_nesting(start, end))

    assert sorted((t.agent, t.tool_names, t.calls[0].parent_call_id) for t in traces) == [
        ("concierge", ("refund_desk",), None),
        ("refund_desk_agent", ("lookup_order",), None),
    ]


def test_handoff_to_a_sibling_agent_after_the_tools_is_not_nesting() -> None:
    spans = [
        span(1, None, SpanRole.OTHER, 0, 100, name="Agent Workflow"),
        agent(2, 1, "triage", 1, 40),
        tool(3, 2, "transfer_to_billing", 5, 10),
        agent(4, 1, "billing", 41, 90),
        tool(5, 4, "issue_refund", 50, 60),
    ]

    (trace,) = build(spans)  # one run across the handoff, no call nested in another
    assert (trace.agents, trace.tool_names, [c.parent_call_id for c in trace.calls]) == (
        ("triage", "billing"),
        ("transfer_to_billing", "issue_refund"),
        [None, None],
    )


def test_tool_that_already_holds_an_agent_adopts_no_other() -> None:
    spans = [
        span(1, None, SpanRole.OTHER, 0, 200, name="orchestrator"),
        agent(2, 1, "a", 1, 199),
        tool(3, 2, "ask_b", 10, 150),
        agent(4, 3, "b", 11, 149),
        agent(5, 1, "c", 20, 30),
        tool(6, 5, "lookup_order", 21, 29),
    ]

    assert [(t.agent, t.tool_names) for t in build(spans)] == [
        ("a", ("ask_b",)),
        ("c", ("lookup_order",)),
    ]


def test_agent_hanging_from_elsewhere_than_above_the_tool_is_not_adopted() -> None:
    spans = [
        span(1, None, SpanRole.OTHER, 0, 200, name="request A"),
        agent(2, 1, "a", 1, 199),
        tool(3, 2, "slow_tool", 10, 150),
        span(4, None, SpanRole.OTHER, 0, 200, name="request B"),
        agent(5, 4, "b", 20, 30),
        tool(6, 5, "lookup_order", 21, 29),
    ]

    assert [(t.agent, t.tool_names) for t in build(spans)] == [
        ("a", ("slow_tool",)),
        ("b", ("lookup_order",)),
    ]


def test_innermost_holding_tool_adopts_the_agent() -> None:
    spans = [
        span(1, None, SpanRole.OTHER, 0, 300, name="Agent Workflow"),
        agent(2, 1, "outer", 1, 299),
        tool(3, 2, "long_task", 10, 250, call_id="call_long"),
        agent(4, 1, "middle", 11, 249),
        tool(5, 4, "ask_inner", 20, 200, call_id="call_inner"),
        agent(6, 1, "inner", 30, 190),
        tool(7, 6, "lookup_order", 40, 50),
    ]

    calls = only(spans).calls
    assert [(c.tool_name, c.parent_call_id) for c in calls] == [
        ("long_task", None),
        ("ask_inner", "call_long"),
        ("lookup_order", "call_inner"),
    ]


def split_nesting(*, work_start: int = 30, work_end: int = 140) -> list[SpanRecord]:
    """OpenLLMetry LangChain: the agent a tool runs is an empty span beside its work, both
    under the tool span."""
    return [
        agent(1, None, "concierge", 0, 200),
        tool(2, 1, "refund_desk", 10, 160, call_id="call_desk"),
        agent(3, 2, "refund_desk_agent", 20, 150),
        span(4, 2, SpanRole.OTHER, work_start, work_end, name="execute_task refund_desk_agent"),
        span(5, 4, SpanRole.OTHER, work_start + 1, work_start + 9, name="execute_task tools"),
        tool(6, 5, "lookup_order", work_start + 2, work_start + 8),
    ]


def test_work_beside_an_agent_under_a_tool_within_its_interval_is_that_agents() -> None:
    (trace,) = build(split_nesting())

    assert trace.agents == ("concierge", "refund_desk_agent")
    assert [(c.tool_name, c.agent, c.parent_call_id) for c in trace.calls] == [
        ("refund_desk", "concierge", None),
        ("lookup_order", "refund_desk_agent", "call_desk"),
    ]


@pytest.mark.parametrize(("start", "end"), [(15, 140), (30, 155), (151, 158)])
def test_work_beside_an_agent_under_a_tool_outside_its_interval_is_the_tools(
    start: int, end: int
) -> None:
    (trace,) = build(split_nesting(work_start=start, work_end=end))

    assert [(c.tool_name, c.agent) for c in trace.calls] == [
        ("refund_desk", "concierge"),
        ("lookup_order", "concierge"),
    ]


def test_work_beside_two_agents_under_a_tool_is_the_innermost_agents() -> None:
    spans = [
        agent(1, None, "concierge", 0, 200),
        tool(2, 1, "refund_desk", 10, 160),
        agent(3, 2, "outer_desk", 20, 150),
        agent(7, 2, "inner_desk", 25, 145),
        span(4, 2, SpanRole.OTHER, 30, 140, name="execute_task"),
        tool(6, 4, "lookup_order", 32, 38),
    ]

    (trace,) = build(spans)
    assert [(c.tool_name, c.agent) for c in trace.calls] == [
        ("refund_desk", "concierge"),
        ("lookup_order", "inner_desk"),
    ]


def test_work_beside_agents_over_the_check_bound_keeps_its_recorded_tree(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 1 agent under the tool x 2 spans under it (itself, its work) = 2 checks, over 1.
    monkeypatch.setattr(span_tree, "_MAX_ADOPTION_CHECKS", 1)

    (trace,) = build(split_nesting())
    assert [(c.tool_name, c.agent) for c in trace.calls] == [
        ("refund_desk", "concierge"),
        ("lookup_order", "concierge"),
    ]


def test_trace_over_the_containment_check_bound_keeps_its_recorded_tree(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 2 agents with no tool above x 2 candidate tools = 4 checks, over a bound of 3.
    monkeypatch.setattr(span_tree, "_MAX_ADOPTION_CHECKS", 3)

    assert [t.agent for t in build(lost_nesting())] == ["concierge", "refund_desk_agent"]


def handoff_spans(*, marker: SpanRecord | None = None, second_start: int = 30) -> list[SpanRecord]:
    """A workflow root (1) holding triage (2), which looks an order up and hands off, and
    refunds (10), which refunds it: the OpenAI Agents SDK's sibling agent spans."""
    handing = [] if marker is not None else [ask("transfer_to_refunds", "call_t", "{}", 0)]
    return [
        span(1, None, SpanRole.OTHER, 0, 100, name="Agent workflow"),
        agent(2, 1, "triage", 1, 29),
        llm(3, 2, 2, 5, ask("lookup_order", "call_l", {"order_id": "A-1"})),
        tool(4, 2, "lookup_order", 6, 8, arguments={"order_id": "A-1"}),
        llm(5, 2, 10, 12, *handing),
        *([marker] if marker is not None else []),
        agent(10, 1, "refunds", second_start, 99),
        llm(11, 10, 40, 45, ask("issue_refund", "call_r", {"order_id": "A-1"})),
        tool(12, 10, "issue_refund", 46, 50, arguments={"order_id": "A-1"}),
        llm(13, 10, 55, 60, output_text="Refunded."),
    ]


def test_agents_that_hand_off_are_one_run_led_by_the_first() -> None:
    trace = only(handoff_spans())
    assert (trace.agent, trace.agents, trace.run_span_id) == (
        "triage",
        ("triage", "refunds"),
        hexid(2),
    )
    assert [(c.tool_name, c.agent) for c in trace.calls] == [
        ("lookup_order", "triage"),
        ("transfer_to_refunds", "triage"),
        ("issue_refund", "refunds"),
    ]
    assert trace.final_text == "Refunded."
    assert (trace.start_ns, trace.end_ns, trace.span_count) == (1 * MS, 99 * MS, 8)


@pytest.mark.parametrize(
    "name", ["handoff to refunds", "agent_handoff OpenAI Agent", "triage → unknown.handoff"]
)
def test_a_handoff_span_hands_off_when_no_transfer_call_was_recorded(name: str) -> None:
    marker = handoff(6, 2, name, 13, 14)
    assert only(handoff_spans(marker=marker)).agents == ("triage", "refunds")


def test_sibling_runs_without_a_handoff_stay_apart() -> None:
    marker = span(6, 2, SpanRole.OTHER, 13, 14, name="turn")
    assert [t.agent for t in build(handoff_spans(marker=marker))] == ["triage", "refunds"]


def test_a_sibling_that_started_before_the_handoff_is_not_its_target() -> None:
    assert [t.agent for t in build(handoff_spans(second_start=9))] == ["triage", "refunds"]


def test_a_chain_of_handoffs_is_one_run() -> None:
    spans = handoff_spans()
    spans[-1] = llm(13, 10, 55, 60, ask("transfer_to_billing", "call_b", "{}", 0))
    spans += [agent(20, 1, "billing", 100, 130), llm(21, 20, 101, 110, output_text="Done.")]
    (trace,) = build(spans)
    assert trace.agents == ("triage", "refunds", "billing")
    assert trace.final_text == "Done."


def test_agents_used_as_tools_at_once_are_adopted_by_the_tool_named_for_them() -> None:
    """OpenLLMetry hangs each agent an ``as_tool`` call ran from the workflow root: two such
    calls at once each hold both agents' intervals, so the tool's name tells which ran which
    (the innermost alone gave both agents to the later call)."""
    spans = [
        span(1, None, SpanRole.OTHER, 0, 300, name="Agent Workflow"),
        agent(2, 1, "concierge", 1, 299),
        tool(3, 2, "refund_desk", 10, 200, call_id="call_r"),
        tool(4, 2, "shipping_desk", 11, 201, call_id="call_s"),
        agent(5, 1, "refund_desk_agent", 20, 150),
        tool(6, 5, "lookup_order", 30, 40),
        agent(7, 1, "Shipping_Desk_Agent", 21, 160),
        tool(8, 7, "track_package", 50, 60),
    ]
    calls = only(spans).calls
    assert [(c.tool_name, c.parent_call_id) for c in calls] == [
        ("refund_desk", None),
        ("shipping_desk", None),
        ("lookup_order", "call_r"),
        ("track_package", "call_s"),
    ]


def test_requests_run_at_once_in_one_trace_each_join_their_own_handoff() -> None:
    """Two requests under one trace, triage then refunds each, interleaved: each refunds
    run joins the triage run that ended last before it started, once."""
    spans = [
        span(1, None, SpanRole.OTHER, 0, 200, name="Agent workflow"),
        agent(2, 1, "triage", 1, 30),
        llm(3, 2, 2, 5, ask("transfer_to_refunds", "t1", "{}")),
        agent(4, 1, "triage", 3, 40),
        llm(5, 4, 4, 6, ask("transfer_to_refunds", "t2", "{}")),
        agent(6, 1, "refunds", 31, 100),
        tool(7, 6, "issue_refund", 50, 60, arguments={"order_id": "A-1"}),
        agent(8, 1, "refunds", 41, 110),
        tool(9, 8, "issue_refund", 70, 80, arguments={"order_id": "B-2"}),
    ]
    runs = [(t.run_span_id, [c.span_id for c in t.calls if c.span_id]) for t in build(spans)]
    assert runs == [(hexid(2), [hexid(7)]), (hexid(4), [hexid(9)])]


@pytest.mark.parametrize(
    "marker",
    [
        "handoff to refunds_agent",  # OpenInference
        "agent_handoff OpenAI Agent",  # the contrib instrumentation, gen_ai.handoff.to_agent
        "Handoff: {from_agent} → {to_agent}",  # Logfire, to_agent
    ],
)
def test_a_handoff_to_one_agent_joins_no_other(marker: str) -> None:
    """The triage agent hands off to refunds_agent, which never runs; the next request's
    faq agent is no part of its run: the handoff span names its target (recognition puts it
    in tool_name)."""
    spans = [
        span(1, None, SpanRole.OTHER, 0, 200, name="Agent workflow"),
        agent(2, 1, "triage", 1, 30),
        span(4, 2, SpanRole.OTHER, 6, 7, name=marker, tool_name="refunds_agent"),
        agent(5, 1, "faq", 31, 100),
        tool(6, 5, "issue_refund", 50, 60),
    ]
    assert [t.agent for t in build(spans)] == ["triage", "faq"]


def test_a_renamed_handoff_tool_hands_off_by_its_unnamed_span() -> None:
    """handoff(refunds, tool_name_override="transfer_to_desk") under OpenLLMetry, whose
    handoff span names no target: the call names no sibling, so the span decides."""
    spans = [
        span(1, None, SpanRole.OTHER, 0, 200, name="Agent workflow"),
        agent(2, 1, "triage", 1, 30),
        llm(3, 2, 2, 5, ask("transfer_to_desk", "t1", "{}")),
        handoff(4, 2, "triage → unknown.handoff", 6, 7),
        agent(5, 1, "refunds", 31, 100),
        tool(6, 5, "issue_refund", 50, 60),
    ]
    assert [t.agents for t in build(spans)] == [("triage", "refunds")]


@pytest.mark.parametrize(("name", "transfer"), [("\u0130ade Ajan\u0131", "transfer_to__ade_ajan_")])
def test_a_transfer_names_its_agent_as_the_sdk_writes_it(name: str, transfer: str) -> None:
    """The SDK replaces what is not an ASCII letter, digit or _ first, then lowercases."""
    spans = [
        span(1, None, SpanRole.OTHER, 0, 200, name="Agent workflow"),
        agent(2, 1, "triage", 1, 30),
        llm(3, 2, 2, 5, ask(transfer, "t1", "{}")),
        agent(5, 1, name, 31, 100),
        tool(6, 5, "issue_refund", 50, 60),
    ]
    assert [t.agents for t in build(spans)] == [("triage", name)]


def test_seventeen_requests_at_once_each_join_their_own_handoff() -> None:
    """Requests run at once under one trace (asyncio.gather in one trace()): all triage runs
    start before any refunds run, and each refunds run still finds its handoff."""
    count = 17
    spans = [span(1, None, SpanRole.OTHER, 0, 10_000, name="Agent workflow")]
    for i in range(count):
        triage, refunds = 100 + 10 * i, 1000 + 10 * i
        spans += [
            agent(triage, 1, "triage", 1 + i, 100 + 10 * i),
            llm(triage + 1, triage, 2 + i, 50 + i, ask("transfer_to_refunds", f"t{i}", "{}")),
            agent(refunds, 1, "refunds", 100 + 10 * i, 500 + i),
            tool(refunds + 1, refunds, "issue_refund", 200 + i, 210 + i),
        ]
    traces = build(spans)
    assert len(traces) == count
    assert all(t.agents == ("triage", "refunds") for t in traces)


def test_each_handing_off_run_joins_the_run_after_it_and_only_one() -> None:
    """Two triage runs under one trace end at 10 and 20; refunds runs start at 21 and 22.
    The handoff that ended last is the one a run that starts next was handed: each joins one."""
    spans = [
        span(1, None, SpanRole.OTHER, 0, 200, name="Agent workflow"),
        agent(2, 1, "triage", 1, 10),
        llm(3, 2, 2, 5, ask("transfer_to_refunds", "t1", "{}")),
        agent(4, 1, "triage", 3, 20),
        llm(5, 4, 4, 6, ask("transfer_to_refunds", "t2", "{}")),
        agent(6, 1, "refunds", 21, 100),
        tool(7, 6, "issue_refund", 50, 60),
        agent(8, 1, "refunds", 22, 110),
        tool(9, 8, "issue_refund", 70, 80),
    ]
    runs = sorted((t.run_span_id, [c.span_id for c in t.calls if c.span_id]) for t in build(spans))
    assert runs == [(hexid(2), [hexid(9)]), (hexid(4), [hexid(7)])]


def test_an_unnamed_handoff_span_does_not_join_a_sibling_when_a_call_names_another() -> None:
    """The model asked for transfer_to_refunds: a faq run that happens to start at once is
    not the target, refunds (started later) is."""
    spans = [
        span(1, None, SpanRole.OTHER, 0, 200, name="Agent workflow"),
        agent(2, 1, "triage", 1, 30),
        llm(3, 2, 2, 5, ask("transfer_to_refunds", "t1", "{}")),
        handoff(4, 2, "triage → unknown.handoff", 6, 7),
        agent(5, 1, "faq", 31, 40),
        agent(6, 1, "refunds", 45, 100),
        tool(7, 6, "issue_refund", 50, 60),
    ]
    assert sorted(t.agents for t in build(spans)) == [("faq",), ("triage", "refunds")]


def test_an_unnamed_handoff_span_joins_no_later_turn() -> None:
    """OpenLLMetry: transfer_to_refunds_agent, whose run never came, and a handoff span that
    names no one; the next turn's faq agent starts a second later: no part of the run."""
    spans = [
        span(1, None, SpanRole.OTHER, 0, 5_000, name="Agent workflow"),
        agent(2, 1, "triage", 1, 30),
        llm(3, 2, 2, 5, ask("transfer_to_refunds_agent", "t1", "{}")),
        handoff(4, 2, "triage → unknown.handoff", 6, 7),
        agent(5, 1, "faq", 1_030, 1_100),
        tool(6, 5, "issue_refund", 1_050, 1_060),
    ]
    assert [t.agent for t in build(spans)] == ["triage", "faq"]


def test_a_handoff_inside_an_agent_used_as_a_tool_is_not_the_runs() -> None:
    """billing, called as a tool, hands off to ledger inside that call: the outer run did
    not hand off, so the next turn's agent stays apart."""
    spans = [
        span(1, None, SpanRole.OTHER, 0, 5_000, name="Agent workflow"),
        agent(2, 1, "triage", 1, 100),
        tool(3, 2, "billing", 10, 90, call_id="call_b"),
        agent(4, 3, "billing", 11, 50),
        handoff(5, 4, "billing → unknown.handoff", 20, 21),
        agent(6, 3, "ledger", 51, 89),
        agent(7, 1, "faq", 101, 200),
        tool(8, 7, "lookup_order", 150, 160),
    ]
    assert [t.agent for t in build(spans)] == ["triage", "faq"]
