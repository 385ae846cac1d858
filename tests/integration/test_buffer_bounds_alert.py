"""ToolwatchBufferNearlyFull reads what a real toolwatch exposes, before a bound is reached.

Was: the bounds were not exported, and no rule fired before one was reached (refusals,
ToolwatchBackpressure, and evictions, ToolwatchRunsEvaluatedIncomplete, told it once
coverage was being lost). Now: ``toolwatch_buffered_max_traces``, ``_max_spans`` and
``_max_bytes`` are exported beside what the buffer holds, and the rule tickets 80% of one.

A toolwatch whose buffer takes 10 traces (``assembly.max_traces``) is sent 9 runs in flight
(their agent spans, which end last, not sent) with the OpenTelemetry SDK's OTLP/gRPC
exporter; a real Prometheus scrapes it every second with the shipped rules
(deploy/prometheus/toolwatch-rules.yaml). The rule divides each ``toolwatch_buffered_*``
gauge by its bound, ``toolwatch_buffered_max_*``: 90% of ``max_traces`` puts the alert in
``pending`` (its ``for: 10m`` is toolwatch-rules.test.yaml's to test), naming the bound; the
runs ended and judged, it is gone. The dashboard's "Trace buffer: share of each bound" reads
the same shares (promtool).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.integration import agents
from tests.integration.conftest import RunningServer
from tests.integration.prometheus_server import (
    JOB,
    PrometheusServer,
    promtool_expr_case,
    requires_prometheus,
    requires_promtool,
    running_prometheus,
)

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "toolwatch-rules.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "toolwatch.json"
SHARE = "Trace buffer: share of each bound"
ALERT = "ToolwatchBufferNearlyFull"
RUNS = 9
MAX_TRACES = 10


def _export(server: RunningServer, spans: Sequence[ReadableSpan]) -> None:
    exporter = OTLPSpanExporter(endpoint=server.address("grpc"), insecure=True, timeout=10)
    try:
        assert exporter.export(spans) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()


def _alerts(prometheus: PrometheusServer) -> list[dict[str, Any]]:
    return [a for a in prometheus.alerts() if a["labels"]["alertname"] == ALERT]


@pytest.mark.prometheus
@requires_prometheus
def test_a_buffer_at_90_percent_of_max_traces_makes_the_alert_pending_naming_the_bound(
    start_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    server = start_server(assembly__max_traces=MAX_TRACES)
    runs = [agents.record(agents.refund_run(), "genai") for _ in range(RUNS)]
    _export(server, [span for run in runs for span in run if span.parent is not None])
    assert server.sample("toolwatch_buffered_traces") == RUNS
    metrics = server.address("metrics")
    with running_prometheus(tmp_path / "prometheus", metrics, [RULES]) as prometheus:
        [alert] = prometheus.wait_until("the alert pending", lambda: _alerts(prometheus) or None)
        bounds = prometheus.query('{__name__=~"toolwatch_buffered_max_.*"}')
        _export(server, [span for run in runs for span in run if span.parent is None])  # ended
        assert server.settle() == RUNS
        prometheus.wait_until("the alert gone", lambda: [] if not _alerts(prometheus) else None)
    labels = {"instance": metrics, "job": JOB}
    assert bounds == {
        f"__name__=toolwatch_buffered_max_bytes,instance={metrics},job={JOB}": 256 * 2**20,
        f"__name__=toolwatch_buffered_max_spans,instance={metrics},job={JOB}": 200_000,
        f"__name__=toolwatch_buffered_max_traces,instance={metrics},job={JOB}": MAX_TRACES,
    }
    assert (alert["state"], float(alert["value"])) == ("pending", RUNS / MAX_TRACES)
    assert alert["labels"] == labels | {
        "alertname": ALERT,
        "bound": "max_traces",
        "severity": "warning",
        "component": "toolwatch",
        "team": "agent-platform",
    }
    assert alert["annotations"]["summary"] == (
        f"toolwatch {metrics}'s trace buffer is at 90% of assembly.max_traces."
    )


def _share_targets() -> list[str]:
    """The share panel's expressions, all namespaces selected (Grafana's All, ``.*``)."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    (panel,) = [p for p in dashboard["panels"] if p.get("title") == SHARE]
    return [t["expr"].replace("$namespace", ".*") for t in panel["targets"]]


@pytest.mark.prometheus
@requires_promtool
def test_the_dashboard_shows_each_bound_s_share_as_the_alert_reads_it(tmp_path: Path) -> None:
    """A process at 81% of ``max_buffered_spans``, 10% of ``max_traces`` and 85% of
    ``max_buffered_bytes``, and one that exports no bounds (nothing shown for it)."""
    held = {"traces": (100, 1000), "spans": (8100, 10_000), "bytes": (850_000, 1_000_000)}
    one = 'job="toolwatch",instance="10.0.0.1:9464"'
    series = [{"series": 'toolwatch_buffered_spans{instance="10.0.0.2:9464"}', "values": "9x10"}]
    for name, (value, bound) in held.items():
        series.append({"series": f"toolwatch_buffered_{name}{{{one}}}", "values": f"{value}x10"})
        series.append(
            {"series": f"toolwatch_buffered_max_{name}{{{one}}}", "values": f"{bound}x10"}
        )
    shares = [0.1, 0.81, 0.85]
    failures = [
        promtool_expr_case(
            tmp_path / f"share{index}.test.yaml",
            rules=None,
            series=series,
            expr=expr,
            eval_time="10m",
            samples=[{"labels": '{instance="10.0.0.1:9464"}', "value": share}],
        )
        for index, (expr, share) in enumerate(zip(_share_targets(), shares, strict=True))
    ]
    assert failures == ["", "", ""]
