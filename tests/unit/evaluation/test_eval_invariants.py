"""invariants: forbidden, required, order, call_count, arguments (JSON Schema)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from eval_factories import call, trace

from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.invariants import Invariants
from toolwatch.evaluation.policy_settings import PolicySettings
from toolwatch.evaluation.settings import InvariantsSettings
from toolwatch.model import Category, ReferenceKind, Severity
from toolwatch.model_evaluation import EvalResult
from toolwatch.model_traces import ToolTrace

REFUND_SCHEMA = {
    "type": "object",
    "required": ["order_id", "amount_usd"],
    "properties": {"amount_usd": {"type": "number", "maximum": 500}},
}


def evaluate(run: ToolTrace, *rules: dict[str, Any], floor: str = "low") -> EvalResult | None:
    policy = PolicySettings.model_validate({"invariants": list(rules)})
    settings = InvariantsSettings.model_validate({"severity_floor": floor})
    return Invariants(settings, policy)(run, Reference())


def broken(run: ToolTrace, *rules: dict[str, Any]) -> list[str]:
    result = evaluate(run, *rules)
    assert result is not None
    return [f.details["rule"] for f in result.findings]


@pytest.mark.parametrize(
    ("rule", "calls", "violated"),
    [
        ({"kind": "forbidden", "tool": "delete_account"}, ["search"], False),
        ({"kind": "forbidden", "tool": "delete_account"}, ["search", "Delete_Account"], True),
        ({"kind": "required", "tool": "lookup_order"}, ["lookup_order"], False),
        ({"kind": "required", "tool": "lookup_order"}, ["search"], True),
        (
            {"kind": "order", "before": "lookup_order", "after": "issue_refund"},
            ["lookup_order", "issue_refund"],
            False,
        ),
        (
            {"kind": "order", "before": "lookup_order", "after": "issue_refund"},
            ["issue_refund", "lookup_order"],
            True,
        ),
        (
            {"kind": "order", "before": "lookup_order", "after": "issue_refund"},
            ["issue_refund"],
            True,
        ),
        ({"kind": "order", "before": "lookup_order", "after": "issue_refund"}, ["search"], False),
        ({"kind": "call_count", "tool": "search", "max": 2}, ["search", "search"], False),
        ({"kind": "call_count", "tool": "search", "max": 2}, ["search"] * 3, True),
        ({"kind": "call_count", "tool": "search", "min": 1}, [], True),
        ({"kind": "call_count", "tool": "search", "min": 1, "max": 1}, ["search"], False),
    ],
)
def test_rule_kinds(rule: dict[str, Any], calls: list[str], violated: bool) -> None:
    assert bool(broken(trace(*calls), rule)) is violated


def test_violation_is_an_invariant_finding_with_rule_severity_and_span() -> None:
    rule = {
        "kind": "forbidden",
        "tool": "delete_account",
        "name": "never-delete",
        "severity": "critical",
    }
    result = evaluate(trace("search", "delete_account"), rule)
    assert result is not None
    (finding,) = result.findings
    assert finding.category is Category.INVARIANT_VIOLATION
    assert finding.reference is ReferenceKind.POLICY
    assert finding.severity is Severity.CRITICAL
    assert (finding.span_id, finding.tool) == ("s1", "delete_account")
    assert finding.explanation == "Invariant never-delete: delete_account called 1 times."
    assert result.scores["score"] == 0.0


def test_default_rule_severity_is_high_and_the_floor_raises_it() -> None:
    rule = {"kind": "required", "tool": "lookup_order"}
    low_floor = evaluate(trace(), rule)
    critical_floor = evaluate(trace(), rule, floor="critical")
    assert low_floor is not None and critical_floor is not None
    assert low_floor.findings[0].severity is Severity.HIGH
    assert critical_floor.findings[0].severity is Severity.CRITICAL


def test_arguments_rule_validates_every_call_of_the_tool() -> None:
    rule = {"kind": "arguments", "tool": "issue_refund", "schema": REFUND_SCHEMA}
    run = trace(
        ("issue_refund", {"order_id": "A", "amount_usd": 20}),
        ("issue_refund", {"order_id": "B", "amount_usd": 9999}),
        ("issue_refund", "not json"),
    )
    result = evaluate(run, rule)
    assert result is not None
    assert [f.span_id for f in result.findings] == ["s1", "s2"]
    over = result.findings[0]
    assert over.field == "amount_usd"
    assert over.explanation == (
        "Invariant arguments:issue_refund: issue_refund arguments fail the schema at "
        "amount_usd (maximum)."
    )
    assert "9999" not in over.explanation
    assert over.details["errors"] == [
        {"field": "amount_usd", "message": "9999 is greater than the maximum of 500"}
    ]


def test_a_path_stops_at_the_first_key_taken_from_the_data() -> None:
    schema = {
        "type": "object",
        "properties": {
            "recipients": {"type": "object", "additionalProperties": {"type": "boolean"}},
            "items": {"type": "array", "items": {"properties": {"sku": {"type": "string"}}}},
        },
    }
    rule = {"kind": "arguments", "tool": "send_email", "schema": schema}
    run = trace(
        ("send_email", {"recipients": {"jane.doe@example.com": "yes"}}),
        ("send_email", {"items": [{"sku": "A"}, {"sku": 7}]}),
    )
    result = evaluate(run, rule)
    assert result is not None
    by_data_key, in_array = result.findings
    assert (by_data_key.field, in_array.field) == ("recipients", "items.1.sku")
    assert "jane" not in by_data_key.explanation
    assert by_data_key.explanation.endswith("fail the schema at recipients (type).")
    assert [e["field"] for e in by_data_key.details["errors"]] == ["recipients"]


def test_rules_can_be_limited_to_agents() -> None:
    rule = {"kind": "required", "tool": "lookup_order", "agents": ["billing"]}
    assert evaluate(trace(agent="support"), rule) is None
    assert broken(trace(agent="billing"), rule) == ["required:lookup_order"]


def test_a_rules_agents_are_named_as_tools_are_trimmed_and_case_folded() -> None:
    rule = {"kind": "required", "tool": "lookup_order", "agents": [" Billing "]}
    assert broken(trace(agent="billing"), rule) == ["required:lookup_order"]
    assert broken(trace(agent="BILLING"), rule) == ["required:lookup_order"]


def test_a_failed_call_made_again_counts_once_with_its_retry() -> None:
    """The shipped example's one-refund-per-run paged high on a refund that failed and was
    retried: one refund."""
    rule = {"kind": "call_count", "tool": "issue_refund", "max": 1}
    args = {"order_id": "A1"}
    retry = trace(
        call("issue_refund", args, index=0, ok=False), call("issue_refund", args, index=1)
    )
    assert evaluate(retry, rule) is not None
    assert broken(retry, rule) == []
    twice = trace(
        call("issue_refund", args, index=0, ok=False),
        call("issue_refund", args, index=1),
        call("issue_refund", {"order_id": "B2"}, index=2),
    )
    result = evaluate(twice, rule)
    assert result is not None
    (finding,) = result.findings
    assert finding.details["count"] == 2
    assert finding.details["retried_failures"] == 1
    assert finding.explanation.endswith(
        "issue_refund called 2 times, allowed [0, 1] (and 1 failed call made again)."
    )


def test_a_call_count_over_its_maximum_names_the_first_call_over_it() -> None:
    """Counted as the rule counts: the refund of A1 failed and was made again (one action),
    so the call over a maximum of 1 is B2's, the third; not the first, which failed."""
    rule = {"kind": "call_count", "tool": "issue_refund", "max": 1}
    run = trace(
        call("issue_refund", {"order_id": "A1"}, index=0, ok=False),
        call("issue_refund", {"order_id": "A1"}, index=1),
        call("issue_refund", {"order_id": "B2"}, index=2),
        call("issue_refund", {"order_id": "C3"}, index=3),
    )
    result = evaluate(run, rule)
    assert result is not None
    (finding,) = result.findings
    assert (finding.span_id, finding.details["count"]) == ("s2", 3)


