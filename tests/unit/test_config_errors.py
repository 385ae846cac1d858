"""Configuration errors say where the bad value came from: the file, the command line or
environment, or both when a section-level check fails on a section they share; and the line
and column of the file it was written at."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.config_errors_support import error_lines
from toolwatch.config import ConfigError, load_config


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


def test_an_override_is_blamed_on_the_flag_or_variable_that_gave_it(tmp_path: Path) -> None:
    config = tmp_path / "toolwatch.yaml"
    config.write_text("assembly:\n  max_traces: 10\n")
    origins = {"listen.http": "--http-listen", "listen.grpc": "TOOLWATCH_GRPC_LISTEN"}
    with pytest.raises(ConfigError) as refused:
        load_config(config, {"listen.http": "127.0.0.1:0", "listen.grpc": "nope"}, origins)
    assert str(refused.value).splitlines()[1] == (
        "  TOOLWATCH_GRPC_LISTEN: listen.grpc: 'nope' is not HOST:PORT (got 'nope')"
    )
    # A section's own check names the file and every override into the section, once each.
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello\n")
    overrides = {"security.tls.cert_file": str(not_pem), "security.tls.key_file": str(not_pem)}
    origins = {"security.tls.cert_file": "--tls-cert", "security.tls.key_file": "--tls-key"}
    with pytest.raises(ConfigError) as refused:
        load_config(config, overrides, origins)
    said = str(refused.value).splitlines()[1]
    assert said.startswith(f"  {config} and --tls-cert and --tls-key: security.tls: {not_pem}")
    # A field missing from a section an override set a field of: blamed on both.
    with pytest.raises(ConfigError) as refused:
        load_config(
            None,
            {"security.tls.cert_file": str(not_pem)},
            {"security.tls.cert_file": "TOOLWATCH_TLS_CERT"},
        )
    assert str(refused.value).splitlines()[1] == (
        "  defaults and TOOLWATCH_TLS_CERT: security.tls.key_file: Field required"
    )


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("ingest.max_request_bytes", True),  # pydantic's lax mode would read 1
        ("ingest.max_concurrent_requests", False),
        ("assembly.tick_seconds", True),
        ("evaluators.tool_arguments.threshold", True),
    ],
)
def test_a_boolean_is_not_a_number(tmp_path: Path, setting: str, value: bool) -> None:
    section, _, key = setting.rpartition(".")
    config = tmp_path / "toolwatch.yaml"
    indent = ""
    lines = []
    for part in section.split("."):
        lines.append(f"{indent}{part}:")
        indent += "  "
    lines.append(f"{indent}{key}: {str(value).lower()}")
    config.write_text("\n".join(lines) + "\n")
    at = f"(line {len(lines)}, column {len(indent) + len(key) + 3})"
    assert error_lines(config, {})[1] == (
        f"  {config}: {setting}: Input should be a number, not a boolean (got {value}) {at}"
    )


def test_numbers_given_as_text_still_convert() -> None:
    # Environment overrides arrive as text.
    config = load_config(None, {"ingest.max_request_bytes": "1000", "assembly.tick_seconds": "1"})
    assert (config.ingest.max_request_bytes, config.assembly.tick_seconds) == (1000, 1.0)


@pytest.mark.parametrize(
    "setting",
    [
        "assembly.late_span_window_seconds",
        "assembly.max_trace_age_seconds",
        "ingest.retry_after_seconds",
    ],
)
def test_an_infinite_duration_is_refused(setting: str) -> None:
    lines = error_lines(None, {setting: float("inf")})
    assert (
        lines[1]
        == f"  command line/environment: {setting}: Input should be a finite number (got inf)"
    )


def test_a_key_given_twice_is_refused_not_silently_replaced(tmp_path: Path) -> None:
    config = tmp_path / "toolwatch.yaml"
    config.write_text("security:\n  auth:\n    bearer_token_file: tokens\nsecurity:\n  tls: null\n")
    lines = error_lines(config, {})
    assert lines[0].startswith(f"{config}: not valid YAML: ")
    assert "found duplicate key 'security'" in lines
    assert f'  in "{config}", line 4, column 1' in lines  # was "<unicode string>"


def test_a_file_nested_deeper_than_the_yaml_reader_goes_is_an_error_not_a_crash(
    tmp_path: Path,
) -> None:
    config = tmp_path / "toolwatch.yaml"
    config.write_text("policy: " + "[" * 3000 + "]" * 3000 + "\n")
    assert error_lines(config, {}) == [f"{config}: not valid YAML: nested too deeply to read"]


def test_a_json_schema_nested_deeper_than_its_checker_goes_is_an_error_not_a_crash(
    tmp_path: Path,
) -> None:
    config = tmp_path / "toolwatch.yaml"
    schema = '{"items": ' * 150 + "{}" + "}" * 150
    config.write_text(
        "policy:\n  invariants:\n    - kind: arguments\n      tool: issue_refund\n"
        f"      schema: {schema}\n"
    )
    lines = error_lines(config, {})
    assert lines[1].endswith(
        "policy.invariants.0.arguments.schema: a JSON Schema nested too deeply to check"
        " (line 5, column 7)"
    )


def test_a_field_missing_beside_an_override_names_the_override_too(tmp_path: Path) -> None:
    cert = tmp_path / "tls.crt"
    cert.write_text("not read: the key is missing first\n")
    lines = error_lines(None, {"security.tls.cert_file": str(cert)})
    assert lines[1].startswith(
        "  defaults and command line/environment: security.tls.key_file: Field required"
    )


def test_the_span_attribute_cap_is_positive_and_reaches_the_decoder() -> None:
    lines = error_lines(None, {"ingest.max_span_attributes": 0})
    assert lines[1] == (
        "  command line/environment: ingest.max_span_attributes: "
        "Input should be greater than 0 (got 0)"
    )
    config = load_config(None, {"ingest.max_span_attributes": "64"})
    assert config.decode_options().max_span_attributes == 64


def test_a_file_that_is_not_utf8_is_named_with_the_byte(tmp_path: Path) -> None:
    config = tmp_path / "toolwatch.yaml"
    config.write_bytes(b"assembly:\n  max_traces: 10 # \xff\n")
    assert error_lines(config, {}) == [f"{config}: not UTF-8 text (byte 29: invalid start byte)"]


def test_errors_speak_of_the_file_not_of_pydantic(tmp_path: Path) -> None:
    """A typo names the setting meant; a wrong type says what the file should hold; a
    section's own check names the problem without printing the whole section back."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(
        "assembly:\n  completion_wait_secs: 5\n"
        "policy:\n  dangerous_tools: issue_refund\n"
        "  invariants:\n    - {name: n, kind: forbidden, tool: a, befor: b}\n"
        "ingest: 5\n"
        "security:\n  tls: {cert_file: c.pem}\n"
    )
    (tmp_path / "c.pem").write_text("")
    assert sorted(error_lines(config, {})[1:]) == sorted(
        [
            f"  {config}: assembly.completion_wait_secs: unknown setting (did you mean"
            " 'completion_wait_seconds'?) (got 5) (line 2, column 3)",
            f"  {config}: policy.dangerous_tools: expected a list (got 'issue_refund')"
            " (line 4, column 20)",
            # The forbidden kind's own keys, not every kind's ("before" is the order kind's).
            f"  {config}: policy.invariants.0.forbidden.befor: unknown setting (allowed:"
            " name, severity, agents, kind, tool) (got 'b') (line 6, column 43)",
            f"  {config}: ingest: expected a mapping (key: value lines) (got 5) (line 7, column 9)",
            # missing from tls: where tls is
            f"  {config}: security.tls.key_file: Field required (line 9, column 3)",
        ]
    )


