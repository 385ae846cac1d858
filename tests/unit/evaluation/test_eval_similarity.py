"""Field strategies: exact, subset, numeric, contains, fuzzy."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolwatch.evaluation.severity import severity_for
from toolwatch.evaluation.similarity import (
    FUZZY_MAX_CHARS,
    STRATEGIES,
    as_number,
    same_value,
    score_value,
)
from toolwatch.jsontext import decimal_text
from toolwatch.model import Severity


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


@pytest.mark.parametrize("written", [False, True])
@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
@pytest.mark.parametrize(
    ("reference", "actual"),
    [
        (123, "123"),  # a model that sends the number as text: the tool reads the same number
        (12.0, "12"),
        (12.5, "12.5"),
        (2**64 + 1, str(2**64 + 1)),  # exact, however large
        ({"id": 5}, {"id": "5"}),
        ([1, {"a": 2.0}], ["1", {"a": "2"}]),  # at any depth
    ],
)
def test_a_reference_number_matches_its_decimal_text_under_every_strategy(
    strategy: str, reference: Any, actual: Any, written: bool
) -> None:
    assert score_value(strategy, reference, actual, 0.05, written) == 1.0


@pytest.mark.parametrize(
    ("reference", "actual", "score"),
    [
        (123, "0123", 0.0),  # text that is not the number's own: another id, maybe
        (123, " 123", 0.0),
        (123, "123.0", 0.0),
        (123, "1.23e2", 0.0),
        (2**64, str(2**64 + 1), 0.0),
        (1, "True", 0.0),
        (True, "1", 0.0),
        (True, "True", 0.0),  # a boolean is no number, nor its text
        ("true", True, 0.0),
        ("123", 123, 0.5),  # the case's text, sent as the number it spells: the type differs
        ("12.5", 12.5, 0.5),
        ("12.50", 12.5, 0.0),  # text a person wrote is text
        ({"id": "5"}, {"id": 5}, 0.5),
        ([["5"], "x"], [[5], "x"], 0.5),
        ({"id": "5", "n": 1}, {"id": 5, "n": 2}, 0.0),  # a value differs as well
    ],
)
def test_exact_reads_a_number_as_its_decimal_text_only(
    reference: Any, actual: Any, score: float
) -> None:
    assert score_value("exact", reference, actual, 0.05) == score


@pytest.mark.parametrize(
    ("strategy", "reference", "actual", "score"),
    [
        ("subset", {"id": "5", "n": 1}, {"id": 5, "n": 1, "x": 0}, 0.75),
        ("subset", {"ids": ["1042", "1043"]}, {"ids": [1043, 1042]}, 0.5),
        ("subset", ["1042", "x"], ["x", 1042], 0.75),
        ("subset", [str(i) for i in range(40)], [*range(39, -1, -1), "0"], 0.5 + 0.5 / 40),
        ("numeric", "1042", 1042, 0.5),  # a golden case's text is text, its type too
        ("contains", "42", 42, 0.5),
        ("fuzzy", "1042", 1042, 1.0),  # fuzzy compares texts
        ("fuzzy", {"ids": ["1", "2", "3"]}, {"ids": [1, 2, 3]}, 2 * 18 / 42),  # their ratio
    ],
)
def test_a_type_only_difference_scores_at_least_half_under_the_other_strategies(
    strategy: str, reference: Any, actual: Any, score: float
) -> None:
    assert score_value(strategy, reference, actual, 0.05, written=True) == pytest.approx(score)


_PLAIN_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text("abc", max_size=3),  # no number's text
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.text("xyz", max_size=2), children, max_size=3)
    ),
    max_leaves=12,
)


def _as_text(value: Any) -> Any:
    """``value`` with every number written as its decimal text."""
    if type(value) is list:
        return [_as_text(item) for item in value]
    if type(value) is dict:
        return {key: _as_text(item) for key, item in value.items()}
    text = decimal_text(value)
    return value if text is None else text


def _has_number(value: Any) -> bool:
    if type(value) is list:
        return any(_has_number(item) for item in value)
    if type(value) is dict:
        return any(_has_number(item) for item in value.values())
    return decimal_text(value) is not None


@settings(max_examples=200)
@given(_PLAIN_JSON, st.sampled_from(sorted(STRATEGIES)), st.booleans())
def test_numbers_sent_as_their_text_match_and_text_sent_as_numbers_never_pages_critical(
    value: Any, strategy: str, written: bool
) -> None:
    as_text = _as_text(value)
    assert score_value(strategy, value, as_text, 0.05, written) == 1.0
    score = score_value(strategy, as_text, value, 0.05, written)
    assert score >= 0.5
    assert severity_for(score) is not Severity.CRITICAL
    if strategy == "exact":
        assert score == (0.5 if _has_number(value) else 1.0)


@given(_PLAIN_JSON, _PLAIN_JSON)
def test_exact_matches_values_equal_as_json_values_and_no_others(a: Any, b: Any) -> None:
    assert score_value("exact", a, b, 0.05) == (1.0 if same_value(a, b) else 0.0)


@given(
    st.booleans(),
    st.integers(-2, 2) | st.floats(-2, 2) | st.sampled_from([0.0, 1.0, -0.0]),
    st.sampled_from(sorted(STRATEGIES - {"fuzzy"})),  # fuzzy: "false" is a bit like "1e-05"
    st.booleans(),
)
def test_a_boolean_never_matches_a_number_or_its_text(
    flag: bool, number: float, strategy: str, written: bool
) -> None:
    text = decimal_text(number)
    for reference, actual in ((flag, number), (number, flag), (flag, text), (text, flag)):
        assert score_value(strategy, reference, actual, 0.05, written) == 0.0
        assert score_value(strategy, [reference], [actual], 0.05, written) == 0.0
