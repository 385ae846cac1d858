"""Review of dc15014: ``loops.retried`` matches a rerun to the failed attempts of its request
by ``_request`` (call id, parent call, agent), a key without the tool, so a rerun of one
tool "makes again" a failed call of another tool asked under the same id."""

from __future__ import annotations

from tests.unit.assembly.assembly_support import ONE_REFUND_POLICY, agent, ask, llm, only, tool
from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.invariants import Invariants
from toolwatch.evaluation.loops import retried
from toolwatch.evaluation.settings import InvariantsSettings
from toolwatch.model import SpanRecord

A1 = {"order_id": "A-1"}
B2 = {"order_id": "B-2"}
ERROR = 2  # OTLP Status.code ERROR


def _run() -> list[SpanRecord]:
    # A model that numbers every turn's calls from call_0 (loops' and attempts' docstrings).
    return [
        agent(1, None, "refund-bot", 0, 2_000),
        llm(2, 1, 10, 100, ask("issue_refund", "call_0", A1)),
        tool(3, 1, "issue_refund", 101, 110, call_id="call_0", status_code=ERROR),
        llm(4, 1, 200, 300, ask("lookup_order", "call_0", B2)),
        tool(5, 1, "lookup_order", 301, 310, call_id="call_0", status_code=ERROR),
        tool(6, 1, "lookup_order", 311, 320, call_id="call_0"),  # framework retry
        llm(7, 1, 400, 500, ask("issue_refund", "call_0", B2)),
        tool(8, 1, "issue_refund", 501, 510, call_id="call_0"),
        llm(9, 1, 600, 700),
    ]


def test_a_lookup_rerun_does_not_make_again_an_earlier_failed_refund_under_the_same_id() -> None:
    """Scenario: turn 1 refunds A-1 (call_0), which fails and is not retried; turn 2 looks up
    B-2 (call_0, the model numbers each turn from call_0), which fails and the framework
    runs again (``rerun``, ok); turn 3 refunds B-2 (call_0, ok).
    Was: ``retried`` returns the failed refund of A-1 too: the lookup's rerun pops every
    failed call of request key (call_0, None, refund-bot), whatever its tool.
    Now: only the failed lookup (place 1) is made again.
    Regression of dc15014 (before, a rerun only looked at failed calls of its own action
    key, which holds the tool)."""
    trace = only(_run())
    assert [(c.tool_name, c.rerun) for c in trace.calls] == [
        ("issue_refund", False),
        ("lookup_order", False),
        ("lookup_order", True),
        ("issue_refund", False),
    ]
    assert retried(trace.calls, [c.tool_name for c in trace.calls]) == frozenset({1})


def test_two_refunds_one_failed_still_violate_call_count_beside_another_tools_rerun() -> None:
    """Scenario: as above, policy ``call_count`` max 1 on issue_refund. Two refunds were
    attempted (A-1 failed and was never made again, B-2 went through).
    Was: no violation: the lookup's rerun marked the failed A-1 refund "made again", so
    ``_counted`` counts one refund (a missed INVARIANT_VIOLATION page).
    Now: one call_count violation, "issue_refund called 2 times".
    Regression of dc15014."""
    trace = only(_run())
    result = Invariants(InvariantsSettings(), ONE_REFUND_POLICY)(trace, Reference())
    assert result is not None
    assert len(result.findings) == 1
    assert "issue_refund called 2 times" in result.findings[0].explanation


