"""Calls of a run: a handoff span carries out the transfer its agent's model asked for."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from assembly_support import MS, agent, ask, handoff, hexid, llm, only, tool

from toolwatch.model import CallStatus, SpanRecord


def handing_off(*marks: SpanRecord, asks: tuple[Any, ...] = ()) -> list[SpanRecord]:
    """Triage (1), whose model asks for ``asks`` at 5-8 ms, then ``marks``: an agent whose
    run continues into no other (its handoff's effect on the calls alone)."""
    return [
        agent(1, None, "Triage", 0, 100),
        llm(2, 1, 1, 4, ask("lookup_order", "c0", {"order_id": "A-1"})),
        tool(3, 1, "lookup_order", 4, 5, call_id="c0"),
        llm(4, 1, 5, 8, *asks),
        *marks,
    ]


def calls_seen(spans: list[SpanRecord]) -> list[tuple[Any, ...]]:
    return [(c.tool_name, c.handoff, c.span_id, c.start_ns) for c in only(spans).calls]


@pytest.mark.parametrize(
    ("name", "attrs"),
    [
        ("handoff to Refund Agent", {}),  # OpenInference: the span names the agent
        ("agent_handoff OpenAI Agent", {"gen_ai.handoff.to_agent": "Refund Agent"}),  # contrib
        ("triage → unknown.handoff", {}),  # OpenLLMetry: names no agent
    ],
)
def test_a_handoff_span_carries_out_the_transfer_the_model_asked_for(
    name: str, attrs: dict[str, Any]
) -> None:
    transfer = ask("transfer_to_refund_agent", "c1", "{}", 0)
    spans = handing_off(handoff(5, 1, name, 9, 10, **attrs), asks=(transfer,))

    assert calls_seen(spans) == [
        ("lookup_order", False, hexid(3), 4 * MS),
        ("transfer_to_refund_agent", True, hexid(5), 9 * MS),
    ]


def test_a_handoff_span_whose_request_was_not_recorded_is_the_transfer_call() -> None:
    """The contrib instrumentation writes the model's request as a Python repr in text: the
    span alone says the agent handed off, named as the SDK names its transfer tool."""
    mark = handoff(5, 1, "agent_handoff OpenAI Agent", 9, 10, **{"to_agent": "Refund Agent"})
    (_, transfer) = only(handing_off(mark)).calls

    assert (transfer.tool_name, transfer.raw_name, transfer.handoff) == (
        "transfer_to_refund_agent",
        "transfer_to_refund_agent",
        True,
    )
    assert (transfer.arguments, transfer.call_id, transfer.status, transfer.agent) == (
        None,
        None,
        CallStatus.OK,
        "Triage",
    )


def test_a_handoff_span_naming_no_agent_and_finding_no_request_is_no_call() -> None:
    spans = handing_off(handoff(5, 1, "triage → unknown.handoff", 9, 10))

    assert [c.tool_name for c in only(spans).calls] == ["lookup_order"]


@pytest.mark.parametrize("name", ["handoff to Refund Agent", "triage → unknown.handoff"])
def test_a_renamed_handoff_tool_is_the_call_its_span_carries_out(name: str) -> None:
    """``handoff(agent, tool_name_override="escalate")``: the request is another tool's; one
    call, marked alike whether the span names the agent or not, not a second transfer."""
    spans = handing_off(handoff(5, 1, name, 9, 10), asks=(ask("escalate", "c1", "{}", 0),))

    assert calls_seen(spans)[1:] == [("escalate", True, hexid(5), 9 * MS)]


@pytest.mark.parametrize(
    ("name", "asks", "ran"),
    [
        # the SDK runs the first handoff an output asks for and refuses the others
        ("triage → unknown.handoff", ("transfer_to_billing", "transfer_to_refunds"), "c0"),
        ("handoff to billing", ("transfer_to_billing", "transfer_to_billing"), "c0"),
        ("handoff to billing", ("transfer_to_refunds", "transfer_to_billing"), "c1"),
        # a renamed handoff to billing asked first: the span names billing, no call does
        ("handoff to billing", ("transfer_to_desk", "transfer_to_support"), "c0"),
    ],
)
def test_of_several_handoffs_asked_at_once_the_span_carries_out_the_one_the_sdk_ran(
    name: str, asks: tuple[str, str], ran: str
) -> None:
    """The SDK puts the error "Multiple handoffs requested" on the span of the one it ran:
    that handoff happened, it is no failed call."""
    mark = dataclasses.replace(handoff(5, 1, name, 9, 10), status_code=2, error_type="Error")
    requests = [ask(tool, f"c{i}", "{}", i) for i, tool in enumerate(asks)]
    trace = only(handing_off(mark, asks=tuple(requests)))

    (done,) = [c for c in trace.calls if c.handoff]
    assert (done.call_id, done.span_id, done.status, done.error_type) == (
        ran,
        hexid(5),
        CallStatus.OK,
        None,
    )
    assert trace.error_count == 0


def test_a_handoff_span_carries_out_its_agents_last_output_not_an_earlier_one() -> None:
    """A transfer asked in an earlier turn and never run is not this handoff's: the output
    just before it asked for none, so the span is the call."""
    early = ask("transfer_to_refund_agent", "c1", "{}", 0)
    spans = [
        *handing_off(asks=(early,)),
        llm(6, 1, 11, 12, ask("lookup_order", "c2", {"order_id": "A-2"})),
        tool(7, 1, "lookup_order", 12, 13, call_id="c2"),
        handoff(8, 1, "agent_handoff OpenAI Agent", 14, 15, to_agent="Refund Agent"),
    ]

    assert calls_seen(spans)[1:] == [
        ("transfer_to_refund_agent", False, None, 8 * MS),
        ("lookup_order", False, hexid(7), 12 * MS),
        ("transfer_to_refund_agent", True, hexid(8), 14 * MS),
    ]


def test_a_handoff_span_takes_the_transfer_it_names_not_a_hosted_or_a_later_request() -> None:
    asks = (
        ask("transfer_to_refund_agent", "c1", "{}", 0),
        ask("transfer_to_billing", "c2", "{}", 1),
        ask("web_search", "c3", {}, 2, hosted=True),
    )
    later = llm(6, 1, 11, 12, ask("transfer_to_refund_agent", "c4", "{}", 0))
    spans = handing_off(handoff(5, 1, "handoff to Refund Agent", 9, 10), later, asks=asks)

    assert calls_seen(spans)[1:] == [
        ("transfer_to_refund_agent", True, hexid(5), 9 * MS),
        ("transfer_to_billing", False, None, 8 * MS),
        ("web_search", False, None, 8 * MS),
        ("transfer_to_refund_agent", False, None, 12 * MS),
    ]


def test_a_handoff_span_takes_only_its_own_agents_request() -> None:
    """A nested agent (used as a tool, 10) hands off: its span does not carry out the outer
    agent's request, which stays a request; the nested one has its own call."""
    spans = [
        *handing_off(asks=(ask("transfer_to_refund_agent", "c1", "{}", 0),)),
        tool(9, 1, "ask_expert", 20, 40, call_id="c9"),
        agent(10, 9, "Expert", 21, 39),
        handoff(11, 10, "handoff to Refund Agent", 30, 31),
    ]

    assert calls_seen(spans)[1:] == [
        ("transfer_to_refund_agent", False, None, 8 * MS),
        ("ask_expert", False, hexid(9), 20 * MS),
        ("transfer_to_refund_agent", True, hexid(11), 30 * MS),
    ]
