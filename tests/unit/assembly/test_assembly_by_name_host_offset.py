"""Review of bc44946, ``by_name._host_offset``: a tool host's least offset so far (a span's
start less the end of the model call that asked for it) is kept per tool service alone, for
the whole run, and read through for every agent's spans on that host."""

from __future__ import annotations

from assembly_support import REFUND_POLICY, agent, ask, hexid, llm, on_orders, only, tool

from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.loops import Loops
from toolwatch.evaluation.settings import LoopsSettings
from toolwatch.model import SpanRecord
from toolwatch.model_traces import ToolTrace

A1 = {"order_id": "A-1"}
Z9 = {"order_id": "Z-9"}


def on_orders_a1(n: int, start: int, end: int, *, failed: bool = False) -> SpanRecord:
    return on_orders(n, "A-1", start, end, failed=failed)


def with_billing_agent(billing_ahead_ms: int) -> ToolTrace:
    """A supervisor ``support_agent`` (service ``desk``) first runs a sub-agent
    ``billing_agent`` in another process (service ``billing``, its host's clock
    ``billing_ahead_ms`` ahead of ``desk``'s and ``orders``'), which looks up order Z-9 on the
    shared tool host ``orders`` (true time 205-300 ms, 5 ms after billing's model call ended
    at true 200 ms). Then ``test_assembly_by_name_remote_retry_then_model_asks_again
    .asked_again`` 1 s later on desk: turn 1 (1010-1100 ms) asks A-1 (call_1); ``orders``
    times out (1105-1200 ms), its framework's retry too (1210-1300 ms); turn 2 (1400-1500 ms)
    asks A-1 again (call_2), ``orders`` runs it (1505-1600 ms, OK); turn 3 (1700-1800 ms)
    answers. ``desk`` and ``orders`` are in step."""
    b = billing_ahead_ms
    return only(
        [
            agent(1, None, "support_agent", 0, 3_000, service="desk"),
            agent(11, 1, "billing_agent", b + 90, b + 600, service="billing"),
            llm(12, 11, b + 100, b + 200, ask("lookup_order", "call_b", Z9), service="billing"),
            tool(
                13,
                11,
                "lookup_order",
                205,
                300,
                service="orders",
                arguments='{"order_id": "Z-9"}',
            ),
            llm(14, 11, b + 310, b + 400, service="billing"),
            llm(2, 1, 1_010, 1_100, ask("lookup_order", "call_1", A1), service="desk"),
            on_orders_a1(3, 1_105, 1_200, failed=True),
            on_orders_a1(4, 1_210, 1_300, failed=True),
            llm(5, 1, 1_400, 1_500, ask("lookup_order", "call_2", A1), service="desk"),
            on_orders_a1(6, 1_505, 1_600),
            llm(7, 1, 1_700, 1_800, service="desk"),
        ]
    )


def desk_calls(trace: ToolTrace) -> list[tuple[str | None, str | None, bool, str]]:
    return [
        (c.span_id, c.call_id, c.rerun, c.status.name)
        for c in trace.calls
        if c.span_id != hexid(13)
    ]


def test_another_agents_clock_does_not_move_the_framework_retry_past_turn_2() -> None:
    """Scenario: ``with_billing_agent(400)``: billing's host is 400 ms ahead (a sub-agent on
    another machine, the shared ``orders`` host in step with desk).
    Was: billing's lookup (span 13) sets ``orders``' least offset to 205 - 600 = -395 ms,
    an offset against billing's clock, not desk's; desk's framework retry (span 4, 1210 ms)
    is read through it at 1605 ms, after turn 2 ended (1500 ms): call_2 blocks the rerun
    and ``_Senders.turned`` says turn 2 came between, so span 4 takes call_2 and span 6 (the
    model's real second request) takes none: the false page
    ``test_assembly_by_name_remote_retry_then_model_asks_again`` guards, back.
    Now: span 4 reruns call_1, span 6 is call_2, as with billing's clock in step
    (``with_billing_agent(0)``) and as at bc44946^ (``later`` read the raw start, 1210 ms;
    ``_ran_again`` span 3's own offset, 5 ms). An offset is between two clocks: keep it per
    (tool service, model call's service), not per tool service.
    Regression of bc44946."""
    assert desk_calls(with_billing_agent(400)) == [
        (hexid(3), "call_1", False, "ERROR"),
        (hexid(4), "call_1", True, "ERROR"),
        (hexid(6), "call_2", False, "OK"),
    ]


def test_another_agents_clock_raises_no_retry_limit_finding() -> None:
    """Scenario: ``with_billing_agent(400)`` under ``retry_limit`` 1 (the model retried A-1
    once, in turn 2).
    Was: span 4 (taking call_2) and span 6 (taking none) are two retries of a failed call:
    UNNECESSARY_TOOL_CALL on span 6, a false page.
    Now: no finding, as at bc44946^ and with billing's clock in step.
    Regression of bc44946."""
    policy = REFUND_POLICY.model_copy(update={"retry_limit": 1})
    found = Loops(LoopsSettings(), policy)(with_billing_agent(400), Reference()).findings
    assert [(f.category, f.span_id) for f in found] == []


def test_in_step_control() -> None:
    """Control (passes now): with billing's clock in step the same run is read right."""
    assert desk_calls(with_billing_agent(0)) == [
        (hexid(3), "call_1", False, "ERROR"),
        (hexid(4), "call_1", True, "ERROR"),
        (hexid(6), "call_2", False, "OK"),
    ]
