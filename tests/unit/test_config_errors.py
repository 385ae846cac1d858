"""Configuration errors say where the bad value came from: the file, the command line or
environment, or both when a section-level check fails on a section they share."""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path

import grpc
import pytest

from tests.certificates import ca_certificate
from toolwatch.config import Config, ConfigError, check_certificate, load_config
from toolwatch.ingest.decode_requests import scanner
from toolwatch.metrics import NoopMetrics
from toolwatch.model import ManualClock
from toolwatch.references.shadow import ShadowJoiner


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


def test_an_assembly_duration_is_at_most_a_week() -> None:
    # 1e300 s passed every check, then overflowed where seconds become nanoseconds.
    lines = error_lines(None, {"assembly.late_span_window_seconds": 1e300})
    assert (
        "assembly.late_span_window_seconds: Input should be less than or equal to 604800"
        in (lines[1])
    )
    week = load_config(None, {"assembly.late_span_window_seconds": 604_800})
    assert week.assembly.limits().late_span_window_ns == 604_800 * 10**9


@pytest.mark.parametrize(
    "setting",
    [
        "assembly.completion_wait_seconds",
        "assembly.max_trace_age_seconds",
        "assembly.local_parent_wait_seconds",  # 0 ns would be off
        "assembly.lost_parent_wait_seconds",
        "assembly.late_span_window_seconds",  # 0 ns would be off
        "shadow.pair_timeout_seconds",
        "policy.conversation_ttl_seconds",
        "security.auth.reload_seconds",
    ],
)
def test_a_duration_below_a_nanosecond_is_refused_naming_it(tmp_path: Path, setting: str) -> None:
    """Durations become whole nanoseconds: one below a nanosecond would be 0, which crashed
    start-up (a wait of 0) or turned the setting off, after check-config said ok."""
    tokens = tmp_path / "tokens"
    tokens.write_text("s3cret\n")
    auth = {"security.auth.bearer_token_file": str(tokens)}
    overrides = {**auth, setting: "1e-10"}
    assert error_lines(None, overrides)[1:] == [
        f"  command line/environment: {setting}: below one nanosecond, the clock's unit, so it"
        " would be 0: give at least 1e-09 (got '1e-10')"
    ]
    if setting != "assembly.max_trace_age_seconds":  # it must outlast completion_wait
        load_config(None, {**auth, setting: "1e-9"})  # a nanosecond: 1 ns


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (0.5, "greater than or equal to 1"),
        (86_401, "less than or equal to 86400"),
        (float("inf"), "a finite number"),
    ],
)
def test_a_connection_age_is_from_a_second_to_a_day(value: float, reason: str) -> None:
    """Closed at its age, every connection is made again: below a second nearly every export
    would open one; gRPC takes the age in milliseconds, as a C int."""
    assert load_config(None, {}).ingest.max_connection_age_seconds == 300
    assert error_lines(None, {"ingest.max_connection_age_seconds": value})[1] == (
        "  command line/environment: ingest.max_connection_age_seconds: "
        f"Input should be {reason} (got {value:g})"
    )


def test_the_lost_parent_wait_is_set_in_seconds_and_must_end_before_the_age() -> None:
    assert load_config(None, {}).assembly.limits().lost_parent_wait_ns == 5 * 10**9
    config = load_config(None, {"assembly.lost_parent_wait_seconds": "30"})
    assert config.assembly.limits().lost_parent_wait_ns == 30 * 10**9

    lines = error_lines(None, {"assembly.lost_parent_wait_seconds": 298})
    assert lines[1] == (
        "  defaults and command line/environment: assembly: completion_wait_seconds +"
        " lost_parent_wait_seconds (300) must be shorter than max_trace_age_seconds (300): a"
        " run that lost a parent in export would reach that age first and be evaluated as"
        " incomplete"
    )
    # Only an age set short, with the default wait, is left alone (test rigs do so).
    short = load_config(None, {"assembly.max_trace_age_seconds": 4})
    assert short.assembly.limits().lost_parent_wait_ns == 5 * 10**9


