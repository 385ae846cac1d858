"""docs/deployment.md, "Before production", Finally: the ``sed`` that renames the quick start's
unverified refund after one's own agent and policy gives a run that policy pages on.

A first deployment's policy names its own tools: the example's refund, sent as it is, finds
nothing there, and the operator cannot tell a silent toolwatch from a broken one. The command
is taken from the document, its placeholders filled as an operator would, and its output
judged by ``replay`` with a policy of those names.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from tests.integration.cli_support import EXAMPLES, run_cli

ROOT = EXAMPLES.parent
DEPLOYMENT = ROOT / "docs" / "deployment.md"
NAMES = {
    "AGENT": "support",
    "SERVICE": "support-svc",
    "DANGEROUS_TOOL": "delete_user",
    "BOUND_FIELD": "user_id",
}
POLICY = """\
policy:
  dangerous_tools: [delete_user]
  verification_tools: [get_user]
  bindings:
    delete_user.user_id: get_user.user_id
  allowed_tools:
    support: [get_user, delete_user]
"""


def documented_command() -> str:
    """The checklist's ``sed`` command, as the document writes it (one inline code span)."""
    text = DEPLOYMENT.read_text(encoding="utf-8")
    finally_item = text[text.index("**Finally**") :]
    return re.findall(r"`(sed [^`]*unverified-refund\.otlp\.json)`", finally_item)[0]


def test_the_renamed_known_bad_run_is_found_by_a_policy_of_those_names(tmp_path: Path) -> None:
    command = documented_command()
    for placeholder, name in NAMES.items():
        command = command.replace(f"/{placeholder}/", f"/{name}/")
    renamed = subprocess.run(
        ["bash", "-c", command], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    run = tmp_path / "known-bad.otlp.json"
    run.write_text(renamed, encoding="utf-8")
    config = tmp_path / "toolwatch.yaml"
    config.write_text(POLICY, encoding="utf-8")

    result = run_cli(
        "replay", "--no-progress", "--format", "json", "--config", str(config), str(run)
    )

    assert result.returncode == 0, result.stderr
    (finding,) = json.loads(result.stdout)["findings"]
    assert (finding["category"], finding["agent"], finding["tool"], finding["field"]) == (
        "MISSING_VERIFICATION_STEP",
        "support",
        "delete_user",
        "user_id",
    )
    original = json.loads((EXAMPLES / "unverified-refund.otlp.json").read_text(encoding="utf-8"))
    trace_ids = {
        span["traceId"]
        for resource in json.loads(renamed)["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    }
    assert len(trace_ids) == 1 and finding["trace_id"] in trace_ids
    assert (
        finding["trace_id"] != original["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"]
    )
    services = {
        attribute["value"]["stringValue"]
        for resource in json.loads(renamed)["resourceSpans"]
        for attribute in resource["resource"]["attributes"]
        if attribute["key"] == "service.name"
    }
    assert services == {"support-svc"}


def test_the_example_run_as_it_is_finds_nothing_under_such_a_policy(tmp_path: Path) -> None:
    """Why the checklist renames the run: sent unchanged, it pages no one."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(POLICY, encoding="utf-8")

    result = run_cli(
        "replay",
        "--no-progress",
        "--format",
        "json",
        "--config",
        str(config),
        str(EXAMPLES / "unverified-refund.otlp.json"),
    )

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["traces"], report["findings"]) == (1, [])
