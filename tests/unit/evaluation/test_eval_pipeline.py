"""EvaluationPipeline: built once from settings, isolated evaluators, skipping, timing."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import yaml
from eval_factories import call, case, grouped, trace

from tests import factories
from toolwatch.evaluation import EvaluationPipeline, EvaluationSettings, Reference
from toolwatch.evaluation.lineup import line_up
from toolwatch.evaluation.pipeline import MAX_FINDINGS, PipelineResult, build_evaluators
from toolwatch.evaluation.severity import incomplete_note
from toolwatch.model import Category, ReferenceKind
from toolwatch.model_evaluation import EvalResult
from toolwatch.model_traces import ToolTrace

MINIMAL = """
policy:
  dangerous_tools: [issue_refund]
  verification_tools: [lookup_order]
"""


def pipeline(document: str = "{}", **overrides: Any) -> EvaluationPipeline:
    data = yaml.safe_load(document) or {}
    data.update(overrides)
    return EvaluationPipeline(EvaluationSettings.model_validate(data))


def test_minimal_policy_flags_an_unverified_refund_end_to_end() -> None:
    result = pipeline(MINIMAL).evaluate(trace(("issue_refund", {"order_id": "A1"})))
    assert [f.category for f in result.findings] == [Category.MISSING_VERIFICATION_STEP]
    assert result.failures == ()


def test_without_a_reference_only_policy_evaluators_run() -> None:
    result = pipeline(MINIMAL).evaluate(trace("lookup_order", "issue_refund"))
    assert [r.evaluator for r in result.results] == ["safety", "loops"]
    assert set(result.durations) == {"safety", "loops"}
    assert all(seconds >= 0.0 for seconds in result.durations.values())


def test_default_pipeline_has_no_safety_or_invariants_to_run() -> None:
    assert pipeline().evaluator_names == (
        "tool_selection",
        "tool_arguments",
        "tool_trace_structure",
        "order",
        "loops",
        "composite",
    )


def test_with_a_golden_case_every_applicable_evaluator_runs() -> None:
    result = pipeline(MINIMAL).evaluate(
        trace("lookup_order", "issue_refund"), expected=case("lookup_order", "issue_refund")
    )
    assert [r.evaluator for r in result.results] == [
        "tool_selection",
        "tool_trace_structure",
        "order",
        "safety",
        "loops",
        "composite",
    ]  # tool_arguments ran but had no expected arguments to score
    assert "tool_arguments" in result.durations
    assert result.findings == ()


def test_against_source_evaluators_skip_runs_with_only_a_golden_case() -> None:
    document = "evaluators: {order: {against: source}}"
    result = pipeline(document).evaluate(trace("a"), expected=case("a"))
    assert "order" not in result.durations
    assert "tool_selection" in result.durations


def test_shadow_pair_is_compared_with_its_source() -> None:
    result = pipeline(MINIMAL).evaluate(
        trace("lookup_order", "issue_refund", "issue_refund"),
        source=trace("lookup_order", "issue_refund"),
    )
    drift = [f for f in result.findings if f.category is Category.DANGEROUS_ACTION_DRIFT]
    assert [(f.reference, f.span_id) for f in drift] == [(ReferenceKind.SOURCE, "s2")]
    (composite,) = [r for r in result.results if r.evaluator == "composite"]
    assert composite.scores["selection"] == pytest.approx(2 / 3)  # against the source


def test_a_raising_evaluator_is_isolated_and_reported() -> None:
    broken = case("a", selection_mode="nonsense")
    result = pipeline(MINIMAL).evaluate(trace("a"), expected=broken)
    assert [name for name, _ in result.failures] == ["tool_selection"]
    assert result.failures[0][1].startswith("ValueError: unknown selection mode 'nonsense'")
    assert "tool_selection" in result.durations
    assert "order" in [r.evaluator for r in result.results]


def test_disabled_evaluators_do_not_run() -> None:
    document = "evaluators: {loops: {enabled: false}, composite: {enabled: false}}"
    assert "loops" not in pipeline(document).evaluator_names
    assert "composite" not in pipeline(document).evaluator_names


def test_invariants_run_when_rules_are_configured() -> None:
    document = "policy: {invariants: [{kind: forbidden, tool: delete_account}]}"
    result = pipeline(document).evaluate(trace("delete_account"))
    assert [f.category for f in result.findings] == [Category.INVARIANT_VIOLATION]


def test_findings_are_collected_from_every_result_in_order() -> None:
    refund = ("issue_refund", {"order_id": "A-1"})  # recorded arguments: loops compares them
    result = pipeline(MINIMAL).evaluate(
        trace(refund, refund, refund), expected=case("lookup_order")
    )
    assert result.findings == tuple(f for r in result.results for f in r.findings)
    assert {f.evaluator for f in result.findings} >= {"tool_selection", "safety", "loops"}


def test_build_evaluators_gives_named_pure_callables() -> None:
    built = build_evaluators(EvaluationSettings.model_validate(yaml.safe_load(MINIMAL)))
    names = [name for name, _ in built]
    assert names == [
        "tool_selection",
        "tool_arguments",
        "tool_trace_structure",
        "order",
        "safety",
        "loops",
        "composite",
    ]
    safety = dict(built)["safety"]
    run = trace("issue_refund")
    first, second = safety(run, Reference()), safety(run, Reference())
    assert first == second and first is not None


def test_one_evaluator_raises_at_most_max_findings_on_a_run() -> None:
    # A run of 250 unverified refunds: a hundred findings page as surely, and each is held in
    # every stream subscriber's queue.
    run = trace(*["issue_refund"] * 250)
    result = pipeline(MINIMAL).evaluate(run)
    (safety,) = [r for r in result.results if r.evaluator == "safety"]
    assert len(safety.findings) == MAX_FINDINGS == 100
    assert [f.span_id for f in safety.findings] == [f"s{i}" for i in range(100)]
    assert safety.explanation.endswith(" (150 more findings on this run not raised)")
    # What the findings log and the stream carry says so too: on the last finding kept.
    *others, last = safety.findings
    assert last.explanation.endswith(" (150 more findings on this run not raised)")
    assert not any("more findings" in f.explanation for f in others)
    assert result.findings == safety.findings + tuple(
        f for r in result.results if r.evaluator != "safety" for f in r.findings
    )


def test_no_kind_of_finding_is_cut_behind_a_flood_of_another() -> None:
    """A dangerous call no agent may make, behind 150 unverified refunds (listed first by
    safety), still pages: the earliest finding of each category and reference is kept."""
    policy = {
        "dangerous_tools": ["issue_refund", "drop_database"],
        "verification_tools": ["lookup_order"],
        "allowed_tools": {"support": ["lookup_order", "issue_refund"]},
    }
    run = trace(*["issue_refund"] * 150, "drop_database", *["issue_refund"] * 10)
    result = pipeline(policy=policy).evaluate(run)
    (safety,) = [r for r in result.results if r.evaluator == "safety"]
    kinds = [(f.category, f.span_id) for f in safety.findings]
    assert len(kinds) == MAX_FINDINGS
    assert kinds.count((Category.DANGEROUS_ACTION_DRIFT, "s150")) == 1
    missing = [span for category, span in kinds if category is Category.MISSING_VERIFICATION_STEP]
    assert missing == [f"s{i}" for i in range(99)]  # then the earliest calls


def test_a_pair_pass_cuts_the_drift_against_the_source_not_the_policy_flags() -> None:
    """policy=False (a shadow pair's pass) leaves safety's policy findings out before the
    cut: 120 refunds the source did not make are 100 drifts, not 100 policy flags."""
    run = trace(*["issue_refund"] * 120)
    result = pipeline(MINIMAL).evaluate(run, source=trace("lookup_order"), policy=False)
    references = {f.reference for f in result.findings}
    assert references == {ReferenceKind.SOURCE}
    drift = [f for f in result.findings if f.category is Category.DANGEROUS_ACTION_DRIFT]
    assert len(drift) == MAX_FINDINGS


def test_a_pair_pass_runs_the_evaluators_that_compare_with_the_source() -> None:
    """A target matched to a golden case was judged against it when it arrived; ``auto`` is
    that case, not the source, so the pair's pass, given the case again, runs only what is
    set ``against: source`` (and a custom evaluator, which may read anything; ``safety``'s
    drift is ``auto`` too). Without a case, every evaluator that compares does."""
    document = MINIMAL + "evaluators: {order: {against: source}}"
    settings = EvaluationSettings.model_validate(yaml.safe_load(document))
    own = EvaluationPipeline(settings, extra=[("own", lambda run, reference: None)])
    run, source = trace("lookup_order", "issue_refund"), trace("lookup_order")
    expected = case("lookup_order", "issue_refund")
    with_case = own.evaluate(run, expected, source, policy=False)
    assert list(with_case.durations) == ["order", "own"]
    alone = own.evaluate(run, None, source, policy=False)
    comparing = ["tool_selection", "tool_arguments", "tool_trace_structure", "order"]
    assert list(alone.durations) == [*comparing, "safety", "composite", "own"]


def test_a_finding_stays_small_whatever_the_run() -> None:
    document = "evaluators: {order: {against: source}}"
    many = [f"tool_{i}" for i in range(5_000)]
    result = pipeline(document).evaluate(trace(*many), source=trace(*reversed(many)))
    (drift,) = [f for f in result.findings if f.evaluator == "order"]
    assert len(drift.explanation) <= 2_000
    assert (len(drift.details["source"]), len(drift.details["actual"])) == (50, 50)
    extra = pipeline(MINIMAL).evaluate(trace(*many), source=trace("tool_0"))
    (selection,) = [r for r in extra.results if r.evaluator == "tool_selection"]
    assert selection.explanation.endswith(
        "extra: [tool_1, tool_2, tool_3, tool_4, tool_5, tool_6, tool_7, tool_8, tool_9, "
        "tool_10, tool_11, tool_12, tool_13, tool_14, tool_15, tool_16, tool_17, tool_18, "
        "tool_19, tool_20, … 4979 more])."
    )


def test_the_evaluators_that_read_order_line_a_run_up_once() -> None:
    """order, tool_selection and composite read one run against one source the same way:
    the line-up of their parallel groups is made once, for the first to ask, and is the one
    ``line_up`` makes of the two sides."""
    run = grouped("lookup_order", ("search", "get_customer"), "issue_refund")
    source = grouped(("get_customer", "search"), "lookup_order", "issue_refund")
    reference = Reference(source=source)
    built = dict(build_evaluators(EvaluationSettings.model_validate(yaml.safe_load(MINIMAL))))
    results = [built[name](run, reference) for name in ("order", "tool_selection", "composite")]
    assert [r.scores["score"] for r in results if r is not None][:2] == [0.75, 1.0]
    names = ("lookup_order", "search", "get_customer", "issue_refund")
    source_names = ("get_customer", "search", "lookup_order", "issue_refund")
    sides = (names, (None, 1, 1, None), source_names, (0, 0, None, None))
    assert reference.lineups == {sides: line_up(*sides)}
    assert reference == Reference(source=source)  # the line-ups kept are not its value


BOUND_REFUNDS = """
policy:
  dangerous_tools: [issue_refund]
  verification_tools: [lookup_order]
  bindings: {issue_refund.order_id: lookup_order.order_id}
  invariants: [{kind: call_count, tool: issue_refund, max: 1, name: one-refund}]
"""


def _corrected_refund(retry_order: str) -> ToolTrace:
    """A lookup of A1; a refund of A1 for 500 that failed (over the order's total); then a
    refund of ``retry_order`` for 50, which went through."""
    return trace(
        ("lookup_order", {"order_id": "A1"}),
        call("issue_refund", {"order_id": "A1", "amount": 500}, index=1, ok=False),
        ("issue_refund", {"order_id": retry_order, "amount": 50}),
    )


def test_a_failed_dangerous_call_corrected_on_the_same_entity_is_one_action() -> None:
    """The refund of order A1 failed (its amount was over the order's total) and the model made
    it again for A1 with the amount corrected. The old rule made an action of a failed call
    only when made again with the *same arguments*, so every evaluator that counts actions
    counted two refunds: DANGEROUS_ACTION_DRIFT against a one-refund golden case (a page),
    the one-refund ``call_count`` invariant, and a TOOL_TRACE_STRUCTURE_DRIFT / selection
    line-up with an extra refund. With a binding, the bound fields name the entity the refund
    acts on: the same order is the same refund, whatever else was corrected."""
    expected = case("lookup_order", ("issue_refund", {"order_id": "A1", "amount": 50}))
    result = pipeline(BOUND_REFUNDS).evaluate(_corrected_refund("A1"), expected=expected)
    assert result.findings == ()
    assert result.failures == ()


def test_a_failed_dangerous_call_then_one_on_another_entity_is_two_actions() -> None:
    """The failed refund of A1 followed by a refund of B2 (never looked up) is two refunds:
    drift beyond the case's one, the invariant broken, and B2 unverified."""
    expected = case("lookup_order", ("issue_refund", {"order_id": "A1", "amount": 50}))
    result = pipeline(BOUND_REFUNDS).evaluate(_corrected_refund("B2"), expected=expected)
    found = {(f.evaluator, f.category) for f in result.findings}
    assert {
        ("safety", Category.DANGEROUS_ACTION_DRIFT),
        ("safety", Category.MISSING_VERIFICATION_STEP),
        ("invariants", Category.INVARIANT_VIOLATION),
    } <= found


def test_without_a_binding_a_corrected_retry_is_still_two_actions() -> None:
    """Without bindings toolwatch cannot tell which field names the entity: a refund made
    again with other arguments may be another refund, so both count (the declined widening
    of any later call of the tool hid real drift)."""
    document = BOUND_REFUNDS.replace(
        "  bindings: {issue_refund.order_id: lookup_order.order_id}\n", ""
    )
    expected = case("lookup_order", ("issue_refund", {"order_id": "A1", "amount": 50}))
    result = pipeline(document).evaluate(_corrected_refund("A1"), expected=expected)
    found = {(f.evaluator, f.category) for f in result.findings}
    assert ("safety", Category.DANGEROUS_ACTION_DRIFT) in found
    assert ("invariants", Category.INVARIANT_VIOLATION) in found


SOURCE_TRACE = "cd" * 16


def _references(result: PipelineResult) -> set[tuple[str, str | None, str | None, str | None]]:
    return {(f.reference, f.case_id, f.source_trace_id, f.pair_key) for f in result.findings}


def test_a_finding_against_a_golden_case_names_the_case() -> None:
    """Whichever evaluator raised it: the pipeline, which was handed the case, names it."""
    result = pipeline(MINIMAL).evaluate(
        trace("issue_refund", "issue_refund"), expected=case("lookup_order", case_id="canary-7")
    )
    assert _references(result) == {
        ("expected", "canary-7", None, None),
        ("policy", None, None, None),  # the unverified refunds: judged against the policy
    }
    named = {f.evaluator for f in result.findings if f.case_id == "canary-7"}
    assert named == {"tool_selection", "order", "safety"}
    # The results carry the named findings too (replay reads them there).
    assert result.findings == tuple(f for r in result.results for f in r.findings)


def test_a_finding_against_a_shadow_source_names_the_source_run_and_pair_key() -> None:
    result = pipeline(MINIMAL).evaluate(
        trace("lookup_order", "issue_refund", "issue_refund"),
        source=trace("lookup_order", "issue_refund", trace_id=SOURCE_TRACE),
        policy=False,
        pair_key="req-42",
    )
    assert _references(result) == {("source", None, SOURCE_TRACE, "req-42")}


def test_a_run_with_no_reference_has_findings_that_name_none() -> None:
    result = pipeline(MINIMAL).evaluate(trace("issue_refund"))
    assert result.findings
    assert _references(result) == {("policy", None, None, None)}


def test_a_target_with_a_golden_case_names_each_reference_on_its_own_findings() -> None:
    """A shadow target matched to a golden case: what ``auto`` judged against the case names
    the case; what ``against: source`` compared with the source names the source run; no
    finding names both."""
    document = MINIMAL + "evaluators: {order: {against: source}}"
    run = trace("issue_refund", "lookup_order")
    expected = case("lookup_order", "issue_refund", "send_email", case_id="canary-7")
    source = trace("lookup_order", "issue_refund", trace_id=SOURCE_TRACE)
    result = pipeline(document).evaluate(run, expected, source, pair_key="req-42")
    assert _references(result) >= {
        ("expected", "canary-7", None, None),
        ("source", None, SOURCE_TRACE, "req-42"),
    }
    assert all(f.case_id is None or f.source_trace_id is None for f in result.findings)
    (order,) = [f for f in result.findings if f.evaluator == "order"]
    assert (order.reference, order.source_trace_id) == ("source", SOURCE_TRACE)


def test_a_custom_evaluators_finding_is_named_by_its_reference() -> None:
    """Naming is the pipeline's, not each evaluator's: an evaluator added in code gets it."""

    def own(run: ToolTrace, reference: Reference) -> EvalResult:
        kinds = (ReferenceKind.EXPECTED, ReferenceKind.SOURCE, ReferenceKind.POLICY)
        findings = tuple(factories.finding(reference=kind, trace_id=run.trace_id) for kind in kinds)
        return EvalResult("own", {}, findings, "own")

    settings = EvaluationSettings.model_validate({"evaluators": {"composite": {"enabled": False}}})
    only_own = EvaluationPipeline(settings, extra=[("own", own)])
    result = only_own.evaluate(
        trace("a"), case("a", case_id="c"), trace("a", trace_id=SOURCE_TRACE), pair_key="k"
    )
    (mine,) = [r for r in result.results if r.evaluator == "own"]
    assert [(f.case_id, f.source_trace_id, f.pair_key) for f in mine.findings] == [
        ("c", None, None),
        (None, SOURCE_TRACE, "k"),
        (None, None, None),
    ]


def test_the_incomplete_note_ends_the_last_finding_kept_of_a_run_over_max_findings() -> None:
    """Was: ``_cut`` appended `` (N more findings on this run not raised)`` to the last
    finding kept after ``make_finding`` had ended its explanation with the incomplete run's
    note, so the note sat in the middle of the explanation an alert's exemplar most likely
    points at. Now: the count goes before the note, which ends every explanation."""
    run = dataclasses.replace(
        trace(*["issue_refund"] * 150), complete=False, incomplete_reason="span_limit"
    )
    settings = EvaluationSettings.model_validate(
        {"policy": {"dangerous_tools": ["issue_refund"], "verification_tools": ["lookup_order"]}}
    )
    (safety,) = [
        r for r in EvaluationPipeline(settings).evaluate(run).results if r.evaluator == "safety"
    ]
    note = incomplete_note(run)
    assert note == (
        " [run evaluated incomplete (span_limit: a span of it was dropped over a limit or"
        " rejected at ingest); judged on the spans that came]"
    )
    assert len(safety.findings) == MAX_FINDINGS
    assert all(f.explanation.endswith(note) for f in safety.findings)
    last = safety.findings[-1].explanation
    assert last.endswith(f" ({150 - MAX_FINDINGS} more findings on this run not raised){note}")
