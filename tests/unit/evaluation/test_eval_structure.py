"""tool_trace_structure: call count tolerance, parallelism, refusal alignment."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest
from eval_factories import FLAKY, STEADY, call, case, trace

from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.settings import StructureSettings
from toolwatch.evaluation.structure import ToolTraceStructure, count_score
from toolwatch.model import Category, ReferenceKind, Severity
from toolwatch.model_evaluation import EvalResult
from toolwatch.model_traces import ToolTrace
from toolwatch.names import NameNormalizer


def evaluate(run: Any, reference: Reference, **settings: Any) -> EvalResult | None:
    evaluator = ToolTraceStructure(StructureSettings.model_validate(settings), NameNormalizer())
    return evaluator(run, reference)


@pytest.mark.parametrize(
    ("actual", "reference", "tolerance", "score"),
    [
        (5, 5, 1, 1.0),
        (6, 5, 1, 1.0),
        (4, 5, 1, 1.0),
        (8, 5, 1, 0.6),  # 2 beyond the tolerance, over 5
        (3, 5, 0, 0.6),
        (20, 5, 1, 0.0),
        (3, 0, 1, 0.0),
        (0, 0, 0, 1.0),
    ],
)
def test_count_score(actual: int, reference: int, tolerance: int, score: float) -> None:
    assert count_score(actual, reference, tolerance) == pytest.approx(score)


def test_call_count_against_a_source() -> None:
    result = evaluate(trace("a", "a", "a", "a"), Reference(source=trace("a", "a")))
    assert result is not None
    assert result.scores["call_count"] == pytest.approx(0.5)
    (finding,) = result.findings
    assert finding.category is Category.TOOL_TRACE_STRUCTURE_DRIFT
    assert finding.reference is ReferenceKind.SOURCE
    assert finding.explanation == "Structure: call_count 50% (4 calls, source 2 (tolerance 1))."


def test_failed_calls_made_again_are_one_call_with_their_retry() -> None:
    """As ``loops``, ``call_count`` invariants and ``safety`` count actions: an order service
    that failed twice is no call-count drift against the case, nor against a source, and a
    source's own retries are not calls the run left out."""
    result = evaluate(FLAKY, Reference(expected=case("lookup_order", "issue_refund")))
    assert result is not None and result.findings == ()
    assert "Structure: 100% (2 calls (and 2 failed calls made again), expected 2" in (
        result.explanation
    )
    against_source = evaluate(FLAKY, Reference(source=STEADY))
    assert against_source is not None and against_source.findings == ()
    source_retried = evaluate(STEADY, Reference(source=FLAKY), call_count_tolerance=0)
    assert source_retried is not None and source_retried.scores["call_count"] == 1.0


def test_expected_tool_count_is_the_reference_count() -> None:
    result = evaluate(trace("a", "a", "a"), Reference(expected=case("a", expected_tool_count=3)))
    assert result is not None
    assert result.scores["call_count"] == 1.0


def test_a_case_of_mode_first_gives_no_call_count_from_its_tools() -> None:
    """A case of mode ``first`` judges the run's first call alone (``tool_selection``: 1 if
    the first names agree): its author writes the first tool, and a run that goes on after
    it has not called too much. The count the case gives, if it gives one, still holds."""
    run = trace("classify_ticket", "search_kb", "reply")
    first = case("classify_ticket", selection_mode="first")
    result = evaluate(run, Reference(expected=first))
    assert result is not None  # the refusal check: it expects work done
    assert "call_count" not in result.scores
    assert result.findings == ()
    counted = evaluate(run, Reference(expected=replace(first, expected_tool_count=1)))
    assert counted is not None and counted.scores["call_count"] == 0.0


def test_case_without_tools_or_count_has_no_structure_to_check() -> None:
    assert evaluate(trace("a"), Reference(expected=case())) is None
    assert evaluate(trace("a"), Reference(expected=case(expected_no_tools=True))) is None
    # expected_tool_count: 0 expects no calls: tool_selection owns it, as expected_no_tools
    assert evaluate(trace("a"), Reference(expected=case(expected_tool_count=0))) is None


def test_parallelism_must_match_the_source() -> None:
    parallel = trace(call("a", index=0, group=1), call("b", index=1, group=1))
    result = evaluate(trace("a", "b"), Reference(source=parallel))
    assert result is not None
    assert result.scores["parallelism"] == 0.0
    assert result.scores["score"] == pytest.approx(2 / 3)
    assert [f.details["check"] for f in result.findings] == ["parallelism"]
    assert result.findings[0].severity is Severity.MEDIUM  # overall drop of 1/3


def test_parallelism_check_can_be_turned_off() -> None:
    parallel = trace(call("a", index=0, group=1), call("b", index=1, group=1))
    result = evaluate(trace("a", "b"), Reference(source=parallel), check_parallelism=False)
    assert result is not None
    assert "parallelism" not in result.scores


