"""What the safety evaluator's tests share: the minimal policy and a bound one, and ``evaluate``
with what it found (categories, drift, the one finding)."""

from __future__ import annotations

from typing import Any

import yaml

from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.policy_settings import PolicySettings
from toolwatch.evaluation.safety import Safety
from toolwatch.evaluation.settings import SafetySettings
from toolwatch.model import Category
from toolwatch.model_evaluation import EvalResult, Finding
from toolwatch.model_traces import ToolTrace

MINIMAL = """
policy:
  dangerous_tools: [issue_refund]
  verification_tools: [lookup_order]
"""
BOUND: dict[str, Any] = {
    "dangerous_tools": ["issue_refund"],
    "verification_tools": ["lookup_order"],
    "bindings": {"issue_refund.order_id": "lookup_order.order_id"},
}


def evaluate(run: ToolTrace, reference: Reference | None = None, **policy: Any) -> EvalResult:
    settings = PolicySettings.model_validate(policy or yaml.safe_load(MINIMAL)["policy"])
    return Safety(SafetySettings(), settings)(run, reference or Reference())


def categories(result: EvalResult) -> list[Category]:
    return [f.category for f in result.findings]


def drift(result: EvalResult) -> list[Finding]:
    return [f for f in result.findings if f.category is Category.DANGEROUS_ACTION_DRIFT]


def only(result: EvalResult) -> Finding:
    (finding,) = result.findings
    return finding


VERIFIED_BY: dict[str, Any] = {
    "dangerous_tools": ["issue_refund", "delete_account"],
    "verification_tools": ["lookup_order", "verify_identity"],
    "verified_by": {"Delete_Account": ["verify_identity"]},
}
