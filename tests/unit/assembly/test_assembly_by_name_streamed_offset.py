"""Review of bc44946, ``by_name._host_offset``: the least offset of a tool host is taken over
every span it ran for the agent, any tool's, and read through for every later span there.
``_host_offset``'s docstring says "a span cannot start before it was asked for", but a
streamed output starts its tools before the output ends (``by_id._Reused.take``,
``clocks`` say so): such a span's offset is negative by however long the output streamed
on after that call, and from then on every retry on that host reads as that much later."""

from __future__ import annotations

from assembly_support import REFUND_POLICY, agent, ask, hexid, llm, on_orders, only, tool

from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.loops import Loops
from toolwatch.evaluation.settings import LoopsSettings
from toolwatch.model import SpanRecord
from toolwatch.model_traces import ToolTrace

A1 = {"order_id": "A-1"}
Q = {"query": "late parcels"}


def on_orders_a1(n: int, start: int, end: int, *, failed: bool = False) -> SpanRecord:
    return on_orders(n, "A-1", start, end, failed=failed)


def streamed_then_asked_again() -> ToolTrace:
    """``desk`` and ``orders`` in step. Turn 0 (10-400 ms) is a streamed output that asks
    ``search_orders`` early (call_s), which ``orders`` starts at 105 ms while the output
    streams on until 400 ms (offset -295 ms). Then
    ``test_assembly_by_name_remote_retry_then_model_asks_again.asked_again`` shifted by
    500 ms: turn 1 (510-600 ms) asks A-1 (call_1); ``orders`` times out (605-700 ms), its
    framework's retry too (710-800 ms); turn 2 (900-1000 ms) asks A-1 again (call_2),
    ``orders`` runs it (1005-1100 ms, OK); turn 3 (1200-1300 ms) answers."""
    return only(
        [
            agent(1, None, "support_agent", 0, 2_000, service="desk"),
            llm(2, 1, 10, 400, ask("search_orders", "call_s", Q), service="desk"),
            tool(
                3,
                1,
                "search_orders",
                105,
                390,
                service="orders",
                arguments='{"query": "late parcels"}',
            ),
            llm(4, 1, 510, 600, ask("lookup_order", "call_1", A1), service="desk"),
            on_orders_a1(5, 605, 700, failed=True),
            on_orders_a1(6, 710, 800, failed=True),
            llm(7, 1, 900, 1_000, ask("lookup_order", "call_2", A1), service="desk"),
            on_orders_a1(8, 1_005, 1_100),
            llm(9, 1, 1_200, 1_300, service="desk"),
        ]
    )


def test_a_streamed_calls_offset_does_not_move_a_framework_retry_past_the_next_turn() -> None:
    """Scenario: ``streamed_then_asked_again``.
    Was: ``orders``' least offset is search_orders' -295 ms; the lookup's framework retry
    (span 6, 710 ms) reads as 1005 ms, after turn 2 ended (1000 ms): call_2 blocks the
    rerun and turn 2 counts as between, so span 6 takes call_2 and span 8 (the model's real
    second request) takes none: the false retry page
    ``test_assembly_by_name_remote_retry_then_model_asks_again`` guards, back. Any tool on
    the host started while its output streamed for longer than the gap between a
    framework's retry and the next turn's end does it, for the rest of the run.
    Now: span 6 reruns call_1, span 8 is call_2, as at bc44946^ (``later`` read the raw
    start; ``_ran_again`` the lookup's own first attempt's offset, 5 ms). A negative offset
    is no clock skew to learn (clamp a span's wait at 0: ``max(offset, skew so far)`` is not
    it either; take the offset only from spans that started after their model call ended,
    or keep it per tool as before).
    Regression of bc44946."""
    calls = streamed_then_asked_again().calls
    assert [(c.span_id, c.call_id, c.rerun, c.status.name) for c in calls] == [
        (hexid(3), "call_s", False, "OK"),
        (hexid(5), "call_1", False, "ERROR"),
        (hexid(6), "call_1", True, "ERROR"),
        (hexid(8), "call_2", False, "OK"),
    ]


def test_a_streamed_calls_offset_raises_no_retry_limit_finding() -> None:
    """Scenario: ``streamed_then_asked_again`` under ``retry_limit`` 1 (the model retried A-1
    once, in turn 2).
    Was: UNNECESSARY_TOOL_CALL on span 8 (spans 6 and 8 read as two retries of the agent).
    Now: no finding, as at bc44946^.
    Regression of bc44946."""
    policy = REFUND_POLICY.model_copy(update={"retry_limit": 1})
    found = Loops(LoopsSettings(), policy)(streamed_then_asked_again(), Reference()).findings
    assert [(f.category, f.span_id) for f in found] == []