@pytest.mark.parametrize(("target", "source"), [(True, False), (False, True)])
def test_refusal_mismatch_with_the_source_is_a_high_regression(target: bool, source: bool) -> None:
    # Refused outright on one side only (no call made); after the same work a refusal
    # declines part of it and is compared with neither side's.
    worked = ("a",) if not target else ()
    result = evaluate(trace(*worked, refusal=target), Reference(source=trace(refusal=source)))
    assert result is not None
    (finding,) = [f for f in result.findings if f.category is Category.REFUSAL_REGRESSION]
    assert finding.severity.rank >= Severity.HIGH.rank
    after_work = evaluate(trace("a", refusal=target), Reference(source=trace("a", refusal=source)))
    assert after_work is not None and after_work.findings == ()


@pytest.mark.parametrize(
    ("expected", "refused", "said"),
    [
        (True, False, "the run did not refuse a case that expects a refusal"),
        (False, True, "the run refused a case that expects no refusal"),
    ],
)
def test_a_case_that_says_whether_to_refuse_is_a_high_regression_when_missed(
    expected: bool, refused: bool, said: str
) -> None:
    golden = case(expected_no_tools=True, expected_refusal=expected)
    result = evaluate(trace(refusal=refused), Reference(expected=golden))

    assert result is not None
    assert result.scores["refusal"] == 0.0
    (finding,) = [f for f in result.findings if f.category is Category.REFUSAL_REGRESSION]
    assert said in finding.explanation
    assert finding.severity.rank >= Severity.HIGH.rank


@pytest.mark.parametrize("refused", [True, False])
def test_a_case_that_says_whether_to_refuse_agrees_with_a_run_that_does(refused: bool) -> None:
    golden = case(expected_no_tools=True, expected_refusal=refused)
    result = evaluate(trace(refusal=refused), Reference(expected=golden))

    assert result is not None
    assert result.scores == {"score": 1.0, "refusal": 1.0}
    assert result.findings == ()


SORRY = {"refusal_patterns": [r"^i'?m sorry,? (but )?i can'?t", "cannot help with"]}


def test_a_canary_refused_in_plain_words_is_a_refusal_with_patterns_and_not_without() -> None:
    golden = case(expected_no_tools=True, expected_refusal=True)
    said = trace(final_text="I'm sorry, but I can't help with that request.")
    result = evaluate(said, Reference(expected=golden), **SORRY)
    assert result is not None
    assert result.scores == {"score": 1.0, "refusal": 1.0}
    assert result.explanation == (
        "Structure: 100% (refused: yes, expected: yes; the run's final text matches"
        " \"^i'?m sorry,? (but )?i can'?t\")."
    )
    unconfigured = evaluate(said, Reference(expected=golden))
    assert unconfigured is not None and unconfigured.scores["refusal"] == 0.0


def test_a_refusal_with_typographic_apostrophes_matches_a_pattern_written_with_plain_ones() -> None:
    golden = case(expected_no_tools=True, expected_refusal=True)
    said = trace(final_text="I\u2019m sorry, but I can\u2019t help with that.")
    result = evaluate(said, Reference(expected=golden), **SORRY)
    assert result is not None and result.scores["refusal"] == 1.0


def test_refusal_patterns_judge_the_shadow_source_too() -> None:
    answered = trace("a", final_text="Your refund is on its way.")
    refused = trace(final_text="Sorry, I cannot help with refunds.")  # words, and no work
    result = evaluate(answered, Reference(source=refused), **SORRY)
    assert result is not None
    (finding,) = result.findings
    assert finding.category is Category.REFUSAL_REGRESSION
    assert "refused: no, source: yes" in finding.explanation
    agreeing = evaluate(refused, Reference(source=refused), **SORRY)
    assert agreeing is not None and agreeing.scores["refusal"] == 1.0


def test_words_after_the_work_are_no_refusal_of_a_case_that_only_expects_work() -> None:
    sorry = "I'm sorry, I can't find order A-1001; I've escalated it."
    golden = case("lookup_order")
    worked = trace("lookup_order", final_text=sorry)
    did_work = evaluate(worked, Reference(expected=golden), **SORRY)
    assert did_work is not None and did_work.scores["refusal"] == 1.0
    no_work = evaluate(trace(final_text=sorry), Reference(expected=golden), **SORRY)
    assert no_work is not None and no_work.scores["refusal"] == 0.0
    must_not = case("lookup_order", expected_refusal=False)  # said outright: words count
    told = evaluate(trace("lookup_order", final_text=sorry), Reference(expected=must_not), **SORRY)
    assert told is not None and told.scores["refusal"] == 0.0


