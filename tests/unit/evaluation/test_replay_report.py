"""The replay report: means over the runs that have each figure, and which golden cases failed."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Literal

import pytest
from eval_factories import call, case, trace

from toolwatch import replay_builder, replay_listing, replay_report
from toolwatch.evaluation import EvaluationPipeline, EvaluationSettings
from toolwatch.evaluation.severity import ERROR_TYPE, OUTCOME
from toolwatch.model import Category, ReferenceKind, Severity, Traffic
from toolwatch.model_evaluation import DETAIL_FIELDS, Finding, GoldenCase
from toolwatch.model_traces import ToolTrace
from toolwatch.references.golden import GoldenCaseSet
from toolwatch.replay_builder import ReportBuilder
from toolwatch.replay_report import Report, parse_gate
from toolwatch.sinks.findings import Redaction, finding_record

SETTINGS = EvaluationSettings()


def report(*runs: tuple[ToolTrace, GoldenCase | None], gates: tuple[str, ...] = ()) -> Report:
    pipeline = EvaluationPipeline(SETTINGS)
    builder = ReportBuilder(SETTINGS, [parse_gate(g, "min") for g in gates])
    for run, golden in runs:
        builder.add(run, golden, pipeline.evaluate(run, golden, None))
    return builder.build()


def test_a_figure_only_some_runs_have_is_the_mean_over_those_runs() -> None:
    # Both runs are perfect; only the first case sets expected_min_steps.
    stepped = (trace("lookup", "refund"), case("lookup", "refund", expected_min_steps=2))
    greeting = (trace(), case(expected_no_tools=True, case_id="greeting"))
    built = report(stepped, greeting, gates=("composite.step_efficiency=0.9",))
    composite = built.scores["composite"]
    assert (composite["n"], composite["score"], composite["step_efficiency"]) == (2.0, 1.0, 1.0)
    assert built.passed  # it read 0.5 (1.0 over two runs) and failed the gate


def test_a_case_whose_tools_were_right_but_whose_order_was_not_failed() -> None:
    built = report((trace("refund", "lookup"), case("lookup", "refund", category="refunds")))
    assert built.categories["refunds"]["failed"] == 1.0
    (failed,) = built.failed_cases
    assert (failed.failure_type, failed.expected, failed.actual) == (
        "TOOL_ORDER_DRIFT",
        ("lookup", "refund"),
        ("refund", "lookup"),
    )
    assert built.failure_types == {"TOOL_ORDER_DRIFT": 1}


def test_a_case_that_had_to_refuse_and_answered_failed() -> None:
    must_refuse = case(expected_no_tools=True, expected_refusal=True, category="safety")
    built = report((trace(), must_refuse))
    assert built.failure_types == {"REFUSAL_REGRESSION": 1}
    assert built.categories["safety"]["failed"] == 1.0
    # A missed tool keeps composite's own failure type.
    assert report((trace("lookup"), case("lookup", "refund"))).failure_types == {"wrong_tool": 1}
    # A case kept is no failure.
    kept = report((trace("lookup", "refund"), case("lookup", "refund")))
    assert (kept.failed_cases, kept.failure_types) == ([], {})


def test_shadow_pairs_are_scored_by_composite_against_their_source() -> None:
    pipeline = EvaluationPipeline(SETTINGS)
    builder = ReportBuilder(SETTINGS, [parse_gate("composite=0.9", "min")])
    target, source = trace("lookup", "refund"), trace("lookup", "refund")
    builder.add(target, None, pipeline.evaluate(target, None, None))
    paired = pipeline.evaluate(target, None, source, policy=False)
    builder.add_pair(paired, ReferenceKind.SOURCE, rescored=pipeline.rescored, target=target)
    built = builder.build()
    assert built.scores["composite"]["score"] == pytest.approx(1.0)
    assert built.passed


def test_a_mean_a_rounding_below_its_minimum_meets_it() -> None:
    # Six runs scoring 1, 1, 1, 0, 1 and 0.8: the mean is 0.8, computed 0.7999999999999999.
    mean = sum([1.0, 1.0, 1.0, 0.0, 1.0, 0.8]) / 6
    assert mean < 0.8
    scored = Report(6, {"composite": {"n": 6.0, "score": mean}}, {}, {}, {}, [], [])
    gate = parse_gate("composite=0.8", "min")
    assert replay_builder._apply(gate, scored) == (gate, mean, True)
    higher = parse_gate("composite=0.81", "min")
    assert replay_builder._apply(higher, scored) == (higher, mean, False)


def test_an_input_without_runs_fails_every_gate_and_says_so() -> None:
    gates = [parse_gate("any=0", "max"), parse_gate("composite=0.5", "min")]
    empty = ReportBuilder(SETTINGS, gates).build()
    assert not empty.passed
    assert [(ok, math.isnan(value)) for _gate, value, ok in empty.gates] == [(False, True)] * 2
    text = empty.to_text()
    assert "  no run in the input: every gate fails" in text
    assert "FAIL any findings <= 0 (no run was evaluated)" in text


@pytest.mark.parametrize(
    ("text", "kind", "problem"),
    [
        ("composite.step_efficency=0.5", "min", "composite has no score 'step_efficency' ("),
        ("composite.n=0.5", "min", "composite has no score 'n'"),
        ("order.ordering=0.5", "min", "order has no score 'ordering' (score)"),
        ("any=nan", "max", "a maximum is a count of findings, 0 or more"),
        ("any=-1", "max", "a maximum is a count of findings, 0 or more"),
        ("TOOL_ORDER_DRIFT=inf", "max", "a maximum is a count of findings, 0 or more"),
        ("any=1.5", "max", "a maximum is a count of findings, a whole number"),
    ],
)
def test_a_gate_on_a_score_or_count_that_cannot_exist_is_refused(
    text: str, kind: Literal["min", "max"], problem: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(f"gate {text!r}: {problem}")):
        parse_gate(text, kind)
    # Every score an evaluator really gives can be gated on.
    for name in ("composite.step_efficiency", "tool_trace_structure.refusal", "safety.score"):
        assert parse_gate(f"{name}=0.5", "min").target == name


def test_incomplete_runs_unknown_case_ids_and_cases_no_run_exercised_are_reported() -> None:
    refund = case("lookup", "refund", case_id="refund")
    greeting = case(expected_no_tools=True, case_id="greeting")
    golden = GoldenCaseSet([refund, greeting])
    attribute = golden.case_id_attribute
    named = dataclasses.replace(trace("lookup", "refund"), reference_keys={attribute: "refund"})
    typo = dataclasses.replace(named, trace_id="cd" * 16, reference_keys={attribute: "refnud"})
    cut = dataclasses.replace(
        named, trace_id="ef" * 16, complete=False, incomplete_reason="timed_out"
    )
    pipeline = EvaluationPipeline(SETTINGS)
    builder = ReportBuilder(SETTINGS, [], golden)
    for run in (named, typo, cut):
        found = golden.match(run) if run.complete else None
        builder.add(run, found, pipeline.evaluate(run, found, None))
    builder.duplicate()
    built = builder.build()
    assert (built.traces, built.incomplete, built.duplicates) == (3, {"timed_out": 1}, 1)
    assert (built.unknown_case_ids, built.cases_not_run) == ({"refnud": 1}, ["greeting"])
    text = built.to_text()
    assert (
        "  1 incomplete (timed_out=1): judged by the policy only, not against golden cases or"
        " shadow sources" in text
    )
    assert "  1 run(s) read more than once, evaluated once" in text
    assert "  refnud: named in 1 trace(s), not in the golden-case file" in text
    assert "  greeting: no complete run" in text
    document = json.loads(built.to_json())
    assert (document["unknown_case_ids"], document["cases_not_run"]) == (
        {"refnud": 1},
        ["greeting"],
    )


def test_ids_no_run_of_a_trace_was_matched_to_are_told_by_reason_per_trace() -> None:
    """A title agent given the canary's id beside the canary's matched run: nothing to tell.
    An id above several runs of a case naming no agent, or of a case naming an agent none of
    the trace's runs is, is told once per trace."""
    kb = dataclasses.replace(case("search_kb", case_id="kb"), agent="support-bot")
    refund = case("lookup", "refund", case_id="refund")
    golden = GoldenCaseSet([kb, refund])
    attribute = golden.case_id_attribute
    own = {attribute: "kb"}
    canary = dataclasses.replace(trace("search_kb", agent="support-bot"), reference_keys=own)
    title = dataclasses.replace(trace(agent="title-bot"), reference_keys=own)
    renamed = dataclasses.replace(canary, trace_id="cd" * 16, agent="Support Bot")
    above = [
        dataclasses.replace(trace("lookup", trace_id="ef" * 16, agent=agent), shared_keys=keys)
        for agent, keys in (("a", {attribute: "refund"}), ("b", {attribute: "refund"}))
    ]
    pipeline = EvaluationPipeline(SETTINGS)
    builder = ReportBuilder(SETTINGS, [], golden)
    for run in (canary, title, renamed, *above):
        found = golden.match(run)
        builder.add(run, found, pipeline.evaluate(run, found, None))
    built = builder.build()
    assert (built.unknown_case_ids, built.case_ids_above_runs) == ({}, {"refund": 1})
    assert built.case_ids_agent_not_run == {"kb": 1}
    assert built.cases_not_run == ["refund"]
    text = built.to_text()
    assert (
        "  refund: named above several runs in 1 trace(s), none said to be its: name the"
        " case's agent" in text
    )
    assert "  kb: named in 1 trace(s) by runs of other agents than the case's" in text
    document = json.loads(built.to_json())
    assert (document["case_ids_above_runs"], document["case_ids_agent_not_run"]) == (
        {"refund": 1},
        {"kb": 1},
    )


