"""``composite``: the report figures of a run against its reference (no findings): its golden
case, else its shadow source (a candidate model gated in CI against the model it replaces).

Scores (all in [0, 1]):

- ``selection``: multiset Jaccard (default) or recall of the reference's names;
- ``ordering``: as ``order`` scores it: LCS / expected length against a golden case, LCS /
  longer length against a source, the LCS over every order of each parallel group's members
  (``lineup``); 1.0 against a case whose own mode is unordered (``base.UNORDERED_MODES``);
- ``score``: ``selection * weights.selection + ordering * weights.ordering`` (0.6 / 0.4);
- ``tool_name_accuracy``: 1 if the run's name sequence equals the reference's, in some order
  of each parallel group's members, else 0;
- ``parameter_accuracy``: the ``tool_arguments`` score (absent when the reference gives no
  arguments);
- ``step_efficiency``: ``min(a, m) / max(a, m)`` with ``a`` the run's calls and ``m`` the
  case's ``expected_min_steps`` (absent when the case gives none, and against a source;
  1.0 when both are 0).

The run's calls and a source's are read as actions (``loops.acted``): a failed call the agent
made again is one call with its retry, in every figure, as ``tool_selection`` and ``order``
read them.

Against a case whose own mode is ``first`` (``base.first_only``), selection and tool-name
accuracy are 1 if the run's first call is the case's first tool, else 0, as
``tool_selection`` scores that mode: the case fixes the first call alone, so the calls after
it are neither extra nor missing.

For a case that expects no calls (``expected_no_tools``, or ``expected_tool_count: 0``)
selection, ordering and tool-name accuracy are 1 if no call was made, else 0. ``failure_type``
classifies a miss for the report: ``not_triggered`` (tools expected, none called),
``wrong_tool`` (an expected tool missing, or any call when none was expected; for a case of
mode ``first``, a first call of another tool),
``wrong_arguments`` (right tools, a scored call below the arguments threshold), or ``None`` (no
miss), against a source as against a case; the calls of a parallel group read in the order
the scores read them in (``replay`` counts these for its report). The
explanation ends with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from toolwatch.evaluation.arguments import ArgumentReport, ArgumentScorer, compare_arguments
from toolwatch.evaluation.base import (
    Baseline,
    Reference,
    Sequences,
    baseline,
    first_only,
    from_case,
    names_none,
    pct,
    sequences,
    unordered,
)
from toolwatch.evaluation.loops import NO_BOUND, acted, acted_reference
from toolwatch.evaluation.order import order_score
from toolwatch.evaluation.selection import describe, jaccard, recall
from toolwatch.evaluation.settings import CompositeSettings, ToolArgumentsSettings
from toolwatch.model_evaluation import EvalResult, GoldenCase
from toolwatch.model_traces import ToolTrace
from toolwatch.names import NameNormalizer

__all__ = [
    "FAILURE_TYPES",
    "NOT_TRIGGERED",
    "SCORES",
    "WRONG_ARGUMENTS",
    "WRONG_TOOL",
    "Composite",
    "failure_type",
    "step_efficiency",
]

NOT_TRIGGERED: Final = "not_triggered"
WRONG_TOOL: Final = "wrong_tool"
WRONG_ARGUMENTS: Final = "wrong_arguments"
FAILURE_TYPES: Final = (NOT_TRIGGERED, WRONG_TOOL, WRONG_ARGUMENTS)
#: The score keys a result may carry (``replay``'s gates check names against them).
SCORES: Final = (
    "score",
    "selection",
    "ordering",
    "tool_name_accuracy",
    "parameter_accuracy",
    "step_efficiency",
)


class Composite:
    """The ``composite`` evaluator (see the module docstring). Applies only to runs with a
    golden case or a shadow source."""

    name: Final = "composite"

    def __init__(
        self,
        settings: CompositeSettings,
        arguments: ToolArgumentsSettings,
        normalize: NameNormalizer,
        bound: Mapping[str, tuple[str, ...]] = NO_BOUND,
    ) -> None:
        self.settings = settings
        self._threshold = arguments.threshold
        self._normalize = normalize
        self._bound = bound  # a dangerous tool's bound fields: its retries (loops.retried)
        self._scorer = ArgumentScorer(arguments, normalize)

    def __call__(self, trace: ToolTrace, reference: Reference) -> EvalResult | None:
        reference = acted_reference(reference, self._normalize, self._bound)
        base = baseline(reference, "auto", self._normalize)
        if base is None:
            return None
        trace = acted(trace, self._normalize, self._bound)  # a failed call made again: one call
        lined = sequences(trace, base, self._normalize, reference)  # parallel calls in either order
        names = lined.names
        report = compare_arguments(base.calls, trace.calls, self._scorer, self._normalize)
        scores = self._scores(trace, base, lined, report)
        failure = self._failure(base, names, report)
        selected = (
            "Selection: 100% (the case names no tools)."
            if names_none(base)
            else describe(scores["selection"], base.noun, base.names, names)
        )
        explanation = (
            selected
            + f" Ordering: {pct(scores['ordering'])}. Composite: {pct(scores['score'])}"
            + f"; failure: {failure or 'none'}."
        )
        return EvalResult(self.name, scores, (), explanation)

    def failure_type(self, trace: ToolTrace, case: GoldenCase) -> str | None:
        """How ``trace`` missed ``case`` (see the module docstring), ``None`` if it did not."""
        base = from_case(case, self._normalize)
        trace = acted(trace, self._normalize, self._bound)  # as __call__ reads it
        names = sequences(trace, base, self._normalize).names
        report = compare_arguments(base.calls, trace.calls, self._scorer, self._normalize)
        return self._failure(base, names, report)

    def _scores(
        self, trace: ToolTrace, base: Baseline, lined: Sequences, report: ArgumentReport
    ) -> dict[str, float]:
        """The scores of the run and ``base`` lined up as ``order`` reads them."""
        names, reference = lined.names, lined.reference
        if base.no_tools:
            selection = ordering = exact = 0.0 if names else 1.0
        elif names_none(base):
            selection = ordering = exact = 1.0  # nothing to miss
        elif base.case is not None and first_only(base.case):
            # The case fixes the first call alone: what follows is neither extra nor missed.
            selection = exact = 1.0 if tuple(names[:1]) == tuple(reference[:1]) else 0.0
            ordering = 1.0
        else:
            metric = jaccard if self.settings.selection_metric == "jaccard" else recall
            selection = metric(names, base.names)
            if unordered(base):
                ordering = 1.0
            else:
                ordering = order_score(names, reference, base.kind, lined.common())
            exact = 1.0 if tuple(names) == tuple(reference) else 0.0
        weights = self.settings.weights
        scores = {
            "score": selection * weights.selection + ordering * weights.ordering,
            "selection": selection,
            "ordering": ordering,
            "tool_name_accuracy": exact,
        }
        if report.score is not None and not base.no_tools:
            scores["parameter_accuracy"] = report.score
        steps = base.case.expected_min_steps if base.case is not None else None
        if steps is not None:
            scores["step_efficiency"] = step_efficiency(len(trace.calls), steps)
        return scores

    def _failure(self, base: Baseline, names: Sequence[str], report: ArgumentReport) -> str | None:
        if base.no_tools:
            return WRONG_TOOL if names else None
        if not base.names:
            return None
        if not names:
            return NOT_TRIGGERED
        first = base.case is not None and first_only(base.case)
        missed = names[0] != base.names[0] if first else recall(names, base.names) < 1.0
        if missed:  # a case of mode first expects its first tool first, and no more
            return WRONG_TOOL
        scored = (c.score for r, _, c in report.pairs if r.compare_arguments)
        if any(score < self._threshold for score in scored):
            return WRONG_ARGUMENTS
        return None


def step_efficiency(actual: int, minimum: int) -> float:
    """``min(a, m) / max(a, m)``; 1.0 when both are 0."""
    longest = max(actual, minimum)
    return min(actual, minimum) / longest if longest else 1.0


def failure_type(
    trace: ToolTrace,
    case: GoldenCase,
    arguments: ToolArgumentsSettings | None = None,
    normalize: NameNormalizer | None = None,
    bound: Mapping[str, tuple[str, ...]] = NO_BOUND,
) -> str | None:
    """How ``trace`` missed ``case``: one of ``FAILURE_TYPES``, or ``None``. Arguments are
    judged with ``arguments`` (default settings), names with ``normalize`` (no aliases), and
    a failed call made again as one action by ``bound`` (``PolicySettings.action_fields``), as
    the evaluators read it."""
    composite = Composite(
        CompositeSettings(),
        arguments or ToolArgumentsSettings(),
        normalize or NameNormalizer(),
        bound,
    )
    return composite.failure_type(trace, case)
