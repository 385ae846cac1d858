"""tool_arguments: a reference field written ``null`` (the call must not set it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from eval_factories import trace

from toolwatch.evaluation.arguments import ToolArguments
from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.settings import ToolArgumentsSettings
from toolwatch.model_evaluation import EvalResult
from toolwatch.names import NameNormalizer
from toolwatch.references.golden_file import load_golden_cases


def _judge(tmp_path: Path, sent: dict[str, Any], **settings: Any) -> EvalResult:
    path = tmp_path / "cases.yaml"
    path.write_text(
        "cases:\n  - id: refund-no-coupon\n    expected_tools:\n"
        "      - name: issue_refund\n"
        "        arguments: {order_id: A1, coupon: null}\n",
        encoding="utf-8",
    )
    (golden,) = list(load_golden_cases(path))
    evaluator = ToolArguments(
        ToolArgumentsSettings.model_validate({"threshold": 0.8, **settings}), NameNormalizer()
    )
    result = evaluator(trace(("issue_refund", sent)), Reference(expected=golden))
    assert result is not None
    return result


def test_golden_null_field_catches_a_run_that_sets_it(tmp_path: Path) -> None:
    result = _judge(tmp_path, {"order_id": "A1", "coupon": "SAVE50"})
    assert result.scores["score"] == pytest.approx(0.75)
    (finding,) = result.findings
    assert finding.field == "coupon"
    assert "unexpected: coupon" in finding.explanation
    assert "decided by" not in finding.explanation  # in the mean only


def test_golden_null_field_scores_0_under_strict(tmp_path: Path) -> None:
    result = _judge(tmp_path, {"order_id": "A1", "coupon": "SAVE50"}, strict=True)
    assert result.scores["score"] == pytest.approx(0.5)


@pytest.mark.parametrize("sent", [{"order_id": "A1", "coupon": None}, {"order_id": "A1"}])
def test_golden_null_field_matches_null_or_a_field_not_sent(
    tmp_path: Path, sent: dict[str, Any]
) -> None:
    result = _judge(tmp_path, sent)
    assert result.scores["score"] == 1.0
    assert result.findings == ()


def test_source_null_field_catches_a_run_that_sets_it() -> None:
    evaluator = ToolArguments(
        ToolArgumentsSettings.model_validate({"threshold": 0.8}), NameNormalizer()
    )
    result = evaluator(
        trace(("issue_refund", {"order_id": "A1", "coupon": "SAVE50"})),
        Reference(source=trace(("issue_refund", {"order_id": "A1", "coupon": None}))),
    )
    assert result is not None
    assert result.scores["score"] == pytest.approx(0.75)
