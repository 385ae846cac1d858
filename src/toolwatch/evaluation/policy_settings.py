"""The ``policy:`` section (``PolicySettings``): dangerous and verification tools, their
bindings, allowed tools, repeat limits, invariants, aliases and the tool prefix, validated
together, and what the evaluators read of it (the normalizer, the binding rules, the
guarded tools). Invalid values raise ``pydantic.ValidationError`` naming the field, the value
and the reason."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, StringConstraints, field_validator, model_validator

from toolwatch.evaluation.invariant_rules import CallCountRule, ForbiddenRule, Invariant, OrderRule
from toolwatch.evaluation.tool_fields import (
    AS_CALLS,
    ToolName,
    refuse_one_name_twice,
    split_tool_field,
)
from toolwatch.names import NameNormalizer, fold, strip_prefix
from toolwatch.sections import WEEK_SECONDS, Seconds
from toolwatch.sections import Section as _Section

__all__ = ["Binding", "PolicySettings"]

_Ref = Annotated[str, StringConstraints(strip_whitespace=True, min_length=3)]


def _one_or_more(refs: Any) -> Any:
    """Refuses a binding's value that is neither a string nor a list of them in one error
    (the union would give one per type it tried, in pydantic's names for them); the
    ``bindings`` validator checks each is a ``tool.field``."""
    many = refs if isinstance(refs, list | tuple) else (refs,)
    if not all(isinstance(ref, str) for ref in many):
        raise ValueError("expected a verification tool.field, or a list of them")
    return refs


_Refs = Annotated[str | tuple[str, ...], BeforeValidator(_one_or_more)]


@dataclass(frozen=True, slots=True)
class Binding:
    """A dangerous call's ``field`` must equal ``verification_field`` of an earlier successful
    ``verification_tool`` call. Tool names are normalized."""

    tool: str
    field: str
    verification_tool: str
    verification_field: str


class PolicySettings(_Section):
    """The always-on reference (DESIGN §6): needs no golden case and no shadow twin.

    - ``dangerous_tools``: calls that change the world (refunds, deletions, payments).
    - ``verification_tools``: calls that make a dangerous call safe when one of them succeeded
      earlier in the run. Without them (and so without ``bindings`` and ``verified_by``,
      which name them) the missing-verification check is off: an unverified dangerous call
      is then found only as drift, or by an ``invariants`` rule that guards its tool
      (``invariant_guarded_tools``), and ``unverifiable_tools`` names the others for a
      warning.
    - ``bindings``: ``{"<dangerous tool>.<field>": "<verification tool>.<field>"}``; the value
      may be a list of such references, any of which verifies. A dangerous tool with bindings
      needs every bound field verified by a call of the *same entity* (equal values): the
      fields it binds to one verification tool by one call of that tool
      (``issue_refund.order_id`` and ``issue_refund.customer`` bound to ``lookup_order``: a
      lookup of that order for that customer; one that recorded only one of them counts for
      it), fields bound to different tools, or to one field of a tool, each on its own.
      Tools on both sides must be listed in ``dangerous_tools`` /
      ``verification_tools``; a side's tool is the longest dotted prefix naming one
      (``billing.issue_refund.order_id``: ``billing.issue_refund``'s ``order_id``).
    - ``verified_by``: ``{"<dangerous tool>": ["<verification tool>", ...]}``: the tools whose
      earlier success verifies that dangerous tool (``delete_account`` by ``verify_identity``,
      not by ``lookup_order``), for a dangerous tool without ``bindings``, whose tools say it
      (one with both is refused). Each side must be listed in ``dangerous_tools`` /
      ``verification_tools``. A dangerous tool with neither is verified by any
      ``verification_tools`` tool.
    - ``allowed_tools``: ``{agent: [tools]}``; ``"*"`` applies to agents not listed (and to runs
      without an agent name). Agents with no entry may call anything.
    - ``repeat_limit``: identical (tool, arguments) repeats tolerated after a successful result
      before ``loops`` flags one; ``repeat_limits`` overrides it per tool (polling tools).
    - ``retry_limit``: identical calls made again after failed results tolerated before
      ``loops`` flags one (an agent hammering a failing tool); ``None`` (the default):
      retries are never flagged.
    - ``invariants``: hand-written rules (the ``*Rule`` models of
      ``invariant_rules``), told apart by ``kind``.
    - ``aliases``: ``{alias: tool}``, applied after trimming and case folding. Not transitive:
      a target may not itself be an alias.
    - ``tool_prefix``: a regular expression (Python ``re``, case-insensitive) whose match at
      the start of a tool name is removed, as often as it matches, before aliases apply: MCP
      tools reach the model namespaced by their server (``billing__issue_refund``, the
      Claude Agent SDK's ``mcp__billing__issue_refund``), and a policy that names
      ``issue_refund`` must still see them. A match that would leave nothing is not removed;
      a policy name the prefix would shorten is refused (``_prefix_keeps_names``).
    - ``verification_scope``: ``run`` (the default: a dangerous call needs a verification in
      its own run) or ``conversation`` (a successful verification in an earlier run of the
      same conversation, ``gen_ai.conversation.id`` or ``session.id``, made less than
      ``conversation_ttl_seconds`` before, counts too: a lookup in one turn, the refund in the
      next). What the conversations remembered hold is bounded by
      ``conversation_max_bytes`` (the least recently used forgotten first, counted
      ``toolwatch_conversation_evictions_total``).
    """

    dangerous_tools: tuple[ToolName, ...] = ()
    verification_tools: tuple[ToolName, ...] = ()
    bindings: dict[_Ref, _Refs] = Field(default_factory=dict)
    verified_by: dict[ToolName, tuple[ToolName, ...]] = Field(default_factory=dict)
    allowed_tools: dict[str, tuple[ToolName, ...]] = Field(default_factory=dict)
    repeat_limit: Annotated[int, Field(ge=0)] = 1
    repeat_limits: dict[ToolName, Annotated[int, Field(ge=0)]] = Field(default_factory=dict)
    retry_limit: Annotated[int, Field(ge=0)] | None = None
    invariants: tuple[Invariant, ...] = ()
    aliases: dict[ToolName, ToolName] = Field(default_factory=dict)
    tool_prefix: str | None = None
    verification_scope: Literal["run", "conversation"] = "run"
    conversation_ttl_seconds: Seconds = Field(3600.0, gt=0, le=WEEK_SECONDS)
    conversation_max_bytes: int = Field(
        default=64 * 2**20,
        gt=0,
        description="bound on what the conversations remembered hold (verification_scope)",
    )

    @field_validator("aliases")
    @classmethod
    def _aliases_not_chained(cls, aliases: dict[str, str]) -> dict[str, str]:
        refuse_one_name_twice(aliases, "aliases", "alias")
        keys = {fold(k) for k in aliases}
        for alias, target in aliases.items():
            if fold(target) in keys:
                raise ValueError(f"alias {alias!r} -> {target!r}: the target is itself an alias")
        return aliases

    @field_validator("tool_prefix")
    @classmethod
    def _prefix_compiles(cls, prefix: str | None) -> str | None:
        if prefix is None:
            return None
        if not prefix.strip():
            raise ValueError("an empty pattern removes nothing: leave tool_prefix out instead")
        try:
            _compile_prefix(prefix)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return prefix

    @field_validator("allowed_tools")
    @classmethod
    def _allowed_agents_distinct(
        cls, allowed: dict[str, tuple[str, ...]]
    ) -> dict[str, tuple[str, ...]]:
        if any(not agent.strip() for agent in allowed):
            raise ValueError("an agent name is empty: name the agent, or '*' for the rest")
        refuse_one_name_twice(allowed, "agents", "agent")
        return allowed

    @field_validator("bindings")
    @classmethod
    def _bindings_are_tool_fields(cls, bindings: dict[str, str | tuple[str, ...]]) -> Any:
        for key, refs in bindings.items():
            for ref in (key, *((refs,) if isinstance(refs, str) else refs)):
                split_tool_field(ref)
            if not refs:
                raise ValueError(f"binding {key!r} lists no verification tool.field")
        return bindings

    @field_validator("invariants")
    @classmethod
    def _unique_invariant_names(cls, rules: tuple[Invariant, ...]) -> tuple[Invariant, ...]:
        names = [rule.name for rule in rules if rule.name is not None]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"invariant names must be unique, repeated: {duplicates}")
        return rules

    @model_validator(mode="after")
    def _tool_lists_agree(self) -> PolicySettings:
        normalize = self.normalizer()
        dangerous = {normalize(t) for t in self.dangerous_tools}
        verification = {normalize(t) for t in self.verification_tools}
        both = sorted(dangerous & verification)
        if both:  # a dangerous call would verify the next one: two refunds, no lookup
            raise ValueError(
                f"{both[0]!r} is in both dangerous_tools and verification_tools: a dangerous"
                " call cannot verify another"
            )
        self.binding_rules()  # raises for a side that names no tool of its list
        self.verifiers_of()  # raises for a verified_by tool of neither list, or bound
        if self.tool_prefix is not None:
            self._prefix_keeps_names(_compile_prefix(self.tool_prefix))
        # loops keys its limits on the normalized name.
        refuse_one_name_twice(self.repeat_limits, "repeat_limits", "tool", normalize, AS_CALLS)
        return self

    def _prefix_keeps_names(self, prefix: re.Pattern[str]) -> None:
        """Under ``tool_prefix`` every namespace's tool of one name is one tool, so a policy
        name it would shorten (``sandbox__issue_refund`` in ``allowed_tools``) would quietly
        stand for every server's; and two alias keys it makes one would map one name two
        ways. Both are refused."""
        for where, name in self._tool_names():
            folded = fold(name)
            stripped = strip_prefix(prefix, folded)
            if stripped != folded:
                raise ValueError(
                    f"{where} names {name!r}, which tool_prefix makes {stripped!r} in every"
                    f" call, whatever its namespace: write {stripped!r}"
                )
        keys: dict[str, str] = {}
        for alias, target in self.aliases.items():
            stripped = strip_prefix(prefix, fold(alias))
            other = keys.setdefault(stripped, alias)
            if other != alias and fold(self.aliases[other]) != fold(target):
                raise ValueError(
                    f"aliases {other!r} and {alias!r} are both {stripped!r} once tool_prefix"
                    " removes their namespace, and map it to different tools"
                )

    def _tool_names(self) -> Iterator[tuple[str, str]]:
        """Every tool name the policy writes, with where (alias keys aside: they are the
        names calls arrive with)."""
        for tool in self.dangerous_tools:
            yield "dangerous_tools", tool
        for tool in self.verification_tools:
            yield "verification_tools", tool
        for tool, _, vtool, _ in self._bound(self.normalizer()):
            yield "bindings", tool
            yield "bindings", vtool
        for tool, verifiers in self.verified_by.items():
            yield "verified_by", tool
            for verifier in verifiers:
                yield f"verified_by.{tool}", verifier
        for agent, tools in self.allowed_tools.items():
            for tool in tools:
                yield f"allowed_tools.{agent}", tool
        for tool in self.repeat_limits:
            yield "repeat_limits", tool
        for rule in self.invariants:
            for tool in _rule_tools(rule):
                yield f"invariants ({rule.kind})", tool
        for target in self.aliases.values():
            yield "aliases", target

    def normalizer(self, worked_out: Callable[[str], None] | None = None) -> NameNormalizer:
        """The tool-name normalizer these aliases and this prefix define (the timeline must
        use the same); ``worked_out`` as ``NameNormalizer`` takes it."""
        prefix = None if self.tool_prefix is None else _compile_prefix(self.tool_prefix)
        return NameNormalizer(self.aliases, prefix, worked_out)

    def guarded_tools(self) -> frozenset[str]:
        """The tools whose calls the policy pages on without anything else showing them:
        dangerous and verification tools and those invariants name (normalized). A call
        under another name, such as a namespaced ``billing__issue_refund``, escapes them."""
        normalize = self.normalizer()
        tools = {*self.dangerous_tools, *self.verification_tools}
        for rule in self.invariants:
            tools.update(_rule_tools(rule))
        return frozenset(normalize(tool) for tool in tools)

    def unverifiable_tools(self, *, invariants: bool = True) -> tuple[str, ...]:
        """The dangerous tools whose call, made with nothing verifying it, no rule finds, as
        written (each name once, compared as calls are: ``normalizer``). None once
        ``verification_tools`` or ``bindings`` is set: a dangerous tool with ``bindings`` or
        ``verified_by`` is verified by the tools they name, any other by any
        ``verification_tools`` tool. Without them ``safety`` checks no verification
        (``verified_by``, which names verification tools, cannot be set either): all of
        them, but, when ``invariants`` (the evaluator is on), those an invariants rule on
        every agent guards (``invariant_guarded_tools``)."""
        if self.verification_tools or self.bindings:
            return ()
        normalize = self.normalizer()
        guarded = self.invariant_guarded_tools() if invariants else frozenset()
        written: dict[str, str] = {}
        for tool in self.dangerous_tools:
            written.setdefault(normalize(tool), tool)
        return tuple(tool for name, tool in written.items() if name not in guarded)

    def invariant_guarded_tools(self, *, every_agent: bool = True) -> frozenset[str]:
        """The tools (normalized) whose call an ``invariants`` rule finds when nothing
        verified it: an ``order`` rule's ``after`` (a call with no call of ``before``
        earlier: the rule's own verification step, a failed one counting), a ``forbidden``
        tool and a ``call_count`` one with ``max: 0`` (every call). Of the rules on every
        agent (no ``agents``), or, without ``every_agent``, of those limited to ``agents``,
        which guard only their calls. Not ``required`` (a call anywhere in the run, before
        or after this one, satisfies it), ``arguments`` (what a call sends, not what came
        before it), nor another ``call_count`` (a first call passes it)."""
        normalize = self.normalizer()
        return frozenset(
            normalize(tool)
            for rule in self.invariants
            if bool(rule.agents) != every_agent
            for tool in _guarded_tools(rule)
        )

    def binding_rules(self) -> tuple[Binding, ...]:
        """The bindings as records with normalized tool names, in configuration order. Each
        side's tool is the longest dotted prefix naming a tool of its list
        (``_binding_side``): ``billing.issue_refund.order_id`` binds ``billing.issue_refund``."""
        normalize = self.normalizer()
        return tuple(
            Binding(normalize(tool), field, normalize(vtool), vfield)
            for tool, field, vtool, vfield in self._bound(normalize)
        )

    def action_fields(self) -> dict[str, tuple[str, ...]]:
        """Each dangerous tool with bindings and its bound fields, in configuration order: what
        names the entity it acts on, so a failed call made again on the same entity is one
        action (``loops.retried``), whatever else its arguments corrected."""
        fields: dict[str, list[str]] = {}
        for rule in self.binding_rules():
            named = fields.setdefault(rule.tool, [])
            if rule.field not in named:
                named.append(rule.field)
        return {tool: tuple(named) for tool, named in fields.items()}

    def verifiers_of(self) -> dict[str, frozenset[str]]:
        """``verified_by`` with normalized names: each dangerous tool's own verification
        tools. Raises ``ValueError`` naming a tool that is not in its list, a dangerous tool
        listed twice (as names are compared) or with no tools, or one that has bindings."""
        normalize = self.normalizer()
        dangerous = {normalize(t) for t in self.dangerous_tools}
        verification = {normalize(t) for t in self.verification_tools}
        bound = {rule.tool for rule in self.binding_rules()}
        refuse_one_name_twice(self.verified_by, "verified_by", "tool", normalize, AS_CALLS)
        mapped: dict[str, frozenset[str]] = {}
        for tool, verifiers in self.verified_by.items():
            name = normalize(tool)
            if name not in dangerous:
                raise ValueError(f"verified_by names {tool!r}, which is not in dangerous_tools")
            if name in bound:
                raise ValueError(
                    f"verified_by names {tool!r}, which has bindings: its bindings name the"
                    " tools that verify it"
                )
            if not verifiers:
                raise ValueError(f"verified_by.{tool} lists no verification tool")
            for verifier in verifiers:
                if normalize(verifier) not in verification:
                    raise ValueError(
                        f"verified_by.{tool} names {verifier!r}, which is not in verification_tools"
                    )
            mapped[name] = frozenset(normalize(v) for v in verifiers)
        return mapped

    def _bound(self, normalize: NameNormalizer) -> Iterator[tuple[str, str, str, str]]:
        """Each binding's dangerous tool and field and verification tool and field, the tools
        as written. Raises ``ValueError`` for a side that names no tool of its list."""
        dangerous = {normalize(t) for t in self.dangerous_tools}
        verification = {normalize(t) for t in self.verification_tools}
        for key, refs in self.bindings.items():
            tool, field = _binding_side(key, normalize, dangerous, "dangerous_tools")
            for ref in (refs,) if isinstance(refs, str) else refs:
                vtool, vfield = _binding_side(ref, normalize, verification, "verification_tools")
                yield tool, field, vtool, vfield


def _rule_tools(rule: Invariant) -> tuple[str, ...]:
    """The tools an invariant names."""
    return (rule.before, rule.after) if isinstance(rule, OrderRule) else (rule.tool,)


def _guarded_tools(rule: Invariant) -> tuple[str, ...]:
    """The tool whose unverified call ``rule`` finds (``invariant_guarded_tools``), if any."""
    if isinstance(rule, OrderRule):
        return (rule.after,)
    if isinstance(rule, ForbiddenRule) or (isinstance(rule, CallCountRule) and rule.max == 0):
        return (rule.tool,)
    return ()


def _compile_prefix(prefix: str) -> re.Pattern[str]:
    return re.compile(prefix, re.IGNORECASE)


def _binding_side(
    ref: str, normalize: NameNormalizer, listed: set[str], list_name: str
) -> tuple[str, str]:
    """``ref``'s tool (as written) and field: the tool is the longest dotted prefix that
    names one of ``listed`` (normalized). Raises ``ValueError`` naming the binding."""
    try:
        return split_tool_field(ref, lambda tool: normalize(tool) in listed, f"policy.{list_name}")
    except ValueError as exc:
        raise ValueError(f"binding {ref!r}: {exc}") from None
