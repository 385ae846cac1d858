"""Tool-name normalization: folding, aliases, and the names a normalizer remembers."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from toolwatch import names
from toolwatch.names import NameNormalizer, fold

ALIASES = {"LookupOrder": "lookup_order", " refund ": "Issue_Refund"}
_NAMES = st.sampled_from([" LookupOrder", "lookuporder", "REFUND", "Search ", "", "  "])


def test_folds_and_maps_aliases_whatever_shape_carries_the_name() -> None:
    normalize = NameNormalizer(ALIASES)
    assert normalize(" LOOKUPORDER ") == "lookup_order"
    assert normalize({"name": "Refund"}) == "issue_refund"
    assert normalize({"function": {"name": "Search"}}) == "search"
    assert normalize({"function": "Search"}) == "search"
    assert normalize(None) == ""


@given(st.lists(_NAMES | st.text(max_size=6), max_size=30))
def test_remembering_never_changes_an_answer(values: list[str]) -> None:
    normalize = NameNormalizer(ALIASES)
    aliases = {fold(k): fold(v) for k, v in ALIASES.items()}
    for value in values + values:  # the second pass answers from memory
        assert normalize(value) == aliases.get(fold(value), fold(value))


def test_remembers_a_bounded_number_of_names() -> None:
    normalize = NameNormalizer()
    for n in range(names._MAX_REMEMBERED + 100):
        assert normalize(f"Tool{n}") == f"tool{n}"
    assert len(normalize._known) == names._MAX_REMEMBERED  # the bound itself
    assert normalize(f"Tool{names._MAX_REMEMBERED + 50}") == f"tool{names._MAX_REMEMBERED + 50}"


def test_does_not_remember_long_names() -> None:
    normalize = NameNormalizer()
    long_name = "T" * (names._MAX_REMEMBERED_LENGTH + 1)
    assert normalize(long_name) == "t" * (names._MAX_REMEMBERED_LENGTH + 1)
    assert normalize("Short") == "short"
    assert list(normalize._known) == ["Short"]  # a long name would hold memory for nothing
