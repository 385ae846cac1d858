"""A real toolwatch server on loopback port 0, run on its own event-loop thread.

Time is a ``ManualClock``: a test sends spans with a real OTLP exporter (the export call
returns once the server has answered), then moves the clock past ``completion_wait`` and
runs one engine tick on the server's loop. Nothing sleeps to wait for the pipeline.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from prometheus_client import CollectorRegistry

from tests.integration.pki_support import Pki, make_pki
from toolwatch.app import App
from toolwatch.config import Config, load_config
from toolwatch.model import ManualClock
from toolwatch.sinks.findings import InMemoryFindingSink

T = TypeVar("T")

#: The per-run counters (less `_total`), whose `traffic` label `RunningServer.sample` reads
#: as `live` unless told.
_PER_RUN = frozenset(
    {
        "toolwatch_regressions",
        "toolwatch_runs_with_findings",
        "toolwatch_tool_traces",
        "toolwatch_tool_calls",
    }
)

FREE_PORTS = {
    "listen.grpc": "127.0.0.1:0",
    "listen.http": "127.0.0.1:0",
    "listen.metrics": "127.0.0.1:0",
    "listen.stream": "127.0.0.1:0",
}


class _NotTheBuild(logging.Filter):
    """Drops the start-up lines on how the hot path was built: warnings when the suite runs
    the source (``TOOLWATCH_PURE_PYTHON=1``) or a build without the compiled OTLP scanner,
    which tests of what toolwatch warns about would otherwise read as theirs."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not message.startswith(("hot path: ", "OTLP decoding runs on the reference"))


@pytest.fixture(autouse=True)
def _build_line_left_out() -> Iterator[None]:
    logger = logging.getLogger("toolwatch")
    left_out = _NotTheBuild()
    logger.addFilter(left_out)
    yield
    logger.removeFilter(left_out)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """The certificates and token file of ``pki_support.Pki``, made once a module."""
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(autouse=True)
def _no_ca_bundle_override(monkeypatch: pytest.MonkeyPatch) -> None:
    # requests lets these variables override Session.verify, where the OTLP/HTTP exporter
    # puts certificate_file (psf/requests#3829): a test's CA would be ignored.
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)


def stopping_at_once(config: Config) -> Config:
    """``config``, with no wait for a last scrape at shutdown unless it sets one: a test that
    scraped /metrics has no Prometheus left to wait for."""
    if "shutdown_metrics_linger_seconds" in config.model_fields_set:
        return config
    return config.model_copy(update={"shutdown_metrics_linger_seconds": 0.0})


#: The servers' wall clock at start: 2026-01-01T00:00:00Z.
WALL_START_NS = 1_767_225_600 * 10**9


