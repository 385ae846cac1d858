"""Configuration errors say where the bad value came from: the file, the command line or
environment, or both when a section-level check fails on a section they share."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolwatch.config import ConfigError, load_config


def error_lines(path: Path | None, overrides: dict[str, object]) -> list[str]:
    with pytest.raises(ConfigError) as refused:
        load_config(path, overrides)
    return str(refused.value).splitlines()


def test_a_value_from_an_override_is_blamed_on_it(tmp_path: Path) -> None:
    config = tmp_path / "toolwatch.yaml"
    config.write_text("assembly:\n  max_traces: 10\n")
    lines = error_lines(config, {"assembly.max_traces": -1})
    assert lines[1].startswith("  command line/environment: assembly.max_traces: ")


def test_a_value_from_the_file_is_blamed_on_the_file(tmp_path: Path) -> None:
    config = tmp_path / "toolwatch.yaml"
    config.write_text("assembly:\n  max_traces: -1\n")
    lines = error_lines(config, {"listen.grpc": "127.0.0.1:0"})
    assert lines[1].startswith(f"  {config}: assembly.max_traces: ")


def test_a_section_check_on_overridden_fields_names_both(tmp_path: Path) -> None:
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello\n")
    overrides = {"security.tls.cert_file": str(not_pem), "security.tls.key_file": str(not_pem)}
    lines = error_lines(None, overrides)
    assert lines[1].startswith("  defaults and command line/environment: security.tls: ")
