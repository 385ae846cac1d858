"""The servers under test, as child processes pinned to one core.

``toolwatch serve`` runs with ``bench_config``: the refund policy (so unverified runs raise
findings), a short completion wait, buffers big enough for the offered load, and the findings
log in a file. ``bench.ceiling`` is the bare server measured against it. ``ServerProcess``
starts either, waits for its listeners, reads its metrics and resident memory, and stops it.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "SERVER_CPU",
    "ServerProcess",
    "bench_config",
    "free_port",
    "resident_bytes",
]

#: The core the server runs on; clients and this orchestrator use the others.
SERVER_CPU = 0

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? ([0-9.eE+-]+|NaN|\+Inf)", re.M)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def bench_config(
    ports: dict[str, int],
    findings: Path,
    *,
    completion_wait: float,
    max_trace_age: float = 30.0,
    tick: float = 0.01,
    max_buffered_spans: int = 1_000_000,
) -> dict[str, Any]:
    """The ``toolwatch serve`` configuration of the benchmark (a YAML-ready mapping)."""
    return {
        "listen": {name: f"127.0.0.1:{port}" for name, port in ports.items()},
        "assembly": {
            "completion_wait_seconds": completion_wait,
            "max_trace_age_seconds": max_trace_age,
            "tick_seconds": tick,
            "max_traces": 200_000,
            "max_buffered_spans": max_buffered_spans,
            "max_buffered_bytes": 2**31,
            "max_remembered_traces": 200_000,
        },
        "policy": {
            "dangerous_tools": ["issue_refund"],
            "verification_tools": ["lookup_order"],
            "bindings": {"issue_refund.order_id": "lookup_order.order_id"},
        },
        "output": {"findings": str(findings)},
        "metrics": {"tools": ["issue_refund", "lookup_order"]},
    }


def resident_bytes(pid: int) -> int:
    """``VmRSS`` of process ``pid`` (``/proc/<pid>/status``), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


class ServerProcess:
    """A server child process pinned to ``SERVER_CPU``; ``stop`` sends SIGTERM."""

    def __init__(
        self, command: list[str], workdir: Path, name: str, wrapper: Sequence[str] = ()
    ) -> None:
        """``wrapper`` runs the command (``valgrind ...``), pinned with it."""
        self.name = name
        self._log = (workdir / f"{name}.log").open("wb")
        pinned = [sys.executable, "-m", "bench.pin", str(SERVER_CPU), "--", *wrapper, *command]
        self.process = subprocess.Popen(pinned, stdout=self._log, stderr=subprocess.STDOUT)

    @classmethod
    def toolwatch(
        cls, config: dict[str, Any], workdir: Path, name: str, wrapper: Sequence[str] = ()
    ) -> ServerProcess:
        path = workdir / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        command = [sys.executable, "-m", "toolwatch.cli", "serve", "--config", str(path)]
        return cls(command, workdir, name, wrapper)

    @classmethod
    def ceiling(
        cls,
        port: int,
        workdir: Path,
        name: str,
        mode: Sequence[str] = (),
        wrapper: Sequence[str] = (),
    ) -> ServerProcess:
        """``bench.ceiling`` on ``port``; ``mode`` ``("reference",)`` or ``("transport",)``."""
        command = [sys.executable, "-m", "bench.ceiling", str(port), *mode]
        return cls(command, workdir, name, wrapper)

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_for_port(self, port: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"{self.name} did not listen on {port} within {timeout} s")

    def rss(self) -> int:
        return resident_bytes(self.pid)

    def cpu_seconds(self) -> float:
        """User + system CPU time the server has used so far (``/proc/<pid>/stat``)."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self, timeout: float = 30.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.process.returncode


def scrape(metrics_port: int) -> dict[str, float]:
    """Every sample of ``/metrics`` as ``{"name{labels}": value}`` (text format 0.0.4)."""
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {name + (labels or ""): float(value) for name, labels, value in _SAMPLE.findall(text)}