def test_a_case_only_a_shadow_source_ran_is_said_so_and_its_findings_are_not_gated() -> None:
    refund = case("lookup", "refund", case_id="refund")
    golden = GoldenCaseSet([refund])
    run = dataclasses.replace(trace("refund"), reference_keys={golden.case_id_attribute: "refund"})
    pipeline = EvaluationPipeline(SETTINGS)
    builder = ReportBuilder(SETTINGS, [parse_gate("any=0", "max")], golden)
    builder.add(run, refund, pipeline.evaluate(run, refund, None), source=True)
    built = builder.build()
    assert (built.traces, built.sources, built.cases_not_run) == (0, 1, ["refund"])
    assert built.cases_source_only == ["refund"]
    assert sum(built.source_findings.values()) > 0 and built.findings == {}
    assert "  refund: run by a shadow source only (the serving model)" in built.to_text()
    assert not built.passed  # no candidate run: nothing proves the candidate


def test_right_tools_in_the_wrong_order_fail_as_order_in_an_ordered_selection_mode() -> None:
    # mode expected: tool_selection scores the calls in order, so it flags the swap too.
    swapped = (trace("refund", "lookup"), case("lookup", "refund", selection_mode="expected"))
    built = report(swapped)
    assert built.failure_types == {"TOOL_ORDER_DRIFT": 1}


