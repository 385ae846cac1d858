"""A real Prometheus server (Debian's ``prometheus`` package) on a free loopback port.

``running_prometheus`` writes a ``prometheus.yml`` that scrapes one target every second under
``job="toolwatch"`` and evaluates the given rule files every second, starts
``prometheus --enable-feature=exemplar-storage`` (so the OpenMetrics exemplars of a scrape
are kept; https://prometheus.io/docs/prometheus/latest/feature_flags/#exemplars-storage),
waits for ``/-/ready``, and always kills the process and removes its data directory.

``PrometheusServer`` reads results back through the HTTP API
(https://prometheus.io/docs/prometheus/latest/querying/api/). Prometheus is an external
system with its own scrape and evaluation schedule, so ``wait_until`` polls it against a
deadline; nothing here waits for toolwatch's own pipeline.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

__all__ = [
    "JOB",
    "PrometheusServer",
    "requires_prometheus",
    "requires_promtool",
    "running_prometheus",
]

T = TypeVar("T")

#: The scrape job name the shipped rules assume (deploy/prometheus/toolwatch-rules.yaml).
JOB = "toolwatch"
_STARTUP_SECONDS = 30.0
_POLL_SECONDS = 0.2
_PORT_ATTEMPTS = 3

_INSTALL = "CI installs them: apt-get install prometheus"
#: For tests that run a Prometheus server (the ``prometheus`` marker selects them).
requires_prometheus = pytest.mark.skipif(
    shutil.which("prometheus") is None or shutil.which("promtool") is None,
    reason=f"prometheus/promtool are not on PATH ({_INSTALL})",
)
#: For tests that only run ``promtool``.
requires_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None, reason=f"promtool is not on PATH ({_INSTALL})"
)


def promtool_test_rules(test_file: Path, timeout: float = 300.0) -> str:
    """What ``promtool test rules`` reports of ``test_file`` when it fails; "" when it
    passes."""
    result = subprocess.run(
        ["promtool", "test", "rules", str(test_file)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return "" if result.returncode == 0 else result.stdout + result.stderr


def promtool_expr_case(
    path: Path,
    *,
    rules: Path | None,
    series: list[dict[str, str]],
    expr: str,
    eval_time: str,
    samples: list[dict[str, Any]],
    interval: str = "1m",
    evaluation_interval: str = "1m",
) -> str:
    """``promtool_test_rules`` of one case written to ``path``: ``rules`` loaded (none when
    ``None``), ``series`` scraped every ``interval``, ``expr`` expected to give ``samples``
    (promtool's ``exp_samples``) at ``eval_time``."""
    if rules is None:
        rules = path.with_name("empty.rules.yaml")
        rules.write_text("groups: []\n", encoding="utf-8")
    case = {"expr": expr, "eval_time": eval_time, "exp_samples": samples}
    test = {
        "rule_files": [str(rules)],
        "evaluation_interval": evaluation_interval,
        "tests": [{"interval": interval, "input_series": series, "promql_expr_test": [case]}],
    }
    path.write_text(yaml.safe_dump(test, sort_keys=False), encoding="utf-8")
    return promtool_test_rules(path)


class PrometheusServer:
    """A started Prometheus at ``url``; ``log`` is the file its output goes to."""

    def __init__(self, url: str, process: subprocess.Popen[bytes], log: Path) -> None:
        self.url = url
        self.process = process
        self.log = log

    def api(self, path: str, **params: str) -> Any:
        """The ``data`` of a successful ``GET /api/v1/<path>``; raises ``AssertionError``
        with Prometheus' error otherwise."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as reply:
                body = json.load(reply)
        except urllib.error.HTTPError as e:
            body = json.load(e)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, promql: str) -> dict[str, float]:
        """An instant query's result: each series' labels (``k=v`` joined by commas, sorted)
        mapped to its value."""
        data = self.api("query", query=promql)
        assert data["resultType"] == "vector", data
        return {_series_key(s["metric"]): float(s["value"][1]) for s in data["result"]}

    def alerts(self) -> list[dict[str, Any]]:
        """The active (pending or firing) alerts."""
        alerts: list[dict[str, Any]] = self.api("alerts")["alerts"]
        return alerts

    def exemplars(self, promql: str, start: float, end: float) -> list[dict[str, Any]]:
        """The exemplars of the series ``promql`` selects, stored between ``start`` and
        ``end`` (Unix seconds): one entry per series, with ``seriesLabels`` and
        ``exemplars``."""
        found: list[dict[str, Any]] = self.api(
            "query_exemplars", query=promql, start=f"{start:.3f}", end=f"{end:.3f}"
        )
        return found

    def wait_until(self, what: str, probe: Callable[[], T | None], timeout: float = 30.0) -> T:
        """Polls ``probe`` until it returns something other than ``None`` and returns that;
        fails the test with ``what`` and the last probe's error after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            try:
                result = probe()
            except (AssertionError, OSError) as e:
                last_error = e
            else:
                if result is not None:
                    return result
            time.sleep(_POLL_SECONDS)
        pytest.fail(f"Prometheus: {what} not seen within {timeout:.0f}s (last error: {last_error})")


def _series_key(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


@contextmanager
def running_prometheus(
    workdir: Path, target: str, rule_files: Sequence[Path]
) -> Iterator[PrometheusServer]:
    """A Prometheus scraping ``target`` (``host:port``) under ``job="toolwatch"`` with
    ``rule_files`` loaded; stopped and its ``workdir`` removed on exit, whatever happens."""
    workdir.mkdir(parents=True)
    config = workdir / "prometheus.yml"
    config.write_text(yaml.safe_dump(_config(target, rule_files)), encoding="utf-8")
    server: PrometheusServer | None = None
    try:
        server = _start(workdir, config)
        yield server
    finally:
        if server is not None:
            _stop(server.process)
        shutil.rmtree(workdir, ignore_errors=True)


def _config(target: str, rule_files: Sequence[Path]) -> dict[str, Any]:
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [
            {"job_name": JOB, "metrics_path": "/metrics", "static_configs": [{"targets": [target]}]}
        ],
    }


def _start(workdir: Path, config: Path) -> PrometheusServer:
    """Starts Prometheus on a free port; a port taken between probing and binding is retried
    with another one."""
    for attempt in range(_PORT_ATTEMPTS):
        log = workdir / f"prometheus-{attempt}.log"
        port = _free_port()
        process = _spawn(workdir, config, port, log)
        url = f"http://127.0.0.1:{port}"
        if _wait_ready(url, process):
            return PrometheusServer(url, process, log)
        _stop(process)
        output = log.read_text(errors="replace")
        if "address already in use" not in output:
            pytest.fail(f"prometheus did not become ready:\n{output[-4000:]}")
    pytest.fail(f"prometheus found no free port in {_PORT_ATTEMPTS} attempts")


def _spawn(workdir: Path, config: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    command = [
        "prometheus",
        f"--config.file={config}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--enable-feature=exemplar-storage",
    ]
    with log.open("wb") as output:
        return subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, cwd=workdir)


def _wait_ready(url: str, process: subprocess.Popen[bytes]) -> bool:
    """Whether ``/-/ready`` answered 200 before the process exited or the deadline passed."""
    deadline = time.monotonic() + _STARTUP_SECONDS
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as reply:
                if reply.status == 200:
                    return True
        except OSError:
            pass  # not listening yet, or still replaying its (empty) WAL: 503
        time.sleep(_POLL_SECONDS)
    return False


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it has not exited within 10 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
