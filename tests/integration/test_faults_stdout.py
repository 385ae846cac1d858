"""The findings log on standard output (``output.findings: -``, the default) is written whole
lines or none, as a file is: ``serve >> findings.jsonl`` (or systemd's
``StandardOutput=append:``) on a full disk kept what the system refused in Python's buffer
and wrote it once there was room, so findings counted lost appeared after all and a torn
line was completed by a later one (review)."""

from __future__ import annotations

import json
import resource
from collections.abc import Callable
from pathlib import Path

import yaml

from tests.integration.faults_support import (
    GRACE_SECONDS,
    ServeProcess,
    file_size_limit,
    send_long_run,
    write_config,
)
from tests.pipes import is_json


def test_findings_on_stdout_on_a_full_disk_keep_whole_lines_and_count_what_they_lost(
    tmp_path: Path, serve_process: Callable[..., ServeProcess]
) -> None:
    config = write_config(
        tmp_path / "stdout.yaml",
        {},
        assembly={"completion_wait_seconds": 0.01, "tick_seconds": 0.01},
        shutdown_grace_seconds=GRACE_SECONDS,
    )
    document = yaml.safe_load(config.read_text())
    document["output"] = {"findings": "-", "dump_tooltraces": None}  # the default log
    config.write_text(yaml.safe_dump(document))
    log = tmp_path / "findings.jsonl"
    server = serve_process(config, log)
    sent: list[str] = []

    send_long_run(server, sent)
    one = log.stat().st_size
    assert one > 0
    file_size_limit(server.proc.pid, one + one // 2)  # room for half of the next
    send_long_run(server, sent)  # half written, then the disk is full
    send_long_run(server, sent)  # none of it fits
    failed = server.sample("toolwatch_output_failures_total", {"output": "findings_log"})
    file_size_limit(server.proc.pid, resource.RLIM_INFINITY)  # space freed
    send_long_run(server, sent)
    code, _ = server.terminate(timeout=GRACE_SECONDS + 10)
    assert code == 0

    lines = log.read_text().splitlines()
    torn = [line for line in lines if not is_json(line)]
    assert not torn, f"a line that is no JSON (a finding torn and joined to a later one): {torn}"
    logged = [sent.index(json.loads(line)["trace_id"]) for line in lines]
    # The two publications that failed are counted, and they are not in the log.
    assert (failed, logged) == (2, [0, 3])
