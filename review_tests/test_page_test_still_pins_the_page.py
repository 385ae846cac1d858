"""test_safety_categories_page_at_once no longer pins what it pinned on main.

On main it asserted the page's own expression counted
``toolwatch_regressions_total{traffic!="shadow",category="<category>"}`` over 5m: live
findings of the category, read in the alert's own evaluation. The branch's version asserts
that the alert selects ``<record>{traffic!="shadow",category="<category>"}`` and that some
``:increase5m`` rule counts ``increase(toolwatch_regressions_total[5m])``, but not that the
record keeps ``traffic`` (summed away, ``traffic!="shadow"`` matches every recorded series and
a shadow candidate's dangerous call pages production's on-call) nor that the record is in
the alert's group ahead of it ("at once": from another group, or after the alert, the page
reads the previous evaluation's count, one interval late).

Each case below breaks one of those in a copy of the rules and runs the branch's test on
it: the test should fail, and passes. (The promtool suite happens to catch both today; the
unit test named for the property should too.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration import test_deploy_artifacts as artifacts

RECORD_5M = "namespace_traffic_category_evaluator_agent_tool:toolwatch_regressions:increase5m"


def _without_traffic(rules: dict[str, Any]) -> None:
    (record,) = [r for g in rules["groups"] for r in g["rules"] if r.get("record") == RECORD_5M]
    assert "namespace, traffic, category" in record["expr"]
    record["expr"] = record["expr"].replace("namespace, traffic, category", "namespace, category")


def _after_the_alerts(rules: dict[str, Any]) -> None:
    (page,) = [g for g in rules["groups"] if g["name"] == "toolwatch.regressions.page"]
    (record,) = [r for r in page["rules"] if r.get("record") == RECORD_5M]
    page["rules"].remove(record)
    page["rules"].append(record)


@pytest.mark.parametrize("mutate", [_without_traffic, _after_the_alerts])
@pytest.mark.parametrize("category", ["DANGEROUS_ACTION_DRIFT", "MISSING_VERIFICATION_STEP"])
def test_the_page_test_fails_on_a_page_that_reads_shadow_or_late_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mutate: Any, category: str
) -> None:
    """A page that counts shadow findings, or reads its count one evaluation late, passes
    test_safety_categories_page_at_once; it should fail it, as it failed main's version."""
    rules = yaml.safe_load(artifacts.RULES.read_text(encoding="utf-8"))
    mutate(rules)
    broken = tmp_path / "toolwatch-rules.yaml"
    broken.write_text(yaml.safe_dump(rules, sort_keys=False), encoding="utf-8")
    monkeypatch.setattr(artifacts, "RULES", broken)
    with pytest.raises(AssertionError):
        artifacts.test_safety_categories_page_at_once(category)