def test_a_case_of_mode_first_kept_by_calls_issued_together_is_no_failure() -> None:
    """The run asked for both tools at once: no call of the group came first. The evaluators
    said 100%; the report's failure type read the start order and counted wrong_tool."""
    together = trace(call("search", index=0, group=0), call("lookup", index=1, group=0))
    built = report((together, case("lookup", "search", selection_mode="first")))
    assert (built.failed_cases, built.failure_types) == ([], {})


def test_a_category_shows_no_composite_mean_when_composite_does_not_run() -> None:
    settings = EvaluationSettings.model_validate({"evaluators": {"composite": {"enabled": False}}})
    pipeline = EvaluationPipeline(settings)
    builder = ReportBuilder(settings, [])
    run, golden = trace("lookup", "refund"), case("lookup", "refund", category="refunds")
    builder.add(run, golden, pipeline.evaluate(run, golden, None))
    built = builder.build()
    assert built.categories == {"refunds": {"runs": 1.0, "failed": 0.0}}  # read 0.0 before
    assert "  refunds                runs=1 failed=0\n" in built.to_text() + "\n"


def _with_findings(listing: replay_report.Listing) -> Report:
    """Three runs out of order against their case: a finding each, the third's trace id
    its own."""
    pipeline = EvaluationPipeline(SETTINGS)
    builder = ReportBuilder(SETTINGS, [parse_gate("any=2", "max")], listing=listing)
    golden = case("lookup", "refund")
    for number in range(3):
        run = trace("refund", "lookup", trace_id=f"{number + 1:032x}")
        builder.add(run, golden, pipeline.evaluate(run, golden, None))
    return builder.build()


def test_findings_are_counted_and_listed_only_as_the_report_needs_them() -> None:
    """The text report needs counts alone; the JSON report lists every finding, spooled to
    a temporary file as they come, to the same document as when they are kept in memory (as
    ``json.dumps`` indents it)."""
    kept, spooled, counted = (_with_findings(listing) for listing in ("kept", "spooled", "counted"))
    assert len(kept.finding_list) == 3
    assert spooled.finding_list == counted.finding_list == []  # nothing held per finding
    assert (
        kept.findings == spooled.findings == counted.findings == {"TOOL_ORDER_DRIFT": {"high": 3}}
    )
    assert kept.to_text() == spooled.to_text() == counted.to_text()
    assert [ok for _gate, _value, ok in counted.gates] == [False]
    document = spooled.to_json()
    assert document == kept.to_json()
    assert document == json.dumps(json.loads(document), indent=2, sort_keys=True)
    listed = [f["trace_id"] for f in json.loads(document)["findings"]]
    assert listed == [f"{number + 1:032x}" for number in range(3)]
    with pytest.raises(ValueError, match="counted, not listed"):
        counted.to_json()
    assert json.loads(report().to_json())["findings"] == []


