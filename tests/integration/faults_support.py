"""A ``toolwatch serve`` process to kill, stop and restart (``ServeProcess``), its config
written to a file, and the runs its fault tests send over OTLP/gRPC."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcExporter,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from prometheus_client.parser import text_string_to_metric_families

from tests.integration import agents
from tests.integration.cli_support import LISTENING
from tests.integration.conftest import until
from toolwatch.config import LISTENERS

POLICY = {"dangerous_tools": ["issue_refund"], "verification_tools": ["lookup_order"]}
START_TIMEOUT = 30.0


def write_config(path: Path, ports: dict[str, int], **sections: Any) -> Path:
    """A configuration file: loopback listeners on ``ports`` (0: any), output next to it."""
    document: dict[str, Any] = {
        "listen": {name: f"127.0.0.1:{ports.get(name, 0)}" for name in LISTENERS},
        "output": {
            "findings": str(path.with_suffix(".findings.jsonl")),
            "dump_tooltraces": str(path.with_suffix(".tooltraces.jsonl")),
        },
        "policy": POLICY,
        "shutdown_metrics_linger_seconds": 0,  # no Prometheus to wait for, unless a test says
        **sections,
    }
    path.write_text(yaml.safe_dump(document))
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


class ServeProcess:
    """``toolwatch serve --config FILE`` in a child process; stderr is read continuously."""

    def __init__(
        self,
        config: Path,
        stdout: Path | None = None,
        stdin: int | None = None,
        *,
        listening: bool = True,
        env: dict[str, str] | None = None,
        journal: bool = False,
    ) -> None:
        """``stdout``: a file its standard output is appended to (``serve >> FILE``);
        ``stdin``: a descriptor for its standard input (a terminal's), else none;
        ``listening``: wait for the start-up line (else ``wait_listening`` does);
        ``env``: variables set over the test's environment (whose ``TOOLWATCH_*`` are not
        passed on); ``journal``: its standard error a Unix stream socket, as systemd's
        journal connects it, else a pipe."""
        self.config = config
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("TOOLWATCH_")}
        self._journal: socket.socket | None = None
        with contextlib.ExitStack() as files:
            out = subprocess.DEVNULL if stdout is None else files.enter_context(stdout.open("ab"))
            err = subprocess.PIPE
            if journal:
                self._journal, child_end = socket.socketpair()
                err = files.enter_context(child_end).fileno()  # closed here once it has it
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "toolwatch.cli", "serve", "--config", str(config)],
                stdin=subprocess.DEVNULL if stdin is None else stdin,
                stdout=out,
                stderr=err,
                text=True,
                env={**inherited, **(env or {})},
            )
        self.log: list[str] = []
        self._listening = threading.Event()
        self.addresses: dict[str, str] = {}
        threading.Thread(target=self._read_stderr, daemon=True).start()
        if listening:
            self.wait_listening()

    def wait_listening(self) -> None:
        """Waits for the start-up line, whose addresses ``addresses`` then holds."""
        if not self._listening.wait(START_TIMEOUT):
            self.proc.kill()
            raise AssertionError("no start-up line:\n" + "".join(self.log))

    def _read_stderr(self) -> None:
        if self._journal is None:
            assert self.proc.stderr is not None
            self._read_lines(self.proc.stderr)
            return
        with self._journal, self._journal.makefile("r", encoding="utf-8") as lines:
            self._read_lines(lines)

    def _read_lines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.log.append(line)
            match = LISTENING.search(line)
            if match is not None:
                self.addresses = match.groupdict()
                self._listening.set()

    @property
    def tooltraces(self) -> list[dict[str, Any]]:
        return read_jsonl(self.config.with_suffix(".tooltraces.jsonl"))

    @property
    def findings(self) -> list[dict[str, Any]]:
        return read_jsonl(self.config.with_suffix(".findings.jsonl"))

    def sample(self, name: str, labels: dict[str, str] | None = None) -> float:
        """One sample of a ``/metrics`` scrape (0 when absent, as for an unused counter)."""
        url = f"http://{self.addresses['metrics']}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and sample.labels == (labels or {}):
                    return float(sample.value)
        return 0.0

    def terminate(
        self,
        timeout: float,
        after_drain: Callable[[], object] | None = None,
        stopping: Callable[[], object] | None = None,
        sig: signal.Signals = signal.SIGTERM,
    ) -> tuple[int, float]:
        """SIGTERM (or ``sig``); the exit code and the seconds the process took to exit.
        ``stopping`` runs once the shutdown is logged, while the requests in flight have
        their grace; ``after_drain`` once the drain is logged, while the process lingers for
        a last scrape."""
        started = time.monotonic()
        self.proc.send_signal(sig)
        if stopping is not None:
            assert until(lambda: any("shutting down" in line for line in self.log), timeout)
            stopping()
        if after_drain is not None:
            assert until(lambda: any("drained" in line for line in self.log), timeout)
            after_drain()
        code = self.proc.wait(timeout)
        return code, time.monotonic() - started

    def regressions(self) -> dict[str, float]:
        """``toolwatch_regressions_total`` of one scrape, summed by category."""
        return self.summed({"toolwatch_regressions_total": "category"})["category"]

    def summed(self, names: dict[str, str]) -> dict[str, dict[str, float]]:
        """Of one scrape, each sample named as a key of ``names``, summed by its value of
        the label ``names`` gives, by that label."""
        url = f"http://{self.addresses['metrics']}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        found: dict[str, dict[str, float]] = {label: {} for label in names.values()}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in names:
                    sums = found[names[sample.name]]
                    value = sample.labels[names[sample.name]]
                    sums[value] = sums.get(value, 0.0) + sample.value
        return found

    def kill(self) -> None:
        self.proc.kill()  # SIGKILL: no drain, no flush
        self.proc.wait(10)


def export(address: str, spans: Sequence[ReadableSpan]) -> SpanExportResult:
    exporter = GrpcExporter(endpoint=address, insecure=True, timeout=10)
    try:
        return exporter.export(spans)
    finally:
        exporter.shutdown()


def trace_id(spans: Sequence[ReadableSpan]) -> str:
    return format(spans[0].context.trace_id, "032x")


def without_root(spans: Sequence[ReadableSpan]) -> tuple[ReadableSpan, ...]:
    """A run whose agent span has not ended yet: no anchor, never complete by itself."""
    return tuple(span for span in spans if span.parent is not None)


# -- SIGTERM ----------------------------------------------------------------------------------

GRACE_SECONDS = 3.0


def file_size_limit(pid: int, limit: int) -> None:
    """The largest file ``pid`` may write (RLIMIT_FSIZE, ``RLIM_INFINITY`` for none). A
    write that crosses it writes what fits and fails (EFBIG) as a disk that fills up
    mid-line does (ENOSPC), without a device to fill: Python ignores SIGXFSZ."""
    _soft, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (limit, hard))


def long_unverified_refund_run() -> agents.AgentRun:
    """An unverified refund whose answer, in its ToolTrace line, is longer than the 8 KiB a
    Python file buffers."""
    turns = (agents.Turn((agents.REFUND,)), agents.Turn(text="Refunded. " * 2000))
    return agents.AgentRun("refund-bot", turns)


def serve_one_output(
    path: Path, serve: Callable[[Path], ServeProcess], output: str
) -> tuple[ServeProcess, Path]:
    """A server writing ``output`` (``findings`` or ``dump_tooltraces``) to a file, the other
    to its stdout (/dev/null); the file's path."""
    config = write_config(
        path,
        {},
        assembly={"completion_wait_seconds": 0.01, "tick_seconds": 0.01},
        shutdown_grace_seconds=GRACE_SECONDS,
    )
    document = yaml.safe_load(config.read_text())
    other = "dump_tooltraces" if output == "findings" else "findings"
    document["output"][other] = "-"
    config.write_text(yaml.safe_dump(document))
    return serve(config), Path(document["output"][output])


def send_long_run(server: ServeProcess, sent: list[str]) -> None:
    """Exports a ``long_unverified_refund_run``, its trace id added to ``sent``, and waits
    until the server has judged as many runs as ``sent`` names."""
    run = agents.record(long_unverified_refund_run(), "genai")
    sent.append(trace_id(run))
    assert export(server.addresses["grpc"], run) is SpanExportResult.SUCCESS
    counted = {"agent": "refund-bot", "outcome": "complete", "reference": "none", "traffic": "live"}
    assert until(lambda: server.sample("toolwatch_tool_traces_total", counted) == len(sent))
