"""A ``call_count`` violation does not explain a successful request's second record (a
wrapper's span, ``rerun``) as a failed call made again (a review found it did)."""

from __future__ import annotations

from assembly_support import ONE_REFUND_POLICY, agent, ask, llm, only, tool

from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.invariants import Invariants
from toolwatch.evaluation.settings import InvariantsSettings

A1 = {"order_id": "A-1"}
POLICY = ONE_REFUND_POLICY


def test_a_wrapper_span_of_a_successful_refund_is_no_failed_call_made_again() -> None:
    """Scenario: the model refunds A-1 (c2), recorded by the tool's span and a wrapper's
    beside it (``rerun``, both ok), then asks for a second refund (c3, ok); policy
    ``call_count`` max 1 on issue_refund. The violation is right (2 refunds).
    Was: its explanation adds "(and 1 failed call made again)" and ``details`` say
    ``retried_failures: 1``, though no call failed (``retried`` returns the ok rerun, and
    ``_counted`` reads every place it returns as a failure made again).
    Now: no failed call named; the duplicate record is not a retried failure.
    Older (c21e8fc made ``retried`` return an ok rerun; the wording is older)."""
    trace = only(
        [
            agent(1, None, "refund-bot", 0, 1_000),
            llm(2, 1, 10, 100, ask("lookup_order", "c1", A1)),
            tool(3, 1, "lookup_order", 101, 110, call_id="c1"),
            llm(4, 1, 200, 300, ask("issue_refund", "c2", A1)),
            tool(5, 1, "issue_refund", 301, 330, call_id="c2"),
            tool(6, 1, "issue_refund", 302, 320, call_id="c2"),  # the wrapper's span
            llm(7, 1, 340, 390, ask("issue_refund", "c3", A1)),
            tool(8, 1, "issue_refund", 391, 399, call_id="c3"),
            llm(9, 1, 400, 500),
        ]
    )
    assert [c.rerun for c in trace.calls] == [False, False, True, False]

    result = Invariants(InvariantsSettings(), POLICY)(trace, Reference())

    assert result is not None
    (finding,) = result.findings
    assert "issue_refund called 2 times" in finding.explanation
    assert "failed call" not in finding.explanation
    assert "retried_failures" not in finding.details
