"""The configuration file's plain values are read as YAML 1.2 reads them, with the loader the
golden-case files use: YAML 1.1 retyped ``on``, ``NO``, ``007``, ``1:30`` and dates. Where
that reading was a boolean that meant something, a boolean setting keeps it; where the
file does not say which it meant, it is refused naming the field, the value and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolwatch.config import Config, ConfigError, load_config


def _load(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "toolwatch.yaml"
    path.write_text(text, encoding="utf-8")
    return load_config(path)


def _refused(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(ConfigError) as refused:
        _load(tmp_path, text)
    return str(refused.value).splitlines()


def test_tool_and_agent_names_are_the_text_written(tmp_path: Path) -> None:
    config = _load(
        tmp_path,
        "policy:\n"
        "  dangerous_tools: [on, 007]\n"
        "  verification_tools: [no]\n"
        "  allowed_tools:\n"
        "    yes: [on, 1:30]\n"
        "    2024: [no]\n"
        "metrics:\n"
        "  tools: [1.10, 0x1F]\n"
        "  agents: [off, 2024-05-01]\n",
    )
    assert config.policy.dangerous_tools == ("on", "007")
    assert config.policy.verification_tools == ("no",)
    assert config.policy.allowed_tools == {"yes": ("on", "1:30"), "2024": ("no",)}
    assert config.metrics.tools == ("1.10", "0x1F")  # YAML 1.1: 1.1 and 31
    assert config.metrics.agents == ("off", "2024-05-01")


def test_a_boolean_setting_written_yes_or_off_keeps_its_meaning(tmp_path: Path) -> None:
    config = _load(
        tmp_path,
        "shadow:\n  enabled: yes\n"
        "evaluators:\n  safety: {enabled: off}\n  tool_arguments: {strict: On}\n",
    )
    assert config.shadow.enabled is True
    assert config.evaluators.safety.enabled is False
    assert config.evaluators.tool_arguments.strict is True


def test_a_json_schema_holds_the_values_json_would(tmp_path: Path) -> None:
    config = _load(
        tmp_path,
        "policy:\n  invariants:\n    - kind: arguments\n      tool: book_callback\n"
        "      schema:\n        properties:\n"
        "          country: {enum: ['NO', SE]}\n"
        "          day: {const: 2024-05-01}\n"
        "          slot: {const: 14:30}\n"
        "          code: {const: 007}\n"
        "          urgent: {const: true}\n",
    )
    (rule,) = config.policy.invariants
    assert rule.json_schema == {  # type: ignore[union-attr]
        "properties": {
            "country": {"enum": ["NO", "SE"]},
            "day": {"const": "2024-05-01"},  # YAML 1.1: a date, which no call's JSON equals
            "slot": {"const": "14:30"},  # YAML 1.1: 870
            "code": {"const": "007"},  # YAML 1.1: 7
            "urgent": {"const": True},
        }
    }


def test_an_unquoted_yes_or_no_in_a_json_schema_is_refused_naming_it(tmp_path: Path) -> None:
    lines = _refused(
        tmp_path,
        "policy:\n  invariants:\n    - kind: arguments\n      tool: book_callback\n"
        "      schema:\n        properties:\n          country: {enum: [SE, NO]}\n",
    )
    path = tmp_path / "toolwatch.yaml"
    assert lines == [
        f"{path}: 1 configuration error(s)",
        f"  {path}: policy.invariants.0.schema.properties.country.enum.1: NO is the text 'NO'"
        " (YAML 1.2), not false as YAML 1.1 read it: write false for the boolean, or quote"
        " the text: 'NO' (line 7, column 32)",
    ]


@pytest.mark.parametrize(
    ("setting", "word"),
    [("output.findings", "off"), ("output.dump_tooltraces", "no"), ("security.tls", "off")],
)
def test_an_unquoted_off_where_null_turns_a_setting_off_is_refused(
    tmp_path: Path, setting: str, word: str
) -> None:
    section, key = setting.split(".")
    lines = _refused(tmp_path, f"{section}:\n  {key}: {word}\n")
    assert lines[1] == (
        f"  {tmp_path / 'toolwatch.yaml'}: {setting}: {word} is the text {word!r} (YAML 1.2),"
        f" not false as YAML 1.1 read it: write null to leave it unset (off), or quote the"
        f" text: {word!r} (line 2, column {len(key) + 5})"
    )


def test_a_quoted_off_is_the_text_and_an_override_replaces_the_word(tmp_path: Path) -> None:
    assert _load(tmp_path, "output:\n  findings: 'off'\n").output.findings == "off"
    path = tmp_path / "toolwatch.yaml"
    path.write_text("output:\n  findings: off\n", encoding="utf-8")
    assert load_config(path, {"output.findings": "-"}).output.findings == "-"


def test_yes_where_a_number_belongs_is_still_refused(tmp_path: Path) -> None:
    lines = _refused(tmp_path, "ingest:\n  max_request_bytes: yes\n")
    assert lines[1].endswith(
        "ingest.max_request_bytes: Input should be a valid integer, unable to parse string as"
        " an integer (got 'yes') (line 2, column 22)"
    )


@pytest.mark.parametrize(
    ("setting", "written", "yaml11"),
    [
        ("ingest:\n  max_concurrent_requests: ", "010", 8),  # octal: silently 10 otherwise
        ("assembly:\n  completion_wait_seconds: ", "1:30", 90),  # base 60
        ("ingest:\n  max_request_bytes: ", "0x400000", 4194304),
    ],
)
def test_a_number_in_a_form_of_yaml_1_1_is_refused_naming_both_readings(
    tmp_path: Path, setting: str, written: str, yaml11: int
) -> None:
    """These loaded until YAML 1.2: 010 would now be 10 without a word, and 1:30 refused as
    no number without saying why (review)."""
    lines = _refused(tmp_path, setting + written + "\n")
    field = setting.replace(":\n  ", ".").removesuffix(": ")
    column = len(setting.splitlines()[1]) + 1
    assert lines[1].endswith(
        f": {field}: {written} is the text {written!r} (YAML 1.2), not the number {yaml11}"
        f" YAML 1.1 read: write the number in decimal (line 2, column {column})"
    ), lines


def test_a_number_both_yamls_read_alike_and_a_name_written_as_one_load(tmp_path: Path) -> None:
    config = _load(
        tmp_path, "ingest:\n  max_request_bytes: 1_000_000\npolicy:\n  dangerous_tools: [010]\n"
    )
    assert (config.ingest.max_request_bytes, config.policy.dangerous_tools) == (1_000_000, ("010",))
