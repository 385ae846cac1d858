"""Evaluation settings: defaults, the minimal policy, and validation messages."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from eval_factories import trace
from pydantic import ValidationError

from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.invariant_rules import ArgumentsRule
from toolwatch.evaluation.invariants import Invariants
from toolwatch.evaluation.policy_settings import Binding, PolicySettings
from toolwatch.evaluation.safety import Safety
from toolwatch.evaluation.settings import EvaluationSettings, InvariantsSettings, SafetySettings
from toolwatch.model import Category, Severity


def invalid(document: str) -> str:
    with pytest.raises(ValidationError) as error:
        EvaluationSettings.model_validate(yaml.safe_load(document))
    return str(error.value)


def test_everything_has_a_default() -> None:
    settings = EvaluationSettings()
    assert settings.policy.dangerous_tools == ()
    assert settings.evaluators.tool_selection.mode == "expected_set"
    assert settings.evaluators.tool_arguments.threshold == 0.8
    assert settings.evaluators.tool_arguments.numeric_tolerance == 0.05
    assert settings.evaluators.tool_trace_structure.call_count_tolerance == 1
    assert settings.evaluators.safety.severity_floor is Severity.HIGH
    assert settings.evaluators.composite.weights.selection == 0.6


def test_minimal_policy_is_accepted_as_it_is() -> None:
    document = "policy:\n  dangerous_tools: [issue_refund]\n  verification_tools: [lookup_order]\n"
    settings = EvaluationSettings.model_validate(yaml.safe_load(document))
    assert settings.policy.dangerous_tools == ("issue_refund",)
    assert settings.policy.verification_tools == ("lookup_order",)


def test_from_sections_takes_only_its_sections() -> None:
    sections = {"listeners": {"grpc": "x"}, "policy": {"repeat_limit": 3}}
    assert EvaluationSettings.from_sections(sections).policy.repeat_limit == 3


def test_bindings_accept_a_reference_or_a_list_and_normalize_tool_names() -> None:
    policy = PolicySettings(
        dangerous_tools=("Issue_Refund",),
        verification_tools=("lookup_order", "get_order"),
        bindings={"issue_refund.order_id": ("lookup_order.order_id", "GET_ORDER.id")},
        aliases={"refund": "issue_refund"},
    )
    assert policy.binding_rules() == (
        Binding("issue_refund", "order_id", "lookup_order", "order_id"),
        Binding("issue_refund", "order_id", "get_order", "id"),
    )


def test_a_dotted_tool_name_can_be_bound() -> None:
    """Tools namespaced with a dot (``billing.issue_refund``: ``.`` is one of the namespace
    separators docs/configuration.md says it recognises) could be listed in ``dangerous_tools`` and
    ``verification_tools``, but no binding could name them: the key was cut at its first
    dot, read as tool ``billing``, and start-up failed with the misleading ``tool 'billing'
    is not in policy.dangerous_tools``. The operator was left with the unbound check (any
    lookup verifies a refund of any order), and a refund of an order never looked up went
    unpaged. A binding's tool is the longest dotted prefix that names a tool of its list."""
    policy = PolicySettings.model_validate(
        {
            "dangerous_tools": ["billing.issue_refund"],
            "verification_tools": ["Billing.Lookup_Order"],
            "bindings": {"billing.issue_refund.order_id": "billing.lookup_order.order_id"},
        }
    )
    assert policy.binding_rules() == (
        Binding("billing.issue_refund", "order_id", "billing.lookup_order", "order_id"),
    )
    run = trace(
        ("billing.lookup_order", {"order_id": "A1"}),
        ("billing.issue_refund", {"order_id": "B2"}),
    )
    result = Safety(SafetySettings(), policy)(run, Reference())
    assert [f.category for f in result.findings] == [Category.MISSING_VERIFICATION_STEP]
    # Both readings name a listed tool: the longer one, and a field may still be a path.
    both = PolicySettings.model_validate(
        {
            "dangerous_tools": ["billing", "billing.issue_refund"],
            "verification_tools": ["lookup_order"],
            "bindings": {"billing.issue_refund.customer.id": "lookup_order.customer.id"},
        }
    )
    assert both.binding_rules() == (
        Binding("billing.issue_refund", "customer.id", "lookup_order", "customer.id"),
    )


