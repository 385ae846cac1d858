"""Review of 7d25474, ``by_name._asked_beside``'s ``later`` rule: a later waiting request
asking for a remote span's recorded arguments blocks the rerun only when its model call
ended before the span's start. The commit says "by the span's own clock", but
``_ended_by`` compares the model call's end, on the agent's host's clock, with the tool
span's raw start, on the tool host's clock: no offset is applied. Hosts' clocks differ
(NTP keeps them within milliseconds to tens of milliseconds; a VM after a pause, seconds),
so the rule reverses with a skew as large as the gap between a model call's end and its
tool's start: a few milliseconds one way, a few hundred the other."""

from __future__ import annotations

from assembly_support import agent, ask, hexid, llm, on_orders, only

from toolwatch.model import SpanRecord
from toolwatch.model_traces import ToolTrace

A1 = {"order_id": "A-1"}
B2 = {"order_id": "B-2"}
C3 = {"order_id": "C-3"}


def hammered(desk_ahead_ms: int) -> ToolTrace:
    """``test_assembly_by_name_remote_retry.hammered`` with the agent's host ``desk``
    ``desk_ahead_ms`` ahead of ``orders`` (``orders`` behind): turn 1 asks three lookups
    at once, ``orders`` runs them one after another, C-3's times out; the model asks for
    C-3 again in turn 2 (call_4) and turn 3 (call_5), both time out. Each ``orders`` span
    starts 5 ms after the model call that asked ended, by a true clock."""
    d = desk_ahead_ms
    return only(
        [
            agent(1, None, "support_agent", d, d + 3_000, service="desk"),
            llm(
                2,
                1,
                d + 10,
                d + 100,
                ask("lookup_order", "call_1", A1, 0),
                ask("lookup_order", "call_2", B2, 1),
                ask("lookup_order", "call_3", C3, 2),
                service="desk",
            ),
            on_orders(3, "A-1", 105, 500),
            on_orders(4, "B-2", 505, 900),
            on_orders(5, "C-3", 905, 1300, failed=True),
            llm(6, 1, d + 1310, d + 1610, ask("lookup_order", "call_4", C3), service="desk"),
            on_orders(7, "C-3", 1615, 1700, failed=True),
            llm(8, 1, d + 1710, d + 2010, ask("lookup_order", "call_5", C3), service="desk"),
            on_orders(9, "C-3", 2015, 2100, failed=True),
            llm(10, 1, d + 2110, d + 2200, service="desk"),
        ]
    )


def test_the_agents_retries_on_a_host_50_ms_behind_run_their_own_turns_requests() -> None:
    """Scenario: ``hammered(50)``: ``orders``' clock is 50 ms behind ``desk``'s.
    Was: span 7 (raw start 1615 ms) is before turn 2's end on desk's clock (1660 ms), so
    call_4 does not block the rerun (``_ended_by`` false); ``_ran_again`` reads it through
    C-3's offset (905 - 150 = 755 ms) as 860 ms, before turn 2: span 7 and span 9 become
    ``rerun``s of call_3, call_4 and call_5 calls without a span (status OK though both
    timed out), the f23eb21 defect back. With clocks in step it holds only because 1615 >
    1610: any skew over 5 ms toward the tool host breaks it.
    Now: span 7 runs call_4 and span 9 call_5, as at 074ce3a (whose ``later`` blocked
    on any waiting request asking the same, whatever the clocks).
    Regression of 7d25474."""
    assert [(c.span_id, c.call_id, c.rerun, c.status.name) for c in hammered(50).calls] == [
        (hexid(3), "call_1", False, "OK"),
        (hexid(4), "call_2", False, "OK"),
        (hexid(5), "call_3", False, "ERROR"),
        (hexid(7), "call_4", False, "ERROR"),
        (hexid(9), "call_5", False, "ERROR"),
    ]


def on_orders_a1(n: int, start: int, end: int, *, failed: bool = False) -> SpanRecord:
    return on_orders(n, "A-1", start, end, failed=failed)


def asked_again(orders_ahead_ms: int) -> ToolTrace:
    """``test_assembly_by_name_remote_retry_then_model_asks_again.asked_again`` with
    ``orders`` ``orders_ahead_ms`` ahead of ``desk``: turn 1 (10-100 ms) asks A-1 (call_1);
    ``orders`` times out (105-200 ms true time), its framework's retry too (210-300 ms);
    turn 2 (400-500 ms) asks A-1 again (call_2), ``orders`` runs it (505-600 ms, OK); turn 3
    (700-800 ms) answers."""
    o = orders_ahead_ms
    return only(
        [
            agent(1, None, "support_agent", 0, 2_000, service="desk"),
            llm(2, 1, 10, 100, ask("lookup_order", "call_1", A1), service="desk"),
            on_orders_a1(3, o + 105, o + 200, failed=True),
            on_orders_a1(4, o + 210, o + 300, failed=True),
            llm(5, 1, 400, 500, ask("lookup_order", "call_2", A1), service="desk"),
            on_orders_a1(6, o + 505, o + 600),
            llm(7, 1, 700, 800, service="desk"),
        ]
    )


def test_a_framework_retry_on_a_host_1_s_ahead_is_a_rerun() -> None:
    """Scenario: ``asked_again(1000)``: ``orders``' clock is 1 s ahead of ``desk``'s.
    Was: span 4 (the framework's retry, raw start 1210 ms) starts after turn 2 ended on
    desk's clock (500 ms), so call_2 blocks the rerun: span 4 takes call_2 and span 6 (read
    through span 4's offset, 710 ms, as after turn 3) takes nothing: the false retry_limit
    page 7d25474 fixed, back under a skew of some 300 ms or more.
    Now: span 4 reruns call_1, span 6 is call_2, as with clocks in step (span 4's own
    first attempt, span 3, puts the host's offset at about 1 s: read through it, span 4
    started at 210 ms, before turn 2).
    Older (074ce3a's defect, which 7d25474 fixed only for clocks in step)."""
    assert [(c.span_id, c.call_id, c.rerun, c.status.name) for c in asked_again(1000).calls] == [
        (hexid(3), "call_1", False, "ERROR"),
        (hexid(4), "call_1", True, "ERROR"),
        (hexid(6), "call_2", False, "OK"),
    ]
