"""The deployment artefacts agree with toolwatch and with each other.

- the alert rules pass ``promtool check rules`` and their unit tests pass ``promtool test
  rules``; every alert is tested firing and not firing (real promtool: Debian's ``prometheus``
  package; skipped with the reason when it is not on PATH);
- every PromQL expression (rules and Grafana dashboard) parses and names only metrics that
  toolwatch's Prometheus sink really exposes;
- the collector configurations route traces where toolwatch listens;
- the Kubernetes manifests run toolwatch non-root, probed, bounded, and with a valid config;
- the copies embedded in Kubernetes objects equal their source files.
- docs/deployment.md's memory sum is the one checked here, and its figure for the built-in
  defaults and its Sizing examples (settings, sums, limits, quoted defaults) add up.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client import CollectorRegistry, generate_latest

from toolwatch import cli, cli_sources
from toolwatch.config import AssemblySettings, Config, IngestSettings, load_config
from toolwatch.ingest.grpc_health import READ_TURNS
from toolwatch.metrics import REQUEST_OUTCOMES
from toolwatch.references.settings import ShadowSettings
from toolwatch.references.shadow import PAIRED_ENTRY_BYTES
from toolwatch.sinks.prometheus import BufferState, PrometheusMetrics
from toolwatch.sinks.scrape_state import TallyCollector

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
RULES = DEPLOY / "prometheus" / "toolwatch-rules.yaml"
RULE_TESTS = DEPLOY / "prometheus" / "toolwatch-rules.test.yaml"
PROMETHEUS_CONFIG = DEPLOY / "prometheus" / "prometheus.yml"
DASHBOARD = DEPLOY / "grafana" / "toolwatch.json"
COLLECTOR = ROOT / "otel-collector.yaml"
GATEWAY_COLLECTOR = DEPLOY / "collector" / "gateway.yaml"
SIDECAR = DEPLOY / "kubernetes" / "sidecar.yaml"
GATEWAY = DEPLOY / "kubernetes" / "gateway.yaml"
MONITORING = DEPLOY / "kubernetes" / "monitoring.yaml"
DOCKERFILE = ROOT / "Dockerfile"

# The metric names of the project brief, with their types: the fallback when the Prometheus
# sink cannot be imported, and a list the real exposition must contain.
DOCUMENTED_METRICS = {
    "toolwatch_regressions_total": "counter",
    "toolwatch_tool_calls_total": "counter",
    "toolwatch_tool_traces_total": "counter",
    "toolwatch_evaluator_score": "histogram",
    "toolwatch_spans_received_total": "counter",
    "toolwatch_spans_rejected_total": "counter",
    "toolwatch_spans_dropped_total": "counter",
    "toolwatch_spans_refused_total": "counter",
    "toolwatch_spans_built_total": "counter",
    "toolwatch_trace_evictions_total": "counter",
    "toolwatch_buffered_traces": "gauge",
    "toolwatch_buffered_spans": "gauge",
    "toolwatch_buffered_bytes": "gauge",
    "toolwatch_buffered_max_traces": "gauge",
    "toolwatch_buffered_max_spans": "gauge",
    "toolwatch_buffered_max_bytes": "gauge",
    "toolwatch_export_request_duration_seconds": "histogram",
    "toolwatch_evaluation_duration_seconds": "histogram",
    "toolwatch_detection_latency_seconds": "histogram",
    "toolwatch_evaluator_failures_total": "counter",
    "toolwatch_stream_dropped_findings_total": "counter",
    "toolwatch_stream_listening": "gauge",
    "toolwatch_shadow_unpaired_total": "counter",
    "toolwatch_golden_unmatched_traces_total": "counter",
    "toolwatch_golden_case_expected_every_seconds": "gauge",
    "toolwatch_golden_case_last_matched_timestamp_seconds": "gauge",
    "toolwatch_security_reload_failures_total": "counter",
    "toolwatch_tls_certificate_expiry_timestamp_seconds": "gauge",
    "toolwatch_build_info": "gauge",
}
DEFAULT_GRPC_LISTEN = "127.0.0.1:4317"
DEFAULT_METRICS_PORT = 9464
# A metric name, not part of a recording rule's level:metric:operation name.
METRIC_NAME = re.compile(r"(?<![\w:])toolwatch_[a-z_]+(?![\w:])")
# A series selector of a dashboard expression: a toolwatch metric, a recording rule over one,
# or `up`, with its matchers if it has any.
SERIES_SELECTOR = re.compile(
    r"(?<![\w:])((?:[a-z_]+:)?toolwatch_[a-z_]+(?::[a-z0-9_]+)?|up)(?![\w:])(?:\{([^}]*)\})?"
)
RECORDING_RULE_NAME = re.compile(r"\b[a-z_]+:toolwatch_[a-z_]+:[a-z0-9_]+\b")
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

requires_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool is not on PATH (CI installs it: apt-get install -y prometheus)",
)


# --- helpers -------------------------------------------------------------------------------


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def _scrape_interval_seconds() -> float:
    """The longest scrape interval of the monitors in ``monitoring.yaml`` (``15s``)."""
    intervals = []
    for monitor in _documents(MONITORING):
        if monitor["kind"].endswith("Monitor"):
            spec = monitor["spec"]
            for endpoint in spec.get("podMetricsEndpoints") or spec["endpoints"]:
                value = endpoint["interval"]
                assert value.endswith("s"), value
                intervals.append(float(value[:-1]))
    return max(intervals)


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["promtool", *args], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )


def _rules() -> list[dict[str, Any]]:
    return [rule for group in _yaml(RULES)["groups"] for rule in group["rules"]]


def _alerts() -> list[dict[str, Any]]:
    return [rule for rule in _rules() if "alert" in rule]


def _panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", ())


def _dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return [t["expr"] for p in _panels(dashboard) for t in p.get("targets", ())]


def _sample_names(families: dict[str, str]) -> frozenset[str]:
    """Series names a family exposes: a histogram's are its _bucket, _sum and _count; counters
    and histograms also expose <base>_created (prometheus_client), which the alert rules use."""
    names = set(families)
    for name, kind in families.items():
        if kind == "histogram":
            names.update(f"{name}{suffix}" for suffix in ("_bucket", "_sum", "_count", "_created"))
        if kind == "counter":
            names.add(f"{name.removesuffix('_total')}_created")
    return frozenset(names)


def _sink() -> tuple[CollectorRegistry, PrometheusMetrics]:
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


def _exposed_families() -> dict[str, str]:
    """``# TYPE`` lines of the real sink's exposition."""
    text = generate_latest(_sink()[0]).decode()
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))


def _declared_labels() -> dict[str, set[str]]:
    """Metric name -> the label names it declares, series or no series yet (most labelled
    families have none before the first run): the sink's own tallies name theirs (``labels``;
    read through their collector: the compiled sink has no ``__dict__``), prometheus_client's
    metrics keep theirs in a private attribute."""
    registry, _ = _sink()
    declared = {
        name: set(getattr(collector, "_labelnames", ()))
        for name, collector in registry._names_to_collectors.items()
    }
    for collector in set(registry._names_to_collectors.values()):
        if isinstance(collector, TallyCollector):
            for tally in collector._tallies:
                declared[tally.name] = set(tally.labels)
    return declared


