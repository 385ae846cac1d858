"""tool_arguments: value fields decide a call's score, null is a field not sent, and fields
only the run sent are ignored unless ``strict`` (the example policy's settings)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from eval_factories import case, trace

from toolwatch.evaluation.arguments import ToolArguments, _is_value
from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.settings import ToolArgumentsSettings
from toolwatch.model import Severity
from toolwatch.model_evaluation import EvalResult, ExpectedCall
from toolwatch.names import NameNormalizer
from toolwatch.references.golden_file import load_golden_cases

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "golden-cases.yaml"
#: The example policy's tool_arguments section (examples/toolwatch.yaml).
EXAMPLE_SETTINGS: dict[str, Any] = {
    "threshold": 0.8,
    "numeric_tolerance": 0.05,
    "strategies": {"issue_refund.amount_usd": "numeric"},
}
PAGE = {Severity.HIGH, Severity.CRITICAL}
GOLDEN_REFUND = ExpectedCall(
    "issue_refund",
    {
        "order_id": "ORD-1042",
        "amount_usd": 49.99,
        "currency": "USD",
        "reason": "damaged item",
        "notify_customer": True,
    },
    field_match={"amount_usd": "numeric", "reason": "fuzzy"},
)


def evaluate(expected: ExpectedCall, actual: Any, **settings: Any) -> EvalResult:
    """One golden call against one run call, under the example settings and ``settings``."""
    merged = {**EXAMPLE_SETTINGS, **settings}
    evaluator = ToolArguments(ToolArgumentsSettings.model_validate(merged), NameNormalizer())
    result = evaluator(trace((expected.name, actual)), Reference(expected=case(expected)))
    assert result is not None
    return result


def _refund(**changes: Any) -> dict[str, Any]:
    assert GOLDEN_REFUND.arguments is not None
    return {**GOLDEN_REFUND.arguments, **changes}


def test_a_wrong_order_id_on_a_five_field_refund_is_critical() -> None:
    # Averaged, (4 + 0) / 5 = 0.8: no finding at threshold 0.8.
    (finding,) = evaluate(GOLDEN_REFUND, _refund(order_id="ORD-1043")).findings
    assert (finding.field, finding.score, finding.severity) == ("order_id", 0.0, Severity.CRITICAL)
    assert finding.explanation == (
        "Arguments of issue_refund: 0% against the expected call, decided by the value of"
        " order_id (differs: order_id)."
    )


def test_a_tenfold_amount_on_a_five_field_refund_is_a_finding() -> None:
    (finding,) = evaluate(GOLDEN_REFUND, _refund(amount_usd=499.9)).findings
    assert finding.field == "amount_usd" and finding.severity in PAGE


def test_an_amount_in_cents_on_a_four_field_refund_pages() -> None:
    golden = ExpectedCall(
        "issue_refund",
        {"order_id": "ORD-1042", "amount_usd": 49.99, "currency": "USD", "reason": "damaged"},
        field_match={"reason": "fuzzy"},
    )
    run = {"order_id": "ORD-1042", "amount_usd": 4999, "currency": "USD", "reason": "damaged"}
    (finding,) = evaluate(golden, run).findings
    assert finding.field == "amount_usd" and finding.severity in PAGE


def test_a_dropped_required_amount_is_a_high_finding() -> None:
    golden = ExpectedCall(
        "issue_refund", {"order_id": "ORD-1042", "amount_usd": 49.99, "currency": "USD"}
    )
    (finding,) = evaluate(golden, {"order_id": "ORD-1042", "currency": "USD"}).findings
    assert (finding.field, finding.severity) == ("amount_usd", Severity.HIGH)  # 0.5, not 0.83
    assert "missing: amount_usd" in finding.explanation


def test_a_wrong_recipient_pages() -> None:
    body = "Your refund of $49.99 for order ORD-1042 has been issued."
    golden = ExpectedCall(
        "send_email",
        {"to": "jane@example.com", "subject": "Your refund", "body": body},
        field_match={"subject": "fuzzy", "body": "fuzzy"},
    )
    run = {"to": "john@example.com", "subject": "Your refund", "body": body}
    (finding,) = evaluate(golden, run).findings
    assert finding.field == "to" and finding.severity in PAGE


def test_a_reworded_fuzzy_field_is_averaged_not_decisive() -> None:
    # "damaged item" has whitespace, and fuzzy declares free text anyway: the mean decides.
    result = evaluate(GOLDEN_REFUND, _refund(reason="item damaged"))
    assert result.findings == ()
    assert 0.8 < result.scores["score"] < 1.0


def test_a_one_word_fuzzy_field_does_not_decide() -> None:
    golden = ExpectedCall("search", {"q": "refunds", "n": 5}, field_match={"q": "fuzzy"})
    result = evaluate(golden, {"q": "returns", "n": 5})
    assert result.findings == ()  # the mean of 1 and fuzzy's 0.71


def test_a_type_only_difference_does_not_decide() -> None:
    """ "1042" sent as 1042 is the same value: weighed in the mean, not a wrong target."""
    golden = ExpectedCall("lookup", {"order_id": "1042", "a": 1, "b": 2, "c": 3})
    result = evaluate(golden, {"order_id": 1042, "a": 1, "b": 2, "c": 3})
    assert result.scores["score"] == pytest.approx((3 + 0.5) / 4)
    assert result.findings == ()


def test_a_nested_value_object_decides() -> None:
    golden = ExpectedCall("ship", {"item": {"sku": "A1", "qty": 2}, "a": 1, "b": 2, "c": 3})
    (finding,) = evaluate(
        golden, {"item": {"sku": "A1", "qty": 3}, "a": 1, "b": 2, "c": 3}
    ).findings
    assert (finding.field, finding.score) == ("item", 0.0)


def test_an_object_holding_a_sentence_is_averaged() -> None:
    golden = ExpectedCall("ship", {"item": {"sku": "A1", "note": "leave at door"}, "a": 1})
    result = evaluate(golden, {"item": {"sku": "A1", "note": "at the door"}, "a": 1})
    assert result.scores["score"] == pytest.approx(0.5)  # (0 + 1) / 2: exact on the object


@pytest.mark.parametrize(
    ("value", "is_value"),
    [
        ("ORD-1042", True),
        ("jane@example.com", True),
        (49.99, True),
        (False, True),
        ("x" * 64, True),
        ("x" * 65, False),  # long text is text
        ("damaged item", False),
        ("", False),
        (None, False),
        ({"sku": "A1", "qty": 2}, True),
        (["A1", "B2"], True),
        ([], False),  # nothing to identify
        ({"sku": "A1", "note": None}, False),
        (list(range(32)), True),
        (list(range(33)), False),  # bounded: a big value is weighed in the mean
    ],
)
def test_value_fields_are_short_scalars_and_small_containers_of_them(
    value: Any, is_value: bool
) -> None:
    assert _is_value(value, written=True) is is_value


def test_a_source_field_the_run_did_not_send_is_weighed_in_the_mean() -> None:
    """A shadow source may have filled in an optional parameter the run leaves out."""
    evaluator = ToolArguments(
        ToolArgumentsSettings.model_validate(EXAMPLE_SETTINGS), NameNormalizer()
    )
    source = trace(("search_kb", {"query": "return window", "top_k": 5}))
    result = evaluator(trace(("search_kb", {"query": "return window"})), Reference(source=source))
    assert result is not None and result.scores["score"] == pytest.approx(0.75)


# Null is a field not sent: strict function calling sends null for every optional parameter.

LOOKUP = ExpectedCall("lookup_order", {"order_id": "ORD-1042"}, match="exact")


def test_an_optional_field_sent_as_null_is_no_finding() -> None:
    result = evaluate(LOOKUP, {"order_id": "ORD-1042", "note": None})
    assert (result.findings, result.scores["score"]) == ((), 1.0)


def test_a_golden_null_left_out_by_the_run_is_no_finding() -> None:
    golden = ExpectedCall("lookup_order", {"order_id": "ORD-1042", "note": None})
    assert evaluate(golden, {"order_id": "ORD-1042"}).scores["score"] == 1.0


def test_several_null_optionals_are_no_finding_even_strict() -> None:
    golden = ExpectedCall("issue_refund", {"order_id": "ORD-1042", "amount_usd": 49.99})
    run = {"order_id": "ORD-1042", "amount_usd": 49.99, "reason": None, "idempotency_key": None}
    assert evaluate(golden, run, strict=True).scores["score"] == 1.0


def test_a_golden_value_sent_as_null_is_missing() -> None:
    (finding,) = evaluate(LOOKUP, {"order_id": None}).findings
    assert "missing: order_id" in finding.explanation


# Fields only the run sent: an optional parameter filled in, often with its default.


def test_the_example_kb_case_with_a_defaulted_optional_parameter_is_no_finding() -> None:
    found = load_golden_cases(EXAMPLE).get("kb-return-window")
    assert found is not None
    (search,) = found.expected_tools
    result = evaluate(search, {"query": "return window for opened electronics", "top_k": 5})
    assert (result.findings, result.scores["score"]) == ((), 1.0)


def test_the_example_lookup_with_a_defaulted_optional_parameter_is_no_finding() -> None:
    found = load_golden_cases(EXAMPLE).get("refund-verified-damaged-item")
    assert found is not None
    result = evaluate(found.expected_tools[0], {"order_id": "ORD-1042", "include_items": False})
    assert result.findings == ()


def test_strict_scores_a_field_only_the_run_sent_zero() -> None:
    (finding,) = evaluate(
        LOOKUP, {"order_id": "ORD-1042", "include_items": False}, strict=True
    ).findings
    assert (finding.score, finding.field) == (0.5, "include_items")
    assert "unexpected: include_items" in finding.explanation


def test_subset_ignores_a_field_only_the_run_sent_even_strict() -> None:
    golden = ExpectedCall("lookup_order", {"order_id": "ORD-1042"}, match="subset")
    result = evaluate(golden, {"order_id": "ORD-1042", "include_items": False}, strict=True)
    assert result.scores["score"] == 1.0


def test_a_field_only_the_run_sent_is_listed_when_another_field_makes_a_finding() -> None:
    (finding,) = evaluate(
        LOOKUP, {"order_id": "ORD-9", "include_items": False}, strict=True
    ).findings
    assert finding.explanation == (
        "Arguments of lookup_order: 0% against the expected call"
        " (differs: order_id; unexpected: include_items)."
    )
