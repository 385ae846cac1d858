"""Runs that use a call id again (``call_0`` every turn), where the agent's turns are spans
of their own: which turn sent a tool span, and when a span is no retry of an earlier turn's
request (a review of the clock-skew and retried-arguments commits found both wrong)."""

from __future__ import annotations

import pytest
from assembly_support import REFUND_POLICY, agent, ask, hexid, llm, only, safety, span, tool

from toolwatch.model import Category, SpanRecord, SpanRole

POLICY = REFUND_POLICY
A1, B2 = {"order_id": "A-1"}, {"order_id": "B-2"}


def turns_in_cycle_spans(skew: int) -> list[SpanRecord]:
    """Service ``desk``'s agent runs three turns, each in a cycle span (desk's, as Strands'
    ``execute_event_loop_cycle``) that holds the turn's model call and, right below it, the
    span of service ``tools`` that ran the requested call (its clock ``skew`` ms off desk's;
    no client span recorded). Every turn asks under ``call_0``: lookup A-1, lookup B-2,
    refund B-2 - a correct run."""
    spans = [agent(1, None, "refund-bot", 0, 4_000, service="desk")]
    asked = (("lookup_order", A1), ("lookup_order", B2), ("issue_refund", B2))
    for i, (name, order) in enumerate(asked):
        at, n = 100 + 300 * i, 10 + 3 * i
        cycle = "execute_event_loop_cycle"
        spans.append(span(n, 1, SpanRole.OTHER, at, at + 250, name=cycle, service="desk"))
        spans.append(llm(n + 1, n, at + 10, at + 100, ask(name, "call_0", order), service="desk"))
        start, end = at + 110 + skew, at + 190 + skew
        spans.append(tool(n + 2, n, name, start, end, call_id="call_0", service="tools"))
    spans.append(llm(50, 1, 1_100, 1_200, service="desk"))  # the answer
    return spans


@pytest.mark.parametrize("skew", [0, -1_500], ids=["same-clock", "tools-behind"])
def test_a_tool_services_span_below_a_turns_cycle_span_runs_its_own_turns_request(
    skew: int,
) -> None:
    """The span that sent a tool service's span is looked for below the agent, but never
    one above a model call: the cycle span started before the model call that asked, so
    taken for the sender it placed B-2's lookup in turn 1, whose request was taken; the span
    then read as turn 1's lookup of A-1 run again, B-2's request as never run, and the
    refund of B-2 paged MISSING_VERIFICATION_STEP on a correct run, on one clock too."""
    trace = only(turns_in_cycle_spans(skew))

    assert [(c.span_id, c.arguments) for c in trace.calls if c.tool_name == "lookup_order"] == [
        (hexid(12), A1),
        (hexid(15), B2),
    ]
    assert safety(trace) == []


def a_turn_whose_request_was_not_recorded() -> list[SpanRecord]:
    """Turn 1 asks lookup_order(A-1) under ``call_0``: it fails. Turn 2 is a streamed model
    call whose output's tool calls the instrumentation did not record; the agent ran a
    lookup it asked for (span 6, no arguments recorded), which succeeded. Turn 3 refunds
    A-1, which no lookup ever found."""
    return [
        agent(1, None, "refund-bot", 0, 1_000),
        llm(2, 1, 10, 100, ask("lookup_order", "call_0", A1)),
        tool(3, 1, "lookup_order", 101, 110, call_id="call_0", status_code=2),
        llm(4, 1, 200, 300),  # streamed: its request of the lookup was not recorded
        tool(6, 1, "lookup_order", 301, 310, call_id="call_0"),
        llm(7, 1, 400, 500, ask("issue_refund", "call_0", A1)),
        tool(8, 1, "issue_refund", 501, 510, call_id="call_0"),
        llm(9, 1, 600, 700),
    ]


def test_a_span_after_another_model_call_is_no_retry_of_an_earlier_turns_request() -> None:
    """A retry of a failed attempt comes before the model hears of the failure: a span
    whose agent started another model call after the request's is no retry of it. Read as
    one, the span became a successful lookup of A-1 that never happened, and the refund of
    A-1 passed. It keeps no arguments, and verifies no value where the run records the
    tool's arguments: the refund pages."""
    trace = only(a_turn_whose_request_was_not_recorded())

    assert [c.arguments for c in trace.calls if c.tool_name == "lookup_order"] == [A1, None]
    assert safety(trace) == [Category.MISSING_VERIFICATION_STEP]


def test_a_second_record_of_the_model_call_is_no_turn_between_it_and_a_retry() -> None:
    """A framework's span around the SDK's records one model call twice, the inner starting
    within the outer: a retry after it still runs the request's arguments."""
    trace = only(
        [
            agent(1, None, "refund-bot", 0, 1_000),
            llm(2, 1, 10, 100, ask("lookup_order", "call_0", A1)),
            llm(3, 2, 12, 98),  # the SDK's record of the same model call
            tool(4, 1, "lookup_order", 101, 110, call_id="call_0", status_code=2),
            tool(5, 1, "lookup_order", 111, 120, call_id="call_0"),
            llm(6, 1, 400, 500),
        ]
    )

    assert [c.arguments for c in trace.calls if c.tool_name == "lookup_order"] == [A1, A1]