def _workloads(path: Path) -> list[dict[str, Any]]:
    kinds = {"Deployment", "StatefulSet", "DaemonSet"}
    return [doc for doc in _documents(path) if doc["kind"] in kinds]


def _all_containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", ()), *pod["containers"]]


def _toolwatch_container(workload: dict[str, Any]) -> dict[str, Any]:
    pod = workload["spec"]["template"]["spec"]
    (container,) = [c for c in _all_containers(pod) if c["name"] == "toolwatch"]
    return container


def _flag(container: dict[str, Any], flag: str) -> str | None:
    args = container.get("args", [])
    return args[args.index(flag) + 1] if flag in args else None


def _port(address: str) -> int:
    return int(address.rpartition(":")[2])


def _toolwatch_config_map(path: Path) -> str:
    (text,) = [
        str(doc["data"]["toolwatch.yaml"])
        for doc in _documents(path)
        if doc["kind"] == "ConfigMap" and "toolwatch.yaml" in doc.get("data", {})
    ]
    return text


# --- promtool: rules, their unit tests, the example Prometheus config -----------------------


@pytest.mark.prometheus
@requires_promtool
def test_promtool_checks_the_rules() -> None:
    result = _promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in result.stdout


@pytest.mark.prometheus
@requires_promtool
def test_promtool_unit_tests_of_the_rules_pass() -> None:
    result = _promtool("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.prometheus
@requires_promtool
def test_promtool_checks_the_example_prometheus_config() -> None:
    result = _promtool("check", "config", str(PROMETHEUS_CONFIG))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 rule files found" in result.stdout


@pytest.mark.prometheus
@requires_promtool
def test_every_dashboard_expression_is_valid_promql(tmp_path: Path) -> None:
    # promtool has no bare expression check; recording rules are parsed like any PromQL.
    rules = []
    for index, expr in enumerate(_dashboard_exprs()):
        substituted = expr
        for variable, value in GRAFANA_VARIABLES.items():
            substituted = substituted.replace(variable, value)
        rules.append({"record": f"dashboard:panel_expression:{index}", "expr": substituted})
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = _promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    # A test of expressions alone (promql_expr_test) has no alert cases.
    tests = _yaml(RULE_TESTS)["tests"]
    cases = [case for test in tests for case in test.get("alert_rule_test", [])]
    for alert in (rule["alert"] for rule in _alerts()):
        own = [case for case in cases if case["alertname"] == alert]
        firing = [exp for case in own for exp in case["exp_alerts"]]
        assert firing, f"{alert} is never shown firing"
        assert all(exp["exp_labels"] and exp["exp_annotations"] for exp in firing), alert
        assert any(not case["exp_alerts"] for case in own), f"{alert} is never shown silent"


def test_every_alert_can_be_routed_and_says_what_to_do() -> None:
    for alert in _alerts():
        labels, annotations = alert["labels"], alert["annotations"]
        assert labels["severity"] in {"critical", "warning", "info"}, alert["alert"]
        assert labels["component"] == "toolwatch" and labels["team"], alert["alert"]
        assert annotations["summary"] and len(annotations["description"]) > 80, alert["alert"]
        # Findings alerts read them through a recording rule (level:toolwatch_regressions:op).
        if re.search(r"\btoolwatch_regressions_total|:toolwatch_regressions:", alert["expr"]):
            text = annotations["description"] + annotations["dashboard"]
            assert "$labels.agent" in text and "$labels.tool" in text, alert["alert"]
            assert "exemplar" in annotations["description"], alert["alert"]


def test_the_deploy_readme_lists_every_alert_with_its_severity() -> None:
    """deploy/README.md's table of alerts is what an on-call reads first: one row per alert
    of the rules file, none of an alert that is gone, each with the rule's severity."""
    table = (DEPLOY / "README.md").read_text(encoding="utf-8").partition("\n## Alerts\n")[2]
    rows = re.findall(r"^\| (Toolwatch\w+) \| (\w+)", table, re.MULTILINE)
    listed = dict(rows)
    assert len(listed) == len(rows), "an alert listed twice"
    severities = {alert["alert"]: alert["labels"]["severity"] for alert in _alerts()}
    assert listed == severities


def test_every_export_toolwatch_did_not_take_is_alerted_on() -> None:
    """Each outcome of a request whose spans toolwatch did not take, on each transport, is
    read by some alert. An OTLP/gRPC export over ingest.max_request_bytes is refused by gRPC
    before toolwatch reads it and counted ``aborted`` (test_otlp_sizes_and_encodings), in no
    span counter: without ToolwatchExportsAborted its loss told no one. Over HTTP, ``aborted``
    is only a client that went away, which knows it failed (a body too large is a 413,
    ``refused``)."""
    watched = set()
    selector = re.compile(r"toolwatch_export_request_duration_seconds_count\{([^}]*)\}")
    for alert in _alerts():
        for labels in selector.findall(alert["expr"]):
            outcomes = re.search(r'outcome=~?"([^"]+)"', labels)
            transport = re.search(r'transport="([^"]+)"', labels)
            assert outcomes, alert["alert"]
            for outcome in outcomes.group(1).split("|"):
                for on in [transport.group(1)] if transport else ["grpc", "http"]:
                    watched.add((on, outcome))
    failed = {(on, o) for on in ("grpc", "http") for o in REQUEST_OUTCOMES if o != "ok"}
    assert failed - watched == {("http", "aborted")}


RECORD_NAME = re.compile(r"\b[a-z_]+:[a-z_]+:[a-z0-9_]+\b")
BY = re.compile(r"\bby \(([^)]*)\) *\(")


def _labels(listed: str) -> set[str]:
    return {label.strip() for label in listed.split(",") if label.strip()}


def _kept(record: dict[str, Any]) -> set[str]:
    """The labels a recording rule keeps: its outermost ``by``."""
    match = BY.search(record["expr"])
    return _labels(match.group(1)) if match else set()


def _read_labels(expr: str, at: int, end: int) -> set[str]:
    """The labels a rule reads of the series selected at expr[at:end]: the selector's
    matchers, and the ``by`` of the innermost aggregation around it."""
    matchers = expr[end:].partition("}")[0] if expr[end:].startswith("{") else ""
    read = set(re.findall(r"(\w+)\s*(?:=~|!=|!~|=)\s*\"", matchers))
    around = [by for by in BY.finditer(expr[:at]) if _closing(expr, by.end()) > at]
    return read | (_labels(around[-1].group(1)) if around else set())


def _closing(expr: str, start: int) -> int:
    """Where the parenthesis opened just before expr[start] closes."""
    depth, at = 1, start
    while depth and at < len(expr):
        depth += {"(": 1, ")": -1}.get(expr[at], 0)
        at += 1
    return at


def _recording_rules_read_out_of_place(rules_file: Path) -> list[str]:
    """Each rule that reads a recording rule not recorded earlier in its own group (it reads
    the previous evaluation's count, one interval late) or that dropped a label the rule
    matches on or groups by (``traffic!="shadow"`` matches every series without ``traffic``)."""
    wrong = []
    for group in yaml.safe_load(rules_file.read_text(encoding="utf-8"))["groups"]:
        earlier: dict[str, dict[str, Any]] = {}
        for rule in group["rules"]:
            name = rule.get("alert") or rule["record"]
            for read in RECORD_NAME.finditer(rule["expr"]):
                record = earlier.get(read.group())
                if read.group() == rule.get("record"):
                    continue
                if record is None:
                    wrong.append(f"{name} reads {read.group()} not recorded before it")
                elif missing := _read_labels(rule["expr"], *read.span()) - _kept(record):
                    wrong.append(f"{name} reads {sorted(missing)} {read.group()} drops")
            if "record" in rule:
                earlier[rule["record"]] = rule
    return wrong


def test_rules_read_recording_rules_of_their_group_that_keep_their_labels() -> None:
    """Every rule that reads a recording rule finds it earlier in its own group (Prometheus
    evaluates a group's rules in order: the same evaluation's count) keeping each label the
    rule matches on or groups by.

    Was: only the page's test looked at its recording rule, and not at its group, place or
    labels. Now: every rule's reads are checked, as ``_recording_rules_read_out_of_place``
    words them."""
    assert _recording_rules_read_out_of_place(RULES) == []


@pytest.mark.parametrize("category", ["DANGEROUS_ACTION_DRIFT", "MISSING_VERIFICATION_STEP"])
def test_safety_categories_page_at_once(category: str) -> None:
    """Was: the page's recording rule could sum ``traffic`` away (then ``traffic!="shadow"``
    matches every series: a shadow candidate's dangerous call pages production) or be
    recorded after the alert or in another group (the page one evaluation late), and this
    test passed. Now: it reads the rules file as test_rules_read_recording_rules_of_their_
    group_that_keep_their_labels does, and fails on either."""
    (alert,) = [a for a in _alerts() if f'category="{category}"' in a["expr"]]
    assert alert["for"] == "0m" and alert["labels"]["severity"] == "critical"
    # The alert reads the 5m count of its live findings, which a recording rule takes.
    (counted,) = [r for r in _rules() if r.get("record", "").endswith(":increase5m")]
    assert counted["record"].endswith(":toolwatch_regressions:increase5m")
    assert "increase(toolwatch_regressions_total[5m])" in counted["expr"]
    assert f'{counted["record"]}{{traffic!="shadow",category="{category}"}}' in alert["expr"]
    assert {"traffic", "category"} <= _kept(counted)
    wrong = _recording_rules_read_out_of_place(RULES)
    assert not [w for w in wrong if w.startswith(alert["alert"] + " ")], wrong


def _without_traffic(rules: dict[str, Any]) -> None:
    (group,) = [g for g in rules["groups"] if g["name"] == "toolwatch.regressions.page"]
    record = group["rules"][0]
    record["expr"] = record["expr"].replace("namespace, traffic, category", "namespace, category")


def _after_the_alerts(rules: dict[str, Any]) -> None:
    (group,) = [g for g in rules["groups"] if g["name"] == "toolwatch.regressions.page"]
    group["rules"].append(group["rules"].pop(0))


def _in_another_group(rules: dict[str, Any]) -> None:
    (group,) = [g for g in rules["groups"] if g["name"] == "toolwatch.regressions.page"]
    rules["groups"].insert(0, {"name": "counts", "rules": [group["rules"].pop(0)]})


@pytest.mark.parametrize("mutate", [_without_traffic, _after_the_alerts, _in_another_group])
@pytest.mark.parametrize("category", ["DANGEROUS_ACTION_DRIFT", "MISSING_VERIFICATION_STEP"])
def test_the_page_test_fails_on_a_page_that_reads_shadow_or_late_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mutate: Any, category: str
) -> None:
    """Was: a page whose count summed ``traffic`` away, or was recorded after the alert,
    passed test_safety_categories_page_at_once (the review's mutants). Now: on a copy of the
    rules broken either way, or with the count in another group, it fails."""
    rules = _yaml(RULES)
    assert rules["groups"][0]["rules"][0]["record"].endswith(":increase5m")
    mutate(rules)
    broken = tmp_path / "toolwatch-rules.yaml"
    broken.write_text(yaml.safe_dump(rules, sort_keys=False), encoding="utf-8")
    monkeypatch.setitem(globals(), "RULES", broken)
    with pytest.raises(AssertionError):
        test_safety_categories_page_at_once(category)


