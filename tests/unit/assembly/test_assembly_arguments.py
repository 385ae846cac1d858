"""Tool-argument parsing: double encoding, parse errors, decorator shapes."""

from __future__ import annotations

import json

from toolwatch.assembly.calls import decode_json, parse_arguments


def test_json_object_string_is_parsed() -> None:
    assert parse_arguments('{"order_id": "A-1001"}') == ({"order_id": "A-1001"}, None)


def test_double_encoded_string_is_decoded_twice() -> None:
    raw = json.dumps(json.dumps({"a": 1}))

    assert raw == '"{\\"a\\": 1}"'
    assert parse_arguments(raw) == ({"a": 1}, None)


def test_unparseable_string_is_kept_raw_with_a_reason() -> None:
    assert parse_arguments('{"a": ') == ('{"a": ', "arguments are not valid JSON")


def test_json_string_holding_plain_text_is_that_text() -> None:
    assert parse_arguments('"Paris"') == ("Paris", None)


def test_missing_arguments_are_none_without_error() -> None:
    assert parse_arguments(None) == (None, None)
    assert parse_arguments("  ") == (None, None)


def test_decoded_value_is_kept_as_is() -> None:
    assert parse_arguments({"x": 42}) == ({"x": 42}, None)
    assert parse_arguments([1, 2]) == ([1, 2], None)


def test_decorator_shape_becomes_its_kwargs() -> None:
    raw = json.dumps({"args": [], "kwargs": {"order_id": "A-1"}})

    assert parse_arguments(raw) == ({"order_id": "A-1"}, None)


def test_smolagents_decorator_shape_becomes_its_kwargs() -> None:
    value = {"args": [], "sanitize_inputs_outputs": False, "kwargs": {"q": "x"}}

    assert parse_arguments(value) == ({"q": "x"}, None)


def test_decorator_shape_with_positional_args_is_kept_whole() -> None:
    value = {"args": [1], "kwargs": {"q": "x"}}

    assert parse_arguments(value) == (value, None)


def test_object_with_other_keys_is_not_a_decorator_shape() -> None:
    value = {"kwargs": {"q": "x"}, "limit": 3}

    assert parse_arguments(value) == (value, None)


def test_decode_json_reports_only_a_failed_first_decode() -> None:
    assert decode_json("winner") == ("winner", True)
    assert decode_json('"winner"') == ("winner", False)
    assert decode_json("84") == (84, False)
