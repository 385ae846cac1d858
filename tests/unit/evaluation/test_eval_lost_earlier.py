"""``base.lost_earlier``: a run judged ``missing_spans`` (its first spans went to another
replica) may hold its verification in what never came, so ``safety`` and the ``invariants``
``order`` rule give one answer: neither judges a refund no lookup informed in it, even one
issued alongside a lookup (an earlier lookup may be among the lost spans). Was (review-idev):
the ``order`` rule judged that one ("called alongside"), ``safety`` left it out; and it
stopped at the first refund, so a later one went unseen. Whole, both judge both."""

from __future__ import annotations

import dataclasses
from typing import Any

from eval_factories import call, trace

from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.invariants import Invariants
from toolwatch.evaluation.policy_settings import PolicySettings
from toolwatch.evaluation.safety import Safety
from toolwatch.evaluation.settings import InvariantsSettings, SafetySettings
from toolwatch.model import Category
from toolwatch.model_traces import ToolTrace

POLICY: dict[str, Any] = {
    "dangerous_tools": ["issue_refund"],
    "verification_tools": ["lookup_order"],
    "invariants": [{"kind": "order", "before": "lookup_order", "after": "issue_refund"}],
}


def _judged(run: ToolTrace) -> tuple[list[Category], list[Category], str]:
    """The categories safety and invariants find, and safety's explanation."""
    policy = PolicySettings.model_validate(POLICY)
    safety = Safety(SafetySettings(), policy)(run, Reference())
    invariants = Invariants(InvariantsSettings(), policy)(run, Reference())
    found = [f.category for f in invariants.findings] if invariants is not None else []
    return [f.category for f in safety.findings], found, safety.explanation


def test_a_refund_alongside_its_lookup_is_left_out_by_both_in_a_run_that_lost_its_start() -> None:
    together = trace(call("lookup_order", index=0, group=0), call("issue_refund", index=1, group=0))
    assert _judged(together)[:2] == (
        [Category.MISSING_VERIFICATION_STEP],
        [Category.INVARIANT_VIOLATION],
    )
    half = dataclasses.replace(together, complete=False, incomplete_reason="missing_spans")
    safety, invariants, explanation = _judged(half)
    assert (safety, invariants) == ([], [])
    assert "verification of 1 dangerous call not judged" in explanation


def test_no_refund_of_a_run_that_lost_its_start_is_judged_whichever_comes_first() -> None:
    run = trace(
        call("issue_refund", index=0),
        call("lookup_order", index=1, group=1),
        call("issue_refund", index=2, group=1),
    )
    assert _judged(run)[:2] == (
        [Category.MISSING_VERIFICATION_STEP] * 2,
        [Category.INVARIANT_VIOLATION],  # on the first refund
    )
    half = dataclasses.replace(run, complete=False, incomplete_reason="missing_spans")
    assert _judged(half)[:2] == ([], [])
