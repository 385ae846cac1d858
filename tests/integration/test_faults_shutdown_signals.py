"""Signals that come while ``serve`` starts or shuts down: a SIGHUP (logrotate's postrotate, a
configuration reloader) in the shutdown's grace, in its wait for a last scrape and on until
the process is gone; a SIGHUP before the server's own handler is in place; a second SIGTERM
in the grace.

Each runs ``toolwatch serve`` as a real process (``test_faults.ServeProcess``) and waits for
what it can observe (a log line, a file, an exit) with a deadline. The shutdown is held in its
grace by an OTLP/HTTP request whose body never comes, and let go by closing that connection.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.integration import agents
from tests.integration.conftest import until
from tests.integration.faults_support import (
    POLICY,
    START_TIMEOUT,
    ServeProcess,
    export,
    read_jsonl,
    trace_id,
    without_root,
    write_config,
)

#: Longer than any test runs: each ends its grace by closing the request that holds it.
GRACE_SECONDS = 120.0
EXIT_TIMEOUT = 30.0
MISSING = "MISSING_VERIFICATION_STEP"
NOT_RELOADED = "SIGHUP while shutting down: the configuration is not reloaded"
LEFT_AS_THEY_ARE = "SIGHUP while shutting down: configuration and outputs left as they are"


def shutdown_config(path: Path, **sections: Any) -> Path:
    """Runs judged at once by the ticker; a grace that only the test's connection ends."""
    return write_config(
        path,
        {},
        assembly={"completion_wait_seconds": 0.01, "tick_seconds": 0.01},
        ingest={"read_timeout_seconds": GRACE_SECONDS},  # the stalled body is not timed out
        shutdown_grace_seconds=GRACE_SECONDS,
        **sections,
    )


def outputs(config: Path) -> tuple[Path, Path]:
    """The findings log and the ToolTrace dump ``write_config`` names."""
    return config.with_suffix(".findings.jsonl"), config.with_suffix(".tooltraces.jsonl")


def findings_in(path: Path) -> list[tuple[str, str]]:
    return [(f["trace_id"], f["category"]) for f in read_jsonl(path)]


def tooltraces_in(path: Path) -> list[tuple[str, str | None]]:
    return [(t["trace_id"], t["incomplete_reason"]) for t in read_jsonl(path)]


def logged(server: ServeProcess, text: str) -> Callable[[], bool]:
    return lambda: any(text in line for line in server.log)


def said_after(server: ServeProcess, text: str) -> list[str]:
    """The messages of the log lines after the first that holds ``text``."""
    for at, line in enumerate(server.log):
        if text in line:
            return [later.split(": ", 1)[1].rstrip() for later in server.log[at + 1 :]]
    raise AssertionError(f"no line with {text!r}:\n{''.join(server.log)}")


def serve_holding_a_run(
    config: Path, serve_process: Callable[[Path], ServeProcess]
) -> tuple[ServeProcess, tuple[str, str]]:
    """A server that judged one unverified refund (in the findings log and the dump) and
    holds another, unfinished, for the drain; their trace ids. It has been scraped."""
    server = serve_process(config)
    judged = agents.record(agents.unverified_refund_run(), "genai")
    assert export(server.addresses["grpc"], judged) is SpanExportResult.SUCCESS
    assert until(lambda: len(server.tooltraces) == 1 and len(server.findings) == 1)
    held = without_root(agents.record(agents.unverified_refund_run(), "openinference"))
    assert export(server.addresses["grpc"], held) is SpanExportResult.SUCCESS
    assert server.sample("toolwatch_buffered_traces") == 1
    return server, (trace_id(judged), trace_id(held))


class StalledRequest:
    """An OTLP/HTTP request whose body never comes: the shutdown waits for it in its grace
    until ``release`` closes the connection."""

    def __init__(self, server: ServeProcess) -> None:
        host, port = server.addresses["http"].rsplit(":", 1)
        self._sock = socket.create_connection((host, int(port)), timeout=30)
        self._sock.sendall(
            b"POST /v1/traces HTTP/1.1\r\nHost: toolwatch\r\n"
            b"Content-Type: application/x-protobuf\r\nContent-Length: 1000\r\n\r\n"
        )
        assert until(lambda: server.sample("toolwatch_requests_in_flight") == 1)

    def release(self) -> None:
        self._sock.close()


