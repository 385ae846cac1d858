"""The warnings of how runs are judged (``Config.judging_warnings``): a policy that can never
raise MISSING_VERIFICATION_STEP, and a configuration with nothing to judge runs by.
``check-config`` prints them, ``serve`` logs them at start-up and at each reload."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolwatch.config import load_config

HALF_POLICY = (
    "policy.dangerous_tools 'issue_refund': nothing can verify it (no"
    " policy.verification_tools), so an unverified call is never MISSING_VERIFICATION_STEP:"
    " add verification_tools (any of which then verifies it) and, to say which verifies which,"
    " verified_by or bindings; until then it is only checked for drift against a reference"
    " (DANGEROUS_ACTION_DRIFT: allowed_tools, a golden case or a shadow source)"
)
NO_POLICY = (
    "no policy (policy.dangerous_tools, allowed_tools, invariants), golden cases"
    " (golden.cases_file) or shadow pairs (shadow.enabled)"
)
ONLY_LOOPS = (
    f"{NO_POLICY}: nothing can raise a finding but loops' UNNECESSARY_TOOL_CALL, for a call"
    " made again with the same arguments more than policy.repeat_limit (1) times after it"
    " succeeded; no call is checked for a verification step or for drift"
)


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
    assert "until then they are only checked for drift" in said


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
    """Nothing checks them then, by choice: the warning's "only checked for drift" would not
    be true either."""
    text = "policy:\n  dangerous_tools: [issue_refund]\nevaluators:\n  safety: {enabled: false}\n"
    assert warned(tmp_path, text) == []


@pytest.mark.parametrize(
    "text",
    ["", "listen:\n  grpc: 127.0.0.1:4317\n", "policy:\n  verification_tools: [lookup_order]\n"],
)
def test_a_file_with_no_policy_is_warned_that_only_loops_can_find_anything(
    tmp_path: Path, text: str
) -> None:
    """Was: an empty file, or one with ``listen:`` only, read "ok", while no file at all is
    warned of (``cli.SERVE_DEFAULTS_WARNING``)."""
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
    (``cli.SERVE_DEFAULTS_WARNING``: no policy, no golden cases), not twice."""
    defaults = load_config(None)
    assert defaults.warnings() == [ONLY_LOOPS]
    assert defaults.warnings(defaults=True) == []
    assert defaults.judging_warnings(defaults=True) == []