def test_an_action_over_the_maximum_is_named_by_its_last_attempt() -> None:
    """B2's refund failed, then was made again: of that action, the call counted is the
    retry, the one that may have gone through (as ``safety``'s drift names it)."""
    rule = {"kind": "call_count", "tool": "issue_refund", "max": 1}
    run = trace(
        call("issue_refund", {"order_id": "A1"}, index=0),
        call("issue_refund", {"order_id": "B2"}, index=1, ok=False),
        call("issue_refund", {"order_id": "B2"}, index=2),
    )
    result = evaluate(run, rule)
    assert result is not None
    (finding,) = result.findings
    assert finding.span_id == "s2"


def test_a_call_count_of_zero_names_the_first_action() -> None:
    rule = {"kind": "call_count", "tool": "delete_account", "max": 0}
    run = trace(
        call("search", index=0),
        call("delete_account", {"id": 1}, index=1, ok=False),
        call("delete_account", {"id": 1}, index=2),
    )
    result = evaluate(run, rule)
    assert result is not None
    (finding,) = result.findings
    assert finding.span_id == "s2"


def test_a_call_count_under_its_minimum_names_the_first_call() -> None:
    rule = {"kind": "call_count", "tool": "lookup_order", "min": 2}
    result = evaluate(trace("search", "lookup_order", "lookup_order"), rule)
    assert result is not None
    assert result.findings == ()
    short = evaluate(trace("search", "lookup_order"), rule)
    assert short is not None
    (finding,) = short.findings
    assert finding.span_id == "s1"
    none = evaluate(trace("search"), rule)
    assert none is not None
    (missing,) = none.findings
    assert missing.span_id is None