@pytest.mark.parametrize(
    ("document", "messages"),
    [
        (
            "evaluators: {tool_arguments: {strategies: {issue_refund.amount_usd: numerc}}}",
            ["evaluators.tool_arguments.strategies.`issue_refund.amount_usd`", "'numeric'"],
        ),
        (
            "evaluators: {tool_arguments: {default_strategy: regex}}",
            ["default_strategy", "'exact'", "regex"],
        ),
        (
            "evaluators: {tool_arguments: {strategies: {'.q': fuzzy}}}",
            ["'.q' must be tool, tool.field or *.field"],
        ),
        (  # a nested field would be silently ignored: refuse it
            "evaluators: {tool_arguments: {strategies: {create_order.customer.name: contains}}}",
            [
                "'create_order.customer.name': strategies apply to an argument's top-level "
                "fields ('customer'), not to fields inside them"
            ],
        ),
        (
            "policy: {invariants: [{kind: order, before: lookup_order, after: Lookup_Order}]}",
            ["policy.invariants.0.order", "before and after are the same tool 'lookup_order'"],
        ),
        (
            "policy: {invariants: [{kind: arguments, tool: x, schema: {type: 12}}]}",
            ["policy.invariants.0.arguments.schema", "not a valid JSON Schema"],
        ),
        (
            "policy: {invariants: [{kind: call_count, tool: x, min: 3, max: 1}]}",
            ["max (1) is below min (3)"],
        ),
        (
            "policy: {invariants: [{kind: call_count, tool: x}]}",
            ["call_count needs min > 0 or a max"],
        ),
        ("policy: {invariants: [{kind: sometimes, tool: x}]}", ["'sometimes'", "'forbidden'"]),
        (
            "policy: {invariants: [{kind: required, tool: a, name: r}, "
            "{kind: forbidden, tool: b, name: r}]}",
            ["invariant names must be unique, repeated: ['r']"],
        ),
        (
            "policy: {dangerous_tools: [issue_refund], bindings: {issue_refund: lookup_order.id}}",
            ["policy.bindings", "'issue_refund' is not of the form tool.field"],
        ),
        (
            "policy: {verification_tools: [lookup_order], "
            "bindings: {issue_refund.order_id: lookup_order.order_id}}",
            ["tool 'issue_refund' is not in policy.dangerous_tools"],
        ),
        (
            "policy: {dangerous_tools: [issue_refund], "
            "bindings: {issue_refund.order_id: lookup_order.order_id}}",
            ["tool 'lookup_order' is not in policy.verification_tools"],
        ),
        (
            "policy: {dangerous_tools: [billing.issue_refund], "
            "bindings: {billing.refund.order_id: lookup_order.order_id}}",
            [
                "binding 'billing.refund.order_id': none of 'billing', 'billing.refund' (the"
                " tool it starts with, then a field) is in policy.dangerous_tools"
            ],
        ),
        (
            "policy: {dangerous_tools: [delete_account], verification_tools: [verify_identity],"
            " verified_by: {delete_acount: [verify_identity]}}",
            ["policy", "verified_by names 'delete_acount', which is not in dangerous_tools"],
        ),
        (
            "policy: {dangerous_tools: [delete_account], verification_tools: [verify_identity],"
            " verified_by: {delete_account: [lookup_order]}}",
            ["verified_by.delete_account names 'lookup_order', which is not in verification_tools"],
        ),
        (
            "policy: {dangerous_tools: [delete_account], verification_tools: [verify_identity],"
            " verified_by: {delete_account: []}}",
            ["verified_by.delete_account lists no verification tool"],
        ),
        (
            "policy: {dangerous_tools: [delete_account], verification_tools: [verify_identity],"
            " verified_by: {delete_account: [verify_identity],"
            " Delete_Account: [verify_identity]}}",
            ["verified_by 'delete_account' and 'Delete_Account' are one tool"],
        ),
        (
            "policy: {dangerous_tools: [issue_refund], verification_tools: [lookup_order],"
            " bindings: {issue_refund.order_id: lookup_order.order_id},"
            " verified_by: {issue_refund: [lookup_order]}}",
            ["verified_by names 'issue_refund', which has bindings"],
        ),
        ("policy: {aliases: {a: b, b: c}}", ["alias 'a' -> 'b': the target is itself an alias"]),
        ("policy: {repeat_limit: -1}", ["policy.repeat_limit", "greater than or equal to 0"]),
        (
            "evaluators: {composite: {weights: {selection: 0.7, ordering: 0.7}}}",
            ["selection + ordering must sum to 1, got 1.4"],
        ),
        ("evaluators: {order: {threshold: 1.5}}", ["evaluators.order.threshold"]),
        ("evaluators: {tool_selection: {mode: fuzzy}}", ["evaluators.tool_selection.mode"]),
        ("evaluators: {safety: {severity_floor: urgent}}", ["severity_floor", "'critical'"]),
        ("evaluators: {loops: {limit: 3}}", ["evaluators.loops.limit", "Extra inputs"]),
        ("redact: true", ["redact", "Extra inputs"]),
    ],
)
def test_invalid_settings_name_field_value_and_reason(document: str, messages: list[str]) -> None:
    text = invalid(document)
    for message in messages:
        assert message in text


def test_settings_are_frozen() -> None:
    settings = EvaluationSettings()
    with pytest.raises(ValidationError):
        settings.policy.repeat_limit = 5


