"""The dashboard's rate panels lose what happened between their points on wide time ranges.

The branch makes "Regressions by category", "Regressions by agent" and "Agent runs by
outcome" read the 10m recording rules first (``recorded / 10 or 60 * rate(...)``). A
recording rule's value at a point is the count of the 10m before it, whatever the panel's
step: once Grafana's step is longer than 10m (a 7-day range and wider, at the usual
~1000-point panel widths), every point covers 10m of its step and the rest of the step reads
nothing. On main the panels read ``rate(...[$__rate_interval])``, which Grafana sizes to the
step plus a scrape interval, so every rise lands in some point. And because the recorded
series is there (at 0), the ``or`` never falls back to rate().

Real promtool evaluates each panel at one point of a 30-day view (step 30m, so
``$__rate_interval`` 30m15s, rounded to 31m): a finding, or a timed-out run, of an existing
series 15 minutes before the point must read more than 0 there, as it does on main.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.prometheus_server import promtool_test_rules, requires_promtool

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "deploy" / "grafana" / "toolwatch.json"
RULES = ROOT / "deploy" / "prometheus" / "toolwatch-rules.yaml"

# A 30-day view: Grafana's step ~30m, $__rate_interval = step + scrape interval.
WIDE = {
    "$__rate_interval": "31m",
    "$namespace": ".*",
    "$agent": ".*",
    "$tool": ".*",
    "${traffic:pipe}": "live|",
}

SCRAPE = 'agent="support",traffic="live",job="toolwatch",instance="10.0.0.1:9464"'
FINDING = f'category="INVARIANT_VIOLATION",severity="high",evaluator="invariants",tool="t",{SCRAPE}'
RUNS = f'outcome="timed_out",reference="none",{SCRAPE}'
# Series created long before (created 0), 5 until 45m, 6 from 45m: one finding (one
# timed-out run) at 45m. Samples every 15s up to 60m.
SERIES = [
    {"series": f"toolwatch_regressions_total{{{FINDING}}}", "values": "5x179 6x60"},
    {"series": f"toolwatch_regressions_created{{{FINDING}}}", "values": "0x240"},
    {"series": f"toolwatch_tool_traces_total{{{RUNS}}}", "values": "5x179 6x60"},
    {"series": f"toolwatch_tool_traces_created{{{RUNS}}}", "values": "0x240"},
]


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def _expr(title: str) -> str:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    (panel,) = [p for p in _panels(dashboard["panels"]) if p.get("title") == title]
    (target,) = panel["targets"]
    expr: str = target["expr"]
    for variable, value in WIDE.items():
        expr = expr.replace(variable, value)
    return expr


@requires_promtool
@pytest.mark.prometheus
@pytest.mark.parametrize(
    ("title", "labels"),
    [
        ("Regressions by category", '{category="INVARIANT_VIOLATION"}'),
        ("Regressions by agent", '{agent="support"}'),
        ("Agent runs by outcome", '{outcome="timed_out"}'),
    ],
)
def test_a_rise_between_two_points_of_a_wide_range_shows(
    tmp_path: Path, title: str, labels: str
) -> None:
    """A rise 15m before a point of a 30-day view (step 30m) reads 0 at that point and at
    the one before, so the panel never shows it; it should read more than 0 at the point
    after it, as rate() over $__rate_interval did on main."""
    test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "15s",
                "input_series": SERIES,
                "promql_expr_test": [
                    {
                        "expr": f"({_expr(title)}) > bool 0",
                        "eval_time": "60m",
                        "exp_samples": [{"labels": labels, "value": 1}],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "panel.test.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False), encoding="utf-8")
    assert promtool_test_rules(path) == ""
