"""``safety``'s verdicts on a dangerous call's bound fields (``policy.bindings``): each
value verified by an earlier success of a bound tool (``bound_verdict``), the fields bound to
one tool by one call of it (``together_verdict``, over ``entities_of``), and what an
unverified call's explanation says. Pure functions of the call and the ``Ledger``; see
``toolwatch.evaluation.safety``'s docstring for the rules."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from toolwatch.evaluation.base import name_list
from toolwatch.evaluation.entities import entity_key, lookup, unrecorded
from toolwatch.evaluation.policy_settings import Binding
from toolwatch.evaluation.safety_ledger import ANY, Ledger
from toolwatch.model_traces import ToolCall

__all__ = [
    "UNCHECKED",
    "VERIFIED",
    "Entity",
    "Verdict",
    "alongside",
    "bound_verdict",
    "entities_of",
    "lost_said",
    "recorded_values",
    "together_verdict",
]


@dataclass(frozen=True, slots=True)
class Verdict:
    """Why a dangerous call is (un)verified. ``field`` is the bound field that failed;
    ``others``, the fields that had to be verified in one call with it."""

    verified: bool
    reason: str = ""
    field: str | None = None
    unchecked: bool = False  # a binding could not be compared: arguments not recorded
    others: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Entity:
    """Fields of a dangerous tool bound to one verification tool (two or more): one call of
    that tool must match them all. ``keys``: the verification tool's fields to compare them
    with, one tuple per choice among alternatives, aligned with ``fields``."""

    fields: tuple[str, ...]
    keys: tuple[tuple[str, ...], ...]


VERIFIED: Final = Verdict(True)
UNCHECKED: Final = Verdict(True, unchecked=True)


def bound_verdict(
    call: ToolCall, index: int, field: str, bindings: list[Binding], ledger: Ledger
) -> Verdict:
    """Whether ``field`` of the dangerous ``call`` (at ``index``) names an entity a bound
    verification tool already returned successfully."""
    if unrecorded(call):
        # The producer records no arguments (many GenAI instrumentations by default): the
        # value cannot be compared, so any earlier success of a bound tool verifies, as
        # without bindings; the run's explanation says the binding was not checked.
        if any(ledger.informs(b.verification_tool, ANY, index) for b in bindings):
            return UNCHECKED
        unchecked = f"(arguments not recorded: {field} unchecked)"
        beside = {b.verification_tool for b in bindings if ledger.made(b.verification_tool, ANY)}
        if beside:
            return Verdict(
                False, f"verified {alongside(beside)} {unchecked}", field, unchecked=True
            )
        tools = name_list(sorted({b.verification_tool for b in bindings}))
        reason = f"no earlier successful {tools} call {unchecked}"
        return Verdict(False, reason, field, unchecked=True)
    value = entity_key(lookup(call.arguments, field))
    if value is None and call.arguments_error is not None:
        # Not verifiable, so still flagged, but not "missing": a value over
        # ingest.max_value_bytes is cut, and the rest is no JSON any more.
        reason = (
            f"bound argument {field} cannot be read: the arguments are not JSON"
            f" ({call.arguments_error}; values longer than ingest.max_value_bytes are cut)"
        )
        return Verdict(False, reason, field)
    if value is None:
        return Verdict(False, f"bound argument {field} is missing", field)
    if any(
        ledger.informs(b.verification_tool, (b.verification_field, value), index) for b in bindings
    ):
        return VERIFIED
    if any(
        ledger.informs_unrecorded(b.verification_tool, b.verification_field, index)
        for b in bindings
    ):
        return UNCHECKED  # a verification whose arguments were not recorded: any value
    return _unverified_value(field, value, bindings, ledger)


def _unverified_value(field: str, value: str, bindings: list[Binding], ledger: Ledger) -> Verdict:
    """``field`` (holding ``value``) unverified: no success of a bound tool of that value
    informs the call; the reason says so, or that the only ones were issued alongside it."""
    beside = {
        b.verification_tool
        for b in bindings
        if ledger.made(b.verification_tool, (b.verification_field, value))
    }
    if beside:
        return Verdict(False, f"{field} verified {alongside(beside)}", field)
    tools = name_list(sorted({b.verification_tool for b in bindings}))
    reason = f"{field} not verified by an earlier successful {tools} call of the same value"
    return Verdict(False, reason, field)


def lost_said(verifiers: frozenset[str], ledger: Ledger, details: dict[str, Any]) -> str:
    """What an unverified bound field's explanation says of the successes so far of
    ``verifiers`` that lost their arguments (``Ledger.records``), lest the trace's lookup
    read as missed; their count goes in ``details``."""
    tools = sorted(v for v in verifiers if ledger.lost.get(v))
    if not tools:
        return ""
    lost = sum(ledger.lost[v] for v in tools)
    details["unrecorded_verification_calls"] = lost
    calls = "call" if lost == 1 else "calls"
    verify = "verifies" if lost == 1 else "verify"
    whose = "the tool's" if len(tools) == 1 else "the tools'"
    return (
        f" ({lost} successful {name_list(tools)} {calls} without recorded arguments {verify}"
        f" no value: the run records {whose} arguments)"
    )


def alongside(tools: set[str]) -> str:
    """How a dangerous call's only matching successes of ``tools`` read: issued with it, or
    nested in a call that was (``concurrency.Concurrency``), they could not inform it."""
    return (
        f"only by a {name_list(sorted(tools))} call issued alongside this one (one parallel"
        " group): its result could not inform it"
    )


def entities_of(fields: Mapping[str, list[Binding]]) -> dict[str, Entity]:
    """The entities of one dangerous tool's bindings (``fields``: field -> its bindings):
    for each verification tool that two or more of its fields are bound to."""
    by_tool: dict[str, dict[str, list[str]]] = {}  # verification tool -> field -> its fields
    for field, rules in fields.items():
        for rule in rules:
            bound = by_tool.setdefault(rule.verification_tool, {})
            bound.setdefault(field, []).append(rule.verification_field)
    entities = {}
    for verifier, bound in by_tool.items():
        named = [field for alternatives in bound.values() for field in alternatives]
        # Two fields bound to one verification field are two entities (a transfer's from
        # and to accounts, each an account_id of its own lookup): verified each on its own.
        if len(bound) > 1 and len(named) == len(set(named)):
            keys: list[tuple[str, ...]] = [()]
            for alternatives in bound.values():
                keys = [(*key, alternative) for key in keys for alternative in alternatives]
            entities[verifier] = Entity(tuple(bound), tuple(keys))
    return entities


def _values(arguments: Any, fields: tuple[str, ...]) -> tuple[str, ...] | None:
    """The compared values (``entity_key``) of ``fields`` in ``arguments``; ``None`` when
    one is absent."""
    values = []
    for field in fields:
        value = entity_key(lookup(arguments, field))
        if value is None:
            return None
        values.append(value)
    return tuple(values)


def recorded_values(arguments: Any, fields: tuple[str, ...]) -> tuple[str | None, ...] | None:
    """The compared values of ``fields`` in a verification call's ``arguments``, ``None`` for
    one it did not record; ``None`` when it recorded none of them."""
    values = tuple(entity_key(lookup(arguments, field)) for field in fields)
    return values if any(value is not None for value in values) else None


def _agreeing(values: tuple[str, ...]) -> list[tuple[str | None, ...]]:
    """What a verification call that agrees with ``values`` recorded of them: each value,
    or not recorded (``None``), at least one recorded (2**n - 1 of them, for n fields)."""
    patterns: list[tuple[str | None, ...]] = [()]
    for value in values:
        patterns = [(*pattern, known) for pattern in patterns for known in (value, None)]
    return patterns[:-1]  # the last is all None


def together_verdict(
    call: ToolCall,
    index: int,
    field: str,
    bindings: list[Binding],
    *,
    entities: Mapping[str, Entity],
    ledger: Ledger,
) -> Verdict:
    """Whether ``field`` of the dangerous ``call`` (each of whose bound values an earlier
    call verified) was verified together with the other fields bound to the same tool:
    through one of its bindings, by an earlier success of that tool that carried all of its
    entity's values (through a tool that is no entity's, by one that carried its value)."""
    if all(b.verification_tool not in entities for b in bindings):
        return VERIFIED  # bound to no entity: verified on its own, as ``bound_verdict`` found
    value = entity_key(lookup(call.arguments, field))
    others: list[str] = []
    for b in bindings:
        verifier = b.verification_tool
        entity = entities.get(verifier)
        if entity is None:
            if value is not None and ledger.informs(verifier, (b.verification_field, value), index):
                return VERIFIED
            continue
        values = _values(call.arguments, entity.fields)
        if values is not None:
            for key in entity.keys:
                for pattern in _agreeing(values):
                    if ledger.informs_entity((verifier, key, pattern), index):
                        return VERIFIED
        others += [f for f in entity.fields if f != field and f not in others]
    if any(
        ledger.informs_unrecorded(b.verification_tool, b.verification_field, index)
        for b in bindings
    ):
        return UNCHECKED  # a verification whose arguments were not recorded: any values
    tools = name_list(
        sorted({b.verification_tool for b in bindings if b.verification_tool in entities})
    )
    named = " and ".join([field, *others])
    reason = f"{named} not verified together by one earlier successful {tools} call"
    return Verdict(False, reason, field, others=tuple(others))