def test_a_spooled_report_written_twice_lists_its_findings_both_times() -> None:
    """A caller of ``evaluate_offline(..., listing="spooled")`` may print the report and
    save it: the second document listed no finding while its counts said three."""
    settings = EvaluationSettings()
    pipeline = EvaluationPipeline(settings)
    builder = ReportBuilder(settings, [parse_gate("any=2", "max")], listing="spooled")
    golden = case("lookup", "refund")
    for number in range(3):
        run = trace("refund", "lookup", trace_id=f"{number + 1:032x}")
        builder.add(run, golden, pipeline.evaluate(run, golden, None))
    built = builder.build()
    first = json.loads(built.to_json())
    second = json.loads(built.to_json())
    assert len(first["findings"]) == 3
    assert second["findings"] == first["findings"]


@pytest.mark.parametrize("listing", ["kept", "spooled"])
def test_a_shadow_sources_findings_are_listed_apart_and_gated_by_none(
    listing: replay_report.Listing,
) -> None:
    """The serving model's runs (shadow sources) are "listed, not gated": their findings
    were counted by category alone, so the run that raised one could not be found."""
    pipeline = EvaluationPipeline(SETTINGS)
    builder = ReportBuilder(SETTINGS, [parse_gate("any=0", "max")], listing=listing)
    golden = case("lookup", "refund")
    source = trace("refund", "lookup", trace_id=f"{1:032x}")
    builder.add(source, golden, pipeline.evaluate(source, golden, None), source=True)
    candidate = trace("lookup", "refund", trace_id=f"{2:032x}")
    builder.add(candidate, golden, pipeline.evaluate(candidate, golden, None))
    built = builder.build()
    assert built.passed  # the source's finding is no candidate's
    document = built.to_json()
    assert document == json.dumps(json.loads(document), indent=2, sort_keys=True)
    sources = json.loads(document)["shadow_sources"]
    assert sources["findings"] == {"TOOL_ORDER_DRIFT": 1}
    assert [(f["trace_id"], f["traffic"]) for f in sources["finding_list"]] == [
        (f"{1:032x}", "live")
    ]
    assert json.loads(document)["findings"] == []


def test_a_listed_finding_is_the_findings_logs_record_but_its_timestamp() -> None:
    """The JSON report's findings say what the findings log says of them (case, shadow
    source and pair, traffic, service, the run's agent, what became of a dangerous call),
    argument values redacted as the log redacts them.

    Was: a record of its own, without ``service``, the run's agent when the finding names
    none, or ``details.fields``; its ``details`` only ``outcome`` and ``error_type``.
    Now: the findings log's record (``finding_record``) but ``timestamp``, plus
    ``call_agent``."""
    finding = Finding(
        Category.DANGEROUS_ACTION_DRIFT,
        Severity.CRITICAL,
        "safety",
        ReferenceKind.SOURCE,
        0.0,
        "refund issued",
        f"{2:032x}",
        span_id=f"{3:016x}",
        details={OUTCOME: "failed", ERROR_TYPE: "TimeoutError", DETAIL_FIELDS: {"amount": 99}},
        source_trace_id=f"{1:032x}",
        pair_key="p1",
    )
    run = dataclasses.replace(trace("issue_refund"), service="billing", agent="refund-bot")
    for redaction in (Redaction(), Redaction(show_fields=frozenset({"issue_refund.amount"}))):
        listed = replay_listing.finding_dict(run, finding, Traffic.SHADOW, redaction)
        logged = finding_record(run, finding, redaction, 0, Traffic.SHADOW)
        del logged["timestamp"]
        assert listed == {**logged, "call_agent": None}
        assert (listed["service"], listed["agent"]) == ("billing", "refund-bot")
    hidden = replay_listing.finding_dict(run, finding, Traffic.SHADOW, Redaction())
    assert hidden["details"][DETAIL_FIELDS] == {"amount": "[redacted]"}
    assert "99" not in json.dumps(hidden)
    shown = replay_listing.finding_dict(run, finding, Traffic.SHADOW, Redaction(show_values=True))
    assert shown["details"][DETAIL_FIELDS] == {"amount": 99}


def test_the_text_report_escapes_the_case_ids_spans_named() -> None:
    """A case id no case has came from a recorded span: its sender chose it. Was: written to
    the terminal as sent, so a line break forged a report line and an ANSI escape ran. Now:
    control characters are escaped as ``toolwatch tail`` escapes them."""
    forged = "kb\n  refund: named in 9 trace(s)\x1b[2K"
    report = Report(1, {}, {}, {}, {}, [], [], unknown_case_ids={forged: 1})
    (line,) = [line for line in report.to_text().splitlines() if line.startswith("  kb")]
    assert line == (
        "  kb\\n  refund: named in 9 trace(s)\\x1b[2K: named in 1 trace(s), not in the"
        " golden-case file"
    )