def test_a_forbidden_tool_is_named_by_its_first_actions_last_attempt() -> None:
    """Forbidden: a failed call made again is one action with its retry, the attempt that
    may have gone through (as call_count names it); every attempt is counted."""
    rule = {"kind": "forbidden", "tool": "delete_account"}
    run = trace(call("delete_account", index=0, ok=False), call("delete_account", index=1))
    result = evaluate(run, rule)
    assert result is not None
    (finding,) = result.findings
    assert finding.span_id == "s1"
    assert finding.details["count"] == 2


def test_a_forbidden_tool_that_failed_and_was_not_made_again_is_named() -> None:
    """Tried is broken: a failed attempt alone is still the violation's call."""
    rule = {"kind": "forbidden", "tool": "delete_account"}
    run = trace(call("delete_account", index=0, ok=False), "search")
    result = evaluate(run, rule)
    assert result is not None
    (finding,) = result.findings
    assert finding.span_id == "s0"


@pytest.mark.parametrize("failed_first", [True, False])
def test_identical_calls_issued_together_are_not_a_retry(failed_first: bool) -> None:
    """Neither saw the other's result: two refunds, whichever failed."""
    rule = {"kind": "call_count", "tool": "issue_refund", "max": 1}
    args = {"order_id": "A1"}
    both = [
        call("issue_refund", args, index=0, group=1, ok=not failed_first),
        call("issue_refund", args, index=1, group=1, ok=failed_first),
    ]
    assert broken(trace(*both), rule) == ["call_count:issue_refund"]


def test_a_forbidden_tools_failed_attempt_still_counts() -> None:
    rule = {"kind": "forbidden", "tool": "delete_account"}
    run = trace(call("delete_account", index=0, ok=False), call("delete_account", index=1))
    assert broken(run, rule) == ["forbidden:delete_account"]


def test_score_is_the_share_of_rules_kept() -> None:
    rules: list[dict[str, Any]] = [
        {"kind": "required", "tool": "a"},
        {"kind": "forbidden", "tool": "b"},
        {"kind": "call_count", "tool": "a", "max": 1},
        {"kind": "order", "before": "a", "after": "c"},
    ]
    result = evaluate(trace("a", "b"), *rules)
    assert result is not None
    assert result.scores["score"] == pytest.approx(3 / 4)


def test_rules_that_share_a_label_are_each_counted_when_broken() -> None:
    """Two unnamed rules on one tool are both ``call_count:search``: counted by label, two
    broken rules read as one (50%, "1/2 rules broken")."""
    rules: list[dict[str, Any]] = [
        {"kind": "call_count", "tool": "search", "max": 1},
        {"kind": "call_count", "tool": "search", "max": 2},
    ]
    result = evaluate(trace("search", "search", "search"), *rules)
    assert result is not None
    assert [f.details["rule"] for f in result.findings] == ["call_count:search"] * 2
    assert result.scores == {"score": 0.0}
    assert result.explanation.startswith("Invariants: 0% (2/2 rules broken; ")
    # The same rule written once per agent, broken by both agents: two rules broken.
    per_agent = [
        {"kind": "forbidden", "tool": "send_email", "agents": ["billing"]},
        {"kind": "forbidden", "tool": "send_email", "agents": ["support"]},
    ]
    run = trace(
        call("send_email", {}, index=0, agent="billing"),
        call("send_email", {}, index=1, agent="support"),
    )
    both = evaluate(run, *per_agent)
    assert both is not None
    assert (len(both.findings), both.scores["score"]) == (2, 0.0)
    alone = trace(call("send_email", {}, index=0, agent="billing"), agent="billing")
    one = evaluate(alone, *per_agent)
    assert one is not None
    assert (len(one.findings), one.scores["score"]) == (1, 0.0)  # support's rule: no run