def test_a_golden_case_file_given_as_the_configuration_says_where_it_belongs(
    tmp_path: Path,
) -> None:
    cases = tmp_path / "golden-cases.yaml"
    cases.write_text("cases:\n  - id: one\n")
    assert error_lines(cases, {})[1:] == [
        f"  {cases}: cases: unknown setting: this looks like a golden-case file; name it in"
        " the configuration's golden.cases_file instead (got [{'id': 'one'}]) (line 1, column 1)"
    ]


@pytest.mark.parametrize(
    ("value", "line"),
    [
        (
            "5",
            "policy.bindings.issue_refund.order_id: expected a verification tool.field, or a"
            " list of them (got 5) (line 5, column 28)",
        ),
        (
            "[lookup_order.order_id, true]",
            "policy.bindings.issue_refund.order_id: expected a verification tool.field, or a"
            " list of them (got ['lookup_order.order_id', True]) (line 5, column 5)",
        ),
        ("x", "policy.bindings: 'x' is not of the form tool.field (line 4, column 3)"),
    ],
)
def test_a_binding_that_is_no_tool_field_is_one_line_naming_the_binding(
    tmp_path: Path, value: str, line: str
) -> None:
    """Not pydantic's two tries of the union, each a line: "...order_id.constrained-str: Input
    should be a valid string" and "...order_id.tuple[constrained-str, ...]: expected a list"."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(
        "policy:\n  dangerous_tools: [issue_refund]\n  verification_tools: [lookup_order]\n"
        f"  bindings:\n    issue_refund.order_id: {value}\n"
    )
    assert error_lines(config, {})[1:] == [f"  {config}: {line}"]


@pytest.mark.parametrize(
    ("policy", "line"),
    [
        ('  aliases:\n    "": lookup_order\n', "policy.aliases (key ''): empty (line 3, column 5)"),
        (
            '  repeat_limits:\n    " ": 3\n',
            "policy.repeat_limits (key ' '): empty (line 3, column 5)",
        ),
        (
            "  bindings:\n    null: lookup_order.id\n",
            # pydantic names the key None, which the file wrote null: where the mapping is
            "policy.bindings (key 'None'): Input should be a valid string (line 2, column 3)",
        ),
    ],
)
def test_a_refused_key_is_named_after_its_mapping(tmp_path: Path, policy: str, line: str) -> None:
    """Not "policy.aliases..[key]: String should have at least 1 character (got '')"."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text("policy:\n" + policy)
    assert error_lines(config, {})[1:] == [f"  {config}: {line}"]


