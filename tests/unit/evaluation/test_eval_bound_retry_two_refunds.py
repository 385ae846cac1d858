"""Review: the bound fields name the entity a dangerous call acts on, not the action. Two
refunds of one order (two items of A1) share the key, so when the first failed, on a flaky
tool, ``retried`` reads the second as its corrected retry. A shadow source whose item-X
refund failed and which went on to refund item Y "made one refund"; a candidate whose two
refunds both went through pages DANGEROUS_ACTION_DRIFT (critical), the flaky-tool false page
the retry rule exists to prevent. Before 06736c4: no finding."""

from __future__ import annotations

import yaml
from eval_factories import call, trace

from toolwatch.evaluation import EvaluationPipeline, EvaluationSettings
from toolwatch.model import Category

DOC = """
policy:
  dangerous_tools: [issue_refund]
  verification_tools: [lookup_order]
  bindings: {issue_refund.order_id: lookup_order.order_id}
"""
X = {"order_id": "A1", "item": "X", "amount": 20}
Y = {"order_id": "A1", "item": "Y", "amount": 30}


def test_a_source_that_refunded_two_items_of_one_order_made_two_refund_attempts() -> None:
    source = trace(
        ("lookup_order", {"order_id": "A1"}),
        call("issue_refund", X, index=1, ok=False),  # flaky: the refund service timed out
        call("issue_refund", Y, index=2),
    )
    run = trace(("lookup_order", {"order_id": "A1"}), ("issue_refund", X), ("issue_refund", Y))
    pipeline = EvaluationPipeline(EvaluationSettings.model_validate(yaml.safe_load(DOC)))
    result = pipeline.evaluate(run, source=source)
    drift = [f for f in result.findings if f.category is Category.DANGEROUS_ACTION_DRIFT]
    assert drift == []
