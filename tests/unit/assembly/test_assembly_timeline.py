"""Timeline: completed traces become ToolTraces (DESIGN §5, CONVENTIONS §6)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from assembly_support import MS, TRACE, agent, ask, build, hexid, llm, only, span, tool

from tests import factories
from toolwatch.assembly.outputs import _REFUSES
from toolwatch.conventions import recognize
from toolwatch.model import CallStatus, SpanRecord, SpanRole


def refund_spans() -> list[SpanRecord]:
    lookup = '{"order_id": "A-1001"}'
    refund = {"order_id": "A-1001", "amount_usd": 25.0}
    root = agent(1, None, "refund-bot", 0, 100, conversation_id="conv-7")
    return [
        dataclasses.replace(root, reference_keys=(("case_id", "refund-1"),)),
        llm(2, 1, 1, 10, ask("lookup_order", "call_1", lookup), finish_reasons=("tool_calls",)),
        tool(3, 1, "lookup_order", 11, 20, call_id="call_1", arguments=lookup, result='"{}"'),
        llm(4, 1, 21, 30, ask("Issue_Refund", "call_2", refund)),
        dataclasses.replace(
            tool(5, 1, "Issue_Refund", 31, 40, call_id="call_2", arguments=json.dumps(refund)),
            result="ok",
            reference_keys=(("case_id", "other"), ("pair", "p-1")),
        ),
        llm(6, 1, 41, 50, output_text="Your refund of $25 is on its way."),
    ]


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


def nested_spans() -> list[SpanRecord]:
    question = {"question": "status of A-1001"}
    return [
        agent(1, None, "support-bot", 0, 100),
        llm(2, 1, 1, 5, ask("ask_billing", "call_outer", question)),
        tool(3, 1, "ask_billing", 6, 60, call_id="call_outer", arguments=question),
        agent(4, 3, "billing-bot", 7, 59),
        llm(5, 4, 8, 10, ask("lookup_order", "call_1", {"order_id": "A-1001"})),
        tool(6, 4, "lookup_order", 11, 20, call_id="call_1"),
        llm(7, 4, 21, 30, output_text="Order delivered."),
        llm(8, 1, 61, 70, output_text="It was delivered."),
    ]


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


def guarded_refusal_spans(input_guardrail: bool) -> list[SpanRecord]:
    """The OpenAI Agents SDK (OpenInference's spans): support refuses, a model_refusal
    handler makes that the final output, and a guardrail runs a checker agent whose model
    call, ending last, answers with a verdict. An output guardrail runs after the final
    output, under the agent's span; an input guardrail beside the first model call, under
    its turn span."""
    guardrail_parent, start = (3, 2) if input_guardrail else (1, 31)
    return [
        agent(1, None, "support", 0, 100),
        span(3, 1, SpanRole.OTHER, 1, 98 if input_guardrail else 30, name="turn"),
        llm(4, 3, 3, 20, refusal="I can't help with that."),
        span(5, guardrail_parent, SpanRole.GUARDRAIL, start, 97, name="output_safety"),
        span(6, 5, SpanRole.OTHER, start + 1, 96, name="Agent workflow"),
        agent(7, 6, "checker", start + 2, 95),
        span(8, 7, SpanRole.OTHER, start + 3, 94, name="turn"),
        llm(9, 8, start + 4, 93, output_text='{"is_flagged": false}', finish_reasons=("stop",)),
    ]


def test_a_guardrails_own_model_call_is_no_output_of_the_run() -> None:
    """An output guardrail whose function calls the model client itself: its call, ending
    last, is a check of the run's answer, not the answer (real captures:
    ``openai_agents__*__refusal_output_guardrail_client``)."""
    spans = [
        agent(1, None, "support", 0, 100),
        llm(2, 1, 1, 20, refusal="I can't help with that."),
        span(3, 1, SpanRole.GUARDRAIL, 31, 97, name="output_safety"),
        llm(4, 3, 32, 96, output_text='{"is_flagged": false}'),
    ]
    run = only(spans)
    assert (run.refusal, run.refusal_reason, run.final_text) == (
        True,
        "I can't help with that.",
        None,
    )


@pytest.mark.parametrize(
    "answer",
    [{"output_text": "Refunds take five days."}, {"refusal": "I can't help with that."}],
    ids=["answer", "refusal"],
)
def test_a_guard_around_the_answer_keeps_it_after_a_tool_step_outside(
    answer: dict[str, str],
) -> None:
    """Guardrails AI's Runner.step (a plain span: ``conventions.guardrails_ai``) wraps the
    application's answering model call (its prompt callable, no output of its own, then the
    client's span); the tool-calling step before it ran outside the guard. The guarded call
    is the run's answer."""
    spans = [
        agent(1, None, "support", 0, 100),
        llm(2, 1, 1, 10, ask("lookup_order", "c1", {"order_id": "A-1"})),
        tool(3, 1, "lookup_order", 11, 12, call_id="c1"),
        span(4, 1, SpanRole.OTHER, 13, 99, name="Runner.step"),
        llm(5, 4, 14, 98),  # PromptCallableBase.__call__: no output recorded, ends last
        llm(6, 5, 15, 97, **answer),
    ]
    run = only(spans)
    assert (run.refusal, run.final_text) == (
        "refusal" in answer,
        answer.get("output_text"),
    )