def _traffic_selection(which: str) -> str:
    """The dashboard's ``traffic`` variable as Grafana sends it in ``${traffic:pipe}``: the
    values of its default selection, or of every option, joined by ``|`` and not escaped
    (the default format, ``$traffic``, escapes each value's ``|``: ``live\\|``, no series)."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    (variable,) = [v for v in dashboard["templating"]["list"] if v["name"] == "traffic"]
    chosen = (
        variable["current"]["value"]
        if which == "default"
        else [o["value"] for o in variable["options"]]
    )
    return "|".join(chosen)


def test_the_traffic_variable_is_read_unescaped() -> None:
    """Grafana's Prometheus data source escapes a multi-value variable's regex characters in
    its default format: ``traffic=~"$traffic"`` sent live's ``live|`` as ``live\\|``, which
    matches no series, and every panel was empty by default. ``${traffic:pipe}`` joins the
    values with ``|`` and escapes nothing."""
    selectors = [e for e in _dashboard_exprs() if "traffic" in e]
    assert selectors
    for expr in selectors:
        assert "$traffic" not in expr, expr
        matchers = re.findall(r"\btraffic\s*[=!]~?\s*\"[^\"]*\"", expr)
        assert matchers and set(matchers) == {'traffic=~"${traffic:pipe}"'}, expr


@requires_promtool
@pytest.mark.parametrize(("which", "expected"), [("default", 2), ("every", 3)])
def test_the_traffic_variable_keeps_series_without_the_label(
    tmp_path: Path, which: str, expected: int
) -> None:
    """The rules read live traffic as ``traffic!="shadow"`` so that a toolwatch older than the
    label (a fleet mid-upgrade, samples from before it) still pages; the dashboard a page
    links to must show those findings too: by default live and unlabelled, not shadow."""
    expr = next(e for e in _dashboard_exprs() if "DANGEROUS_ACTION_DRIFT|MISSING" in e)
    selected = {**GRAFANA_VARIABLES, "${traffic:pipe}": _traffic_selection(which)}
    for variable, value in selected.items():
        expr = expr.replace(variable, value)
    base = (
        'category="MISSING_VERIFICATION_STEP",severity="high",evaluator="safety",agent="a",tool="t"'
    )
    series = []
    for traffic in ("", ',traffic="live"', ',traffic="shadow"'):
        for name, values in (("total", "_ _ 1 1 1 1"), ("created", "_ _ 120 120 120 120")):
            series.append(
                {"series": f"toolwatch_regressions_{name}{{{base}{traffic}}}", "values": values}
            )
    _assert_evaluates(tmp_path, series, expr, expected)


def test_every_panel_reads_the_namespace_variable() -> None:
    """The regression alerts keep ``namespace`` (staging and production page apart) and their
    ``dashboard`` link selects it: a panel that ignores it shows staging's page a sum of
    staging and production. Every series selector of every panel matches
    ``namespace=~"$namespace"``: the Prometheus data source's default format, as ``$agent``
    and ``$tool`` use, regex-escapes each value for a PromQL string (``a\\\\.b``), where
    ``${namespace:regex}`` escapes with one backslash (``a\\.b``), which PromQL rejects as an
    unknown escape sequence (and the pipe format, right for ``traffic``, escapes nothing)."""
    for expr in _dashboard_exprs():
        selectors = SERIES_SELECTOR.findall(expr)
        assert selectors, expr
        for name, matchers in selectors:
            assert re.findall(r"\bnamespace\s*[=!]~?\s*\"[^\"]*\"", matchers) == [
                'namespace=~"$namespace"'
            ], (name, expr)


@requires_promtool
@pytest.mark.parametrize(
    ("selection", "expected"),
    # As Grafana sends them: All (allValue), one namespace, two (default format).
    [(".*", 3), ("staging", 1), ("(staging|production)", 2)],
)
def test_the_namespace_variable_selects_its_namespaces_and_all_keeps_unlabelled(
    tmp_path: Path, selection: str, expected: int
) -> None:
    """A page's link selects its namespace: the dashboard then counts that namespace's
    findings alone. All counts every namespace's and those of a toolwatch scraped without
    Kubernetes discovery (no ``namespace`` label)."""
    expr = next(e for e in _dashboard_exprs() if "DANGEROUS_ACTION_DRIFT|MISSING" in e)
    for variable, value in {**GRAFANA_VARIABLES, "$namespace": selection}.items():
        expr = expr.replace(variable, value)
    base = (
        'category="MISSING_VERIFICATION_STEP",severity="high",evaluator="safety",agent="a",'
        'tool="t",traffic="live"'
    )
    series = [
        {"series": f"toolwatch_regressions_{name}{{{base}{namespace}}}", "values": values}
        for namespace in ("", ',namespace="staging"', ',namespace="production"')
        for name, values in (("total", "_ _ 1 1 1 1"), ("created", "_ _ 120 120 120 120"))
    ]
    _assert_evaluates(tmp_path, series, expr, expected)


def test_pages_kept_apart_by_namespace_open_the_dashboard_filtered_to_it() -> None:
    """An alert that keeps ``namespace`` links to the dashboard with ``var-namespace``: the
    staging page must not open a view of staging and production summed (their findings,
    exemplars and error ratios)."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert "namespace" in {v["name"] for v in dashboard["templating"]["list"]}
    linked = [alert for alert in _alerts() if "dashboard" in alert["annotations"]]
    assert linked
    for alert in linked:
        assert re.search(r"\bby \(namespace,", alert["expr"]), alert["alert"]
        assert "var-namespace=" in alert["annotations"]["dashboard"], alert["alert"]


