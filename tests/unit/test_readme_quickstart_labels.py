"""The README quick start still shows ``toolwatch_regressions_total`` without ``traffic``.

User-visible harm (low): the first thing a new user compares their output with, and copies
selectors from, shows a label set the server no longer exposes; a selector or recording
rule written from it (``sum by (agent, category, ...)`` expecting five labels, or an
exact-label-set match in a test harness) disagrees with the real exposition.
"""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from tests import factories
from toolwatch.model import Category, Severity, Traffic
from toolwatch.sinks.prometheus import PrometheusMetrics

README = Path(__file__).resolve().parents[2] / "README.md"


def _labels(line: str) -> set[str]:
    return set(re.findall(r'(\w+)="', line))


def test_the_quickstart_exposition_line_has_the_labels_the_server_exposes() -> None:
    (shown,) = [
        line
        for line in README.read_text(encoding="utf-8").splitlines()
        if line.startswith("# toolwatch_regressions_total{")
    ]
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    finding = factories.finding(
        category=Category.MISSING_VERIFICATION_STEP,
        severity=Severity.HIGH,
        evaluator="safety",
        agent="refund-bot",
        tool="issue_refund",
    )
    metrics.finding(finding, None, Traffic.LIVE)
    (exposed,) = [
        line
        for line in generate_latest(registry).decode().splitlines()
        if line.startswith("toolwatch_regressions_total{")
    ]
    assert _labels(shown.removeprefix("# ")) == _labels(exposed), (shown, exposed)