def test_the_calls_a_guardrails_check_asks_for_are_not_the_runs() -> None:
    """A guardrail that classifies by function calling: its request is not the agent's."""
    spans = [
        agent(1, None, "support", 0, 100),
        llm(2, 1, 1, 20, refusal="I can't help with that."),
        span(3, 1, SpanRole.GUARDRAIL, 31, 97, name="output_safety"),
        llm(4, 3, 32, 96, ask("report_verdict", "v1", {"is_flagged": False})),
    ]
    run = only(spans)
    assert (run.refusal, run.calls) == (True, ())


@pytest.mark.parametrize(
    "retry",
    [{}, {"status_code": 2, "error_type": "APITimeoutError"}],
    ids=["unrecorded", "failed"],
)
def test_a_filter_retried_past_is_no_refusal_whatever_the_retry_recorded(
    retry: dict[str, Any],
) -> None:
    """The retry after a content filter recorded nothing (capture off, a stream cut before
    its last chunk) or failed: the run's last model call is not the filtered one."""
    spans = [
        agent(1, None, "support", 0, 100),
        llm(2, 1, 1, 20, finish_reasons=("content_filter",)),
        llm(3, 1, 21, 90, **retry),
    ]
    run = only(spans)
    assert (run.refusal, run.refusal_reason) == (False, None)


def test_a_model_span_wrapping_the_clients_that_recorded_nothing_hides_no_refusal() -> None:
    """A framework's model span around the client's (recording no output, ending after
    it): the client's refusal is the run's."""
    spans = [
        agent(1, None, "support", 0, 100),
        llm(2, 1, 1, 90),
        llm(3, 2, 2, 80, refusal="I can't help with that."),
    ]
    assert only(spans).refusal_reason == "I can't help with that."


@pytest.mark.parametrize("by_function_call", [False, True], ids=["text", "function-call"])
def test_a_tripped_input_guardrails_check_is_no_output_of_the_run(by_function_call: bool) -> None:
    """An input guardrail beside the first turn calls the model itself and trips the wire
    before the agent answers (its first call asked for a tool): the verdict is neither the
    run's final text nor a call of the run."""
    verdict = (
        llm(4, 3, 3, 29, ask("report_verdict", "v1", {"is_flagged": True}))
        if by_function_call
        else llm(4, 3, 3, 29, output_text='{"is_flagged": true}')
    )
    spans = [
        agent(1, None, "support", 0, 40, status_code=2),
        span(2, 1, SpanRole.OTHER, 1, 39, name="turn"),
        span(3, 2, SpanRole.GUARDRAIL, 2, 30, name="input_safety"),
        verdict,
        llm(5, 2, 2, 25, ask("lookup_order", "c1", {"order_id": "A-1"})),
    ]
    run = only(spans)
    assert (run.final_text, [c.tool_name for c in run.calls]) == (None, ["lookup_order"])


def test_an_answer_whose_text_was_not_captured_still_sets_a_guardrails_check_aside() -> None:
    spans = [
        agent(1, None, "support", 0, 100),
        llm(2, 1, 1, 10, ask("lookup_order", "c1", {"order_id": "A-1"})),
        tool(3, 1, "lookup_order", 11, 12, call_id="c1"),
        llm(4, 1, 13, 20, finish_reasons=("stop",)),  # the answer, its text not captured
        span(5, 1, SpanRole.GUARDRAIL, 31, 97, name="output_safety"),
        llm(6, 5, 32, 96, output_text='{"is_flagged": false}', finish_reasons=("stop",)),
    ]
    assert only(spans).final_text is None


