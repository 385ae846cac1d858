"""``tool_trace_structure``: does the run have the reference's shape?

Checks, each scored in [0, 1] and reported under its own score key:

- ``call_count``: the run's number of calls against the reference count (the source run's
  count; a golden case's ``expected_tool_count``, else the length of its ``expected_tools``,
  unless its own mode is ``first``: it judges the first call alone, ``base.first_only``).
  Within ``call_count_tolerance`` scores 1, beyond it ``1 - (|diff| - tolerance) / max(ref,
  1)`` floored at 0. Calls are counted as actions (``loops.acted``): a failed call the agent
  made again is one call with its retry, the run's and a source's, so a flaky tool does not
  read as the agent calling more. Skipped for cases that expect no calls (``tool_selection``
  owns those) and for cases that give no count.
- ``parallelism``: 1 if the run uses parallel calls (two calls sharing a ``parallel_group``)
  exactly when the source run does, else 0. Only against a source (golden cases do not say).
- ``refusal``: 1 if the run's refusal agrees with the reference, else 0. Against a source both
  directions are regressions. Against a golden case, ``expected_refusal`` says which way is
  right (a canary that must be refused, or one that must be answered); a case that does not
  say and expects tool calls must not be refused; other cases skip the check. A run refused
  when the timeline found a refusal (a finish reason or a refusal part) or when its final
  text matches one of ``refusal_patterns`` (the run's and its source's alike); against a
  case that only expects tool calls, matching words after calls were made are not a
  refusal (an apology for part of the work). Against a source only a refusal before any
  call is compared, the run's and the source's alike, however it was told: after work,
  words, a refusal part or a content_filter finish decline part of it, so two runs that did
  the same work agree whichever way each declined the rest, and a run that refused outright
  where the source worked is still a regression.

``score`` is the mean of the checks that apply; with none the evaluator does not apply. Each
check below ``threshold`` (default 1.0) is one finding: TOOL_TRACE_STRUCTURE_DRIFT, or
REFUSAL_REGRESSION for refusal (at least ``high``). Severity comes from the overall score so
that one broken check of several reads as a partial drop.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from toolwatch.evaluation.base import Baseline, Reference, baseline, pct
from toolwatch.evaluation.concurrency import uses_parallelism
from toolwatch.evaluation.loops import NO_BOUND, acted
from toolwatch.evaluation.settings import REFUSAL_TEXT_CHARS, StructureSettings
from toolwatch.evaluation.severity import make_finding, severity_for
from toolwatch.model import Category, ReferenceKind, Severity
from toolwatch.model_evaluation import EvalResult, Finding
from toolwatch.model_traces import ToolTrace
from toolwatch.names import NameNormalizer

__all__ = ["SCORES", "StructureCheck", "ToolTraceStructure", "count_score"]

#: The score keys a result may carry (``replay``'s gates check names against them).
SCORES: Final = ("score", "call_count", "parallelism", "refusal")


@dataclass(frozen=True, slots=True)
class StructureCheck:
    name: str
    score: float
    category: Category
    explanation: str


def count_score(actual: int, reference: int, tolerance: int) -> float:
    """1 within ``tolerance``, then a linear decay over the reference count."""
    excess = abs(actual - reference) - tolerance
    if excess <= 0:
        return 1.0
    return max(0.0, 1.0 - excess / max(reference, 1))


class ToolTraceStructure:
    """The ``tool_trace_structure`` evaluator (see the module docstring)."""

    name: Final = "tool_trace_structure"

    def __init__(
        self,
        settings: StructureSettings,
        normalize: NameNormalizer,
        bound: Mapping[str, tuple[str, ...]] = NO_BOUND,
    ) -> None:
        self.settings = settings
        self._normalize = normalize
        self._bound = bound  # a dangerous tool's bound fields: its retries (loops.retried)
        self._refusal_patterns = settings.refusal_matchers()

    def __call__(self, trace: ToolTrace, reference: Reference) -> EvalResult | None:
        base = baseline(reference, self.settings.against, self._normalize)
        if base is None:
            return None
        checks = [c for c in self._checks(trace, base, reference) if c is not None]
        if not checks:
            return None
        score = sum(c.score for c in checks) / len(checks)
        findings = tuple(
            self._finding(trace, base, check, score)
            for check in checks
            if check.score < self.settings.threshold
        )
        scores = {"score": score, **{c.name: c.score for c in checks}}
        explanation = f"Structure: {pct(score)} (" + "; ".join(c.explanation for c in checks) + ")."
        return EvalResult(self.name, scores, findings, explanation)

    def _checks(
        self, trace: ToolTrace, base: Baseline, reference: Reference
    ) -> list[StructureCheck | None]:
        return [
            self._count(trace, base, reference),
            self._parallelism(trace, base),
            self._refusal(trace, base, reference),
        ]

    def _count(
        self, trace: ToolTrace, base: Baseline, reference: Reference
    ) -> StructureCheck | None:
        if base.call_count is None or base.no_tools:
            return None
        count = base.call_count
        if base.kind is ReferenceKind.SOURCE and reference.source is not None:
            count = len(acted(reference.source, self._normalize, self._bound).calls)
        made = len(acted(trace, self._normalize, self._bound).calls)
        tolerance = self.settings.call_count_tolerance
        score = count_score(made, count, tolerance)
        text = f"{made} calls"
        again = len(trace.calls) - made
        if again:
            text += f" (and {again} failed call{'s' if again != 1 else ''} made again)"
        text += f", {base.noun} {count} (tolerance {tolerance})"
        return StructureCheck("call_count", score, Category.TOOL_TRACE_STRUCTURE_DRIFT, text)

    def _parallelism(self, trace: ToolTrace, base: Baseline) -> StructureCheck | None:
        if not self.settings.check_parallelism or base.parallel is None:
            return None
        parallel = uses_parallelism(trace)
        score = 1.0 if parallel == base.parallel else 0.0
        text = f"parallel calls: {_yes(parallel)}, {base.noun}: {_yes(base.parallel)}"
        return StructureCheck("parallelism", score, Category.TOOL_TRACE_STRUCTURE_DRIFT, text)

    def _finding(
        self, trace: ToolTrace, base: Baseline, check: StructureCheck, overall: float
    ) -> Finding:
        floors = [self.settings.severity_floor]
        if check.category is Category.REFUSAL_REGRESSION:
            floors.append(Severity.HIGH)
        return make_finding(
            trace,
            category=check.category,
            evaluator=self.name,
            reference=base.kind,
            severity=severity_for(overall, *floors),
            score=check.score,
            explanation=f"Structure: {check.name} {pct(check.score)} ({check.explanation}).",
            details={"check": check.name},
        )

    def _refusal(
        self, trace: ToolTrace, base: Baseline, reference: Reference
    ) -> StructureCheck | None:
        expected = base.refusal
        if expected is None:
            return None
        refused, said = self._refused(trace)
        case = base.case
        source = reference.source if base.kind is ReferenceKind.SOURCE else None
        if source is not None:
            # Against a source, a refusal of the request: one before any call, on both sides
            # alike. After work, words, a refusal part or a content_filter finish decline a
            # part of it, as two models behind one agent each may: identical runs agree.
            expected = self._refused(source)[0] and not source.calls
            if trace.calls:
                refused, said = False, None
        elif (
            said is not None and case is not None and case.expected_refusal is None and trace.calls
        ):
            # Words alone, after the run did work, against a case that only expects work: an
            # apology for part of it ("sorry, I can't find that order"), not a refusal.
            refused, said = False, None
        score = 1.0 if refused == expected else 0.0
        if case is not None and score == 0.0:
            if not refused:
                text = "the run did not refuse a case that expects a refusal"
            elif case.expected_refusal is None:
                text = "the run refused a case that expects tool calls"
            else:
                text = "the run refused a case that expects no refusal"
        else:
            text = f"refused: {_yes(refused)}, {base.noun}: {_yes(expected)}"
        if said is not None:
            text += f"; the run's final text matches {said!r}"
        return StructureCheck("refusal", score, Category.REFUSAL_REGRESSION, text)

    def _refused(self, trace: ToolTrace) -> tuple[bool, str | None]:
        """Whether ``trace`` refused, and the pattern its final text matched when only that
        says so."""
        if trace.refusal:
            return True, None
        text = trace.final_text
        if text and self._refusal_patterns:
            said = text[:REFUSAL_TEXT_CHARS].translate(_APOSTROPHES)
            return _matching(self._refusal_patterns, said)
        return False, None


#: Apostrophes models write for ``'`` (U+2019 in "I'm sorry, but I can't", U+2018, U+02BC),
#: read as ``'`` by the patterns, which are written with the keyboard's.
_APOSTROPHES: Final = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'"})


def _matching(patterns: tuple[re.Pattern[str], ...], text: str) -> tuple[bool, str | None]:
    for pattern in patterns:
        if pattern.search(text) is not None:
            return True, pattern.pattern
    return False, None


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"