def test_dashboard_links_url_escape_every_label_value() -> None:
    """A label value goes into the link's query string through ``urlquery``: an agent named
    "R&D Triage Agent" otherwise makes a link cut at the space or split at the "&" (promtool
    cases in toolwatch-rules.test.yaml show the rendered links)."""
    for alert in _alerts():
        link = alert["annotations"].get("dashboard")
        if link is None:
            continue
        actions = [a.strip() for a in re.findall(r"\{\{(.*?)\}\}", link)]
        printed = [a for a in actions if not re.match(r"(with|if|else|end)\b", a)]
        assert printed, alert["alert"]
        for action in printed:
            assert action.endswith("| urlquery"), (alert["alert"], action)


def test_runbooks_name_labels_their_metrics_have() -> None:
    """Runbook text names the dimension an on-call types into a query ("metric by label"):
    ToolwatchRunsEvaluatedIncomplete said toolwatch_trace_evictions_total "by bound", whose
    label is ``reason`` (its values are the bounds): ``sum by (bound)`` returns one
    unlabelled series."""
    labels = _declared_labels()
    phrase = re.compile(r"`?(toolwatch_[a-z_]+)`? by `?(\w+)")
    texts = [RULES.read_text(encoding="utf-8"), (DEPLOY / "README.md").read_text(encoding="utf-8")]
    phrases = [found for text in texts for found in phrase.findall(" ".join(text.split()))]
    assert phrases
    for metric, label in phrases:
        assert metric in labels, f"{metric} is not exposed"
        assert label in labels[metric], f"{metric} has no label {label}: {sorted(labels[metric])}"


# --- metric names ---------------------------------------------------------------------------


def test_rules_and_dashboard_name_only_exposed_metrics() -> None:
    families = _exposed_families()
    known = _sample_names(families)
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    queries = [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    exprs = [rule["expr"] for rule in _rules()] + _dashboard_exprs() + queries
    used = {name for expr in exprs for name in METRIC_NAME.findall(expr)}
    assert used, "no toolwatch metric found in the expressions"
    assert used <= known, f"not exposed by toolwatch: {sorted(used - known)}"


def test_the_sink_exposes_every_documented_metric() -> None:
    families = _exposed_families()
    missing = {n: k for n, k in DOCUMENTED_METRICS.items() if families.get(n) != k}
    assert not missing, f"documented but not exposed with this type: {missing}"


def test_recording_rules_used_are_defined() -> None:
    defined = {rule["record"] for rule in _rules() if "record" in rule}
    used = {name for rule in _rules() for name in RECORDING_RULE_NAME.findall(rule["expr"])}
    assert used and used <= defined


def test_dashboard_shows_every_documented_metric() -> None:
    used = {name for expr in _dashboard_exprs() for name in METRIC_NAME.findall(expr)}
    shown = {re.sub(r"_(bucket|sum|count)$", "", name) for name in used}
    assert shown >= set(DOCUMENTED_METRICS), sorted(set(DOCUMENTED_METRICS) - shown)


def test_dashboard_is_portable_and_filterable() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert dashboard["schemaVersion"] == 39 and dashboard["uid"] == "toolwatch"
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert {variables["agent"]["type"], variables["tool"]["type"]} == {"query"}
    # namespace: the regression alerts' grouping, which their links select. All is `.*`,
    # which matches a series without the label too (toolwatch outside Kubernetes).
    namespace = variables["namespace"]
    assert namespace["type"] == "query" and namespace["multi"] and namespace["includeAll"]
    assert namespace["allValue"] == ".*" and namespace["current"]["value"] == ["$__all"]
    # Listed (and so refreshed) before the agent and tool lists that are filtered by it.
    order = [v["name"] for v in dashboard["templating"]["list"]]
    assert order.index("namespace") < order.index("agent") < order.index("tool")
    for name in ("agent", "tool"):
        assert 'namespace=~"$namespace"' in variables[name]["definition"], name
    panels = [p for p in _panels(dashboard) if p["type"] != "row"]
    assert len({p["id"] for p in _panels(dashboard)}) == len(list(_panels(dashboard)))
    for panel in panels:
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
        assert all(t["datasource"]["uid"] == "${DS_PROMETHEUS}" for t in panel["targets"])
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]