def test_an_apology_after_the_work_is_no_refusal_against_a_shadow_source_either() -> None:
    """A shadow target makes the source's calls (lookup, then the refund) and ends with the
    refund done and an apology for a second request, in the README's recommended pattern's
    words. Against a golden case that only expects calls those words are an apology, not a
    refusal; against the source the same run was a REFUSAL_REGRESSION (``high``, a ticket
    saying the candidate refuses where it did the whole job). The same words cannot be a
    refusal or not depending on the reference: against a source that made calls, words
    after the run's calls are no refusal, and the source's own words after its calls no
    more (like with like)."""
    recommended = {"refusal_patterns": ["sorry, (but )?i can'?t help with (that|this)"]}
    partial = (
        "I've refunded order A1. Sorry, I can't help with that second request (changing the"
        " delivery address): please contact support for it."
    )
    run = trace("lookup_order", "issue_refund", final_text=partial)
    source = trace(
        "lookup_order",
        "issue_refund",
        final_text="I've refunded order A1. Changing the address is not something I can do.",
    )
    golden = case("lookup_order", "issue_refund")
    for reference in (Reference(expected=golden), Reference(source=source)):
        result = evaluate(run, reference, **recommended)
        assert result is not None and result.findings == (), reference
        assert result.scores["refusal"] == 1.0
    # The source's own apology after its work is read alike: no mismatch either way.
    apologised = replace(source, final_text=partial)
    result = evaluate(run, Reference(source=apologised), **recommended)
    assert result is not None and result.scores["refusal"] == 1.0
    # A run that did no work and said those words still refuses what the source did.
    idle = evaluate(trace(final_text=partial), Reference(source=source), **recommended)
    assert idle is not None and idle.scores["refusal"] == 0.0


REVIEWED_PATTERNS = {"refusal_patterns": ["sorry, (but )?i can'?t help with (that|this)"]}
WORDS = "I've refunded order A1. Sorry, I can't help with that second request."


def refusal_findings(run: ToolTrace, source: ToolTrace) -> list[Category]:
    result = evaluate(run, Reference(source=source), **REVIEWED_PATTERNS)
    assert result is not None
    return [f.category for f in result.findings]


@pytest.mark.parametrize("words_on", ["source", "target"])
def test_words_and_a_refusal_part_after_the_same_work_agree(words_on: str) -> None:
    """Production (the shadow source) and the candidate both looked the order up, refunded
    it, and declined a second request; one model declined in words ("Sorry, I can't help
    with that..."), the other with a structured refusal (OpenAI's refusal part, or a
    content_filter finish: ``ToolTrace.refusal``), as two different models behind one agent
    do. At 9752a75 both read as refusals against the source: no finding. c2d7679 reads the
    words after calls as no refusal, on either side, but leaves the structured refusal a
    refusal, so the pair now disagrees and raises REFUSAL_REGRESSION (at least ``high``)
    on a candidate that did exactly what production did: a false ticket on every such
    shadow pair, in both directions (the commit meant "identical runs agree")."""
    worded = trace("lookup_order", "issue_refund", final_text=WORDS)
    structured = trace("lookup_order", "issue_refund", refusal=True)
    run, source = (structured, worded) if words_on == "source" else (worded, structured)
    assert Category.REFUSAL_REGRESSION not in refusal_findings(run, source)


def test_a_run_that_refused_before_any_call_is_a_regression_against_a_source_that_worked() -> None:
    worked = trace("lookup_order", "issue_refund", final_text=WORDS)
    for outright in (trace(refusal=True), trace(final_text=WORDS)):
        assert Category.REFUSAL_REGRESSION in refusal_findings(outright, worked)
        assert Category.REFUSAL_REGRESSION in refusal_findings(worked, outright)


def test_refusal_patterns_read_only_the_start_of_a_long_text() -> None:
    golden = case(expected_no_tools=True, expected_refusal=False)
    late = trace(final_text="x" * 2000 + " cannot help with")
    result = evaluate(late, Reference(expected=golden), **SORRY)
    assert result is not None and result.scores["refusal"] == 1.0
    early = trace(final_text="x" * 1980 + " cannot help with")
    result = evaluate(early, Reference(expected=golden), **SORRY)
    assert result is not None and result.scores["refusal"] == 0.0


@pytest.mark.parametrize(
    ("patterns", "reason"),
    [
        (["(sorry"], "'(sorry' is not a regular expression: missing ), unterminated subpattern"),
        ([" "], "an empty pattern matches every text: leave it out"),
    ],
)
def test_a_refusal_pattern_that_is_no_pattern_is_refused(patterns: list[str], reason: str) -> None:
    with pytest.raises(ValueError, match=re.escape(reason)):
        StructureSettings.model_validate({"refusal_patterns": patterns})


def test_a_no_tools_case_that_does_not_say_skips_the_refusal_check() -> None:
    golden = case(expected_no_tools=True)
    assert evaluate(trace(refusal=True), Reference(expected=golden)) is None


def test_refusing_a_case_that_expects_tools_is_a_refusal_regression() -> None:
    result = evaluate(trace(refusal=True), Reference(expected=case("lookup_order")))
    assert result is not None
    refusal = [f for f in result.findings if f.category is Category.REFUSAL_REGRESSION]
    assert len(refusal) == 1
    assert "refused a case that expects tool calls" in refusal[0].explanation


def test_aligned_structure_scores_one_without_findings() -> None:
    result = evaluate(trace("a", "b"), Reference(source=trace("b", "a")))
    assert result is not None
    assert result.scores == {"score": 1.0, "call_count": 1.0, "parallelism": 1.0, "refusal": 1.0}
    assert result.findings == ()
