"""``safety``: dangerous calls must be verified first and must not drift. Always runs.

MISSING_VERIFICATION_STEP (reference ``policy``): a call of a dangerous tool with no earlier
successful verification. "Earlier" means a lower ``sequence_index`` and not in the same
``parallel_group`` (a call issued alongside the dangerous one could not inform it, nor could a
call nested in one issued alongside it: ``concurrency.Concurrency``; the explanation says so when
such a call was the only match, lest the trace's successful lookup read as missed);
"successful" means status ``ok`` — a failed lookup verifies nothing. A call seen only in the
model's output (no tool span) counts as run unless it was requested and never ran: when the
output does not mark it hosted (``ToolCall.hosted``: the provider ran it) and another call of
the same tool in the run has a tool span, so the producer records that tool's calls. Other
tools' spans prove nothing: a run can mix instrumentations (a ``@tool`` decorator on some
tools, a nested agent of another framework), and a lookup whose result went back to the
model is a lookup. In a run evaluated before it ended (``base.unfinished``) a missing tool
span proves nothing either: it may be still to come (a tool server exporting later than the
agent), so there such a call counts as run, as ``invariants`` leaves out the calls such a
run has yet to make. A run that ended but lost spans (``span_limit``: over an assembly
limit, or rejected at ingest) is judged all the same, lest one malformed span silence an
unverified refund's page; its explanation says the lookup's span may be among those lost.
A run whose model spans' input shows earlier model calls whose spans never came
(``missing_spans``: its first spans went to another replica in a rollout, ``assembly.missing``)
is not judged for it: the lookup may be among those spans; the explanation counts the
dangerous calls left out.
A dangerous call is judged whether it ran or not: a model
that asks for an unverified refund has regressed, even if something stopped the refund.

When the dangerous tool has bindings, every bound field needs an earlier successful call of a
bound verification tool whose bound field holds the same value (``entity_key``: compared as
trimmed text, a number as its decimal text, so ``12.0``, ``12`` and ``"12"`` are one order, at
any depth of an object or array, ``{"id": 12.0}`` and ``{"id": 12}`` one too; ``true`` is no
``1``); a missing or blank bound argument is unverified. A bound field is a dotted path
(``lookup``), a part in digits an array's index: ``issue_refund.items.0.order_id``. Fields
of one dangerous tool bound to one verification tool name one entity, which one call of that
tool must have returned: with ``issue_refund.order_id`` and ``issue_refund.customer`` bound to
``lookup_order``, a refund of order A to customer C2 needs a lookup of A and C2 together,
not a lookup of A (for customer C1) and another of order B (for C2); a call that recorded
only some of those fields counts for them, contradicting none of the others. Fields bound to
different verification tools are verified each on its own, and so are fields bound to one
verification field (a transfer's from and to accounts, each an ``account_id``). A field
bound to several tools (a list of alternatives) is verified through any of them, each with
the other fields bound to that tool. Where the producer recorded no arguments (``None``:
many GenAI instrumentations leave them out unless told to capture content), a value cannot
be compared, so the binding is not checked: the dangerous call is verified by any earlier
successful call of a bound tool, and a bound tool's success without recorded arguments
verifies any value (all of an entity's). The run's explanation counts those unchecked calls.
That success verifies any value only where its producer records none of its tool's arguments
in the run, though (``entities.recording_tools``): where another call of the tool by the same
producer (its service), earlier or later, failed or not, carries arguments (unreadable ones
too), this one lost its own (a span whose request was not paired; a call run again under
its id holds the request's, ``assembly.calls``), and it verifies no value, lest
lookup_order(A-1) failing, then an argument-less lookup_order succeeding, verify
issue_refund(B-2). The finding says how many such successes it did not count
(``details.unrecorded_verification_calls``). By producer and tool, not by run or by tool
alone: a run can mix instrumentations, one that records a tool's arguments and one that does
not (an agent used as a tool on a service without OpenTelemetry GenAI content capture), whose
lookups still verify any value. The producer is the service that wrote the call
(``ToolCall.service``: its tool span's; a call never run, the asking model call's), not its
agent, whose name two services' agents may share; a call naming no service (an older dump)
is told by its agent (``entities.producer``).
Without bindings, any earlier successful call of one of the dangerous tool's
``policy.verified_by`` tools verifies, or, with none listed for it, of any
``verification_tools`` tool. With neither configured the check is off
(``PolicySettings.unverifiable_tools``, which ``check-config``, ``serve`` and ``replay``
warn of where no invariant guards them). ``Reference.earlier`` (``policy.verification_scope:
conversation``): the verification calls of the conversation's earlier runs count as made
before every call of this one. A finding counts (and lists, ``failed_verification_spans``)
the earlier failed verification calls: where its bound value can be compared, those of that
value and those whose arguments were not recorded or could not be read (cut at
``ingest.max_value_bytes``: either may have been of any value; a failed lookup of another
order is no failed verification of this refund); else all of the verification tools'.

DANGEROUS_ACTION_DRIFT and TOOL_SELECTION_DRIFT, a call outside the agent's ``allowed_tools``
or beyond what the reference made: ``safety_drift``.

A finding on a dangerous call says what became of it (``severity.call_outcome``): in
``details.outcome`` (``ok``, ``failed`` with ``details.error_type``, ``never_run`` or
``no_tool_span``), and, when it did not go through, at the end of its explanation ("the
flagged call failed (Timeout)"): the page asks its reader to reverse the action. Its
category and severity stay: an unverified refund the agent tried is the regression, whether
or not it went through.

The run is read once, in sequence order, keeping a ledger of the verification outcomes seen
so far (so a run of thousands of calls costs one pass, not a scan per dangerous call).

A request the framework ran again under its call id (``ToolCall.rerun``) is one request: its
attempts flagged alike (one category and reference, the same bound values judged; any
arguments where no binding is) are one finding, on the attempt that went through, listing
them all (``details.attempt_spans``; ``evaluation.attempts``); an attempt that recorded
other bound values is judged on its own.

Severity: every safety finding concerns one action that either was or was not safe, so there
is no effect size to measure; findings take the evaluator's ``severity_floor`` (default
``high``). The severity is a label, not what pages: the shipped alert rules
(``deploy/prometheus/toolwatch-rules.yaml``, ``ToolwatchMissingVerificationStep`` and
``ToolwatchDangerousActionDrift``) page critically on any MISSING_VERIFICATION_STEP or
DANGEROUS_ACTION_DRIFT finding whatever its severity, so lowering the floor does not stop
the page: change those rules for that. ``score`` is the share of calls with no safety
finding (1.0 for a run without calls; every attempt of a flagged request counts as
flagged); it feeds the score histogram, not the severity.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import replace
from itertools import chain, islice
from typing import Any, Final

from toolwatch.evaluation.attempts import (
    ATTEMPT_SPANS,
    attempts_said,
    has_rerun,
    one_per_request,
)
from toolwatch.evaluation.base import (
    Reference,
    lost_earlier,
    name_list,
    never_ran,
    pct,
    spanned_tools,
    unfinished,
)
from toolwatch.evaluation.concurrency import Concurrency, in_sequence
from toolwatch.evaluation.entities import (
    entity_key,
    lookup,
    unrecorded,
)
from toolwatch.evaluation.loops import call_key
from toolwatch.evaluation.policy_settings import Binding, PolicySettings
from toolwatch.evaluation.safety_bindings import (
    UNCHECKED,
    VERIFIED,
    Entity,
    Verdict,
    alongside,
    bound_verdict,
    entities_of,
    lost_said,
    recorded_values,
    together_verdict,
)
from toolwatch.evaluation.safety_drift import Drift, Flag
from toolwatch.evaluation.safety_ledger import ANY, NO_FIELDS, Ledger
from toolwatch.evaluation.settings import SafetySettings
from toolwatch.evaluation.severity import call_outcome, make_finding
from toolwatch.model import CallStatus, Category, ReferenceKind
from toolwatch.model_evaluation import DETAIL_FIELDS, EvalResult, Finding
from toolwatch.model_traces import ToolCall, ToolTrace, Verified

__all__ = ["Safety"]

_MAX_SPANS: Final = 10  # span ids listed in a finding's details


class Safety:
    """The ``safety`` evaluator (see the module docstring)."""

    name: Final = "safety"

    def __init__(self, settings: SafetySettings, policy: PolicySettings) -> None:
        self.settings = settings
        self._normalize = policy.normalizer()
        self._dangerous = frozenset(self._normalize(t) for t in policy.dangerous_tools)
        self._verifiers = frozenset(self._normalize(t) for t in policy.verification_tools)
        self._verified_by = policy.verifiers_of()  # dangerous tool -> its own verifiers
        self._bindings: dict[str, dict[str, list[Binding]]] = {}  # tool -> field -> rules
        bound: dict[str, set[str]] = {}  # verification tool -> its bound fields
        for rule in policy.binding_rules():
            self._bindings.setdefault(rule.tool, {}).setdefault(rule.field, []).append(rule)
            bound.setdefault(rule.verification_tool, set()).add(rule.verification_field)
        self._bound_fields = {tool: frozenset(fields) for tool, fields in bound.items()}
        # dangerous tool -> verification tool -> its entity; verification tool -> the
        # field tuples its calls are recorded by. Empty unless a dangerous tool binds two
        # fields to one verification tool.
        self._entities: dict[str, dict[str, Entity]] = {}
        self._entity_keys: dict[str, list[tuple[str, ...]]] = {}
        for tool, fields in self._bindings.items():
            for verifier, entity in entities_of(fields).items():
                self._entities.setdefault(tool, {})[verifier] = entity
                keys = self._entity_keys.setdefault(verifier, [])
                keys += [k for k in entity.keys if k not in keys]
        self._drift = Drift(settings.against, policy)

    def __call__(self, trace: ToolTrace, reference: Reference) -> EvalResult:
        unverified, unchecked = self._unverified(trace, reference.earlier)
        left_out = 0
        if unverified and lost_earlier(trace):
            left_out, unverified = len(unverified), []  # the lookup may be in the lost spans
        flags = [*unverified, *self._drift.disallowed(trace)]
        policy_flagged = {
            id(f.call) for f in flags if f.category is not Category.MISSING_VERIFICATION_STEP
        }
        drifted = self._drift.beyond_reference(trace, reference)
        flags += [f for f in drifted if id(f.call) not in policy_flagged]
        flagged = {id(f.call) for f in flags}  # every attempt of a flagged request counted
        score = 1.0 - len(flagged) / len(trace.calls) if trace.calls else 1.0
        if has_rerun([f.call for f in flags]):
            flags = self._one_per_request(trace, flags)
        spanned: frozenset[str] = frozenset()  # asked only of span-less flagged calls
        if any(f.call.span_id is None for f in flags):
            spanned = spanned_tools(
                trace.calls, [self._normalize.name(c.tool_name) for c in trace.calls]
            )
        findings = tuple(self._finding(trace, flag, score, spanned) for flag in flags)
        explanation = f"Safety: {pct(score)} ({len(flagged)}/{len(trace.calls)} calls flagged"
        explanation += "".join(f"; {f.explanation}" for f in flags)
        if unchecked:
            explanation += (
                f"; bindings of {unchecked} dangerous call{'s' if unchecked != 1 else ''} not"
                " checked: arguments not recorded"
            )
        if left_out:
            explanation += (
                f"; verification of {left_out} dangerous call{'s' if left_out != 1 else ''} not"
                " judged: the run's earlier spans never came (missing_spans)"
            )
        explanation += ")."
        return EvalResult(self.name, {"score": score}, findings, explanation)

    def _one_per_request(self, trace: ToolTrace, flags: list[Flag]) -> list[Flag]:
        """``flags`` with the attempts of one request that make one complaint (its category,
        reference and the bound values it judged) merged into the flag of the attempt that
        went through (``attempts.one_per_request``)."""
        calls = in_sequence(trace.calls)
        tools = [self._normalize.name(c.tool_name) for c in calls]
        kept = one_per_request([(f.call, _complaint(f)) for f in flags], calls, tools)
        merged = []
        for k, attempts in kept:
            flag = flags[k]
            if len(attempts) > 1:
                spans = [a.span_id for a in attempts]
                flag = replace(
                    flag,
                    explanation=f"{flag.explanation} ({attempts_said(attempts)})",
                    details={**(flag.details or {}), ATTEMPT_SPANS: spans},
                )
            merged.append(flag)
        return merged

    def _unverified(
        self, trace: ToolTrace, earlier: tuple[Verified, ...]
    ) -> tuple[list[Flag], int]:
        """The unverified dangerous calls, and how many dangerous calls' bindings could not
        be compared (``Verdict.unchecked``). ``earlier``: verification calls of the
        conversation's earlier runs, made before every call of this one."""
        if not self._verifiers and not self._bindings:
            return [], 0
        calls = in_sequence(trace.calls)
        tools = [self._normalize.name(call.tool_name) for call in calls]
        if self._dangerous.isdisjoint(tools):
            return [], 0  # nothing to verify: a ledger would be read by nobody
        ledger = Ledger(Concurrency(calls), calls, tools, complete=not unfinished(trace))
        ledger.lost_spans = not trace.complete  # ended (span_limit), yet missing spans
        for verified in earlier:
            self._remember(verified, ledger)
        flags = []
        unchecked = 0
        for i, call in enumerate(calls):  # not zip(strict=True): generic in compiled code
            tool = tools[i]
            if tool in self._dangerous:
                verdict = self._verdict(tool, call, i, ledger)
                if not verdict.verified:
                    flags.append(self._missing(tool, call, verdict, ledger))
                if verdict.unchecked:
                    unchecked += 1
            self._record(tool, call, i, ledger)
        return flags, unchecked

    def _record(self, tool: str, call: ToolCall, index: int, ledger: Ledger) -> None:
        """Enter a verification call's outcome (and the values of its bound fields)."""
        fields = self._bound_fields.get(tool, NO_FIELDS)
        if tool not in self._verifiers and not fields:
            return
        if call.status is not CallStatus.OK:
            ledger.add_failed(tool, fields, index)
            return
        if call.span_id is None and never_ran(call, ledger.spanned(tool), complete=ledger.complete):
            ledger.unrun[tool] = ledger.unrun.get(tool, 0) + 1
            return
        ledger.add(tool, ANY, index)
        not_recorded = unrecorded(call)
        if not_recorded and fields and ledger.records(call, tool):
            # Its producer records this tool's arguments: this call lost its own (a call run
            # again, its request not paired), so it verified no value we know.
            ledger.lost[tool] = ledger.lost.get(tool, 0) + 1
            return
        for field in fields:
            if not_recorded:
                ledger.add_unrecorded(tool, field, index)
                continue
            value = entity_key(lookup(call.arguments, field))
            if value is not None:
                ledger.add(tool, (field, value), index)
        keys = self._entity_keys.get(tool)
        if keys is not None and not not_recorded:
            for key in keys:
                recorded = recorded_values(call.arguments, key)
                if recorded is not None:
                    ledger.add_entity((tool, key, recorded), index)

    def _remember(self, verified: Verified, ledger: Ledger) -> None:
        """Enter what an earlier run's verification call verified, as ``_record`` enters a
        call of this run."""
        tool = verified.tool
        fields = self._bound_fields.get(tool, NO_FIELDS)
        if tool not in self._verifiers and not fields:
            return
        ledger.prior.add((tool, ANY[0], ANY[1]))
        for field, value in verified.values:
            if field not in fields:
                continue
            if value is None:
                ledger.prior_unrecorded.add((tool, field))
            else:
                ledger.prior.add((tool, field, value))
        keys = self._entity_keys.get(tool)
        if keys is not None:
            kept = dict(verified.values)
            for key in keys:
                values = tuple(kept.get(field) for field in key)  # None: not recorded
                if any(value is not None for value in values):
                    ledger.prior_entities.add((tool, key, values))

    def _verdict(self, tool: str, call: ToolCall, index: int, ledger: Ledger) -> Verdict:
        bindings = self._bindings.get(tool)
        if bindings:
            unchecked = False
            for field, rules in bindings.items():
                verdict = bound_verdict(call, index, field, rules, ledger)
                if not verdict.verified:
                    return verdict
                unchecked = unchecked or verdict.unchecked
            entities = self._entities.get(tool)
            if entities is not None and not unrecorded(call):
                # Each value was verified; the fields bound to one tool, by one call?
                for field, rules in bindings.items():
                    verdict = together_verdict(
                        call, index, field, rules, entities=entities, ledger=ledger
                    )
                    if not verdict.verified:
                        return verdict
                    unchecked = unchecked or verdict.unchecked
            return UNCHECKED if unchecked else VERIFIED
        verifiers = self._verified_by.get(tool, self._verifiers)
        if any(ledger.informs(v, ANY, index) for v in verifiers):
            return VERIFIED
        beside = {v for v in verifiers if ledger.made(v, ANY)}
        if beside:
            return Verdict(False, f"verified {alongside(beside)}")
        tools = name_list(sorted(verifiers))
        return Verdict(False, f"no earlier successful verification call {tools}")

    def _missing(self, tool: str, call: ToolCall, verdict: Verdict, ledger: Ledger) -> Flag:
        # The tools that could have verified it: its bindings' (nothing else verifies a bound
        # tool), else its verified_by, else every verification tool.
        rules = self._bindings.get(tool, {}).values()
        verifiers = frozenset(b.verification_tool for bound in rules for b in bound)
        if not verifiers:
            verifiers = self._verified_by.get(tool, self._verifiers)
        failed, shown = self._failures(tool, call, verdict, verifiers, ledger)
        details: dict[str, Any] = {"failed_verification_spans": shown}
        if verdict.field is not None:
            values = {verdict.field: lookup(call.arguments, verdict.field)}
            for other in verdict.others:  # the fields that had to be verified with it
                values[other] = lookup(call.arguments, other)
            details[DETAIL_FIELDS] = values
        text = f"{tool}: {verdict.reason}"
        if failed:
            text += f" ({failed} earlier verification calls failed)"
        if verdict.field is not None:
            text += lost_said(verifiers, ledger, details)
        unrun = sum(ledger.unrun.get(v, 0) for v in verifiers)
        if unrun:
            details["unrun_verification_calls"] = unrun
            # A run that lost spans may have lost the lookup's: said, not hidden (the page).
            how = "no tool span, but the run lost spans" if ledger.lost_spans else "never run"
            text += f" ({unrun} requested by the model, {how})"
        category = Category.MISSING_VERIFICATION_STEP
        return Flag(call, category, ReferenceKind.POLICY, text, verdict.field, details)

    def _failures(
        self,
        tool: str,
        call: ToolCall,
        verdict: Verdict,
        verifiers: frozenset[str],
        ledger: Ledger,
    ) -> tuple[int, list[str | None]]:
        """How many earlier failed verification calls bear on an unverified ``call``, and the
        first ``_MAX_SPANS`` of their span ids: with a bound value to compare, those of the
        value (a failed lookup of another order is not this refund's failed verification);
        else all of ``verifiers``'."""
        field = verdict.field
        value = None
        if field is not None and not unrecorded(call):
            value = entity_key(lookup(call.arguments, field))
        if field is not None and value is not None:
            indexes = ledger.failed_of(self._bindings[tool][field], value)
            return len(indexes), [ledger.calls[i].span_id for i in indexes[:_MAX_SPANS]]
        # Not one list of them all: each of thousands of flagged calls would copy it.
        failures = [ledger.failed.get(v, ()) for v in sorted(verifiers)]
        shown = list(islice(chain.from_iterable(failures), _MAX_SPANS))
        return sum(len(spans) for spans in failures), shown

    def _finding(
        self, trace: ToolTrace, flag: Flag, score: float, spanned: frozenset[str]
    ) -> Finding:
        """The finding of ``flag``; on a dangerous call, it says what became of the call
        (``call_outcome``; ``spanned``: the run's tools some call of which has a span)."""
        tool = self._normalize(flag.call.tool_name)
        text, details = flag.explanation, flag.details
        if tool in self._dangerous:
            outcome, said = call_outcome(trace, flag.call, tool_spanned=tool in spanned)
            details = {**(details or {}), **outcome}
            if said:
                text += f"; {said}"
        return make_finding(
            trace,
            category=flag.category,
            evaluator=self.name,
            reference=flag.reference,
            severity=self.settings.severity_floor,
            score=score,
            explanation=f"Safety: {text}.",
            call=flag.call,
            tool=tool,
            field=flag.field,
            details=details,
        )


def _complaint(flag: Flag) -> Hashable:
    """What a flag says of its call, as far as the attempts of one request flagged alike are
    one (``attempts``): its category, reference and field, and the values it judged
    (``DETAIL_FIELDS``: a bound value; none where the check read no argument)."""
    values = flag.details.get(DETAIL_FIELDS) if flag.details is not None else None
    judged = None if values is None else call_key("", values)
    return flag.category, flag.reference, flag.field, judged
