"""``identity``: the fixed-size key of the references' memories, one per sequence of texts."""

from __future__ import annotations

import sys

from hypothesis import given
from hypothesis import strategies as st

from toolwatch.references.identity import IDENTITY_BYTES, identity


def test_any_length_of_text_makes_a_key_of_16_bytes() -> None:
    for text in ("", "conv-1", "x" * 65_536, "会話" * 30_000):
        key = identity(text)
        assert len(key) == IDENTITY_BYTES == 16
        assert sys.getsizeof(key) <= 49


def test_texts_are_framed_so_that_a_boundary_cannot_move() -> None:
    assert identity("ab", "c") != identity("a", "bc")
    assert identity("1:a", "") != identity("", "1:a")
    assert identity("a") != identity("a", "")


def test_a_lone_surrogate_is_not_the_character_that_replaces_it() -> None:
    """A sender's id may hold one (valid JSON, no Unicode character); it must stay apart
    from the id that writes U+FFFD in its place."""
    assert identity("\ud800") != identity("\ufffd")
    assert identity("\ud83d\ude00") != identity("\U0001f600")


@given(st.lists(st.text(), max_size=3), st.lists(st.text(), max_size=3))
def test_equal_texts_have_equal_keys_and_others_other_keys(a: list[str], b: list[str]) -> None:
    assert (identity(*a) == identity(*b)) == (a == b)
