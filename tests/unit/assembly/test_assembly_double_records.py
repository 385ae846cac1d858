"""Timeline: a model call beside an agent's turns recorded twice is a guardrail's check
(``checks._calls_beside_double_records``), and nothing else is."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from assembly_support import agent, ask, llm, only, span, tool

from toolwatch.model import SpanRecord, SpanRole

VERDICT = '{"is_flagged": false}'
CLIENT = 3  # OTLP span kind CLIENT


def record(
    n: int, parent: int | None, start_ms: int, end_ms: int, *calls: Any, name: str, **kw: Any
) -> SpanRecord:
    """A model span as an instrumentation named ``name`` writes it (GenAI, CLIENT)."""
    made = llm(n, parent, start_ms, end_ms, *calls, name=name, convention="genai", **kw)
    return dataclasses.replace(made, kind=CLIENT)


def sdk(
    n: int, parent: int | None, start_ms: int, end_ms: int, *calls: Any, **kw: Any
) -> SpanRecord:
    """The OpenAI Agents SDK's model span under OpenLLMetry."""
    return record(n, parent, start_ms, end_ms, *calls, name="openai.response", **kw)


def client(
    n: int, parent: int | None, start_ms: int, end_ms: int, *calls: Any, **kw: Any
) -> SpanRecord:
    """The ``openai`` client's model span under OpenLLMetry: named as the SDK's."""
    return record(n, parent, start_ms, end_ms, *calls, name="openai.response", **kw)


def test_a_guardrails_client_call_beside_turns_recorded_twice_is_no_output_of_the_run() -> None:
    """OpenLLMetry (real capture: ``openai_agents__openllmetry__refusal_output_guardrail_
    client``): the agent's turn is the SDK's span with the client's inside; the output
    guardrail's own call is the client's alone, directly under the agent, ending last. Read
    as the run's, its verdict was the final text and the refusal was lost."""
    spans = [
        agent(1, None, "support", 0, 100),
        sdk(2, 1, 1, 20, refusal="I can't help with that.", finish_reasons=("stop",)),
        client(3, 2, 2, 19, finish_reasons=("stop",)),  # recorded no refusal part
        client(4, 1, 31, 97, output_text=VERDICT, finish_reasons=("stop",)),
    ]
    run = only(spans)
    assert (run.refusal, run.refusal_reason, run.final_text) == (
        True,
        "I can't help with that.",
        None,
    )


def test_a_checks_request_is_no_call_of_the_run_and_the_answer_it_checked_is_the_final_text() -> (
    None
):
    """An output guardrail that trips on the answer (real capture:
    ``openai_agents__openllmetry__output_guardrail_tripped_client``), classifying by
    function calling: its request is not the agent's; the withheld answer stays the final
    text; the tool the agent's own turn asked for, run by the SDK, is the run's call."""
    lookup = ask("lookup_order", "call_1", {"order_id": "A-1"})
    spans = [
        agent(1, None, "support", 0, 100, status_code=2),
        sdk(2, 1, 1, 10, lookup, finish_reasons=("tool_call",)),
        client(3, 2, 2, 9, ask("lookup_order", "fc_1", {"order_id": "A-1"})),
        tool(4, 1, "lookup_order", 11, 12),
        sdk(5, 1, 13, 30, output_text="Paid with the card.", finish_reasons=("stop",)),
        client(6, 5, 14, 29, output_text="Paid with the card.", finish_reasons=("stop",)),
        client(7, 1, 31, 97, ask("report_verdict", "fc_2", {"is_flagged": True})),
    ]
    run = only(spans)
    assert run.final_text == "Paid with the card."
    assert [(c.tool_name, c.span_id is not None) for c in run.calls] == [("lookup_order", True)]


def test_client_spans_recorded_once_directly_under_the_agent_are_its_turns() -> None:
    """CrewAI under OpenLLMetry records each model call once, the client's span directly
    under the agent (real capture: ``crewai__openllmetry__refund``): no turn is recorded
    twice, so none of them is a check, the last answer included."""
    spans = [
        agent(1, None, "support", 0, 100),
        client(2, 1, 1, 10, ask("lookup_order", "call_1", {"order_id": "A-1"})),
        tool(3, 1, "lookup_order", 11, 12, call_id="call_1"),
        client(4, 1, 13, 90, output_text="Refund R-77 issued.", finish_reasons=("stop",)),
    ]
    run = only(spans)
    assert (run.final_text, [c.tool_name for c in run.calls]) == (
        "Refund R-77 issued.",
        ["lookup_order"],
    )


