"""Review of 074ce3a, ``by_name._may_run_again``'s ``later`` rule: an id-less span another
service wrote, recording the arguments of a later request still waiting, is that request's
execution, not a rerun. A tool host's framework retry that fails, after which the model
(told of the failure) asks for the same lookup again, is the most common shape of that: the
framework's retry now takes the model's later request, and the later request's own span is
left with none."""

from __future__ import annotations

from assembly_support import REFUND_POLICY, agent, ask, hexid, llm, on_orders, only

from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.loops import Loops
from toolwatch.evaluation.settings import LoopsSettings
from toolwatch.model import SpanRecord
from toolwatch.model_traces import ToolTrace

A1 = {"order_id": "A-1"}


def on_orders_a1(n: int, start: int, end: int, *, failed: bool = False) -> SpanRecord:
    """``orders``' lookup span ``n`` of A-1, its clock in step with the agent's."""
    return on_orders(n, "A-1", start, end, failed=failed)


def asked_again() -> ToolTrace:
    """Turn 1 (10-100 ms) asks lookup A-1 (call_1); ``orders`` times out (105-200 ms), its
    framework's retry too (210-300 ms), and the error goes back to the model. Turn 2
    (400-500 ms) asks for A-1 again (call_2), which ``orders`` runs (505-600 ms, OK); turn 3
    (700-800 ms) answers."""
    return only(
        [
            agent(1, None, "support_agent", 0, 1_000, service="desk"),
            llm(2, 1, 10, 100, ask("lookup_order", "call_1", A1), service="desk"),
            on_orders_a1(3, 105, 200, failed=True),
            on_orders_a1(4, 210, 300, failed=True),
            llm(5, 1, 400, 500, ask("lookup_order", "call_2", A1), service="desk"),
            on_orders_a1(6, 505, 600),
            llm(7, 1, 700, 800, service="desk"),
        ]
    )


def test_the_models_second_request_keeps_its_own_execution() -> None:
    """Scenario: ``asked_again``.
    Was: span 4 (the framework's retry, 210 ms, before turn 2 was even asked, on clocks in
    step) takes call_2 as its own execution: call_2 waits and asked for A-1. Span 6, call_2's
    real execution, read through span 4's offset (210 - 500 ms) starts after turn 3, so it
    is no rerun either, and takes no request: a call without a call id.
    Now: span 4 ran call_1 again (``rerun``), span 6 is call_2, as before 074ce3a.
    Regression of 074ce3a (a trade with its own scenario, a sequential host's large offset:
    here the offset is 5 ms)."""
    assert [(c.span_id, c.call_id, c.rerun, c.status.name) for c in asked_again().calls] == [
        (hexid(3), "call_1", False, "ERROR"),
        (hexid(4), "call_1", True, "ERROR"),
        (hexid(6), "call_2", False, "OK"),
    ]


def test_one_retry_of_the_model_is_within_a_retry_limit_of_one() -> None:
    """Scenario: ``asked_again`` under ``retry_limit`` 1: the model retried A-1 once (turn 2);
    the framework's retry of turn 1's request is no retry of the agent.
    Was: span 4 (taking call_2) and span 6 (taking none) are both calls of the agent identical
    to a failed one: two retries, UNNECESSARY_TOOL_CALL on span 6.
    Now: no finding, as before 074ce3a.
    Regression of 074ce3a."""
    policy = REFUND_POLICY.model_copy(update={"retry_limit": 1})
    found = Loops(LoopsSettings(), policy)(asked_again(), Reference()).findings
    assert [(f.category, f.span_id) for f in found] == []
