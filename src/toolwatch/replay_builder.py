"""The offline replay report, built: ``ReportBuilder`` takes each run's evaluation results as
replay reads them, counts its findings and keeps what its ``listing`` says (the module
docstring of ``toolwatch.replay_report``), then ``build`` computes the means and applies the
gates to the ``Report``.

Memory: per finding, nothing unless ``kept``; per run, its scores summed and the ids of the
golden cases a trace's runs named (``CaseTally``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from toolwatch.evaluation.composite import failure_type
from toolwatch.evaluation.pipeline import PipelineResult
from toolwatch.evaluation.settings import EvaluationSettings
from toolwatch.metrics import UNMATCHED_CASE_REASONS
from toolwatch.model import Category, ReferenceKind, Traffic
from toolwatch.model_evaluation import Finding, GoldenCase
from toolwatch.model_traces import ToolTrace
from toolwatch.references.golden import CaseTally, GoldenCaseSet
from toolwatch.replay_listing import Spool, finding_dict
from toolwatch.replay_report import ANY, FailedCase, Gate, Listing, Report
from toolwatch.sinks.findings import Redaction

__all__ = ["ReportBuilder"]


#: A mean this close below a minimum meets it: 4.8 / 6 is 0.7999999999999999.
_TOLERANCE = 1e-9


class ReportBuilder:
    """Accumulates results trace by trace; ``build`` computes means and applies gates.
    With ``golden``, it also tells which case ids runs named that the file does not hold,
    and which cases no complete run exercised. ``listing`` says what it keeps of the
    findings (module docstring): what it holds per finding is nothing unless ``kept``;
    ``redaction`` what the listed findings show of argument values (the findings log's)."""

    def __init__(
        self,
        settings: EvaluationSettings,
        gates: Sequence[Gate],
        golden: GoldenCaseSet | None = None,
        *,
        listing: Listing = "kept",
        redaction: Redaction | None = None,
    ) -> None:
        self._settings = settings
        self._gates = list(gates)
        self._golden = golden
        self._incomplete: Counter[str] = Counter()
        self._duplicates = 0
        self._tallies: dict[str, CaseTally] = {}  # the case ids each trace's runs named
        self._exercised: set[str] = set()
        self._traces = 0
        self._sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self._key_counts: dict[str, Counter[str]] = defaultdict(Counter)
        self._counts: Counter[str] = Counter()
        self._listing: Listing = listing
        self._redaction = redaction or Redaction()
        self._by_category: dict[str, Counter[str]] = defaultdict(Counter)  # -> severity
        self._findings: list[dict[str, Any]] = []  # kept: each as listed
        self._spool = Spool() if listing == "spooled" else None
        self._category_runs: Counter[str] = Counter()
        self._categories: dict[str, list[float]] = defaultdict(list)  # composite scores
        self._category_failed: Counter[str] = Counter()
        self._failure_types: Counter[str] = Counter()
        self._failed: list[FailedCase] = []
        self._evaluator_failures: Counter[str] = Counter()
        self._sources = 0
        self._source_findings: Counter[str] = Counter()
        self._source_list: list[dict[str, Any]] = []  # kept: each as listed
        self._source_spool = Spool() if listing == "spooled" else None
        self._source_cases: set[str] = set()
        self._unpaired: dict[str, int] = {}

    def add(
        self,
        trace: ToolTrace,
        case: GoldenCase | None,
        result: PipelineResult,
        *,
        source: bool = False,
        traffic: Traffic = Traffic.LIVE,
    ) -> None:
        """One run and its results; ``traffic`` is the run's (``shadow``: a shadow target's,
        as ``serve`` labels it). A shadow ``source`` (the serving model's run, the reference
        a candidate is judged against) is counted apart: its findings are the serving
        model's, not the candidate's, listed (``live``, as ``serve`` emits them) but read by
        no gate."""
        if source:
            self._sources += 1
            self._source_findings.update(str(f.category) for f in result.findings)
            for finding in result.findings:
                self._list(trace, finding, Traffic.LIVE, self._source_spool, self._source_list)
            if case is not None:  # run, but by the serving model: said apart
                self._source_cases.add(case.case_id)
            for evaluator, _message in result.failures:
                self._evaluator_failures[evaluator] += 1
            return
        self._traces += 1
        self._take(trace, result, None, traffic)
        if not trace.complete:
            self._incomplete[trace.incomplete_reason or "unknown"] += 1
        if case is not None:
            self._exercised.add(case.case_id)
            self._add_case(trace, case, result)
        if self._golden is not None and trace.complete:
            found = self._golden.lookup(trace)
            if found.case_id is not None:  # only the traces that name an id are held
                tally = self._tallies.get(trace.trace_id)
                if tally is None:
                    tally = self._tallies[trace.trace_id] = CaseTally()
                tally.add(found, trace)

    def duplicate(self) -> None:
        """A run read a second time, not evaluated again."""
        self._duplicates += 1

    def unpaired(self, counts: dict[str, int]) -> None:
        """Shadow halves never compared, by reason."""
        self._unpaired = dict(counts)

    def add_pair(
        self,
        result: PipelineResult,
        kind: ReferenceKind,
        *,
        rescored: frozenset[str],
        target: ToolTrace,
    ) -> None:
        """A shadow pair, ``target`` its candidate's run: only what was judged against the
        source counts. The target's own scores from the evaluators its pair's pass ran again
        (``rescored``, the pipeline's) and its policy findings were counted when it was
        added on its own."""
        self._take(target, result, kind, Traffic.SHADOW, rescored)

    def _take(
        self,
        trace: ToolTrace,
        result: PipelineResult,
        only: ReferenceKind | None,
        traffic: Traffic,
        skip: frozenset[str] = frozenset(),
    ) -> None:
        for evaluated in result.results:
            if evaluated.evaluator in skip:
                continue
            self._counts[evaluated.evaluator] += 1
            for key, value in evaluated.scores.items():
                self._sums[evaluated.evaluator][key] += value
                self._key_counts[evaluated.evaluator][key] += 1
        for finding in result.findings:
            if only is not None and finding.reference is not only:
                continue
            self._by_category[str(finding.category)][str(finding.severity)] += 1
            self._list(trace, finding, traffic, self._spool, self._findings)
        for evaluator, _message in result.failures:
            self._evaluator_failures[evaluator] += 1

    def _list(
        self,
        trace: ToolTrace,
        finding: Finding,
        traffic: Traffic,
        spool: Spool | None,
        kept: list[dict[str, Any]],
    ) -> None:
        """``finding`` of run ``trace`` listed as ``listing`` says: to ``spool``, to ``kept``
        or, counted only, nowhere."""
        if spool is not None:
            spool.add(finding_dict(trace, finding, traffic, self._redaction))
        elif self._listing == "kept":
            kept.append(finding_dict(trace, finding, traffic, self._redaction))

    def _add_case(self, trace: ToolTrace, case: GoldenCase, result: PipelineResult) -> None:
        category = case.category or "uncategorized"
        composite = next((r for r in result.results if r.evaluator == "composite"), None)
        self._category_runs[category] += 1
        if composite is not None:  # composite disabled: no mean to give
            self._categories[category].append(composite.scores["score"])
        policy = self._settings.policy
        normalize = policy.normalizer()
        arguments = self._settings.evaluators.tool_arguments
        failure = failure_type(trace, case, arguments, normalize, policy.action_fields())
        if failure is None:
            against = [f.category for f in result.findings if f.reference is ReferenceKind.EXPECTED]
            if not against:
                return
            # The tools were right: in an ordered mode, tool_selection's finding on the same
            # fault (fewer expected calls in order) reads as the wrong tools; order names it.
            order = Category.TOOL_ORDER_DRIFT
            failure = str(order if order in against else against[0])
        self._category_failed[category] += 1
        self._failure_types[failure] += 1
        expected = tuple(normalize(call.name) for call in case.expected_tools)
        self._failed.append(
            FailedCase(case.case_id, trace.trace_id, failure, expected, trace.tool_names)
        )

    def build(self) -> Report:
        for spool in (self._spool, self._source_spool):
            if spool is not None:
                spool.seal()  # its error before a byte of the report: OSError, told
        scores = {
            name: {
                "n": float(n),
                **{k: v / self._key_counts[name][k] for k, v in self._sums[name].items()},
            }
            for name, n in self._counts.items()
        }
        categories: dict[str, dict[str, float]] = {}
        for name, runs in self._category_runs.items():
            figures = {"runs": float(runs), "failed": float(self._category_failed[name])}
            scored = self._categories.get(name)
            if scored:
                figures["composite"] = sum(scored) / len(scored)
            categories[name] = figures
        unmatched: dict[str, Counter[str]] = {
            reason: Counter() for reason in UNMATCHED_CASE_REASONS
        }
        for tally in self._tallies.values():
            for case_id, reason, _agents in tally.unmatched():
                unmatched[reason][case_id] += 1
        report = Report(
            traces=self._traces,
            scores=scores,
            findings={k: dict(v) for k, v in self._by_category.items()},
            categories=categories,
            failure_types=dict(self._failure_types),
            failed_cases=self._failed,
            gates=[],
            evaluator_failures=dict(self._evaluator_failures),
            finding_list=self._findings,
            listing=self._listing,
            spooled=self._spool,
            incomplete=dict(self._incomplete),
            duplicates=self._duplicates,
            unknown_case_ids=dict(unmatched["unknown_case"]),
            case_ids_above_runs=dict(unmatched["several_runs"]),
            case_ids_agent_not_run=dict(unmatched["agent_not_run"]),
            cases_not_run=[
                case.case_id for case in self._golden or () if case.case_id not in self._exercised
            ],
            sources=self._sources,
            source_findings=dict(self._source_findings),
            source_finding_list=self._source_list,
            spooled_sources=self._source_spool,
            shadow_unpaired=self._unpaired,
            cases_source_only=sorted(self._source_cases - self._exercised),
        )
        report.gates = [_apply(gate, report) for gate in self._gates]
        return report


def _apply(gate: Gate, report: Report) -> tuple[Gate, float, bool]:
    if report.traces == 0:
        return gate, float("nan"), False  # an empty input proves nothing: a failed export
    if gate.kind == "max":
        counts = report.findings
        if gate.target == ANY:
            total = sum(sum(v.values()) for v in counts.values())
        else:
            total = sum(counts.get(gate.target, {}).values())
        return gate, float(total), total <= gate.limit
    evaluator, _, score = gate.target.partition(".")
    value = report.scores.get(evaluator, {}).get(score or "score")
    if value is None:
        return gate, float("nan"), False  # a gate on something never measured fails
    return gate, value, value >= gate.limit - _TOLERANCE
