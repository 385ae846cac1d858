"""Log records do not overwrite the findings log where both write one file through two
descriptors (review of f14ef64, sinks/destinations.py): ``findings: /dev/stderr`` with
``serve 2> toolwatch.log``, standard error opened by the shell without append. Was: the
findings lost, as follows. Now: the log thread writes at the file's end (``lseek``), under
the file's lock.

The lock serializes the writes, but the two descriptors are two open file descriptions: the
findings log's ``LineFile`` appends (``O_APPEND``, and it seeks to the end), while the log
thread (``logqueue._write_record``) writes ``os.write(2, ...)`` at descriptor 2's own offset,
which the findings' appends never move. Each log record is written over the findings appended
since the previous one: the file ends up holding log records where findings were, the
findings counted written. (With ``findings: -`` both share descriptor 1's description and the
findings' seek to the end moves the log's offset too: whole.)

The real pieces in a real subprocess: the CLI's ``logging.basicConfig`` on standard error,
``queued_logging``, ``open_outputs`` with ``findings: /dev/stderr``; the parent opens
standard error as ``2>`` does (truncated, not appended). Each finding is waited for with
``written`` before the next log record is made; no sleeps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

_CHILD = r"""
import json, logging, sys
from toolwatch.config import OutputSettings
from toolwatch.outputs import open_outputs
from toolwatch.sinks.findings import Redaction
from toolwatch.sinks.logqueue import queued_logging

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s",
                    stream=sys.stderr)  # as toolwatch.cli.main does
log = logging.getLogger("toolwatch.app")
failed = []
with queued_logging():
    outputs = open_outputs(OutputSettings(findings="/dev/stderr"), [], [], Redaction(),
                           wall_clock=lambda: 0, failed=failed.append)
    findings = outputs.files[0].output
    for i in range(20):
        findings.write(json.dumps({"finding": i, "pad": "f" * 100}) + "\n")
        outputs.write_queued()
        assert outputs.written(10.0)
        log.info("log record %d", i)
    outputs.close(10.0)
assert failed == [], failed
"""


def test_log_records_do_not_overwrite_findings_written_to_the_same_file(tmp_path: Path) -> None:
    """Scenario: ``toolwatch serve 2> toolwatch.log`` with ``output.findings: /dev/stderr``;
    20 findings, a log record after each.
    Was: the log records were written at standard error's own offset, over the findings
    appended after it: the first six findings gone and one cut (none counted lost).
    Now: the file holds the 20 findings and the 20 log records, each line whole."""
    log_file = tmp_path / "toolwatch.log"
    with open(log_file, "w") as stderr:  # the shell's 2> (O_TRUNC, no O_APPEND)
        done = subprocess.run(
            [sys.executable, "-c", _CHILD],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
            timeout=60,
            check=False,
        )
    lines = log_file.read_text().splitlines()
    assert done.returncode == 0, lines[-5:]
    found = [json.loads(line)["finding"] for line in lines if line.startswith('{"finding"')]
    records = [line for line in lines if line.startswith("INFO toolwatch.app: log record")]
    others = [line[:80] for line in lines if line not in records and not line.startswith("{")]
    assert (found, len(records), others) == (list(range(20)), 20, []), (
        f"findings in the file: {found}; log records: {len(records)}; other lines: {others[:3]}"
    )
