"""similarity: ``folded`` composes text NFC whatever symbols it holds, and stays linear on a
long run of combining marks (left uncomposed)."""

from __future__ import annotations

import time

from toolwatch.evaluation.similarity import _mark_run, folded, score_value

DECOMPOSED = "Order note: cafe\u0301 latte"


def test_contains_finds_composed_text_in_decomposed_text_after_a_rule_line() -> None:
    text = "\u2500" * 40 + "\n" + DECOMPOSED  # a "────" separator, then the note
    assert score_value("contains", "café", text, 0.05, True) == 1.0


def test_contains_finds_composed_text_in_decomposed_text_after_emoji() -> None:
    text = "\U0001f600" * 31 + " " + DECOMPOSED
    assert score_value("contains", "café", text, 0.05, True) == 1.0


def test_folded_composes_text_holding_a_long_run_of_symbols() -> None:
    assert "café" in folded("\u2500" * 40 + DECOMPOSED)


def test_a_mark_run_is_more_than_30_combining_marks_in_a_row() -> None:
    assert not _mark_run("a" + "\u0301" * 30)
    assert _mark_run("a" + "\u0301" * 31)
    assert _mark_run("\u2500" * 5 + "\u0316\u0301" * 16 + "\u2500")
    assert not _mark_run(("\u2500" + "\u0301" * 30) * 100)  # 30 at most, between symbols


def test_folding_20000_combining_marks_in_a_row_stays_fast() -> None:
    hostile = "a" + "\u0316\u0301" * 10_000  # alternating classes: NFC reorders them all
    start = time.perf_counter()
    folded(hostile)
    score_value("contains", "café", hostile, 0.05, True)
    score_value("fuzzy", "café", hostile, 0.05, True)
    # Composed, this is seconds; left uncomposed, a few milliseconds.
    assert time.perf_counter() - start < 0.5
