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
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal, TypeAlias

from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for
from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from toolwatch.model import Severity
from toolwatch.names import NameNormalizer, fold, strip_prefix
from toolwatch.sections import WEEK_SECONDS, Seconds
from toolwatch.sections import Section as _Section

__all__ = [
    "Against",
    "ArgumentsRule",
    "Binding",
    "CallCountRule",
    "ComparingSettings",
    "CompositeSettings",
    "CompositeWeights",
    "EvaluationSettings",
    "EvaluatorsSettings",
    "ForbiddenRule",
    "Invariant",
    "InvariantsSettings",
    "LoopsSettings",
    "OrderRule",
    "OrderSettings",
    "PolicySettings",
    "RequiredRule",
    "SafetySettings",
    "SelectionMode",
    "Strategy",
    "StructureSettings",
    "ToolArgumentsSettings",
    "ToolSelectionSettings",
    "split_tool_field",
]

#: Which reference a comparing evaluator judges against. ``auto``: the golden case when the
#: run has one, else the shadow source.
Against: TypeAlias = Literal["auto", "expected", "source"]
#: Tool-selection modes (DESIGN §7); see ``toolwatch.evaluation.selection``.
SelectionMode: TypeAlias = Literal["expected", "expected_set", "exact", "set", "first"]
#: Per-field argument strategies; see ``toolwatch.evaluation.similarity``.
Strategy: TypeAlias = Literal["exact", "subset", "numeric", "contains", "fuzzy"]
Score = Annotated[float, Field(ge=0.0, le=1.0)]
ToolName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
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


def split_tool_field(
    ref: str, is_tool: Callable[[str], bool] | None = None, listed: str = ""
) -> tuple[str, str]:
    """Split ``tool.field``. A tool's name may hold dots itself (``billing.issue_refund``:
    ``.`` is one of the namespace separators ``names`` recognises) and a field may be a
    dotted path into nested arguments (``create_order.customer.id``; a part in digits indexes
    an array, ``issue_refund.items.0.order_id``), so with ``is_tool``
    the tool is the longest dotted prefix it accepts (``billing.issue_refund.order_id``:
    ``billing.issue_refund``'s ``order_id`` when that is a tool, else ``billing``'s
    ``issue_refund.order_id``). Without ``is_tool`` (the form alone) the cut is at the first
    dot. Raises ``ValueError`` naming the value: not ``tool.field``, or no prefix of it
    a tool ``is_tool`` accepts (``listed`` says where those are)."""
    tool, dot, field = ref.partition(".")
    if not dot or not tool.strip() or not field.strip():
        raise ValueError(f"{ref!r} is not of the form tool.field")
    if is_tool is None:
        return tool.strip(), field.strip()
    tried: list[str] = []
    cut = ref.rfind(".")
    while cut > 0:
        tool, field = ref[:cut].strip(), ref[cut + 1 :].strip()
        if tool and field:
            if is_tool(tool):
                return tool, field
            tried.append(tool)
        cut = ref.rfind(".", 0, cut)
    if len(tried) == 1:
        raise ValueError(f"tool {tried[0]!r} is not in {listed}")
    shown = ", ".join(repr(t) for t in reversed(tried))
    raise ValueError(f"none of {shown} (the tool it starts with, then a field) is in {listed}")


#: How names are compared where the policy's normalizer compares them, as refusals say it.
_AS_CALLS = (
    "tool names are compared as calls' are (trimmed, case-folded, tool_prefix removed, aliased)"
)


def _refuse_one_name_twice(
    names: Iterable[str],
    what: str,
    noun: str,
    same: Callable[[str], Hashable] = fold,
    compared: str = "names are compared trimmed and case-folded",
) -> None:
    """Refuse two of ``names`` that ``same`` makes one ``noun``: what is keyed by them would
    keep one and silently drop the other. Raises ``ValueError`` naming both as written, as
    ``what`` ("agents") and saying how they are ``compared``."""
    seen: dict[Hashable, str] = {}
    for name in names:
        other = seen.setdefault(same(name), name)
        if other != name:
            raise ValueError(f"{what} {other!r} and {name!r} are one {noun}: {compared}")


