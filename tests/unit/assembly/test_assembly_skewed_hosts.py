"""A tool host's span that holds no request, read on the clock its host's other calls are.

``clocks._requested_windows`` moves a call whose tool span another service wrote than the
model call that asked for it into the window its request allows (``_Draft.moved``); its
retries and the calls nested in it move with it. A span of that host that holds no request
(the model output was streamed and its requests not recorded, or the instrumentation records
none for that turn) had no window and kept the host's raw clock: one host's calls read on
two clocks in one run. It now moves by as much as the host's call nearest it on the host's
own clock (``_shift_hosts``).

Service ``desk`` runs the agent and its model calls; ``payments`` (no client span recorded:
its spans are children of the agent span) runs tools on a host whose clock is off desk's.
"""

from __future__ import annotations

import pytest
from assembly_support import MS, agent, ask, hexid, llm, only, safety, tool

from toolwatch.model import Category, SpanRecord

A1 = {"order_id": "A-1"}
A1_JSON = '{"order_id": "A-1"}'
BEHIND = -1_000  # ms payments' clock is off desk's
AHEAD = 1_500


def on_payments(n: int, name: str, start: int, end: int, skew: int, **kw: object) -> SpanRecord:
    """Payments' span ``n`` of tool ``name``, run at ``start``-``end`` ms on desk's clock,
    recorded ``skew`` ms off."""
    return tool(n, 1, name, start + skew, end + skew, service="payments", **kw)


def test_a_refund_whose_request_was_not_recorded_follows_its_hosts_lookup() -> None:
    """Scenario: payments (a second behind) runs both tools. Turn 1 (10-100 ms) asks for the
    lookup of A-1, run at 105 ms; turn 2 (200-300 ms) is streamed, its request not recorded,
    and payments refunds A-1 at 305 ms.
    Now: the lookup is moved to 100 ms, when the model asked; the refund, holding no request,
    keeps payments' -695 ms and is the run's first call, before the lookup that verified it:
    a MISSING_VERIFICATION_STEP page (critical) on a run that looked A-1 up, then refunded.
    Should: the refund read on the clock its host's lookup is (moved by as much): lookup,
    refund; no finding."""
    trace = only(
        [
            agent(1, None, "refund-bot", 0, 3_000, service="desk"),
            llm(2, 1, 10, 100, ask("lookup_order", "c1", A1), service="desk"),
            on_payments(3, "lookup_order", 105, 110, BEHIND, call_id="c1", arguments=A1_JSON),
            llm(4, 1, 200, 300, service="desk"),  # streamed: its request not recorded
            on_payments(5, "issue_refund", 305, 320, BEHIND, arguments=A1_JSON),
            llm(6, 1, 400, 500, service="desk"),
        ]
    )

    assert [c.span_id for c in trace.calls] == [hexid(3), hexid(5)]
    assert safety(trace) == []


def test_a_lookup_whose_request_was_not_recorded_precedes_its_hosts_refund() -> None:
    """Scenario: payments (1.5 s ahead) runs both tools. Turn 1 (10-100 ms) is streamed, its
    request not recorded, and payments looks A-1 up at 105 ms; turn 2 (200-300 ms) asks for
    the refund of A-1, run at 305 ms.
    Now: the refund is moved back to 400 ms, when the next model call started; the lookup,
    holding no request, keeps payments' 1,605 ms, after the refund it verified: a
    MISSING_VERIFICATION_STEP page on a correct run.
    Should: lookup, refund; no finding."""
    trace = only(
        [
            agent(1, None, "refund-bot", 0, 3_000, service="desk"),
            llm(2, 1, 10, 100, service="desk"),  # streamed: its request not recorded
            on_payments(3, "lookup_order", 105, 110, AHEAD, arguments=A1_JSON),
            llm(4, 1, 200, 300, ask("issue_refund", "c2", A1), service="desk"),
            on_payments(5, "issue_refund", 305, 320, AHEAD, call_id="c2", arguments=A1_JSON),
            llm(6, 1, 400, 500, service="desk"),
        ]
    )

    assert [c.span_id for c in trace.calls] == [hexid(3), hexid(5)]
    assert safety(trace) == []


