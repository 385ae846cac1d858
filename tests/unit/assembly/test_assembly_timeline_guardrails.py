"""The timeline and guardrails: a guardrail's own model calls and checker agents are not the
run's output, a tripped guardrail refuses the run (or fails the tool it ran in), streaming
guards keep the run's answer."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from assembly_support import agent, ask, build, hexid, llm, only, span, tool

from toolwatch.conventions import recognize
from toolwatch.model import SpanRecord, SpanRole


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
