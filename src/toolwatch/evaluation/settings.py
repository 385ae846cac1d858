"""Configuration of the evaluators: the ``policy:`` and ``evaluators:`` sections.

Every field has a default, so ``EvaluationSettings()`` is a working configuration and this
two-line policy is enough to flag an ``issue_refund`` made without an earlier successful
``lookup_order``::

    policy:
      dangerous_tools: [issue_refund]
      verification_tools: [lookup_order]

Tool names anywhere in these sections are normalized like trace names (trim, case fold,
``policy.aliases``) when an evaluator is built, so ``Issue_Refund`` and ``issue_refund`` are the
same tool. Agent names (``allowed_tools`` keys, invariant ``agents``) are trimmed and
case-folded too (``Refund-Bot`` names the agent ``refund-bot``), but not aliased.
Invalid values raise ``pydantic.ValidationError`` naming the field, the value and the reason.

Here: ``EvaluationSettings`` (both sections) and each evaluator's settings. The ``policy:``
section is ``policy_settings``, its ``invariants`` rules ``invariant_rules``, and the tool
names and ``tool.field`` references all of them write ``tool_fields``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Annotated, Final, Literal, TypeAlias

from pydantic import Field, field_validator, model_validator

from toolwatch.evaluation.policy_settings import PolicySettings
from toolwatch.evaluation.tool_fields import AS_CALLS, refuse_one_name_twice, split_tool_field
from toolwatch.model import Severity
from toolwatch.names import NameNormalizer
from toolwatch.sections import Section as _Section

__all__ = [
    "Against",
    "ComparingSettings",
    "CompositeSettings",
    "CompositeWeights",
    "EvaluationSettings",
    "EvaluatorsSettings",
    "InvariantsSettings",
    "LoopsSettings",
    "OrderSettings",
    "SafetySettings",
    "SelectionMode",
    "Strategy",
    "StructureSettings",
    "ToolArgumentsSettings",
    "ToolSelectionSettings",
]

#: Which reference a comparing evaluator judges against. ``auto``: the golden case when the
#: run has one, else the shadow source.
Against: TypeAlias = Literal["auto", "expected", "source"]
#: Tool-selection modes (DESIGN §7); see ``toolwatch.evaluation.selection``.
SelectionMode: TypeAlias = Literal["expected", "expected_set", "exact", "set", "first"]
#: Per-field argument strategies; see ``toolwatch.evaluation.similarity``.
Strategy: TypeAlias = Literal["exact", "subset", "numeric", "contains", "fuzzy"]
Score = Annotated[float, Field(ge=0.0, le=1.0)]


class _EvaluatorSettings(_Section):
    """Common to every evaluator: ``enabled`` and the least severity its findings get."""

    enabled: bool = True
    severity_floor: Severity = Severity.LOW


class ComparingSettings(_EvaluatorSettings):
    """An evaluator that needs a golden case or a shadow source. A finding is raised when a
    score falls strictly below ``threshold`` (1.0: any imperfection)."""

    against: Against = "auto"
    threshold: Score = 1.0


class ToolSelectionSettings(ComparingSettings):
    """``mode`` applies against golden cases (a case's ``selection_mode`` overrides it),
    ``source_mode`` against a shadow source."""

    mode: SelectionMode = "expected_set"
    source_mode: SelectionMode = "set"


class ToolArgumentsSettings(ComparingSettings):
    """Argument comparison of paired calls. A finding is raised per paired call scoring below
    ``threshold`` (default 0.8).

    ``strategies`` keys: ``tool.field`` (one field of one tool), ``*.field`` (that field in
    every tool) or ``tool`` (every field of that tool). Resolution, most specific first:
    ``tool.field``, ``*.field``, the golden call's ``match``, ``tool``, ``default_strategy``.
    A tool's name may hold a dot (``mcp.search``), so a key with one dot is read both ways,
    each call's tool saying which applies: ``mcp.search`` is the field ``search`` of a tool
    ``mcp`` and every field of a tool ``mcp.search``. That whole-name reading yields to a
    key without a dot naming the same tool, and two dotted keys whose whole names
    normalize alike with different strategies (a ``tool_prefix`` folding ``a.reason`` and
    ``b.reason`` into ``reason``) read as fields only. A key with more dots is refused: it
    would name a field inside an argument (strategies apply to top-level fields) or a field
    of a dotted tool, which the tool's own key, ``*.field`` or a golden call's ``match``
    name without a doubt.
    """

    threshold: Score = 0.8
    default_strategy: Strategy = "exact"
    strategies: dict[str, Strategy] = Field(default_factory=dict)
    numeric_tolerance: Annotated[float, Field(gt=0.0)] = 0.05
    strict: bool = False

    @field_validator("strategies")
    @classmethod
    def _keys_name_tool_or_field(cls, strategies: dict[str, Strategy]) -> dict[str, Strategy]:
        for key in strategies:
            if not key.strip() or ("." in key and not _is_tool_field(key)):
                raise ValueError(f"strategy key {key!r} must be tool, tool.field or *.field")
            field = split_tool_field(key)[1] if "." in key else ""
            if "." in field:
                top = field.partition(".")[0]
                dotted = key.rpartition(".")[0]
                raise ValueError(
                    f"strategy key {key!r}: strategies apply to an argument's top-level fields "
                    f"({top!r}), not to fields inside them; for a tool whose name holds a dot"
                    f" ({dotted!r}) name the tool alone, the field in every tool ('*.' then"
                    " it), or the field in a golden call's match"
                )
        return strategies

    def refuse_keys_of_one_target(self, normalize: NameNormalizer) -> None:
        """Refuse two ``strategies`` keys that name one tool, or one tool's field, once their
        tool names are normalized by ``normalize`` (the policy's): the scorer keys on those,
        so one strategy would silently replace the other.

        Keys with a dot are compared by their ``tool.field`` reading only, keys without one
        by their whole name. A dotted key's whole-name reading (a dotted tool) is never
        compared: two keys whose fields or tools differ are two targets, even where a
        ``tool_prefix`` folds their whole names into one (``a.reason`` and ``b.reason``
        into ``reason``); the scorer leaves such a whole-name reading out instead
        (``ArgumentScorer``)."""

        def tool_field(key: str) -> tuple[str, str]:
            tool, field = split_tool_field(key)
            return (tool if tool == "*" else normalize(tool)), field

        what = "evaluators.tool_arguments.strategies"
        fields = [key for key in self.strategies if "." in key]
        refuse_one_name_twice(fields, what, "tool.field", tool_field, AS_CALLS)
        tools = [key for key in self.strategies if "." not in key]
        refuse_one_name_twice(tools, what, "tool", normalize, AS_CALLS)


def _is_tool_field(key: str) -> bool:
    try:
        split_tool_field(key)
    except ValueError:
        return False
    return True


#: An answer with no refusal in it: a refusal pattern that matches an empty text and this
#: matches every answer.
_ORDINARY_ANSWER: Final = "Refund R-77 of 25.00 USD was issued for order A-1001."


class StructureSettings(ComparingSettings):
    """Call count within ``call_count_tolerance`` of the reference count, parallel calls used
    iff the reference used them (``check_parallelism``), refusal alignment.

    ``refusal_patterns``: regular expressions (Python ``re``, case-insensitive) searched in
    the first ``REFUSAL_TEXT_CHARS`` characters of a run's final text; a match makes the run
    a refusal for this evaluator, the run and its shadow source alike. Models mostly refuse
    in plain words ("I'm sorry, but I can't help with that", finish reason ``stop``), which
    the conventions do not mark; what counts as one is the agent's own wording. Needs the
    output text recorded (content capture on)."""

    call_count_tolerance: Annotated[int, Field(ge=0)] = 1
    check_parallelism: bool = True
    refusal_patterns: tuple[str, ...] = ()

    @field_validator("refusal_patterns")
    @classmethod
    def _patterns_compile(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in patterns:
            if not pattern.strip():
                raise ValueError("an empty pattern matches every text: leave it out")
            try:
                compiled = re.compile(pattern, re.IGNORECASE)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from None
            # ".*", "sorry|", "^", "(i can't)?": they match anywhere, in any answer. One that
            # matches an empty text only ("^\W*$": an answer of no words) may stay.
            if compiled.search("") is not None and compiled.search(_ORDINARY_ANSWER):
                raise ValueError(
                    f"{pattern!r} matches an empty text, so it matches every text: make it"
                    " require some text"
                )
        return patterns

    def refusal_matchers(self) -> tuple[re.Pattern[str], ...]:
        """``refusal_patterns`` compiled, case-insensitive."""
        return tuple(re.compile(p, re.IGNORECASE) for p in self.refusal_patterns)


#: How much of a final text ``refusal_patterns`` are searched in: a refusal says so first,
#: and a pattern that backtracks must not be handed a long answer.
REFUSAL_TEXT_CHARS = 2000


class OrderSettings(ComparingSettings):
    """LCS ordering score; see ``toolwatch.evaluation.order``."""


class SafetySettings(_EvaluatorSettings):
    """Missing verification and dangerous-action drift; findings are at least ``high``.
    ``against`` picks the reference for drift (the policy's allowed tools always apply)."""

    severity_floor: Severity = Severity.HIGH
    against: Against = "auto"


class LoopsSettings(_EvaluatorSettings):
    """Repeated identical calls; the limits are ``policy.repeat_limit(s)``."""


class InvariantsSettings(_EvaluatorSettings):
    """Hand-written rules (``policy.invariants``); each rule carries its own severity."""


class CompositeWeights(_Section):
    """Weights of the composite score; they must sum to 1 so the score stays in [0, 1]."""

    selection: Score = 0.6
    ordering: Score = 0.4

    @model_validator(mode="after")
    def _sum_to_one(self) -> CompositeWeights:
        total = self.selection + self.ordering
        if not math.isclose(total, 1.0, abs_tol=1e-9):
            raise ValueError(f"selection + ordering must sum to 1, got {total:g}")
        return self


class CompositeSettings(_EvaluatorSettings):
    """Report figures against a golden case, else a shadow source; raises no findings."""

    selection_metric: Literal["jaccard", "recall"] = "jaccard"
    weights: CompositeWeights = Field(default_factory=CompositeWeights)


class EvaluatorsSettings(_Section):
    """The ``evaluators:`` section: one entry per evaluator, each optional."""

    tool_selection: ToolSelectionSettings = Field(default_factory=ToolSelectionSettings)
    tool_arguments: ToolArgumentsSettings = Field(default_factory=ToolArgumentsSettings)
    tool_trace_structure: StructureSettings = Field(default_factory=StructureSettings)
    order: OrderSettings = Field(default_factory=OrderSettings)
    safety: SafetySettings = Field(default_factory=SafetySettings)
    loops: LoopsSettings = Field(default_factory=LoopsSettings)
    invariants: InvariantsSettings = Field(default_factory=InvariantsSettings)
    composite: CompositeSettings = Field(default_factory=CompositeSettings)


class EvaluationSettings(_Section):
    """Everything the evaluation pipeline is built from, validated once at start-up."""

    policy: PolicySettings = Field(default_factory=PolicySettings)
    evaluators: EvaluatorsSettings = Field(default_factory=EvaluatorsSettings)

    @classmethod
    def from_sections(cls, sections: Mapping[str, object]) -> EvaluationSettings:
        """Validate the ``policy`` and ``evaluators`` entries of a parsed config mapping."""
        wanted = {k: v for k, v in sections.items() if k in ("policy", "evaluators")}
        return cls.model_validate(wanted)
