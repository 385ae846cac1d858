"""From an agent run to a Prometheus alert, with nothing mocked.

toolwatch runs on loopback ports (``start_server``: a ManualClock drives its pipeline), a
real Prometheus (Debian's ``prometheus`` package) scrapes it every second with the shipped
rules (deploy/prometheus/toolwatch-rules.yaml), and an agent run that calls ``issue_refund``
without ``lookup_order`` first is sent with the OpenTelemetry SDK's OTLP gRPC exporter. The
finding must reach the findings log, ``toolwatch_regressions_total`` in Prometheus, the
``ToolwatchMissingVerificationStep`` alert, an exemplar carrying the run's trace id, and the
live findings stream (the gRPC stub and ``toolwatch tail``).
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.integration import agents
from tests.integration.conftest import FREE_PORTS, RunningServer
from tests.integration.metrics_support import OPENMETRICS, scrape
from tests.integration.prometheus_server import (
    JOB,
    PrometheusServer,
    requires_prometheus,
    requires_promtool,
    running_prometheus,
)
from toolwatch._proto.toolwatch.v1 import findings_pb2, findings_pb2_grpc
from toolwatch.config import load_config
from toolwatch.model import Category
from toolwatch.model_evaluation import Finding
from toolwatch.tail import run_tail
from toolwatch.tail_exits import EXIT_OK

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "toolwatch-rules.yaml"
POLICY = """\
policy:
  dangerous_tools: [issue_refund]
  verification_tools: [lookup_order]
"""
CATEGORY = "MISSING_VERIFICATION_STEP"
REGRESSIONS = f'toolwatch_regressions_total{{category="{CATEGORY}"}}'
ALERT = "ToolwatchMissingVerificationStep"


def policy_file(tmp_path: Path) -> Path:
    config = tmp_path / "toolwatch.yaml"
    config.write_text(POLICY, encoding="utf-8")
    return config


@pytest.fixture
def toolwatch(start_server: Callable[..., RunningServer], tmp_path: Path) -> RunningServer:
    return start_server(config_file=policy_file(tmp_path))


@pytest.fixture
def prometheus(toolwatch: RunningServer, tmp_path: Path) -> Iterator[PrometheusServer]:
    """A Prometheus that has scraped toolwatch at least once: toolwatch was already being
    watched when the run happened, as in production."""
    with running_prometheus(tmp_path / "prometheus", toolwatch.address("metrics"), [RULES]) as p:
        p.wait_until("toolwatch scraped", lambda: _up(p))
        yield p


def _up(prometheus: PrometheusServer) -> bool | None:
    return True if prometheus.query(f'up{{job="{JOB}"}} == 1') else None


def send_unverified_refund(server: RunningServer) -> str:
    """Sends the run over OTLP/gRPC and completes it; returns its trace id (hex)."""
    spans = agents.record(agents.unverified_refund_run(), "genai")
    exporter = OTLPSpanExporter(endpoint=server.address("grpc"), insecure=True, timeout=10)
    try:
        assert exporter.export(spans) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    assert server.settle() == 1
    return format(spans[0].context.trace_id, "032x")


Summary = tuple[str, str, str | None, str | None, str]
SUMMARY_KEYS = ("category", "severity", "tool", "agent", "trace_id")


def summary(finding: Finding) -> Summary:
    """(category, severity, tool, agent, trace id) of a finding."""
    category, severity = str(finding.category), str(finding.severity)
    return (category, severity, finding.tool, finding.agent, finding.trace_id)


def record_summary(record: dict[str, Any]) -> Summary:
    """The same of a findings-log object (also what ``toolwatch tail --json`` prints)."""
    category, severity, tool, agent, trace_id = (record[key] for key in SUMMARY_KEYS)
    return (category, severity, tool, agent, trace_id)


def expected_summary(trace_id: str) -> Summary:
    return (CATEGORY, "high", "issue_refund", "refund-bot", trace_id)


def missing_verification_findings(server: RunningServer) -> list[Finding]:
    return [f for f in server.findings.findings if f.category is Category.MISSING_VERIFICATION_STEP]


# --- Prometheus: counter, alert, exemplar -----------------------------------------------------


@pytest.mark.prometheus
@requires_prometheus
def test_an_unverified_refund_fires_the_missing_verification_alert(
    toolwatch: RunningServer, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    trace_id = send_unverified_refund(toolwatch)

    [finding] = missing_verification_findings(toolwatch)
    assert summary(finding) == expected_summary(trace_id)
    log = [json.loads(line) for line in (tmp_path / "findings.jsonl").read_text().splitlines()]
    assert [record_summary(r) for r in log if r["category"] == CATEGORY] == [
        expected_summary(trace_id)
    ]

    series = prometheus.wait_until(f"{REGRESSIONS} == 1", lambda: _one_series(prometheus))
    assert series == {
        "agent": "refund-bot",
        "category": CATEGORY,
        "evaluator": finding.evaluator,
        "instance": toolwatch.address("metrics"),
        "job": JOB,
        "severity": "high",
        "tool": "issue_refund",
        "traffic": "live",
    }
    alert = prometheus.wait_until(f"{ALERT} pending or firing", lambda: _alert(prometheus))
    assert alert["state"] in {"pending", "firing"}
    assert alert["labels"] == {
        "alertname": ALERT,
        "agent": "refund-bot",
        "category": CATEGORY,
        "component": "toolwatch",
        "severity": "critical",
        "team": "agent-platform",
        "tool": "issue_refund",
    }
    annotations = alert["annotations"]
    assert annotations["summary"] == (
        "A run of agent refund-bot called issue_refund without verifying first."
    )
    description = " ".join(annotations["description"].split())
    assert description.startswith("1 MISSING_VERIFICATION_STEP finding(s) in the last 5m")
    assert "Open the trace" in description
    assert "roll back the change that made the calling agent skip verification" in description
    assert annotations["dashboard"].endswith("?var-agent=refund-bot&var-tool=issue_refund")


DASHBOARD = ROOT / "deploy" / "grafana" / "toolwatch.json"


def panel_expression(title: str, **variables: str) -> str:
    """The first query of the dashboard panel ``title``, Grafana's variables filled in."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    [panel] = [p for p in dashboard["panels"] if p.get("title") == title]
    expression: str = panel["targets"][0]["expr"]
    for name in sorted(variables, key=len, reverse=True):  # $__range_s before $__range
        expression = expression.replace(f"${{{name}:pipe}}", variables[name])
        expression = expression.replace(f"${name}", variables[name])
    return expression


