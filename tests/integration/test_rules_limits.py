"""The counting limits the rules' header documents, as expected failures.

Was: ``review_tests/`` held these as failing promtool cases of the alerts branch. Now: the
header of ``deploy/prometheus/toolwatch-rules.yaml`` documents both limits, and
``toolwatch-rules.test.yaml`` pins what the rules read today; each test here runs that case
with the count the rules should read instead, and is expected to fail (strictly: a rules
change that fixes a limit turns its test into an unexpected pass, to update both places).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.prometheus_server import promtool_test_rules, requires_promtool

PROMETHEUS = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
FIRST_VALUE = (
    "a restarted series whose first process started above its successor reads the "
    "successor's first value twice"
)
SCRAPE_GAP = "findings made during a scrape gap longer than the window do not page"


def _promtool_case(tmp_path: Path, name: str, expected: list[list[dict[str, Any]]]) -> str:
    """promtool's failure report ('' when it passes) for the case ``name`` of
    toolwatch-rules.test.yaml, its promql_expr_test expectations replaced, in order, by
    ``expected``."""
    path = PROMETHEUS / "toolwatch-rules.test.yaml"
    document: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    document["rule_files"] = [str(PROMETHEUS / "toolwatch-rules.yaml")]
    (case,) = [case for case in document["tests"] if case["name"] == name]
    for test, samples in zip(case["promql_expr_test"], expected, strict=True):
        test["exp_samples"] = samples
    document["tests"] = [case]
    written = tmp_path / "case.test.yaml"
    written.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return promtool_test_rules(written)


@pytest.mark.prometheus
@requires_promtool
@pytest.mark.xfail(
    strict=True,
    reason="min_over_time reads the smallest value of every process in the window, not the "
    "first process's first value (the rules' header, What stays uncounted)",
)
def test_a_restarted_series_counts_its_first_process_s_first_value(tmp_path: Path) -> None:
    """6 timed-out runs, then a restart and 1 more, are 7 runs; 3 findings, then 1, are 4."""
    expected = [
        [{"labels": '{agent="burst"}', "value": 7}],
        [
            {
                "labels": '{agent="refund",category="DANGEROUS_ACTION_DRIFT",tool="issue_refund"}',
                "value": 4,
            }
        ],
    ]
    assert _promtool_case(tmp_path, FIRST_VALUE, expected) == ""


@pytest.mark.prometheus
@requires_promtool
@pytest.mark.xfail(
    strict=True,
    reason="a rise or a new series during a scrape gap longer than the window is before "
    "every window that sees it (the rules' header, What stays uncounted)",
)
def test_findings_made_during_a_scrape_gap_longer_than_the_window_page(tmp_path: Path) -> None:
    """A Prometheus that scraped this toolwatch before a 6m gap pages, when scraping
    resumes, both the existing series' rise and the series created in the gap."""
    expected = [
        [{"labels": '{agent="new"}', "value": 1}, {"labels": '{agent="old"}', "value": 1}],
    ]
    assert _promtool_case(tmp_path, SCRAPE_GAP, expected) == ""
