"""``replay --format json`` spools its findings to a temporary file: what a full ``TMPDIR`` or
an input that names the report's own placeholder does to it.

Each test runs the real ``toolwatch replay`` as a subprocess, as an operator or a CI job does.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.evaluation_support import unverified_refund_dump

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

POLICY = """\
policy:
  dangerous_tools: [issue_refund]
  verification_tools: [lookup_order]
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLWATCH_")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if os.environ.get("TOOLWATCH_PURE_PYTHON"):
        env["TOOLWATCH_PURE_PYTHON"] = os.environ["TOOLWATCH_PURE_PYTHON"]
    return env


def _replay(*args: str, file_size_limit: int | None = None) -> subprocess.CompletedProcess[str]:
    """``toolwatch replay ARGS``, its stdout and stderr pipes (no file size limit applies to
    them); ``file_size_limit``: the largest file the process may write (RLIMIT_FSIZE, what a
    full or quota-limited TMPDIR does to it: CPython ignores SIGXFSZ, so a write past the
    limit fails with an OSError, EFBIG, as it would with ENOSPC)."""

    def limit() -> None:
        if file_size_limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    command = [sys.executable, "-m", "toolwatch.cli", "replay", "--no-progress", *args]
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=_env(),
        preexec_fn=limit,
    )


def test_a_full_tmpdir_when_the_spool_is_written_out_is_exit_2_before_the_report(
    tmp_path: Path,
) -> None:
    """``replay --format json`` spools its findings to a temporary file in ``TMPDIR``. The
    spool's last buffer was written out while the report was printed: a ``TMPDIR`` full by
    then (ENOSPC, a quota, an emptyDir ``sizeLimit``; here RLIMIT_FSIZE, EFBIG) gave a
    traceback, exit 1 ("a replay gate failed") and a document cut off at ``"findings": ``.
    It is written out before a byte of the report: exit 2, naming the file and TMPDIR."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(POLICY)
    dump = unverified_refund_dump(tmp_path, 10)  # ~3.8 KB: within the spool's write buffer

    done = _replay("--config", str(config), "--format", "json", str(dump), file_size_limit=1024)

    assert (done.returncode, done.stdout) == (2, ""), done.stderr[-600:]
    assert "temporary file" in done.stderr and "(TMPDIR)" in done.stderr, done.stderr


def test_a_full_tmpdir_while_evaluating_names_the_temporary_file(tmp_path: Path) -> None:
    """A ``TMPDIR`` that fills while findings are spooled said only ``[Errno 27] File too
    large``: no file named, and replay reads no other file it writes, so the operator looked
    at the capture files and the configuration."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(POLICY)
    dump = unverified_refund_dump(tmp_path, 2000)  # ~760 KB of spool

    done = _replay(
        "--config", str(config), "--format", "json", str(dump), file_size_limit=64 * 1024
    )

    assert (done.returncode, done.stdout) == (2, ""), done.stderr[-600:]
    assert "temporary file" in done.stderr and "(TMPDIR)" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_trace_attribute_cannot_be_the_reports_placeholder(
    tmp_path: Path,
) -> None:
    """Values from the traces reach the JSON report (a case id no golden case has is listed
    under ``unknown_case_ids``). The report's findings were put in place of a fixed
    placeholder string: a span attribute with that value (NUL bytes are valid in OTLP
    strings) split the document in three, a traceback and no report. The placeholder is
    random now."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(POLICY + f"golden:\n  cases_file: {EXAMPLES / 'golden-cases.yaml'}\n")
    document = json.loads((EXAMPLES / "unverified-refund.otlp.json").read_text())
    for resource_spans in document["resourceSpans"]:
        resource_spans["resource"]["attributes"].append(
            {"key": "toolwatch.case_id", "value": {"stringValue": "\u0000findings\u0000"}}
        )
    capture = tmp_path / "capture.otlp.jsonl"
    capture.write_text(json.dumps(document) + "\n")

    text = _replay("--config", str(config), str(capture))
    assert text.returncode == 0, text.stderr  # the text report has no such marker

    done = _replay("--config", str(config), "--format", "json", str(capture))
    assert "Traceback" not in done.stderr, done.stderr[-400:]
    assert done.returncode == 0, done.stderr[-300:]
    report = json.loads(done.stdout)
    assert [f["category"] for f in report["findings"]] == ["MISSING_VERIFICATION_STEP"]
    assert report["unknown_case_ids"] == {"\u0000findings\u0000": 1}


@pytest.mark.parametrize("runs", [0, 3])
def test_the_json_report_lists_every_finding_without_a_full_disk(tmp_path: Path, runs: int) -> None:
    """Control: the same replay with room to spool gives a whole document."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(POLICY)
    dump = unverified_refund_dump(tmp_path, runs)
    done = _replay("--config", str(config), "--format", "json", str(dump))
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["findings"]) == runs