def test_a_late_span_window_of_0_is_still_off() -> None:
    config = load_config(None, {"assembly.late_span_window_seconds": 0})
    assert config.assembly.limits().late_span_window_ns == 0


def test_remembered_trace_ids_are_bounded() -> None:
    lines = error_lines(None, {"assembly.max_remembered_traces": 10**12})
    assert (
        "assembly.max_remembered_traces: Input should be less than or equal to 50000000" in lines[1]
    )
    most = load_config(None, {"assembly.max_remembered_traces": 50_000_000})
    assert most.assembly.limits().max_remembered_traces == 50_000_000
    assert load_config(None, {}).assembly.limits().max_remembered_traces == 2_000_000


def test_the_conversation_memory_bytes_are_a_positive_bound() -> None:
    for value, reason in ((0, "Input should be greater than 0"), (True, "")):
        lines = error_lines(None, {"policy.conversation_max_bytes": value})
        assert lines[1].startswith("  command line/environment: policy.conversation_max_bytes: ")
        assert reason in lines[1]
    config = load_config(None, {"policy.conversation_max_bytes": "1048576"})
    assert config.policy.conversation_max_bytes == 2**20
    assert load_config(None, {}).policy.conversation_max_bytes == 64 * 2**20


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


def test_a_tool_both_dangerous_and_verifying_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "toolwatch.yaml"
    config.write_text(
        "policy:\n  dangerous_tools: [issue_refund]\n"
        "  verification_tools: [lookup_order, Issue_Refund]\n"
    )
    assert error_lines(config, {})[1].startswith(
        f"  {config}: policy: 'issue_refund' is in both dangerous_tools and"
        " verification_tools: a dangerous call cannot verify another"
    )


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        (
            {"evaluators.order.against": "expected"},
            "evaluators.order.against is 'expected' but golden.cases_file is not set, so it"
            " would never run: configure that reference, use 'auto', or set"
            " evaluators.order.enabled: false",
        ),
        (
            {"evaluators.tool_selection.against": "source"},
            "evaluators.tool_selection.against is 'source' but shadow is off, so it would"
            " never run",
        ),
    ],
)
def test_an_evaluator_held_to_a_reference_that_never_comes_is_refused(
    overrides: dict[str, object], reason: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(None, overrides)
    assert reason in str(refused.value)
    name = next(iter(overrides)).split(".")[1]
    assert load_config(None, {**overrides, f"evaluators.{name}.enabled": False}) is not None


def test_security_that_names_no_listener_is_refused_and_safety_may_name_a_reference(
    tmp_path: Path,
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("s3cret-token-value\n")
    auth = {"security.auth.bearer_token_file": str(tokens)}
    with pytest.raises(ConfigError) as refused:
        load_config(None, {**auth, "security.auth.listeners": []})
    assert (
        "security.auth.listeners: names no listener, so bearer tokens would guard"
        " none: name some of grpc, http, metrics, stream, or leave the section out"
    ) in str(refused.value)
    # safety's policy checks run whatever its drift is compared with: accepted.
    assert load_config(None, {"evaluators.safety.against": "source"}) is not None


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


def test_reloads_too_rare_for_their_alert_are_warned_of_not_refused(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("s3cret-token-value\n")
    auth = {"security.auth.bearer_token_file": str(tokens)}
    assert (
        load_config(None, {**auth, "security.auth.reload_seconds": 240}).warnings(defaults=True)
        == []
    )
    assert load_config(None, {**auth, "security.auth.reload_seconds": 300}).warnings(
        defaults=True
    ) == [
        "security.auth.reload_seconds is 300: a changed file that fails to load may not fire"
        " ToolwatchSecurityFilesNotReloaded, which needs a look every 5 minutes (at most 240)"
    ]


def test_a_retry_delay_sdk_exporters_would_not_wait_for_is_warned_of() -> None:
    """The Python gRPC exporter gives up when the RetryInfo delay passes its 10 s timeout."""
    assert load_config(None, {"ingest.retry_after_seconds": 9.5}).warnings(defaults=True) == []
    assert load_config(None, {"ingest.retry_after_seconds": 10}).warnings(defaults=True) == [
        "ingest.retry_after_seconds is 10: an OpenTelemetry SDK exporter (export timeout 10 s"
        " by default) told to retry that late drops its batch instead, spans toolwatch never"
        " sees; a Collector waits (retry_on_failure.max_elapsed_time). Keep it under 10 where"
        " SDKs export to toolwatch directly"
    ]


def test_a_refusal_sdk_exporters_would_not_outlast_is_warned_of(tmp_path: Path) -> None:
    """A full buffer of runs in flight refusing for 10 s or more: the SDKs' exporters drop
    the refused batch at their 10 s timeout."""
    assert load_config(None, {"assembly.max_refusal_seconds": 9.5}).warnings(defaults=True) == []
    said = (
        " a buffer full of runs in flight refuses {}, and an OpenTelemetry SDK exporter (export"
        " timeout 10 s by default) drops a batch refused that long, spans toolwatch never sees;"
        " a Collector waits (retry_on_failure.max_elapsed_time). Keep it under 10 where SDKs"
        " export to toolwatch directly"
    )
    waits = {"assembly.completion_wait_seconds": 12}  # the default limit follows the wait
    assert load_config(None, waits).warnings(defaults=True) == [
        "assembly.max_refusal_seconds is 12 (at least completion_wait_seconds):"
        + said.format("that long before it judges its oldest runs early")
    ]
    never = tmp_path / "toolwatch.yaml"
    never.write_text("assembly:\n  max_refusal_seconds: null\n")
    assert load_config(never, {}).warnings()[:1] == [
        "assembly.max_refusal_seconds is null:"
        + said.format("until they reach max_trace_age_seconds")
    ]
    evicting = {"assembly.overflow": "evict_oldest", "assembly.max_refusal_seconds": 30}
    assert load_config(None, evicting).warnings(defaults=True) == []


def test_a_numeric_default_argument_strategy_is_warned_of() -> None:
    """Numeric on every field scores order ids one apart as near-equal."""
    assert (
        load_config(None, {"evaluators.tool_arguments.default_strategy": "exact"}).warnings(
            defaults=True
        )
        == []
    )
    (said,) = load_config(None, {"evaluators.tool_arguments.default_strategy": "numeric"}).warnings(
        defaults=True
    )
    assert said.startswith("evaluators.tool_arguments.default_strategy is 'numeric': order ids")


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        (
            "(mcp__",
            "not a regular expression: missing ), unterminated subpattern at"
            " position 0 (got '(mcp__')",
        ),
        (" ", "an empty pattern removes nothing: leave tool_prefix out instead (got ' ')"),
    ],
)
def test_a_tool_prefix_that_is_no_pattern_is_refused(
    tmp_path: Path, pattern: str, reason: str
) -> None:
    config = tmp_path / "toolwatch.yaml"
    config.write_text(f"policy:\n  tool_prefix: {pattern!r}\n")
    at = "(line 2, column 16)"
    assert error_lines(config, {})[1] == f"  {config}: policy.tool_prefix: {reason} {at}"


def test_the_guarded_tools_are_the_dangerous_verification_and_invariant_ones() -> None:
    config = Config.model_validate(
        {
            "policy": {
                "tool_prefix": "(mcp__)?[a-z]+__",
                "dangerous_tools": ["Issue_Refund"],
                "verification_tools": ["lookup_order"],
                "allowed_tools": {"bot": ["search_kb"]},
                "invariants": [{"kind": "forbidden", "tool": "drop_table"}],
            }
        }
    )
    assert config.policy.guarded_tools() == {"issue_refund", "lookup_order", "drop_table"}


@pytest.mark.parametrize(
    ("policy", "reason"),
    [
        (
            "  allowed_tools:\n    bot: [sandbox__issue_refund]\n",
            "policy: allowed_tools.bot names 'sandbox__issue_refund', which tool_prefix makes"
            " 'issue_refund' in every call, whatever its namespace: write 'issue_refund'",
        ),
        (
            "  invariants:\n    - {kind: order, before: lookup_order, after: mcp__x__refund}\n",
            "policy: invariants (order) names 'mcp__x__refund', which tool_prefix makes 'refund'",
        ),
        (
            "  aliases:\n    kb__search: search_kb\n    crm__search: search_crm\n",
            "policy: aliases 'kb__search' and 'crm__search' are both 'search' once tool_prefix"
            " removes their namespace, and map it to different tools",
        ),
    ],
)
def test_a_policy_name_the_tool_prefix_would_shorten_is_refused(
    tmp_path: Path, policy: str, reason: str
) -> None:
    config = tmp_path / "toolwatch.yaml"
    config.write_text("policy:\n  tool_prefix: '(mcp__)?[a-z0-9_-]+?__'\n" + policy)
    assert error_lines(config, {})[1].startswith(f"  {config}: {reason}")


def test_aliases_of_two_namespaces_to_one_tool_are_one_alias() -> None:
    policy = {
        "tool_prefix": "[a-z]+__",
        "aliases": {"kb__search": "search_kb", "docs__search": "Search_KB"},
    }
    assert Config.model_validate({"policy": policy}).policy.normalizer()("x__search") == "search_kb"


@pytest.fixture
def tls_files(tmp_path: Path) -> dict[str, object]:
    import trustme  # noqa: PLC0415 (only these tests need certificates)

    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    cert, key, client_ca = tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path / "ca.crt"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    ca.cert_pem.write_to_path(str(client_ca))
    return {
        "security.tls.cert_file": str(cert),
        "security.tls.key_file": str(key),
        "security.tls.client_ca_file": str(client_ca),
    }


@pytest.mark.parametrize(
    ("names", "reason"),
    [
        (["10.1.2.3"], "'10.1.2.3' is an IP address: a client is named by its certificate's"),
        (["::1"], "'::1' is an IP address"),
        ([""], "'': a client name is a certificate's common name, DNS name, URI or email"),
        ([" collector "], "' collector ': a client name is a certificate's common name"),
    ],
)
def test_a_client_name_that_no_certificate_field_could_match_is_refused(
    tls_files: dict[str, object], names: list[str], reason: str
) -> None:
    lines = error_lines(None, {**tls_files, "security.tls.client_names": names})
    assert lines[1].startswith("  command line/environment: security.tls.client_names: ")
    assert reason in lines[1]


def test_client_names_need_mutual_tls(tls_files: dict[str, object]) -> None:
    del tls_files["security.tls.client_ca_file"]
    lines = error_lines(None, {**tls_files, "security.tls.client_names": ["collector"]})
    assert "security.tls: " in lines[1]
    assert lines[1].endswith(
        "client_names needs client_ca_file: without mutual TLS no client shows a certificate"
        " to take a name from"
    )


def test_client_names_are_kept_once_each_in_order(tls_files: dict[str, object]) -> None:
    names = ["spiffe://cluster.local/ns/o/sa/c", "collector", "collector"]
    config = load_config(None, {**tls_files, "security.tls.client_names": names})
    assert config.security.tls is not None
    assert config.security.tls.client_names == ("spiffe://cluster.local/ns/o/sa/c", "collector")


DAY, HOUR = datetime.timedelta(days=1), datetime.timedelta(hours=1)
MINUTE, SECOND = datetime.timedelta(minutes=1), datetime.timedelta(seconds=1)
#: A certificate's end a year after the real time, to the second.
LATER = datetime.datetime.now(datetime.UTC).replace(microsecond=0) + 365 * DAY


def certificate_files(
    tmp_path: Path,
    not_before: datetime.datetime | None = None,
    not_after: datetime.datetime | None = None,
) -> tuple[Path, dict[str, object]]:
    """A certificate for 127.0.0.1 valid between those dates (trustme's defaults: 2000 to
    3000), and the overrides serving it."""
    import trustme  # noqa: PLC0415 (only these tests need certificates)

    leaf = trustme.CA().issue_cert("127.0.0.1", not_before=not_before, not_after=not_after)
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    return cert, {"security.tls.cert_file": str(cert), "security.tls.key_file": str(key)}


def test_an_expired_certificate_stops_start_up_naming_the_file_and_its_dates(
    tmp_path: Path,
) -> None:
    """Every client would refuse it: nothing could connect. ``serve`` and check-config check
    it (``check_certificate``); loading the file, as a SIGHUP does, does not: security is
    restart-only, and the running set is kept."""
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    begun, ended = now - datetime.timedelta(days=30), now - datetime.timedelta(days=1)
    cert, overrides = certificate_files(tmp_path, begun, ended)
    config = load_config(None, overrides)
    check_certificate(config, None, overrides, now=ended)  # valid to the second
    with pytest.raises(ConfigError) as refused:
        check_certificate(config, None, overrides, now=ended + SECOND)
    assert str(refused.value) == (
        f"command line/environment: security.tls.cert_file: {cert}: the certificate expired"
        f" at {ended:%Y-%m-%d %H:%M:%S} UTC (valid from {begun:%Y-%m-%d %H:%M:%S} UTC to"
        f" {ended:%Y-%m-%d %H:%M:%S} UTC): every client would refuse it; install a renewed"
        " certificate"
    )


def test_a_certificate_not_valid_yet_is_warned_of_not_refused(tmp_path: Path) -> None:
    """Refusing it would be a trap for a clock a little behind the CA's: a certificate just
    issued would stop start-up until the clocks agree."""
    cert, overrides = certificate_files(tmp_path)
    config = load_config(None, overrides)
    early = datetime.datetime(1999, 12, 31, 23, 59, 59, tzinfo=datetime.UTC)
    assert config.warnings(now=early, defaults=True) == [
        f"security.tls.cert_file {cert}: the certificate is not valid until 2000-01-01 00:00:00"
        " UTC (valid from 2000-01-01 00:00:00 UTC to 3000-01-01 00:00:00 UTC): until then"
        " clients whose clocks agree with this machine's refuse it"
    ]
    assert config.warnings(now=early + datetime.timedelta(seconds=1), defaults=True) == []


def test_a_certificate_expiring_within_14_days_is_warned_of_with_its_date(
    tmp_path: Path,
) -> None:
    """ToolwatchCertificateExpiresSoon's threshold for a 90-day certificate (a third of its
    lifetime is 30 days): 14 days left is not warned of, less is. (Later than the real time,
    which the configuration refuses an expired one at.)"""
    ends = LATER
    cert, overrides = certificate_files(tmp_path, not_before=ends - 90 * DAY, not_after=ends)
    config = load_config(None, overrides)
    assert config.warnings(now=ends - 14 * DAY, defaults=True) == []
    assert config.warnings(now=ends - 14 * DAY + SECOND, defaults=True) == [
        f"security.tls.cert_file {cert}: the certificate expires at {ends:%Y-%m-%d %H:%M:%S} UTC,"
        " in 13 days 23 hours: every client refuses it from then on; renew it (toolwatch takes"
        " the renewed file within tls.reload_seconds, without a restart)"
    ]


@pytest.mark.parametrize(
    ("lifetime", "warned_within", "left"),
    [
        (DAY, 8 * HOUR, "7 hours 59 minutes"),  # a mesh's certificate
        (HOUR, 20 * MINUTE, "0 hours 19 minutes"),  # a SPIFFE SVID's
        (7 * DAY, 2 * DAY + 8 * HOUR, "2 days 7 hours"),  # some internal CAs'
    ],
)
def test_a_short_lived_certificate_is_warned_of_with_a_third_of_its_lifetime_left(
    tmp_path: Path, lifetime: datetime.timedelta, warned_within: datetime.timedelta, left: str
) -> None:
    """Always under 14 days, so warned of only past 2/3 of its lifetime, where cert-manager
    renews: fresh, or with exactly a third left, it is not."""
    ends = LATER
    cert, overrides = certificate_files(tmp_path, not_before=ends - lifetime, not_after=ends)
    config = load_config(None, overrides)
    assert config.warnings(now=ends - lifetime, defaults=True) == []  # just issued
    assert config.warnings(now=ends - warned_within, defaults=True) == []
    assert config.warnings(now=ends - warned_within + SECOND, defaults=True) == [
        f"security.tls.cert_file {cert}: the certificate expires at {ends:%Y-%m-%d %H:%M:%S} UTC,"
        f" in {left}: every client refuses it from then on; renew it (toolwatch takes the"
        " renewed file within tls.reload_seconds, without a restart)"
    ]


def test_a_client_ca_expiring_within_14_days_is_warned_of_with_its_date(
    tmp_path: Path,
) -> None:
    """The first CA of the file to expire: its clients are refused from then on. Its own
    lifetime counts (6 days: warned of under 2 days left), not the other CA's (14 days)."""
    ends = LATER
    _cert, overrides = certificate_files(tmp_path)
    client_ca = tmp_path / "client-ca.pem"
    old = ca_certificate("old", ends, not_before=ends - 6 * DAY)
    client_ca.write_bytes(ca_certificate("new", ends + 400 * DAY) + old)
    config = load_config(None, {**overrides, "security.tls.client_ca_file": str(client_ca)})
    assert config.warnings(now=ends - 2 * DAY, defaults=True) == []
    assert config.warnings(now=ends - 2 * DAY + SECOND, defaults=True) == [
        f"security.tls.client_ca_file {client_ca}: a CA certificate in it expires at"
        f" {ends:%Y-%m-%d %H:%M:%S} UTC, in 1 days 23 hours: the client certificates it signed"
        " are refused from then on; renew it, and them"
    ]
    # Expired beside a valid one, the old CA verifies no one and no one needs it: the new one
    # is the file's first to expire (a rotation keeps the old CA in the file).
    assert config.warnings(now=ends + SECOND, defaults=True) == []


def test_a_client_ca_file_whose_cas_have_all_expired_is_warned_of_by_the_last(
    tmp_path: Path,
) -> None:
    ends = LATER
    _cert, overrides = certificate_files(tmp_path)
    client_ca = tmp_path / "client-ca.pem"
    client_ca.write_bytes(
        ca_certificate("older", ends - 10 * DAY, not_before=ends - 90 * DAY)
        + ca_certificate("old", ends, not_before=ends - 90 * DAY)
    )
    config = load_config(None, {**overrides, "security.tls.client_ca_file": str(client_ca)})
    assert config.warnings(now=ends + SECOND, defaults=True) == [
        f"security.tls.client_ca_file {client_ca}: a CA certificate in it expired at"
        f" {ends:%Y-%m-%d %H:%M:%S} UTC: the client certificates it signed are refused from then"
        " on; renew it, and them"
    ]


def test_a_client_ca_whose_dates_cannot_be_read_is_warned_of_not_refused(
    tmp_path: Path, tls_files: dict[str, object]
) -> None:
    """OpenSSL loads a TRUSTED CERTIFICATE block, ``cryptography`` reads no dates from it:
    served, but with no expiry warning or gauge, which start-up says."""
    client_ca = Path(str(tls_files["security.tls.client_ca_file"]))
    client_ca.write_bytes(client_ca.read_bytes().replace(b"CERTIFICATE", b"TRUSTED CERTIFICATE"))
    config = load_config(None, tls_files)
    assert config.warnings(defaults=True) == [
        f"security.tls.client_ca_file {client_ca}: no certificate dates can be read from it"
        " (PEM that OpenSSL loads but cryptography does not, such as a TRUSTED CERTIFICATE"
        " block): it is served, but neither warned of before it expires nor reported in"
        " toolwatch_tls_certificate_expiry_timestamp_seconds; write it as plain CERTIFICATE"
        " blocks"
    ]


@pytest.mark.parametrize(
    ("setting", "value", "bound"),
    [
        # gRPC takes its channel options as C ints: serve died with an OverflowError.
        ("ingest.max_request_bytes", 3_000_000_000, 2_147_483_647),
        # The compiled scanner takes a C ssize_t: serve and replay died building it.
        ("ingest.max_value_bytes", 2**63, 2_147_483_647),
        # A half's wait becomes nanoseconds: 1e300 s overflowed when serve or replay began.
        ("shadow.pair_timeout_seconds", 1e300, 604_800),
    ],
)
def test_a_value_too_large_for_where_it_goes_is_refused_not_a_crash(
    setting: str, value: float, bound: int
) -> None:
    lines = error_lines(None, {setting: value})
    assert lines[1] == (
        f"  command line/environment: {setting}: Input should be less than or equal to"
        f" {bound} (got {value!r})"
    )
    largest = load_config(None, {"shadow.enabled": True, setting: bound})
    scanner(largest.decode_options())  # the compiled one where it is built
    ShadowJoiner(largest.shadow, ManualClock(), NoopMetrics())
    asyncio.run(grpc_server(largest.ingest.max_request_bytes))


async def grpc_server(max_request_bytes: int) -> None:
    """Builds the gRPC server as serve does with this request cap (its options are C ints)."""
    options = [("grpc.max_receive_message_length", max_request_bytes)]
    await grpc.aio.server(options=options).stop(None)


@pytest.mark.parametrize("pattern", [".*", "sorry|", "^", "(i can't)?", "(?i)x*"])
def test_a_refusal_pattern_that_matches_an_empty_text_is_refused(
    tmp_path: Path, pattern: str
) -> None:
    """It finds a match in every text: every run would be a refusal, and every canary that
    expects tools a REFUSAL_REGRESSION, paging at least high."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(
        f"evaluators:\n  tool_trace_structure:\n    refusal_patterns: [{pattern!r}, 'sorry']\n"
    )
    assert error_lines(config, {})[1] == (
        f"  {config}: evaluators.tool_trace_structure.refusal_patterns: {pattern!r} matches an"
        " empty text, so it matches every text: make it require some text"
        f" (got [{pattern!r}, 'sorry']) (line 3, column 5)"
    )


@pytest.mark.parametrize("pattern", [r"^\W*$", r"^(?!.*\w)"])
def test_a_refusal_pattern_that_matches_only_an_answer_of_no_words_stays(
    tmp_path: Path, pattern: str
) -> None:
    """It matches an empty text, but not every text: an answer of no words ("...") only."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(
        f"evaluators:\n  tool_trace_structure:\n    refusal_patterns: ['{pattern}']\n"
    )
    assert load_config(config, {}).evaluators.tool_trace_structure.refusal_patterns == (pattern,)


