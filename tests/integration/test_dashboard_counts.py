"""The dashboard's finding counts count a series across a toolwatch restart as the rules do.

Was: "Findings that page", "Critical and high findings" and the "Findings that page, by agent
and tool" table counted a series by two cases (created in the range: its whole value, else
increase()), which after a restart counts the last process's findings alone: an on-call
opening the dashboard from a page reading "3 finding(s)" saw 1. Now: they count each series
by the three cases of the header of ``deploy/prometheus/toolwatch-rules.yaml``, as the alerts
that link to them do.

The rate panels ("Agent runs / s", "Agent runs by outcome", "Regressions by category" and
by agent) read rate(), which misses a new series' first value: a burst of timed-out runs or
a new agent's first finding read 0. Now they read the rules' 10m recording rules, with
rate() as the fallback where the rules are not loaded, each recorded count averaged over the
panel's interval: read at each point alone, a 10m count missed what happened between two
points of a range whose step is over 10m.

Real promtool evaluates each panel's expression (Grafana's variables replaced as
``tests/integration/test_deploy_artifacts.py`` does, with a 5m range).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.prometheus_server import promtool_test_rules, requires_promtool

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "toolwatch.json"
RULES = ROOT / "deploy" / "prometheus" / "toolwatch-rules.yaml"

VARIABLES = {
    "$__rate_interval": "5m",
    "$__range_s": "300",
    "$__range": "5m",
    "$namespace": ".*",
    "$agent": ".*",
    "$tool": ".*",
    "${traffic:pipe}": "live|",
}

# The audit's restart (and the branch's own page test): support's dangerous call at 1m and
# 2m, toolwatch restarted at 3m, a third at 4m. The page reads 3 findings in the last 5m.
BASE = (
    'category="DANGEROUS_ACTION_DRIFT",severity="critical",evaluator="safety",agent="support",'
    'tool="issue_refund",traffic="live",job="toolwatch",instance="10.0.0.1:9464"'
)
RESTART = [
    {"series": f"toolwatch_regressions_total{{{BASE}}}", "values": "_x3 1x3 2x3 stale _x2 1x28"},
    {"series": f"toolwatch_regressions_created{{{BASE}}}", "values": "_x3 60x7 stale _x2 240x28"},
]


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def _expr(title: str, variables: dict[str, str] = VARIABLES) -> str:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    (panel,) = [p for p in _panels(dashboard["panels"]) if p.get("title") == title]
    (target,) = panel["targets"]
    expr: str = target["expr"]
    for variable, value in variables.items():
        expr = expr.replace(variable, value)
    return expr


# A new series each, created at 2m with their first values: 6 runs timed out at once, and
# agent "new"'s first finding.
NEW = 'agent="new",traffic="live",job="toolwatch",instance="10.0.0.1:9464"'
FINDING = f'category="DANGEROUS_ACTION_DRIFT",severity="critical",evaluator="safety",tool="t",{NEW}'
NEW_SERIES = [
    {
        "series": f'toolwatch_tool_traces_total{{outcome="timed_out",reference="none",{NEW}}}',
        "values": "_x8 6x12",
    },
    {
        "series": f'toolwatch_tool_traces_created{{outcome="timed_out",reference="none",{NEW}}}',
        "values": "_x8 120x12",
    },
    {"series": f"toolwatch_regressions_total{{{FINDING}}}", "values": "_x8 1x12"},
    {"series": f"toolwatch_regressions_created{{{FINDING}}}", "values": "_x8 120x12"},
]


def _evaluates(
    tmp_path: Path,
    expr: str,
    labels: str,
    value: float,
    series: list[dict[str, str]] = RESTART,
    rules: Path | None = None,
) -> str:
    """promtool's failure report ('' when it passes) for ``round(expr)`` at 5m over
    ``series``, with ``rules`` loaded (none by default)."""
    if rules is None:
        rules = tmp_path / "empty.rules.yaml"
        rules.write_text("groups: []\n", encoding="utf-8")
    test = {
        "rule_files": [str(rules)],
        "evaluation_interval": "15s",
        "tests": [
            {
                "interval": "15s",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": f"round({expr})",
                        "eval_time": "5m",
                        "exp_samples": [{"labels": labels, "value": value}],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "panel.test.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False), encoding="utf-8")
    return promtool_test_rules(path)


@pytest.mark.prometheus
@requires_promtool
@pytest.mark.parametrize("title", ["Findings that page", "Critical and high findings"])
def test_finding_totals_count_findings_before_a_toolwatch_restart(
    tmp_path: Path, title: str
) -> None:
    """Two findings before the restart and one after read 3, as ToolwatchDangerousActionDrift
    (which links to this dashboard) reads them for the same 5m."""
    assert _evaluates(tmp_path, _expr(title), "{}", 3) == ""


@pytest.mark.prometheus
@requires_promtool
def test_the_findings_table_counts_findings_before_a_toolwatch_restart(tmp_path: Path) -> None:
    """The table the page's dashboard link filters reads 3 for support/issue_refund, as the
    page does."""
    labels = (
        '{agent="support",tool="issue_refund",category="DANGEROUS_ACTION_DRIFT",evaluator="safety"}'
    )
    assert _evaluates(tmp_path, _expr("Findings that page, by agent and tool"), labels, 3) == ""


@pytest.mark.prometheus
@requires_promtool
@pytest.mark.parametrize(
    ("title", "scale", "labels", "value"),
    [
        ("Agent runs / s", "600 *", "{}", 6),
        ("Agent runs by outcome", "600 *", '{outcome="timed_out"}', 6),
        ("Regressions by category", "10 *", '{category="DANGEROUS_ACTION_DRIFT"}', 1),
        ("Regressions by agent", "10 *", '{agent="new"}', 1),
    ],
)
def test_rate_panels_count_a_new_series_first_value(
    tmp_path: Path, title: str, scale: str, labels: str, value: float
) -> None:
    """With the rules loaded, 6 runs that create their series read 6 in the 10m (per second
    times 600), and a new agent's first finding 1 (per minute times 10)."""
    expr = f"{scale} ({_expr(title)})"
    assert _evaluates(tmp_path, expr, labels, value, NEW_SERIES, RULES) == ""


