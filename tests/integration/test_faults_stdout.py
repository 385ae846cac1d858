"""The findings log on standard output (``output.findings: -``, the default) is written whole
lines or none, as a file is: ``serve >> findings.jsonl`` (or systemd's
``StandardOutput=append:``) on a full disk kept what the system refused in Python's buffer
and wrote it once there was room, so findings counted lost appeared after all and a torn
line was completed by a later one (review)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from tests.integration.test_faults import (
    GRACE_SECONDS,
    LISTENERS,
    LISTENING,
    START_TIMEOUT,
    ServeProcess,
    file_size_limit,
    send_long_run,
    write_config,
)


class StdoutServe(ServeProcess):
    """``toolwatch serve`` with its standard output appended to ``stdout``, a regular file,
    as ``serve >> findings.jsonl`` does."""

    def __init__(self, config: Path, stdout: Path) -> None:
        self.config = config
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLWATCH_")}
        with stdout.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "toolwatch.cli", "serve", "--config", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
        self.log: list[str] = []
        self._listening = threading.Event()
        self.addresses: dict[str, str] = {}
        threading.Thread(target=self._read_stderr, daemon=True).start()
        if not self._listening.wait(START_TIMEOUT):
            self.proc.kill()
            raise AssertionError("no start-up line:\n" + "".join(self.log))

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)
            match = LISTENING.search(line)
            if match is not None:
                self.addresses = dict(zip(LISTENERS, match.groups(), strict=True))
                self._listening.set()


@pytest.fixture
def stdout_serve() -> Iterator[Callable[[Path, Path], StdoutServe]]:
    started: list[StdoutServe] = []

    def start(config: Path, stdout: Path) -> StdoutServe:
        process = StdoutServe(config, stdout)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.proc.poll() is None:
            process.kill()


def test_findings_on_stdout_on_a_full_disk_keep_whole_lines_and_count_what_they_lost(
    tmp_path: Path, stdout_serve: Callable[[Path, Path], StdoutServe]
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
    server = stdout_serve(config, log)
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
    torn = [line for line in lines if not _is_json(line)]
    assert not torn, f"a line that is no JSON (a finding torn and joined to a later one): {torn}"
    logged = [sent.index(json.loads(line)["trace_id"]) for line in lines]
    # The two publications that failed are counted, and they are not in the log.
    assert (failed, logged) == (2, [0, 3])


def _is_json(line: str) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True
