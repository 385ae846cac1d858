"""a ``serve`` whose standard error blocks (a stalled log driver) must still
exit when told to, having written the drain's findings.

A real ``toolwatch serve`` process: its stderr is a pipe the test fills and leaves unread, its
findings log a file. The process runs on the real clock, so the test waits for real events
with deadlines (``until``, ``Popen.wait``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.integration import agents
from tests.integration.blocked_support import Pipe, scraped_sample, serve_on_pipes
from tests.integration.conftest import until
from tests.integration.faults_support import export, read_jsonl, trace_id, write_config

#: What the shutdown may take here: the grace (1 s), the outputs' close (1 s at least), the
#: log queue's close (5 s), and room for a slow machine.
_EXIT_SECONDS = 20.0


@pytest.fixture
def pipes() -> Iterator[tuple[Pipe, Pipe]]:
    out, err = Pipe(), Pipe()
    yield out, err
    out.close()
    err.close()


def test_sigterm_with_a_blocked_stderr_exits_having_written_the_findings(
    tmp_path: Path, pipes: tuple[Pipe, Pipe]
) -> None:
    """Scenario: ``serve`` logs to a stderr nobody reads any more (Docker's blocking log
    driver, its collector down); it judges a run (the finding goes to a file), then gets
    SIGTERM (a rollout).

    Was: the run is judged and counted (the commit's point), but the process never exits:
    ``queued_logging`` gives up on its thread after 5 s and puts the root logger's handlers
    back while that thread is still inside ``StreamHandler.handle`` (holding the handler's
    lock, blocked in ``sys.stderr.write``); at exit ``logging.shutdown`` takes that lock (and
    Python's finalization would then need stderr's buffer lock, held by the same daemon
    thread), so the process hangs until SIGKILL: the pod's whole termination grace, exit 137.

    Now: exit (code 0) within the grace plus the bounded closes the commit describes
    ("waiting up to close_timeout seconds"): log records still queued are lost, as the run's
    were, and the interpreter must not wait on a handler or a buffer a daemon thread holds.
    Not restoring the handlers is not enough (``logging.shutdown`` takes the lock of every
    handler ever made, and finalization flushes ``sys.stderr``): e.g. the CLI leaves with
    ``os._exit`` once serve returned when the log thread did not finish, or the log thread
    writes stderr through a non-blocking descriptor of its own, losing (and counting) what
    does not fit.

    Older: before 1eeaddc the event loop itself blocked at the first log line, so SIGTERM was
    never acted on either; the commit makes the run survive a blocked stderr but not its exit.
    """
    out, err = pipes
    config = write_config(
        tmp_path / "stderr.yaml",
        {},
        assembly={"completion_wait_seconds": 0.01, "tick_seconds": 0.01},
        shutdown_grace_seconds=1.0,
    )
    document = yaml.safe_load(config.read_text())
    document["output"]["dump_tooltraces"] = None
    config.write_text(yaml.safe_dump(document))
    findings = config.with_suffix(".findings.jsonl")
    proc, addresses = serve_on_pipes(config, out, err)
    try:
        err.fill()  # stderr blocks from here on; stdout (nothing written to it) is drained
        out.drain()
        run = agents.record(agents.unverified_refund_run(), "genai")
        assert export(addresses["grpc"], run) is SpanExportResult.SUCCESS
        judged = {"category": "MISSING_VERIFICATION_STEP"}
        assert until(
            lambda: scraped_sample(addresses, "toolwatch_regressions_total", judged) == 1, 20
        )

        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(_EXIT_SECONDS)
        exited = proc.poll()
        assert exited == 0, (
            f"serve did not exit within {_EXIT_SECONDS:g} s of SIGTERM with its stderr blocked"
            f" (poll: {exited})"
        )
        assert [(f["category"], f["trace_id"]) for f in read_jsonl(findings)] == [
            ("MISSING_VERIFICATION_STEP", trace_id(run))
        ]
    finally:
        if proc.poll() is None:
            proc.kill()
        err.drain()
        proc.wait(10)


#: A process that logs under ``queued_logging`` into a pipe that is full and never read (its
#: standard error, say), leaves the block, and exits: what ``serve`` and the CLI do.
_LOG_INTO_A_FULL_PIPE = """
import logging, os, sys
from toolwatch.sinks.logqueue import queued_logging
read_end, write_end = os.pipe()
os.set_blocking(write_end, False)
try:
    while True:
        os.write(write_end, b"\\n" * 65536)
except BlockingIOError:
    pass
os.set_blocking(write_end, True)
logging.basicConfig(level=logging.INFO, stream=os.fdopen(write_end, "w"))
with queued_logging(close_timeout=0.5):
    logging.getLogger("toolwatch").info("shutting down")  # the log thread blocks in it
print("left queued_logging", flush=True)
sys.exit(0)
"""


def test_a_process_whose_log_is_blocked_exits_after_queued_logging() -> None:
    """The same defect, without a server: the smallest reproduction.

    Scenario: a record is logged under ``queued_logging`` into a full pipe nobody reads; the
    block is left (its close_timeout, 0.5 s, runs out) and the process exits with code 0.

    Was: ``queued_logging`` returns (it prints "left queued_logging"), but the process never
    ends: the main thread waits in ``logging.shutdown`` (atexit) for the StreamHandler's lock,
    which the daemon "toolwatch-log" thread holds while blocked in the stream's write
    (``faulthandler`` shows both stacks).

    Now: exit with code 0 once ``queued_logging``'s bounded wait is over.

    Older: new code (``queued_logging`` is new in 1eeaddc), the hang itself is older.
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", _LOG_INTO_A_FULL_PIPE],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(15)
        assert proc.poll() == 0, f"the process did not exit (poll: {proc.poll()})"
    finally:
        if proc.poll() is None:
            proc.kill()
        out, _ = proc.communicate(timeout=10)
    assert out == b"left queued_logging\n"
