"""``order``: were the tools called in the reference's order?

The score is the length of the longest common subsequence (LCS) of the two name sequences,
divided by the expected length against a golden case (extra calls do not lower it) or by the
longer length against a source run (either side's extras do). Both sides empty score 1.0; an
empty golden sequence scores 1.0 (there is no order to break). A failed call the agent made
again (``loops.acted``) is one call with its retry, on the run's side and a source's: against
a source a retry would otherwise lengthen the longer side, so a flaky tool read as drift
(against a case, the run's extra calls never lower the score).

Calls issued in one parallel group have no order among themselves, so the LCS is the best
over every order of each group's members, on either side: ``max over those orders of
LCS(run, reference)``. ``lineup`` computes it exactly, and says where, past a bound, it takes
an upper bound instead: a score that errs, errs high, and never pages a run that kept its
order. So the same parallel calls started the other way round are not drift, nor is a tool
called before its group and again in it.

One TOOL_ORDER_DRIFT finding per run below ``threshold`` (default 1.0), naming the first
position where the sequences, so lined up, diverge: its ``span_id`` and ``tool`` are the
run's call there (the call out of place, "called send_email"), or, where the run ended
before the reference did, no span and the reference's tool it did not call. A golden case
whose own ``mode`` is unordered (``expected_set``, ``set``, ``first``: its author said the
order does not matter) is not judged for order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from toolwatch.evaluation.base import (
    Baseline,
    Reference,
    Sequences,
    baseline,
    pct,
    sequences,
    unordered,
)
from toolwatch.evaluation.lcs import lcs_length
from toolwatch.evaluation.loops import NO_BOUND, acted, acted_reference
from toolwatch.evaluation.settings import OrderSettings
from toolwatch.evaluation.severity import make_finding, severity_for
from toolwatch.model import Category, ReferenceKind
from toolwatch.model_evaluation import EvalResult, Finding
from toolwatch.model_traces import ToolTrace
from toolwatch.names import NameNormalizer

__all__ = ["Order", "first_divergence", "order_score"]


def order_score(
    actual: Sequence[str], reference: Sequence[str], kind: ReferenceKind, common: int | None = None
) -> float:
    """LCS / |reference| against a golden case, LCS / longer length against a source.
    ``common``: the LCS when the caller has it (``Sequences.common``: over every order of
    each side's parallel groups); else that of the two sequences as given."""
    if kind is ReferenceKind.SOURCE:
        denominator = max(len(actual), len(reference))
    else:
        denominator = len(reference)
    if not denominator:
        return 1.0
    return (lcs_length(actual, reference) if common is None else common) / denominator


def first_divergence(actual: Sequence[str], reference: Sequence[str]) -> int | None:
    """The first index where the sequences differ (one may end there), ``None`` if equal."""
    for i, (x, y) in enumerate(zip(actual, reference, strict=False)):
        if x != y:
            return i
    return None if len(actual) == len(reference) else min(len(actual), len(reference))


class Order:
    """The ``order`` evaluator (see the module docstring)."""

    name: Final = "order"

    def __init__(
        self,
        settings: OrderSettings,
        normalize: NameNormalizer,
        bound: Mapping[str, tuple[str, ...]] = NO_BOUND,
    ) -> None:
        self.settings = settings
        self._normalize = normalize
        self._bound = bound  # a dangerous tool's bound fields: its retries (loops.retried)

    def __call__(self, trace: ToolTrace, reference: Reference) -> EvalResult | None:
        reference = acted_reference(reference, self._normalize, self._bound)
        base = baseline(reference, self.settings.against, self._normalize)
        if base is None or base.no_tools or unordered(base):
            return None
        run = trace
        trace = acted(trace, self._normalize, self._bound)  # a failed call made again: one call
        lined = sequences(trace, base, self._normalize, reference)
        common = lined.common()
        score = order_score(lined.names, lined.reference, base.kind, common)
        if base.kind is ReferenceKind.SOURCE:  # of the longer of the two, as it is scored
            made = f"the source made {len(lined.reference)}, the run {len(lined.names)}"
            again = len(run.calls) - len(trace.calls)
            if again:
                made += f" (and {again} failed call{'s' if again > 1 else ''} made again)"
            longer = max(len(lined.names), len(lined.reference))
            explanation = f"Ordering: {pct(score)} ({common} of {longer} calls in order; {made})."
        else:
            explanation = (
                f"Ordering: {pct(score)} ({common}/{len(base.names)} {base.noun} calls in order)."
            )
        findings: tuple[Finding, ...] = ()
        if score < self.settings.threshold:
            findings = (self._drift(run, base, lined, score, explanation),)
        return EvalResult(self.name, {"score": score}, findings, explanation)

    def _drift(
        self, trace: ToolTrace, base: Baseline, lined: Sequences, score: float, text: str
    ) -> Finding:
        """``trace``: the run as it came, whose calls ``lined`` reads (less the failed calls
        it made again): the divergence is numbered by the run's own calls."""
        names, reference = lined.names, lined.reference
        at = first_divergence(names, reference) or 0
        expected = reference[at] if at < len(reference) else None
        actual = names[at] if at < len(names) else None
        number = len(trace.calls) + 1
        if actual is not None:
            number = next(i for i, c in enumerate(trace.calls) if c is lined.calls[at]) + 1
        return make_finding(
            trace,
            category=Category.TOOL_ORDER_DRIFT,
            evaluator=self.name,
            reference=base.kind,
            severity=severity_for(score, self.settings.severity_floor),
            score=score,
            explanation=f"{text[:-1]}, first divergence at call {number}: "
            f"{base.noun} {expected or '(none)'}, called {actual or '(none)'}.",
            call=lined.calls[at] if actual is not None else None,
            # The call named, as span_id names it (the page's tool label): not the tool the
            # reference expected there, which the run may well have called, in its place.
            tool=actual or expected,
            details={base.noun: list(reference), "actual": list(names)},
        )
