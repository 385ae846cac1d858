"""The README's quick start shows what the server writes: the labels of
``toolwatch_regressions_total``, the keys of a findings-log line and the fields the example
policy shows, so that selectors and parsers written from it match the real output."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry, generate_latest

from tests import factories
from toolwatch.model import Category, Severity, Traffic
from toolwatch.sinks.findings import Redaction, finding_record
from toolwatch.sinks.prometheus import PrometheusMetrics

README = Path(__file__).resolve().parents[2] / "README.md"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "toolwatch.yaml"


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


def test_the_quickstart_findings_line_has_the_keys_the_log_writes() -> None:
    readme = README.read_text(encoding="utf-8")
    start = readme.index('{"category":"MISSING_VERIFICATION_STEP"')
    shown = json.loads(readme[start : readme.index("\n```", start)].replace("\n", ""))
    record = finding_record(
        factories.tool_trace(), factories.finding(), Redaction(), 0, Traffic.LIVE
    )
    assert list(shown) == list(record)


def test_the_quickstart_names_the_fields_the_example_policy_shows() -> None:
    """A ``show_fields`` entry without a tool (``order_id``) would show lookup_order's too."""
    text = " ".join(README.read_text(encoding="utf-8").split())
    (said,) = re.findall(
        r"The example policy lets findings show .*?`output\.show_fields: (\[.*?\])`", text
    )
    example = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    assert yaml.safe_load(said) == example["output"]["show_fields"]
