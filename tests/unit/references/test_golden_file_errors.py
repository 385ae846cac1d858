"""Golden-case file errors: each names the file, the field path and the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolwatch.references.golden_file import ReferenceFileError, load_golden_cases


def _error(tmp_path: Path, text: str) -> ReferenceFileError:
    path = tmp_path / "cases.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ReferenceFileError) as caught:
        load_golden_cases(path)
    return caught.value


def test_yaml_syntax_error_names_line_and_column(tmp_path: Path) -> None:
    error = _error(tmp_path, "cases:\n  - id: a\n    expected_tools: [x\n")

    assert str(error) == (
        f"{tmp_path / 'cases.yaml'}: line 4, column 1: invalid YAML: expected ',' or ']',"
        " but got '<stream end>' (while parsing a flow sequence)"
    )


def test_a_file_nested_deeper_than_the_yaml_reader_goes_is_an_error_not_a_crash(
    tmp_path: Path,
) -> None:
    error = _error(tmp_path, "cases: " + "[" * 3000 + "]" * 3000 + "\n")

    assert str(error) == f"{tmp_path / 'cases.yaml'}: nested too deeply to read"


def test_missing_tool_name_names_the_field_path(tmp_path: Path) -> None:
    error = _error(
        tmp_path,
        "cases:\n"
        "  - id: a\n"
        "    expected_tools:\n"
        "      - lookup_order\n"
        "      - arguments: {order_id: X}\n",
    )

    assert str(error) == (
        f"{tmp_path / 'cases.yaml'}: cases[0].expected_tools[1].name:"
        " required field is missing (line 5, column 9)"
    )
    assert error.path == tmp_path / "cases.yaml"
    assert error.problems == (
        ("cases[0].expected_tools[1].name", "required field is missing (line 5, column 9)"),
    )


def test_both_expected_no_tools_and_expected_tools_is_an_error(tmp_path: Path) -> None:
    error = _error(
        tmp_path,
        "cases:\n  - id: a\n    expected_no_tools: true\n    expected_tools: [search_kb]\n",
    )

    assert error.problems == (
        (
            "cases[0]",
            "expected_no_tools is true but expected_tools lists 1 tool(s); a case expects"
            " either tools or no tools (line 2, column 5)",
        ),
    )


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        (
            "expected_tools: [a, b, c]\n    expected_tool_count: 0",
            "expected_tool_count is 0 but expected_tools lists 3 call(s): a good run makes at"
            " least those",
        ),
        (
            "expected_no_tools: true\n    expected_min_steps: 1",
            "expected_min_steps is 1 but the case expects no tool call: leave"
            " expected_min_steps out",
        ),
        (
            "expected_tool_count: 2\n    expected_min_steps: 3",
            "expected_min_steps (3) is above expected_tool_count (2): a good run needs no more"
            " calls than it makes",
        ),
    ],
)
def test_contradictory_counts_are_an_error(tmp_path: Path, fields: str, reason: str) -> None:
    """Each would fail every good run: a structure drift, or a step efficiency of 0."""
    error = _error(tmp_path, f"cases:\n  - id: a\n    {fields}\n")
    assert error.problems == (("cases[0]", f"{reason} (line 2, column 5)"),)


def test_duplicate_case_ids_are_an_error(tmp_path: Path) -> None:
    error = _error(
        tmp_path,
        "cases:\n"
        "  - {id: refund, expected_no_tools: true}\n"
        "  - {id: other, expected_no_tools: true}\n"
        "  - {id: refund, expected_tool_count: 1}\n",
    )

    assert error.problems == (
        ("cases[2].id", "duplicate case id 'refund' (first used by cases[0]) (line 4, column 10)"),
    )


def test_a_value_a_case_merged_from_another_is_located_at_the_merge(tmp_path: Path) -> None:
    """Was: "duplicate case id 'one' ... (line 2, column 16)", the first case's own id, as if
    that one were the duplicate: PyYAML splices the merged pairs into the case. Now the
    second case's ``<<: *base``, which gave it the id."""
    error = _error(
        tmp_path,
        "cases:\n  - &base {id: one, expected_tools: [a]}\n  - <<: *base\n    category: refunds\n",
    )

    assert error.problems == (
        ("cases[1].id", "duplicate case id 'one' (first used by cases[0]) (line 3, column 9)"),
    )