def refund_after_a_slow_lookup(skew: int) -> list[SpanRecord]:
    """Turn 1's output is streamed; desk looks A-1 up itself, slowly (210-1,410 ms). Turn 2
    (1,500-1,600 ms) asks payments to hold the order (1,605-1,608 ms); turn 3 (1,650-1,660
    ms) is streamed, and payments refunds A-1 (1,665-1,690 ms). Payments' times are
    recorded ``skew`` ms off."""
    return [
        agent(1, None, "refund-bot", 0, 2_000, service="desk"),
        llm(11, 1, 110, 200, service="desk"),  # streamed
        tool(12, 1, "lookup_order", 210, 1_410, service="desk", arguments=A1_JSON),
        llm(21, 1, 1_500, 1_600, ask("hold_order", "c_h", A1), service="desk"),
        on_payments(22, "hold_order", 1_605, 1_608, skew, call_id="c_h", arguments=A1_JSON),
        llm(31, 1, 1_650, 1_660, service="desk"),  # streamed
        on_payments(32, "issue_refund", 1_665, 1_690, skew, arguments=A1_JSON),
        llm(41, 1, 1_800, 1_900, service="desk"),  # answers
    ]


def test_a_refund_whose_request_was_not_recorded_does_not_join_the_slow_lookup() -> None:
    """Scenario: ``refund_after_a_slow_lookup`` with payments a second behind.
    Now: the hold is moved to 1,600 ms; the refund keeps payments' 665-690 ms, inside desk's
    lookup (210-1,410 ms): one parallel group (``ordering._ordered_interval`` reads the
    refund unmoved), the lookup "issued alongside" the refund no longer verifies it:
    MISSING_VERIFICATION_STEP.
    Should: the refund read on its host's clock as the hold is (1,660 ms): no group, no
    finding, the same calls and groups as the run with payments in step."""
    source = only(refund_after_a_slow_lookup(0))
    trace = only(refund_after_a_slow_lookup(BEHIND))

    groups = [(c.tool_name, c.parallel_group) for c in trace.calls]
    assert groups == [("lookup_order", None), ("hold_order", None), ("issue_refund", None)]
    assert groups == [(c.tool_name, c.parallel_group) for c in source.calls]
    assert safety(trace) == []


def test_a_call_whose_request_was_not_recorded_keeps_its_recorded_times() -> None:
    trace = only(refund_after_a_slow_lookup(BEHIND))

    (refund,) = [c for c in trace.calls if c.tool_name == "issue_refund"]
    assert (refund.start_ns, refund.end_ns) == ((1_665 + BEHIND) * MS, (1_690 + BEHIND) * MS)


def test_the_models_own_service_keeps_its_clock_without_a_recorded_request() -> None:
    """Desk's own lookup holds no request either (turn 1 streamed) but is desk's: one clock
    with the model calls, never moved by payments' offset. Recorded inside the refund's
    interval on desk's clock, it still joins it; were it moved by payments' shift, it would
    not."""
    spans = refund_after_a_slow_lookup(BEHIND)
    spans[2] = tool(12, 1, "lookup_order", 1_665, 1_680, service="desk", arguments=A1_JSON)
    trace = only(spans)

    groups = {c.tool_name: c.parallel_group for c in trace.calls}
    assert groups["lookup_order"] is not None
    assert groups["lookup_order"] == groups["issue_refund"]


