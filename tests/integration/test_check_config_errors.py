"""Configuration errors of ``check-config`` and ``replay`` give the reason that is true and
name where the value came from."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.cli_support import EXAMPLES, clean_env, run_cli


@pytest.mark.parametrize("command", ["check-config", "replay"])
def test_a_missing_file_from_toolwatch_config_names_the_variable(
    tmp_path: Path, command: str
) -> None:
    """docs/commands.md: check-config reads FILE, else --config, else TOOLWATCH_CONFIG, and
    "an error names where the value came from"; replay reads the variable too. A stale
    TOOLWATCH_CONFIG left in a shell or a CI job's environment, with no --config on the
    command line, was told as "<path>: cannot read: No such file or directory" alone."""
    missing = tmp_path / "gone.yaml"
    args = [command]
    if command == "replay":
        args += ["--no-progress", str(EXAMPLES / "unverified-refund.otlp.json")]
    result = run_cli(*args, env=clean_env(TOOLWATCH_CONFIG=str(missing)))
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        "toolwatch: configuration error\n"
        f"TOOLWATCH_CONFIG: {missing}: cannot read: No such file or directory\n"
    )


def test_a_file_given_on_the_command_line_is_not_blamed_on_the_variable(tmp_path: Path) -> None:
    missing = tmp_path / "gone.yaml"
    env = clean_env(TOOLWATCH_CONFIG=str(tmp_path / "other.yaml"))
    result = run_cli("check-config", str(missing), env=env)
    assert result.returncode == 2
    assert "TOOLWATCH_CONFIG" not in result.stderr, result.stderr


@pytest.mark.parametrize("flag", ["--findings", "--dump-tooltraces"])
def test_an_output_under_a_regular_file_is_not_said_to_be_under_a_missing_directory(
    tmp_path: Path, flag: str
) -> None:
    """``--findings notes.txt/findings.jsonl``, where notes.txt is a file, was refused as
    "directory .../notes.txt does not exist": it exists; it is not a directory."""
    regular = tmp_path / "notes.txt"
    regular.write_text("x")
    result = run_cli("check-config", flag, str(regular / "deeper" / "out.jsonl"))
    assert result.returncode == 2, result.stderr
    assert f"{flag}: " in result.stderr
    assert f"{regular} is not a directory" in result.stderr, result.stderr
    assert "does not exist" not in result.stderr, result.stderr

    missing = tmp_path / "missing"
    result = run_cli("check-config", flag, str(missing / "out.jsonl"))
    assert f"directory {missing} does not exist" in result.stderr, result.stderr


def test_an_error_in_the_file_says_where_and_a_unit_is_named_as_the_mistake(
    tmp_path: Path,
) -> None:
    """Was: "assembly.completion_wait_seconds: Input should be a valid number, unable to
    parse string as a number (got '2s')", with no line, while golden-case errors had one."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(
        "policy:\n  dangerous_tools: [issue_refund]\n  verification_tools: [lookup_order]\n"
        "assembly:\n  completion_wait_seconds: 2s\n"
    )
    result = run_cli("check-config", str(config))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "toolwatch: configuration error\n"
        f"{config}: 1 configuration error(s)\n"
        f"  {config}: assembly.completion_wait_seconds: expected a number of seconds, without"
        " a unit (got '2s') (line 5, column 28)\n"
    )


def _error_line(tmp_path: Path, text: str, field: str) -> str:
    """The line ``check-config`` prints for the error at ``field`` of a file holding ``text``."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(text)
    checked = run_cli("check-config", str(config))
    assert checked.returncode == 2, checked.stderr
    (line,) = [line for line in checked.stderr.splitlines() if f": {field}:" in line]
    return line


def test_a_value_given_by_an_alias_is_located_at_the_alias(tmp_path: Path) -> None:
    """Was: the error on ingest.retry_after_seconds (line 4) said "(line 2, column 26)",
    the value of assembly.max_trace_age_seconds, a valid setting of another section where
    the anchor was written: PyYAML's composer puts the anchored node itself at the alias.
    Now the alias is a node of its own, at its own place (line 4, column 24)."""
    text = "assembly:\n  max_trace_age_seconds: &age 500\ningest:\n  retry_after_seconds: *age\n"
    line = _error_line(tmp_path, text, "ingest.retry_after_seconds")
    assert line.endswith(
        ": Input should be less than or equal to 300 (got 500) (line 4, column 24)"
    ), line


def test_a_key_that_overrides_a_merged_one_is_located_at_itself(tmp_path: Path) -> None:
    """Was: "(got -1) (line 2, column 33)", the merged 1 beside ``<<``: PyYAML's
    constructor splices the merged pairs into the mapping node, first, and the first pair
    with the key was taken. Now the pair the mapping keeps, the last: the -1 refused."""
    text = "assembly:\n  <<: {completion_wait_seconds: 1}\n  completion_wait_seconds: -1\n"
    line = _error_line(tmp_path, text, "assembly.completion_wait_seconds")
    assert line.endswith(": Input should be greater than 0 (got -1) (line 3, column 28)"), line


@pytest.mark.parametrize(
    ("text", "field", "reason"),
    [
        (
            "assembly:\n  max_buffered_bytes: 268,435,456\n",
            "assembly.max_buffered_bytes",
            "expected a whole number of bytes, written without separators: 268435456"
            " (got '268,435,456') (line 2, column 23)",
        ),
        (
            "ingest:\n  retry_after_seconds: 1,000\n",
            "ingest.retry_after_seconds",
            "expected a number of seconds, written without separators: 1000 (got '1,000')"
            " (line 2, column 24)",
        ),
    ],
)
def test_a_number_written_with_thousands_separators_is_told_to_leave_them_out(
    tmp_path: Path, text: str, field: str, reason: str
) -> None:
    """Was: "expected a whole number of bytes, without a unit" for ``268,435,456`` (the
    default max_buffered_bytes, as people write it), naming a mistake not made: any text
    starting with a digit was taken for a number with a unit. Now a number with thousands
    separators is told the number to write."""
    line = _error_line(tmp_path, text, field)
    assert line.endswith(f": {field}: {reason}"), line