def test_a_rerun_does_not_make_again_an_earlier_turns_failed_request_under_the_same_id() -> None:
    """Scenario: turn 1 refunds A-1 (call_0), which fails and is never made again; turn 2
    refunds B-2 (call_0 again: the model numbers each turn from call_0), which fails and the
    framework runs again (``rerun``, same arguments, ok); policy ``call_count`` max 1 on
    issue_refund. Two refunds were attempted: A-1 (failed) and B-2 (one action).
    Was: ``retried`` returns both failed refunds (the rerun pops every failed call of key
    (call_0, None, refund-bot), turn 1's request too), so ``call_count`` counts one refund:
    no INVARIANT_VIOLATION (a missed page).
    Now: only B-2's failed attempt (place 1) is made again; "issue_refund called 2 times".
    Regression of dc15014 (before, the rerun looked only at failed calls of its own action
    key: B-2's)."""
    trace = only(
        [
            agent(1, None, "refund-bot", 0, 2_000),
            llm(2, 1, 10, 100, ask("issue_refund", "call_0", A1)),
            tool(
                3,
                1,
                "issue_refund",
                101,
                110,
                call_id="call_0",
                status_code=ERROR,
                arguments='{"order_id": "A-1"}',
            ),
            llm(4, 1, 200, 300, ask("issue_refund", "call_0", B2)),
            tool(
                5,
                1,
                "issue_refund",
                301,
                310,
                call_id="call_0",
                status_code=ERROR,
                arguments='{"order_id": "B-2"}',
            ),
            tool(
                6, 1, "issue_refund", 311, 320, call_id="call_0", arguments='{"order_id": "B-2"}'
            ),  # framework retry
            llm(9, 1, 600, 700),
        ]
    )
    assert [(c.call_id, c.rerun) for c in trace.calls] == [
        ("call_0", False),
        ("call_0", False),
        ("call_0", True),
    ]
    assert retried(trace.calls, [c.tool_name for c in trace.calls]) == frozenset({1})
    result = Invariants(InvariantsSettings(), ONE_REFUND_POLICY)(trace, Reference())
    assert result is not None
    assert len(result.findings) == 1
    assert "issue_refund called 2 times" in result.findings[0].explanation


def test_an_idless_rerun_does_not_make_again_another_tools_idless_failure() -> None:
    """Scenario: requests without call ids (``ask(..., None, ...)``; tool spans without ids,
    arguments recorded). Turn 1 refunds A-1, which fails and is never made again; turn 2
    looks B-2 up, which fails, and the framework runs the lookup again (a span without id
    or arguments: ``by_name`` marks it a rerun of the lookup's request); turn 3 refunds B-2
    (ok). Policy ``call_count`` max 1 on issue_refund.
    Was: ``_request`` keys both failures (None, None, refund-bot): the lookup's rerun makes
    the failed refund "again" too, ``call_count`` counts one refund: no violation.
    Now: the refund of A-1 stays an action of its own: "issue_refund called 2 times".
    Regression of dc15014 (None ids joined ``_request``; before, only the rerun's own action
    key was read)."""
    trace = only(
        [
            agent(1, None, "refund-bot", 0, 2_000),
            llm(2, 1, 10, 100, ask("issue_refund", None, A1)),
            tool(
                3, 1, "issue_refund", 101, 110, status_code=ERROR, arguments='{"order_id": "A-1"}'
            ),
            llm(4, 1, 200, 300, ask("lookup_order", None, B2)),
            tool(
                5, 1, "lookup_order", 301, 310, status_code=ERROR, arguments='{"order_id": "B-2"}'
            ),
            tool(6, 1, "lookup_order", 311, 320),  # framework retry, no arguments
            llm(7, 1, 400, 500, ask("issue_refund", None, B2)),
            tool(8, 1, "issue_refund", 501, 510, arguments='{"order_id": "B-2"}'),
            llm(9, 1, 600, 700),
        ]
    )
    assert [(c.tool_name, c.call_id, c.rerun) for c in trace.calls] == [
        ("issue_refund", None, False),
        ("lookup_order", None, False),
        ("lookup_order", None, True),
        ("issue_refund", None, False),
    ]
    assert 0 not in retried(trace.calls, [c.tool_name for c in trace.calls])
    result = Invariants(InvariantsSettings(), ONE_REFUND_POLICY)(trace, Reference())
    assert result is not None
    assert len(result.findings) == 1
    assert "issue_refund called 2 times" in result.findings[0].explanation
