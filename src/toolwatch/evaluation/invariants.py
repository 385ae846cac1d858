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
``after`` call no ``before`` informed, even one called alongside a ``before`` (an earlier
``before`` may be among them, as ``safety`` leaves its verification out); its explanation
names those rules.

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

from collections.abc import Sequence
from typing import Any, Final

from jsonschema.protocols import Validator
from jsonschema.validators import validator_for

from toolwatch.evaluation.base import (
    Reference,
    lost_earlier,
    name_list,
    pct,
    spanned_tools,
    unfinished,
)
from toolwatch.evaluation.concurrency import Concurrency, in_sequence
from toolwatch.evaluation.invariant_checks import (
    Calls,
    Violation,
    argument_violations,
    count_violations,
    order_violations,
    rule_label,
)
from toolwatch.evaluation.invariant_rules import (
    ArgumentsRule,
    CallCountRule,
    Invariant,
    OrderRule,
    RequiredRule,
)
from toolwatch.evaluation.policy_settings import PolicySettings
from toolwatch.evaluation.settings import InvariantsSettings
from toolwatch.evaluation.severity import call_outcome, make_finding
from toolwatch.model import Category, ReferenceKind
from toolwatch.model_evaluation import EvalResult, Finding
from toolwatch.model_traces import ToolCall, ToolTrace
from toolwatch.names import fold

__all__ = ["Invariants"]


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
        run = Calls(calls, names, range(len(names)), Concurrency(calls))
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
                judged = Calls(
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
        run: Calls,
        whole: Calls,
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
            return argument_violations(
                rule,
                label=label,
                validator=validator,
                calls=calls,
                names=names,
                normalize=self._normalize,
            )
        if isinstance(rule, OrderRule):
            return order_violations(
                rule, label, run, whole, self._normalize, earlier_lost=earlier_lost
            )
        return count_violations(
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
