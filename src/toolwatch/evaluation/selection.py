"""``tool_selection``: did the run call the tools the reference called?

Names are compared as sequences of normalized names; repeated calls count (multisets, never
collapsed into sets). With ``E`` the reference names and ``A`` the run's:

============  ================================================  ====================
mode          score                                             E empty, A not empty
============  ================================================  ====================
expected      LCS(E, A) / len(E): recall of E, in order          1.0 (nothing missed)
expected_set  common(E, A) / len(E): multiset recall, unordered  1.0 (nothing missed)
exact         1 if A == E else 0                                0.0
set           common(E, A) / union(E, A): multiset Jaccard      0.0
first         1 if the first names agree (or both are empty)    0.0
============  ================================================  ====================

Both sides empty always score 1.0. A golden case that names no tools and does not expect
none (only ``expected_min_steps``, ``expected_tool_count`` or ``expected_refusal``) gives
selection nothing to judge: the evaluator does not apply (``base.names_none``), so the last
column is a shadow source's that made no call. The ordered modes (``expected``, ``exact``,
``first``) read the calls issued in one parallel group, the run's or a source's, in any order
(the model asked for them at once): ``expected`` takes the LCS over every order, as ``order``
does, and ``exact`` and ``first`` agree when some order makes them (``base.sequences``).
Recall modes ignore extra calls: over-calling is judged by ``set``/``exact``, ``loops`` and
the structure's call count. A failed call the agent made again (``loops.acted``: the same
tool and arguments, or a dangerous tool's bound values, after the failure) is one call with
its retry, on the run's side and a source's alike, so a flaky tool is no extra selection
(the recall modes and ``first`` are not lowered by a retry anyway; ``set`` and ``exact``
would be).

A golden case that expects no calls (``expected_no_tools``, or ``expected_tool_count: 0``)
scores 1.0 iff no call was made; otherwise 0.0 and UNNECESSARY_TOOL_CALL (this is the only
way selection reports extra calls when nothing was expected), severity ``medium`` raised
to the floor: the score is binary, so effect size would always read critical.

Modes: the case's ``selection_mode``, else ``mode`` against golden cases; ``source_mode``
against a shadow source. One TOOL_SELECTION_DRIFT finding per run when the score is below
``threshold`` (default 1.0), naming the first missed (else first extra) tool.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Final

from toolwatch.evaluation.base import (
    Baseline,
    Reference,
    baseline,
    name_list,
    names_none,
    pct,
    sequences,
)
from toolwatch.evaluation.lcs import lcs_length
from toolwatch.evaluation.loops import NO_BOUND, acted, acted_reference
from toolwatch.evaluation.settings import ToolSelectionSettings
from toolwatch.evaluation.severity import make_finding, severity_for
from toolwatch.model import Category, Severity
from toolwatch.model_evaluation import EvalResult, Finding
from toolwatch.model_traces import ToolTrace
from toolwatch.names import NameNormalizer

__all__ = [
    "MODES",
    "ToolSelection",
    "describe",
    "difference",
    "jaccard",
    "recall",
    "selection_score",
]

MODES: Final = frozenset({"expected", "expected_set", "exact", "set", "first"})


def recall(actual: Sequence[str], expected: Sequence[str]) -> float:
    """Multiset recall of ``expected`` in ``actual``; 1.0 when nothing is expected."""
    if not expected:
        return 1.0
    return _overlap(actual, expected) / len(expected)


def jaccard(actual: Sequence[str], expected: Sequence[str]) -> float:
    """Multiset Jaccard index; 1.0 when both are empty."""
    union = sum((Counter(actual) | Counter(expected)).values())
    return _overlap(actual, expected) / union if union else 1.0


def selection_score(
    mode: str, actual: Sequence[str], expected: Sequence[str], common: int | None = None
) -> float:
    """The score of ``mode`` (see the module table). ``common``: the LCS of the two for mode
    ``expected`` when the caller has it (``Sequences.common``); else that of the sequences
    as given. Raises ``ValueError`` for an unknown mode (a golden case's ``selection_mode``
    is validated by whoever loads it)."""
    if mode == "expected":
        if not expected:
            return 1.0
        return (lcs_length(actual, expected) if common is None else common) / len(expected)
    if mode == "expected_set":
        return recall(actual, expected)
    if mode == "exact":
        return 1.0 if tuple(actual) == tuple(expected) else 0.0
    if mode == "set":
        return jaccard(actual, expected)
    if mode == "first":
        return 1.0 if tuple(actual[:1]) == tuple(expected[:1]) else 0.0
    raise ValueError(f"unknown selection mode {mode!r}; use one of {sorted(MODES)}")


def _overlap(actual: Sequence[str], expected: Sequence[str]) -> int:
    return sum((Counter(actual) & Counter(expected)).values())


def difference(left: Sequence[str], right: Sequence[str]) -> list[str]:
    """The names of ``left`` not matched in ``right`` (as multisets), in ``left``'s order."""
    spare = Counter(right)
    result = []
    for name in left:
        if spare[name]:
            spare[name] -= 1
        else:
            result.append(name)
    return result