@pytest.mark.parametrize("step", [True, False], ids=["after-a-tool-step", "alone"])
def test_a_guard_inside_a_framework_model_span_keeps_the_runs_refusal(step: bool) -> None:
    """A framework's model span (recording nothing) around a Guardrails AI guard around the
    client's call, the run's last step: its silence does not hide the refusal inside it."""
    spans = [
        agent(1, None, "support", 0, 100),
        *(
            [
                llm(2, 1, 1, 10, ask("lookup_order", "c1", {"order_id": "A-1"})),
                tool(3, 1, "lookup_order", 11, 12, call_id="c1"),
            ]
            if step
            else []
        ),
        llm(4, 1, 13, 99),
        span(5, 4, SpanRole.OTHER, 14, 98, name="Runner.step"),
        llm(6, 5, 15, 97, refusal="I can't help with that.", finish_reasons=("content_filter",)),
    ]
    run = only(spans)
    assert (run.refusal, run.refusal_reason) == (True, "I can't help with that.")


def test_an_agent_used_as_a_tool_answers_the_tool_not_the_run() -> None:
    """Its text is the tool's result: the Guardrails AI guard around the run's last step
    holds the run's answer."""
    spans = [
        agent(1, None, "support", 0, 100),
        llm(2, 1, 1, 10, ask("research", "c1", {"q": "refunds"})),
        tool(3, 1, "research", 11, 40, call_id="c1"),
        agent(4, 3, "researcher", 12, 39),
        llm(5, 4, 13, 38, output_text="Refund policy: five days.", finish_reasons=("stop",)),
        span(6, 1, SpanRole.OTHER, 41, 99, name="Runner.step"),
        llm(7, 6, 42, 98, output_text="Refunds take five days.", finish_reasons=("stop",)),
    ]
    (run,) = build(spans)
    assert run.final_text == "Refunds take five days."


def test_a_run_whose_only_model_call_a_guardrail_made_gave_no_answer() -> None:
    """A blocking input guardrail (``run_in_parallel=False``) calls the model itself and
    trips before the agent's model is called (real captures:
    ``openai_agents__*__input_guardrail_blocking_client``): its verdict is no answer of the
    run, nor are the calls it asked for."""
    spans = [
        agent(1, None, "support", 0, 100, status_code=2),
        span(2, 1, SpanRole.OTHER, 1, 99, name="turn", status_code=2),
        span(3, 2, SpanRole.GUARDRAIL, 2, 98, name="input_safety"),
        llm(4, 3, 3, 97, ask("report_verdict", "v1", {"is_flagged": True})),
        llm(5, 3, 3, 97, output_text='{"is_flagged": true}', finish_reasons=("stop",)),
    ]
    run = only(spans)
    assert (run.final_text, run.calls) == (None, ())


def test_a_turn_span_that_says_a_guardrail_tripped_refuses_the_run() -> None:
    """OpenInference writes an input guardrail's trip only as the turn span's status message
    (a plain span, read by ``fields.tripwire_refusal``; real capture:
    ``openai_agents__openinference__input_guardrail_blocking_client``): the run refused, for
    the guardrail, whatever the guardrail's own model call said."""
    spans = [
        agent(1, None, "support", 0, 100, status_code=2),
        span(
            2,
            1,
            SpanRole.OTHER,
            1,
            99,
            name="turn",
            status_code=2,
            refusal="guardrail input_safety tripped",
        ),
        span(3, 2, SpanRole.GUARDRAIL, 2, 98, name="input_safety"),
        llm(4, 3, 3, 97, output_text='{"is_flagged": true}', finish_reasons=("stop",)),
    ]
    run = only(spans)
    assert (run.refusal, run.refusal_reason) == (True, "guardrail input_safety tripped")


def test_a_tripped_turn_of_an_agent_used_as_a_tool_is_the_tools_failure() -> None:
    """The nested agent's turn that a guardrail stopped refuses the nested run's work, which
    is the tool's result for its caller: the caller's run answered."""
    spans = [
        agent(1, None, "concierge", 0, 100),
        llm(2, 1, 1, 10, ask("refund_desk", "c1", {"input": "check A-1"})),
        tool(3, 1, "refund_desk", 11, 40, call_id="c1"),
        agent(4, 3, "refund_desk_agent", 12, 39, status_code=2),
        span(
            5,
            4,
            SpanRole.OTHER,
            13,
            38,
            name="turn",
            status_code=2,
            refusal="guardrail input_safety tripped",
        ),
        llm(6, 1, 41, 99, output_text="The desk could not check it.", finish_reasons=("stop",)),
    ]
    (run,) = build(spans)
    assert (run.agent, run.refusal, run.final_text) == (
        "concierge",
        False,
        "The desk could not check it.",
    )


