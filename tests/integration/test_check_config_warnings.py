"""``toolwatch check-config`` prints the warnings ``serve`` would log at start-up."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest

from tests.integration.cli_support import FREE_PORTS, Served, clean_env, run_cli
from tests.unit.config_warnings_support import HALF_POLICY, ONLY_LOOPS
from tests.unit.evaluation.eval_factories import trace
from toolwatch import cli_sources
from toolwatch.config import load_config
from toolwatch.evaluation.pipeline import EvaluationPipeline
from toolwatch.evaluation.settings import EvaluationSettings
from toolwatch.model import Category

WARNING = "may be read by others (mode 644)"


def _serve_start_up_log(args: list[str]) -> list[str]:
    """serve's stderr up to its last start-up line (``hot path:``, after ``listening``)."""
    served = Served([*FREE_PORTS, *args], clean_env())
    try:
        served.wait_for(re.compile("hot path:"))
    finally:
        served.terminate()
    return served.seen


def test_check_config_warns_of_a_dump_file_others_can_read(tmp_path: Path) -> None:
    """docs/commands.md: check-config "prints the warnings `serve` would log". An existing
    --dump-tooltraces file readable by others (it holds every argument and result
    unredacted) was warned of by serve at start-up, and not by check-config, which
    validated that same output file and said "ok" alone."""
    dump = tmp_path / "tooltraces.jsonl"
    dump.write_text("")
    os.chmod(dump, 0o644)
    args = ["--dump-tooltraces", str(dump)]

    assert any(WARNING in line for line in _serve_start_up_log(args))  # what serve logs

    checked = run_cli("check-config", *args)
    assert checked.returncode == 0, checked.stderr
    assert f"defaults: warning: {dump} (output.dump_tooltraces) {WARNING}" in checked.stderr

    os.chmod(dump, 0o600)
    assert WARNING not in run_cli("check-config", *args).stderr


def test_check_config_without_a_file_warns_of_the_defaults_as_serve_does() -> None:
    """A check whose TOOLWATCH_CONFIG went missing (a deploy pipeline's) printed only
    `defaults: ok`, while serve, given the same, warns that the defaults have no policy:
    the quick start's unverified refund then finds nothing."""
    warning = cli_sources.SERVE_DEFAULTS_WARNING
    assert any(line.endswith(f"WARNING toolwatch: {warning}") for line in _serve_start_up_log([]))

    checked = run_cli("check-config")
    assert (checked.returncode, checked.stdout, checked.stderr) == (
        0,
        "defaults: ok\n",
        f"defaults: warning: {warning}\n",
    )


@pytest.mark.parametrize(
    ("text", "warning"),
    [
        # Half a policy: the refund is never MISSING_VERIFICATION_STEP.
        ("policy:\n  dangerous_tools: [issue_refund]\n", HALF_POLICY),
        ("", ONLY_LOOPS),  # nothing to judge by but loops
        ("listen:\n  grpc: 127.0.0.1:4317\n", ONLY_LOOPS),
    ],
)
def test_check_config_and_serve_warn_of_a_policy_that_guards_nothing(
    tmp_path: Path, text: str, warning: str
) -> None:
    """Was: check-config said "<file>: ok" alone, serve logged nothing, and the unverified
    refund the SRE believed guarded was never found. Now check-config prints the warning,
    still exiting 0, and serve logs it at start-up and at every reload that keeps it."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(text)

    checked = run_cli("check-config", str(config))
    assert (checked.returncode, checked.stdout, checked.stderr) == (
        0,
        f"{config}: ok\n",
        f"{config}: warning: {warning}\n",
    )

    served = Served([*FREE_PORTS, "--config", str(config)], clean_env())
    try:
        logged = re.compile(f"WARNING toolwatch: {re.escape(warning)}$")
        served.wait_for(logged)
        served.wait_for(re.compile(" toolwatch: hot path: "))  # the last start-up line
        served.process.send_signal(signal.SIGHUP)
        served.wait_for(re.compile("INFO toolwatch: configuration reloaded: "))
        served.wait_for(logged)  # the reload's
        assert not any(cli_sources.SERVE_DEFAULTS_WARNING in line for line in served.seen)
    finally:
        assert served.terminate() == 0


GUARDED_BY_INVARIANT = {
    # The documented way to say "a refund needs a lookup first" without safety's lists.
    "order": "{kind: order, before: lookup_order, after: issue_refund}",
    "forbidden": "{kind: forbidden, tool: issue_refund}",  # every refund is a violation
}


@pytest.mark.parametrize("kind", sorted(GUARDED_BY_INVARIANT))
def test_a_dangerous_tool_an_invariant_guards_is_not_warned_of(tmp_path: Path, kind: str) -> None:
    """Was: check-config warned "nothing can verify it ..., until then it is only checked
    for drift against a reference", while the rule makes an unverified refund an
    INVARIANT_VIOLATION (as the pipeline the server builds finds it, below): the SRE whose
    ``order`` rule guards refunds was told nothing but drift checks them. Now a tool an
    invariants rule on every agent guards is not warned of."""
    config_file = tmp_path / "toolwatch.yaml"
    rule = GUARDED_BY_INVARIANT[kind]
    config_file.write_text(
        f"policy:\n  dangerous_tools: [issue_refund]\n  invariants:\n    - {rule}\n"
    )
    config = load_config(config_file)

    pipeline = EvaluationPipeline(
        EvaluationSettings(policy=config.policy, evaluators=config.evaluators)
    )
    found = pipeline.evaluate(trace(("issue_refund", {"order_id": "A1"}))).findings
    assert [(f.category, f.tool) for f in found] == [(Category.INVARIANT_VIOLATION, "issue_refund")]

    checked = run_cli("check-config", str(config_file))
    assert (checked.returncode, checked.stdout, checked.stderr) == (0, f"{config_file}: ok\n", "")
