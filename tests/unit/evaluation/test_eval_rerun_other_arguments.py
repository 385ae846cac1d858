"""A call the framework ran again under its request's call id (``ToolCall.rerun``) whose span
recorded other arguments than the attempt it made again (a retry policy that rewrites a field,
an instrumentation that records the arguments as the tool received them) is still that
request's action: ``loops.retried`` makes its request's failed attempts again by request (call
id, agent, parent call), not by action key, so ``acted`` keeps the attempt that went through,
with what it ran."""

from __future__ import annotations

from eval_factories import A1, A2, call, rerun, trace

from tests.unit.assembly.assembly_support import REFUND_POLICY
from toolwatch.evaluation.arguments import ToolArguments
from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.loops import acted, retried
from toolwatch.evaluation.settings import ToolArgumentsSettings
from toolwatch.model import Category
from toolwatch.model_evaluation import ExpectedCall, GoldenCase

NORMALIZE = REFUND_POLICY.normalizer()


def test_a_rerun_that_recorded_other_arguments_makes_its_failed_attempt_again() -> None:
    """Was: the rerun (A-2) found no failed attempt of its own action key, read as the
    request's success recorded again and dropped; the failed A-1 attempt stayed the action."""
    run = trace(
        call("issue_refund", A1, index=0, ok=False),
        rerun("issue_refund", A2, index=1, call_id="c0"),
    )
    assert retried(run.calls, ["issue_refund"] * 2) == {0}
    assert [c.span_id for c in acted(run, NORMALIZE).calls] == ["s1"]


def test_the_argument_drift_of_such_a_rerun_is_found() -> None:
    """The golden case refunds A-1; the refund that went through (the rerun) refunded A-2.
    Was: the comparison saw the failed A-1 attempt alone and found nothing (a lost page)."""
    case = GoldenCase(
        case_id="refund-a1", expected_tools=(ExpectedCall(name="issue_refund", arguments=A1),)
    )
    run = trace(
        call("issue_refund", A1, index=0, ok=False),
        rerun("issue_refund", A2, index=1, call_id="c0"),
    )
    result = ToolArguments(ToolArgumentsSettings(), NORMALIZE)(run, Reference(expected=case))

    assert result is not None
    (finding,) = result.findings
    assert (finding.category, finding.span_id) == (Category.ARGUMENT_VALUE_DRIFT, "s1")


def test_another_request_s_failure_of_the_same_action_is_not_made_again_by_a_rerun() -> None:
    """Unchanged: a refund of A-1 asked beside (c0, failed) and the rerun of another request
    (c1 ran A-1 too, failed, then its rerun went through): only c1's failure is made again."""
    run = trace(
        call("issue_refund", A1, index=0, ok=False, group=0),
        call("issue_refund", A1, index=1, ok=False, group=0),
        rerun("issue_refund", A1, index=2, call_id="c1"),
    )
    assert retried(run.calls, ["issue_refund"] * 3) == {1}
