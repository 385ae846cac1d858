"""Was (review of 07ff729, kept): ``serve`` opened its output files with a blocking
``open(2)`` in ``App.__init__``, before any listener was bound. With ``output.findings`` a
collector's FIFO that the collector had not opened yet (sidecars start in any order), it
hung there in silence: no listener, no ``/healthz`` (a liveness probe then restarts it into
the same wait), no log line.
Now: it opens the FIFO without waiting, logs one WARNING naming the setting and the path,
binds and answers; the findings published meanwhile are lost, counted
(``toolwatch_output_failures_total{output="findings_log"}``); once the collector reads the
FIFO, the next findings reach it. ``check-config`` never opens the FIFO (opening and closing
its write end would end its reader's input), and says ok.

``toolwatch serve`` and ``check-config`` run as real processes (the children run the sources
``PYTHONPATH`` names); the collector is a child process reading the FIFO; waits are for what
only those processes decide, with deadlines.
"""

from __future__ import annotations

import json
import os
import select
import signal
import urllib.request
from collections.abc import Callable
from pathlib import Path

from opentelemetry.sdk.trace.export import SpanExportResult

from tests.fifos import Collector
from tests.integration import agents
from tests.integration.cli_support import run_cli
from tests.integration.conftest import until
from tests.integration.faults_support import (
    START_TIMEOUT,
    ServeProcess,
    export,
    trace_id,
    write_config,
)

FAILURES = "toolwatch_output_failures_total"
MISSING = "MISSING_VERIFICATION_STEP"


def _healthz(server: ServeProcess) -> int:
    url = f"http://{server.addresses['metrics']}/healthz"
    with urllib.request.urlopen(url, timeout=10) as answer:
        status: int = answer.status
        return status


def _judged(server: ServeProcess) -> str:
    """An unverified refund exported and judged (its ToolTrace in the dump): its trace id."""
    spans = agents.record(agents.unverified_refund_run(), "genai")
    dumped = len(server.tooltraces)
    assert export(server.addresses["grpc"], spans) is SpanExportResult.SUCCESS
    assert until(lambda: len(server.tooltraces) == dumped + 1, START_TIMEOUT)
    return trace_id(spans)


def test_serve_starts_with_a_fifo_no_one_reads_yet_and_writes_it_once_read(
    tmp_path: Path, serve_process: Callable[[Path], ServeProcess]
) -> None:
    """Scenario: ``output.findings`` is a FIFO its collector has made but not opened; serve
    starts; an unverified refund; the collector starts reading; another.
    Was: serve never printed its listening line (it waited in ``open(2)``).
    Now: it listens and ``/healthz`` answers 200; its log has the WARNING; the first finding
    is lost, counted; the second is read by the collector; SIGTERM exits 0."""
    config = write_config(
        tmp_path / "fifo.yaml",
        {},
        assembly={"completion_wait_seconds": 0.01, "tick_seconds": 0.01},
    )
    fifo = config.with_suffix(".findings.jsonl")
    os.mkfifo(fifo)
    server = serve_process(config)  # waits for the listening line
    collector = None
    try:
        health = _healthz(server)
        _judged(server)
        labels = {"output": "findings_log"}
        assert until(lambda: server.sample(FAILURES, labels) == 1, START_TIMEOUT)
        collector = Collector(fifo, START_TIMEOUT)
        second = _judged(server)
        finding = json.loads(collector.printed())
        lost = server.sample(FAILURES, labels)
        server.proc.send_signal(signal.SIGTERM)
        code = server.proc.wait(START_TIMEOUT)
    finally:
        if collector is not None:
            collector.end()
    assert (health, lost, code) == (200, 1, 0)
    assert (finding["trace_id"], finding["category"]) == (second, MISSING)
    warned = [line for line in server.log if " WARNING toolwatch.outputs: " in line]
    assert [line.split(": ", 1)[1].rstrip() for line in warned] == [
        f"output.findings: {fifo} is a FIFO, and no reader has opened it yet: its lines are"
        " lost, counted, until one does"
    ]
    assert any(
        f"output.findings: {fifo} opened (a reader has opened the FIFO)" in line
        for line in server.log
    ), "".join(server.log)


def test_check_config_says_ok_without_opening_a_fifo_output(tmp_path: Path) -> None:
    """Scenario: ``check-config`` of a configuration whose findings log is a FIFO that a
    collector has opened, waiting for a writer (a non-blocking reader in the test).
    Now (as before): ok, and the FIFO was never opened to write: the reader sees no writer
    come and go (``POLLHUP``), as a collector would see its input end."""
    config = write_config(tmp_path / "check.yaml", {})
    fifo = config.with_suffix(".findings.jsonl")
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        checked = run_cli("check-config", str(config))
        poller = select.poll()
        poller.register(reader, select.POLLIN)
        events = poller.poll(0)
    finally:
        os.close(reader)
    assert (checked.returncode, checked.stdout, events) == (0, f"{config}: ok\n", [])