@pytest.mark.parametrize("role", [SpanRole.OTHER, SpanRole.GUARDRAIL])
def test_a_guard_that_raised_inside_a_tool_is_the_tools_failure(role: SpanRole) -> None:
    """A tool that checks its own output with a Guardrails AI guard, which raised: the tool
    failed, and the agent answered after it."""
    spans = [
        agent(1, None, "support", 0, 100),
        llm(2, 1, 1, 10, ask("summarize", "c1", {"doc": "d-1"})),
        tool(3, 1, "summarize", 11, 40, call_id="c1", status_code=2),
        span(4, 3, role, 12, 39, name="guard", refusal="guardrail validation failed"),
        llm(5, 1, 41, 99, output_text="I could not summarize it.", finish_reasons=("stop",)),
    ]
    run = only(spans)
    assert (run.refusal, run.final_text) == (False, "I could not summarize it.")


@pytest.mark.parametrize("retried", [False, True], ids=["raised-last", "answered-after"])
def test_a_guard_that_raised_refuses_unless_the_run_answered_after_it(retried: bool) -> None:
    """A Guardrails AI guard that raised (real captures: ``guardrails__*__guarded_answer_raises``)
    withholds the answer its model call gave; an application that catches the error and asks
    again answered after it."""
    raised = "guardrail validation failed"
    spans = [
        span(1, None, SpanRole.OTHER, 0, 100, name="support_agent"),
        span(2, 1, SpanRole.OTHER, 1, 40, name="guard", refusal=raised, status_code=2),
        span(3, 2, SpanRole.OTHER, 2, 39, name="step", refusal=raised, status_code=2),
        llm(4, 3, 3, 20, output_text="Refund R-77 was issued.", finish_reasons=("stop",)),
    ]
    if retried:
        spans.append(
            llm(5, 1, 41, 60, output_text="Your refund was issued.", finish_reasons=("stop",))
        )
    run = only(spans)
    assert (run.refusal, run.refusal_reason) == (
        (False, None) if retried else (True, "guardrail validation failed")
    )


@pytest.mark.parametrize("trip_first", [True, False])
def test_an_agents_sdk_trip_refuses_whatever_the_model_answered_after(trip_first: bool) -> None:
    """An input guardrail beside the first model call trips: the SDK raises, and the model
    call it no longer waits for may end after the turn span that says so."""
    spans = [
        agent(1, None, "support", 0, 100, status_code=2),
        span(
            2,
            1,
            SpanRole.OTHER,
            1,
            50 if trip_first else 90,
            name="turn",
            status_code=2,
            refusal="guardrail input_safety tripped",
        ),
        llm(3, 2, 2, 70, output_text="Here is how.", finish_reasons=("stop",)),
    ]
    run = only(spans)
    assert (run.refusal, run.refusal_reason) == (True, "guardrail input_safety tripped")


def test_a_guardrails_check_after_a_run_that_ended_on_a_tool_result_is_no_answer() -> None:
    """``tool_use_behavior="stop_on_first_tool"``: the run's final output is its tool's
    result, and an output guardrail then calls the model itself (real captures:
    ``openai_agents__*__tool_output_guardrail_client``)."""
    spans = [
        agent(1, None, "support", 0, 100),
        llm(2, 1, 1, 10, ask("lookup_order", "c1", {"order_id": "A-1"})),
        tool(3, 1, "lookup_order", 11, 12, call_id="c1"),
        span(4, 1, SpanRole.GUARDRAIL, 31, 97, name="output_safety"),
        llm(5, 4, 32, 96, output_text='{"is_flagged": false}', finish_reasons=("stop",)),
    ]
    run = only(spans)
    assert (run.final_text, [c.tool_name for c in run.calls]) == (None, ["lookup_order"])


@pytest.mark.parametrize("input_guardrail", [False, True], ids=["output", "input"])
def test_an_agent_a_guardrail_runs_is_a_run_of_its_own_and_keeps_the_refusal(
    input_guardrail: bool,
) -> None:
    """The checker's model call ended after the refusal: taken as the run's last output,
    the run answered (a REFUSAL_REGRESSION missed) with the checker's verdict."""
    traces = build(guarded_refusal_spans(input_guardrail))
    support = next(t for t in traces if t.run_span_id == hexid(1))
    assert (support.refusal, support.refusal_reason, support.final_text) == (
        True,
        "I can't help with that.",
        None,
    )
    assert (support.agents, support.span_count) == (("support",), 5)
    assert len(traces) == 2
    checker = traces[1]
    assert (checker.run_span_id, checker.agents, checker.span_count) == (hexid(7), ("checker",), 3)
    assert (checker.refusal, checker.final_text) == (False, '{"is_flagged": false}')


