"""The timeline (DESIGN §5, CONVENTIONS §6): a trace's spans into ToolTraces (runs, agents
nested as tools, outer call ids, outermost agents, runs without an agent or a root, duplicates
and parent cycles)."""

from __future__ import annotations

import pytest
from assembly_support import MS, TRACE, agent, ask, build, hexid, llm, only, span, tool
from timeline_support import nested_spans, refund_spans

from tests import factories
from toolwatch.assembly.outputs import _REFUSES
from toolwatch.model import SpanRole


def test_refund_run_is_one_tooltrace_with_both_calls_in_order() -> None:
    assert build(refund_spans()) == [
        factories.tool_trace(
            trace_id=TRACE.hex(),
            run_span_id=hexid(1),
            service="refund-agent",
            agent="refund-bot",
            model="gpt-4o",
            calls=(
                factories.tool_call(
                    tool_name="lookup_order",
                    arguments={"order_id": "A-1001"},
                    call_id="call_1",
                    sequence_index=0,
                    agent="refund-bot",
                    span_id=hexid(3),
                    service="refund-agent",
                    start_ns=11 * MS,
                    end_ns=20 * MS,
                    result={},
                ),
                factories.tool_call(
                    tool_name="issue_refund",
                    raw_name="Issue_Refund",
                    arguments={"order_id": "A-1001", "amount_usd": 25.0},
                    call_id="call_2",
                    sequence_index=1,
                    agent="refund-bot",
                    span_id=hexid(5),
                    service="refund-agent",
                    start_ns=31 * MS,
                    end_ns=40 * MS,
                    result="ok",
                ),
            ),
            final_text="Your refund of $25 is on its way.",
            end_ns=100 * MS,
            span_count=6,
            conversation_id="conv-7",
            reference_keys={"case_id": "refund-1", "pair": "p-1"},
            agents=("refund-bot",),
        )
    ]


def test_incomplete_trace_flags_its_tooltrace() -> None:
    (trace,) = build(refund_spans(), complete=False, reason="timed_out")

    assert (trace.complete, trace.incomplete_reason) == (False, "timed_out")


def test_aliases_normalize_tool_names_but_raw_name_is_kept() -> None:
    spans = [agent(1, None, "a", 0, 10), tool(2, 1, " Refund ", 1, 2)]

    (call,) = only(spans).calls
    assert (call.tool_name, call.raw_name) == ("issue_refund", " Refund ")


def test_agent_as_tool_calls_belong_to_the_outer_run() -> None:
    (trace,) = build(nested_spans())

    assert (trace.agent, trace.run_span_id, trace.span_count) == ("support-bot", hexid(1), 8)
    assert [(c.tool_name, c.parent_call_id, c.agent) for c in trace.calls] == [
        ("ask_billing", None, "support-bot"),
        ("lookup_order", "call_outer", "billing-bot"),
    ]


def test_a_run_lists_every_agent_that_ran_in_it_even_one_that_made_no_call() -> None:
    spans = nested_spans()
    (trace,) = build(spans)
    assert trace.agents == ("support-bot", "billing-bot")
    # The nested agent answers without calling lookup_order: it still ran in the run.
    quiet = [s for s in spans if s.span_id.hex() not in {hexid(5), hexid(6)}]
    (trace,) = build(quiet)
    assert ([c.tool_name for c in trace.calls], trace.agents) == (
        ["ask_billing"],
        ("support-bot", "billing-bot"),
    )
    # Each agent once, however many times it ran; a run without agent spans lists none.
    again = [*spans, agent(9, 3, "billing-bot", 40, 58)]
    assert only(again).agents == ("support-bot", "billing-bot")
    assert only([tool(2, None, "lookup_order", 1, 2)]).agents == ()


def test_final_text_is_the_outer_runs_not_the_nested_agents() -> None:
    spans = nested_spans()
    # The nested agent's answer ends last here; it is still not the outer run's answer.
    spans[6] = llm(7, 4, 21, 75, output_text="Order delivered.")

    assert only(spans).final_text == "It was delivered."


def test_nested_call_without_an_outer_call_id_uses_the_outer_span_id() -> None:
    spans = [
        agent(1, None, "outer", 0, 100),
        tool(2, 1, "delegate", 1, 50),
        agent(3, 2, "inner", 2, 49),
        tool(4, 3, "lookup_order", 3, 10),
    ]

    calls = only(spans).calls
    assert [c.parent_call_id for c in calls] == [None, hexid(2)]


def test_outer_call_id_from_the_request_reaches_nested_calls() -> None:
    spans = [
        agent(1, None, "outer", 0, 100),
        llm(2, 1, 1, 2, ask("delegate", "call_d", {})),
        tool(3, 1, "delegate", 3, 50),  # no call id on the span (OpenAI Agents)
        agent(4, 3, "inner", 4, 49),
        tool(5, 4, "lookup_order", 5, 10),
    ]

    calls = only(spans).calls
    assert [(c.call_id, c.parent_call_id) for c in calls] == [("call_d", None), (None, "call_d")]


