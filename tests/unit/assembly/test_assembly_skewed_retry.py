"""A tool service on another host (its clock off the agent's, no client span recorded)
whose SDK retry policy runs a request again under its call id (``call_0``, reused by a model
that numbers every turn's calls from ``call_0``). Its spans cannot be set against the model
calls; on its own clock, the retry follows the attempt that took the request, and runs that
request again. (A review found the retry read as a call of its own with no arguments, and a
correct run paging MISSING_VERIFICATION_STEP, with the host ahead or behind.)"""

from __future__ import annotations

import pytest
from assembly_support import REFUND_POLICY, agent, ask, llm, only, tool

from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.safety import Safety
from toolwatch.evaluation.settings import SafetySettings
from toolwatch.model import SpanRecord

POLICY = REFUND_POLICY
A1 = {"order_id": "A-1"}


def retried_on_a_skewed_host(skew: int) -> list[SpanRecord]:
    """Desk's agent asks; service ``tools`` (its clock ``skew`` ms off desk's) runs."""
    return [
        agent(1, None, "refund-bot", 0, 4_000, service="desk"),
        llm(11, 1, 110, 200, ask("lookup_order", "call_0", A1), service="desk"),
        tool(
            12,
            1,
            "lookup_order",
            210 + skew,
            240 + skew,
            call_id="call_0",
            service="tools",
            status_code=2,
        ),
        tool(13, 1, "lookup_order", 250 + skew, 290 + skew, call_id="call_0", service="tools"),
        llm(21, 1, 410, 500, ask("issue_refund", "call_0", A1), service="desk"),
        tool(22, 1, "issue_refund", 510 + skew, 590 + skew, call_id="call_0", service="tools"),
        llm(50, 1, 1_100, 1_200, service="desk"),
    ]


@pytest.mark.parametrize("skew", [1_500, -1_500], ids=["tools-ahead", "tools-behind"])
def test_an_sdk_retry_on_a_skewed_tool_host_runs_the_request_again(skew: int) -> None:
    """Turn 1 asks lookup_order(A-1); ``tools`` fails it and runs it again (success); turn 2
    refunds A-1: a correct run, with ``tools`` 1.5 s ahead or behind."""
    trace = only(retried_on_a_skewed_host(skew))
    lookups = [c for c in trace.calls if c.tool_name == "lookup_order"]

    assert sorted((c.arguments == A1, c.rerun) for c in lookups) == [(True, False), (True, True)]
    assert Safety(SafetySettings(), POLICY)(trace, Reference()).findings == ()
