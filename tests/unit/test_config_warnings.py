"""The warnings of how runs are judged (``Config.judging_warnings``): a policy that can never
raise MISSING_VERIFICATION_STEP, and a configuration with nothing to judge runs by.
``check-config`` prints them, ``serve`` logs them at start-up and at each reload."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.config_warnings_support import HALF_POLICY, NO_POLICY, ONLY_LOOPS
from toolwatch.config import load_config


def warned(tmp_path: Path, text: str) -> list[str]:
    """What ``check-config`` would warn of for a file holding ``text`` (its listeners on
    loopback: nothing else to warn of)."""
    path = tmp_path / "toolwatch.yaml"
    path.write_text(text)
    return load_config(path).warnings()


def test_dangerous_tools_without_verification_tools_are_warned_of_by_name(
    tmp_path: Path,
) -> None:
    """Was: check-config said "ok" and no unverified refund was ever found."""
    assert warned(tmp_path, "policy:\n  dangerous_tools: [issue_refund]\n") == [HALF_POLICY]
    (said,) = warned(tmp_path, "policy:\n  dangerous_tools: [issue_refund, Delete_Account]\n")
    assert said.startswith(
        "policy.dangerous_tools 'issue_refund', 'Delete_Account': nothing can verify them"
    )
    assert "(any of which then verifies them)" in said
    assert "forbids them or needs a tool called first" in said


@pytest.mark.parametrize(
    "policy",
    [
        "  dangerous_tools: [issue_refund]\n  verification_tools: [lookup_order]\n",
        "  dangerous_tools: [issue_refund, delete_account]\n"
        "  verification_tools: [lookup_order, verify_identity]\n"
        "  verified_by: {delete_account: [verify_identity]}\n"
        "  bindings: {issue_refund.order_id: lookup_order.order_id}\n",
    ],
)
def test_a_policy_that_can_verify_its_dangerous_tools_is_not_warned_of(
    tmp_path: Path, policy: str
) -> None:
    assert warned(tmp_path, "policy:\n" + policy) == []


def test_dangerous_tools_unverified_with_safety_off_are_not_warned_of(tmp_path: Path) -> None:
    """Nothing checks them then, by choice: the warning's "caught only as drift" would not
    be true either."""
    text = "policy:\n  dangerous_tools: [issue_refund]\nevaluators:\n  safety: {enabled: false}\n"
    assert warned(tmp_path, text) == []


def test_a_dangerous_tool_written_twice_is_named_once_as_first_written(tmp_path: Path) -> None:
    """Was: "policy.dangerous_tools 'issue_refund', 'Issue_Refund ': nothing can verify
    them", two names for the one tool calls of either are judged as. Now they are compared
    as policy names are (trimmed, case-folded, aliased)."""
    text = "policy:\n  dangerous_tools: [issue_refund, 'Issue_Refund ', refund]\n"
    assert warned(tmp_path, text + "  aliases: {refund: issue_refund}\n") == [HALF_POLICY]


GUARDING_RULES = [
    "{kind: order, before: lookup_order, after: issue_refund}",
    "{kind: order, before: lookup_order, after: ' Issue_Refund'}",
    "{kind: forbidden, tool: issue_refund}",
    "{kind: call_count, tool: issue_refund, max: 0}",
]


@pytest.mark.parametrize("rule", GUARDING_RULES)
def test_a_dangerous_tool_an_invariant_guards_on_every_agent_is_not_warned_of(
    tmp_path: Path, rule: str
) -> None:
    """Was: "nothing can verify it ... until then it is only checked for drift", while the
    rule makes its unverified call an INVARIANT_VIOLATION (what each rule finds:
    ``test_eval_settings``). Now only the tools no such rule guards are named."""
    text = f"policy:\n  dangerous_tools: [issue_refund, delete_account]\n  invariants: [{rule}]\n"
    (said,) = warned(tmp_path, text)
    assert said.startswith("policy.dangerous_tools 'delete_account': nothing can verify it")


@pytest.mark.parametrize(
    "rule",
    [
        "{kind: required, tool: lookup_order}",  # a lookup after the refund satisfies it
        "{kind: required, tool: issue_refund}",
        "{kind: call_count, tool: issue_refund, max: 1}",  # the first refund passes it
        "{kind: arguments, tool: issue_refund, schema: {type: object}}",
        "{kind: order, before: issue_refund, after: lookup_order}",  # the refund is before
    ],
)
def test_a_rule_that_lets_an_unverified_call_pass_is_no_guard(tmp_path: Path, rule: str) -> None:
    text = f"policy:\n  dangerous_tools: [issue_refund]\n  invariants: [{rule}]\n"
    assert warned(tmp_path, text) == [HALF_POLICY]


def test_a_rule_limited_to_agents_is_said_to_catch_their_calls_alone(tmp_path: Path) -> None:
    """Its agents' unverified refunds are violations; every other agent's are not."""
    rule = "{kind: forbidden, tool: issue_refund, agents: [intern-bot]}"
    text = f"policy:\n  dangerous_tools: [issue_refund]\n  invariants: [{rule}]\n"
    assert warned(tmp_path, text) == [
        HALF_POLICY + ", or, made by an agent an invariants rule is limited to, as its violation"
    ]


def test_an_invariant_guards_nothing_with_the_evaluator_off(tmp_path: Path) -> None:
    text = (
        "policy:\n  dangerous_tools: [issue_refund]\n"
        "  invariants: [{kind: forbidden, tool: issue_refund}]\n"
        "evaluators:\n  invariants: {enabled: false}\n"
    )
    assert warned(tmp_path, text) == [
        HALF_POLICY.replace(
            "no invariants rule on every agent forbids it or needs a tool called first (order)",
            "no invariants rule judges it (evaluators.invariants is off)",
        )
    ]


@pytest.mark.parametrize(
    "text",
    ["", "listen:\n  grpc: 127.0.0.1:4317\n", "policy:\n  verification_tools: [lookup_order]\n"],
)
def test_a_file_with_no_policy_is_warned_that_only_loops_can_find_anything(
    tmp_path: Path, text: str
) -> None:
    """Was: an empty file, or one with ``listen:`` only, read "ok", while no file at all is
    warned of (``cli_sources.SERVE_DEFAULTS_WARNING``)."""
    assert warned(tmp_path, text) == [ONLY_LOOPS]


def test_the_no_policy_warning_says_the_loop_limits_that_apply(tmp_path: Path) -> None:
    (said,) = warned(
        tmp_path, "policy:\n  repeat_limit: 3\n  repeat_limits: {poll: 9}\n  retry_limit: 2\n"
    )
    assert said == (
        f"{NO_POLICY}: nothing can raise a finding but loops' UNNECESSARY_TOOL_CALL, for a call"
        " made again with the same arguments more than policy.repeat_limit (3) times (its"
        " tool's repeat_limits entry, if any) after it succeeded, or more than"
        " policy.retry_limit (2) times after it failed; no call is checked for a verification"
        " step or for drift"
    )
    assert warned(tmp_path, "evaluators:\n  loops: {enabled: false}\n") == [
        f"{NO_POLICY}, and evaluators.loops is off: nothing can raise a finding"
    ]


@pytest.mark.parametrize(
    "text",
    [
        "policy:\n  allowed_tools: {refund-bot: [lookup_order]}\n",
        "policy:\n  invariants: [{kind: forbidden, tool: drop_table}]\n",
        "golden:\n  cases_file: cases.yaml\n",
        "shadow:\n  enabled: true\n",
    ],
)
def test_any_policy_golden_cases_or_shadow_pairs_are_something_to_judge_by(
    tmp_path: Path, text: str
) -> None:
    (tmp_path / "cases.yaml").write_text("cases:\n  - id: one\n    expected_tools: [a]\n")
    assert warned(tmp_path, text) == []


def test_the_built_in_defaults_are_left_to_their_own_warning() -> None:
    """No file: ``serve`` and ``check-config`` say so in their own words
    (``cli_sources.SERVE_DEFAULTS_WARNING``: no policy, no golden cases), not twice."""
    defaults = load_config(None)
    assert defaults.warnings() == [ONLY_LOOPS]
    assert defaults.warnings(defaults=True) == []
    assert defaults.judging_warnings(defaults=True) == []
