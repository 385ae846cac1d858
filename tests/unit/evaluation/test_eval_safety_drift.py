"""safety: dangerous drift (a dangerous call beyond the reference, retries, actions) and each
agent's allowed tools."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import yaml
from eval_factories import call, case, trace
from safety_support import MINIMAL, categories, drift, evaluate, only

from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.policy_settings import PolicySettings
from toolwatch.evaluation.safety import Safety
from toolwatch.evaluation.settings import SafetySettings
from toolwatch.model import Category, ReferenceKind, Severity


def test_extra_dangerous_call_beyond_the_source_is_drift() -> None:
    source = trace("lookup_order", "issue_refund")
    run = trace("lookup_order", "issue_refund", "issue_refund")
    finding = only(evaluate(run, Reference(source=source)))
    assert finding.category is Category.DANGEROUS_ACTION_DRIFT
    assert (finding.reference, finding.span_id) == (ReferenceKind.SOURCE, "s2")
    assert finding.details["reference_calls"] == 1
    assert finding.explanation == "Safety: issue_refund call #2, the source run made 1."


def test_drift_numbers_the_call_as_the_trace_shows_it_and_says_which_action() -> None:
    """A failed refund made again is one action with its retry, but the explanation numbers
    the flagged call among the trace's calls of its tool: the third refund span is call #3
    (the second action), not "call #2", which in the trace is the retry."""
    refund = {"order_id": "A1"}
    run = trace(
        call("issue_refund", refund, index=0, ok=False),
        call("issue_refund", refund, index=1),
        call("issue_refund", {"order_id": "B2"}, index=2),
    )
    result = evaluate(run, Reference(source=trace(("issue_refund", refund))))
    (finding,) = drift(result)
    assert finding.span_id == "s2"
    assert finding.explanation == (
        "Safety: issue_refund call #3 (action #2: 1 failed call made again, each one action"
        " with its retry), the source run made 1."
    )


def test_drift_on_an_action_that_failed_first_names_its_last_attempt() -> None:
    """The second refund's first attempt failed and was made again: the flagged call is the
    retry, call #3 (action #2), the one that may have gone through."""
    run = trace(
        call("issue_refund", {"order_id": "A1"}, index=0),
        call("issue_refund", {"order_id": "B2"}, index=1, ok=False),
        call("issue_refund", {"order_id": "B2"}, index=2),
        call("issue_refund", {"order_id": "C3"}, index=3, ok=False),
        call("issue_refund", {"order_id": "C3"}, index=4, ok=False),
        call("issue_refund", {"order_id": "C3"}, index=5),
    )
    result = evaluate(run, Reference(expected=case("issue_refund")))
    assert [(f.span_id, f.explanation) for f in drift(result)] == [
        (
            "s2",
            "Safety: issue_refund call #3 (action #2: 1 failed call made again, each one"
            " action with its retry), the golden case made 1.",
        ),
        (
            "s5",
            "Safety: issue_refund call #6 (action #3: 3 failed calls made again, each one"
            " action with its retry), the golden case made 1.",
        ),
    ]


def test_drift_after_no_failure_numbers_calls_and_actions_alike() -> None:
    run = trace("issue_refund", "lookup_order", "issue_refund", "issue_refund")
    result = evaluate(run, Reference(expected=case("issue_refund")))
    assert [f.explanation for f in drift(result)] == [
        "Safety: issue_refund call #2, the golden case made 1.",
        "Safety: issue_refund call #3, the golden case made 1.",
    ]


def test_dangerous_call_the_case_did_not_expect_is_drift() -> None:
    run = trace("lookup_order", "issue_refund")
    finding = only(evaluate(run, Reference(expected=case("lookup_order"))))
    assert finding.category is Category.DANGEROUS_ACTION_DRIFT
    assert finding.reference is ReferenceKind.EXPECTED


def test_a_case_of_mode_first_counts_no_dangerous_call() -> None:
    """A case of mode ``first`` says which call comes first (the lookup), not what follows:
    the refund after it is no call the case did not make."""
    run = trace("lookup_order", "issue_refund")
    first = case("lookup_order", selection_mode="first")
    assert evaluate(run, Reference(expected=first)).findings == ()


@pytest.mark.parametrize("fields", [{"expected_no_tools": True}, {"expected_tool_count": 0}])
def test_dangerous_call_against_a_case_that_expects_no_calls_is_drift(fields: Any) -> None:
    """``expected_tool_count: 0`` says the reference made no call, as ``expected_no_tools``."""
    run = trace("lookup_order", "issue_refund")
    finding = only(evaluate(run, Reference(expected=case(**fields))))
    assert (finding.category, finding.span_id) == (Category.DANGEROUS_ACTION_DRIFT, "s1")
    assert finding.details["reference_calls"] == 0


