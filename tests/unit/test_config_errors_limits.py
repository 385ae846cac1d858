"""Configuration errors and warnings of durations and bounds: infinite, too long, below a
nanosecond, too large for where they go; waits an SDK exporter would not outlast."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.config_errors_support import error_lines
from toolwatch.config import load_config


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
    waits = {"assembly.completion_wait_seconds": 7}  # the default limit follows the waits
    assert load_config(None, waits).warnings(defaults=True) == [
        "assembly.max_refusal_seconds is 12 (at least completion_wait_seconds; unset, at least"
        " completion_wait_seconds + lost_parent_wait_seconds):"
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


def test_the_longest_refusal_is_set_in_seconds_or_null_and_outlasts_the_wait(
    tmp_path: Path,
) -> None:
    """``assembly.max_refusal_seconds``: how long a full buffer refuses under backpressure
    before it evicts (``HeldTraces.has_room``)."""
    assert load_config(None, {}).assembly.limits().max_refusal_ns == 7 * 10**9
    config = load_config(None, {"assembly.max_refusal_seconds": "30"})
    assert config.assembly.limits().max_refusal_ns == 30 * 10**9
    # Left unset, it follows longer waits: ended runs are let go before any is evicted, a
    # run left running in the background too, which waits both (review-wait6 defect 5).
    waits = load_config(None, {"assembly.completion_wait_seconds": 8})
    assert waits.assembly.limits().max_refusal_ns == 13 * 10**9
    lost = load_config(None, {"assembly.lost_parent_wait_seconds": 6})
    assert lost.assembly.limits().max_refusal_ns == 8 * 10**9
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