def test_the_checker_agent_of_a_guardrail_makes_its_own_calls() -> None:
    spans = [
        *guarded_refusal_spans(input_guardrail=False),
        tool(10, 7, "lookup_policy", 40, 41),
        tool(11, 1, "lookup_order", 21, 22),
    ]
    support, checker = build(spans)
    assert [(c.tool_name, c.agent, c.parent_call_id) for c in support.calls] == [
        ("lookup_order", "support", None)
    ]
    assert [(c.tool_name, c.agent, c.parent_call_id) for c in checker.calls] == [
        ("lookup_policy", "checker", None)
    ]


def test_a_checker_run_is_matched_to_no_golden_case_or_shadow_pair() -> None:
    """A canary's case id on the resource reaches every span, the checker's too: matched
    to the case, the checker would page that it did not refuse what the canary must."""
    keys = (("toolwatch.case_id", "must-refuse"),)
    spans = [
        dataclasses.replace(s, reference_keys=keys)
        for s in guarded_refusal_spans(input_guardrail=False)
    ]
    support, checker = build(spans)
    assert support.reference_keys == {"toolwatch.case_id": "must-refuse"}
    assert (checker.reference_keys, checker.shared_keys) == ({}, {})


def test_a_case_id_on_the_request_span_above_the_agent_is_the_runs() -> None:
    """A canary's case id set on the HTTP handler's span (or a workflow's) above the agent:
    read from the run's own spans alone, the canary was judged by the policy only."""
    case_id, pair = ("toolwatch.case_id", "refund-1"), ("toolwatch.shadow.pair_id", "p-9")
    spans = [
        span(1, None, SpanRole.OTHER, 0, 100, name="POST /chat", reference_keys=(case_id, pair)),
        span(
            2,
            1,
            SpanRole.OTHER,
            1,
            99,
            name="workflow",
            reference_keys=(("toolwatch.case_id", "near"),),
        ),
        agent(
            3,
            2,
            "support",
            2,
            98,
            reference_keys=((pair[0], "own"),),
        ),
        tool(4, 3, "lookup_order", 3, 4),
    ]
    assert only(spans).reference_keys == {
        "toolwatch.shadow.pair_id": "own",  # the run's own first
        "toolwatch.case_id": "near",  # then the nearest span above
    }


@pytest.mark.parametrize(
    "beside",
    [
        [agent(4, 1, "title-bot", 60, 99)],  # a title agent after the request's agent
        [agent(4, 1, "moderation-bot", 0, 1)],  # a moderation agent before it
    ],
    ids=["title", "moderation"],
)
def test_a_case_id_above_several_runs_is_none_of_theirs(beside: list[SpanRecord]) -> None:
    """Whose it is the spans do not say, and a wrong guess pages: the run given the canary's
    case id did not do the canary's work."""
    case_id = (("toolwatch.case_id", "kb-return-window"),)
    spans = [
        span(1, None, SpanRole.OTHER, 0, 100, name="POST /chat", reference_keys=case_id),
        agent(2, 1, "refund-bot", 1, 50),
        tool(3, 2, "search_kb", 2, 3),
        *beside,
    ]
    assert [t.reference_keys for t in build(spans)] == [{}, {}]
    assert [t.shared_keys for t in build(spans)] == [dict(case_id), dict(case_id)]


def test_a_request_span_above_one_of_several_runs_is_that_runs() -> None:
    """Two requests under one trace (a batch job's root): each request's span is above its
    own agent only, so its case id is that run's; the root's key is shared by both."""
    batch, first, second = ("batch", "b-1"), ("toolwatch.case_id", "a"), ("toolwatch.case_id", "b")
    spans = [
        span(1, None, SpanRole.OTHER, 0, 100, name="batch", reference_keys=(batch,)),
        span(2, 1, SpanRole.OTHER, 1, 40, name="POST /chat", reference_keys=(first,)),
        agent(3, 2, "refund-bot", 2, 39),
        span(4, 1, SpanRole.OTHER, 50, 90, name="POST /chat", reference_keys=(second,)),
        agent(5, 4, "refund-bot", 51, 89),
    ]
    traces = build(spans)
    assert [t.reference_keys for t in traces] == [dict([first]), dict([second])]
    assert [t.shared_keys for t in traces] == [dict([batch]), dict([batch])]


def test_a_run_whose_parent_never_arrived_leaves_no_span_above_to_another() -> None:
    """The agent asked hangs from a hop toolwatch never received (a queue between gateway
    and worker): the request span above the title agent may be above it too, so its case
    id is no one's own."""
    case_id = (("toolwatch.case_id", "kb-1"),)
    spans = [
        span(1, None, SpanRole.OTHER, 0, 100, name="POST /chat", reference_keys=case_id),
        agent(2, 99, "support-bot", 1, 50),  # span 99: the hop, not received
        tool(3, 2, "search_kb", 2, 3),
        agent(4, 1, "title-bot", 60, 99),
    ]
    keys = {t.agent: (t.reference_keys, t.shared_keys) for t in build(spans)}
    assert keys == {"support-bot": ({}, {}), "title-bot": ({}, dict(case_id))}