@pytest.mark.prometheus
@requires_prometheus
def test_the_dashboard_counts_a_series_first_finding(
    toolwatch: RunningServer, prometheus: PrometheusServer
) -> None:
    """A label set's first finding starts its counter at 1, and increase() sees no rise in
    it: the dashboard's finding counts add a series created in the range, as the rules do."""
    send_unverified_refund(toolwatch)
    prometheus.wait_until(f"{REGRESSIONS} == 1", lambda: _one_series(prometheus))
    variables = {
        "__range": "1h",
        "__range_s": "3600",
        # All: `.*` matches this scrape's series, which have no namespace label
        "namespace": ".*",
        "agent": ".*",
        "tool": ".*",
        "traffic": "live|",  # the dashboard's default
    }
    paging = panel_expression("Findings that page", **variables)
    assert prometheus.wait_until(
        "two scrapes of the finding", lambda: prometheus.query(paging) or None
    ) == {"": 1.0}
    # the finding is of severity high: counted there too
    assert prometheus.query(panel_expression("Critical and high findings", **variables)) == {
        "": 1.0
    }
    assert prometheus.query(f"sum(increase({REGRESSIONS}[1h])) or vector(0)") == {"": 0.0}


def _one_series(prometheus: PrometheusServer) -> dict[str, str] | None:
    """The labels of the only MISSING_VERIFICATION_STEP series once its value is 1."""
    data = prometheus.api("query", query=REGRESSIONS)["result"]
    if [float(s["value"][1]) for s in data] != [1.0]:
        return None
    labels: dict[str, str] = data[0]["metric"]
    labels.pop("__name__")
    return labels


def _alert(prometheus: PrometheusServer) -> dict[str, Any] | None:
    active = [a for a in prometheus.alerts() if a["labels"]["alertname"] == ALERT]
    assert len(active) <= 1, active
    return active[0] if active else None


@pytest.mark.prometheus
@requires_prometheus
def test_prometheus_stores_the_exemplar_with_the_runs_trace_id(
    toolwatch: RunningServer, prometheus: PrometheusServer
) -> None:
    start = time.time() - 60
    trace_id = send_unverified_refund(toolwatch)

    def exemplars() -> list[dict[str, Any]] | None:
        found = prometheus.exemplars(REGRESSIONS, start, time.time() + 60)
        return found or None

    [series] = prometheus.wait_until(f"an exemplar of {REGRESSIONS}", exemplars)
    assert series["seriesLabels"]["tool"] == "issue_refund"
    assert [(e["labels"], float(e["value"])) for e in series["exemplars"]] == [
        ({"trace_id": trace_id}, 1.0)
    ]


