"""A rerun makes again only its own request's failed attempts, told by its call id, its
agent and the call it was asked under: two agents used as tools at once both ask under
``call_0`` (a review found one's rerun made the other's failed refund again, and a
call_count page lost)."""

from __future__ import annotations

from assembly_support import ONE_REFUND_POLICY, agent, ask, llm, only, tool

from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.invariants import Invariants
from toolwatch.evaluation.loops import retried
from toolwatch.evaluation.settings import InvariantsSettings
from toolwatch.model import SpanRecord

POLICY = ONE_REFUND_POLICY
A1 = {"order_id": "A-1"}


def two_nested_agents_refund_a1() -> list[SpanRecord]:
    """The outer agent asks two agents-as-tools at once (r1, r2); each nested agent's model,
    numbering its calls from ``call_0``, asks issue_refund(A-1) under ``call_0``. Both
    refunds run at once (spans 9 and 10 overlap): A's times out (error: it may have gone
    through), B's fails and B's SDK retry policy runs B's request again under ``call_0``
    (span 11, ok). Two refunds of A-1 were asked for and may have been paid."""
    return [
        agent(1, None, "support", 0, 1000),
        llm(
            2,
            1,
            10,
            100,
            ask("refunder", "r1", {"q": "A-1"}, 0),
            ask("refunder", "r2", {"q": "A-1"}, 1),
        ),
        tool(3, 1, "refunder", 101, 400, call_id="r1"),
        tool(4, 1, "refunder", 101, 400, call_id="r2"),
        agent(5, 3, "refund-agent", 102, 399),
        agent(6, 4, "refund-agent", 102, 399),
        llm(7, 5, 110, 200, ask("issue_refund", "call_0", A1)),
        llm(8, 6, 110, 200, ask("issue_refund", "call_0", A1)),
        tool(9, 5, "issue_refund", 201, 260, call_id="call_0", status_code=2),
        tool(10, 6, "issue_refund", 202, 210, call_id="call_0", status_code=2),
        tool(11, 6, "issue_refund", 212, 220, call_id="call_0"),  # B's request run again
    ]


def test_a_rerun_does_not_make_another_agents_failed_request_under_call_0_again() -> None:
    """Scenario: as ``two_nested_agents_refund_a1``.
    Was: the rerun (B's) reads every pending failure of the action whose call id is
    ``call_0`` as its own request's, A's too: ``retried`` says {A's, B's failure}, the
    call_count max 1 on issue_refund counts 3 - 2 = 1 refund, no violation.
    Now: only B's failed attempt is made again by B's rerun ({3}: the call of span 10);
    A's timed-out refund is another request (of another agent, beside it), as f7c9d6e's
    own docstring says ("those of other requests of its action not"): 2 refunds, a
    call_count violation.
    Older: the parent made every pending failure again (``kept = []``); f7c9d6e's fix of
    that keys the request by ``call_id`` only, which reused ids do not name.
    """
    trace = only(two_nested_agents_refund_a1())
    refunds = [(c.span_id, c.status.name, c.rerun) for c in trace.calls[2:]]
    assert refunds == [
        ("0000000000000009", "ERROR", False),
        ("000000000000000a", "ERROR", False),
        ("000000000000000b", "OK", True),
    ]
    names = [c.tool_name for c in trace.calls]

    assert retried(trace.calls, names, POLICY.action_fields()) == frozenset({3})
    result = Invariants(InvariantsSettings(), POLICY)(trace, Reference())
    assert result is not None
    assert len(result.findings) == 1
