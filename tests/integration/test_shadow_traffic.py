"""Whose run a finding is (``traffic``): a shadow target's, the candidate's, pages no one and
keeps no production watchdog quiet.

A candidate's copy of a scheduled canary kept ``ToolwatchGoldenCaseOverdue`` quiet (the case
was "judged" by runs whose regressions page no one), and a candidate's run whose pair key a
hop lost was counted live: its unverified refund paged with "reverse the action".
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.integration import agents
from tests.integration.conftest import RunningServer
from tests.integration.evaluation_support import canary_half, runs_by_reference
from tests.integration.ingest_support import send_grpc

POLICY = """\
policy:
  dangerous_tools: [issue_refund]
  verification_tools: [lookup_order]
golden:
  cases_file: cases.yaml
shadow:
  enabled: true
"""
CASES = """\
cases:
  - id: refund-canary
    expected_tools: [lookup_order, issue_refund]
    expected_every_seconds: 600
"""


def test_a_candidates_canary_run_does_not_keep_the_live_canary_on_schedule(
    start_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    (tmp_path / "cases.yaml").write_text(CASES)
    config = tmp_path / "toolwatch.yaml"
    config.write_text(POLICY)
    server = start_server(config)

    send_grpc(server, canary_half("target"))  # only the candidate's copy of the canary
    server.settle()

    compared = {"agent": "refund-bot", "outcome": "complete", "reference": "expected"}
    assert server.sample("toolwatch_tool_traces_total", compared | {"traffic": "shadow"}) == 1.0
    matched = server.registry.get_sample_value(
        "toolwatch_golden_case_last_matched_timestamp_seconds", {"case": "refund-canary"}
    )
    # No live run was judged against the case: its regressions could not have paged.
    assert matched is None, "a shadow target's run counts as the canary being judged"


ROLE_ONLY_POLICY = """\
policy:
  dangerous_tools: [issue_refund]
  verification_tools: [lookup_order]
shadow:
  enabled: true
"""


#: The labels of an unverified refund's finding (MINIMAL policies: severity high).
UNVERIFIED = {
    "category": "MISSING_VERIFICATION_STEP",
    "severity": "high",
    "evaluator": "safety",
    "agent": "refund-bot",
    "tool": "issue_refund",
}


def unverified_refund(attributes: dict[str, str]) -> agents.AgentRun:
    """refund-bot refunding with no lookup first, its run carrying ``attributes``."""
    turns = (agents.Turn((agents.REFUND,)), agents.Turn(text="Done."))
    return agents.AgentRun("refund-bot", turns, attributes=attributes)


def test_a_candidates_run_without_a_pair_key_pages_no_one(
    start_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    """A candidate sets its role once (a resource attribute) and the pair key per request,
    which a hop may lose: its run is still no production run."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(ROLE_ONLY_POLICY)
    server = start_server(config)
    run = unverified_refund({"toolwatch.shadow.role": "target"})
    send_grpc(server, agents.record(run, "genai"))
    server.settle()

    regressions = "toolwatch_regressions_total"
    live = server.sample(regressions, UNVERIFIED | {"traffic": "live"}, missing_ok=True)
    shadow = server.sample(regressions, UNVERIFIED | {"traffic": "shadow"}, missing_ok=True)
    assert (live, shadow) == (0.0, 1.0), "the candidate's refund is counted as live traffic"


def test_a_candidates_regressions_are_counted_as_shadow_traffic(
    start_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    """A candidate's run is no production action: its findings, policy ones too, count under
    ``traffic="shadow"``, which the paging alerts leave out (ToolwatchShadowCandidateUnsafe
    reads them), and production's run under ``live``."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(ROLE_ONLY_POLICY)
    server = start_server(config)
    for role in ("source", "target"):
        attributes = {"toolwatch.shadow.pair_id": "req-9", "toolwatch.shadow.role": role}
        send_grpc(server, agents.record(unverified_refund(attributes), "genai"))
    server.settle()

    regressions = "toolwatch_regressions_total"
    assert server.sample(regressions, UNVERIFIED | {"traffic": "live"}) == 1.0
    assert server.sample(regressions, UNVERIFIED | {"traffic": "shadow"}) == 1.0
    runs = "toolwatch_runs_with_findings_total"
    run_labels = {k: v for k, v in UNVERIFIED.items() if k != "severity"}
    assert server.sample(runs, run_labels | {"reference": "policy", "traffic": "shadow"}) == 1.0
    assert runs_by_reference(server) == {"source@shadow": 1.0, "none": 1.0}
    # The findings log and stream say whose run each finding is, as the label does.
    assert sorted(map(str, server.findings.traffic)) == ["live", "shadow"]