class ToolSelection:
    """The ``tool_selection`` evaluator (see the module docstring)."""

    name: Final = "tool_selection"

    def __init__(
        self,
        settings: ToolSelectionSettings,
        normalize: NameNormalizer,
        bound: Mapping[str, tuple[str, ...]] = NO_BOUND,
    ) -> None:
        self.settings = settings
        self._normalize = normalize
        self._bound = bound  # a dangerous tool's bound fields: its retries (loops.retried)

    def mode(self, base: Baseline) -> str:
        """The mode for this baseline: source mode, else the case's own, else configured."""
        if base.case is None:
            return self.settings.source_mode
        return base.case.selection_mode or self.settings.mode

    def __call__(self, trace: ToolTrace, reference: Reference) -> EvalResult | None:
        reference = acted_reference(reference, self._normalize, self._bound)
        base = baseline(reference, self.settings.against, self._normalize)
        if base is None or names_none(base):  # names none: "called 0/0" paged critical
            return None
        trace = acted(trace, self._normalize, self._bound)  # a failed call made again: one call
        lined = sequences(trace, base, self._normalize, reference)
        names = lined.names
        if base.no_tools:
            return self._no_tools(trace, base, names)
        mode = self.mode(base)
        in_order = lined.common() if mode == "expected" else None
        score = selection_score(mode, names, lined.reference, in_order)
        explanation = describe(score, base.noun, base.names, names, in_order)
        findings: tuple[Finding, ...] = ()
        if score < self.settings.threshold:
            findings = (self._drift(trace, base, names, score, explanation),)
        return EvalResult(self.name, {"score": score}, findings, explanation)

    def _drift(
        self, trace: ToolTrace, base: Baseline, names: Sequence[str], score: float, text: str
    ) -> Finding:
        missed, extra = difference(base.names, names), difference(names, base.names)
        return make_finding(
            trace,
            category=Category.TOOL_SELECTION_DRIFT,
            evaluator=self.name,
            reference=base.kind,
            severity=severity_for(score, self.settings.severity_floor),
            score=score,
            explanation=text,
            tool=next(iter(missed + extra), None),
            details={
                "mode": self.mode(base),
                "missed": missed,
                "extra": extra,
                base.noun: list(base.names),
            },
        )

    def _no_tools(self, trace: ToolTrace, base: Baseline, names: Sequence[str]) -> EvalResult:
        if not names:
            return EvalResult(
                self.name, {"score": 1.0}, (), "Selection: 100% (no tool calls, as expected)."
            )
        explanation = (
            f"Selection: 0% (expected no tool calls, made {len(names)}: {name_list(names)})."
        )
        finding = make_finding(
            trace,
            category=Category.UNNECESSARY_TOOL_CALL,
            evaluator=self.name,
            reference=base.kind,
            severity=Severity.MEDIUM.at_least(self.settings.severity_floor),
            score=0.0,
            explanation=explanation,
            call=trace.calls[0],
            tool=names[0],
            details={"calls": list(names)},
        )
        return EvalResult(self.name, {"score": 0.0}, (finding,), explanation)


def describe(
    score: float,
    noun: str,
    expected: Sequence[str],
    actual: Sequence[str],
    in_order: int | None = None,
) -> str:
    """``Selection: 80% (called 4/5 expected tools, missed: [a], extra: [b]).``; with
    ``in_order`` (the LCS length, mode ``expected``) also ``, 3 in order``."""
    if not expected and not actual:
        return "Selection: 100% (no tool calls on either side)."
    missed, extra = difference(expected, actual), difference(actual, expected)
    text = f"Selection: {pct(score)} (called {len(expected) - len(missed)}/{len(expected)}"
    text += f" {noun} tools"
    if in_order is not None:
        text += f", {in_order} in order"
    if missed:
        text += f", missed: {name_list(missed)}"
    if extra:
        text += f", extra: {name_list(extra)}"
    return text + ")."
