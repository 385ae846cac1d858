"""The ``invariants`` evaluator's checks, one per kind of rule, and what they find: a
``Violation`` of a rule (``rule_label`` names it) on the calls the rule judges (``Calls``).

- ``count_violations``: ``forbidden``, ``required`` and ``call_count`` (a failed call made
  again counts once with its retry, ``loops.retried``);
- ``order_violations``: ``order`` (earlier as ``concurrency`` says it);
- ``argument_violations``: ``arguments`` (JSON Schema; one violation per request run again
  with the same arguments, ``attempts``).

What each finds, and which a run evaluated unfinished leaves out, is told in ``invariants``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator

from toolwatch.evaluation.attempts import (
    ATTEMPT_SPANS,
    Flagged,
    attempts_said,
    has_rerun,
    one_per_request,
)
from toolwatch.evaluation.base import (
    name_list,
)
from toolwatch.evaluation.concurrency import Concurrency
from toolwatch.evaluation.invariant_rules import (
    ArgumentsRule,
    CallCountRule,
    ForbiddenRule,
    Invariant,
    OrderRule,
    RequiredRule,
)
from toolwatch.evaluation.loops import NO_BOUND, call_key, retried
from toolwatch.model import CallStatus
from toolwatch.model_evaluation import DETAIL_ERRORS
from toolwatch.model_traces import ToolCall
from toolwatch.names import NameNormalizer

__all__ = [
    "Calls",
    "Violation",
    "argument_violations",
    "count_violations",
    "order_violations",
    "rule_label",
]

_MAX_SCHEMA_ERRORS: Final = 5


@dataclass(frozen=True, slots=True)
class Violation:
    rule: Invariant
    label: str
    explanation: str
    call: ToolCall | None = None
    tool: str | None = None
    field: str | None = None
    details: dict[str, Any] | None = None


def rule_label(rule: Invariant) -> str:
    """The rule's ``name``, else ``kind:tool`` (``order:before<after``)."""
    if rule.name:
        return rule.name
    if isinstance(rule, OrderRule):
        return f"order:{rule.before}<{rule.after}"
    return f"{rule.kind}:{rule.tool}"


@dataclass(frozen=True, slots=True)
class Calls:
    """The calls a rule judges (all of the run's, or those its agents made), their normalized
    names, their places in the run, and the run's ``Concurrency`` (built from all its calls:
    a scoped rule's calls may be nested in calls it does not judge)."""

    calls: Sequence[ToolCall]
    names: Sequence[str]
    places: Sequence[int]
    concurrency: Concurrency


def count_violations(
    rule: ForbiddenRule | RequiredRule | CallCountRule,
    label: str,
    calls: Sequence[ToolCall],
    names: Sequence[str],
    normalize: NameNormalizer,
    *,
    bound: Mapping[str, tuple[str, ...]] = NO_BOUND,
    complete: bool = True,
) -> list[Violation]:
    tool = normalize(rule.tool)
    count = names.count(tool)
    made_again: frozenset[int] = frozenset()
    if not isinstance(rule, RequiredRule) and count:
        # A failed call made again is one action: a refund that failed and was retried is
        # not two refunds, and its retry is the attempt that may have gone through.
        made_again = frozenset(i for i in retried(calls, names, bound) if names[i] == tool)
    # A forbidden tool's failed attempt still counts: it was tried.
    merged = len(made_again) if isinstance(rule, CallCountRule) else 0
    count -= merged
    problem = _count_problem(rule, tool, count, complete=complete)
    if problem is None:
        return []
    named = _over(rule, tool, calls, names, made_again)
    details: dict[str, Any] = {"count": count}
    # Of those, the failed ones: a success the framework recorded again (``rerun``) is
    # no failure, only not a second action.
    again = sum(calls[i].status is not CallStatus.OK for i in made_again) if merged else 0
    if again:
        details["retried_failures"] = again
        problem += f" (and {again} failed call{'s' if again != 1 else ''} made again)"
    text = f"{label}: {problem}"
    return [Violation(rule, label, text, named, tool, details=details)]


def _over(
    rule: ForbiddenRule | RequiredRule | CallCountRule,
    tool: str,
    calls: Sequence[ToolCall],
    names: Sequence[str],
    made_again: frozenset[int],
) -> ToolCall | None:
    """The call a violation of ``rule`` names: past a ``call_count`` maximum (a forbidden
    tool's is 0), the first action over it, counted as the rule counts (``made_again``:
    failed calls of ``tool`` made again, each one action with its retry), and of that action
    the call counted, its last attempt (the one that may have gone through, as ``safety``
    flags a dangerous call beyond its reference's); else the first call of ``tool`` (a
    minimum missed), ``None`` when there is none."""
    limit = rule.max if isinstance(rule, CallCountRule) else None
    if isinstance(rule, ForbiddenRule):
        limit = 0
    counted = 0
    first = None
    for i, name in enumerate(names):  # not zip(strict=True): generic in compiled code
        if name != tool:
            continue
        if first is None:
            first = calls[i]
        if limit is None:
            break
        if i not in made_again:
            counted += 1
            if counted > limit:
                return calls[i]
    return first


