"""Configuration errors of ``check-config`` and ``replay`` give the reason that is true and
name where the value came from."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_cli import EXAMPLES, clean_env, run_cli


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