def test_an_incomplete_run_is_not_judged_for_the_calls_it_had_yet_to_make() -> None:
    """A run drained at shutdown (or cut at ``max_trace_age``, evicted) may still have been
    about to refund: ``required`` and a ``call_count`` minimum are not judged on it, and the
    explanation says so. What it did call is judged: a forbidden tool, a maximum passed."""
    rules: list[dict[str, Any]] = [
        {"kind": "required", "tool": "issue_refund"},
        {"kind": "call_count", "tool": "issue_refund", "min": 1, "max": 1},
        {"kind": "call_count", "tool": "lookup_order", "max": 1},
        {"kind": "forbidden", "tool": "send_email"},
    ]
    cut = dataclasses.replace(
        trace("lookup_order", "lookup_order", "send_email"),
        complete=False,
        incomplete_reason="shutdown",
    )
    result = evaluate(cut, *rules)
    assert result is not None
    assert [f.details["rule"] for f in result.findings] == [
        "call_count:lookup_order",
        "forbidden:send_email",
    ]
    assert result.scores["score"] == pytest.approx(1 / 3)  # the required rule: not applicable
    assert result.explanation.endswith(
        "; not judged for calls the run had yet to make, incomplete (shutdown):"
        " [required:issue_refund, call_count:issue_refund])."
    )
    assert evaluate(dataclasses.replace(cut, calls=()), rules[0]) is None
    finished = dataclasses.replace(cut, complete=True, incomplete_reason=None)
    assert sorted(broken(finished, *rules[:2])) == [
        "call_count:issue_refund",
        "required:issue_refund",
    ]


def test_a_run_whose_earlier_spans_never_came_is_not_judged_for_a_before_it_may_have_made() -> None:
    """A run judged ``missing_spans`` (``base.lost_earlier``: a rollout sent its first spans,
    the lookup's among them, to another replica) may have looked the order up in what never
    came. Was: an ``order`` rule raised "issue_refund called before any lookup_order" on it,
    a false page the ``safety`` evaluator already left out. Now: that rule is not judged and
    the explanation names it, even for a refund issued alongside a lookup (an earlier lookup
    may be among the lost spans: ``safety`` leaves that refund out too, review-idev), and
    whichever refund comes first; what the run did is judged (a forbidden tool); absence
    rules are left out as on any incomplete run, said as spans that never came."""
    order = {"kind": "order", "before": "lookup_order", "after": "issue_refund"}
    rules: list[dict[str, Any]] = [
        order,
        {"kind": "required", "tool": "notify_customer"},
        {"kind": "forbidden", "tool": "send_email"},
    ]
    half = dataclasses.replace(
        trace("issue_refund", "send_email"), complete=False, incomplete_reason="missing_spans"
    )
    result = evaluate(half, *rules)
    assert result is not None
    assert [f.details["rule"] for f in result.findings] == ["forbidden:send_email"]
    assert result.scores["score"] == 0.0  # the one rule judged is broken
    assert result.explanation.endswith(
        "; not judged for calls whose spans never came, incomplete (missing_spans):"
        " [required:notify_customer]"
        "; not judged for an earlier call, the run's earlier spans never came (missing_spans):"
        " [order:lookup_order<issue_refund])."
    )
    assert evaluate(dataclasses.replace(half, calls=half.calls[:1]), order) is None
    together = dataclasses.replace(
        half,
        calls=tuple(
            dataclasses.replace(c, parallel_group=0)
            for c in trace("lookup_order", "issue_refund").calls
        ),
    )
    assert evaluate(together, order) is None
    whole = dataclasses.replace(together, complete=True, incomplete_reason=None)
    assert broken(whole, order) == ["order:lookup_order<issue_refund"]  # alongside, not after
    later = dataclasses.replace(
        half,
        calls=(
            *trace("issue_refund").calls,
            *(
                dataclasses.replace(c, sequence_index=c.sequence_index + 1, parallel_group=1)
                for c in trace("lookup_order", "issue_refund").calls
            ),
        ),
    )
    assert evaluate(later, order) is None  # the second refund, alongside: not judged either
    for other in ("span_limit", "timed_out"):  # their gap is not before the refund
        cut = dataclasses.replace(half, incomplete_reason=other)
        assert broken(cut, order) == ["order:lookup_order<issue_refund"]


