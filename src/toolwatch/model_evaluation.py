"""Evaluation's records: what a run is judged against (``GoldenCase``, its
``ExpectedCall``s) and what the judging gives (``Finding``, one regression, and
``EvalResult``, one evaluator's word on one run), with the keys of a finding's details whose
argument values sinks redact (``DETAIL_FIELDS``, ``DETAIL_ERRORS``).

Part of the project's records with ``toolwatch.model`` (the clocks, the enums a finding
names, the span records) and ``model_traces`` (the ``ToolTrace`` a run is judged as).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from toolwatch.model import Category, ReferenceKind, Severity

__all__ = [
    "DETAIL_ERRORS",
    "DETAIL_FIELDS",
    "EvalResult",
    "ExpectedCall",
    "Finding",
    "GoldenCase",
]


#: The ``Finding.details`` key of argument values by field path (see ``Finding``).
DETAIL_FIELDS: Final = "fields"


#: The ``Finding.details`` key of messages that may quote argument values (see ``Finding``).
DETAIL_ERRORS: Final = "errors"


@dataclass(frozen=True, slots=True, init=False)
class Finding:
    """One regression, with a stable category and a one-line explanation.

    ``explanation`` never contains argument values; values that help a person (expected vs
    actual) go in ``details``, in one of two keys that sinks redact entry by entry unless
    configured otherwise. ``DETAIL_FIELDS`` maps an argument's field path (``"order_id"``,
    ``"items.0.sku"``; ``""`` for a whole value that is no object) to what the finding says
    of its value; ``DETAIL_ERRORS`` lists ``{"field": path or None, "message": text}`` whose
    messages may quote values. Every other key of ``details`` must hold no argument or result
    value (tool names, counts, span ids, rule labels): sinks show those as they are.

    What it was judged against, by name, so that the reference can be found from the finding
    (set by ``EvaluationPipeline``, which knows it, not by evaluators; ``None`` otherwise):
    ``case_id``, the golden case of a finding against ``expected``; ``source_trace_id`` and
    ``pair_key``, the trace id of the shadow source run and the pair key of a finding against
    ``source``. A finding against the policy names none.

    Frozen, with a written-out constructor, for the reason ``ToolTrace`` gives.
    """

    category: Category
    severity: Severity
    evaluator: str
    reference: ReferenceKind
    score: float | None
    explanation: str
    trace_id: str
    span_id: str | None = None
    tool: str | None = None
    field: str | None = None
    agent: str | None = None
    details: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    case_id: str | None = None
    source_trace_id: str | None = None
    pair_key: str | None = None

    def __init__(  # noqa: PLR0917 - the fields, in the order a dataclass would take them
        self,
        category: Category,
        severity: Severity,
        evaluator: str,
        reference: ReferenceKind,
        score: float | None,
        explanation: str,
        trace_id: str,
        span_id: str | None = None,
        tool: str | None = None,
        field: str | None = None,
        agent: str | None = None,
        details: Mapping[str, Any] | None = None,
        case_id: str | None = None,
        source_trace_id: str | None = None,
        pair_key: str | None = None,
    ) -> None:
        object.__setattr__(self, "category", category)
        object.__setattr__(self, "severity", severity)
        object.__setattr__(self, "evaluator", evaluator)
        object.__setattr__(self, "reference", reference)
        object.__setattr__(self, "score", score)
        object.__setattr__(self, "explanation", explanation)
        object.__setattr__(self, "trace_id", trace_id)
        object.__setattr__(self, "span_id", span_id)
        object.__setattr__(self, "tool", tool)
        object.__setattr__(self, "field", field)
        object.__setattr__(self, "agent", agent)
        object.__setattr__(self, "details", {} if details is None else details)
        object.__setattr__(self, "case_id", case_id)
        object.__setattr__(self, "source_trace_id", source_trace_id)
        object.__setattr__(self, "pair_key", pair_key)


@dataclass(frozen=True, slots=True, init=False)
class EvalResult:
    """What one evaluator says of one ToolTrace: named scores in [0, 1], findings, and a
    one-line explanation. Frozen, with a written-out constructor, for the reason
    ``ToolTrace`` gives (one is built per evaluator and run)."""

    evaluator: str
    scores: Mapping[str, float]
    findings: tuple[Finding, ...]
    explanation: str

    def __init__(
        self,
        evaluator: str,
        scores: Mapping[str, float],
        findings: tuple[Finding, ...],
        explanation: str,
    ) -> None:
        object.__setattr__(self, "evaluator", evaluator)
        object.__setattr__(self, "scores", scores)
        object.__setattr__(self, "findings", findings)
        object.__setattr__(self, "explanation", explanation)


@dataclass(frozen=True, slots=True)
class ExpectedCall:
    """One expected tool call of a golden case. ``arguments`` ``None`` means "any arguments";
    ``match`` names the default argument strategy for this call's fields (``exact``,
    ``subset``, ``numeric``, ``contains``, ``fuzzy``), ``None`` for the configured default;
    ``field_match`` the strategy of single fields, which wins over every other."""

    name: str
    arguments: Mapping[str, Any] | None = None
    match: str | None = None
    field_match: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class GoldenCase:
    """An expected behaviour, matched to live runs by a configured attribute (case id)."""

    case_id: str
    expected_tools: tuple[ExpectedCall, ...] = ()
    expected_no_tools: bool = False
    expected_min_steps: int | None = None
    expected_tool_count: int | None = None
    category: str | None = None
    selection_mode: str | None = None  # overrides the configured tool_selection mode
    expected_refusal: bool | None = None  # must the run refuse? None: not said
    #: The agent whose run does the case's work: runs of no other agent are matched to it
    #: (see ``references.golden.GoldenCaseSet.match``). ``None``: any run carrying the id.
    agent: str | None = None
    #: A run matched to the case is expected at least this often (a scheduled canary's
    #: period with slack); ``None``: not watched. See ``metrics.golden_case_judged``.
    expected_every_seconds: float | None = None

    @property
    def expects_no_calls(self) -> bool:
        """``expected_no_tools``, or an ``expected_tool_count`` of 0 naming no tools: every
        evaluator reads the two alike."""
        return self.expected_no_tools or (self.expected_tool_count == 0 and not self.expected_tools)