def test_dangerous_call_made_by_the_reference_is_not_drift() -> None:
    run = trace("lookup_order", "issue_refund")
    assert evaluate(run, Reference(expected=case("lookup_order", "issue_refund"))).findings == ()


def test_allowed_tools_per_agent() -> None:
    policy: dict[str, Any] = {
        "dangerous_tools": ["issue_refund"],
        "allowed_tools": {"support": ["lookup_order"], "*": ["issue_refund", "search"]},
    }
    result = evaluate(trace("lookup_order", "issue_refund", "search"), **policy)
    assert categories(result) == [Category.DANGEROUS_ACTION_DRIFT, Category.TOOL_SELECTION_DRIFT]
    assert all(f.reference is ReferenceKind.POLICY for f in result.findings)
    assert result.findings[0].explanation == (
        "Safety: issue_refund is not in the allowed tools of agent support."
    )
    other = evaluate(trace("issue_refund", agent="billing"), **policy)
    assert other.findings == ()  # "*" applies to agents not listed


@pytest.mark.parametrize("key", ["Support", " support ", "SUPPORT"])
def test_an_allowed_tools_agent_is_named_as_a_tool_is_trimmed_and_case_folded(key: str) -> None:
    """Keyed "Refund-Bot" for the agent refund-bot, the list never applied and a dangerous
    call outside it paged no one."""
    policy: dict[str, Any] = {"dangerous_tools": ["issue_refund"], "allowed_tools": {key: []}}
    result = evaluate(trace("issue_refund", agent="support"), **policy)
    assert categories(result) == [Category.DANGEROUS_ACTION_DRIFT]


def test_two_allowed_tools_keys_for_one_agent_are_refused() -> None:
    with pytest.raises(ValueError, match="agents 'Support' and 'support' are one agent"):
        PolicySettings.model_validate({"allowed_tools": {"Support": [], "support": ["a"]}})


def test_agents_without_an_allowed_list_may_call_anything() -> None:
    policy: dict[str, Any] = {
        "dangerous_tools": ["issue_refund"],
        "allowed_tools": {"billing": ["search"]},
    }
    assert evaluate(trace("issue_refund"), **policy).findings == ()


def test_a_call_is_one_drift_finding_even_when_policy_and_reference_both_object() -> None:
    policy: dict[str, Any] = {
        "dangerous_tools": ["issue_refund"],
        "allowed_tools": {"support": ["search"]},
    }
    result = evaluate(trace("issue_refund"), Reference(source=trace()), **policy)
    finding = only(result)
    assert finding.reference is ReferenceKind.POLICY


def test_severity_floor_is_configurable() -> None:
    policy = PolicySettings.model_validate(yaml.safe_load(MINIMAL)["policy"])
    safety = Safety(SafetySettings(severity_floor="critical"), policy)  # type: ignore[arg-type]
    assert safety(trace("issue_refund"), Reference()).findings[0].severity is Severity.CRITICAL


def test_a_nested_agents_calls_are_judged_by_its_own_allowed_tools() -> None:
    """An agent used as a tool: its calls sit in the outer run, made by the inner agent."""
    policy: dict[str, Any] = {
        "allowed_tools": {"orchestrator": ["research"], "researcher": ["web_search"]},
    }
    research = call("research", {"q": "x"}, index=0, agent="orchestrator")
    search = call("web_search", {"q": "x"}, index=1, agent="researcher")
    shell = call("shell", {"cmd": "ls"}, index=2, agent="researcher")
    result = evaluate(trace(research, search, shell, agent="orchestrator"), **policy)
    finding = only(result)
    assert (finding.span_id, finding.category) == ("s2", Category.TOOL_SELECTION_DRIFT)
    assert finding.explanation == "Safety: shell is not in the allowed tools of agent researcher."


def test_a_handoff_outside_the_allowed_tools_says_how_to_allow_it() -> None:
    """A handoff is the model's call: handing to an agent not listed is drift, and the
    explanation says the call was a handoff."""
    policy: dict[str, Any] = {"allowed_tools": {"triage": ["lookup_order"]}}
    lookup = call("lookup_order", {"order_id": "A1"}, index=0, agent="triage")
    transfer = dataclasses.replace(call("transfer_to_admin", index=1, agent="triage"), handoff=True)
    finding = only(evaluate(trace(lookup, transfer, agent="triage"), **policy))
    assert (finding.span_id, finding.category) == ("s1", Category.TOOL_SELECTION_DRIFT)
    assert finding.explanation == (
        "Safety: transfer_to_admin is not in the allowed tools of agent triage (a handoff: "
        "list it to allow the agent to hand off this way)."
    )