def test_two_outermost_agents_are_two_tooltraces() -> None:
    spans = [
        span(1, None, SpanRole.OTHER, 0, 100, name="Agent workflow"),
        agent(2, 1, "triage", 1, 40),
        tool(3, 2, "lookup_order", 5, 10),
        agent(4, 1, "billing", 41, 90),
        tool(5, 4, "issue_refund", 50, 60),
    ]  # no handoff between them (test_assembly_runs: those are one run)

    traces = build(spans)
    assert [(t.agent, t.run_span_id, t.tool_names, t.span_count) for t in traces] == [
        ("triage", hexid(2), ("lookup_order",), 2),
        ("billing", hexid(4), ("issue_refund",), 2),
    ]


def test_tool_outside_every_agent_is_kept_in_its_own_run() -> None:
    spans = [
        span(1, None, SpanRole.OTHER, 0, 100, name="request"),
        agent(2, 1, "triage", 1, 40),
        tool(3, 1, "audit_log", 50, 60),
    ]

    traces = build(spans)
    assert [(t.agent, t.run_span_id, t.tool_names) for t in traces] == [
        (None, hexid(1), ("audit_log",)),
        ("triage", hexid(2), ()),
    ]


def test_trace_without_agent_is_one_run_rooted_at_its_root() -> None:
    spans = [
        span(1, None, SpanRole.OTHER, 0, 100, name="workflow", service="svc"),
        llm(2, 1, 1, 10, ask("lookup_order", "c1", {}), model="claude"),
        tool(3, 1, "lookup_order", 11, 20, call_id="c1", agent_name="baggage-agent"),
    ]

    trace = only(spans)
    assert (trace.run_span_id, trace.agent, trace.model, trace.service) == (
        hexid(1),
        "baggage-agent",
        "claude",
        "svc",
    )
    assert trace.tool_names == ("lookup_order",)


def test_fragments_of_a_trace_without_root_are_one_run_with_a_synthetic_root() -> None:
    spans = [
        llm(2, 1, 5, 10, ask("lookup_order", "c1", {})),
        tool(3, 1, "lookup_order", 11, 20, call_id="c1"),
        tool(4, 9, "issue_refund", 21, 30),
    ]

    trace = only(spans)
    assert (trace.run_span_id, trace.start_ns, trace.end_ns, trace.span_count) == (
        None,
        5 * MS,
        30 * MS,
        3,
    )
    assert trace.tool_names == ("lookup_order", "issue_refund")


def test_duplicate_span_records_count_once() -> None:
    spans = refund_spans()

    assert build(spans + spans[:3]) == build(spans)


def test_parent_cycle_still_yields_each_call_once() -> None:
    spans = [
        span(1, 2, SpanRole.OTHER, 0, 100, name="a"),
        span(2, 1, SpanRole.OTHER, 0, 100, name="b"),
        tool(3, 2, "lookup_order", 1, 10),
    ]

    assert only(spans).tool_names == ("lookup_order",)


def test_a_long_finish_reason_is_read_but_not_remembered() -> None:
    """The reasons remembered between traces are short words: a hostile 64 KiB one would
    stay held for the life of the process."""
    long_reason = "content_filter" + "x" * 65_536
    spans = [
        agent(1, None, "a", 0, 10),
        llm(2, 1, 1, 5, output_text="no", finish_reasons=(long_reason, "content_filter")),
    ]
    assert only(spans).refusal is True
    assert long_reason not in _REFUSES
    assert "content_filter" in _REFUSES


@pytest.mark.parametrize("where", ["input", "output"])
def test_a_guardrail_that_tripped_refused_the_run_whatever_the_model_said(where: str) -> None:
    """An input guardrail that trips beside the first model call, or an output guardrail
    after the answer: the SDK raises, the answer is never given (real captures:
    ``openai_agents__{otel_contrib,logfire}__input_guardrail_blocking_client``)."""
    start = 2 if where == "input" else 31
    spans = [
        agent(1, None, "support", 0, 100, status_code=2),
        llm(2, 1, 1, 20, output_text="Here is how to pick that lock.", finish_reasons=("stop",)),
        span(3, 1, SpanRole.GUARDRAIL, start, 97, refusal=f"guardrail {where}_safety tripped"),
        llm(4, 3, start + 1, 96, output_text='{"is_flagged": true}', finish_reasons=("stop",)),
    ]
    run = only(spans)
    assert (run.refusal, run.refusal_reason, run.final_text) == (
        True,
        f"guardrail {where}_safety tripped",
        "Here is how to pick that lock.",
    )