def test_no_rules_means_not_applicable() -> None:
    assert evaluate(trace("a")) is None


def test_an_arguments_rule_does_not_judge_calls_recorded_without_arguments() -> None:
    rule = {
        "kind": "arguments",
        "tool": "get_weather",
        "schema": {"type": "object", "required": ["city"]},
    }
    result = evaluate(trace(("get_weather", None), ("get_weather", {"zip": "1"})), rule)
    assert result is not None
    assert [f.span_id for f in result.findings] == ["s1"]


def test_a_before_issued_in_the_same_parallel_group_is_not_earlier() -> None:
    rule = {"kind": "order", "before": "lookup_order", "after": "issue_refund"}
    together = trace(call("lookup_order", index=0, group=1), call("issue_refund", index=1, group=1))
    result = evaluate(together, rule)
    assert result is not None
    (finding,) = result.findings
    assert finding.span_id == "s1"
    assert finding.explanation == (
        "Invariant order:lookup_order<issue_refund: issue_refund called alongside "
        "lookup_order, not after it."
    )
    # An earlier lookup outside the group still counts.
    earlier = trace(
        call("lookup_order", index=0),
        call("lookup_order", index=1, group=1),
        call("issue_refund", index=2, group=1),
    )
    assert broken(earlier, rule) == []


def test_a_rule_limited_to_agents_judges_the_calls_those_agents_made() -> None:
    # triage hands the work to a nested admin agent, whose call is its own.
    run = trace(
        call("transfer_to_admin", index=0, agent="triage"),
        call("delete_account", index=1, agent="admin"),
        agent="triage",
    )
    triage_rule = {"kind": "forbidden", "tool": "delete_account", "agents": ["triage"]}
    admin_rule = {"kind": "forbidden", "tool": "delete_account", "agents": ["admin"]}
    result = evaluate(run, triage_rule)
    assert result is not None
    assert (result.scores["score"], result.findings) == (1.0, ())
    assert broken(run, admin_rule) == ["forbidden:delete_account"]
    # A required tool counts only when its agent made the call.
    required = {"kind": "required", "tool": "delete_account", "agents": ["triage"]}
    assert broken(run, required) == ["required:delete_account"]
    # An agent the run never involves leaves the rule out.
    assert evaluate(run, {**admin_rule, "agents": ["billing"]}) is None


def test_a_rule_applies_to_a_nested_agent_that_ran_but_made_no_call() -> None:
    # triage asks the billing agent, which answers without looking anything up.
    run = dataclasses.replace(
        trace(call("ask_billing", index=0, agent="triage"), agent="triage"),
        agents=("triage", "billing"),
    )
    required = {"kind": "required", "tool": "lookup_order", "agents": ["billing"]}
    assert broken(run, required) == ["required:lookup_order"]
    at_least_one = {"kind": "call_count", "tool": "lookup_order", "min": 1, "agents": ["billing"]}
    assert broken(run, at_least_one) == ["call_count:lookup_order"]
    # An agent that did not run in the run still leaves the rule out.
    assert evaluate(run, {**required, "agents": ["admin"]}) is None


def test_earlier_means_a_lower_sequence_index_however_the_calls_are_listed() -> None:
    """A trace built by hand, or replayed from another producer, may list its calls out of
    sequence: the lookup (index 0) listed after the refund (index 1) is still earlier, as
    safety reads it."""
    rule = {"kind": "order", "before": "lookup_order", "after": "issue_refund"}
    listed_late = trace(
        call("issue_refund", {"order_id": "A1"}, index=1),
        call("lookup_order", {"order_id": "A1"}, index=0),
    )
    result = evaluate(listed_late, rule)
    assert result is not None
    assert (result.scores["score"], result.findings) == (1.0, ())
    refund_first = trace(call("lookup_order", index=1), call("issue_refund", index=0))
    assert broken(refund_first, rule) == ["order:lookup_order<issue_refund"]