# --- collector configurations ---------------------------------------------------------------


def _check_pipeline_references(config: dict[str, Any]) -> dict[str, Any]:
    pipeline: dict[str, Any] = config["service"]["pipelines"]["traces"]
    assert pipeline["receivers"] == ["otlp"]
    assert pipeline["processors"][0] == "memory_limiter" and "batch" in pipeline["processors"]
    for kind in ("receivers", "processors", "exporters"):
        assert set(pipeline[kind]) <= set(config[kind]), kind
    assert set(config["service"].get("extensions", [])) <= set(config.get("extensions", {}))
    protocols = config["receivers"]["otlp"]["protocols"]
    assert protocols["grpc"]["endpoint"] == "0.0.0.0:4317"
    assert protocols["http"]["endpoint"] == "0.0.0.0:4318"
    assert "otlp/backend" in pipeline["exporters"]
    return pipeline


def test_sidecar_collector_fans_out_to_backend_and_toolwatch() -> None:
    config = _yaml(COLLECTOR)
    pipeline = _check_pipeline_references(config)
    assert "otlp/toolwatch" in pipeline["exporters"]
    exporter = config["exporters"]["otlp/toolwatch"]
    assert exporter["tls"]["insecure"] is True
    assert exporter["sending_queue"]["enabled"] and exporter["retry_on_failure"]["enabled"]


def test_sidecar_collector_sends_where_toolwatch_is_told_to_listen() -> None:
    endpoint = _yaml(COLLECTOR)["exporters"]["otlp/toolwatch"]["endpoint"]
    host, _, port = endpoint.rpartition(":")
    assert host == "127.0.0.1"
    if endpoint != DEFAULT_GRPC_LISTEN:
        # The collector owns 4317 here, so toolwatch must be started on the documented port.
        assert port != "4317"
        flag = f"--grpc-listen {endpoint}"
        assert flag in COLLECTOR.read_text(encoding="utf-8")
        assert flag in (DEPLOY / "README.md").read_text(encoding="utf-8")


def test_gateway_collector_balances_by_trace_id_over_the_headless_service() -> None:
    config = _yaml(GATEWAY_COLLECTOR)
    pipeline = _check_pipeline_references(config)
    assert "loadbalancing" in pipeline["exporters"]
    balancer = config["exporters"]["loadbalancing"]
    assert balancer["routing_key"] == "traceID"
    assert balancer["protocol"]["otlp"]["tls"]["insecure"] is True
    resolver = balancer["resolver"]["k8s"]
    (service,) = [d for d in _documents(GATEWAY) if d["metadata"]["name"] == "toolwatch-headless"]
    name, _, namespace = resolver["service"].partition(".")
    assert (name, namespace) == (service["metadata"]["name"], service["metadata"]["namespace"])
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    grpc_listen = _flag(_toolwatch_container(_workloads(GATEWAY)[0]), "--grpc-listen")
    assert resolver["ports"] == [ports["otlp-grpc"]] == [_port(grpc_listen or "")]


# A request over ingest.max_request_bytes is lost: over gRPC, refused RESOURCE_EXHAUSTED,
# which exporters do not retry. A Collector's batch processor (0.120, the version pinned)
# and an SDK's batch span processor bound a batch's spans, not its bytes; the captured
# instrumentation spans carry toy prompts, and real prompts and histories make model spans
# several times larger: a batch must fit spans this many times the largest captured one.
_SPAN_MARGIN = 3


def _largest_captured_span() -> tuple[str, float]:
    """The fixture request (tests/fixtures/otlp: real instrumentations, captured) with the
    most OTLP/protobuf bytes per span, and that size."""
    sizes: dict[str, float] = {}
    for path in sorted((ROOT / "tests" / "fixtures" / "otlp").glob("*.json")):
        if path.name.endswith(".expected.json"):
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            request = json_format.Parse(line, ExportTraceServiceRequest())
            spans = sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
            if spans:
                sizes[path.name] = max(sizes.get(path.name, 0.0), request.ByteSize() / spans)
    largest = max(sizes, key=sizes.__getitem__)
    return largest, sizes[largest]


def _fits(spans: int, cap: int, what: str) -> None:
    name, size = _largest_captured_span()
    assert size > 8000, name  # the captures still hold model spans with their prompts
    needed = spans * size * _SPAN_MARGIN
    assert needed <= cap, (
        f"{what}: {spans} spans {_SPAN_MARGIN} times the size of {name}'s ({size:.0f} B) make"
        f" {needed / 2**20:.1f} MiB, over ingest.max_request_bytes ({cap / 2**20:.0f} MiB)"
    )


@pytest.mark.parametrize(
    ("collector", "manifest"),
    [(COLLECTOR, SIDECAR), (GATEWAY_COLLECTOR, GATEWAY)],
    ids=["otel-collector.yaml to the sidecar", "gateway collector to the gateway"],
)
def test_collector_batches_fit_the_toolwatch_they_send_to(
    collector: Path, manifest: Path, tmp_path: Path
) -> None:
    """otel-collector.yaml goes with the sidecar (its header: "run a collector container
    with otel-collector.yaml in the pod"); the gateway Collector sends to the gateway."""
    batch = _yaml(collector)["processors"]["batch"]
    config, _ = _deployed(manifest, tmp_path)
    assert batch["send_batch_size"] <= batch["send_batch_max_size"]  # else it will not start
    _fits(batch["send_batch_max_size"], config.ingest.max_request_bytes, collector.name)


