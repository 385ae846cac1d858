"""tool_arguments: a text that looks generated per run (an idempotency key, a timestamp, a
digest, a random token) is no value field: it differs on every shadow pair, so it weighs in
the mean only."""

from __future__ import annotations

from typing import Any

import pytest
from eval_factories import case, trace

from toolwatch.evaluation.arguments import ToolArguments, _is_value
from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.settings import ToolArgumentsSettings
from toolwatch.model_evaluation import EvalResult
from toolwatch.names import NameNormalizer

BASE: dict[str, Any] = {
    "order_id": "A1",
    "amount_usd": 10,
    "currency": "USD",
    "reason": "damaged item",
}


def _against_source(source_args: dict[str, Any], run_args: dict[str, Any]) -> EvalResult | None:
    evaluator = ToolArguments(
        ToolArgumentsSettings.model_validate({"threshold": 0.8}), NameNormalizer()
    )
    return evaluator(
        trace(("issue_refund", run_args)), Reference(source=trace(("issue_refund", source_args)))
    )


def test_shadow_pair_with_a_per_run_idempotency_key_scores_the_mean() -> None:
    result = _against_source(
        {**BASE, "idempotency_key": "4f1c2a9e-1d2b-4c3a-9b8e-0a1b2c3d4e5f"},
        {**BASE, "idempotency_key": "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"},
    )
    assert result is not None
    assert result.scores["score"] == pytest.approx(0.8)
    assert result.findings == ()


def test_shadow_pair_with_a_per_run_timestamp_raises_no_finding() -> None:
    result = _against_source(
        {**BASE, "requested_at": "2026-12-06T09:00:00.123Z"},
        {**BASE, "requested_at": "2026-12-06T09:00:02.456Z"},
    )
    assert result is not None
    assert result.findings == ()


def test_a_wrong_order_id_beside_a_per_run_key_still_decides() -> None:
    result = _against_source(
        {**BASE, "idempotency_key": "01ARZ3NDEKTSV4RRFFQ69G5FAV"},
        {**BASE, "order_id": "A2", "idempotency_key": "01ARZ3NDEKTSV4RRFFQ69G5FAW"},
    )
    assert result is not None
    assert result.scores["score"] == 0.0
    (finding,) = result.findings
    assert finding.field == "order_id"


@pytest.mark.parametrize(
    "text",
    [
        "4f1c2a9e-1d2b-4c3a-9b8e-0a1b2c3d4e5f",
        "{4F1C2A9E-1D2B-4C3A-9B8E-0A1B2C3D4E5F}",
        "urn:uuid:4f1c2a9e-1d2b-4c3a-9b8e-0a1b2c3d4e5f",
        "2026-12-06T09:00:00.123Z",
        "2026-12-06T09:00+01:00",
        "2026-12-06t09:00:00,5-0530",
        "sha256:9f86d081884c7d659a2feaa0c55ad015",
        "tok_4f1c2a9e1d2b4c3a",
        "01ARZ3NDEKTSV4RRFFQ69G5FAV",
        "dGhpcyBpcyBhIHRva2VuMTIz==",
    ],
)
def test_a_text_generated_per_run_is_no_value_field(text: str) -> None:
    assert not _is_value(text, written=False)
    assert not _is_value({"key": text, "qty": 2}, written=False)
    assert _is_value(text, written=True)  # a golden case gives only what it expects


@pytest.mark.parametrize(
    "text",
    [
        "A1",
        "ORD-1042",
        "2026-12-06",
        "1234567890123456789",  # a long number is an id, not a digest
        "jane@example.com",
        "PROD-2024-XL-BLUE-0001",
        "abcdefabcdefabcdef",  # hex letters alone: a word, not a digest
        "orders_for_customer_1042_today",
    ],
)
def test_an_id_or_code_is_still_a_value_field(text: str) -> None:
    assert _is_value(text, written=False)


def test_a_wrong_uuid_order_id_in_a_golden_case_decides() -> None:
    """A golden case names only the values it expects: a UUID it gives is the order's, not a
    key generated per run, so a run that refunds another order scores 0 on it."""
    evaluator = ToolArguments(
        ToolArgumentsSettings.model_validate({"threshold": 0.8}), NameNormalizer()
    )
    expected = {**BASE, "order_id": "4f1c2a9e-1d2b-4c3a-9b8e-0a1b2c3d4e5f"}
    sent = {**BASE, "order_id": "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"}
    result = evaluator(
        trace(("issue_refund", sent)),
        Reference(expected=case(("issue_refund", expected))),
    )
    assert result is not None
    assert result.scores["score"] == 0.0
    (finding,) = result.findings
    assert finding.field == "order_id"