def test_in_a_mixed_run_only_the_agent_recording_its_turns_twice_has_checks_beside_them() -> None:
    """The run's agent records its calls once (the client's spans under it); an agent it
    handed over to inside itself (no tool between) records its turns twice, and a
    guardrail's call, asking for a verdict tool, sits beside them. That call is a check;
    the outer agent's answer, the client's span alone under its agent as well, is not."""
    spans = [
        agent(1, None, "concierge", 0, 100),
        client(2, 1, 1, 10, ask("lookup_order", "call_1", {"order_id": "A-1"})),
        tool(3, 1, "lookup_order", 11, 12, call_id="call_1"),
        agent(4, 1, "refund_desk", 13, 70),
        sdk(5, 4, 14, 30, output_text="Eligible.", finish_reasons=("stop",)),
        client(6, 5, 15, 29, output_text="Eligible.", finish_reasons=("stop",)),
        client(7, 4, 31, 69, ask("report_verdict", "fc_9", {"is_flagged": False})),
        client(8, 1, 71, 95, output_text="Refund on its way.", finish_reasons=("stop",)),
    ]
    run = only(spans)
    assert (run.final_text, [c.tool_name for c in run.calls]) == (
        "Refund on its way.",
        ["lookup_order"],
    )


def test_a_turn_that_looks_like_the_frameworks_record_not_the_clients_is_the_agents() -> None:
    """One agent, its turns recorded twice by an instrumentation that names its spans
    apart from the client's (``chat gpt-4o`` around ``Chat Completion``), then a turn the
    client instrumentation did not see (a fallback model): the framework's span alone is a
    turn, the last answer. A client-looking call beside them is still a check."""
    spans = [
        agent(1, None, "support", 0, 100),
        record(2, 1, 1, 10, ask("lookup_order", "c1", {}), name="chat gpt-4o"),
        record(3, 2, 2, 9, ask("lookup_order", "c1", {}), name="Chat Completion"),
        tool(4, 1, "lookup_order", 11, 12, call_id="c1"),
        record(5, 1, 13, 60, output_text="Refund R-77 issued.", name="chat claude"),
        record(6, 1, 61, 97, output_text=VERDICT, name="Chat Completion"),
    ]
    assert only(spans).final_text == "Refund R-77 issued."


@pytest.mark.parametrize("where", ["outside every agent", "in a tool"])
def test_a_model_call_not_beside_the_agents_turns_is_the_runs(where: str) -> None:
    """A Guardrails AI guard's callable span holds the client's (a call recorded twice),
    beside an own loop's client calls under a plain span, no agent (real captures:
    ``guardrails__openinference__guarded_answer*``); or a tool of an agent recording its
    turns twice calls the model itself. Those calls are the run's: read as checks, the
    loop's two requests were no calls at all (nothing else records them)."""
    top = (
        span(1, None, SpanRole.OTHER, 0, 100, name="support_agent")
        if where == "outside every agent"
        else agent(1, None, "support", 0, 100)
    )
    if where == "outside every agent":
        holder, wrapper = 1, record(5, 4, 31, 98, name="ArbitraryCallable.__call__")
        more = [span(4, 1, SpanRole.OTHER, 30, 99, name="call")]
    else:
        holder, wrapper = 9, sdk(5, 1, 31, 98)
        more = [tool(9, 1, "refund_desk", 0, 25)]
    spans = [
        top,
        *more,
        client(2, holder, 1, 10, ask("lookup_order", "c1", {"order_id": "A-1"})),
        client(3, holder, 11, 20, ask("issue_refund", "c2", {"order_id": "A-1"})),
        wrapper,
        client(6, 5, 32, 97, output_text="Refund R-77 issued.", finish_reasons=("stop",)),
    ]
    run = only(spans)
    names = [c.tool_name for c in run.calls if c.tool_name != "refund_desk"]
    assert (run.final_text, names) == ("Refund R-77 issued.", ["lookup_order", "issue_refund"])