def test_a_path_of_the_wrong_type_says_a_file_path_is_expected() -> None:
    lines = error_lines(None, {"golden.cases_file": 5})
    # Not "Input is not a valid path for <class 'pathlib.Path'>".
    assert lines[1:] == [
        "  command line/environment: golden.cases_file: expected a file path (got 5)"
    ]


@pytest.mark.parametrize("empty", ["", " "])
@pytest.mark.parametrize(
    "setting",
    ["golden.cases_file", "security.tls.cert_file", "security.auth.bearer_token_file"],
)
def test_an_empty_file_path_is_refused_not_read_as_the_directory(
    tmp_path: Path, setting: str, empty: str
) -> None:
    """ "" was resolved against the configuration's directory: "<dir>: cannot read: Is a
    directory", a path the file never gave, or for golden cases, an error only once read."""
    section, _, key = setting.rpartition(".")
    config = tmp_path / "toolwatch.yaml"
    indent, lines = "", []
    for part in section.split("."):
        lines.append(f"{indent}{part}:")
        indent += "  "
    lines.append(f'{indent}{key}: "{empty}"')
    if key == "cert_file":
        lines.append(f"{indent}key_file: key.pem")
    config.write_text("\n".join(lines) + "\n")
    at = f"(line {len(section.split('.')) + 1}, column {len(indent) + len(key) + 3})"
    refused = f"  {config}: {setting}: empty path: name a file (got {empty!r}) {at}"
    assert refused in error_lines(config, {})


