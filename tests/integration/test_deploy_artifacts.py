"""The shipped Prometheus artifacts against the real tools: rules and their unit tests checked by
promtool, alerts routed and documented, the dashboard's expressions valid PromQL over exposed
metrics only, its variables and links."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest

from tests.integration.deploy_support import (
    DASHBOARD,
    DEPLOY,
    GRAFANA_VARIABLES,
    PROMETHEUS_CONFIG,
    ROOT,
    RULES,
    SERIES_SELECTOR,
    dashboard_panels,
    declared_labels,
    every_rule,
    metrics_sink,
    read_yaml,
)
from toolwatch.metrics import REQUEST_OUTCOMES

RULE_TESTS = DEPLOY / "prometheus" / "toolwatch-rules.test.yaml"

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
# A metric name, not part of a recording rule's level:metric:operation name.
METRIC_NAME = re.compile(r"(?<![\w:])toolwatch_[a-z_]+(?![\w:])")
RECORDING_RULE_NAME = re.compile(r"\b[a-z_]+:toolwatch_[a-z_]+:[a-z0-9_]+\b")

requires_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool is not on PATH (CI installs it: apt-get install -y prometheus)",
)


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["promtool", *args], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )


def _alerts() -> list[dict[str, Any]]:
    return [rule for rule in every_rule() if "alert" in rule]


def _dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return [t["expr"] for p in dashboard_panels(dashboard) for t in p.get("targets", ())]


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


def _exposed_families() -> dict[str, str]:
    """``# TYPE`` lines of the real sink's exposition."""
    text = generate_latest(metrics_sink()[0]).decode()
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))


# --- promtool: rules, their unit tests, the example Prometheus config -----------------------


@pytest.mark.prometheus
@requires_promtool
def test_promtool_checks_the_rules() -> None:
    result = _promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(every_rule())} rules found" in result.stdout


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
    tests = read_yaml(RULE_TESTS)["tests"]
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
    (counted,) = [r for r in every_rule() if r.get("record", "").endswith(":increase5m")]
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
    rules = read_yaml(RULES)
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
    labels = declared_labels()
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
    exprs = [rule["expr"] for rule in every_rule()] + _dashboard_exprs() + queries
    used = {name for expr in exprs for name in METRIC_NAME.findall(expr)}
    assert used, "no toolwatch metric found in the expressions"
    assert used <= known, f"not exposed by toolwatch: {sorted(used - known)}"


def test_the_sink_exposes_every_documented_metric() -> None:
    families = _exposed_families()
    missing = {n: k for n, k in DOCUMENTED_METRICS.items() if families.get(n) != k}
    assert not missing, f"documented but not exposed with this type: {missing}"


def test_recording_rules_used_are_defined() -> None:
    defined = {rule["record"] for rule in every_rule() if "record" in rule}
    used = {name for rule in every_rule() for name in RECORDING_RULE_NAME.findall(rule["expr"])}
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
    panels = [p for p in dashboard_panels(dashboard) if p["type"] != "row"]
    assert len({p["id"] for p in dashboard_panels(dashboard)}) == len(
        list(dashboard_panels(dashboard))
    )
    for panel in panels:
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
        assert all(t["datasource"]["uid"] == "${DS_PROMETHEUS}" for t in panel["targets"])
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]


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
