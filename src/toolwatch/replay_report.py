"""The offline replay report: its figures, rendered as text or JSON, and its gates (parsed
here; the results aggregated and the gates applied by ``toolwatch.replay_builder``).

Figures: per-evaluator mean scores, each over the runs that have it (``n`` is the runs the
evaluator scored; a figure such as ``composite.step_efficiency`` only some of them have is the
mean over those), the composite report figures (tool-name accuracy, parameter accuracy, step
efficiency) over runs that matched a golden case or a shadow source, a per-category breakdown
(the golden case's ``category``), the failed cases with expected vs actual tool names, the
failure-type distribution and findings by category and severity.

A golden case failed when ``composite`` gives its run a failure type (``not_triggered``,
``wrong_tool``, ``wrong_arguments``) or, the tools being right, when the run raised a finding
against the case (a wrong order, a refusal where none was expected or the reverse, a wrong
call count): its failure type is then that finding's category.

Findings are counted by category and severity as they come; the findings themselves, which only
the JSON report lists, are kept as ``replay_builder.ReportBuilder``'s ``listing`` says:
``kept`` in memory (a caller that reads ``Report.finding_list``), ``spooled`` to an unnamed
temporary file (``replay --format json``: memory does not grow with them; ``replay_listing``)
or only ``counted`` (the text report).
"""

from __future__ import annotations

import io
import json
import math
import secrets
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO, Any, Literal

from toolwatch.evaluation import composite, structure
from toolwatch.evaluation.pipeline import EVALUATOR_ORDER
from toolwatch.model import Category
from toolwatch.replay_listing import Spool
from toolwatch.tail_format import terminal_text

__all__ = ["ANY", "FailedCase", "Gate", "Listing", "Report", "parse_gate"]

#: What ``replay_builder.ReportBuilder`` keeps of the findings (module docstring).
Listing = Literal["kept", "spooled", "counted"]

#: A ``max`` gate's target that counts the findings of every category.
ANY = "any"
#: The score keys of each evaluator (the others have ``score`` alone).
_SCORES: dict[str, tuple[str, ...]] = {
    "composite": composite.SCORES,
    "tool_trace_structure": structure.SCORES,
}


@dataclass(frozen=True, slots=True)
class Gate:
    """``min``: a mean score must be at least ``limit``; ``max``: findings of a category (or
    ``any``) must be at most ``limit``."""

    kind: Literal["min", "max"]
    target: str
    limit: float

    def describe(self) -> str:
        sign = ">=" if self.kind == "min" else "<="
        what = f"mean {self.target}" if self.kind == "min" else f"{self.target} findings"
        return f"{what} {sign} {self.limit:g}"


def parse_gate(text: str, kind: Literal["min", "max"]) -> Gate:
    """Parse ``NAME=NUMBER``. Raises ``ValueError`` naming the problem."""
    name, sep, number = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise ValueError(f"gate {text!r} is not NAME=NUMBER")
    try:
        limit = float(number)
    except ValueError:
        raise ValueError(f"gate {text!r}: {number!r} is not a number") from None
    if kind == "max":
        categories = {str(c) for c in Category}
        if name != ANY and name not in categories:
            raise ValueError(f"gate {text!r}: {name!r} is not a category or {ANY!r}")
        if not limit >= 0 or math.isinf(limit):  # NaN fails the comparison
            raise ValueError(f"gate {text!r}: a maximum is a count of findings, 0 or more")
        if not limit.is_integer():  # 1.5 would read as 1 and look like a typo's fix
            raise ValueError(
                f"gate {text!r}: a maximum is a count of findings, a whole number (0, 1, 2, ...)"
            )
        return Gate(kind, name, limit)
    if not 0.0 <= limit <= 1.0:
        raise ValueError(f"gate {text!r}: a minimum score is between 0 and 1")
    evaluator, _, score = name.partition(".")
    if evaluator not in EVALUATOR_ORDER:
        known = ", ".join(EVALUATOR_ORDER)
        raise ValueError(f"gate {text!r}: {evaluator!r} is not an evaluator ({known})")
    scores = _SCORES.get(evaluator, ("score",))
    if score and score not in scores:
        known = ", ".join(scores)
        raise ValueError(f"gate {text!r}: {evaluator} has no score {score!r} ({known})")
    return Gate(kind, name, limit)


@dataclass(frozen=True, slots=True)
class FailedCase:
    case_id: str
    trace_id: str
    failure_type: str
    expected: tuple[str, ...]
    actual: tuple[str, ...]


