"""A rerun without any call id (``assembly.by_name`` marks an id-less span without arguments
after a failed attempt of its tool a rerun of that request, whose model call gave no id:
Gemini's ``functionCall`` before ids) is one request to ``loops`` and to
``evaluation.attempts`` alike: one finding (review of ad87e61 and cb47116)."""

from __future__ import annotations

from tests.unit.assembly.assembly_support import REFUND_POLICY, agent, ask, hexid, llm, only, tool
from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.loops import retried
from toolwatch.evaluation.safety import Safety
from toolwatch.evaluation.settings import SafetySettings
from toolwatch.model import Category

A1 = {"order_id": "A-1"}
ERROR = 2  # OTLP Status.code ERROR


def test_an_unverified_refund_retried_without_any_call_id_is_one_finding() -> None:
    """Scenario: no lookup; the model asks for the refund of A-1, its request without a call
    id; the tool span (no id, arguments recorded) times out and the framework runs the
    request again (a span without id or arguments), which goes through.
    Now: assembly marks span 4 a rerun of the request and ``loops.retried`` reads the two
    as one refund, but safety gives two MISSING_VERIFICATION_STEP findings (two pages' worth
    for one request), the first saying the refund failed (Timeout).
    Should: one finding on span 4 (outcome ok), ``attempt_spans`` both spans, as for a
    request with an id (key the request on the rerun's ``None`` id as loops does).
    Not a regression of the page count (before ad87e61 the retry was a request-less call:
    two findings too), but the gap cb47116 left for the reruns ad87e61 introduced."""
    trace = only(
        [
            agent(1, None, "refund-bot", 0, 3_000),
            llm(2, 1, 10, 100, ask("issue_refund", None, A1)),
            tool(
                3,
                1,
                "issue_refund",
                105,
                115,
                arguments='{"order_id": "A-1"}',
                status_code=ERROR,
                error_type="Timeout",
            ),
            tool(4, 1, "issue_refund", 120, 130),
            llm(5, 1, 400, 500),
        ]
    )
    assert [(c.call_id, c.rerun) for c in trace.calls] == [(None, False), (None, True)]
    assert retried(trace.calls, [c.tool_name for c in trace.calls]) == frozenset({0})

    findings = Safety(SafetySettings(), REFUND_POLICY)(trace, Reference()).findings

    assert [(f.category, f.span_id) for f in findings] == [
        (Category.MISSING_VERIFICATION_STEP, hexid(4))
    ]
    assert findings[0].details["attempt_spans"] == [hexid(3), hexid(4)]
