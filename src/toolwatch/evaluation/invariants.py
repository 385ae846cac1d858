"""``invariants``: hand-written rules (``policy.invariants``), judged against the rule only.

- ``forbidden``: one violation when the tool is called, on the first action's last attempt
  (a failed call made again, ``loops.retried``, is named by its retry: the attempt that may
  have gone through), every attempt counted;
- ``required``: one violation when it is never called;
- ``order``: one violation when a call of ``after`` has no earlier call (lower
  ``sequence_index``, whatever the order of ``ToolTrace.calls``) of ``before`` (on the first
  such call); as in ``safety``, a ``before`` issued in the same parallel group (or nested in a
  call issued in it) is not earlier, since neither saw the other's result;
- ``call_count``: one violation when the number of calls is outside ``[min, max]``; a failed
  call made again (``loops.retried``) counts once with its retry, as one action. Over the
  maximum, the violation is on the first call over it, so counted (of an action that
  failed and was made again, its last attempt); under the minimum, on the first call;
- ``arguments``: one violation per call whose arguments fail the JSON Schema (unparsable
  arguments are validated as the raw string, so a schema of ``type: object`` rejects them;
  a call recorded without arguments, with content capture off, is not judged); but one per
  request the framework ran again under its call id (``ToolCall.rerun``), on the attempt
  that went through, for its attempts with the same arguments (``details.attempt_spans``;
  ``evaluation.attempts``): an attempt that recorded other arguments is judged on its own.
  The explanation names the failing field path (as far as the schema declares it) and schema
  keyword, never the value; the validator's messages (which quote values) go to
  ``details[DETAIL_ERRORS]``, each with its field path, redacted by sinks as a value.

A run evaluated before it ended (``base.unfinished``: drained at shutdown before its root
came, cut at ``max_trace_age``, evicted; not one that lost spans to a limit or to ingest,
which ended) has not made the calls it was still to make,
so what it has not called yet is no violation: ``required`` rules and ``call_count``
minimums are not judged on it (for the reason it is compared with no reference: the calls
it is missing would read as violations, as they would read as drift), and its explanation
names them; a rule with nothing else to judge does not apply to it. What it did call is
judged as on any run: ``forbidden``, a ``call_count`` maximum, ``order`` and ``arguments``.
A run whose earlier spans never came (``base.lost_earlier``: ``missing_spans``) is left out
of those absence rules too (its missing calls may be among them), and of an ``order`` rule's
``after`` call with no ``before`` at all (the ``before`` may be among them, as ``safety``
leaves its verification out); its explanation names those rules. An ``after`` called
alongside its ``before`` is judged: the run shows it.

Each violation is an INVARIANT_VIOLATION with reference ``policy`` and the rule's ``severity``
raised to the evaluator's floor. One on a call of a dangerous tool says what became of the
call, as ``safety``'s findings do (``severity.call_outcome``: ``details.outcome``, and the
explanation's end when it failed or never ran). ``score`` is the share of applicable rules
with no violation (rules counted one by one: two unnamed rules on one tool share a label,
not a verdict).
A rule limited to ``agents`` judges only the calls those agents made (a call's ``agent``, else
the run's), so a nested agent's calls follow its own rules and not its caller's, but for an
``order`` rule's ``before``: any call of the run that could inform the agents' ``after`` call
satisfies it (a lookup by a sub-agent the agent asked, as ``safety`` credits one); it applies to
a run in which one of them ran (``ToolTrace.agents``: its own agent or one nested in it, even
one that made no call, so ``required`` catches a nested agent that skipped its tools) or that
holds a call of one of them. With no applicable rule the evaluator does not apply.
Validators are built once; ``$ref`` is never fetched over the network (the ``referencing``
library resolves only what the schema contains).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for

from toolwatch.evaluation.attempts import (
    ATTEMPT_SPANS,
    Flagged,
    attempts_said,
    has_rerun,
    one_per_request,
)
from toolwatch.evaluation.base import (
    Reference,
    lost_earlier,
    name_list,
    pct,
    spanned_tools,
    unfinished,
)
from toolwatch.evaluation.concurrency import Concurrency, in_sequence
from toolwatch.evaluation.invariant_rules import (
    ArgumentsRule,
    CallCountRule,
    ForbiddenRule,
    Invariant,
    OrderRule,
    RequiredRule,
)
from toolwatch.evaluation.loops import NO_BOUND, call_key, retried
from toolwatch.evaluation.policy_settings import PolicySettings
from toolwatch.evaluation.settings import InvariantsSettings
from toolwatch.evaluation.severity import call_outcome, make_finding
from toolwatch.model import (
    DETAIL_ERRORS,
    CallStatus,
    Category,
    EvalResult,
    Finding,
    ReferenceKind,
    ToolCall,
    ToolTrace,
)
from toolwatch.names import NameNormalizer, fold

__all__ = ["Invariants", "Violation", "rule_label"]

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


class Invariants:
    """The ``invariants`` evaluator (see the module docstring)."""

    name: Final = "invariants"

    def __init__(self, settings: InvariantsSettings, policy: PolicySettings) -> None:
        self.settings = settings
        self._normalize = policy.normalizer()
        self._action_fields = policy.action_fields()  # a retry of the same entity: one action
        self._dangerous = frozenset(self._normalize(t) for t in policy.dangerous_tools)
        self._rules = policy.invariants
        # Agent names compared as tool names are: trimmed and case-folded.
        self._agents = [frozenset(fold(a) for a in r.agents) for r in self._rules]
        self._validators: dict[int, Validator] = {
            i: validator_for(r.json_schema)(r.json_schema)
            for i, r in enumerate(self._rules)
            if isinstance(r, ArgumentsRule)
        }

    def __call__(self, trace: ToolTrace, reference: Reference) -> EvalResult | None:
        calls = in_sequence(trace.calls)  # "earlier" is a lower sequence index
        names = [self._normalize(c.tool_name) for c in calls]
        run = _Calls(calls, names, range(len(names)), Concurrency(calls))
        violations: list[Violation] = []
        applicable = broken = 0  # rules, not labels: two unnamed rules may share one
        left_out: list[str] = []  # absence rules not judged: the run had not ended
        unseen: list[str] = []  # order rules not judged: their before may be in lost spans
        ended, earlier_lost = not unfinished(trace), lost_earlier(trace)
        for i, rule in enumerate(self._rules):
            judged = run
            if rule.agents:
                agents = self._agents[i]
                scoped = _made_by(agents, calls, trace.agent)
                if not scoped and not _ran(agents, trace):
                    continue
                judged = _Calls(
                    [calls[j] for j in scoped], [names[j] for j in scoped], scoped, run.concurrency
                )
            if not ended and _reads_absence(rule):
                left_out.append(rule_label(rule))
                if _absence_only(rule):
                    continue
            found = self._check(i, rule, judged, run, complete=ended, earlier_lost=earlier_lost)
            if found is None:
                unseen.append(rule_label(rule))
                continue
            applicable += 1
            if found:
                broken += 1
                violations += found
        if not applicable:
            return None
        score = 1.0 - broken / applicable
        spanned: frozenset[str] = frozenset()  # asked only of span-less violating calls
        if any(v.call is not None and v.call.span_id is None for v in violations):
            spanned = spanned_tools(calls, names)
        findings = tuple(self._finding(trace, v, score, spanned) for v in violations)
        explanation = f"Invariants: {pct(score)} ({broken}/{applicable} rules broken"
        explanation += "".join(f"; {v.explanation}" for v in violations)
        if left_out:
            reason = trace.incomplete_reason or "unfinished"
            yet = "whose spans never came" if earlier_lost else "the run had yet to make"
            explanation += (
                f"; not judged for calls {yet}, incomplete ({reason}): {name_list(left_out)}"
            )
        if unseen:
            explanation += (
                "; not judged for an earlier call, the run's earlier spans never came"
                f" (missing_spans): {name_list(unseen)}"
            )
        return EvalResult(self.name, {"score": score}, findings, explanation + ").")

    def _check(
        self,
        index: int,
        rule: Invariant,
        run: _Calls,
        whole: _Calls,
        *,
        complete: bool,
        earlier_lost: bool,
    ) -> list[Violation] | None:
        """``rule``'s violations among the calls it judges (``run``: its agents' when it is
        scoped), ``whole`` being all the run's calls (an ``order`` rule's ``before``);
        ``None`` when it cannot be judged (``_order``; ``earlier_lost``: ``base.lost_earlier``)."""
        label = rule_label(rule)
        calls, names = run.calls, run.names
        if isinstance(rule, ArgumentsRule):
            validator = self._validators[index]
            return _arguments(
                rule,
                label=label,
                validator=validator,
                calls=calls,
                names=names,
                normalize=self._normalize,
            )
        if isinstance(rule, OrderRule):
            return _order(rule, label, run, whole, self._normalize, earlier_lost=earlier_lost)
        return _counted(
            rule,
            label,
            calls,
            names,
            self._normalize,
            bound=self._action_fields,
            complete=complete,
        )

    def _finding(
        self, trace: ToolTrace, violation: Violation, score: float, spanned: frozenset[str]
    ) -> Finding:
        """The finding of ``violation``; on a dangerous tool's call, it says what became of
        the call (``call_outcome``; ``spanned``: the run's tools some call of which has a
        span)."""
        text = violation.explanation
        details: dict[str, Any] = {"rule": violation.label, **(violation.details or {})}
        call = violation.call
        if call is not None:
            tool = self._normalize(call.tool_name)
            if tool in self._dangerous:
                outcome, said = call_outcome(trace, call, tool_spanned=tool in spanned)
                details.update(outcome)
                if said:
                    text += f"; {said}"
        return make_finding(
            trace,
            category=Category.INVARIANT_VIOLATION,
            evaluator=self.name,
            reference=ReferenceKind.POLICY,
            severity=violation.rule.severity.at_least(self.settings.severity_floor),
            score=score,
            explanation=f"Invariant {text}.",
            call=call,
            tool=violation.tool,
            field=violation.field,
            details=details,
        )


@dataclass(frozen=True, slots=True)
class _Calls:
    """The calls a rule judges (all of the run's, or those its agents made), their normalized
    names, their places in the run, and the run's ``Concurrency`` (built from all its calls:
    a scoped rule's calls may be nested in calls it does not judge)."""

    calls: Sequence[ToolCall]
    names: Sequence[str]
    places: Sequence[int]
    concurrency: Concurrency


def _reads_absence(rule: Invariant) -> bool:
    """Whether ``rule`` judges calls not made (``required``, a ``call_count`` minimum): on an
    incomplete run, that part is not judged."""
    return isinstance(rule, RequiredRule) or (isinstance(rule, CallCountRule) and rule.min > 0)


def _absence_only(rule: Invariant) -> bool:
    """Whether ``rule`` judges nothing but calls not made: not applicable to an incomplete
    run at all (a ``call_count`` with a maximum still judges that)."""
    return isinstance(rule, RequiredRule) or (isinstance(rule, CallCountRule) and rule.max is None)


def _ran(agents: frozenset[str], trace: ToolTrace) -> bool:
    """Whether one of ``agents`` (folded) ran in the run: its own agent, or one nested in
    it."""
    named = [trace.agent, *trace.agents]
    return any(a is not None and fold(a) in agents for a in named)


def _made_by(agents: frozenset[str], calls: Sequence[ToolCall], run: str | None) -> list[int]:
    """The indexes in ``calls`` of those made by one of ``agents`` (folded; a call's agent,
    else the ``run``'s)."""
    made = []
    for i, call in enumerate(calls):
        agent = call.agent if call.agent is not None else run
        if agent is not None and fold(agent) in agents:
            made.append(i)
    return made


def _counted(
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


def _order(
    rule: OrderRule,
    label: str,
    judged: _Calls,
    run: _Calls,
    normalize: NameNormalizer,
    *,
    earlier_lost: bool = False,
) -> list[Violation] | None:
    """The first call of ``after`` among ``judged`` (the rule's agents' calls) that no
    earlier call of ``before`` anywhere in the ``run`` could have informed: a scoped rule
    judges its agents' ``after`` calls, and credits a ``before`` made by another agent of
    the run (a sub-agent's lookup), as ``safety`` credits a verification. In a run whose
    earlier spans never came (``earlier_lost``), such a call with no ``before`` at all is not
    judged (``None``): the ``before`` may be among them; one called alongside its ``before``
    still is."""
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
            if befores:
                text = f"{label}: {after} called{by} alongside {before}, not after it"
            elif earlier_lost:
                return None
            else:
                text = f"{label}: {after} called{by} before any {before}"
                text += " in the run" if by else ""
            return [Violation(rule, label, text, call, after)]
        if name == before:
            befores.add(place)
    return []


def _arguments(
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
