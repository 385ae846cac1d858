"""Tool-name normalization: folding, aliases, and the names a normalizer remembers."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolwatch import names
from toolwatch.names import NameNormalizer, Spellings, fold

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


MCP = re.compile(r"(mcp__)?[a-z0-9_-]+?__", re.IGNORECASE)


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("billing__issue_refund", "issue_refund"),  # an MCP server's tool, namespaced
        ("mcp__Billing__Issue_Refund", "issue_refund"),  # the Claude Agent SDK's form
        ("issue_refund", "issue_refund"),  # no namespace: nothing to remove
        ("mcp__billing__LookupOrder", "lookup_order"),  # removed, then aliased
        ("billing__", "billing__"),  # the match would leave nothing: kept whole
    ],
)
def test_a_configured_prefix_is_removed_before_aliases(raw: str, normalized: str) -> None:
    assert NameNormalizer({"LookupOrder": "lookup_order"}, MCP)(raw) == normalized


def test_aliases_written_with_the_prefix_apply_to_names_without_it() -> None:
    normalize = NameNormalizer({"billing__refund": "billing__issue_refund"}, MCP)
    assert normalize("refund") == "issue_refund"
    assert normalize("other__refund") == "issue_refund"


def test_a_long_name_is_not_handed_to_the_pattern() -> None:
    long_name = "billing__" + "x" * names._MAX_REMEMBERED_LENGTH
    assert NameNormalizer(prefix=MCP)(long_name) == long_name


def test_each_name_worked_out_is_told_once_while_it_is_remembered() -> None:
    told: list[str] = []
    normalize = NameNormalizer({"LookupOrder": "lookup_order"}, worked_out=told.append)
    for raw in ("LookupOrder", "LookupOrder", " lookuporder", "Search", "search"):
        normalize(raw)
    assert told == ["lookup_order", "lookup_order", "search", "search"]  # one per spelling


@pytest.mark.parametrize(
    ("name", "tool"),
    [
        ("billing__issue_refund", "issue_refund"),
        ("mcp__billing__issue_refund", "issue_refund"),
        ("billing.issue_refund", "issue_refund"),
        ("billing/lookup_order", "lookup_order"),
        ("billing:issue_refund", "issue_refund"),
        ("issue_refund", None),  # the tool itself
        ("undo_issue_refund", None),  # one word joined by "_": another tool
        ("reissue_refund", None),
        ("__issue_refund", None),  # no namespace before the separator
        ("billing__issue_refunds", None),
    ],
)
def test_a_name_in_a_namespace_names_the_tool_it_ends_in(name: str, tool: str | None) -> None:
    assert names.namespaced(name, {"issue_refund", "lookup_order"}) == tool


@given(st.lists(st.sampled_from(["mcp", "billing", "a", "_", "__", "-", "x1"]), max_size=8))
def test_a_name_normalized_twice_stays_the_same(parts: list[str]) -> None:
    """The timeline normalizes a call's name, then each evaluator normalizes that again."""
    normalize = NameNormalizer({"refund": "issue_refund"}, re.compile(r"[a-z0-9-]+__"))
    name = "".join(parts) + "refund"
    assert normalize(normalize(name)) == normalize(name)


def test_a_prefix_is_removed_as_often_as_it_matches() -> None:
    normalize = NameNormalizer(prefix=re.compile(r"[a-z0-9-]+__"))
    assert normalize("mcp__billing__issue_refund") == "issue_refund"


def test_a_name_folding_to_a_configured_one_is_spelled_as_configured() -> None:
    spell = Spellings(["refund-bot"])
    assert [spell(n) for n in ("Refund-Bot", " REFUND-BOT ", "refund-bot")] == ["refund-bot"] * 3
    assert spell("triage-bot") == "triage-bot"  # named nowhere: as it is
    assert spell.get("triage-bot") is None


def test_each_configured_spelling_is_its_own_and_others_take_the_first_sorted() -> None:
    spell = Spellings(["refund-bot", "Refund-Bot"])
    assert (spell("refund-bot"), spell("Refund-Bot")) == ("refund-bot", "Refund-Bot")
    assert spell("REFUND-BOT") == "Refund-Bot"


def test_a_spelling_once_given_is_kept_when_names_are_added() -> None:
    """A reload that adds a spelling that sorts first does not change what was reported
    (the ``agent`` label's series, and the findings behind them, stay one)."""
    spell = Spellings(["refund-bot"])
    spell.know(["REFUND-BOT"])
    assert spell("Refund-Bot") == "refund-bot"
    assert spell("REFUND-BOT") == "REFUND-BOT"  # a configured spelling is its own
    spell.know(["Triage"])
    assert spell("triage") == "Triage"
