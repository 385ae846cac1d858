"""Field strategies: exact, subset, numeric, contains, fuzzy."""

from __future__ import annotations

import math
from typing import Any

import pytest

from toolwatch.evaluation.similarity import (
    FUZZY_MAX_CHARS,
    STRATEGIES,
    as_number,
    same_value,
    score_value,
)


@pytest.mark.parametrize(
    ("strategy", "reference", "actual", "score"),
    [
        ("exact", 1, 1.0, 1.0),
        ("exact", True, 1, 0.0),  # a boolean is not a number
        ("exact", "a", "a ", 0.0),  # exact means exact: no trimming
        ("exact", "A", "a", 0.0),
        ("exact", {"x": 1, "y": [1, 2]}, {"y": [1, 2], "x": 1}, 1.0),  # key order ignored
        ("exact", [1, 2], [2, 1], 0.0),  # list order kept
        ("exact", None, None, 1.0),
        ("exact", math.nan, math.nan, 1.0),
        ("subset", {"a": 1}, {"a": 1, "b": 2}, 1.0),  # extra actual keys ignored
        ("subset", {"a": 1, "b": 2}, {"a": 1}, 0.5),  # a missing key scores 0
        ("subset", {"a": {"b": 1}}, {"a": {"b": 1, "c": 3}}, 1.0),  # nested
        ("subset", [1, 2], [3, 2, 1], 1.0),  # list containment, order ignored
        ("subset", [1, 1], [1], 0.5),  # items are used once
        ("subset", {}, {"a": 1}, 1.0),
        ("subset", "x", "x", 1.0),
        ("subset", "x", "y", 0.0),
        ("numeric", 100, 100, 1.0),
        ("numeric", 100, 102.5, 0.5),  # 2.5% off, tolerance 5%
        ("numeric", 100, 97.5, 0.5),
        ("numeric", 100, 105, 0.0),
        ("numeric", 100, 150, 0.0),
        ("numeric", 12.5, "12.50", 1.0),  # numeric strings are numbers
        ("numeric", "12.50", 12.5, 1.0),  # on either side (a shadow source's argument)
        ("numeric", "25.00", "25.0", 1.0),  # and on both
        ("numeric", 0, 0.0, 1.0),
        ("numeric", 0, 0.001, 0.0),  # a zero reference needs an exact zero
        ("numeric", "abc", "abc", 1.0),  # not numbers: exact
        ("numeric", "abc", "abd", 0.0),
        ("numeric", True, 1, 0.0),
        ("contains", "Paris", "I live in paris, France", 1.0),
        ("contains", "Lyon", "Paris", 0.0),
        ("contains", 3, 3, 1.0),  # non-strings: exact
        ("fuzzy", "same", "SAME", 1.0),
        ("fuzzy", "kitten", "sitting", 2 * 4 / 13),
        ("fuzzy", {"a": 1}, {"a": 1}, 1.0),
    ],
)
def test_strategy_scores(strategy: str, reference: Any, actual: Any, score: float) -> None:
    assert score_value(strategy, reference, actual, 0.05) == pytest.approx(score)


@pytest.mark.parametrize("written", [False, True])
@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
@pytest.mark.parametrize(
    ("reference", "actual"),
    [
        (5, 5.0),  # fuzzy compared the texts "5" and "5.0": 0.5
        ({"qty": 5}, {"qty": 5.0}),
        ([1, {"a": 2.0}], (1.0, {"a": 2})),
        ({"b": [1, 1], "a": None}, {"a": None, "b": [1.0, 1]}),
        ("Paris", "Paris"),
        (None, None),
        (math.nan, math.nan),
        (10**400, 10**400),
    ],
)
def test_values_equal_as_json_values_score_one_under_every_strategy(
    strategy: str, reference: Any, actual: Any, written: bool
) -> None:
    assert same_value(reference, actual)
    assert score_value(strategy, reference, actual, 0.05, written) == 1.0


def test_numeric_tolerance_is_configurable() -> None:
    assert score_value("numeric", 100, 110, 0.2) == pytest.approx(0.5)


def test_unknown_strategy_names_the_value() -> None:
    with pytest.raises(ValueError, match="'regex'"):
        score_value("regex", 1, 1, 0.05)


def test_fuzzy_compares_a_bounded_prefix() -> None:
    long_a = "x" * (FUZZY_MAX_CHARS + 10) + "tail-a"
    long_b = "x" * (FUZZY_MAX_CHARS + 10) + "tail-b"
    assert score_value("fuzzy", long_a, long_b, 0.05) == 1.0


@pytest.mark.parametrize(
    ("value", "number"),
    [
        (3, 3.0),
        (2.5, 2.5),
        (" 7 ", 7.0),
        ("1e3", 1000.0),
        (True, None),
        ("inf", None),
        ("x", None),
        (None, None),
    ],
)
def test_as_number(value: Any, number: float | None) -> None:
    assert as_number(value) == number


def test_same_value_distinguishes_booleans_from_numbers() -> None:
    assert same_value(False, False)
    assert not same_value(False, 0)
    assert same_value([1, {"a": None}], (1, {"a": None}))


def test_subset_of_lists_ignores_order_however_items_overlap() -> None:
    """A general item listed first must not take the actual item only a specific one fits."""
    general, specific = {"sku": "A"}, {"sku": "A", "qty": 2}
    for actual in ([specific, general], [general, specific]):
        assert score_value("subset", [general, specific], actual, 0.05) == 1.0
    assert score_value("subset", [general, specific], [specific], 0.05) == 0.5


def test_subset_of_long_lists_stays_cheap_and_counts_each_actual_item_once() -> None:
    reference = [{"i": i % 10} for i in range(2000)]
    actual = [{"i": i % 10, "x": 1} for i in range(1000)]
    assert score_value("subset", reference, actual, 0.05) == 0.5


@pytest.mark.parametrize(
    ("reference", "actual", "score"),
    [
        ("1042", "1043", 0.0),  # an id one off is another id, not 99.9% of it
        ("12.50", 12.5, 0.0),  # text a person wrote is text
        (12.5, "12.50", 1.0),  # the run's numeric text is still a number
    ],
)
def test_a_golden_references_text_is_text_under_numeric(
    reference: object, actual: object, score: float
) -> None:
    assert score_value("numeric", reference, actual, 0.05, written=True) == score
