"""What the deployment artifact tests share: where each artifact is, reading them (YAML
documents, rules, alerts, panels, workloads, containers), promtool, and the metrics the sink
exposes with their labels."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from toolwatch.sinks.prometheus import BufferState, PrometheusMetrics
from toolwatch.sinks.scrape_state import TallyCollector

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
RULES = DEPLOY / "prometheus" / "toolwatch-rules.yaml"
PROMETHEUS_CONFIG = DEPLOY / "prometheus" / "prometheus.yml"
DASHBOARD = DEPLOY / "grafana" / "toolwatch.json"
GATEWAY_COLLECTOR = DEPLOY / "collector" / "gateway.yaml"
SIDECAR = DEPLOY / "kubernetes" / "sidecar.yaml"
GATEWAY = DEPLOY / "kubernetes" / "gateway.yaml"
MONITORING = DEPLOY / "kubernetes" / "monitoring.yaml"
DEFAULT_METRICS_PORT = 9464
# A series selector of a dashboard expression: a toolwatch metric, a recording rule over one,
# or `up`, with its matchers if it has any.
SERIES_SELECTOR = re.compile(
    r"(?<![\w:])((?:[a-z_]+:)?toolwatch_[a-z_]+(?::[a-z0-9_]+)?|up)(?![\w:])(?:\{([^}]*)\})?"
)
# Longest first: "$__range_s" must not be read as "$__range" followed by "_s".
GRAFANA_VARIABLES = {
    "$__rate_interval": "5m",
    "$__range_s": "3600",
    "$__range": "1h",
    "$namespace": ".*",  # All: the variable's allValue, which also matches no label
    "$agent": ".*",
    "$tool": ".*",
    "${traffic:pipe}": "live|",  # the default selection: live, and series without the label
}


# --- helpers -------------------------------------------------------------------------------


def read_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def yaml_documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def every_rule() -> list[dict[str, Any]]:
    return [rule for group in read_yaml(RULES)["groups"] for rule in group["rules"]]


def dashboard_panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", ())


def metrics_sink() -> tuple[CollectorRegistry, PrometheusMetrics]:
    """The real Prometheus sink, as toolwatch starts it, and the registry it fills."""
    registry = CollectorRegistry()
    # The gauges read at scrape time are registered only with their callables, as the app
    # passes them.
    metrics = PrometheusMetrics(
        registry,
        buffer_state=lambda: BufferState(0, 0, 0, max_traces=1, max_spans=1, max_bytes=1),
        stream_subscribers=lambda: 0,
        requests_in_flight=lambda: 0,
        stream_listening=lambda: True,
    )
    return registry, metrics


def declared_labels() -> dict[str, set[str]]:
    """Metric name -> the label names it declares, series or no series yet (most labelled
    families have none before the first run): the sink's own tallies name theirs (``labels``;
    read through their collector: the compiled sink has no ``__dict__``), prometheus_client's
    metrics keep theirs in a private attribute."""
    registry, _ = metrics_sink()
    declared = {
        name: set(getattr(collector, "_labelnames", ()))
        for name, collector in registry._names_to_collectors.items()
    }
    for collector in set(registry._names_to_collectors.values()):
        if isinstance(collector, TallyCollector):
            for tally in collector._tallies:
                declared[tally.name] = set(tally.labels)
    return declared


def port_of(address: str) -> int:
    return int(address.rpartition(":")[2])
