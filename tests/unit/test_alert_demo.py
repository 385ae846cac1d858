"""``make alert-demo``'s pure parts (scripts/alert_demo.py): the Prometheus configuration it
writes, the run it sends, and what it reads back from toolwatch and Prometheus. The demo run
end to end, against a real Prometheus: tests/integration/test_alert_demo.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from scripts.alert_demo import (
    ALERT,
    EXAMPLE_RUN,
    EXAMPLE_TRACE_ID,
    demo_alert,
    finding_line,
    listening_addresses,
    prometheus_config,
    regression_samples,
    serve_command,
    with_trace_id,
)

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "toolwatch-rules.yaml"
NEW_TRACE_ID = "0123456789abcdef0123456789abcdef"


def test_the_prometheus_config_scrapes_toolwatch_every_second_with_the_shipped_rules() -> None:
    assert prometheus_config("127.0.0.1:39277") == {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {
                "job_name": "toolwatch",
                "metrics_path": "/metrics",
                "static_configs": [{"targets": ["127.0.0.1:39277"]}],
            }
        ],
    }
    assert Path(prometheus_config("x:1")["rule_files"][0]).is_absolute()


def test_the_rules_path_is_made_absolute() -> None:
    relative = Path("deploy/prometheus/toolwatch-rules.yaml")
    assert prometheus_config("x:1", relative)["rule_files"] == [str(relative.resolve())]


def test_serve_runs_the_example_policy_on_port_0_with_findings_on_stdout() -> None:
    command = serve_command()
    serve = command.index("serve")
    options = dict(zip(command[serve + 1 :: 2], command[serve + 2 :: 2], strict=True))
    assert options == {
        "--config": str(ROOT / "examples" / "toolwatch.yaml"),
        "--findings": "-",
        "--grpc-listen": "127.0.0.1:0",
        "--http-listen": "127.0.0.1:0",
        "--metrics-listen": "127.0.0.1:0",
        "--stream-listen": "127.0.0.1:0",
    }


def test_the_sent_run_is_the_example_under_the_new_trace_id() -> None:
    example = EXAMPLE_RUN.read_text(encoding="utf-8")
    sent = with_trace_id(example, NEW_TRACE_ID).decode()

    spans = [
        span
        for resource in json.loads(sent)["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]
    assert {span["traceId"] for span in spans} == {NEW_TRACE_ID}
    assert len(spans) == 4
    assert sent.replace(NEW_TRACE_ID, EXAMPLE_TRACE_ID) == example


def test_an_example_without_its_trace_id_is_refused() -> None:
    with pytest.raises(ValueError, match=EXAMPLE_TRACE_ID):
        with_trace_id('{"resourceSpans": []}', NEW_TRACE_ID)


def test_the_listening_line_gives_the_bound_addresses() -> None:
    log = (
        "2026-12-04 22:32:26,510 INFO toolwatch: listening grpc=127.0.0.1:42549 "
        "http=127.0.0.1:33777 metrics=127.0.0.1:38213 stream=127.0.0.1:43161\n"
        "2026-12-04 22:32:26,511 INFO toolwatch: hot path: compiled by mypyc\n"
    )
    assert listening_addresses(log) == {
        "grpc": "127.0.0.1:42549",
        "http": "127.0.0.1:33777",
        "metrics": "127.0.0.1:38213",
        "stream": "127.0.0.1:43161",
    }


def test_no_addresses_before_the_listening_line() -> None:
    assert listening_addresses("") is None
    assert listening_addresses("2026-12-04 INFO toolwatch: hot path: compiled\n") is None


def test_the_finding_counter_is_read_from_the_exposition() -> None:
    registry = CollectorRegistry()
    labels = ("agent", "category", "tool")
    counter = Counter("toolwatch_regressions", "", labels, registry=registry)
    counter.labels("refund-bot", "MISSING_VERIFICATION_STEP", "issue_refund").inc(2)
    counter.labels("refund-bot", "TOOL_ORDER_DRIFT", "issue_refund").inc()

    assert regression_samples(generate_latest(registry).decode()) == [
        'toolwatch_regressions_total{agent="refund-bot",'
        'category="MISSING_VERIFICATION_STEP",tool="issue_refund"} 2'
    ]
    assert regression_samples("") == []


def test_the_demo_alert_is_picked_by_name_firing_first() -> None:
    other = {"labels": {"alertname": "ToolwatchDown"}, "state": "firing"}
    pending = {"labels": {"alertname": ALERT, "tool": "a"}, "state": "pending"}
    firing = {"labels": {"alertname": ALERT, "tool": "b"}, "state": "firing"}

    assert demo_alert([other, pending, firing]) == firing
    assert demo_alert([other, pending]) == pending
    assert demo_alert([other]) is None


def test_the_finding_line_is_the_one_of_the_sent_trace() -> None:
    ours = {"category": "MISSING_VERIFICATION_STEP", "trace_id": NEW_TRACE_ID}
    lines = [
        json.dumps({"category": "MISSING_VERIFICATION_STEP", "trace_id": EXAMPLE_TRACE_ID}),
        "not json",
        json.dumps({"category": "TOOL_ORDER_DRIFT", "trace_id": NEW_TRACE_ID}),
        json.dumps(ours),
    ]
    assert finding_line("\n".join(lines), NEW_TRACE_ID) == json.dumps(ours)
    assert finding_line("\n".join(lines[:3]), NEW_TRACE_ID) is None