class RunningServer:
    """An ``App`` started on a background loop; ``call`` runs code on that loop.
    ``defaults``: ``config`` is the built-in defaults, as ``serve`` given no file tells it."""

    def __init__(self, config: Config, tmp_path: Path, *, defaults: bool = False) -> None:
        config = stopping_at_once(config)
        self.clock = ManualClock()
        self.wall = ManualClock(WALL_START_NS)  # Unix ns: findings' and metrics' timestamps
        self.load_config: Callable[[], Config] = lambda: config  # the file again (a reload)
        self.findings = InMemoryFindingSink()
        self.registry = CollectorRegistry()
        self.tooltrace_path = tmp_path / "tooltraces.jsonl"
        self.app = App(
            config,
            clock=self.clock,
            wall_clock=self.wall,
            registry=self.registry,
            extra_sinks=(self.findings,),
            defaults=defaults,
        )
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self._await(self.app.start())

    def _await(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=30)

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the server's loop (the engine is single-threaded) and return."""

        async def run() -> T:
            return fn()

        result: T = self._await(run())
        return result

    def settle(
        self, seconds: float | None = None, *, rejected: bool = False, ran_on: bool = False
    ) -> int:
        """Advance the clock past completion_wait (and lost_parent_wait too if ``rejected``:
        a trace with a span rejected at ingest waits it; or ``ran_on``: so does one with a
        span of its root's service that ended after the root, a run left running in the
        background) and complete what is due: one step on the server's loop, so its own
        ticker cannot complete the traces in between (and make this tick find nothing)."""
        assembly = self.app.config.assembly
        wait = assembly.completion_wait_seconds
        if rejected or ran_on:
            wait += assembly.lost_parent_wait_seconds

        def advance_and_tick() -> int:
            self.clock.advance(wait + 0.001 if seconds is None else seconds)
            return self.app.engine.tick()

        completed = self.call(advance_and_tick)
        assert self.app.outputs_written(), "the output files did not take what was published"
        return completed

    def reload(self) -> bool:
        """What SIGHUP does: the configuration file read again, on the server's loop."""
        reloaded = self.call(lambda: self.app.reload(self.load_config))
        assert self.app.outputs_written(), "the output files did not take what was published"
        return reloaded

    def address(self, name: str) -> str:
        return self.app.addresses[name]

    def sample(
        self, name: str, labels: dict[str, str] | None = None, *, missing_ok: bool = False
    ) -> float:
        """The sample's value. A series that does not exist fails the test (a renamed metric
        or label would otherwise read as 0), unless ``missing_ok``: then it reads 0. A
        per-run series' ``traffic`` is ``live`` unless ``labels`` names it."""
        labels = dict(labels or {})
        if name.removesuffix("_total") in _PER_RUN:
            labels.setdefault("traffic", "live")
        value = self.registry.get_sample_value(name, labels)
        if value is None:
            assert missing_ok, f"no series {name}{labels or {}}"
            return 0.0
        return value

    def tooltraces(self) -> list[dict[str, Any]]:
        assert self.app.outputs_written(), "the ToolTrace dump did not take what was written"
        if not self.tooltrace_path.exists():
            return []
        lines = self.tooltrace_path.read_text().splitlines()
        return [json.loads(line) for line in lines]

    def stop(self) -> None:
        """Shut the app down (idempotent: a test may stop it before the fixture does)."""
        if self.loop.is_closed():
            return
        self._await(self.app.stop(grace=1.0))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


#: The ``start_server`` fixture's type: ``start_server(config_file=None, **overrides)``.
StartServer = Callable[..., RunningServer]


ROOT = Path(__file__).resolve().parents[2]


def run_fuzzer(
    script: str, seconds: int, seed: int, **env: str
) -> subprocess.CompletedProcess[str]:
    """``tools/fuzz/<script>`` (``make fuzz``'s halves) for ``seconds`` with this interpreter;
    its output is returned, its exit status is for the test to judge."""
    settings = {"FUZZ_SECONDS": str(seconds), "FUZZ_SEED": str(seed), "PYTHON": sys.executable}
    return subprocess.run(
        [str(ROOT / "tools" / "fuzz" / script)],
        cwd=ROOT,
        env={**os.environ, **settings, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def errors_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The ERROR records the test logged, but asyncio's "Task was destroyed but it is
    pending": a task an earlier test's event loop left, which the garbage collector may find
    while this test runs."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.ERROR
        and not (r.name == "asyncio" and r.getMessage().startswith("Task was destroyed"))
    ]


def until(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Polls ``condition`` until true or ``timeout`` seconds passed: for what only the network
    or a real process decides (a call reaching the server, a process exiting), never for the
    pipeline, which ticks when told."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        threading.Event().wait(0.01)
    return True


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[StartServer]:
    """Factory: ``start_server(config_file=None, **overrides)``; stops what it started."""
    started: list[RunningServer] = []

    def start(config_file: Path | None = None, **overrides: Any) -> RunningServer:
        settings = dict(FREE_PORTS)
        settings["output.dump_tooltraces"] = str(tmp_path / "tooltraces.jsonl")
        settings["output.findings"] = str(tmp_path / "findings.jsonl")
        settings.update({k.replace("__", "."): v for k, v in overrides.items()})
        config = load_config(config_file, settings)
        server = RunningServer(config, tmp_path, defaults=config_file is None)
        server.load_config = lambda: stopping_at_once(load_config(config_file, settings))
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def serve_process() -> Iterator[Callable[..., Any]]:
    """Factory: ``serve_process(config, stdout=None, env=None)``, a ``toolwatch serve`` child
    process (``faults_support.ServeProcess``; ``stdout``: a file its standard output is appended
    to; ``env``: variables set over the test's environment); kills what is still running at
    the end."""
    from tests.integration.faults_support import ServeProcess  # noqa: PLC0415  # it imports this module

    started: list[ServeProcess] = []

    def start(
        config: Path, stdout: Path | None = None, env: dict[str, str] | None = None
    ) -> ServeProcess:
        process = ServeProcess(config, stdout, env=env)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.proc.poll() is None:
            process.kill()
