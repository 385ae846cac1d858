"""Shared helpers of the recognizers: JSON, un-flattening, ids, finish reasons, merging."""

from __future__ import annotations

from toolwatch.conventions.attrs import (
    OutputBuilder,
    OutputSummary,
    clean_id,
    finish_reason_list,
    first,
    first_str,
    group_indexed,
    merge_summaries,
    parse_json,
    plain_text,
)
from toolwatch.model import RequestedCall


def test_group_indexed_sorts_indices_as_numbers() -> None:
    attrs = {
        "p.10.name": "ten",
        "p.9.name": "nine",
        "p.1.name": "one",
        "p.1.id": "i1",
        "other.0.name": "x",
    }
    groups = group_indexed(attrs, "p.")
    assert [groups[i]["name"] for i in sorted(groups)] == ["one", "nine", "ten"]
    assert groups[1] == {"name": "one", "id": "i1"}


def test_group_indexed_ignores_non_numeric_and_bare_indices() -> None:
    attrs = {"p.x.name": "a", "p.².name": "b", "p.3": "no rest", "p.4.ok": "yes"}
    assert group_indexed(attrs, "p.") == {4: {"ok": "yes"}}


def test_finish_reason_list_accepts_array_json_array_and_comma_joined() -> None:
    assert finish_reason_list(["stop", "", 3, "length"]) == ("stop", "length")
    assert finish_reason_list('["tool_calls"]') == ("tool_calls",)
    assert finish_reason_list("stop, tool_calls") == ("stop", "tool_calls")
    assert finish_reason_list("stop") == ("stop",)
    assert finish_reason_list(None) == ()
    assert finish_reason_list("[broken") == ()


def test_clean_id_drops_placeholders() -> None:
    assert clean_id("call_1") == "call_1"
    assert clean_id("") is None
    assert clean_id("<not specified>") is None
    assert clean_id(None) is None
    assert clean_id(1234) == "1234"
    assert clean_id(True) is None


def test_parse_json_decodes_once_and_tolerates_garbage() -> None:
    assert parse_json('"{\\"a\\": 1}"') == '{"a": 1}'  # double encoding: one layer only
    assert parse_json("{oops") is None
    assert parse_json("[" * 50_000) is None  # too deep: not JSON, not RecursionError
    assert parse_json({"already": "structured"}) == {"already": "structured"}


def test_plain_text_unquotes_json_string_literals_and_renders_structures() -> None:
    assert plain_text('"Hello"') == "Hello"
    assert plain_text("Hello") == "Hello"
    assert plain_text('"unterminated') == '"unterminated'
    assert plain_text({"a": 1}) == '{"a": 1}'
    assert plain_text("") is None
    assert plain_text(None) is None


def test_first_and_first_str_follow_key_priority() -> None:
    attrs = {"a": None, "b": "", "c": 7, "d": "x"}
    assert first(attrs, ("a", "b", "d")) == ""
    assert first_str(attrs, ("a", "b", "c", "d")) == "7"
    assert first_str(attrs, ("b", "d")) == "x"
    assert first_str({"a": True, "b": ["x"]}, ("a", "b")) is None


def test_output_builder_numbers_calls_and_dedups_finish_reasons() -> None:
    builder = OutputBuilder()
    builder.call("f", "c1", {"x": 1})
    builder.call(None, "<not specified>", None)
    builder.finish("stop")
    builder.finish("stop")
    builder.text("")
    builder.refuse("no")
    builder.refuse("ignored: the first refusal wins")
    assert builder.build() == OutputSummary(
        (RequestedCall("f", "c1", {"x": 1}, 0), RequestedCall("", None, None, 1)),
        (),
        ("stop",),
        "no",
    )


def test_empty_output_builder_builds_nothing() -> None:
    assert OutputBuilder().build() is None


def test_merge_takes_calls_from_the_first_encoding_with_calls() -> None:
    call = RequestedCall("f", "c", None, 0)
    other = RequestedCall("f", "c", "{}", 0)
    merged = merge_summaries(
        (
            None,
            OutputSummary(finish_reasons=("tool_calls",)),
            OutputSummary((call,), ("text",), ("tool_call",)),
            OutputSummary((other,), ("again",), ("stop",), "refused"),
        )
    )
    assert merged == OutputSummary(
        (call,), ("text",), ("tool_calls", "tool_call", "stop"), "refused"
    )
    assert merge_summaries((None, None)) is None