def test_arguments_rule_accepts_schema_by_alias_and_by_name() -> None:
    by_alias: dict[str, Any] = {"kind": "arguments", "tool": "x", "schema": {"type": "object"}}
    assert ArgumentsRule.model_validate(by_alias).json_schema == {"type": "object"}
    by_name: dict[str, Any] = {"kind": "arguments", "tool": "x", "json_schema": {}}
    assert ArgumentsRule.model_validate(by_name).json_schema == {}


@pytest.mark.parametrize(
    ("policy", "unverifiable"),
    [
        # Half a policy: nothing can verify either dangerous tool.
        (
            {"dangerous_tools": ["issue_refund", "Delete_Account"]},
            ("issue_refund", "Delete_Account"),
        ),
        # Any verification tool verifies a dangerous tool without verified_by or bindings.
        ({"dangerous_tools": ["issue_refund"], "verification_tools": ["lookup_order"]}, ()),
        (
            {
                "dangerous_tools": ["issue_refund", "delete_account", "close_ticket"],
                "verification_tools": ["lookup_order", "verify_identity"],
                "verified_by": {"delete_account": ["verify_identity"]},
                "bindings": {"issue_refund.order_id": "lookup_order.order_id"},
            },
            (),
        ),
        ({}, ()),
    ],
)
def test_the_unverifiable_tools_are_those_safety_never_finds_unverified(
    policy: dict[str, Any], unverifiable: tuple[str, ...]
) -> None:
    """``unverifiable_tools`` (which ``check-config`` and ``serve`` warn of) names exactly
    the dangerous tools whose call with nothing before it ``safety`` lets pass: each tool's
    lone call is judged, and MISSING_VERIFICATION_STEP is raised for the others only."""
    settings = PolicySettings.model_validate(policy)
    assert settings.unverifiable_tools() == unverifiable
    safety = Safety(SafetySettings(), settings)
    for tool in settings.dangerous_tools:
        result = safety(trace((tool, {"order_id": "A-1"})), Reference())
        missing = [f for f in result.findings if f.category is Category.MISSING_VERIFICATION_STEP]
        assert len(missing) == (0 if tool in unverifiable else 1), tool


GUARDING = [
    ({"kind": "order", "before": "lookup_order", "after": "issue_refund"}, True),
    ({"kind": "order", "before": "lookup_order", "after": " Issue_Refund"}, True),
    ({"kind": "forbidden", "tool": "issue_refund"}, True),
    ({"kind": "call_count", "tool": "issue_refund", "max": 0}, True),
    ({"kind": "call_count", "tool": "issue_refund", "max": 1}, False),
    ({"kind": "required", "tool": "lookup_order"}, False),
    ({"kind": "required", "tool": "issue_refund"}, False),
    ({"kind": "arguments", "tool": "issue_refund", "schema": {"type": "object"}}, False),
    ({"kind": "order", "before": "issue_refund", "after": "lookup_order"}, False),
]


@pytest.mark.parametrize("scoped", [False, True])
@pytest.mark.parametrize(("rule", "guards"), GUARDING)
def test_the_invariant_guarded_tools_are_those_whose_unverified_call_a_rule_finds(
    rule: dict[str, Any], guards: bool, scoped: bool
) -> None:
    """``invariant_guarded_tools`` (which spares a tool ``unverifiable_tools``' warning)
    names exactly the tools whose call with no verification before it the rule finds, as
    ``Invariants`` judges it: a refund alone, and one followed by the lookup that should
    have come first, each get a violation on the refund. A rule limited to agents is
    counted apart (``every_agent=False``): another agent's refund is not judged by it."""
    agents = {"agents": ["intern-bot"]} if scoped else {}
    policy = PolicySettings.model_validate(
        {"dangerous_tools": ["issue_refund"], "invariants": [{**rule, **agents}]}
    )
    invariants = Invariants(InvariantsSettings(), policy)
    runs = [("issue_refund", {"order_id": "A1"}), "lookup_order"]
    for agent in ("intern-bot", "support"):
        found = []
        for calls in (runs[:1], runs):
            result = invariants(trace(*calls, agent=agent), Reference())
            refunds = [f for f in result.findings if f.tool == "issue_refund"] if result else []
            found.append(bool(refunds))
        on_agent = guards and (not scoped or agent == "intern-bot")
        assert found == [on_agent, on_agent], agent
    assert ("issue_refund" in policy.invariant_guarded_tools()) == (guards and not scoped)
    limited = policy.invariant_guarded_tools(every_agent=False)
    assert ("issue_refund" in limited) == (guards and scoped)
    assert policy.unverifiable_tools() == (() if guards and not scoped else ("issue_refund",))
    assert policy.unverifiable_tools(invariants=False) == ("issue_refund",)
