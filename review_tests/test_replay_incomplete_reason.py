"""Review: ``replay --format json`` on a dump holding a run evaluated incomplete."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.integration.test_evaluation_e2e import unverified_refund_dump

POLICY = """\
policy:
  dangerous_tools: [issue_refund]
  verification_tools: [lookup_order]
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLWATCH_")}
    if os.environ.get("TOOLWATCH_PURE_PYTHON"):
        env["TOOLWATCH_PURE_PYTHON"] = os.environ["TOOLWATCH_PURE_PYTHON"]
    return env


def test_replay_json_lists_the_incomplete_reason_of_a_finding_of_an_incomplete_run(
    tmp_path: Path,
) -> None:
    """The branch gives every finding of a run evaluated incomplete an ``incomplete_reason``
    (findings log, stream, tail --json) so that a program tells such a finding apart without
    parsing the explanation. ``replay --format json`` lists findings "with the findings log's
    names" (replay_report._finding_dict) but has no ``incomplete_reason`` key: replaying a
    ``--dump-tooltraces`` capture of a timed-out run, a CI job or an on-call reading the JSON
    report can only grep the explanation's note. Each listed finding should carry
    ``incomplete_reason`` (``"timed_out"`` here, ``null`` for a whole run's)."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(POLICY)
    dump = unverified_refund_dump(tmp_path, 1)
    run = json.loads(dump.read_text())
    run.update(complete=False, incomplete_reason="timed_out")
    dump.write_text(json.dumps(run) + "\n")
    command = [sys.executable, "-m", "toolwatch", "replay", "--no-progress"]
    done = subprocess.run(
        [*command, "--config", str(config), "--format", "json", str(dump)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=_env(),
    )
    assert done.returncode == 0, done.stderr[-600:]
    [finding] = json.loads(done.stdout)["findings"]
    assert "run evaluated incomplete (timed_out" in finding["explanation"]  # the note is there
    assert finding.get("incomplete_reason", "<missing>") == "timed_out", finding