@pytest.mark.prometheus
@requires_promtool
def test_rate_panels_fall_back_to_rate_without_the_rules(tmp_path: Path) -> None:
    """Without the rules the panel still draws, from rate(), which misses the 6 first runs."""
    expr = f"600 * ({_expr('Agent runs by outcome')})"
    assert _evaluates(tmp_path, expr, '{outcome="timed_out"}', 0, NEW_SERIES) == ""


# A 30-day view: Grafana's step ~30m, $__rate_interval = step + scrape interval (rounded).
WIDE = {**VARIABLES, "$__rate_interval": "31m"}
SCRAPE = 'agent="support",traffic="live",job="toolwatch",instance="10.0.0.1:9464"'
OLD_FINDING = (
    f'category="INVARIANT_VIOLATION",severity="high",evaluator="invariants",tool="t",{SCRAPE}'
)
OLD_RUNS = f'outcome="timed_out",reference="none",{SCRAPE}'
# Series created long before (created 0): 5 until 45m, 6 from 45m, one finding (one timed-out
# run) at 45m. Samples every 15s up to 60m.
OLD_SERIES = [
    {"series": f"toolwatch_regressions_total{{{OLD_FINDING}}}", "values": "5x179 6x60"},
    {"series": f"toolwatch_regressions_created{{{OLD_FINDING}}}", "values": "0x240"},
    {"series": f"toolwatch_tool_traces_total{{{OLD_RUNS}}}", "values": "5x179 6x60"},
    {"series": f"toolwatch_tool_traces_created{{{OLD_RUNS}}}", "values": "0x240"},
]


def _at_60m(tmp_path: Path, expr: str, labels: str, value: float) -> str:
    """promtool's failure report ('' when it passes) for ``round(expr)`` at 60m over
    OLD_SERIES, with the rules loaded and evaluated every minute (Prometheus's default)."""
    test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "15s",
                "input_series": OLD_SERIES,
                "promql_expr_test": [
                    {
                        "expr": f"round({expr}, 0.1)",
                        "eval_time": "60m",
                        "exp_samples": [{"labels": labels, "value": value}],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "wide.test.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False), encoding="utf-8")
    return promtool_test_rules(path)


@pytest.mark.prometheus
@requires_promtool
@pytest.mark.parametrize(
    ("title", "scale", "labels"),
    [
        ("Agent runs / s", "1860 *", "{}"),
        ("Agent runs by outcome", "1860 *", '{outcome="timed_out"}'),
        ("Regressions by category", "31 *", '{category="INVARIANT_VIOLATION"}'),
        ("Regressions by agent", "31 *", '{agent="support"}'),
    ],
)
def test_rate_panels_show_a_rise_between_two_points_of_a_wide_range(
    tmp_path: Path, title: str, scale: str, labels: str
) -> None:
    """A 30-day view (step 30m, $__rate_interval 31m): one finding (one run) of an existing
    series 15m before a point reads as the rate of 1 over the point's 31m (times 31m: 1).

    Was: the panels read the 10m count at each point alone: the rise, 15m before the point
    and after the one before, read 0 at both, and the panel never showed it (rate() over
    $__rate_interval, before the recording rules, did). Now: the 10m count averaged over the
    interval is the rise's 10m in 31m, 600/1860 of a run per 600 s: 1 over the 31m."""
    expr = f"{scale} ({_expr(title, WIDE)})"
    assert _at_60m(tmp_path, expr, labels, 1) == ""
