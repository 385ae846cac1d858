"""The findings of shadow sources (the serving model's live runs) in replay's JSON report."""

from __future__ import annotations

import json
from pathlib import Path

from tests.integration.agents import LOOKUP, REFUND, AgentRun, Turn, record
from tests.integration.cli_support import EXAMPLES, run_cli
from tests.integration.evaluation_support import otlp_json_line

PAIR = "toolwatch.shadow.pair_id"
ROLE = "toolwatch.shadow.role"


def test_a_shadow_sources_finding_is_listed_with_its_trace_and_not_gated(
    tmp_path: Path,
) -> None:
    """docs/commands.md: "the shadow sources (the serving model's runs) are evaluated apart:
    their findings are listed, not gated". serve emits the serving model's unverified
    refund as a live finding. replay's JSON report listed the candidate's findings one by
    one, each with its trace and span, but of the source's only a count by category: the
    engineer saw "MISSING_VERIFICATION_STEP: 1" and could not find which run it was.

    Was: each listed finding had ``details`` with only ``outcome`` and ``error_type`` and no
    ``service``. Now: the findings log's record but its timestamp: ``service``, and the
    details redacted as the configuration's findings log redacts them (the example shows
    ``issue_refund.order_id``)."""
    source = AgentRun(
        "refund-bot", (Turn((REFUND,)), Turn(text="ok")), attributes={PAIR: "p1", ROLE: "source"}
    )
    target = AgentRun(
        "refund-bot",
        (Turn((LOOKUP,)), Turn((REFUND,)), Turn(text="ok")),
        attributes={PAIR: "p1", ROLE: "target"},
    )
    source_spans, target_spans = record(source, "genai"), record(target, "genai")
    capture = tmp_path / "capture.otlp.jsonl"
    capture.write_text(otlp_json_line(source_spans) + "\n" + otlp_json_line(target_spans) + "\n")
    config = EXAMPLES / "toolwatch.yaml"  # shadow pairs on, the refund policy

    result = run_cli(
        "replay", "--config", str(config), "--format", "json", "--no-progress",
        "--max-findings", "MISSING_VERIFICATION_STEP=0", str(capture),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr  # the gate reads the candidate's alone
    report = json.loads(result.stdout)
    sources = report["shadow_sources"]
    assert sources["findings"] == {"MISSING_VERIFICATION_STEP": 1}
    (listed,) = sources["finding_list"]
    refund_span = next(s for s in source_spans if s.name == "execute_tool issue_refund")
    assert (listed["category"], listed["trace_id"], listed["span_id"], listed["traffic"]) == (
        "MISSING_VERIFICATION_STEP",
        format(source_spans[0].context.trace_id, "032x"),
        format(refund_span.context.span_id, "016x"),
        "live",
    )
    assert listed["service"] == "refund-agent"
    assert listed["details"] == {
        "failed_verification_spans": [],
        "fields": {"order_id": "A-1001"},  # output.show_fields names it
        "outcome": "ok",  # the refund went through
    }
    target_trace = format(target_spans[0].context.trace_id, "032x")
    assert all(f["trace_id"] == target_trace for f in report["findings"])
    assert all(f["traffic"] == "shadow" for f in report["findings"])
