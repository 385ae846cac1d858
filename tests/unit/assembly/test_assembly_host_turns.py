"""A tool host's span that no span on the model's clock sent, in a later turn whose
requests were not recorded, is no rerun of the request its service's last span took: read
through that span's offset on the model's clock, a model call came between (a review found
the second refund read as a rerun, and a call_count page lost)."""

from __future__ import annotations

from assembly_support import ONE_REFUND_POLICY, agent, ask, llm, only, tool

from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.invariants import Invariants
from toolwatch.evaluation.settings import InvariantsSettings
from toolwatch.model import SpanRecord

POLICY = ONE_REFUND_POLICY
A1 = {"order_id": "A-1"}
A1_JSON = '{"order_id": "A-1"}'


def refunded_again_in_a_streamed_turn() -> list[SpanRecord]:
    """Desk's agent (model numbering every turn's calls from ``call_0``) asks; service
    ``tools`` runs the tools, its clock in step with desk's (NTP), no client span recorded
    (its spans are children of the agent span). Turn 1 looks A-1 up, turn 2 refunds A-1
    (ok), turn 3's output was streamed (its requests not recorded, as ``turned`` allows
    for) and refunds A-1 again under ``call_0`` (ok): a second refund."""
    return [
        agent(1, None, "refund-bot", 0, 4_000, service="desk"),
        llm(11, 1, 110, 200, ask("lookup_order", "call_0", A1), service="desk"),
        tool(12, 1, "lookup_order", 210, 240, call_id="call_0", service="tools"),
        llm(21, 1, 410, 500, ask("issue_refund", "call_0", A1), service="desk"),
        tool(22, 1, "issue_refund", 510, 590, call_id="call_0", service="tools", arguments=A1_JSON),
        llm(31, 1, 700, 800, service="desk"),  # streamed: requests not recorded
        tool(32, 1, "issue_refund", 810, 890, call_id="call_0", service="tools", arguments=A1_JSON),
        llm(50, 1, 1_100, 1_200, service="desk"),
    ]


def test_a_tool_hosts_call_in_a_later_turn_is_no_rerun_of_the_last_request() -> None:
    """Scenario: as ``refunded_again_in_a_streamed_turn``.
    Was: span 32 (``take`` pairs it with none) is read as a rerun of turn 2's request
    (``_Asked.last``, with no ``turned`` check: the host's clock is taken as unusable
    because no client span sent it, though nothing says it is off); ``retried`` reads the
    rerun after a success as no action, and call_count max 1 on issue_refund counts 1
    refund: no violation (a missed page for a double refund; ``acted`` drops it for the
    golden/shadow comparisons too).
    Now: as before 61619b4, a model call (turn 3) came between turn 2's request and span
    32 on the one clock there is: span 32 is a call of its own, 2 refunds, a violation.
    Regression (61619b4; passes at 8c4a270).
    """
    trace = only(refunded_again_in_a_streamed_turn())
    refunds = [c for c in trace.calls if c.tool_name == "issue_refund"]
    assert [c.span_id for c in refunds] == ["0000000000000016", "0000000000000020"]

    assert [c.rerun for c in refunds] == [False, False]
    result = Invariants(InvariantsSettings(), POLICY)(trace, Reference())
    assert result is not None
    assert len(result.findings) == 1
