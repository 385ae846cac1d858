"""order: LCS against expected (over expected length) and source (over the longer length)."""

from __future__ import annotations

import pytest
from eval_factories import case, trace
from hypothesis import given
from hypothesis import strategies as st

from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.order import Order, first_divergence, lcs_length, order_score
from toolwatch.evaluation.settings import OrderSettings
from toolwatch.model import Category, ReferenceKind
from toolwatch.names import NameNormalizer

EXPECTED, SOURCE = ReferenceKind.EXPECTED, ReferenceKind.SOURCE


@pytest.mark.parametrize(
    ("actual", "reference", "kind", "score"),
    [
        ((), (), EXPECTED, 1.0),
        ((), (), SOURCE, 1.0),
        (("a",), (), EXPECTED, 1.0),  # no expected order to break
        (("a",), (), SOURCE, 0.0),
        (("a", "b", "c"), ("a", "b", "c"), EXPECTED, 1.0),
        (("a", "c", "b"), ("a", "b", "c"), EXPECTED, 2 / 3),
        (("x", "a", "y", "b"), ("a", "b"), EXPECTED, 1.0),  # extras do not break the order
        (("x", "a", "y", "b"), ("a", "b"), SOURCE, 0.5),  # against a source they count
        (("b", "a"), ("a", "b"), SOURCE, 0.5),
        (("a", "a"), ("a",), SOURCE, 0.5),
    ],
)
def test_order_score(
    actual: tuple[str, ...], reference: tuple[str, ...], kind: ReferenceKind, score: float
) -> None:
    assert order_score(actual, reference, kind) == pytest.approx(score)


def reference_lcs(a: list[str], b: list[str]) -> int:
    """The textbook quadratic table, to check the bit-parallel version against."""
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            table[i + 1][j + 1] = (
                table[i][j] + 1 if x == y else max(table[i][j + 1], table[i + 1][j])
            )
    return table[-1][-1]


@given(
    st.lists(st.sampled_from("abcd"), max_size=12), st.lists(st.sampled_from("abcd"), max_size=12)
)
def test_lcs_length_matches_the_quadratic_table(a: list[str], b: list[str]) -> None:
    assert lcs_length(a, b) == reference_lcs(a, b) == lcs_length(b, a)


def test_lcs_length() -> None:
    assert lcs_length("ABCBDAB", "BDCABA") == 4
    assert lcs_length([], ["a"]) == 0


def test_first_divergence() -> None:
    assert first_divergence(["a", "b"], ["a", "b"]) is None
    assert first_divergence(["a", "c"], ["a", "b"]) == 1
    assert first_divergence(["a"], ["a", "b"]) == 1


def test_drift_finding_points_at_the_first_divergence() -> None:
    evaluator = Order(OrderSettings(), NameNormalizer())
    result = evaluator(trace("a", "c", "b"), Reference(expected=case("a", "b", "c")))
    assert result is not None
    assert result.explanation == "Ordering: 67% (2/3 expected calls in order)."
    (finding,) = result.findings
    assert finding.category is Category.TOOL_ORDER_DRIFT
    assert (finding.span_id, finding.tool) == ("s1", "b")
    assert finding.explanation == (
        "Ordering: 67% (2/3 expected calls in order), first divergence at call 2: "
        "expected b, called c."
    )


def test_expected_no_tools_is_left_to_selection() -> None:
    evaluator = Order(OrderSettings(), NameNormalizer())
    assert evaluator(trace("a"), Reference(expected=case(expected_no_tools=True))) is None
