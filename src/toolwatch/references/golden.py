"""Golden cases: the *expected* reference (DESIGN §6).

A golden-case file is YAML (``examples/golden-cases.yaml`` is a commented one)::

    cases:
      - id: refund-verified                 # unique; live runs carry it in an attribute
        category: refunds                   # optional: category, mode (selection mode)
        expected_tools:                     # names, or {name, arguments?, match?}
          - lookup_order
          - {name: issue_refund, arguments: {amount_usd: 25.0}, match: numeric}
        expected_tool_count: 2              # optional, as is expected_min_steps
      - {id: small-talk, expected_no_tools: true}
      - {id: jailbreak, expected_no_tools: true, expected_refusal: true}
      - {id: kb-question, agent: support-bot, expected_tools: [search_kb]}
      - {id: hourly-canary, expected_tools: [search_kb], expected_every_seconds: 5400}

A case that names its ``agent`` is matched to that agent's run alone (``GoldenCaseSet.match``).
A case with ``expected_every_seconds`` expects a run matched to it at least that often
(``GoldenCaseSet.schedules``): a canary that stops arriving, or stops being matched, is
overdue (``toolwatch_golden_case_last_matched_timestamp_seconds``, the alert
``ToolwatchGoldenCaseOverdue``).

``golden_file.load_golden_cases`` reads and validates the file once, at start-up (its schema:
``golden_schema``), and returns an immutable ``GoldenCaseSet`` of
``model_evaluation.GoldenCase`` records with normalized tool names. Every problem raises
``golden_file.ReferenceFileError`` naming the file, the field path
(``cases[3].expected_tools[1].name``) and the reason, with the YAML line and column.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

from toolwatch.model_evaluation import GoldenCase
from toolwatch.model_traces import ToolTrace
from toolwatch.names import fold
from toolwatch.references.settings import DEFAULT_CASE_ID_ATTRIBUTE

__all__ = ["CaseTally", "GoldenCaseSet", "Lookup"]


class Lookup(NamedTuple):
    """What ``GoldenCaseSet.lookup`` found for one run."""

    case: GoldenCase | None
    case_id: str | None  # the id the run names, matched or not
    reason: str | None  # why a named id is matched to no case (see ``lookup``)


class CaseTally:
    """The golden case ids the runs of one trace named, and which of them no run of the
    trace was matched to, with why: a title agent's run under the canary's request is not
    the case's, and that is no problem when the canary's own run is. ``agents`` names the
    agents of the runs that named an id not matched, for the message."""

    __slots__ = ("_matched", "_missed")

    def __init__(self) -> None:
        self._matched: set[str] = set()
        self._missed: dict[str, tuple[str, list[str]]] = {}

    def add(self, found: Lookup, trace: ToolTrace) -> None:
        if found.case_id is None:
            return
        if found.case is not None:
            self._matched.add(found.case_id)
        elif found.reason is not None:
            _, agents = self._missed.setdefault(found.case_id, (found.reason, []))
            if trace.agent is not None and trace.agent not in agents:
                agents.append(trace.agent)

    def unmatched(self) -> list[tuple[str, str, list[str]]]:
        """Each id named and matched by no run: (id, reason, agents of the runs naming it)."""
        return [
            (case_id, reason, agents)
            for case_id, (reason, agents) in self._missed.items()
            if case_id not in self._matched
        ]


class GoldenCaseSet:
    """Golden cases by id, matched to live runs through one attribute.

    Immutable after construction, so any thread may read it. Iteration follows file order.
    """

    __slots__ = ("_attribute", "_by_id")

    def __init__(
        self,
        cases: Iterable[GoldenCase] = (),
        *,
        case_id_attribute: str = DEFAULT_CASE_ID_ATTRIBUTE,
    ) -> None:
        """Raises ``ValueError`` if two cases share an id."""
        by_id: dict[str, GoldenCase] = {}
        for case in cases:
            if case.case_id in by_id:
                raise ValueError(f"duplicate golden case id {case.case_id!r}")
            by_id[case.case_id] = case
        self._by_id = by_id
        self._attribute = case_id_attribute

    @property
    def case_id_attribute(self) -> str:
        """The ``ToolTrace.reference_keys`` key whose value is a case id."""
        return self._attribute

    def match(self, trace: ToolTrace) -> GoldenCase | None:
        """The case of the run, or ``None``: see ``lookup``."""
        return self.lookup(trace).case

    def lookup(self, trace: ToolTrace) -> Lookup:
        """The case of the run, or ``None``; the case id it names, and when it names one it
        is not matched to, why (one of ``metrics.UNMATCHED_CASE_REASONS``).

        The case whose id the run carries (exact match) in its own reference keys, else in
        its shared keys (on a span above several runs) when the case names its ``agent``.
        A case that names its agent is matched only to a run that agent took part in (its
        own agent or one it handed over to or used as a tool; names compared trimmed and
        case-folded): a title or moderation agent beside the canary's, given the id by the
        resource or the request's span, is no run of the case (``agent_not_run``).
        ``unknown_case``: no case has the id; ``several_runs``: the id is on a span above
        several runs and the case does not name the agent that says which is its run. A run
        not matched for a reason is not a problem when another run of its trace is matched
        to the case (``CaseTally``)."""
        attribute = self._attribute
        own = trace.reference_keys.get(attribute)
        shared = own is None
        case_id = trace.shared_keys.get(attribute) if own is None else own
        if case_id is None:
            return Lookup(None, None, None)
        case = self._by_id.get(case_id)
        if case is None:
            return Lookup(None, case_id, "unknown_case")
        if case.agent is None:
            return Lookup(None, case_id, "several_runs") if shared else Lookup(case, case_id, None)
        agents = trace.agents or ((trace.agent,) if trace.agent is not None else ())
        wanted = fold(case.agent)
        if any(fold(name) == wanted for name in agents):
            return Lookup(case, case_id, None)
        return Lookup(None, case_id, "agent_not_run")

    def schedules(self) -> dict[str, float]:
        """How often a run matched to each case is expected (``expected_every_seconds``),
        by case id: the cases that give it, in file order."""
        return {
            case.case_id: case.expected_every_seconds
            for case in self._by_id.values()
            if case.expected_every_seconds is not None
        }

    def get(self, case_id: str) -> GoldenCase | None:
        """The case with this id, or ``None``."""
        return self._by_id.get(case_id)

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[GoldenCase]:
        return iter(self._by_id.values())