def _count_problem(
    rule: ForbiddenRule | RequiredRule | CallCountRule, tool: str, count: int, *, complete: bool
) -> str | None:
    """What is wrong with calling ``tool`` ``count`` times under ``rule``, or ``None``. In
    an incomplete run (not ``complete``) too few calls are nothing wrong: the rest may have
    been still to come."""
    if isinstance(rule, ForbiddenRule):
        return f"{tool} called {count} times" if count else None
    if isinstance(rule, RequiredRule):
        return None if count or not complete else f"{tool} never called"
    if _within(count, rule) or (not complete and count < rule.min):
        return None
    upper = "unbounded" if rule.max is None else rule.max
    return f"{tool} called {count} times, allowed [{rule.min}, {upper}]"


def _within(count: int, rule: CallCountRule) -> bool:
    return count >= rule.min and (rule.max is None or count <= rule.max)


def order_violations(
    rule: OrderRule,
    label: str,
    judged: Calls,
    run: Calls,
    normalize: NameNormalizer,
    *,
    earlier_lost: bool = False,
) -> list[Violation] | None:
    """The first call of ``after`` among ``judged`` (the rule's agents' calls) that no
    earlier call of ``before`` anywhere in the ``run`` could have informed: a scoped rule
    judges its agents' ``after`` calls, and credits a ``before`` made by another agent of
    the run (a sub-agent's lookup), as ``safety`` credits a verification. In a run whose
    earlier spans never came (``earlier_lost``) such a call is not judged (``None``), even
    one called alongside a ``before``: an earlier ``before`` may be among those spans, as
    ``safety`` leaves out its verification."""
    before, after = normalize(rule.before), normalize(rule.after)
    if after not in judged.names:
        return []
    scoped = None if judged is run else frozenset(judged.places)
    names = run.names
    by = f" by agents {name_list(rule.agents)}" if rule.agents else ""
    befores = run.concurrency.successes()  # the run places of the calls of before so far
    for place, call in enumerate(run.calls):
        name = names[place]
        if name == after and (scoped is None or place in scoped) and not befores.informs(place):
            if earlier_lost:
                return None
            if befores:
                text = f"{label}: {after} called{by} alongside {before}, not after it"
            else:
                text = f"{label}: {after} called{by} before any {before}"
                text += " in the run" if by else ""
            return [Violation(rule, label, text, call, after)]
        if name == before:
            befores.add(place)
    return []


def argument_violations(
    rule: ArgumentsRule,
    *,
    label: str,
    validator: Validator,
    calls: Sequence[ToolCall],
    names: Sequence[str],
    normalize: NameNormalizer,
) -> list[Violation]:
    tool = normalize(rule.tool)
    violations = []
    violating: list[ToolCall] = []  # their calls
    for i, call in enumerate(calls):  # not zip(strict=True): generic in compiled code
        if names[i] != tool or call.arguments is None:
            continue
        errors = list(validator.iter_errors(call.arguments))
        if not errors:
            continue
        path = _declared_path(errors[0])
        where = f" at {path}" if path else ""
        text = f"{label}: {tool} arguments fail the schema{where} ({errors[0].validator})"
        if call.arguments_error is not None:  # the raw text: cut at ingest, or never JSON
            text += (
                f": they are not JSON ({call.arguments_error}; values longer than"
                " ingest.max_value_bytes are cut)"
            )
        shown = [
            {"field": _declared_path(e), "message": e.message} for e in errors[:_MAX_SCHEMA_ERRORS]
        ]
        details: dict[str, Any] = {DETAIL_ERRORS: shown}
        violations.append(Violation(rule, label, text, call, tool, path, details))
        violating.append(call)
    if len(violating) > 1 and has_rerun(violating):
        return _one_per_request(violations, violating, calls, names)
    return violations


def _one_per_request(
    violations: list[Violation],
    violating: list[ToolCall],
    calls: Sequence[ToolCall],
    names: Sequence[str],
) -> list[Violation]:
    """``violations`` of an ``arguments`` rule (``violating[k]``: the call of
    ``violations[k]``) with those of one request's attempts with the same arguments (the
    schema judged them alike) merged into the violation of the attempt that went through
    (``attempts.one_per_request``); an attempt that recorded other arguments is judged on
    its own."""
    flagged: list[Flagged] = [(call, call_key("", call.arguments)) for call in violating]
    merged = []
    for k, attempts in one_per_request(flagged, calls, names):
        violation = violations[k]
        if len(attempts) > 1:
            violation = replace(
                violation,
                explanation=f"{violation.explanation} ({attempts_said(attempts)})",
                details={**(violation.details or {}), ATTEMPT_SPANS: [a.span_id for a in attempts]},
            )
        merged.append(violation)
    return merged


def _declared_path(error: ValidationError) -> str | None:
    """Where in the arguments ``error`` is, as far as the schema names it: the instance
    path's array indexes and the property names the schema declares (each appears in the
    schema path after ``properties``), up to the first key that comes from the data (an
    ``additionalProperties`` or ``patternProperties`` key: a customer's e-mail address is a
    value, not a field name). ``None`` at the top."""
    schema_path = list(error.absolute_schema_path)
    declared = {name for before, name in itertools.pairwise(schema_path) if before == "properties"}
    parts: list[str] = []
    for part in error.absolute_path:
        if isinstance(part, str) and part not in declared:
            break
        parts.append(str(part))
    return ".".join(parts) or None
