"""Reloading the configuration (SIGHUP): the policy, golden cases and evaluator settings
change for the runs evaluated from then on; what does not load leaves the running
configuration in place, said in the log and in ``toolwatch_config_last_reload_successful``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration import agents
from tests.integration.conftest import RunningServer
from tests.integration.test_evaluation_e2e import MINIMAL_POLICY, findings_log
from tests.integration.test_ingest_to_tooltrace import send_grpc

OTHER_POLICY = """\
policy:
  dangerous_tools: [cancel_order]
  verification_tools: [lookup_order]
"""
RELOADED = "toolwatch_config_last_reload_successful"
RELOADED_AT = "toolwatch_config_last_reload_success_timestamp_seconds"


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
    assert (
        server.sample(
            "toolwatch_tool_traces_total",
            {"agent": "refund-bot", "outcome": "complete", "reference": "none"},
        )
        == 1
    )
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
    (record,) = [r for r in caplog.records if r.name == "toolwatch"]
    assert record.getMessage().startswith(
        "configuration reload failed; the running configuration stays\n"
    )
    assert f"{config}" in record.getMessage()
    assert "policy.repeat_limit" in record.getMessage()
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
    config = tmp_path / "toolwatch.yaml"
    config.write_text(MINIMAL_POLICY)
    server = start_server(config)
    (tmp_path / "golden.yaml").write_text("cases: [{id: refund, expected_tools: 7}]\n")
    config.write_text(MINIMAL_POLICY + "golden:\n  cases_file: golden.yaml\n")
    with caplog.at_level(logging.ERROR, logger="toolwatch"):
        assert not server.reload()
    assert "golden.yaml" in caplog.text
    assert server.sample(RELOADED) == 0
    assert server.app.config.golden.cases_file is None


def test_sections_a_reload_does_not_apply_are_named_and_kept(
    start_server: Callable[..., RunningServer], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "toolwatch.yaml"
    linger = "shutdown_metrics_linger_seconds: 0\n"  # as the test server runs by default
    config.write_text(MINIMAL_POLICY + linger)
    server = start_server(config)
    config.write_text(
        OTHER_POLICY
        + linger
        + "assembly:\n  completion_wait_seconds: 9\nshutdown_grace_seconds: 3\n"
    )
    with caplog.at_level(logging.INFO, logger="toolwatch"):
        assert server.reload()
    said = [r.getMessage() for r in caplog.records if r.name == "toolwatch"]
    assert said == [
        "configuration reloaded: policy, golden, evaluators apply to the runs evaluated from"
        " now on",
        "configuration reloaded without assembly, shutdown_grace_seconds, which changed: they"
        " take a restart",
    ]
    assert server.app.config.assembly.completion_wait_seconds == 2
    assert server.app.config.shutdown_grace_seconds == 10
    assert server.app.config.policy.dangerous_tools == ("cancel_order",)
    assert server.sample(RELOADED) == 1