def test_a_sighup_in_the_grace_opens_rotated_outputs_again_and_reloads_no_configuration(
    tmp_path: Path, serve_process: Callable[[Path], ServeProcess]
) -> None:
    """logrotate renames the findings log and the dump and sends SIGHUP while the shutdown
    waits for a request in flight, and the configuration file was edited meanwhile (nothing
    guarded): the drain's findings go to new files at the paths, where a log shipper reads,
    and the drain judges by the configuration that ran when SIGTERM came."""
    config = shutdown_config(tmp_path / "grace.yaml")
    server, (before, drained) = serve_holding_a_run(config, serve_process)
    findings, dump = outputs(config)
    stalled = StalledRequest(server)
    server.proc.send_signal(signal.SIGTERM)
    assert until(logged(server, "shutting down"))

    findings.rename(tmp_path / "findings.jsonl.1")
    dump.rename(tmp_path / "tooltraces.jsonl.1")
    shutdown_config(config, policy={})  # a reload would find nothing in the drained run
    server.proc.send_signal(signal.SIGHUP)
    assert until(logged(server, NOT_RELOADED))
    stalled.release()
    code = server.proc.wait(EXIT_TIMEOUT)

    assert code == 0
    assert findings_in(tmp_path / "findings.jsonl.1") == [(before, MISSING)]
    assert findings_in(findings) == [(drained, MISSING)]
    assert tooltraces_in(tmp_path / "tooltraces.jsonl.1") == [(before, None)]
    assert tooltraces_in(dump) == [(drained, "shutdown")]
    # The outputs' threads open the paths again (off the event loop): logged in their time.
    assert sorted(said_after(server, "shutting down")) == sorted(
        [
            f"output.findings: {findings} opened again (the file there was renamed away)",
            f"output.dump_tooltraces: {dump} opened again (the file there was renamed away)",
            f"{NOT_RELOADED} (what is buffered is judged by the one running at SIGTERM)",
            "drained 1 buffered trace(s) at shutdown",
        ]
    )


def test_a_sighup_in_the_wait_for_a_last_scrape_leaves_the_drain_in_the_rotated_file(
    tmp_path: Path, serve_process: Callable[[Path], ServeProcess]
) -> None:
    """Once the drain's findings are written and the outputs closed, a rotation's SIGHUP is
    logged and ignored: no empty file is left at the paths, and the drain's findings are in
    the renamed files, after those written before them."""
    config = shutdown_config(tmp_path / "linger.yaml", shutdown_metrics_linger_seconds=60)
    server, (before, drained) = serve_holding_a_run(config, serve_process)
    findings, dump = outputs(config)
    server.proc.send_signal(signal.SIGTERM)
    assert until(logged(server, "for a last scrape of /metrics"))

    findings.rename(tmp_path / "findings.jsonl.1")
    dump.rename(tmp_path / "tooltraces.jsonl.1")
    server.proc.send_signal(signal.SIGHUP)
    assert until(logged(server, LEFT_AS_THEY_ARE))
    assert server.sample("toolwatch_config_last_reload_successful") == 1  # the last scrape
    code = server.proc.wait(EXIT_TIMEOUT)

    assert code == 0
    assert (findings.exists(), dump.exists()) == (False, False)
    assert findings_in(tmp_path / "findings.jsonl.1") == [(before, MISSING), (drained, MISSING)]
    assert tooltraces_in(tmp_path / "tooltraces.jsonl.1") == [
        (before, None),
        (drained, "shutdown"),
    ]


def test_sighups_all_through_the_shutdown_leave_the_findings_written_and_the_exit_code_0(
    tmp_path: Path, serve_process: Callable[[Path], ServeProcess]
) -> None:
    """SIGHUP in the grace, then again and again from its end until the process is gone:
    the drain, the closing of the outputs, Python's exit. Once the event loop had closed,
    asyncio had given SIGHUP back its default action, and one that came then ended the
    process (killed by signal 1, not exit code 0) after a clean shutdown."""
    config = shutdown_config(tmp_path / "flood.yaml")
    server, (before, drained) = serve_holding_a_run(config, serve_process)
    findings, dump = outputs(config)
    stalled = StalledRequest(server)
    config.write_text("policy: [\n")  # a reload would fail, and say so
    server.proc.send_signal(signal.SIGTERM)
    assert until(logged(server, "shutting down"))
    server.proc.send_signal(signal.SIGHUP)
    assert until(logged(server, NOT_RELOADED))
    stalled.release()

    assert hang_up_until_gone(server.proc, EXIT_TIMEOUT) == 0
    assert findings_in(findings) == [(before, MISSING), (drained, MISSING)]
    assert tooltraces_in(dump) == [(before, None), (drained, "shutdown")]
    said = said_after(server, "shutting down")
    assert "drained 1 buffered trace(s) at shutdown" in said
    assert [message for message in said if "configuration reload" in message] == []


