"""``contains`` and ``fuzzy`` on text: Unicode forms, long texts, bounded cost."""

from __future__ import annotations

import time
import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from toolwatch.evaluation.severity import severity_for
from toolwatch.evaluation.similarity import (
    FUZZY_LONG_CHARS,
    FUZZY_MAX_CHARS,
    FUZZY_MAX_TOKENS,
    _common_length,
    folded,
    score_value,
)
from toolwatch.model import Severity

REASON = (
    "The customer is asking for a refund on order ORD-5531 because the jacket they received "
    "is the wrong size. They would like to exchange it for a medium instead of returning it, "
    "if one is in stock. They mentioned they are travelling next week, so a quick reply "
    "would be appreciated."
)
BODY = (
    "Customer reports that the package for order ORD-2213 was marked as delivered on "
    "Monday but never arrived. They have already contacted the carrier, who could not "
    "locate it, and they are now threatening to file a chargeback with their bank if this "
    "is not resolved today. Please review the tracking history and contact the customer."
)


def test_one_word_swapped_in_a_long_reason_scores_high() -> None:
    # difflib with autojunk: 0.47.
    assert score_value("fuzzy", REASON, REASON.replace("exchange", "swap"), 0.05) >= 0.95


def test_one_word_changed_in_a_long_body_is_not_a_finding() -> None:
    # difflib with autojunk: 0.17, critical.
    changed = BODY.replace(" was ", " truly ", 1)
    score = score_value("fuzzy", BODY, changed, 0.05)
    assert score >= 0.95 and severity_for(score) is Severity.LOW


def test_unrelated_long_texts_score_low() -> None:
    assert score_value("fuzzy", REASON, BODY, 0.05) < 0.4


def test_short_texts_keep_the_character_ratio() -> None:
    assert score_value("fuzzy", "refund request", "refund requests", 0.05) > 0.95


def test_a_long_text_is_compared_by_words_from_either_side() -> None:
    short = REASON[: FUZZY_LONG_CHARS - 1]
    assert score_value("fuzzy", short, REASON, 0.05) == score_value("fuzzy", REASON, short, 0.05)


def test_fuzzy_on_hostile_texts_is_bounded() -> None:
    """Repetitive text made difflib without autojunk take seconds; the bit-parallel
    subsequence costs the same whatever the text (about 2 ms at the bound)."""
    for left, right in [
        ("." * FUZZY_MAX_CHARS, "," * FUZZY_MAX_CHARS),
        ("a " * (FUZZY_MAX_CHARS // 2), "a b " * (FUZZY_MAX_CHARS // 4)),
        (".," * (FUZZY_MAX_CHARS // 2), ",." * (FUZZY_MAX_CHARS // 2)),
    ]:
        start = time.perf_counter()
        score_value("fuzzy", left, right, 0.05)
        assert time.perf_counter() - start < 0.25  # generous: shared CI machines


def test_fuzzy_compares_at_most_the_token_bound() -> None:
    words = " ".join(["w"] * FUZZY_MAX_TOKENS)
    assert score_value("fuzzy", words + " a", words + " b", 0.05) == 1.0


def _lcs(a: list[str], b: list[str]) -> int:
    row = [0] * (len(b) + 1)
    for x in a:
        previous = row[:]
        for j, y in enumerate(b):
            row[j + 1] = previous[j] + 1 if x == y else max(previous[j + 1], row[j])
    return row[-1]


@given(st.lists(st.sampled_from("abcd")), st.lists(st.sampled_from("abcde")))
def test_the_bit_parallel_subsequence_is_the_longest_common_one(a: list[str], b: list[str]) -> None:
    assert _common_length(a, b) == _lcs(a, b)


def test_contains_finds_text_in_another_normalization_form() -> None:
    actual = unicodedata.normalize("NFD", "Customer says the café order never arrived")
    assert score_value("contains", "café order", actual, 0.05) == 1.0


def test_contains_and_fuzzy_read_full_width_forms_as_ascii() -> None:
    wide = "".join(chr(ord(c) + 0xFEE0) for c in "ORD-1042")
    assert score_value("contains", "ORD-1042", f"order {wide} arrived", 0.05) == 1.0
    assert score_value("fuzzy", "ORD-1042", wide, 0.05) == 1.0


def test_folded_is_caseless_and_composed() -> None:
    assert folded("CAFE\u0301 Straße") == folded("café STRASSE") == "café strasse"


def test_folding_hostile_text_is_linear() -> None:
    """CPython composes a run of marks in quadratic time (seconds for 20,000) and NFKC's
    expansions are slow too (U+FDFA is 18 characters): neither is asked of it."""
    marks = "a" + "\u0301\u0316" * 32_768
    for text in (marks, "\ufdfa" * 21_000):
        start = time.perf_counter()
        assert score_value("contains", "x", text, 0.05) == 0.0
        assert time.perf_counter() - start < 0.5  # about 40 ms; seconds if composed
    assert folded(marks) == marks  # a run past the stream-safe bound: left uncomposed
