"""The timeline: a run's refusal and final text (the outer run's, a transferred-to agent's, the
last model output's; finish reasons and refusal parts) and failed calls."""

from __future__ import annotations

import pytest
from assembly_support import agent, ask, llm, only, span, tool
from timeline_support import nested_spans, refund_spans

from toolwatch.model import CallStatus, SpanRecord, SpanRole


def test_a_nested_agents_refusal_is_not_the_outer_runs() -> None:
    spans = nested_spans()
    spans[6] = llm(7, 4, 21, 30, output_text="I can't.", finish_reasons=("content_filter",))
    trace = only(spans)
    assert (trace.refusal, trace.refusal_reason) == (False, None)
    assert trace.final_text == "It was delivered."

    spans[7] = llm(8, 1, 61, 70, output_text="No.", finish_reasons=("content_filter",))
    assert (only(spans).refusal, only(spans).refusal_reason) == (True, "content_filter")


def test_a_refusal_on_a_nested_agents_own_span_is_not_the_outer_runs() -> None:
    spans = nested_spans()
    spans[3] = agent(4, 3, "billing-bot", 7, 59, refusal="I can't share that order.")
    assert (only(spans).refusal, only(spans).refusal_reason) == (False, None)
    # The same agent transferred to (no tool span between) refuses for the run.
    spans = transfer_spans()
    spans[4] = agent(5, 2, "billing", 13, 98, refusal="I can't share that order.")
    trace = only(spans)
    assert (trace.refusal, trace.refusal_reason) == (True, "I can't share that order.")


@pytest.mark.parametrize(
    ("first", "then", "refused"),
    [
        (("content_filter",), ("stop",), False),  # filtered once, retried, answered
        (("stop",), ("content_filter",), True),  # answered a step, then refused
        (("content_filter",), ("content_filter",), True),
    ],
)
def test_a_run_refuses_when_its_last_model_output_does(
    first: tuple[str, ...], then: tuple[str, ...], refused: bool
) -> None:
    """One model call of the run hit a content filter; the run is judged by how it ended,
    not by the first refusal any call met (REFUSAL_REGRESSION paged high on a run that
    answered)."""
    spans = [
        agent(1, None, "support", 0, 100),
        llm(2, 1, 1, 10, output_text="...", finish_reasons=first),
        llm(3, 1, 11, 20, output_text="Here is your order.", finish_reasons=then),
    ]
    trace = only(spans)
    assert (trace.refusal, trace.refusal_reason) == (
        (True, "content_filter") if refused else (False, None)
    )


def test_an_agent_transferred_to_inside_a_model_span_refuses_for_the_run() -> None:
    """ADK: the coordinator's call_llm span (its output, the transfer) holds the sub-agent
    and ends after the sub-agent's refusal."""
    spans = [
        agent(1, None, "coordinator", 0, 100),
        llm(2, 1, 1, 99, ask("transfer_to_agent", "t1", {"agent_name": "billing"})),
        tool(4, 2, "transfer_to_agent", 11, 12, call_id="t1"),
        agent(5, 2, "billing", 13, 98),
        llm(6, 5, 14, 90, finish_reasons=("safety",)),
    ]
    trace = only(spans)
    assert (trace.refusal, trace.refusal_reason) == (True, "safety")


def transfer_spans() -> list[SpanRecord]:
    """Google ADK transfer_to_agent: the sub-agent runs inside the coordinator's span, under
    its call_llm span, but under no tool span."""
    return [
        agent(1, None, "coordinator", 0, 100),
        span(2, 1, SpanRole.OTHER, 1, 99, name="call_llm"),
        llm(3, 2, 2, 10, ask("transfer_to_agent", "t1", {"agent_name": "billing"})),
        tool(4, 2, "transfer_to_agent", 11, 12, call_id="t1"),
        agent(5, 2, "billing", 13, 98),
        llm(6, 5, 14, 90, output_text="Your refund of $20 was issued."),
    ]


def test_an_agent_transferred_to_answers_and_refuses_for_the_run() -> None:
    spans = transfer_spans()
    trace = only(spans)
    assert (trace.agent, trace.final_text, trace.refusal) == (
        "coordinator",
        "Your refund of $20 was issued.",
        False,
    )

    spans[5] = llm(6, 5, 14, 90, finish_reasons=("safety",))
    trace = only(spans)
    assert (trace.refusal, trace.refusal_reason, trace.final_text) == (True, "safety", None)


def test_failed_tool_call_is_an_error_with_its_type() -> None:
    spans = [
        agent(1, None, "refund-bot", 0, 100),
        tool(2, 1, "lookup_order", 1, 10, status_code=2, error_type="OrderNotFound"),
        llm(3, 1, 11, 20, status_code=2, output_text="Sorry."),
    ]

    trace = only(spans)
    assert [(c.status, c.error_type) for c in trace.calls] == [(CallStatus.ERROR, "OrderNotFound")]
    assert trace.error_count == 1


def test_error_status_without_error_type_is_an_error() -> None:
    spans = [agent(1, None, "a", 0, 100), tool(2, 1, "lookup_order", 1, 10, status_code=2)]

    (call,) = only(spans).calls
    assert (call.status, call.error_type) == (CallStatus.ERROR, None)


def test_content_filter_finish_reason_is_a_refusal() -> None:
    spans = [
        agent(1, None, "refund-bot", 0, 100),
        llm(2, 1, 1, 10, output_text="I can't help with that.", finish_reasons=("content_filter",)),
    ]

    trace = only(spans)
    assert (trace.refusal, trace.refusal_reason) == (True, "content_filter")
    assert trace.calls == ()


def test_finish_reasons_are_compared_case_folded_however_many_distinct_ones_arrive() -> None:
    def reason_of(*reasons: str) -> str | None:
        spans = [agent(1, None, "a", 0, 100), llm(2, 1, 1, 10, finish_reasons=reasons)]
        return only(spans).refusal_reason

    noise = [f"stop-{i}" for i in range(3000)]  # beyond what is remembered
    assert [reason_of(r) for r in noise[:3]] == [None, None, None]
    assert reason_of(*noise, "Content_Filter") == "Content_Filter"
    assert reason_of("SAFETY") == reason_of("SAFETY") == "SAFETY"
    long_s = "\u017fafety"  # casefolds to "safety"; lower() keeps it
    assert reason_of(*noise[-5:], long_s) == long_s
    assert reason_of("Stop", "TOOL_CALLS") is None


def test_refusal_part_is_a_refusal_with_its_text() -> None:
    spans = [agent(1, None, "a", 0, 100), llm(2, 1, 1, 10, refusal="I cannot do that")]

    trace = only(spans)
    assert (trace.refusal, trace.refusal_reason) == (True, "I cannot do that")


def test_stop_finish_reason_is_not_a_refusal() -> None:
    trace = only(refund_spans())

    assert (trace.refusal, trace.refusal_reason) == (False, None)