@pytest.mark.parametrize(
    ("text", "override", "where", "got", "at"),
    [
        ('listen: "0.0.0.0:4317"\n', "listen.grpc", "listen", "'0.0.0.0:4317'", "1, column 9"),
        ("listen:\n", "listen.grpc", "listen", "None", "1, column 8"),
        ("security: [tls]\n", "security.tls.cert_file", "security", "['tls']", "1, column 1"),
    ],
)
def test_an_override_does_not_hide_a_malformed_section_of_the_file(
    tmp_path: Path, text: str, override: str, where: str, got: str, at: str
) -> None:
    """check-config refused the file, serve with a flag into the section took it: the
    override replaced the file's value, and what the file meant was gone unsaid."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(text)
    lines = error_lines(config, {override: "127.0.0.1:0"})
    assert lines[1] == (
        f"  {config} and command line/environment: {where}: expected a mapping (key: value"
        f" lines) (got {got}) (line {at})"
    )
    # A section that may be null is off when null: an override into it turns it on.
    tokens = tmp_path / "tokens"
    tokens.write_text("s3cret-token-value\n")
    config.write_text("security:\n  auth: null\n")
    loaded = load_config(config, {"security.auth.bearer_token_file": str(tokens)})
    assert loaded.security.auth is not None


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


def test_a_token_file_that_is_not_utf8_is_named_with_the_byte(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_bytes(b"good-token\n\xff\n")
    lines = error_lines(None, {"security.auth.bearer_token_file": str(tokens)})
    # As the configuration file's own check says it, not "'utf-8' codec can't decode ...".
    assert lines[1] == (
        f"  command line/environment: security.auth.bearer_token_file: {tokens}: not UTF-8 text"
        f" (byte 11: invalid start byte) (got {str(tokens)!r})"
    )


def test_security_files_are_read_unless_the_loader_is_told_they_are_not_used(
    tmp_path: Path,
) -> None:
    """``replay`` binds no listener: its configuration's TLS and token files (Secrets mounted
    in the pod alone) are not read; the section is validated all the same."""
    missing = tmp_path / "not-mounted"
    security = {
        "security.tls.cert_file": str(missing / "tls.crt"),
        "security.tls.key_file": str(missing / "tls.key"),
        "security.auth.bearer_token_file": str(missing / "token"),
    }
    lines = error_lines(None, security)
    assert lines[0] == "defaults: 3 configuration error(s)"
    assert all(": cannot read: No such file or directory" in line for line in lines[1:])
    config = load_config(None, security, security_files=False)
    assert config.security.tls is not None and config.security.tls.cert_file.parent == missing
    with pytest.raises(ConfigError, match=r"security.tls.cert_fil: unknown setting"):
        load_config(None, {**security, "security.tls.cert_fil": "x"}, security_files=False)


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


def test_the_longest_refusal_is_set_in_seconds_or_null_and_outlasts_the_wait(
    tmp_path: Path,
) -> None:
    """``assembly.max_refusal_seconds``: how long a full buffer refuses under backpressure
    before it evicts (``HeldTraces.has_room``)."""
    assert load_config(None, {}).assembly.limits().max_refusal_ns == 5 * 10**9
    config = load_config(None, {"assembly.max_refusal_seconds": "30"})
    assert config.assembly.limits().max_refusal_ns == 30 * 10**9
    # Left unset, it follows a longer wait: ended runs are let go before any is evicted.
    waits = load_config(None, {"assembly.completion_wait_seconds": 8})
    assert waits.assembly.limits().max_refusal_ns == 8 * 10**9
    never = tmp_path / "toolwatch.yaml"
    never.write_text("assembly:\n  max_refusal_seconds: null\n")
    assert load_config(never, {}).assembly.limits().max_refusal_ns == 0

    assert error_lines(None, {"assembly.max_refusal_seconds": 1})[1] == (
        "  defaults and command line/environment: assembly: max_refusal_seconds (1) must be at"
        " least completion_wait_seconds (2): a full buffer makes room as the runs it holds end"
        " and their wait passes, and would evict them before it could"
    )
    # Under evict_oldest it does nothing, and is no error: a file may set it whichever
    # overflow an override picks.
    evicting = {"assembly.overflow": "evict_oldest", "assembly.max_refusal_seconds": 5}
    assert load_config(None, evicting).assembly.limits().overflow == "evict_oldest"