def test_a_residual_run_holds_only_the_spans_above_its_own_calls() -> None:
    """Two requests under one batch root, one handler calling a tool outside its agent:
    the other request keeps its case id, the handler's call has its own request's."""
    first, second = ("toolwatch.case_id", "a"), ("toolwatch.case_id", "b")
    spans = [
        span(1, None, SpanRole.OTHER, 0, 100, name="batch"),
        span(2, 1, SpanRole.OTHER, 1, 40, name="POST /chat", reference_keys=(first,)),
        agent(3, 2, "support-bot", 2, 39),
        span(4, 1, SpanRole.OTHER, 50, 90, name="POST /chat", reference_keys=(second,)),
        agent(5, 4, "support-bot", 51, 80),
        tool(6, 4, "audit_log", 81, 82),  # the handler's own call, beside its agent
    ]
    keys = [(t.agent, t.reference_keys, t.shared_keys) for t in build(spans)]
    assert keys == [
        (None, {}, dict([second])),  # the handler's run, from the batch root's start
        ("support-bot", dict([first]), {}),
        ("support-bot", {}, dict([second])),  # the request span holds both runs' work
    ]


def test_a_span_above_the_residual_run_and_an_agent_is_neither_runs_own() -> None:
    """The handler's own instrumented tool calls beside the request's agent: which of the
    two the request span's case id is for, no span says (a wrong guess pages)."""
    case_id = (("toolwatch.case_id", "refund-1"),)
    spans = [
        span(1, None, SpanRole.OTHER, 0, 100, name="POST /chat", reference_keys=case_id),
        tool(2, 1, "audit_log", 1, 2, reference_keys=(("tool.key", "own"),)),
        agent(4, 1, "refund-bot", 60, 99),
    ]
    keys = {t.agent: (t.reference_keys, t.shared_keys) for t in build(spans)}
    assert keys == {
        None: ({"tool.key": "own"}, dict(case_id)),
        "refund-bot": ({}, dict(case_id)),
    }


def test_a_model_call_the_handler_makes_beside_the_agent_leaves_it_the_request_keys() -> None:
    """A query-rewrite (or router) model call outside the agent, asking for no tool, is no
    run: the request span's case id is the one agent run's, as in any trace of one run."""
    case_id = (("toolwatch.case_id", "kb-1"),)
    spans = [
        span(1, None, SpanRole.OTHER, 0, 100, name="POST /chat", reference_keys=case_id),
        llm(2, 1, 1, 5, output_text="return window for opened electronics"),
        agent(3, 1, "support-bot", 6, 99),
        tool(4, 3, "search_kb", 7, 8),
    ]
    (run,) = build(spans)
    assert (run.agent, run.reference_keys, run.shared_keys) == ("support-bot", dict(case_id), {})


def test_the_residual_runs_keys_are_those_above_its_own_calls_only() -> None:
    """Three requests under one batch root: a client-only canary (b), a handler's tool call
    (a) and an agent (c). The handler's call is request a's, not the earlier canary's."""
    case = "toolwatch.case_id"
    spans = [
        span(1, None, SpanRole.OTHER, 0, 100, name="batch"),
        span(2, 1, SpanRole.OTHER, 1, 40, name="POST /chat", reference_keys=((case, "b"),)),
        llm(3, 2, 2, 20, refusal="I can't help with that."),
        span(4, 1, SpanRole.OTHER, 50, 90, name="POST /chat", reference_keys=((case, "a"),)),
        tool(5, 4, "audit_log", 51, 52),
        span(6, 1, SpanRole.OTHER, 91, 99, name="POST /chat", reference_keys=((case, "c"),)),
        agent(7, 6, "support", 92, 98),
    ]
    residual, support = build(spans)
    assert (residual.agent, residual.reference_keys) == (None, {case: "a"})
    assert (support.reference_keys, support.shared_keys) == ({case: "c"}, {})


def test_runs_under_a_gateway_toolwatch_does_not_hear_from_keep_their_request_keys() -> None:
    """The request span continues a trace from a gateway that exports elsewhere: its parent
    never arrives, but it holds both runs, so what is above one run alone is that run's."""
    first, second = ("toolwatch.case_id", "a"), ("toolwatch.case_id", "b")
    spans = [
        span(1, 99, SpanRole.OTHER, 0, 100, name="batch"),  # span 99: the gateway's
        span(2, 1, SpanRole.OTHER, 1, 40, name="POST /chat", reference_keys=(first,)),
        agent(3, 2, "support-bot", 2, 39),
        span(4, 1, SpanRole.OTHER, 50, 90, name="POST /chat", reference_keys=(second,)),
        agent(5, 4, "support-bot", 51, 89),
    ]
    assert [t.reference_keys for t in build(spans)] == [dict([first]), dict([second])]