def test_a_key_written_beside_a_merge_is_located_where_it_is_written(tmp_path: Path) -> None:
    """Was: at the merged value (line 2), which the case does not keep."""
    error = _error(
        tmp_path,
        "cases:\n  - <<: {id: x, expected_tool_count: 1}\n    expected_tool_count: -1\n",
    )

    assert error.problems == (
        (
            "cases[0].expected_tool_count",
            "must be greater than or equal to 0, got -1 (line 3, column 26)",
        ),
    )


def test_unknown_match_strategy_lists_the_allowed_ones(tmp_path: Path) -> None:
    error = _error(
        tmp_path,
        "cases:\n  - id: a\n    expected_tools:\n      - {name: issue_refund, match: numerc}\n",
    )

    assert error.problems == (
        (
            "cases[0].expected_tools[0].match",
            "must be 'exact', 'subset', 'numeric', 'contains' or 'fuzzy' (or a mapping of"
            " fields to them), got 'numerc' (line 4, column 37)",
        ),
    )


@pytest.mark.parametrize(
    ("match", "reason"),
    [
        (
            "{reason: contain}",
            "reason: must be 'exact', 'subset', 'numeric', 'contains' or 'fuzzy', got 'contain'",
        ),
        (
            "{order: exact}",
            "match names 'order', which the call's arguments do not give: a strategy per field"
            " applies to the arguments listed",
        ),
    ],
)
def test_a_strategy_per_field_names_strategies_and_given_fields(
    tmp_path: Path, match: str, reason: str
) -> None:
    error = _error(
        tmp_path,
        "cases:\n  - id: a\n    expected_tools:\n"
        f"      - {{name: x, arguments: {{order_id: A, reason: r}}, match: {match}}}\n",
    )
    ((where, said),) = error.problems
    assert where.startswith("cases[0].expected_tools[0]")
    assert said.startswith(reason)


def test_unknown_field_suggests_the_close_one(tmp_path: Path) -> None:
    error = _error(tmp_path, "cases:\n  - id: a\n    expected_tool: [x]\n")

    assert error.problems == (
        (
            "cases[0].expected_tool",
            "unknown field (did you mean 'expected_tools'?) (line 3, column 5)",
        ),
    )


def test_a_tool_entry_that_is_neither_name_nor_mapping(tmp_path: Path) -> None:
    error = _error(tmp_path, "cases:\n  - id: a\n    expected_tools: [42]\n")

    assert error.problems == (
        (
            "cases[0].expected_tools[0]",
            "must be a tool name or a mapping, got 42 (line 3, column 22)",
        ),
    )


def test_numeric_looking_case_id_must_be_quoted(tmp_path: Path) -> None:
    error = _error(tmp_path, "cases:\n  - {id: 42, expected_no_tools: true}\n")

    # 0042 is text (YAML 1.2 and JSON write no leading zero); 42 is a number.
    assert error.problems == (
        ("cases[0].id", "must be a string, got 42; quote it (line 2, column 10)"),
    )


def test_counts_are_bounded(tmp_path: Path) -> None:
    error = _error(
        tmp_path, "cases:\n  - id: a\n    expected_min_steps: 0\n    expected_tool_count: -1\n"
    )

    assert error.problems == (
        (
            "cases[0].expected_min_steps",
            "must be greater than or equal to 1, got 0 (line 3, column 25)",
        ),
        (
            "cases[0].expected_tool_count",
            "must be greater than or equal to 0, got -1 (line 4, column 26)",
        ),
    )


def test_a_case_that_expects_nothing_is_an_error(tmp_path: Path) -> None:
    error = _error(tmp_path, "cases:\n  - id: a\n    category: refunds\n")

    assert error.problems == (
        (
            "cases[0]",
            "the case expects nothing: give expected_tools, expected_no_tools,"
            " expected_min_steps, expected_tool_count or expected_refusal (line 2, column 5)",
        ),
    )


def test_duplicate_yaml_keys_are_an_error(tmp_path: Path) -> None:
    error = _error(
        tmp_path, "cases:\n  - id: a\n    expected_no_tools: true\n    expected_no_tools: false\n"
    )

    assert error.problems == (
        (
            "line 4, column 5",
            "invalid YAML: found duplicate key 'expected_no_tools' (while constructing a mapping)",
        ),
    )


def test_empty_file(tmp_path: Path) -> None:
    error = _error(tmp_path, "# nothing yet\n")

    assert str(error) == f"{tmp_path / 'cases.yaml'}: the file is empty; expected a 'cases' list"


def test_top_level_list(tmp_path: Path) -> None:
    error = _error(tmp_path, "- id: a\n")

    assert error.problems == (
        ("(top level)", "must be a mapping with a 'cases' list, got a list (line 1, column 1)"),
    )


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"

    with pytest.raises(ReferenceFileError) as caught:
        load_golden_cases(path)

    assert str(caught.value) == f"{path}: cannot read: No such file or directory"


