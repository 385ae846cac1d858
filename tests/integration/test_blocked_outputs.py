"""Standard output and standard error that block (a container log driver whose collector is
slow or down) stall nothing: exports are answered, runs judged, ``/metrics`` scraped, and
what was written reaches the pipes once they are read again.

``toolwatch serve`` runs as a real process whose stdout (the findings log) and stderr (its
log) are pipes this test fills and leaves unread. A real process runs on the real clock, so
the test waits for real events with deadlines (``until``).
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.integration import agents
from tests.integration.blocked_support import Pipe, scraped_sample, serve_on_pipes
from tests.integration.conftest import until
from tests.integration.faults_support import (
    export,
    trace_id,
    write_config,
)


@pytest.fixture
def pipes() -> Iterator[tuple[Pipe, Pipe]]:
    out, err = Pipe(), Pipe()
    yield out, err
    out.close()
    err.close()


def test_blocked_stdout_and_stderr_stall_no_export_no_judgement_and_no_scrape(
    tmp_path: Path, pipes: tuple[Pipe, Pipe]
) -> None:
    out, err = pipes
    config = write_config(
        tmp_path / "blocked.yaml",
        {},
        assembly={"completion_wait_seconds": 0.01, "tick_seconds": 0.01},
        shutdown_grace_seconds=3.0,
    )
    document = yaml.safe_load(config.read_text())
    document["output"] = {"findings": "-", "dump_tooltraces": None}  # the default log
    config.write_text(yaml.safe_dump(document))
    proc, addresses = serve_on_pipes(config, out, err)
    try:
        out.fill()
        err.fill()
        run = agents.record(agents.unverified_refund_run(), "genai")
        assert export(addresses["grpc"], run) is SpanExportResult.SUCCESS
        judged = {"category": "MISSING_VERIFICATION_STEP"}
        # Judged and counted, the finding waiting for stdout: the alert path is alive.
        assert until(
            lambda: scraped_sample(addresses, "toolwatch_regressions_total", judged) == 1, 20
        )
        # A reload that fails is logged, the log waiting for stderr: the loop goes on.
        config.write_text("policy: [not, a, mapping]\n")
        proc.send_signal(signal.SIGHUP)
        reloaded = "toolwatch_config_last_reload_successful"
        assert until(lambda: scraped_sample(addresses, reloaded, {}) == 0, 20)
        failures = {"output": "findings_log"}
        assert scraped_sample(addresses, "toolwatch_output_failures_total", failures) == 0

        findings = [json.loads(line) for line in out.read_until(b"MISSING_VERIFICATION_STEP")]
        assert [(f["category"], f["trace_id"]) for f in findings] == [
            ("MISSING_VERIFICATION_STEP", trace_id(run))
        ]
        logged = err.read_until(b"ERROR")
        assert any(b"ERROR" in line and b"reload" in line for line in logged), logged
    finally:
        out.drain()
        err.drain()
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(15)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
