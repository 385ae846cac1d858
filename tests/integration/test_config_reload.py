"""Reloading the configuration (SIGHUP): the policy, golden cases and evaluator settings
change for the runs evaluated from then on; what does not load leaves the running
configuration in place, said in the log and in ``toolwatch_config_last_reload_successful``."""

from __future__ import annotations

import datetime
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import trustme

from tests.certificates import install_certificate
from tests.integration import agents
from tests.integration.conftest import RunningServer
from tests.integration.evaluation_support import MINIMAL_POLICY, findings_log
from tests.integration.ingest_support import send_grpc
from tests.integration.reload_support import OTHER_POLICY, RELOADED, RELOADED_AT
from tests.integration.security_support import serving_certificate
from tests.unit.config_warnings_support import HALF_POLICY


def unverified_refund(server: RunningServer) -> None:
    send_grpc(server, agents.record(agents.unverified_refund_run(), "genai"))


def categories(server: RunningServer) -> list[str]:
    return [finding["category"] for finding in findings_log(server)]


def test_a_reload_judges_the_runs_evaluated_from_then_on_by_the_new_policy(
    start_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    config = tmp_path / "toolwatch.yaml"
    config.write_text(OTHER_POLICY)
    server = start_server(config)
    loaded_at = server.sample(RELOADED_AT)
    unverified_refund(server)
    server.settle()
    assert categories(server) == []  # issue_refund is no dangerous tool yet
    runs = {"agent": "refund-bot", "outcome": "complete", "reference": "none"}
    assert server.sample("toolwatch_tool_traces_total", runs) == 1  # evaluated, no finding
    unverified_refund(server)  # buffered when the reload comes: judged by the new policy
    config.write_text(MINIMAL_POLICY)
    assert server.reload()
    server.settle()
    unverified_refund(server)
    server.settle()
    assert categories(server) == ["MISSING_VERIFICATION_STEP"] * 2
    assert server.sample(RELOADED) == 1
    assert server.sample(RELOADED_AT) >= loaded_at > 0


def test_a_configuration_that_does_not_load_leaves_the_running_one(
    start_server: Callable[..., RunningServer], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "toolwatch.yaml"
    config.write_text(MINIMAL_POLICY)
    server = start_server(config)
    config.write_text(OTHER_POLICY + "  repeat_limit: many\n")
    with caplog.at_level(logging.ERROR, logger="toolwatch"):
        assert not server.reload()
    said = [r.getMessage() for r in caplog.records if r.name == "toolwatch"]
    assert said == [
        f"configuration reload failed; the running configuration stays: {config}: 1"
        " configuration error(s)",
        f"configuration reload failed: {config}: policy.repeat_limit: Input should be a valid"
        " integer, unable to parse string as an integer (got 'many') (line 4, column 17)",
    ]
    assert server.sample(RELOADED) == 0
    unverified_refund(server)  # still judged by MINIMAL_POLICY
    server.settle()
    assert categories(server) == ["MISSING_VERIFICATION_STEP"]
    config.write_text(MINIMAL_POLICY)
    assert server.reload()
    assert server.sample(RELOADED) == 1


def test_a_golden_case_file_that_does_not_load_fails_the_reload(
    start_server: Callable[..., RunningServer], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server, _config, golden = golden_server(start_server, tmp_path, "lookup_order")
    golden.write_text("cases: [{id: canary, expected_tools: 7}]\n")
    with caplog.at_level(logging.ERROR, logger="toolwatch"):
        assert not server.reload()
    assert "golden.yaml" in caplog.text
    assert server.sample(RELOADED) == 0
    canary(server)  # still compared with the case as it was
    server.settle()
    assert categories(server) == []


def test_sections_a_reload_does_not_apply_are_named_and_kept(
    start_server: Callable[..., RunningServer], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "toolwatch.yaml"
    config.write_text(MINIMAL_POLICY)
    server = start_server(config)
    config.write_text(
        OTHER_POLICY + "assembly:\n  completion_wait_seconds: 9\nshutdown_grace_seconds: 3\n"
    )
    with caplog.at_level(logging.INFO, logger="toolwatch"):
        assert server.reload()
    said = [r.getMessage() for r in caplog.records if r.name == "toolwatch"]
    assert said == [
        "configuration reloaded: policy, golden, evaluators apply to the runs evaluated from"
        " now on",
        "configuration reloaded without assembly.completion_wait_seconds,"
        " shutdown_grace_seconds, which changed: they take a restart",
    ]
    assert server.app.config.assembly.completion_wait_seconds == 2
    assert server.app.config.shutdown_grace_seconds == 10
    assert server.app.config.policy.dangerous_tools == ("cancel_order",)
    assert server.sample(RELOADED) == 1


def test_a_reload_names_each_setting_it_does_not_apply(
    start_server: Callable[..., RunningServer], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """It named the sections (``assembly, output (but its show_argument_values and
    show_fields)``): which of their settings changed took a search of the file. Settings
    the file leaves as they were are not named, nor the output ones a reload applies."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(MINIMAL_POLICY)
    server = start_server(config)
    config.write_text(
        MINIMAL_POLICY
        + "assembly:\n  max_buffered_spans: 50000\n"
        + "output:\n  stream_max_subscribers: 3\n  show_argument_values: true\n"
        + "ingest:\n  max_value_bytes: 1024\n"
    )
    with caplog.at_level(logging.WARNING, logger="toolwatch"):
        assert server.reload()
    assert caplog.messages == [
        "configuration reloaded without ingest.max_value_bytes, assembly.max_buffered_spans,"
        " output.stream_max_subscribers, which changed: they take a restart"
    ]
    assert server.app.config.output.show_argument_values


def test_the_buffer_bounds_exported_are_those_in_force_across_a_reload(
    start_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    """``toolwatch_buffered_max_*`` read the bounds the engine's buffer holds runs under; a
    reload keeps ``assembly`` as it runs (it takes a restart), and so do they."""
    config = tmp_path / "toolwatch.yaml"
    bounds = "assembly:\n  max_traces: 300\n  max_buffered_spans: 6000\n"
    config.write_text(MINIMAL_POLICY + bounds + "  max_buffered_bytes: 5000000\n")
    server = start_server(config)
    names = ("toolwatch_buffered_max_traces", "toolwatch_buffered_max_spans")
    names += ("toolwatch_buffered_max_bytes",)
    started = [server.sample(name) for name in names]
    config.write_text(OTHER_POLICY + "assembly:\n  max_buffered_spans: 50000\n")
    assert server.reload()
    assert server.app.config.policy.dangerous_tools == ("cancel_order",)  # it did reload
    assert started == [300.0, 6000.0, 5_000_000.0]
    assert [server.sample(name) for name in names] == started


GOLDEN_CONFIG = MINIMAL_POLICY + "golden:\n  cases_file: golden.yaml\n"


def golden_case(*tools: str) -> str:
    names = ", ".join(tools)
    return f"cases:\n  - id: canary\n    expected_tools: [{names}]\n"


def golden_server(
    start_server: Callable[..., RunningServer], tmp_path: Path, *tools: str
) -> tuple[RunningServer, Path, Path]:
    """A server with ``MINIMAL_POLICY`` and one golden case, ``canary``, expecting ``tools``;
    with its configuration and golden-case files."""
    config, golden = tmp_path / "toolwatch.yaml", tmp_path / "golden.yaml"
    config.write_text(GOLDEN_CONFIG)
    golden.write_text(golden_case(*tools))
    return start_server(config), config, golden


def canary(server: RunningServer) -> None:
    run = agents.AgentRun(
        "refund-bot",
        (agents.Turn((agents.LOOKUP,)), agents.Turn(text="A person will call you.")),
        attributes={"toolwatch.case_id": "canary"},
    )
    send_grpc(server, agents.record(run, "genai"))


def test_an_edited_golden_case_file_is_read_again(
    start_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    server, _config, golden = golden_server(start_server, tmp_path, "lookup_order", "issue_refund")
    canary(server)
    server.settle()
    missed = ["TOOL_SELECTION_DRIFT", "TOOL_ORDER_DRIFT"]  # the refund the case expects
    assert sorted(categories(server), reverse=True) == missed
    golden.write_text(golden_case("lookup_order"))  # the case now expects the lookup alone
    assert server.reload()
    canary(server)
    server.settle()
    assert sorted(categories(server), reverse=True) == missed  # nothing new
    labels = {"agent": "refund-bot", "outcome": "complete", "reference": "expected"}
    assert server.sample("toolwatch_tool_traces_total", labels) == 2


def test_golden_cases_turned_on_take_a_restart(
    start_server: Callable[..., RunningServer], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The receivers copy the attribute cases are found by as configured at start-up: cases
    turned on by a reload could never match a run, so they wait for a restart, and say so."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(MINIMAL_POLICY)
    server = start_server(config)
    (tmp_path / "golden.yaml").write_text(golden_case("lookup_order", "issue_refund"))
    config.write_text(GOLDEN_CONFIG)
    with caplog.at_level(logging.WARNING, logger="toolwatch"):
        assert server.reload()
    assert caplog.messages == [
        "configuration reloaded without golden.cases_file (its cases would be found by an"
        " attribute the receivers do not copy: they copy those configured at start-up), which"
        " changed: they take a restart"
    ]
    assert server.app.config.golden.cases_file is None
    canary(server)
    server.settle()
    assert categories(server) == []


def test_a_reload_is_checked_with_the_sections_that_keep_running(
    start_server: Callable[..., RunningServer], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A comparison with shadow sources needs shadow pairing, which only a restart turns on:
    the file is valid, what would run is not. Was: the failure named the section kept
    running ("shadow: the running value"), where the warning of a reload that works names
    its settings. Now: the settings, as that warning does."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(MINIMAL_POLICY)
    server = start_server(config)
    config.write_text(
        MINIMAL_POLICY
        + "shadow:\n  enabled: true\nevaluators:\n  tool_selection:\n    against: source\n"
    )
    with caplog.at_level(logging.ERROR, logger="toolwatch"):
        assert not server.reload()
    assert caplog.messages == [
        "configuration reload failed; the running configuration stays: evaluators.tool_selection"
        ".against is 'source' but shadow is off, so it would never run: configure that"
        " reference, use 'auto', or set evaluators.tool_selection.enabled: false"
        " (shadow.enabled: the running value until a restart)"
    ]
    assert server.sample(RELOADED) == 0
    assert server.app.config.evaluators.tool_selection.against == "auto"


def test_a_file_nested_too_deep_to_read_fails_the_reload(
    start_server: Callable[..., RunningServer], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "toolwatch.yaml"
    config.write_text(MINIMAL_POLICY)
    server = start_server(config)
    config.write_text("policy: " + "[" * 3000 + "]" * 3000 + "\n")
    with caplog.at_level(logging.ERROR, logger="toolwatch"):
        assert not server.reload()
    assert caplog.messages[0].startswith("configuration reload failed")
    assert server.sample(RELOADED) == 0


def test_tools_of_a_metrics_section_that_takes_a_restart_are_not_admitted(
    start_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    config = tmp_path / "toolwatch.yaml"
    config.write_text(MINIMAL_POLICY + "metrics:\n  label_value_cap: 1\n")
    server = start_server(config)
    send_grpc(server, agents.record(agents.nested_run(), "genai"))  # ask_billing takes the cap
    server.settle()
    config.write_text(MINIMAL_POLICY + "metrics:\n  label_value_cap: 1\n  tools: [get_weather]\n")
    assert server.reload()
    assert server.app.config.metrics.tools == ()
    send_grpc(server, agents.record(agents.parallel_run(), "genai"))
    server.settle()
    labels = {"agent": "_other", "status": "ok"}
    assert server.sample("toolwatch_tool_calls_total", labels | {"tool": "_other"}) == 2
    get_weather = labels | {"tool": "get_weather"}
    assert server.sample("toolwatch_tool_calls_total", get_weather, missing_ok=True) == 0


def test_golden_cases_turned_off_apply_even_when_their_file_is_gone(
    start_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    server, config, golden = golden_server(start_server, tmp_path, "lookup_order", "issue_refund")
    config.write_text(MINIMAL_POLICY)
    golden.unlink()
    assert server.reload()
    assert server.app.config.golden.cases_file is None
    canary(server)  # no case to compare it with now
    server.settle()
    assert categories(server) == []
    runs = {"agent": "refund-bot", "outcome": "complete", "reference": "none"}
    assert server.sample("toolwatch_tool_traces_total", runs) == 1


def test_golden_cases_kept_by_a_reload_are_not_read_again(
    start_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    """A new case_id_attribute takes a restart: the cases stay as they were loaded, even when
    their file has moved, and the policy beside them applies."""
    config, golden = tmp_path / "toolwatch.yaml", tmp_path / "golden.yaml"
    config.write_text(OTHER_POLICY + "golden:\n  cases_file: golden.yaml\n")
    golden.write_text(golden_case("lookup_order", "issue_refund"))
    server = start_server(config)
    golden.rename(tmp_path / "moved.yaml")
    config.write_text(
        MINIMAL_POLICY + "golden:\n  cases_file: moved.yaml\n  case_id_attribute: app.case\n"
    )
    assert server.reload()
    assert server.app.config.golden.cases_file == golden
    canary(server)  # still found by toolwatch.case_id, and compared with the case as loaded
    unverified_refund(server)  # judged by the new policy
    server.settle()
    assert sorted(categories(server), reverse=True) == [
        "TOOL_SELECTION_DRIFT",
        "TOOL_ORDER_DRIFT",
        "MISSING_VERIFICATION_STEP",
    ]


BOUND_POLICY = MINIMAL_POLICY + "  bindings:\n    issue_refund.order_id: lookup_order.order_id\n"


def test_a_reload_changes_which_argument_values_findings_show(
    start_server: Callable[..., RunningServer], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """output.show_fields applies at once, to the findings the stream holds for clients that
    resume too; the rest of output takes a restart."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(BOUND_POLICY + "output:\n  show_fields: [order_id]\n")
    server = start_server(config)
    unverified_refund(server)
    server.settle()
    config.write_text(BOUND_POLICY + "output:\n  stream_queue_size: 5\n")
    with caplog.at_level(logging.INFO, logger="toolwatch"):
        assert server.reload()
    unverified_refund(server)
    server.settle()
    shown = [finding["details"]["fields"] for finding in findings_log(server)]
    assert shown == [{"order_id": "A-1001"}, {"order_id": "[redacted]"}]
    held = [held.message.details["fields"] for held in server.app.broker.held]
    assert held == ['{"order_id":"[redacted]"}'] * 2
    said = [r.getMessage() for r in caplog.records if r.name == "toolwatch"][1:]
    assert said == [
        "findings redaction reloaded (output.show_argument_values, output.show_fields);"
        " redacted again, the findings the stream holds or has queued, not sent yet: 1",
        "configuration reloaded without output.stream_queue_size, which changed: they take a"
        " restart",
    ]
    assert server.app.config.output.stream_queue_size == 1000
    assert server.app.config.output.show_fields == ()


def test_a_findings_log_renamed_away_is_opened_again_at_its_path_on_sighup(
    start_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    """logrotate without copytruncate renames the log and sends SIGHUP: the findings after it
    go to a new file at the path, not on into the renamed one. The ToolTrace dump too."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(MINIMAL_POLICY)
    server = start_server(config)
    log = Path(server.app.config.output.findings or "")
    dump = server.tooltrace_path
    unverified_refund(server)
    server.settle()
    log.rename(tmp_path / "findings.jsonl.1")
    dump.rename(tmp_path / "tooltraces.jsonl.1")
    assert server.reload()
    unverified_refund(server)
    server.settle()

    assert categories(server) == ["MISSING_VERIFICATION_STEP"]  # the new file: one finding
    rotated = (tmp_path / "findings.jsonl.1").read_text().splitlines()
    assert [json.loads(line)["category"] for line in rotated] == ["MISSING_VERIFICATION_STEP"]
    assert len(server.tooltraces()) == 1
    assert len((tmp_path / "tooltraces.jsonl.1").read_text().splitlines()) == 1
    assert server.reload()  # the file at the path is the one written: kept open
    assert len(server.app._outputs.files) == 2


def test_a_sighup_while_shutting_down_opens_no_output_again(
    start_server: Callable[..., RunningServer], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A SIGHUP in the shutdown's wait for a last scrape (logrotate's, or a second reload)
    found the findings log and the dump closed, took them for rotated away, and opened new,
    empty files at their paths, logged as a rotation."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(MINIMAL_POLICY)
    server = start_server(config)
    log = Path(server.app.config.output.findings or "")
    unverified_refund(server)
    server.settle()
    server._await(server.app.stop(grace=1.0))
    log.rename(tmp_path / "findings.jsonl.1")
    server.tooltrace_path.rename(tmp_path / "tooltraces.jsonl.1")
    with caplog.at_level(logging.INFO, logger="toolwatch"):
        assert not server.reload()

    assert (log.exists(), server.tooltrace_path.exists()) == (False, False)
    assert [r.getMessage() for r in caplog.records if r.name == "toolwatch"] == [
        "SIGHUP while shutting down: configuration and outputs left as they are"
    ]
    assert server.sample("toolwatch_config_last_reload_successful") == 1


@pytest.mark.parametrize("full", [("findings",), ("findings", "dump_tooltraces")])
def test_outputs_that_cannot_be_written_are_counted_and_the_run_still_judged(
    start_server: Callable[..., RunningServer], tmp_path: Path, full: tuple[str, ...]
) -> None:
    """A full disk: the finding still counts in the metrics and reaches the stream, and what
    each output lost shows in toolwatch_output_failures_total (ToolwatchOutputFailing). A
    ToolTrace dump that failed to write cost the run its evaluation."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(MINIMAL_POLICY)
    server = start_server(config, **{f"output__{name}": "/dev/full" for name in full})
    unverified_refund(server)
    server.settle()
    failures = "toolwatch_output_failures_total"
    counted = {
        output: server.sample(failures, {"output": output})
        for output in ("findings_log", "tooltraces", "stream")
    }
    assert counted == {"findings_log": 1, "tooltraces": len(full) - 1, "stream": 0}
    assert [f.category.value for f in server.findings.findings] == ["MISSING_VERIFICATION_STEP"]
    regressions = {
        "category": "MISSING_VERIFICATION_STEP",
        "severity": "high",
        "evaluator": "safety",
        "agent": "refund-bot",
        "tool": "issue_refund",
    }
    assert server.sample("toolwatch_regressions_total", regressions) == 1
    assert server.sample("toolwatch_evaluator_failures_total", {"evaluator": "engine"}) == 0


def test_a_findings_log_path_that_is_now_a_fifo_is_left_alone_on_sighup(
    start_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    """Opening a FIFO whose reader is not back blocks: on the event loop, it would stop the
    server. The log goes on into the file it was."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(MINIMAL_POLICY)
    server = start_server(config)
    log = Path(server.app.config.output.findings or "")
    unverified_refund(server)
    server.settle()
    log.rename(tmp_path / "findings.jsonl.1")
    os.mkfifo(log)
    assert server.reload()
    unverified_refund(server)
    server.settle()
    rotated = (tmp_path / "findings.jsonl.1").read_text().splitlines()
    assert len(rotated) == 2


def test_the_agents_a_policy_names_keep_their_label_past_the_cap(
    start_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    config = tmp_path / "toolwatch.yaml"
    config.write_text(MINIMAL_POLICY + "  allowed_tools:\n    refund-bot: [lookup_order]\n")
    server = start_server(config, metrics__label_value_cap=1)
    send_grpc(server, agents.record(agents.parallel_run(), "genai"))  # weather-bot: the cap
    send_grpc(server, agents.record(agents.failed_run(), "genai"))  # refund-bot
    send_grpc(server, agents.record(agents.nested_run(), "genai"))  # support-bot: past it
    server.settle()
    runs = {"outcome": "complete", "reference": "none"}
    counted = {
        agent: server.sample("toolwatch_tool_traces_total", runs | {"agent": agent})
        for agent in ("weather-bot", "refund-bot", "_other")
    }
    assert counted == {"weather-bot": 1, "refund-bot": 1, "_other": 1}
    other = {"label": "agent"}
    # support-bot's run, and the call its nested billing-bot made
    assert server.sample("toolwatch_label_values_other_total", other) == 2


def test_a_policy_reload_is_not_refused_for_an_expired_certificate_file_not_served(
    start_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    """An old backup written over the certificate: TLS keeps serving the valid set, and a
    SIGHUP (a policy fix) still applies: security is restart-only, its files' dates are not
    the reload's to judge (they refused every reload, toolwatch_config_last_reload_successful
    0)."""
    ca = trustme.CA()
    server, cert, key = serving_certificate(start_server, tmp_path, ca)
    now = datetime.datetime.now(datetime.UTC)
    day = datetime.timedelta(days=1)
    install_certificate(ca, cert, key, not_before=now - 30 * day, not_after=now - day)
    server.clock.advance(30)
    server.call(server.app.tick)  # the look at the files: the valid set is kept

    assert server.reload() is True
    assert server.sample(RELOADED) == 1


def test_a_reload_warns_of_a_policy_that_guards_nothing_while_it_keeps_it(
    start_server: Callable[..., RunningServer], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As start-up does (``Config.judging_warnings``): a policy fixed by a SIGHUP was not
    warned of at the start, nor one broken by it at the reload. Each reload that keeps
    dangerous tools nothing can verify says so, until one gives them their verification."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(MINIMAL_POLICY)
    server = start_server(config)
    config.write_text("policy:\n  dangerous_tools: [issue_refund]\n")
    for _ in range(2):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="toolwatch"):
            assert server.reload()
        assert caplog.messages == [HALF_POLICY]
    unverified_refund(server)
    server.settle()
    assert categories(server) == []  # what the warning says
    config.write_text(MINIMAL_POLICY)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="toolwatch"):
        assert server.reload()
    assert caplog.messages == []