def shifts_disagree(first: str) -> list[SpanRecord]:
    """Payments (a second behind) runs three calls; its moved calls disagree. Turn 1 (10-100
    ms) asks payments to check the balance, which it queues and runs at 1,150 ms: recorded
    at 150 ms, inside its window (100-1,200 ms), not moved. Turn 2 (1,200-1,300 ms) asks
    desk to run ``first`` for A-1 (1,305-1,310 ms). Turn 3 (1,400-1,500 ms) is streamed, and
    payments refunds A-1 at 1,505 ms (recorded 505 ms). Turn 4 (1,600-1,700 ms) asks
    payments to notify the customer, run at once: recorded at 705 ms, moved to 1,700 ms
    (995 ms). The refund is nearer the notice on payments' clock (200 ms) than the balance
    check (355 ms)."""
    return [
        agent(1, None, "refund-bot", 0, 3_000, service="desk"),
        llm(2, 1, 10, 100, ask("check_balance", "c1", {}), service="desk"),
        on_payments(3, "check_balance", 1_150, 1_160, BEHIND, call_id="c1"),
        llm(4, 1, 1_200, 1_300, ask(first, "c2", A1), service="desk"),
        tool(5, 1, first, 1_305, 1_310, service="desk", call_id="c2", arguments=A1_JSON),
        llm(6, 1, 1_400, 1_500, service="desk"),  # streamed
        on_payments(7, "issue_refund", 1_505, 1_515, BEHIND, arguments=A1_JSON),
        llm(8, 1, 1_600, 1_700, ask("notify_customer", "c3", A1), service="desk"),
        on_payments(9, "notify_customer", 1_705, 1_710, BEHIND, call_id="c3"),
        llm(10, 1, 1_800, 1_900, service="desk"),
    ]


def test_a_call_whose_request_was_not_recorded_takes_its_hosts_nearest_calls_shift() -> None:
    """Scenario: ``shifts_disagree``, desk looking A-1 up in turn 2.
    Now: the refund keeps payments' 505 ms, before desk's lookup at 1,305 ms: a
    MISSING_VERIFICATION_STEP page. Read by the offset of the host's call before it, the
    balance check (none: its window held it), it would page alike.
    Should: read by the notice's offset, the call nearest it on payments' clock (1,500 ms):
    after the lookup; no finding."""
    trace = only(shifts_disagree("lookup_order"))

    assert [c.tool_name for c in trace.calls] == [
        "check_balance",
        "lookup_order",
        "issue_refund",
        "notify_customer",
    ]
    assert safety(trace) == []


def test_a_refund_before_the_lookup_on_a_host_behind_still_pages() -> None:
    """Only what the host's clock explains moves: payments refunded A-1 at 1,505 ms, desk
    looked it up only at 1,810 ms (turn 5). The refund, read at 1,500 ms, is unverified."""
    spans = shifts_disagree("get_weather")
    spans[-1] = llm(10, 1, 1_720, 1_800, ask("lookup_order", "c4", A1), service="desk")
    spans.append(tool(11, 1, "lookup_order", 1_810, 1_820, service="desk", call_id="c4"))
    spans.append(llm(12, 1, 1_900, 2_000, service="desk"))
    trace = only(spans)

    assert safety(trace) == [Category.MISSING_VERIFICATION_STEP]


@pytest.mark.parametrize("skew", [BEHIND, AHEAD], ids=["behind", "ahead"])
def test_the_calls_nested_in_a_call_whose_request_was_not_recorded_move_with_it(
    skew: int,
) -> None:
    """Payments' refund (no request: turn 2 streamed) runs a ``charge`` span of its own
    below it. Both are read on the clock the host's lookup showed: the charge stays inside
    the refund, after the lookup."""
    trace = only(
        [
            agent(1, None, "refund-bot", 0, 3_000, service="desk"),
            llm(2, 1, 10, 100, ask("lookup_order", "c1", A1), service="desk"),
            on_payments(3, "lookup_order", 105, 110, skew, call_id="c1", arguments=A1_JSON),
            llm(4, 1, 200, 300, service="desk"),  # streamed
            on_payments(5, "issue_refund", 305, 320, skew, arguments=A1_JSON),
            tool(6, 5, "charge", 306 + skew, 310 + skew, service="payments"),
            llm(7, 1, 400, 500, service="desk"),
        ]
    )

    assert [c.span_id for c in trace.calls] == [hexid(3), hexid(5), hexid(6)]
    assert safety(trace) == []