def test_a_parent_cycle_above_the_run_ends_the_walk_without_losing_the_keys() -> None:
    case_id = (("toolwatch.case_id", "refund-1"),)
    spans = [
        span(1, 1, SpanRole.OTHER, 0, 100, name="POST /chat", reference_keys=case_id),
        agent(2, 1, "refund-bot", 1, 50),
    ]
    assert only(spans).reference_keys == {"toolwatch.case_id": "refund-1"}


def test_a_guardrail_around_an_agent_used_as_a_tool_keeps_its_calls_in_the_run() -> None:
    """Guardrails AI's Guard around the agent a tool runs: that agent's refund is the run's,
    verified by the run's lookup, not a run of its own with an unverified refund."""
    spans = [
        agent(1, None, "support", 0, 100),
        tool(2, 1, "lookup_order", 1, 5),
        tool(3, 1, "refund_desk", 10, 90),
        span(4, 3, SpanRole.GUARDRAIL, 11, 89, name="guard"),
        agent(5, 4, "refund_desk_agent", 12, 88),
        tool(6, 5, "issue_refund", 20, 30),
    ]
    (run,) = build(spans)
    assert [(c.tool_name, c.parent_call_id) for c in run.calls] == [
        ("lookup_order", None),
        ("refund_desk", None),
        ("issue_refund", hexid(3)),
    ]


def test_a_model_call_a_guardrails_ai_guard_wraps_is_still_the_runs() -> None:
    """Guardrails AI's ``Runner.step`` (a plain span: ``conventions.guardrails_ai``) wraps the
    model call it validates: that output is the run's, refusal included."""
    spans = [
        agent(1, None, "support", 0, 100),
        span(2, 1, SpanRole.OTHER, 1, 90, name="Runner.step"),
        llm(3, 2, 2, 80, output_text="No.", finish_reasons=("content_filter",)),
    ]
    trace = only(spans)
    assert (trace.run_span_id, trace.span_count) == (hexid(1), 3)
    assert (trace.refusal, trace.refusal_reason, trace.final_text) == (
        True,
        "content_filter",
        "No.",
    )


def test_an_agent_below_the_checker_of_a_guardrail_is_the_checkers() -> None:
    """Only the agent a guardrail runs starts a run; one that agent runs (here transferred
    to, no tool between) speaks for the checker, as in any run."""
    spans = [
        *guarded_refusal_spans(input_guardrail=False),
        agent(10, 8, "second_opinion", 60, 94),
        llm(11, 10, 61, 94, output_text='{"is_flagged": true}'),
    ]
    support, checker = build(spans)
    assert (support.refusal, support.final_text) == (True, None)
    assert (checker.agents, checker.final_text) == (
        ("checker", "second_opinion"),
        '{"is_flagged": true}',
    )


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


def test_a_guardrail_that_tripped_in_an_agent_used_as_a_tool_refused_the_tool_not_the_run() -> None:
    """The nested agent's guardrail stopped the tool: its failure is the caller's to handle,
    and the caller answered."""
    spans = [
        agent(1, None, "concierge", 0, 100),
        llm(2, 1, 1, 10, ask("refund_desk", "c1", {"input": "refund A-1"})),
        tool(3, 1, "refund_desk", 11, 40, call_id="c1", status_code=2),
        agent(4, 3, "refund_desk_agent", 12, 39, status_code=2),
        span(5, 4, SpanRole.GUARDRAIL, 13, 38, refusal="guardrail input_safety tripped"),
        llm(6, 1, 41, 60, output_text="The refund desk is unavailable.", finish_reasons=("stop",)),
    ]
    (run,) = build(spans)
    assert (run.refusal, run.final_text) == (False, "The refund desk is unavailable.")


def test_the_first_guardrail_to_trip_is_the_refusal_reason() -> None:
    spans = [
        agent(1, None, "support", 0, 100, status_code=2),
        span(2, 1, SpanRole.GUARDRAIL, 1, 60, refusal="guardrail slow_check tripped"),
        span(3, 1, SpanRole.GUARDRAIL, 2, 30, refusal="guardrail fast_check tripped"),
    ]
    assert only(spans).refusal_reason == "guardrail fast_check tripped"