@dataclass(frozen=True, slots=True)
class Binding:
    """A dangerous call's ``field`` must equal ``verification_field`` of an earlier successful
    ``verification_tool`` call. Tool names are normalized."""

    tool: str
    field: str
    verification_tool: str
    verification_field: str


class _Rule(_Section):
    """Common to every invariant: an optional ``name`` (the finding's label; unique), the
    ``severity`` of a violation (default ``high``: someone wrote this rule down), and the
    ``agents`` it applies to (empty: every agent)."""

    name: str | None = None
    severity: Severity = Severity.HIGH
    agents: tuple[str, ...] = ()


class ForbiddenRule(_Rule):
    """``tool`` must never be called."""

    kind: Literal["forbidden"]
    tool: ToolName


class RequiredRule(_Rule):
    """``tool`` must be called at least once."""

    kind: Literal["required"]
    tool: ToolName


class OrderRule(_Rule):
    """Every call of ``after`` must have an earlier call (lower sequence index) of ``before``;
    a run that never calls ``after`` satisfies it."""

    kind: Literal["order"]
    before: ToolName
    after: ToolName

    @model_validator(mode="after")
    def _distinct(self) -> OrderRule:
        if fold(self.before) == fold(self.after):
            raise ValueError(f"before and after are the same tool {self.before!r}")
        return self


class CallCountRule(_Rule):
    """``tool`` is called between ``min`` and ``max`` times (inclusive; no ``max``: unbounded)."""

    kind: Literal["call_count"]
    tool: ToolName
    min: Annotated[int, Field(ge=0)] = 0
    max: Annotated[int, Field(ge=0)] | None = None

    @model_validator(mode="after")
    def _bounds(self) -> CallCountRule:
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        if self.max is None and self.min == 0:
            raise ValueError("call_count needs min > 0 or a max")
        return self


class ArgumentsRule(_Rule):
    """Every call of ``tool`` has arguments valid against ``schema`` (a JSON Schema; its
    ``$schema`` picks the draft, default the latest)."""

    model_config = ConfigDict(populate_by_name=True)

    kind: Literal["arguments"]
    tool: ToolName
    json_schema: dict[str, Any] = Field(alias="schema")

    @field_validator("json_schema")
    @classmethod
    def _valid_schema(cls, schema: dict[str, Any]) -> dict[str, Any]:
        try:
            validator_for(schema).check_schema(schema)
        except SchemaError as error:
            where = "/".join(str(p) for p in error.absolute_path) or "(root)"
            raise ValueError(f"not a valid JSON Schema at {where}: {error.message}") from None
        except RecursionError:  # jsonschema checks nesting by recursion
            raise ValueError("a JSON Schema nested too deeply to check") from None
        return schema


#: One hand-written rule, told apart by ``kind``.
Invariant = Annotated[
    ForbiddenRule | RequiredRule | OrderRule | CallCountRule | ArgumentsRule,
    Field(discriminator="kind"),
]


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
    - ``invariants``: hand-written rules (the ``*Rule`` models above), told apart by ``kind``.
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
        _refuse_one_name_twice(aliases, "aliases", "alias")
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
        _refuse_one_name_twice(allowed, "agents", "agent")
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
        _refuse_one_name_twice(self.repeat_limits, "repeat_limits", "tool", normalize, _AS_CALLS)
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
        _refuse_one_name_twice(self.verified_by, "verified_by", "tool", normalize, _AS_CALLS)
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
        _refuse_one_name_twice(fields, what, "tool.field", tool_field, _AS_CALLS)
        tools = [key for key in self.strategies if "." not in key]
        _refuse_one_name_twice(tools, what, "tool", normalize, _AS_CALLS)


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