def test_an_error_in_the_file_says_the_line_and_column_it_was_written_at(
    tmp_path: Path,
) -> None:
    """As golden-case errors do. Was: the field path alone, to be looked for in a long file.
    A value is found where it was written, a key refused (or a section or list refused as a
    whole, or missing a field) where its key was; a value an override gave has no line."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(
        "assembly:\n"
        "  max_traces: -1\n"
        "  tick_secs: 1\n"
        "policy:\n"
        "  invariants:\n"
        "    - kind: forbidden\n"
        '      tool: " "\n'
        "    - {kind: call_count, tool: search}\n"
        "security:\n"
        "  tls:\n"
        "    reload_seconds: 60\n"
    )
    lines = error_lines(config, {"listen.grpc": "nope"})
    assert sorted(lines[1:]) == sorted(
        [
            f"  {config}: assembly.max_traces: Input should be greater than 0 (got -1)"
            " (line 2, column 15)",
            f"  {config}: assembly.tick_secs: unknown setting (did you mean 'tick_seconds'?)"
            " (got 1) (line 3, column 3)",
            f"  {config}: policy.invariants.0.forbidden.tool: empty (got ' ') (line 7, column 13)",
            f"  {config}: policy.invariants.1.call_count: call_count needs min > 0 or a max"
            " (line 8, column 7)",
            f"  {config}: security.tls.cert_file: Field required (line 10, column 3)",
            f"  {config}: security.tls.key_file: Field required (line 10, column 3)",
            "  command line/environment: listen.grpc: 'nope' is not HOST:PORT (got 'nope')",
        ]
    )
    # A section's own check: where the section's key is.
    config.write_text(
        "listen:\n  grpc: 127.0.0.1:0\npolicy:\n  dangerous_tools: [a]\n  verification_tools: [A]\n"
    )
    assert error_lines(config, {})[1] == (
        f"  {config}: policy: 'a' is in both dangerous_tools and verification_tools: a"
        " dangerous call cannot verify another (line 3, column 1)"
    )


@pytest.mark.parametrize(
    ("setting", "written", "reason"),
    [
        ("assembly.completion_wait_seconds", "2s", "a number of seconds"),
        ("policy.conversation_ttl_seconds", "1.5 h", "a number of seconds"),
        ("security.auth.reload_seconds", "5m", "a number of seconds"),
        ("ingest.max_value_bytes", "64MiB", "a whole number of bytes"),
        ("shadow.max_waiting_bytes", "1k", "a whole number of bytes"),
    ],
)
def test_a_number_written_with_a_unit_is_refused_saying_to_leave_the_unit_out(
    tmp_path: Path, setting: str, written: str, reason: str
) -> None:
    """Was pydantic's "unable to parse string as a number": the setting's name says the
    unit, and the value is the bare number. (No setting takes units: "64MiB" was refused
    before as well.)"""
    section, _, key = setting.rpartition(".")
    config = tmp_path / "toolwatch.yaml"
    indent, lines = "", []
    for part in section.split("."):
        lines.append(f"{indent}{part}:")
        indent += "  "
    lines.append(f"{indent}{key}: {written}")
    config.write_text("\n".join(lines) + "\n")
    at = f"(line {len(lines)}, column {len(indent) + len(key) + 3})"
    found = [line for line in error_lines(config, {}) if f": {setting}: " in line]
    assert found == [
        f"  {config}: {setting}: expected {reason}, without a unit (got {written!r}) {at}"
    ]


@pytest.mark.parametrize(
    ("written", "reason"),
    [
        ("'0x10'", "Input should be a valid integer, unable to parse string as an integer"),
        ("'1e6'", "Input should be a valid integer, unable to parse string as an integer"),
        ("2.5.1", "Input should be a valid integer, unable to parse string as an integer"),
        ("10 ms", "expected a whole number of bytes, without a unit"),
        ("1h30m", "expected a whole number of bytes, without a unit"),
        ("1,000", "expected a whole number of bytes, written without separators: 1000"),
        ("'-1,024.5'", "expected a whole number of bytes, written without separators: -1024.5"),
    ],
)
def test_only_a_number_followed_by_letters_is_said_to_have_a_unit(
    tmp_path: Path, written: str, reason: str
) -> None:
    """Was: "without a unit" for any text starting with a digit (``0x10``, ``1e6``,
    ``2.5.1``: no unit). Now a number with thousands separators is told the number to
    write, and other text pydantic's reason."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(f"ingest:\n  max_value_bytes: {written}\n")
    (line,) = error_lines(config, {})[1:]
    assert line.startswith(f"  {config}: ingest.max_value_bytes: {reason} (got "), line


def test_a_separated_number_is_told_so_whatever_the_setting(tmp_path: Path) -> None:
    config = tmp_path / "toolwatch.yaml"
    config.write_text("assembly:\n  max_traces: 10,000\n")
    assert error_lines(config, {})[1:] == [
        f"  {config}: assembly.max_traces: expected a whole number, written without separators:"
        " 10000 (got '10,000') (line 2, column 15)"
    ]


def test_an_error_within_a_section_an_alias_gave_is_located_at_the_alias(
    tmp_path: Path,
) -> None:
    """Was: within the anchored section, at a valid setting of another section
    (``tool_selection``'s ``mode``, line 3). A key a merge through an alias brought is at
    the alias as well, and the anchored section's own errors at their own place."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(
        "evaluators:\n"
        "  tool_selection: &e\n"
        "    mode: expected_set\n"
        "  loops: *e\n"
        "shadow: &s\n"
        "  pair_timeout_seconds: 1000000\n"
        "golden:\n"
        "  <<: *s\n"
    )
    assert error_lines(config, {})[1:] == [
        f"  {config}: evaluators.loops.mode: unknown setting (allowed: enabled, severity_floor)"
        " (got 'expected_set') (line 4, column 10)",
        f"  {config}: golden.pair_timeout_seconds: unknown setting (allowed: cases_file,"
        " case_id_attribute) (got 1000000) (line 8, column 7)",
        f"  {config}: shadow.pair_timeout_seconds: Input should be less than or equal to 604800"
        " (got 1000000) (line 6, column 25)",
    ]