def test_a_before_nested_in_a_call_of_the_same_group_is_not_earlier() -> None:
    rule = {"kind": "order", "before": "lookup_order", "after": "issue_refund"}
    beside = trace(
        call("ask_billing", index=0, group=1),
        call("lookup_order", index=1, parent=0, agent="billing"),
        call("issue_refund", index=2, group=1),
    )
    assert broken(beside, rule) == ["order:lookup_order<issue_refund"]
    sequential = trace(
        call("ask_billing", index=0),
        call("lookup_order", index=1, parent=0, agent="billing"),
        call("issue_refund", index=2),
    )
    assert broken(sequential, rule) == []


def test_a_scoped_order_rule_knows_the_calls_its_agents_ran_inside() -> None:
    # support asks two billing agents at once; one looks the order up, the other refunds.
    rule = {"kind": "order", "before": "lookup_order", "after": "issue_refund"}
    run = trace(
        call("ask_billing", index=0, group=1),
        call("ask_billing", index=1, group=1),
        call("lookup_order", index=2, parent=0, agent="billing"),
        call("issue_refund", index=3, parent=1, agent="billing"),
    )
    assert (
        broken(run, rule)
        == broken(run, {**rule, "agents": ["billing"]})
        == ["order:lookup_order<issue_refund"]
    )


def test_an_agent_scoped_order_rule_does_not_say_no_lookup_was_made_when_one_was() -> None:
    """``order: lookup_order < issue_refund`` scoped to ``agents: [support]``: support asks
    its ``order_specialist`` sub-agent, which looks A1 up; then support refunds A1. ``safety``
    credits that lookup; the invariant, judging only support's own calls, raised a violation
    saying ``issue_refund called before any lookup_order``, false of the trace the engineer
    opens. A scoped rule judges its agents' ``after`` calls, and any call of the run that
    could inform them satisfies ``before``; when none did, the text names the scope."""
    rule = {
        "kind": "order",
        "before": "lookup_order",
        "after": "issue_refund",
        "agents": ["support"],
    }
    asked = trace(
        call("order_specialist", {"question": "is A1 refundable?"}, index=0),
        call("lookup_order", {"order_id": "A1"}, index=1, parent=0, agent="specialist"),
        call("issue_refund", {"order_id": "A1"}, index=2),
        agent="support",
    )
    result = evaluate(asked, rule)
    assert result is not None
    assert (result.scores["score"], result.findings) == (1.0, ())
    # The sub-agent's own refund is not support's to judge, and a lookup after it is late.
    late = trace(
        call("issue_refund", {"order_id": "A1"}, index=0, agent="specialist"),
        call("issue_refund", {"order_id": "A1"}, index=1),
        call("lookup_order", {"order_id": "A1"}, index=2, agent="specialist"),
        agent="support",
    )
    result = evaluate(late, rule)
    assert result is not None
    (finding,) = result.findings
    assert finding.span_id == "s1"
    assert finding.explanation == (
        "Invariant order:lookup_order<issue_refund: issue_refund called by agents [support]"
        " before any lookup_order in the run."
    )


def test_arguments_that_are_no_json_say_so_when_they_fail_the_schema() -> None:
    # Over ingest.max_value_bytes the text is cut and no JSON any more: the finding says
    # why, so nobody hunts for a wrong type the agent never sent.
    rule = {"kind": "arguments", "tool": "issue_refund", "schema": REFUND_SCHEMA}
    cut = dataclasses.replace(
        trace(("issue_refund", '{"order_id": "A", "note": "xx')).calls[0],
        arguments_error="Unterminated string starting at: line 1 column 27 (char 26)",
    )
    result = evaluate(trace(cut), rule)
    assert result is not None
    (finding,) = result.findings
    assert finding.explanation == (
        "Invariant arguments:issue_refund: issue_refund arguments fail the schema (type): they"
        " are not JSON (Unterminated string starting at: line 1 column 27 (char 26); values"
        " longer than ingest.max_value_bytes are cut)."
    )
