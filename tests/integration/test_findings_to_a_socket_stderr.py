"""``output.findings: /dev/stderr`` where standard error is a Unix stream socket: what systemd
connects it to (the journal's stream socket, ``StandardError=journal``, the default) and some
supervisors do. Was: ``serve`` did not start: "cannot open /dev/stderr (output.findings): No
such device or address" (Linux refuses ``open(2)`` of ``/proc/self/fd/2`` for a socket), so
under systemd the findings could reach the journal only as ``-`` (standard output). Now: the
findings are written to a copy of descriptor 2, each line whole between the log's; a SIGHUP
(logrotate's postrotate, a reload) finds the same socket at the path and goes on.

``toolwatch serve`` runs as a real process (the child runs the sources ``PYTHONPATH`` names),
its standard error the child's end of a ``socket.socketpair()``; spans go in through the
OpenTelemetry SDK's OTLP exporter; the log and the findings are read from the other end.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.integration import agents
from tests.integration.conftest import until
from tests.integration.faults_support import (
    START_TIMEOUT,
    ServeProcess,
    export,
    trace_id,
    write_config,
)

MISSING = "MISSING_VERIFICATION_STEP"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServeProcess]:
    """``serve`` listening, with ``output.findings: /dev/stderr`` and its standard error a Unix
    stream socket (``journal``), judging a run 10 ms after it ends (ticks as often); killed
    at the end if still running."""
    config = write_config(
        tmp_path / "journal.yaml",
        {},
        assembly={"completion_wait_seconds": 0.01, "tick_seconds": 0.01},
        output={"findings": "/dev/stderr"},
    )
    server = ServeProcess(config, journal=True)
    yield server
    if server.proc.poll() is None:
        server.kill()


def _findings(server: ServeProcess) -> list[dict[str, Any]]:
    """The findings among the lines read from standard error (the log's lines are text)."""
    return [json.loads(line) for line in server.log if line.startswith("{")]


def _reloads(server: ServeProcess) -> int:
    return sum(" configuration reloaded" in line for line in server.log)


def _judged(server: ServeProcess) -> str:
    """An unverified refund exported, its finding read from standard error: its trace id."""
    spans = agents.record(agents.unverified_refund_run(), "genai")
    found = len(_findings(server))
    assert export(server.addresses["grpc"], spans) is SpanExportResult.SUCCESS
    assert until(lambda: len(_findings(server)) == found + 1, START_TIMEOUT), "".join(server.log)
    return trace_id(spans)


def test_findings_to_dev_stderr_reach_a_socket_standard_error(server: ServeProcess) -> None:
    """Scenario: ``serve`` with ``output.findings: /dev/stderr``, its standard error a Unix
    stream socket; an unverified refund; SIGHUP; another; SIGTERM.
    Was: it exited at start-up, "No such device or address", without a listening line.
    Now: both findings are read from the socket, between the log's lines; the SIGHUP opens
    nothing again, and nothing about the output or an error is logged; SIGTERM exits 0."""
    first = _judged(server)
    server.proc.send_signal(signal.SIGHUP)
    assert until(lambda: _reloads(server) == 1, START_TIMEOUT), "".join(server.log)
    second = _judged(server)
    code, _ = server.terminate(START_TIMEOUT)
    found = [(finding["trace_id"], finding["category"]) for finding in _findings(server)]
    assert (found, code) == ([(first, MISSING), (second, MISSING)], 0)
    # The outputs' messages name the path: a look that failed, a file opened again. The
    # start-up line naming each output is the one that may (and must).
    named = [line for line in server.log if "/dev/stderr" in line or " ERROR " in line]
    assert [line for line in named if " outputs findings=/dev/stderr " not in line] == []
    assert len(named) == 1


def test_the_log_still_reaches_the_socket_after_the_outputs_close_at_shutdown(
    server: ServeProcess,
) -> None:
    """Scenario: as above, one unverified refund, then SIGTERM. The findings log is a copy
    of descriptor 2: closing it at shutdown must close the copy alone, not standard error.
    The drain's line, logged once the outputs are closed, is read from the socket after the
    finding, and the process exits 0."""
    judged = _judged(server)
    code, _ = server.terminate(START_TIMEOUT)
    drained = " INFO toolwatch: drained 0 buffered trace(s) at shutdown\n"
    assert until(lambda: any(line.endswith(drained) for line in server.log), START_TIMEOUT), (
        "".join(server.log)
    )
    last = [line[:1] if line.startswith("{") else line[23:] for line in server.log[-3:]]
    assert (code, [f["trace_id"] for f in _findings(server)], last) == (
        0,
        [judged],
        ["{", " INFO toolwatch: shutting down\n", drained],
    )
