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
from typing import Any

import pytest

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


def _dump(path: Path, runs: int) -> Path:
    """``runs`` ToolTrace lines, each an unverified refund: one MISSING_VERIFICATION_STEP
    finding per run (about 380 bytes each in the spool)."""
    call = {
        "tool_name": "issue_refund", "raw_name": "issue_refund",
        "arguments": {"order_id": "A-1001", "amount_usd": 25.0}, "arguments_error": None,
        "call_id": "call_2", "parent_call_id": None, "sequence_index": 0,
        "parallel_group": None, "status": "ok", "error_type": None, "agent": "refund-bot",
        "span_id": "67d3cf736c84a795", "start_ns": 1767000000040000000,
        "end_ns": 1767000000050000000, "result": "ok", "hosted": False, "handoff": False,
    }  # fmt: skip
    run: dict[str, Any] = {
        "format": "toolwatch.tooltrace/v1", "trace_id": "", "run_span_id": "8ac1c32968d53856",
        "service": "refund-agent", "agent": "refund-bot", "model": "gpt-4o",
        "conversation_id": None, "calls": [call], "final_text": "Refunded.", "refusal": False,
        "refusal_reason": None, "error_count": 0, "complete": True, "incomplete_reason": None,
        "start_ns": 1767000000010000000, "end_ns": 1767000000080000000, "span_count": 4,
        "reference_keys": {}, "shared_keys": {}, "agents": ["refund-bot"],
    }  # fmt: skip
    with path.open("w") as out:
        for i in range(runs):
            run["trace_id"] = f"{i + 1:032x}"
            out.write(json.dumps(run) + "\n")
    return path


def test_a_full_tmpdir_when_the_spool_is_read_back_is_a_traceback_exit_1_and_half_a_document(
    tmp_path: Path,
) -> None:
    """User-visible harm: ``replay --format json`` now writes every finding to a temporary
    file in ``TMPDIR`` (``replay_report._Spool``), buffered, and flushes the last buffer when
    it seeks back to read them (``_Spool.records``), inside ``Report.write_json``, which
    ``run_replay`` calls outside its ``OSError`` handler, after the document's head is
    already on stdout. When ``TMPDIR`` is full (ENOSPC, a quota, an emptyDir ``sizeLimit``;
    here RLIMIT_FSIZE, EFBIG) at that moment, replay dies with a Python traceback, exit 1,
    which the README defines as "a replay gate failed", and stdout holds the first lines of
    a JSON document cut off at ``"findings": ``: a CI job that reads the report gets a parse
    error and a job that reads only the exit code reports a failed gate that never was (here
    no gate is set at all). Findings held in memory, before they were spooled, had no such
    failure.
    Correct: the spool's write/flush/seek errors are replay's own (``toolwatch replay: the
    temporary file for the findings (TMPDIR ...): ...``, exit 2, no traceback), raised before
    any of the document is written (flush the spool before writing the head)."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(POLICY)
    dump = _dump(tmp_path / "dump.jsonl", 10)  # ~3.8 KB: within the spool's write buffer

    done = _replay("--config", str(config), "--format", "json", str(dump), file_size_limit=1024)

    assert "Traceback" not in done.stderr, done.stderr[-600:]
    if done.returncode == 0:  # findings kept in memory, or a fallback to it
        assert len(json.loads(done.stdout)["findings"]) == 10
    else:  # replay's own error, not "a gate failed", and no half document
        assert done.returncode == 2, (done.returncode, done.stderr[-300:])
        if done.stdout.strip():
            json.loads(done.stdout)


def test_a_full_tmpdir_while_evaluating_is_told_as_an_input_error_naming_no_file(
    tmp_path: Path,
) -> None:
    """User-visible harm: when ``TMPDIR`` fills while findings are spooled (``_Spool.add``
    during ``evaluate_offline``), ``run_replay``'s handler for input errors prints the bare
    OS error, ``toolwatch replay: [Errno 28] No space left on device`` (here ``[Errno 27]
    File too large``), exit 2: it names no file, the README says replay writes no output,
    and exit 2 is "bad usage or configuration", so the operator looks at the capture files
    and the configuration, not at ``TMPDIR``, the one thing the new spool needs. Correct:
    the message says it is the temporary file for the JSON report's findings and where
    (``TMPDIR``), as the README's note on the spool does."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(POLICY)
    dump = _dump(tmp_path / "dump.jsonl", 2000)  # ~760 KB of spool

    done = _replay(
        "--config", str(config), "--format", "json", str(dump), file_size_limit=64 * 1024
    )

    assert "Traceback" not in done.stderr
    if done.returncode == 0:  # findings kept in memory, or a fallback to it
        assert len(json.loads(done.stdout)["findings"]) == 2000
        return
    assert done.returncode == 2, done.stderr[-300:]
    told = done.stderr.lower()
    assert "temporary" in told or "tmpdir" in told, done.stderr


def test_a_trace_attribute_equal_to_the_reports_placeholder_crashes_the_json_report(
    tmp_path: Path,
) -> None:
    """User-visible harm: ``Report.write_json`` renders the document with the placeholder
    string ``"\\u0000findings\\u0000"`` where the findings go and splits the text on it,
    expecting exactly one occurrence (``head, tail = text.split(...)``). Values from the
    traces reach the same document: a run whose ``toolwatch.case_id`` attribute names no
    golden case is listed under ``unknown_case_ids`` by that very id. One span attribute
    with that value (NUL bytes are valid in OTLP strings) makes ``replay --format json``
    die with ``ValueError: too many values to unpack``, a traceback, exit 1 ("a gate
    failed") and no report at all; the text report reports it normally.
    Correct: write the findings without searching the rendered text for a marker (write the
    other keys around the list, or use a marker that cannot be a JSON string, e.g. a
    sentinel object passed through ``default=``)."""
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
def test_control_the_json_report_is_unchanged_without_a_full_disk(
    tmp_path: Path, runs: int
) -> None:
    """Control: the same replay with room to spool gives a whole document."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(POLICY)
    dump = _dump(tmp_path / "dump.jsonl", runs)
    done = _replay("--config", str(config), "--format", "json", str(dump))
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["findings"]) == runs