@pytest.mark.parametrize("chunk_span", ["stream_guard_span", "async_stream_span"])
def test_a_streaming_guardrails_ai_guard_keeps_the_runs_answer(chunk_span: str) -> None:
    """guardrails-ai 0.11.0 writes a streaming guard's ``call`` span with its kind alone, no
    ``guardrails.version`` (real capture: ``guardrails__native__guarded_answer_stream``):
    the application's model call inside it is still the run's answer."""
    streaming_call = recognize(
        "call",
        0,
        {
            "openinference.span.kind": "GUARDRAIL",
            "input.value": '{"stream": true, "temperature": 0, "messages": []}',
        },
        None,
    )
    guard = recognize(
        "step", 0, {"openinference.span.kind": "GUARDRAIL", "guardrails.version": "0.11.0"}, None
    )
    answer = "Refund R-77 of 25.00 USD was issued for order A-1001."
    spans = [
        span(1, None, SpanRole.OTHER, 0, 100, name="support_agent"),
        llm(2, 1, 1, 10, ask("lookup_order", "call_001", {"order_id": "A-1001"})),
        span(4, 1, guard.role, 90, 99, name="step", convention=guard.convention),
        span(5, 4, streaming_call.role, 90, 95, name="call", convention=streaming_call.convention),
        llm(6, 5, 91, 98, output_text=answer, finish_reasons=("stop",)),
        span(
            7,
            4,
            SpanRole.GUARDRAIL,
            96,
            97,
            name="mentions-order.validate",
            convention="guardrails_ai",
        ),
        # The span each chunk is validated in, with the application's next step inside.
        span(8, 4, SpanRole.GUARDRAIL, 99, 100, name=chunk_span),
        llm(9, 8, 99, 100, output_text="Anything else?", finish_reasons=("stop",)),
    ]
    assert (streaming_call.role, guard.role) == (SpanRole.GUARDRAIL, SpanRole.OTHER)
    assert only(spans).final_text == "Anything else?"


def test_a_validators_own_model_call_is_a_check_even_right_below_the_guard() -> None:
    spans = [
        span(1, None, SpanRole.OTHER, 0, 100, name="support_agent"),
        llm(2, 1, 1, 10, output_text="Refund issued.", finish_reasons=("stop",)),
        span(3, 1, SpanRole.OTHER, 20, 99, name="step", convention="guardrails_ai"),
        span(
            4, 3, SpanRole.GUARDRAIL, 21, 98, name="llm-judge.validate", convention="guardrails_ai"
        ),
        llm(5, 4, 22, 97, output_text='{"is_flagged": false}', finish_reasons=("stop",)),
    ]
    assert only(spans).final_text == "Refund issued."


def test_an_applications_own_guardrail_inside_a_guards_call_is_still_a_guardrail() -> None:
    """Only a streaming guard's own ``call`` or ``stream_guard_span`` is part of the guard: a
    moderation check of the application's inside the guarded callable still checks."""
    answer = "Refund R-77 was issued."
    spans = [
        span(1, None, SpanRole.OTHER, 0, 100, name="support_agent"),
        span(2, 1, SpanRole.OTHER, 10, 99, name="step", convention="guardrails_ai"),
        span(3, 2, SpanRole.OTHER, 11, 98, name="call", convention="guardrails_ai"),
        llm(4, 3, 12, 50, output_text=answer, finish_reasons=("stop",)),
        span(5, 3, SpanRole.GUARDRAIL, 51, 97, name="moderation", convention="openinference"),
        llm(6, 5, 52, 96, output_text="SAFE", finish_reasons=("stop",)),
    ]
    assert only(spans).final_text == answer


@pytest.mark.parametrize("streaming", [False, True], ids=["call", "streaming-call"])
def test_an_agent_inside_a_guards_call_is_the_runs_whatever_the_guard_streams(
    streaming: bool,
) -> None:
    """A guarded callable that runs an agent: its calls are the run's, not a checker's, as
    much when the guard streams (its ``call`` has the kind GUARDRAIL alone) as when not."""
    call = (
        span(3, 2, SpanRole.GUARDRAIL, 11, 98, name="call", convention="openinference")
        if streaming
        else span(3, 2, SpanRole.OTHER, 11, 98, name="call", convention="guardrails_ai")
    )
    spans = [
        agent(1, None, "support", 0, 100),
        tool(10, 1, "lookup_order", 1, 5),
        span(2, 1, SpanRole.OTHER, 10, 99, name="step", convention="guardrails_ai"),
        call,
        agent(4, 3, "refund-desk", 12, 97),
        tool(5, 4, "issue_refund", 20, 30),
    ]
    assert [[c.tool_name for c in run.calls] for run in build(spans)] == [
        ["lookup_order", "issue_refund"]
    ]