def hang_up_until_gone(process: subprocess.Popen[str], timeout: float) -> int:
    """Sends ``process`` SIGHUP every millisecond or so until it exits; its exit code."""
    deadline = time.monotonic() + timeout
    while process.poll() is None:  # reaped once it has exited: no signal to another
        assert time.monotonic() < deadline, "still running"
        process.send_signal(signal.SIGHUP)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(0.001)
    return process.returncode


def test_a_second_sigterm_in_the_grace_still_drains_and_skips_the_wait_for_a_scrape(
    tmp_path: Path, serve_process: Callable[[Path], ServeProcess]
) -> None:
    """A second SIGTERM (an impatient operator, a supervisor that signals twice) while the
    shutdown waits for a request in flight: the buffered run is still drained into the
    findings log and the dump, and the wait for a last scrape (60 s) is skipped."""
    config = shutdown_config(tmp_path / "twice.yaml", shutdown_metrics_linger_seconds=60)
    server, (before, drained) = serve_holding_a_run(config, serve_process)  # scraped
    findings, dump = outputs(config)
    stalled = StalledRequest(server)
    server.proc.send_signal(signal.SIGTERM)
    assert until(logged(server, "shutting down"))
    server.proc.send_signal(signal.SIGTERM)
    assert server.sample("toolwatch_requests_in_flight") == 1  # still in the grace
    stalled.release()
    code = server.proc.wait(EXIT_TIMEOUT)

    assert code == 0
    assert findings_in(findings) == [(before, MISSING), (drained, MISSING)]
    assert tooltraces_in(dump) == [(before, None), (drained, "shutdown")]
    # No "waiting up to 60s for a last scrape of /metrics": it was skipped before it began.
    assert said_after(server, "shutting down") == [
        "drained 1 buffered trace(s) at shutdown",
        "second signal: not waiting for a last scrape",
    ]


def test_a_sighup_while_serve_reads_its_configuration_is_acted_on_once_it_serves(
    tmp_path: Path,
) -> None:
    """The configuration file is a FIFO: ``serve`` waits in its start-up, after the CLI
    remembers signals and before the server's handler is in place, until the test writes
    it. A SIGHUP sent then is remembered; once the server listens it reloads, reading the
    file (the FIFO) again, and the reloaded policy judges the next run."""
    config = shutdown_config(tmp_path / "fifo.yaml", policy={})  # nothing guarded
    text = config.read_text()
    config.unlink()
    os.mkfifo(config)
    server = ServeProcess(config, listening=False)
    try:
        writer = opened_by_a_reader(config)
        server.proc.send_signal(signal.SIGHUP)  # serve waits to read the file meanwhile
        write_and_close(writer, text)
        server.wait_listening()
        reloaded = yaml.safe_load(text) | {"policy": POLICY}
        write_and_close(opened_by_a_reader(config), yaml.safe_dump(reloaded))
        assert until(logged(server, "configuration reloaded: policy, golden, evaluators apply"))
        run = agents.record(agents.unverified_refund_run(), "genai")
        assert export(server.addresses["grpc"], run) is SpanExportResult.SUCCESS
        assert until(lambda: len(server.tooltraces) == 1)
        server.proc.send_signal(signal.SIGTERM)
        code = server.proc.wait(EXIT_TIMEOUT)
    finally:
        if server.proc.poll() is None:
            server.kill()

    assert code == 0
    assert findings_in(outputs(config)[0]) == [(trace_id(run), MISSING)]  # the reload's policy
    assert len([line for line in server.log if "configuration reload" in line]) == 1


def opened_by_a_reader(fifo: Path) -> int:
    """A descriptor that writes ``fifo``, once a process has opened it to read: until then
    an open to write that does not wait fails (ENXIO)."""
    opened: list[int] = []

    def reader_there() -> bool:
        try:
            opened.append(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError as error:
            if error.errno != errno.ENXIO:
                raise
            return False
        return True

    assert until(reader_there, START_TIMEOUT), f"nothing opened {fifo} to read"
    return opened[0]


def write_and_close(descriptor: int, text: str) -> None:
    os.set_blocking(descriptor, True)
    with os.fdopen(descriptor, "w", encoding="utf-8") as fifo:
        fifo.write(text)