# --- the live exposition -------------------------------------------------------------------


@pytest.mark.prometheus
@requires_promtool
def test_promtool_accepts_a_live_scrape_after_a_finding(toolwatch: RunningServer) -> None:
    trace_id = send_unverified_refund(toolwatch)
    # The whole app's registry after a real run (the unit tests check synthetic ones).
    text = scrape(toolwatch, "text/plain; version=0.0.4")
    assert f'category="{CATEGORY}"' in text
    # The alert rules see a counter's first finding through its _created series.
    created = [line for line in text.splitlines() if line.startswith("toolwatch_regressions_c")]
    assert [f'category="{CATEGORY}"' in line for line in created] == [True], created
    assert trace_id not in text  # exemplars exist only in OpenMetrics
    # The process's own series, as the default registry has them, for the memory sizing.
    resident = re.search(r"^process_resident_memory_bytes (\S+)$", text, re.MULTILINE)
    assert resident is not None and float(resident.group(1)) > 10 * 2**20, text[:2000]
    assert '\npython_gc_collections_total{generation="0"} ' in text
    result = subprocess.run(
        ["promtool", "check", "metrics"], input=text.encode(), capture_output=True, check=False
    )
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    openmetrics = scrape(toolwatch, OPENMETRICS)
    assert f'# {{trace_id="{trace_id}"}} 1.0' in openmetrics
    assert openmetrics.endswith("# EOF\n")


# --- the findings stream ---------------------------------------------------------------------


def wait_for_subscribers(server: RunningServer, count: int) -> None:
    """Returns once ``count`` stream subscriptions are open on the server."""
    waiting = server.app.broker.wait_for_subscribers(count)
    asyncio.run_coroutine_threadsafe(waiting, server.loop).result(timeout=10)


@pytest.fixture
def stoppable(tmp_path: Path) -> Iterator[RunningServer]:
    """A toolwatch the test itself shuts down (``start_server`` would stop it a second
    time); stopped here if the test did not get that far."""
    settings = dict(FREE_PORTS, **{"output.findings": str(tmp_path / "findings.jsonl")})
    server = RunningServer(load_config(policy_file(tmp_path), settings), tmp_path)
    try:
        yield server
    finally:
        if server.loop.is_running():
            server.stop()


def test_a_stream_subscriber_receives_the_finding(toolwatch: RunningServer) -> None:
    request = findings_pb2.SubscribeRequest(categories=[CATEGORY])
    with grpc.insecure_channel(toolwatch.address("stream")) as channel:
        stub = findings_pb2_grpc.FindingsServiceStub(channel)  # type: ignore[no-untyped-call]
        call = stub.Subscribe(request, timeout=30)
        metadata = dict(call.initial_metadata())
        (subscription,) = toolwatch.call(lambda: toolwatch.app.broker.subscriptions)
        assert metadata == {
            "toolwatch-subscribed": "1",
            "toolwatch-stream-id": toolwatch.app.broker.stream_id,
            "toolwatch-stream-sequence": "0",
            "toolwatch-resume-token": subscription.token,
        }
        trace_id = send_unverified_refund(toolwatch)
        message = next(call)
        assert (
            message.category,
            message.severity,
            message.tool,
            message.agent,
            message.trace_id,
        ) == expected_summary(trace_id)
        assert message.service == "refund-agent"
        assert "issue_refund" in message.explanation
        # Ending the stream (as a shutdown does) shows nothing else was queued for us.
        toolwatch.call(toolwatch.app.broker.close)
        assert list(call) == []
        assert call.code() is grpc.StatusCode.OK


def test_tail_json_prints_the_finding_until_toolwatch_shuts_down(
    stoppable: RunningServer,
) -> None:
    out, err = io.StringIO(), io.StringIO()
    codes: list[int] = []
    target = stoppable.address("stream")

    def tail() -> None:
        codes.append(run_tail(target, categories=[CATEGORY], as_json=True, out=out, err=err))

    thread = threading.Thread(target=tail, daemon=True)
    thread.start()
    wait_for_subscribers(stoppable, 1)
    trace_id = send_unverified_refund(stoppable)
    stoppable.stop()  # App.stop: the SIGTERM path ends every findings stream with OK
    thread.join(timeout=30)

    assert codes == [EXIT_OK], err.getvalue()
    [record] = [json.loads(line) for line in out.getvalue().splitlines()]
    assert record_summary(record) == expected_summary(trace_id)
    assert (record["evaluator"], record["reference"], record["service"]) == (
        "safety",
        "policy",
        "refund-agent",
    )
    assert "ended the stream" in err.getvalue()