def test_sidecar_agent_batches_fit_toolwatch(tmp_path: Path) -> None:
    """The agent exports straight to the sidecar: its SDK's batches (512 spans by default)."""
    config, workload = _deployed(SIDECAR, tmp_path)
    (agent,) = workload["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in agent["env"]}
    spans = int(env.get("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512))
    _fits(spans, config.ingest.max_request_bytes, "the sidecar's agent")


# --- Kubernetes manifests -------------------------------------------------------------------


@pytest.mark.parametrize("path", [SIDECAR, GATEWAY, MONITORING], ids=lambda p: p.name)
def test_manifests_parse_into_named_objects(path: Path) -> None:
    documents = _documents(path)
    assert documents
    for doc in documents:
        assert doc["apiVersion"] and doc["kind"] and doc["metadata"]["name"]


@pytest.mark.parametrize("path", [SIDECAR, GATEWAY], ids=lambda p: p.name)
def test_containers_are_non_root_read_only_and_bounded(path: Path) -> None:
    for workload in _workloads(path):
        pod = workload["spec"]["template"]["spec"]
        for container in _all_containers(pod):
            security = container["securityContext"]
            assert pod["securityContext"]["runAsNonRoot"] or security["runAsNonRoot"]
            assert security.get("runAsUser", 1) != 0 and security["readOnlyRootFilesystem"]
            assert security["allowPrivilegeEscalation"] is False
            assert security["capabilities"]["drop"] == ["ALL"]
            for bound in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(container["resources"][bound]), container["name"]


@pytest.mark.parametrize("path", [SIDECAR, GATEWAY], ids=lambda p: p.name)
def test_toolwatch_is_probed_and_scrapable_on_the_metrics_port(path: Path) -> None:
    (workload,) = [w for w in _workloads(path) if _has_toolwatch(w)]
    container = _toolwatch_container(workload)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["metrics"] == DEFAULT_METRICS_PORT
    assert _flag(container, "--metrics-listen") == f"0.0.0.0:{DEFAULT_METRICS_PORT}"
    for probe, path_ in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"] == {"path": path_, "port": "metrics"}
    assert _flag(container, "--config") == "/etc/toolwatch/toolwatch.yaml"
    assert any(m["mountPath"] == "/etc/toolwatch" for m in container["volumeMounts"])


def _has_toolwatch(workload: dict[str, Any]) -> bool:
    pod = workload["spec"]["template"]["spec"]
    return any(c["name"] == "toolwatch" for c in _all_containers(pod))


def _deployed(path: Path, tmp_path: Path) -> tuple[Any, dict[str, Any]]:
    """The manifest's toolwatch configuration, loaded as toolwatch loads it, and the
    workload that runs toolwatch."""
    target = tmp_path / "toolwatch.yaml"
    target.write_text(_toolwatch_config_map(path), encoding="utf-8")
    (workload,) = [w for w in _workloads(path) if _has_toolwatch(w)]
    return load_config(target), workload


@pytest.mark.parametrize("path", [SIDECAR, GATEWAY], ids=lambda p: p.name)
def test_toolwatch_config_map_is_a_valid_configuration(path: Path, tmp_path: Path) -> None:
    config, workload = _deployed(path, tmp_path)
    pod = workload["spec"]["template"]["spec"]
    pre_stop = _toolwatch_container(workload).get("lifecycle", {}).get("preStop", {})
    pause = int(pre_stop.get("exec", {}).get("command", ["sleep", "0"])[-1])
    # The pod's grace must cover the preStop pause, toolwatch's own drain and its wait for a
    # last scrape, which must last a scrape interval.
    linger = config.shutdown_metrics_linger_seconds
    assert linger >= _scrape_interval_seconds()
    assert pod["terminationGracePeriodSeconds"] > pause + config.shutdown_grace_seconds + linger


# docs/deployment.md "Memory", the sum the layouts are sized by, as it is written there (its
# "\u00d7" as "x"): the process at rest, a buffered span against the buffer's own estimate of it, a
# request body being read against its size (the request slots' and the gRPC health check's read
# turns), the request being decoded, the most a remembered trace id takes (bench.remembered), and
# the references' memories: shadow halves and joined pairs, the conversation scope's conversations.
MEMORY_SUM = (
    "resident ≈ 100 MiB + 1.1 x assembly.max_buffered_bytes",
    "+ 2.5 x (ingest.max_concurrent_requests + 4) x ingest.max_request_bytes",
    "+ 7 x ingest.max_request_bytes (the request being decoded)",
    "+ 33 B x assembly.max_remembered_traces (ids of evaluated traces)",
    "(+ shadow.max_waiting_bytes + 200 B x shadow.max_waiting, when shadow is enabled)",
    "(+ policy.conversation_max_bytes, with policy.verification_scope: conversation)",
)
_RESIDENT_AT_REST = 100 * 2**20
_RESIDENT_PER_BUFFERED_BYTE = 1.1
_RESIDENT_PER_BODY_BYTE = 2.5
_RESIDENT_PER_DECODED_BYTE = 7
_RESIDENT_PER_REMEMBERED_ID = 33


def _shadow_bytes(shadow: ShadowSettings) -> int:
    """The waiting halves' bound and the pairs joined within the timeout (MEMORY_SUM)."""
    assert PAIRED_ENTRY_BYTES == 200  # the sum's `200 B`
    return shadow.max_waiting_bytes + PAIRED_ENTRY_BYTES * shadow.max_waiting


def _memory_limit(quantity: str) -> int:
    number, unit = re.fullmatch(r"(\d+)(Mi|Gi)", quantity).groups()  # type: ignore[union-attr]
    return int(number) * {"Mi": 2**20, "Gi": 2**30}[unit]


def test_the_memory_sum_is_the_documented_one() -> None:
    deployment = (ROOT / "docs" / "deployment.md").read_text(encoding="utf-8")
    memory = deployment.partition("\n## Memory\n")[2].replace("\u00d7", "x")
    written = [line.strip() for line in memory.splitlines()]
    start = written.index(MEMORY_SUM[0])
    assert tuple(written[start : start + len(MEMORY_SUM)]) == MEMORY_SUM
    assert READ_TURNS == 4  # the sum's `+ 4`


def _at_the_bounds(config: Config) -> float:
    """Bytes resident at ``config``'s bounds, by MEMORY_SUM."""
    ingest, assembly, policy = config.ingest, config.assembly, config.policy
    bodies = (ingest.max_concurrent_requests + READ_TURNS) * ingest.max_request_bytes
    return (
        _RESIDENT_AT_REST
        + _RESIDENT_PER_BUFFERED_BYTE * assembly.max_buffered_bytes
        + _RESIDENT_PER_BODY_BYTE * bodies
        + _RESIDENT_PER_DECODED_BYTE * ingest.max_request_bytes
        + _RESIDENT_PER_REMEMBERED_ID * assembly.max_remembered_traces
        + (_shadow_bytes(config.shadow) if config.shadow.enabled else 0)
        + (policy.conversation_max_bytes if policy.verification_scope == "conversation" else 0)
    )


@pytest.mark.parametrize("path", [SIDECAR, GATEWAY], ids=lambda p: p.name)
def test_toolwatch_at_its_bounds_fits_its_memory_limit(path: Path, tmp_path: Path) -> None:
    """By MEMORY_SUM, with a tenth of the limit to spare."""
    config, workload = _deployed(path, tmp_path)
    limit = _memory_limit(_toolwatch_container(workload)["resources"]["limits"]["memory"])
    worst = _at_the_bounds(config)
    assert worst < 0.9 * limit, f"{worst / 2**20:.0f} MiB at the bounds, limit {limit >> 20} MiB"


def _deployment_section(title: str) -> str:
    deployment = (ROOT / "docs" / "deployment.md").read_text(encoding="utf-8")
    return deployment.partition(f"\n## {title}\n")[2].partition("\n## ")[0]


def test_the_memory_sum_of_the_built_in_defaults_is_the_documented_one() -> None:
    """docs/deployment.md, Memory: "With the built-in defaults ... ≈ 1,585 MiB"."""
    worst = _at_the_bounds(Config.model_validate({}))
    memory = " ".join(_deployment_section("Memory").split())
    assert f"≈ {round(worst / 2**20):,} MiB" in memory


def test_the_sizing_examples_fit_the_limits_they_give(tmp_path: Path) -> None:
    """docs/deployment.md, Sizing: each worked example's settings load as toolwatch loads
    them, sum by MEMORY_SUM to the MiB its first line says, and fit the limit it gives with
    a tenth to spare."""
    blocks = re.findall(r"```yaml\n(.*?)```", _deployment_section("Sizing"), re.DOTALL)
    assert len(blocks) == 2  # the sidecar and the gateway
    for n, block in enumerate(blocks):
        head = re.match(r"# \w+: ([\d,]+) MiB at the bounds, limit (\d+(?:Mi|Gi))\n", block)
        assert head is not None, block
        target = tmp_path / f"sizing-{n}.yaml"
        target.write_text(block, encoding="utf-8")
        worst = _at_the_bounds(load_config(target))
        assert round(worst / 2**20) == int(head[1].replace(",", "")), block
        assert worst < 0.9 * _memory_limit(head[2]), block


def test_the_sizing_section_quotes_the_defaults() -> None:
    """docs/deployment.md, Sizing: every "`assembly.name` (default N)" is the default."""
    quoted = re.findall(
        r"`(ingest|assembly)\.(\w+)` \(default ([\d,.]+)\)", _deployment_section("Sizing")
    )
    assert len(quoted) >= 4, quoted
    sections = {"ingest": IngestSettings, "assembly": AssemblySettings}
    for section, name, value in quoted:
        default = sections[section].model_fields[name].default
        assert float(value.replace(",", "")) == default, (section, name, value)


def test_sidecar_agent_exports_to_toolwatch_on_loopback() -> None:
    (workload,) = _workloads(SIDECAR)
    toolwatch = _toolwatch_container(workload)
    assert toolwatch.get("restartPolicy") == "Always"  # a native sidecar: outlives the agent
    grpc_listen = _flag(toolwatch, "--grpc-listen") or DEFAULT_GRPC_LISTEN
    assert grpc_listen.startswith("127.0.0.1:")
    (agent,) = workload["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in agent["env"]}
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == f"http://{grpc_listen}"


def test_gateway_toolwatch_listens_for_the_collectors_behind_a_headless_service() -> None:
    documents = _documents(GATEWAY)
    (service,) = [d for d in documents if d["metadata"]["name"] == "toolwatch-headless"]
    (workload,) = [w for w in _workloads(GATEWAY) if _has_toolwatch(w)]
    assert service["spec"]["clusterIP"] == "None"
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {
        "otlp-grpc": 4317,
        "metrics": DEFAULT_METRICS_PORT,
    }
    pod_labels = workload["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert _flag(_toolwatch_container(workload), "--grpc-listen") == "0.0.0.0:4317"


def test_gateway_toolwatch_admits_only_the_collectors_and_prometheus() -> None:
    """Its listeners have no TLS or tokens there: a network policy keeps other pods out."""
    documents = _documents(GATEWAY)
    (workload,) = [w for w in _workloads(GATEWAY) if _has_toolwatch(w)]
    (collector,) = [w for w in _workloads(GATEWAY) if not _has_toolwatch(w)]
    (policy,) = [d for d in documents if d["kind"] == "NetworkPolicy"]
    pod_labels = workload["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    ports = {p["name"]: p["containerPort"] for p in _toolwatch_container(workload)["ports"]}
    admitted = {}
    for rule in policy["spec"]["ingress"]:
        (source,) = rule["from"]
        for port in rule["ports"]:
            assert port["port"] in ports  # a port the container names
            admitted[port["port"]] = source["podSelector"]["matchLabels"]
    collector_labels = collector["spec"]["template"]["metadata"]["labels"]
    assert admitted["otlp-grpc"].items() <= collector_labels.items()
    assert admitted["metrics"] == {"app.kubernetes.io/name": "prometheus"}
    assert set(admitted) == {"otlp-grpc", "metrics"}


def test_gateway_collector_may_watch_the_endpoints_it_resolves() -> None:
    documents = _documents(GATEWAY)
    (collector,) = [w for w in _workloads(GATEWAY) if not _has_toolwatch(w)]
    account = collector["spec"]["template"]["spec"]["serviceAccountName"]
    bindings = [d for d in documents if d["kind"] == "RoleBinding"]
    roles = {
        b["roleRef"]["name"]
        for b in bindings
        if {"kind": "ServiceAccount", "name": account, "namespace": "toolwatch"} in b["subjects"]
    }
    rules = [
        r
        for d in documents
        if d["kind"] == "Role" and d["metadata"]["name"] in roles
        for r in d["rules"]
    ]
    slices = [r for r in rules if "endpointslices" in r["resources"]]
    assert slices and {"get", "list", "watch"} <= set(slices[0]["verbs"])


# --- embedded copies ------------------------------------------------------------------------


def test_prometheus_rule_equals_the_rules_file() -> None:
    (rule,) = [d for d in _documents(MONITORING) if d["kind"] == "PrometheusRule"]
    assert rule["spec"] == _yaml(RULES)


def test_gateway_config_map_equals_the_collector_file() -> None:
    (config_map,) = [
        d for d in _documents(GATEWAY) if d["metadata"]["name"] == "otel-gateway-config"
    ]
    assert yaml.safe_load(config_map["data"]["gateway.yaml"]) == _yaml(GATEWAY_COLLECTOR)


def test_the_readmes_regeneration_leaves_the_shipped_copies_unchanged(tmp_path: Path) -> None:
    """deploy/README.md's "Keeping the copies in sync" commands, run on the repository as
    shipped, change no byte: a comment that drifted in a copy passes the parsed comparisons
    above, and the commands would then rewrite a manifest marked "do not edit"."""
    section = (DEPLOY / "README.md").read_text(encoding="utf-8")
    section = section.partition("## Keeping the copies in sync")[2]
    commands = re.findall(r"^    (sed .*)$", section, re.MULTILINE)
    assert len(commands) == 4
    for name in ("kubernetes", "prometheus", "collector"):
        shutil.copytree(DEPLOY / name, tmp_path / "deploy" / name)
    for command in commands:
        subprocess.run(["sh", "-c", command], cwd=tmp_path, check=True)
    copies = (MONITORING, GATEWAY)
    changed = [
        copy.name
        for copy in copies
        if (tmp_path / copy.relative_to(ROOT)).read_bytes() != copy.read_bytes()
    ]
    assert changed == [], f"regenerating as deploy/README.md says rewrites {changed}"


def test_monitors_and_prometheus_config_use_the_job_the_rules_assume() -> None:
    (job,) = set(re.findall(r'up\{job="([^"]+)"\}', RULES.read_text(encoding="utf-8")))
    (scrape,) = _yaml(PROMETHEUS_CONFIG)["scrape_configs"]
    assert scrape["job_name"] == job
    assert scrape["static_configs"][0]["targets"] == [f"127.0.0.1:{DEFAULT_METRICS_PORT}"]
    monitors = [d for d in _documents(MONITORING) if d["kind"].endswith("Monitor")]
    # Pods, not a Service: a terminating pod leaves a Service's Endpoints before the scrape
    # that counts its drain.
    assert [d["kind"] for d in monitors] == ["PodMonitor", "PodMonitor"]
    for monitor in monitors:
        endpoints = monitor["spec"]["podMetricsEndpoints"]
        relabel = endpoints[0]["relabelings"]
        assert {"action": "replace", "targetLabel": "job", "replacement": job} in relabel


# --- image ----------------------------------------------------------------------------------


def test_dockerfile_runs_toolwatch_non_root_on_the_ports_it_exposes() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert re.search(r"^FROM python:3\.1[12]-slim", text, re.MULTILINE)
    assert "pip install ." in text
    # The image must carry the compiled OTLP scanner: setup.py builds it, the build checks it.
    assert re.search(r"^COPY .*\bsetup\.py\b", text, re.MULTILINE)
    assert "COMPILED_UNAVAILABLE" in text
    (user,) = re.findall(r"^USER (\S+)$", text, re.MULTILINE)
    assert user.split(":")[0].isdigit() and int(user.split(":")[0]) != 0
    exposed = {int(p) for p in re.findall(r"^EXPOSE (.+)$", text, re.MULTILINE)[0].split()}
    (entrypoint,) = re.findall(r"^ENTRYPOINT (.+)$", text, re.MULTILINE)
    (command,) = re.findall(r"^CMD (.+)$", text, re.MULTILINE)
    assert json.loads(entrypoint) == ["toolwatch"]
    args = json.loads(command)
    listens = {_port(args[args.index(f) + 1]) for f in args if f.endswith("-listen")}
    assert args[0] == "serve" and listens == exposed == {4317, 4318, DEFAULT_METRICS_PORT}
    # Plain HTTP or TLS, whichever the listener speaks (test_security_tls runs it against both).
    assert f'"toolwatch.healthcheck", "127.0.0.1:{DEFAULT_METRICS_PORT}"' in text
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    assert {".git", ".venv"} <= set(ignored)


def _commented_kubernetes_block() -> dict[str, Any]:
    """prometheus.yml's commented-out Kubernetes block (Prometheus without the Operator)."""
    lines = PROMETHEUS_CONFIG.read_text(encoding="utf-8").splitlines()
    start = lines.index("    # kubernetes_sd_configs:")
    block = []
    for line in lines[start:]:
        if not line.startswith("    # "):
            break
        block.append(line.removeprefix("    # "))
    loaded: dict[str, Any] = yaml.safe_load("\n".join(block))
    return loaded


def test_the_plain_prometheus_kubernetes_block_scrapes_pods_as_the_pod_monitors_do() -> None:
    """A terminating pod leaves a Service's endpoints at once, and Prometheus' targets with
    it, before the scrape that reads what its drain evaluated: the block shipped for plain
    Prometheus kept targets by Service (``role: endpoints``) and so lost every drain's
    findings. It discovers the gateway's pods by their labels, as the PodMonitor does."""
    block = _commented_kubernetes_block()
    (discovery,) = block["kubernetes_sd_configs"]
    assert discovery["role"] == "pod"
    relabel = block["relabel_configs"]
    kept = {r["source_labels"][0]: r["regex"] for r in relabel if r.get("action") == "keep"}
    (gateway,) = [
        d
        for d in _documents(GATEWAY)
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "toolwatch"
    ]
    labels = gateway["spec"]["template"]["metadata"]["labels"]
    prefix = "__meta_kubernetes_pod_label_"
    for source, regex in kept.items():
        if source.startswith(prefix):
            name = next(
                k for k in labels if re.sub(r"[^a-zA-Z0-9_]", "_", k) == source[len(prefix) :]
            )
            assert labels[name] == regex
    assert kept["__meta_kubernetes_pod_container_port_name"] == "metrics"
    assert not any("service" in source for source in kept)
    assert any(r.get("target_label") == "namespace" for r in relabel)


def test_the_readmes_sidecar_command_beside_a_collector_keeps_metrics_reachable(
    tmp_path: Path,
) -> None:
    """deploy/README.md gives the sidecar's whole command line for a pod that runs a
    Collector too. Without ``--metrics-listen 0.0.0.0:9464`` the metrics listener fell back
    to loopback, where kubelet's probes (the pod's address, port ``metrics``) never reach
    it: the liveness probe restarted toolwatch forever."""
    text = (DEPLOY / "README.md").read_text(encoding="utf-8")
    (block,) = re.findall(
        r"^    (toolwatch serve --config /etc/toolwatch/toolwatch\.yaml.*?)\n\n", text, re.M | re.S
    )
    command = shlex.split(block.replace("\\\n", " "))
    documents = _documents(SIDECAR)
    (config_map,) = [d for d in documents if d["kind"] == "ConfigMap"]
    (deployment,) = [d for d in documents if d["kind"] == "Deployment"]
    spec = deployment["spec"]["template"]["spec"]
    (container,) = [c for c in spec["initContainers"] if c["name"] == "toolwatch"]
    mounted = tmp_path / "toolwatch.yaml"  # the ConfigMap at /etc/toolwatch
    mounted.write_text(config_map["data"]["toolwatch.yaml"], encoding="utf-8")
    assert command[:2] == ["toolwatch", "serve"]
    args = [str(mounted) if a == "/etc/toolwatch/toolwatch.yaml" else a for a in command[1:]]
    config = cli_sources.read_sources(cli._parser().parse_args(args)).load()
    probed = {container[p]["httpGet"]["port"] for p in ("livenessProbe", "readinessProbe")}
    assert probed == {"metrics"}
    assert config.listen.grpc == "127.0.0.1:14317"  # moved for the Collector
    metrics = container["args"][container["args"].index("--metrics-listen") + 1]
    assert config.listen.metrics == metrics


def _assert_evaluates(
    tmp_path: Path, series: list[dict[str, str]], expr: str, expected: float
) -> None:
    """``expr`` over ``series`` (one a minute) is ``expected`` at 5m, by ``promtool``."""
    test = {
        "interval": "1m",
        "input_series": series,
        "promql_expr_test": [
            {"expr": expr, "eval_time": "5m", "exp_samples": [{"labels": "{}", "value": expected}]}
        ],
    }
    path = tmp_path / "dashboard.test.yaml"
    path.write_text(yaml.safe_dump({"rule_files": [], "tests": [test]}, width=10_000))
    result = _promtool("test", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