def test_every_problem_is_reported_one_per_line(tmp_path: Path) -> None:
    error = _error(
        tmp_path,
        "cases:\n  - {id: a, mode: sets, expected_tools: [x]}\n  - {expected_no_tools: yes}\n",
    )

    lines = str(error).splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"{tmp_path / 'cases.yaml'}: cases[0].mode: must be 'expected',")
    assert lines[1] == (
        f"{tmp_path / 'cases.yaml'}: cases[1].id: required field is missing (line 3, column 5)"
    )


def test_case_id_with_surrounding_spaces_is_an_error(tmp_path: Path) -> None:
    error = _error(tmp_path, "cases:\n  - {id: ' refund', expected_no_tools: true}\n")

    assert error.problems == (
        ("cases[0].id", "' refund' must not start or end with whitespace (line 2, column 10)"),
    )


def test_blank_tool_name_is_an_error(tmp_path: Path) -> None:
    error = _error(tmp_path, "cases:\n  - id: a\n    expected_tools: ['  ']\n")

    assert error.problems == (
        ("cases[0].expected_tools[0].name", "must not be empty (line 3, column 22)"),
    )


def test_blank_agent_is_an_error(tmp_path: Path) -> None:
    error = _error(tmp_path, "cases:\n  - {id: a, agent: ' ', expected_no_tools: true}\n")

    assert error.problems == (("cases[0].agent", "must not be empty (line 2, column 20)"),)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("0", "must be greater than or equal to 60, got 0"),
        ("59.5", "must be greater than or equal to 60, got 59.5"),
        ("-60", "must be greater than or equal to 60, got -60"),
        (".nan", "must be a finite number, got nan"),
        (".inf", "must be a finite number, got inf"),
        ("1h", "must be a number of seconds, got '1h'"),
        ("true", "must be a number of seconds, got True"),
        ("2678401", "must be less than or equal to 2678400, got 2678401"),
    ],
)
def test_expected_every_seconds_must_be_a_number_of_seconds_up_to_a_month(
    tmp_path: Path, value: str, reason: str
) -> None:
    error = _error(
        tmp_path,
        f"cases:\n  - id: a\n    expected_tools: [x]\n    expected_every_seconds: {value}\n",
    )

    assert error.problems == (("cases[0].expected_every_seconds", f"{reason} (line 4, column 29)"),)


_NOT_JSON = (
    "is no JSON value, so no call's arguments hold it: write a string, number, true/false,"
    " null, list or mapping"
)


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ("!!binary aGVsbG8=", "binary data (!!binary)"),
        ("!!set {a, b}", "a set (!!set)"),
        ("!!timestamp 2024-01-01T10:00:00Z", "a timestamp (!!timestamp)"),
        ("!!timestamp 2024-01-01", "a timestamp (!!timestamp)"),
        (".nan", ".nan"),
        ("-.inf", "-.inf"),
    ],
)
def test_an_expected_argument_no_call_can_have_is_refused(
    tmp_path: Path, value: str, written: str
) -> None:
    """A call's arguments are JSON: a case expecting bytes, a set, a datetime or NaN failed
    every run of it (ARGUMENT_VALUE_DRIFT; replay: wrong_arguments), whatever the agent did."""
    error = _error(
        tmp_path,
        "cases:\n  - id: refund\n    expected_tools:\n      - name: issue_refund\n"
        f"        arguments:\n          order_id: A-1\n          amount: {value}\n",
    )

    assert error.problems == (
        (
            "cases[0].expected_tools[0].arguments.amount",
            f"case 'refund': {written} {_NOT_JSON} (line 7, column 19)",
        ),
    )


def test_a_nested_value_or_key_no_call_can_have_is_refused_where_it_is(tmp_path: Path) -> None:
    error = _error(
        tmp_path,
        "cases:\n  - id: search\n    expected_tools:\n      - name: search_kb\n"
        "        arguments:\n          filters: {tags: [x, !!omap [a: 1]], 7: seven}\n",
    )

    assert error.problems == (
        (
            "cases[0].expected_tools[0].arguments.filters.tags[1][0]",
            f"case 'search': an ordered pair (!!omap, !!pairs) {_NOT_JSON} (line 6, column 39)",
        ),
        (
            "cases[0].expected_tools[0].arguments.filters",
            "case 'search': the key 7 is no string, as a JSON object's keys are: quote it"
            " (line 6, column 20)",
        ),
    )
