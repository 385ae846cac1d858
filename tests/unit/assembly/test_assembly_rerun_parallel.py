"""A rerun makes again the failed attempts of its own request only, not another request of
the same action issued beside it (``loops.retried``; a review found it made both again)."""

from __future__ import annotations

from assembly_support import ONE_REFUND_POLICY, agent, ask, llm, only, tool

from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.invariants import Invariants
from toolwatch.evaluation.loops import retried
from toolwatch.evaluation.settings import InvariantsSettings
from toolwatch.model import SpanRecord

POLICY = ONE_REFUND_POLICY
A1 = {"order_id": "A-1"}
ITEM1 = {"order_id": "A-1", "item": "1", "amount": 10}
ITEM2 = {"order_id": "A-1", "item": "2", "amount": 25}


def two_refunds_in_parallel() -> list[SpanRecord]:
    """The model looks A-1 up, then asks in one output for two refunds of order A-1 (two
    items: one action key, ``order_id`` being the bound field), c1 and c2, run in parallel.
    Both fail (c2 timed out: it may have gone through); the SDK's retry policy runs c1 again
    under its id (``rerun``), which succeeds. Nobody makes c2 again."""
    return [
        agent(1, None, "refund-bot", 0, 1_000),
        llm(2, 1, 10, 100, ask("lookup_order", "c1", A1)),
        tool(3, 1, "lookup_order", 101, 110, call_id="c1"),
        llm(4, 1, 200, 300, ask("issue_refund", "c2", ITEM1), ask("issue_refund", "c3", ITEM2)),
        tool(5, 1, "issue_refund", 301, 310, call_id="c2", status_code=2),
        tool(6, 1, "issue_refund", 302, 330, call_id="c3", status_code=2),
        tool(7, 1, "issue_refund", 312, 320, call_id="c2"),  # c2 run again: ok
        llm(8, 1, 400, 500),
    ]


def test_a_rerun_does_not_make_another_parallel_requests_failure_again() -> None:
    """Scenario: as ``two_refunds_in_parallel``.
    Was: ``retried`` says the rerun made both failed refunds again ({1, 2}): c3's failure
    is read as one action with c2's retry, and the ``call_count`` max 1 on issue_refund
    counts 1 refund: no violation, though c3 was a second refund the model asked for (its
    timeout may have gone through).
    Now: the rerun makes again its own request's attempt only ({1}): 2 actions, a
    violation (as ``retried``'s docstring says: "the failed attempts of its action before
    it"; the code clears every pending failure of the action key).
    Regression (c21e8fc: ``kept = [] if call.rerun``)."""
    trace = only(two_refunds_in_parallel())
    assert [(c.call_id, c.rerun) for c in trace.calls] == [
        ("c1", False),
        ("c2", False),
        ("c3", False),
        ("c2", True),
    ]
    names = [c.tool_name for c in trace.calls]

    assert retried(trace.calls, names, POLICY.action_fields()) == frozenset({1})
    result = Invariants(InvariantsSettings(), POLICY)(trace, Reference())
    assert result is not None
    assert len(result.findings) == 1
