"""The review's promtool cases (``rules.test.yaml``), one pytest test per case.

Each case there is a defect of the `alerts` branch's rules: it fails on the branch and passes
once the rules count as their header says. Real promtool (Debian's ``prometheus`` package),
as ``tests/integration/test_deploy_artifacts.py`` runs it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

HERE = Path(__file__).resolve().parent
RULES = HERE.parent / "deploy" / "prometheus" / "toolwatch-rules.yaml"
CASES = HERE / "rules.test.yaml"
FIRST_VALUE = "a restarted series counts its first process's first value, not the smallest value"
SCRAPE_GAP = "findings made during a scrape gap longer than the window page when scraping resumes"

requires_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool is not on PATH"
)


def _document() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(CASES.read_text(encoding="utf-8"))
    return document


def _promtool_test(tmp_path: Path, name: str) -> subprocess.CompletedProcess[str]:
    """promtool test rules on the one case named, with the shipped rules file."""
    document = _document()
    document["rule_files"] = [str(RULES)]
    document["tests"] = [case for case in document["tests"] if case["name"] == name]
    path = tmp_path / "case.test.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return subprocess.run(
        ["promtool", "test", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.prometheus
@requires_promtool
def test_a_restarted_series_counts_its_first_process_s_first_value(tmp_path: Path) -> None:
    """The header counts a restarted series as max(last process's value, increase()) plus,
    when the first process was created in the window, "its first value (min_over_time)".
    min_over_time is the smallest sample of every process: when the first process was
    created above 1 (6 timed-out runs at once, a run calling a dangerous tool 3 times) and
    the new one counts fewer, the first process's first value is lost: 6 + 1 runs read as 2,
    3 + 1 findings as 2 (the page's "finding(s) in the last 5m" is that count). The count
    should be the first process's first value plus increase(): 7 and 4."""
    result = _promtool_test(tmp_path, FIRST_VALUE)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.prometheus
@requires_promtool
def test_findings_made_during_a_scrape_gap_longer_than_the_window_page(tmp_path: Path) -> None:
    """A scrape gap longer than a page's 5m window (Prometheus restarted or upgraded,
    toolwatch unreachable) hides every DANGEROUS_ACTION_DRIFT made in it: an existing
    series' rise is before every window that holds a sample after it (increase() 0), and a
    series created in the gap has its _created before those windows too. Not new on this
    branch, but its three cases leave it out and its header does not say so. A Prometheus
    that scraped this toolwatch before the gap (unlike a fresh one) should page both when
    scraping resumes."""
    result = _promtool_test(tmp_path, SCRAPE_GAP)
    assert result.returncode == 0, result.stdout + result.stderr