@dataclass
class Report:
    """What ``replay`` prints. ``passed`` is false when any gate failed."""

    traces: int
    scores: dict[str, dict[str, float]]
    findings: dict[str, dict[str, int]]
    categories: dict[str, dict[str, float]]
    failure_types: dict[str, int]
    failed_cases: list[FailedCase]
    gates: list[tuple[Gate, float, bool]]
    evaluator_failures: dict[str, int] = field(default_factory=dict)
    # When kept in memory: each finding as listed (``replay_listing.finding_dict``).
    finding_list: list[dict[str, Any]] = field(default_factory=list)
    listing: Listing = "kept"
    spooled: Spool | None = field(default=None, repr=False, compare=False)
    incomplete: dict[str, int] = field(default_factory=dict)  # reason -> runs
    duplicates: int = 0  # runs read again (same trace and run span), skipped
    # Case ids that the runs of a trace named and none of them was matched to -> traces: not
    # in the file; on a span above several runs, of a case naming no agent; of a case
    # naming an agent none of those runs is.
    unknown_case_ids: dict[str, int] = field(default_factory=dict)
    case_ids_above_runs: dict[str, int] = field(default_factory=dict)
    case_ids_agent_not_run: dict[str, int] = field(default_factory=dict)
    cases_not_run: list[str] = field(default_factory=list)  # no complete run matched them
    # Shadow sources (the serving model's runs): evaluated apart, their findings not gated.
    sources: int = 0
    source_findings: dict[str, int] = field(default_factory=dict)  # category -> findings
    source_finding_list: list[dict[str, Any]] = field(default_factory=list)  # kept: listed
    spooled_sources: Spool | None = field(default=None, repr=False, compare=False)
    shadow_unpaired: dict[str, int] = field(default_factory=dict)  # reason -> halves
    cases_source_only: list[str] = field(default_factory=list)  # of cases_not_run: by a source

    @property
    def passed(self) -> bool:
        return all(ok for _gate, _value, ok in self.gates)

    def to_json(self) -> str:
        """The JSON report (``write_json``) as one string."""
        out = io.StringIO()
        self.write_json(out)
        return out.getvalue()

    def write_json(self, out: IO[str]) -> None:
        """Write the JSON report to ``out``, its findings one at a time (from the spool, when
        they were spooled). Raises ``ValueError`` if they were only counted."""
        if self.listing == "counted":
            raise ValueError("the findings were counted, not listed: no JSON report")
        # Where the findings go, until written there one by one: no text of the input's
        # (a case id is a key below) can be it.
        listed = f"\x00findings-{secrets.token_hex(16)}\x00"
        listed_sources = f"\x00source-findings-{secrets.token_hex(16)}\x00"
        text = json.dumps(
            {
                "passed": self.passed,
                "traces": self.traces,
                "scores": self.scores,
                "findings_by_category": self.findings,
                "categories": self.categories,
                "failure_types": self.failure_types,
                "failed_cases": [_failed_dict(c) for c in self.failed_cases],
                "gates": [  # value null: nothing was measured (no run was scored)
                    {"gate": g.describe(), "value": None if math.isnan(v) else v, "passed": ok}
                    for g, v, ok in self.gates
                ],
                "evaluator_failures": self.evaluator_failures,
                "findings": listed,
                "incomplete": self.incomplete,
                "duplicates": self.duplicates,
                "shadow_sources": {
                    "runs": self.sources,
                    "findings": self.source_findings,
                    "finding_list": listed_sources,
                },
                "shadow_unpaired": self.shadow_unpaired,
                "cases_source_only": self.cases_source_only,
                "unknown_case_ids": self.unknown_case_ids,
                "case_ids_above_runs": self.case_ids_above_runs,
                "case_ids_agent_not_run": self.case_ids_agent_not_run,
                "cases_not_run": self.cases_not_run,
            },
            indent=2,
            sort_keys=True,
            allow_nan=False,  # NaN is not JSON
        )
        lists = {
            json.dumps(listed): self.spooled.records() if self.spooled else self.finding_list,
            json.dumps(listed_sources): (
                self.spooled_sources.records() if self.spooled_sources else self.source_finding_list
            ),
        }
        for placeholder in sorted(lists, key=text.index):  # in the document's order
            head, text = text.split(placeholder)
            out.write(head)
            line = head[head.rfind("\n") + 1 :]
            _write_list(out, lists[placeholder], len(line) - len(line.lstrip(" ")))
        out.write(text)

    def _input_notes(self) -> list[str]:
        """What the figures below leave out, under the header line."""
        notes = []
        if not self.traces:
            notes.append("  no run in the input: every gate fails")
        if self.incomplete:
            notes.append(
                f"  {_counted(self.incomplete, ' incomplete')}: judged by the policy only, not"
                " against golden cases or shadow sources"
            )
        if self.duplicates:
            notes.append(f"  {self.duplicates} run(s) read more than once, evaluated once")
        if self.sources:
            found = _counted(self.source_findings, " finding(s)") if self.source_findings else ""
            notes.append(
                f"  {self.sources} shadow source run(s) (the serving model) evaluated apart:"
                f" {found or 'no finding'}; not in the figures or gates below"
            )
        if self.shadow_unpaired:
            notes.append(
                f"  {_counted(self.shadow_unpaired, ' shadow run(s)')} never compared: a target"
                " among them is judged by the policy only"
            )
        return notes

    def to_text(self) -> str:
        lines = [f"toolwatch replay: {self.traces} ToolTrace(s) evaluated", *self._input_notes()]
        lines += ["", "Scores (mean)"]
        for evaluator, scores in sorted(self.scores.items()):
            shown = "  ".join(f"{k}={v:.3f}" for k, v in sorted(scores.items()) if k != "n")
            lines.append(f"  {evaluator:<22} n={int(scores['n']):<5} {shown}")
        lines += ["", "Findings by category"]
        for category, by_severity in sorted(self.findings.items()):
            shown = ", ".join(f"{s}={n}" for s, n in sorted(by_severity.items()))
            lines.append(f"  {category:<28} {sum(by_severity.values()):>5}  ({shown})")
        if self.categories:
            lines += ["", "Golden cases by category"]
            for name, figures in sorted(self.categories.items()):
                composite = figures.get("composite")
                lines.append(
                    f"  {name:<22} runs={int(figures['runs'])} failed={int(figures['failed'])}"
                    + (f" composite={composite:.3f}" if composite is not None else "")
                )
        unmatched = (self.unknown_case_ids, self.case_ids_above_runs, self.case_ids_agent_not_run)
        if any(unmatched) or self.cases_not_run:
            lines += ["", "Golden cases not exercised"]
            for ids, said in (
                (self.unknown_case_ids, "named in {} trace(s), not in the golden-case file"),
                (
                    self.case_ids_above_runs,
                    "named above several runs in {} trace(s), none said to be its: name the"
                    " case's agent",
                ),
                (
                    self.case_ids_agent_not_run,
                    "named in {} trace(s) by runs of other agents than the case's",
                ),
            ):  # ids spans named: escaped, their senders chose them
                lines += [f"  {terminal_text(i)}: {said.format(n)}" for i, n in sorted(ids.items())]
            lines += [
                f"  {case_id}: "
                + (
                    "run by a shadow source only (the serving model)"
                    if case_id in self.cases_source_only
                    else "no complete run"
                )
                for case_id in self.cases_not_run
            ]
        if self.failure_types:
            lines += ["", "Failure types"]
            lines += [f"  {k:<16} {v}" for k, v in sorted(self.failure_types.items())]
        if self.failed_cases:
            lines += ["", "Failed cases"]
            for case in self.failed_cases:
                lines.append(
                    f"  {case.case_id} trace={case.trace_id} {case.failure_type}:"
                    f" expected {list(case.expected)} got {list(case.actual)}"
                )
        if self.gates:
            lines += ["", "Gates"]
            for gate, value, ok in self.gates:
                verdict = "PASS" if ok else "FAIL"
                unmeasured = "no run was evaluated" if not self.traces else "no run was scored"
                actual = unmeasured if math.isnan(value) else f"actual {value:g}"
                lines.append(f"  {verdict} {gate.describe()} ({actual})")
        return "\n".join(lines)


def _write_list(out: IO[str], records: Iterable[dict[str, Any]], indent: int) -> None:
    """``records`` as ``json.dumps(..., indent=2)`` writes a list whose key is indented by
    ``indent`` spaces, one at a time."""
    written = 0
    for record in records:
        text = json.dumps(record, indent=2, sort_keys=True, allow_nan=False)
        out.write(("[\n" if not written else ",\n") + textwrap.indent(text, " " * (indent + 2)))
        written += 1
    out.write(f"\n{' ' * indent}]" if written else "[]")


def _counted(counts: dict[str, int], noun: str) -> str:
    """``3 things (a=1, b=2)``: the total, then each count by name."""
    by_name = ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))
    return f"{sum(counts.values())}{noun} ({by_name})"


def _failed_dict(case: FailedCase) -> dict[str, Any]:
    return {
        "case_id": case.case_id,
        "trace_id": case.trace_id,
        "failure_type": case.failure_type,
        "expected": list(case.expected),
        "actual": list(case.actual),
    }
