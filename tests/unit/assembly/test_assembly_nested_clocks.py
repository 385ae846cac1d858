"""An agent another host runs under the caller's tool span: its spans keep that host's clock.

Service ``desk`` (the caller) asks its model for ``ask_billing`` and writes the tool span;
service ``billing``, another host, writes the agent that call runs as the tool span's child,
with its own model calls and tool spans. Billing's clock is off desk's: ordered by their
recorded times, the nested agent's calls left the call that ran them (before it, behind;
after the caller's next calls, ahead), and a correct run paged MISSING_VERIFICATION_STEP.
The subtree another service wrote under a tool span is ordered inside that span's interval
(``clocks._ClockOffsets``); its recorded times are kept.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from assembly_support import MS, REFUND_POLICY, agent, ask, llm, only, safety, tool

from toolwatch.model import Category, SpanRecord
from toolwatch.model_traces import ToolTrace

POLICY = REFUND_POLICY
SKEW = 1_500  # ms billing's clock is off desk's
ORDER = {"order_id": "A-1"}
LOOKUP, REFUND = "lookup_order", "issue_refund"


def asked_billing(
    skew: int,
    nested: Sequence[str],
    *,
    before: Sequence[str] = (),
    after: Sequence[str] = (),
    reused: bool = False,
    nested_service: str = "billing",
    call_ms: int | None = None,
) -> list[SpanRecord]:
    """Desk's run, a turn every 200 ms: one per tool of ``before``, then ``ask_billing``,
    whose nested agent (``nested_service``'s, its clock ``skew`` ms off desk's) makes a turn
    per tool of ``nested`` and answers, then one per tool of ``after``; every call of order
    A-1. The call's span holds the nested agent, or lasts ``call_ms``. Call ids ``c<n>``
    (``c_billing``: ``ask_billing``'s), or ``call_0`` every turn when ``reused``."""
    spans: list[SpanRecord] = [agent(1, None, "desk", 0, 10_000, service="desk")]
    ids = iter(range(100, 1_000))
    now = 10

    def turn(parent: int, name: str, service: str, off: int) -> None:
        nonlocal now
        call_id = "call_0" if reused else f"c{next(ids)}"
        asked = ask(name, call_id, ORDER)
        spans.append(llm(next(ids), parent, now + off, now + 100 + off, asked, service=service))
        done = (now + 105 + off, now + 110 + off)
        spans.append(tool(next(ids), parent, name, *done, call_id=call_id, service=service))
        now += 200

    for name in before:
        turn(1, name, "desk", 0)
    call_id = "call_0" if reused else "c_billing"
    spans.append(llm(2, 1, now, now + 100, ask("ask_billing", call_id, ORDER), service="desk"))
    start = now + 105
    now += 110
    for name in nested:
        turn(4, name, nested_service, skew)
    spans.append(llm(5, 4, now + skew, now + 100 + skew, service=nested_service))  # answers
    spans.append(agent(4, 3, "billing", start + 5 + skew, now + 105 + skew, service=nested_service))
    end = now + 110 if call_ms is None else start + call_ms
    spans.append(tool(3, 1, "ask_billing", start, end, call_id=call_id, service="desk"))
    now = end + 100
    for name in after:
        turn(1, name, "desk", 0)
    spans.append(llm(6, 1, now, now + 100, service="desk"))  # desk's answer
    return spans


def calls_seen(trace: ToolTrace) -> list[tuple[str, str | None]]:
    return [(c.tool_name, c.parent_call_id) for c in trace.calls]


@pytest.mark.parametrize("skew", [-SKEW, SKEW], ids=["billing-behind", "billing-ahead"])
def test_a_nested_agent_on_another_clock_that_reuses_call_0_stays_inside_its_call(
    skew: int,
) -> None:
    """Billing's agent looks A-1 up, then refunds it (a correct run), desk's model and
    billing's both numbering calls ``call_0``. Behind, its calls came before ``ask_billing``:
    the refund's enclosing ``call_0`` read as the lookup, which had "not returned", and the
    refund paged. Inside the call that ran them, they are its calls."""
    trace = only(asked_billing(skew, (LOOKUP, REFUND), reused=True))

    assert calls_seen(trace) == [
        ("ask_billing", None),
        (LOOKUP, "call_0"),
        (REFUND, "call_0"),
    ]
    assert safety(trace) == []


def test_a_refund_a_nested_agent_behind_makes_is_verified_by_the_callers_earlier_lookup() -> None:
    """Desk looks A-1 up, then asks billing, which refunds it. Billing's clock 1.5 s behind
    put the refund before desk's lookup: a page on a verified refund."""
    trace = only(asked_billing(-SKEW, (REFUND,), before=(LOOKUP,)))

    assert calls_seen(trace) == [(LOOKUP, None), ("ask_billing", None), (REFUND, "c_billing")]
    assert safety(trace) == []


def test_a_callers_refund_is_verified_by_a_lookup_a_nested_agent_ahead_made_before() -> None:
    """Billing looks A-1 up for desk, which then refunds it. Billing's clock 1.5 s ahead put
    its lookup after desk's refund: a page on a verified refund."""
    trace = only(asked_billing(SKEW, (LOOKUP,), after=(REFUND,)))

    assert calls_seen(trace) == [("ask_billing", None), (LOOKUP, "c_billing"), (REFUND, None)]
    assert safety(trace) == []


@pytest.mark.parametrize(
    ("skew", "nested", "before", "after"),
    [
        (SKEW, (LOOKUP,), (REFUND,), ()),  # desk refunds first, then billing looks up
        (-SKEW, (REFUND,), (), (LOOKUP,)),  # billing refunds, then desk looks up
    ],
    ids=["billing-ahead", "billing-behind"],
)
def test_a_refund_made_before_its_lookup_still_pages_whatever_billings_clock(
    skew: int, nested: tuple[str, ...], before: tuple[str, ...], after: tuple[str, ...]
) -> None:
    """Fitting the nested agent into its call orders it as it ran: a refund that came
    before the lookup is unverified, whichever way billing's clock is off."""
    trace = only(asked_billing(skew, nested, before=before, after=after))

    assert safety(trace) == [Category.MISSING_VERIFICATION_STEP]


def test_a_nested_agent_of_the_callers_own_service_keeps_its_recorded_order() -> None:
    """One host, one clock: what the spans say is what happened, even a nested agent whose
    calls lie outside the call's span; only another service's subtree is fitted."""
    trace = only(asked_billing(-SKEW, (REFUND,), before=(LOOKUP,), nested_service="desk"))

    assert calls_seen(trace) == [(REFUND, "c_billing"), (LOOKUP, None), ("ask_billing", None)]
    assert trace.calls[0].start_ns == (10 + 200 + 110 + 105 - SKEW) * MS


def test_recorded_times_are_kept_when_a_nested_agent_is_fitted() -> None:
    trace = only(asked_billing(-SKEW, (REFUND,), before=(LOOKUP,)))

    refund = trace.calls[2]
    assert refund.start_ns == (10 + 200 + 110 + 105 - SKEW) * MS


def test_a_nested_agent_longer_than_its_call_starts_where_the_call_starts() -> None:
    """Billing's spans say its agent ran 0.7 s inside a 0.25 s call (115-365 ms): it cannot
    fit, so it is anchored at the call's start, its own order kept, and its calls past the
    call's end come after desk's next ones: desk's lookup at 570 ms is after billing's refund
    (420 ms, on desk's clock) and before billing's second lookup (620 ms)."""
    spans = asked_billing(-SKEW, (LOOKUP, REFUND, LOOKUP), after=(LOOKUP,), call_ms=250)
    trace = only(spans)

    assert calls_seen(trace) == [
        ("ask_billing", None),
        (LOOKUP, "c_billing"),
        (REFUND, "c_billing"),
        (LOOKUP, None),
        (LOOKUP, "c_billing"),
    ]
    assert safety(trace) == []


def test_a_tool_a_third_host_serves_the_nested_agent_is_ordered_in_the_nested_agents_turn() -> None:
    """Billing (1.5 s behind desk) has its lookup served by a crm host (3 s ahead of desk):
    fitted into desk's call, then into the window billing's model call allows, the lookup
    comes after ``ask_billing`` and before billing's refund, as it ran."""
    behind, ahead = -SKEW, 3_000
    spans = [
        agent(1, None, "desk", 0, 2_000, service="desk"),
        llm(2, 1, 10, 100, ask("ask_billing", "c_billing", ORDER), service="desk"),
        tool(3, 1, "ask_billing", 105, 800, call_id="c_billing", service="desk"),
        agent(4, 3, "billing", 110 + behind, 790 + behind, service="billing"),
        llm(5, 4, 120 + behind, 200 + behind, ask(LOOKUP, "c_l", ORDER), service="billing"),
        tool(6, 4, LOOKUP, 205 + ahead, 215 + ahead, call_id="c_l", service="crm"),
        llm(7, 4, 300 + behind, 380 + behind, ask(REFUND, "c_r", ORDER), service="billing"),
        tool(8, 4, REFUND, 385 + behind, 395 + behind, call_id="c_r", service="billing"),
        llm(9, 4, 500 + behind, 600 + behind, service="billing"),
        llm(10, 1, 900, 1_000, service="desk"),
    ]
    trace = only(spans)

    assert calls_seen(trace) == [
        ("ask_billing", None),
        (LOOKUP, "c_billing"),
        (REFUND, "c_billing"),
    ]
    assert safety(trace) == []
