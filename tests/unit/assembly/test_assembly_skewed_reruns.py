"""A rerun on a tool host whose clock is off (review of 1278a4f, ad87e61 and cb47116).

``clocks._requested_windows`` moves a call whose tool span another service wrote than the
model call that asked for it into the window its request allows (``_Draft.moved``). A rerun
(``_Draft.again``: a retry under its call id, ``by_id``, or a span without id or arguments,
``by_name``) holds no request and was left on its host's raw clock while its first attempt
was moved: a second behind, the retry sorted before its own first attempt and before the
lookup that verified it, its raw interval joined a slow lookup's parallel group, and one
request gave two findings. It now moves with its first attempt (``_shift_reruns``).

Service ``desk`` runs the agent and its model calls; ``payments`` (clock a second behind, no
client span recorded: its spans are children of the agent span) runs the refund. Its first
attempt times out, and the framework runs the request again at once.
"""

from __future__ import annotations

import pytest
from assembly_support import REFUND_POLICY, agent, ask, hexid, llm, only, safety, tool

from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.safety import Safety
from toolwatch.evaluation.settings import SafetySettings
from toolwatch.model import Category, SpanRecord

A1 = {"order_id": "A-1"}
A1_JSON = '{"order_id": "A-1"}'
BEHIND = -1_000  # ms payments' clock is off desk's
ERROR = 2  # OTLP Status.code ERROR


def refund_attempts(call_id: str | None, first: int, retry: int) -> list[SpanRecord]:
    """The refund of A-1 on payments: span 5 (``first`` ms on desk's clock, 10 ms, arguments
    recorded) times out; span 6 (``retry`` ms, 10 ms, no arguments) runs it again and goes
    through. ``call_id``: the spans' (``None``: OpenAI Agents' id-less spans, ``by_name``)."""
    return [
        tool(
            5,
            1,
            "issue_refund",
            first + BEHIND,
            first + 10 + BEHIND,
            call_id=call_id,
            service="payments",
            arguments=A1_JSON,
            status_code=ERROR,
            error_type="Timeout",
        ),
        tool(
            6,
            1,
            "issue_refund",
            retry + BEHIND,
            retry + 10 + BEHIND,
            call_id=call_id,
            service="payments",
        ),
    ]


@pytest.mark.parametrize("call_id", ["c2", None], ids=["by_id", "by_name"])
def test_a_retried_refund_on_a_host_behind_is_verified_by_the_lookup_before_it(
    call_id: str | None,
) -> None:
    """Scenario: turn 1 looks A-1 up (desk, 101-110 ms); turn 2 (200-300 ms) asks for the
    refund of A-1, which payments runs at 305 ms (timed out) and again at 320 ms (ok), both
    recorded a second early.
    Now: the first attempt is moved to 300 ms, after the lookup; the rerun keeps -680 ms and
    is the run's first call, before the lookup and before its own first attempt: a
    MISSING_VERIFICATION_STEP page (critical, ToolwatchMissingVerification) on a run that
    looked A-1 up, then refunded it.
    Should: the rerun ordered with its request's first attempt (moved by as much, or into
    the same window): lookup, refund, refund again; no finding.
    Older: by_id reruns were never moved (c54ea6a pages alike); ad87e61's by_name reruns
    inherit it (before it, the retry was a request-less call, unmoved, paging alike)."""
    trace = only(
        [
            agent(1, None, "refund-bot", 0, 3_000, service="desk"),
            llm(2, 1, 10, 100, ask("lookup_order", "c1", A1), service="desk"),
            tool(3, 1, "lookup_order", 101, 110, service="desk", arguments=A1_JSON),
            llm(4, 1, 200, 300, ask("issue_refund", "c2", A1), service="desk"),
            *refund_attempts(call_id, 305, 320),
            llm(7, 1, 400, 500, service="desk"),
        ]
    )

    assert [(c.span_id, c.rerun) for c in trace.calls] == [
        (hexid(3), False),
        (hexid(5), False),
        (hexid(6), True),
    ]
    assert safety(trace) == []


def test_a_retried_refund_on_a_host_behind_does_not_join_the_slow_lookup() -> None:
    """Scenario (test_assembly_skewed_groups' run, the refund retried): turn 1's output is
    streamed (request not recorded); desk looks A-1 up slowly (210-1,410 ms); turn 2
    (1,500-1,600 ms) asks for the refund, which payments runs at 1,610 ms (timed out) and
    again at 1,655 ms, recorded a second early.
    Now: the first attempt is grouped on its moved interval (no group), but the rerun's raw
    655-690 ms overlaps the lookup: one parallel group, the lookup "issued alongside" the
    refund no longer verifies it: MISSING_VERIFICATION_STEP, the very page 1278a4f fixed,
    back whenever the refund was retried.
    Should: the rerun read on its first attempt's clock: no group, no finding.
    Older: before 1278a4f both attempts joined the lookup (two findings); 1278a4f fixed only
    the attempt that holds the request."""
    trace = only(
        [
            agent(1, None, "refund-bot", 0, 2_000, service="desk"),
            llm(11, 1, 110, 200, service="desk"),  # streamed: its request not recorded
            tool(12, 1, "lookup_order", 210, 1_410, service="desk", arguments=A1_JSON),
            llm(21, 1, 1_500, 1_600, ask("issue_refund", "c2", A1), service="desk"),
            *refund_attempts("c2", 1_610, 1_655),
            llm(31, 1, 1_800, 1_900, service="desk"),
        ]
    )

    assert [(c.tool_name, c.parallel_group) for c in trace.calls] == [
        ("lookup_order", None),
        ("issue_refund", None),
        ("issue_refund", None),
    ]
    assert safety(trace) == []


@pytest.mark.parametrize("call_id", ["c1", None], ids=["by_id", "by_name"])
def test_an_unverified_refund_retried_on_a_host_behind_is_one_finding(
    call_id: str | None,
) -> None:
    """Scenario: no lookup; the model asks for the refund of A-1 (10-100 ms); payments runs
    it at 105 ms (timed out) and again at 120 ms (ok), recorded a second early.
    Now: the rerun sorts before its own first attempt (it is not moved, the first attempt
    is), so ``attempts._requests`` meets the rerun first, finds no earlier attempt of its
    request and makes it a request of its own: two MISSING_VERIFICATION_STEP findings for
    one request, the second saying "the flagged call failed (Timeout)" of a refund that went
    through: what cb47116 set out to end.
    Should: one finding, on the attempt that went through (span 6), listing both attempts.
    Regression of cb47116's promise on skewed hosts (root cause older: the unmoved rerun;
    ``one_per_request`` also trusts the sequence to put a request's first attempt first)."""
    trace = only(
        [
            agent(1, None, "refund-bot", 0, 3_000, service="desk"),
            llm(2, 1, 10, 100, ask("issue_refund", "c1", A1), service="desk"),
            *refund_attempts(call_id, 105, 120),
            llm(7, 1, 400, 500, service="desk"),
        ]
    )

    findings = Safety(SafetySettings(), REFUND_POLICY)(trace, Reference()).findings

    assert [(f.category, f.span_id) for f in findings] == [
        (Category.MISSING_VERIFICATION_STEP, hexid(6))
    ]
    assert findings[0].details["attempt_spans"] == [hexid(5), hexid(6)]
