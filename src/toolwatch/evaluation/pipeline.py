"""The evaluation pipeline: the configured evaluators, built once, run on each ToolTrace.

``EvaluationPipeline.evaluate`` runs every enabled evaluator in a fixed order
(``EVALUATOR_ORDER``). Each runs isolated: an exception becomes a ``failures`` entry (the
evaluator's name and ``Type: message``) and never propagates; the others still run. Durations
are measured here with ``time.perf_counter`` around each call (the evaluators stay pure).

Evaluators that compare with a reference run only when the run has one they accept
(``against``: ``auto`` takes either, ``expected`` or ``source`` only that one; ``composite``
takes a golden case, else a source). Policy evaluators always run: ``safety`` when the
policy names dangerous tools or allowed tools, ``loops`` always, ``invariants`` when rules are
configured. An evaluator that returns ``None`` (not applicable) contributes no result but is
timed. One evaluator raises at most ``MAX_FINDINGS`` findings on one run: the earliest of
each category and reference, then the rest in call order; its explanation says how many more
there were (a run of thousands of unverified refunds pages as surely with a hundred, and each
finding is held in every stream subscriber's queue), and no kind of finding is lost behind a
flood of another (a DANGEROUS_ACTION_DRIFT behind a hundred MISSING_VERIFICATION_STEPs).

Each finding names what it was judged against, here, where the reference is known (the
evaluators stay unaware of it): one against ``expected`` its golden case (``case_id``), one
against ``source`` the shadow source's trace id (``source_trace_id``) and the pair key
(``pair_key``); one against the policy names none.

Thread-safety: a pipeline holds only immutable state once built; ``evaluate`` may be called
from several threads.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from toolwatch.evaluation.arguments import ToolArguments
from toolwatch.evaluation.base import Evaluator, Reference
from toolwatch.evaluation.composite import Composite
from toolwatch.evaluation.invariants import Invariants
from toolwatch.evaluation.loops import Loops
from toolwatch.evaluation.order import Order
from toolwatch.evaluation.safety import Safety
from toolwatch.evaluation.selection import ToolSelection
from toolwatch.evaluation.settings import Against, EvaluationSettings
from toolwatch.evaluation.severity import incomplete_note
from toolwatch.evaluation.structure import ToolTraceStructure
from toolwatch.model import ReferenceKind
from toolwatch.model_evaluation import EvalResult, Finding, GoldenCase
from toolwatch.model_traces import ToolTrace, Verified

__all__ = [
    "EVALUATOR_ORDER",
    "MAX_FINDINGS",
    "EvaluationPipeline",
    "PipelineResult",
    "build_evaluators",
]

# Read once: ``time.perf_counter`` looked up on the module costs more than the call, twice
# per evaluator per run.
_PERF_COUNTER: Final = time.perf_counter

#: Every evaluator name, in run order (also the label values of the evaluator metrics).
EVALUATOR_ORDER: Final = (
    "tool_selection",
    "tool_arguments",
    "tool_trace_structure",
    "order",
    "safety",
    "loops",
    "invariants",
    "composite",
)
_MAX_FAILURE_MESSAGE: Final = 200
#: Findings one evaluator raises on one run at most (module docstring).
MAX_FINDINGS: Final = 100
_NEEDS: Final[Mapping[Against, frozenset[ReferenceKind]]] = {
    "auto": frozenset({ReferenceKind.EXPECTED, ReferenceKind.SOURCE}),
    "expected": frozenset({ReferenceKind.EXPECTED}),
    "source": frozenset({ReferenceKind.SOURCE}),
}
_NO_REFERENCE: Final[frozenset[ReferenceKind]] = frozenset()


@dataclass(frozen=True, slots=True, init=False)
class PipelineResult:
    """What the pipeline says of one run. ``durations`` maps each evaluator that ran to its
    wall time in seconds; ``failures`` lists ``(evaluator, "Type: message")`` of those that
    raised. Frozen, with a written-out constructor, for the reason ``ToolTrace`` gives (one
    is built per run)."""

    results: tuple[EvalResult, ...]
    findings: tuple[Finding, ...]
    failures: tuple[tuple[str, str], ...]
    durations: Mapping[str, float]

    def __init__(
        self,
        results: tuple[EvalResult, ...],
        findings: tuple[Finding, ...],
        failures: tuple[tuple[str, str], ...],
        durations: Mapping[str, float],
    ) -> None:
        object.__setattr__(self, "results", results)
        object.__setattr__(self, "findings", findings)
        object.__setattr__(self, "failures", failures)
        object.__setattr__(self, "durations", durations)


@dataclass(frozen=True, slots=True)
class _Entry:
    name: str
    evaluator: Evaluator
    needs: frozenset[ReferenceKind]  # empty: policy-based, always runs
    policy_only: bool = False  # judges the policy alone, never a reference
    #: The references it compares with when it has them (its ``against``; ``safety``'s
    #: drift check's); ``None`` for a custom evaluator, which may read any.
    reads: frozenset[ReferenceKind] | None = frozenset()


def build_evaluators(settings: EvaluationSettings) -> tuple[tuple[str, Evaluator], ...]:
    """The enabled evaluators, by name, in ``EVALUATOR_ORDER``."""
    return tuple((e.name, e.evaluator) for e in _entries(settings))


def _entries(settings: EvaluationSettings) -> list[_Entry]:
    entries = _comparing(settings) + _policy(settings)
    composite = settings.evaluators.composite
    if composite.enabled:
        policy = settings.policy
        evaluator = Composite(
            composite,
            settings.evaluators.tool_arguments,
            policy.normalizer(),
            policy.action_fields(),
        )
        entries.append(_Entry(Composite.name, evaluator, _NEEDS["auto"], reads=_NEEDS["auto"]))
    return entries


def _comparing(settings: EvaluationSettings) -> list[_Entry]:
    config, normalize = settings.evaluators, settings.policy.normalizer()
    bound = settings.policy.action_fields()  # a failed dangerous call retried: one action
    entries: list[_Entry] = []
    selection, arguments = config.tool_selection, config.tool_arguments
    structure, order = config.tool_trace_structure, config.order
    if selection.enabled:
        entries.append(_compares(ToolSelection(selection, normalize, bound), selection.against))
    if arguments.enabled:
        entries.append(_compares(ToolArguments(arguments, normalize, bound), arguments.against))
    if structure.enabled:
        evaluator = ToolTraceStructure(structure, normalize, bound)
        entries.append(_compares(evaluator, structure.against))
    if order.enabled:
        entries.append(_compares(Order(order, normalize, bound), order.against))
    return entries


def _compares(
    evaluator: ToolSelection | ToolArguments | ToolTraceStructure | Order, against: Against
) -> _Entry:
    return _Entry(evaluator.name, evaluator, _NEEDS[against], reads=_NEEDS[against])


def _policy(settings: EvaluationSettings) -> list[_Entry]:
    policy, config = settings.policy, settings.evaluators
    entries: list[_Entry] = []
    if config.safety.enabled and (policy.dangerous_tools or policy.allowed_tools):
        reads = _NEEDS[config.safety.against]  # its drift check's
        entries.append(_Entry(Safety.name, Safety(config.safety, policy), frozenset(), reads=reads))
    if config.loops.enabled:
        entries.append(_Entry(Loops.name, Loops(config.loops, policy), frozenset(), True))
    if config.invariants.enabled and policy.invariants:
        invariants = Invariants(config.invariants, policy)
        entries.append(_Entry(Invariants.name, invariants, frozenset(), True))
    return entries


class EvaluationPipeline:
    """Runs the configured evaluators on ToolTraces (see the module docstring).

    ``extra`` adds custom evaluators, ``(name, evaluator)``, run after the configured ones on
    every run, isolated like them (an embedding's own checks; tests use it to inject one that
    raises).
    """

    __slots__ = ("_entries", "rescored")

    def __init__(
        self, settings: EvaluationSettings, *, extra: Iterable[tuple[str, Evaluator]] = ()
    ) -> None:
        custom = (_Entry(name, evaluator, frozenset(), reads=None) for name, evaluator in extra)
        self._entries = (*_entries(settings), *custom)
        #: The built-in evaluators that judge every run alone and that ``policy=False`` may run
        #: again (``safety``, for its drift against the source): a second pass over a run
        #: scores them again. Custom evaluators are not in it: the pair's pass may be their
        #: only look at the source.
        self.rescored = frozenset(
            e.name
            for e in self._entries
            if not e.needs and not e.policy_only and e.name in EVALUATOR_ORDER
        )

    @property
    def evaluator_names(self) -> tuple[str, ...]:
        """The evaluators this pipeline runs, in order."""
        return tuple(e.name for e in self._entries)

    def evaluate(
        self,
        trace: ToolTrace,
        expected: GoldenCase | None = None,
        source: ToolTrace | None = None,
        *,
        policy: bool = True,
        earlier: tuple[Verified, ...] = (),
        pair_key: str | None = None,
    ) -> PipelineResult:
        """Evaluate ``trace`` against its golden case and/or shadow source, and the policy.

        ``policy=False`` is a shadow pair's pass (the server's and ``replay``'s) over a
        target judged when it arrived against the policy, and against its golden case if it
        had one (passed again as ``expected``): only the evaluators that compare it with its
        source there run (``_compares_with_source``), and their findings against the policy
        (``safety``'s) are left out. ``earlier``: ``Reference.earlier``. ``pair_key``: the
        shadow pair's key, which findings against ``source`` name with its trace id."""
        reference = Reference(expected, source, earlier)
        available = _available(reference)
        results: list[EvalResult] = []
        failures: list[tuple[str, str]] = []
        durations: dict[str, float] = {}
        for entry in self._entries:
            # ``isdisjoint`` is a generic method call in compiled code: not for a run with
            # no reference (most), which no evaluator that needs one judges.
            if entry.needs and (not available or entry.needs.isdisjoint(available)):
                continue
            if not policy and not _compares_with_source(entry, reference):
                continue
            started = _PERF_COUNTER()
            try:
                result = entry.evaluator(trace, reference)
            except Exception as error:  # isolate: one broken evaluator must not stop the rest
                failures.append((entry.name, _describe(error)))
                result = None
            durations[entry.name] = _PERF_COUNTER() - started
            if result is None:
                continue
            if not policy:
                result = _without_policy(result)
            if len(result.findings) > MAX_FINDINGS:
                result = _cut(result, trace)
            results.append(_named(result, reference, pair_key))
        findings = tuple(f for r in results for f in r.findings)
        return PipelineResult(tuple(results), findings, tuple(failures), durations)


def _compares_with_source(entry: _Entry, reference: Reference) -> bool:
    """Whether ``entry`` runs in a shadow pair's pass (``policy=False``): whether it may
    compare the run with its source there. One that judges the policy alone judged the run
    when it arrived. So did one that takes the golden case when the run has one (``against``
    ``auto`` or ``expected``), and it would read that case again, not the source: ``auto``
    is the run's golden case, else its source. A custom evaluator runs: the pair's pass may
    be its only look at the source."""
    reads = entry.reads
    if reads is None:
        return True
    if ReferenceKind.SOURCE not in reads:
        return False
    return ReferenceKind.EXPECTED not in reads or reference.expected is None


def _named(result: EvalResult, reference: Reference, pair_key: str | None) -> EvalResult:
    """``result`` with each of its findings against a golden case or a shadow source naming
    it: the case's id, or the source run's trace id and the pair key (module docstring)."""
    expected, source = reference.expected, reference.source
    if not result.findings or (expected is None and source is None):
        return result
    case_id = expected.case_id if expected is not None else None
    source_trace_id = source.trace_id if source is not None else None
    named = tuple(_name(f, case_id, source_trace_id, pair_key) for f in result.findings)
    if all(new is old for new, old in zip(named, result.findings, strict=True)):
        return result
    return EvalResult(result.evaluator, result.scores, named, result.explanation)


def _name(
    finding: Finding, case_id: str | None, source_trace_id: str | None, pair_key: str | None
) -> Finding:
    kind = finding.reference
    if kind is ReferenceKind.EXPECTED and case_id is not None:
        if finding.case_id == case_id:
            return finding
        return dataclasses.replace(finding, case_id=case_id)
    if kind is ReferenceKind.SOURCE and source_trace_id is not None:
        if (finding.source_trace_id, finding.pair_key) == (source_trace_id, pair_key):
            return finding
        return dataclasses.replace(finding, source_trace_id=source_trace_id, pair_key=pair_key)
    return finding


def _without_policy(result: EvalResult) -> EvalResult:
    """``result`` without its findings against the policy (judged once, on arrival)."""
    findings = result.findings
    if all(f.reference is not ReferenceKind.POLICY for f in findings):
        return result
    kept = tuple(f for f in findings if f.reference is not ReferenceKind.POLICY)
    return EvalResult(result.evaluator, result.scores, kept, result.explanation)


def _cut(result: EvalResult, trace: ToolTrace) -> EvalResult:
    """``MAX_FINDINGS`` findings, in the evaluator's order: the earliest (in call order) of
    each category and reference, then the earliest of the rest. The result's explanation and
    the last one kept (what the findings log, the stream and an alert show) say how many
    more there were."""
    findings = result.findings
    position = {call.span_id: index for index, call in enumerate(trace.calls) if call.span_id}

    def when(index: int) -> tuple[int, int]:  # run-level findings (no call) first
        return position.get(findings[index].span_id or "", -1), index

    earliest = sorted(range(len(findings)), key=when)
    chosen: dict[tuple[str, str], int] = {}
    for index in earliest:
        chosen.setdefault((findings[index].category, findings[index].reference), index)
    ranked = dict.fromkeys([*chosen.values(), *earliest])  # each kind's earliest, the rest
    keep = set(list(ranked)[:MAX_FINDINGS])
    more = len(findings) - MAX_FINDINGS
    note = f" ({more} more findings on this run not raised)"
    kept = [finding for index, finding in enumerate(findings) if index in keep]
    kept[-1] = dataclasses.replace(kept[-1], explanation=_before_note(kept[-1], note, trace))
    return EvalResult(result.evaluator, result.scores, tuple(kept), result.explanation + note)


def _before_note(finding: Finding, more: str, trace: ToolTrace) -> str:
    """``finding``'s explanation with ``more`` added before the note of an incomplete run
    (``incomplete_note``): that note ends every explanation of such a run's findings."""
    explanation, note = finding.explanation, incomplete_note(trace)
    if note and explanation.endswith(note):
        return explanation[: -len(note)] + more + note
    return explanation + more


def _available(reference: Reference) -> frozenset[ReferenceKind]:
    if reference.expected is None and reference.source is None:
        return _NO_REFERENCE  # a run judged by the policy alone: no set built
    kinds = set()
    if reference.expected is not None:
        kinds.add(ReferenceKind.EXPECTED)
    if reference.source is not None:
        kinds.add(ReferenceKind.SOURCE)
    return frozenset(kinds)


def _describe(error: Exception) -> str:
    message = f"{type(error).__name__}: {error}"
    if len(message) > _MAX_FAILURE_MESSAGE:
        return message[: _MAX_FAILURE_MESSAGE - 1] + "…"
    return message
