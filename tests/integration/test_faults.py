"""Faults: SIGTERM drains, SIGKILL under load then restart, an evaluator that raises.

The signal tests run ``toolwatch serve`` as a real process with a configuration file and read
its bound addresses from the start-up line (``listening grpc=... http=... metrics=...
stream=...``) on stderr. A real process runs on the real clock, so these tests wait for real
events (a process exit, a listener coming up) with deadlines; the configuration keeps the
clock out of the outcome (a 1 ms completion wait, traces that never time out).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
import yaml
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcExporter,
)
from opentelemetry.sdk.trace.export import SpanExportResult
from prometheus_client import CollectorRegistry

from tests.integration import agents
from tests.integration.conftest import until
from tests.integration.faults_support import (
    GRACE_SECONDS,
    POLICY,
    ServeProcess,
    export,
    file_size_limit,
    send_long_run,
    serve_one_output,
    trace_id,
    without_root,
    write_config,
)
from tests.kept_support import KeptToolTraces
from toolwatch._proto.toolwatch.v1 import findings_pb2, findings_pb2_grpc
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.config import LISTENERS
from toolwatch.engine import Admission, Engine, EngineParts
from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.pipeline import EvaluationPipeline
from toolwatch.evaluation.settings import EvaluationSettings
from toolwatch.ingest.decode_requests import decode_request
from toolwatch.ingest.decode_types import DecodeOptions
from toolwatch.model import ManualClock
from toolwatch.model_evaluation import EvalResult
from toolwatch.model_traces import ToolTrace
from toolwatch.references.settings import ShadowSettings
from toolwatch.references.shadow import ShadowJoiner
from toolwatch.sinks.findings import InMemoryFindingSink
from toolwatch.sinks.prometheus import PrometheusMetrics


def free_port() -> int:
    """A port nobody listens on now (bound to 0, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Subscriber(threading.Thread):
    """Reads the findings stream until the server ends it."""

    def __init__(self, address: str) -> None:
        super().__init__(daemon=True)
        self.channel = grpc.insecure_channel(address)
        self.received: list[tuple[str, str]] = []  # (trace id, category)
        self.ended_with: grpc.StatusCode | None = None

    def run(self) -> None:
        stub = findings_pb2_grpc.FindingsServiceStub(self.channel)  # type: ignore[no-untyped-call]
        try:
            for finding in stub.Subscribe(findings_pb2.SubscribeRequest(), timeout=60):
                self.received.append((finding.trace_id, finding.category))
            self.ended_with = grpc.StatusCode.OK
        except grpc.RpcError as error:
            self.ended_with = error.code()
        finally:
            self.channel.close()


def test_sigterm_evaluates_every_buffered_trace_flushes_sinks_and_exits_in_the_grace(
    tmp_path: Path, serve_process: Callable[[Path], ServeProcess]
) -> None:
    config = write_config(
        tmp_path / "toolwatch.yaml",
        {},
        assembly={
            # None is due at the drain: it must judge the runs whose root arrived complete.
            "completion_wait_seconds": 300,
            "max_trace_age_seconds": 600,
            "tick_seconds": 10,  # the drain, not the ticker, must emit what is buffered
        },
        shutdown_grace_seconds=GRACE_SECONDS,
        shutdown_metrics_linger_seconds=60,  # ends at the scrape after the drain
    )
    server = serve_process(config)
    complete = [
        agents.record(agents.refund_run(), "genai"),
        agents.record(agents.unverified_refund_run(), "openinference"),
    ]
    unfinished = [
        without_root(agents.record(agents.refund_run(), "openllmetry")),
        without_root(agents.record(agents.unverified_refund_run(), "genai")),
    ]
    subscriber = Subscriber(server.addresses["stream"])
    subscriber.start()
    assert until(lambda: server.sample("toolwatch_stream_subscribers") == 1)
    assert export(server.addresses["grpc"], agents.spans_of(*complete, *unfinished)) is (
        SpanExportResult.SUCCESS
    )
    assert server.sample("toolwatch_buffered_traces") == 4
    assert server.regressions() == {}  # nothing was due before the drain
    last_scrape: list[dict[str, dict[str, float]]] = []
    counted = {"toolwatch_regressions_total": "category", "toolwatch_tool_traces_total": "outcome"}

    code, seconds = server.terminate(
        timeout=GRACE_SECONDS + 10, after_drain=lambda: last_scrape.append(server.summed(counted))
    )

    assert code == 0
    # An open findings stream does not hold the exit up, and the last scrape ends the linger.
    assert seconds < GRACE_SECONDS
    # Prometheus scrapes the drain's findings before the process goes: they can page.
    # Those whose root had come are complete, though not quiet for completion_wait.
    assert last_scrape == [
        {
            "category": {"MISSING_VERIFICATION_STEP": 2.0},
            "outcome": {"complete": 2.0, "shutdown": 2.0},
        }
    ]
    outcomes = {t["trace_id"]: (t["complete"], t["incomplete_reason"]) for t in server.tooltraces}
    assert outcomes == {
        **{trace_id(run): (True, None) for run in complete},
        **{trace_id(run): (False, "shutdown") for run in unfinished},
    }
    unverified = {trace_id(complete[1]), trace_id(unfinished[1])}
    flagged = {(f["trace_id"], f["category"]) for f in server.findings}
    assert flagged == {(t, "MISSING_VERIFICATION_STEP") for t in unverified}
    subscriber.join(timeout=10)
    assert subscriber.ended_with is grpc.StatusCode.OK  # ended after the drained findings
    assert set(subscriber.received) == flagged
    assert any("drained 4 buffered trace(s) at shutdown" in line for line in server.log)
    said = [line.split(": ", 1)[1].rstrip() for line in server.log if "last scrape" in line]
    assert said[1:] == ["last scrape served; exiting"]  # after "waiting up to ..."


def scraped_with_a_run_to_drain(
    path: Path, serve_process: Callable[[Path], ServeProcess], linger: float
) -> ServeProcess:
    """A server that holds one unfinished run (the drain will complete it) and was scraped."""
    config = write_config(
        path, {}, shutdown_grace_seconds=GRACE_SECONDS, shutdown_metrics_linger_seconds=linger
    )
    server = serve_process(config)
    unfinished = without_root(agents.record(agents.refund_run(), "genai"))
    assert export(server.addresses["grpc"], unfinished) is SpanExportResult.SUCCESS
    assert server.sample("toolwatch_buffered_traces") == 1
    return server


def test_sigterm_waits_for_a_last_scrape_at_most_the_linger(
    tmp_path: Path, serve_process: Callable[[Path], ServeProcess]
) -> None:
    """Scraped before, never after the drain: the process exits once the linger is over."""
    server = scraped_with_a_run_to_drain(tmp_path / "linger.yaml", serve_process, linger=0.5)

    code, _ = server.terminate(timeout=GRACE_SECONDS + 10)

    assert code == 0
    waited = [line for line in server.log if "scrape of /metrics" in line]
    assert len(waited) == 2, server.log
    assert "waiting up to 0.5s for a last scrape of /metrics" in waited[0]
    assert "no scrape of /metrics within 0.5s of the drain" in waited[1]


def test_sigterm_after_a_scrape_that_read_everything_exits_at_once(
    tmp_path: Path, serve_process: Callable[[Path], ServeProcess]
) -> None:
    """Scraped after the last trace completed, nothing buffered: no count is left unread."""
    config = write_config(
        tmp_path / "read.yaml",
        {},
        assembly={"completion_wait_seconds": 0.01, "tick_seconds": 0.01},
        shutdown_grace_seconds=GRACE_SECONDS,
        shutdown_metrics_linger_seconds=60,
    )
    server = serve_process(config)
    spans = agents.record(agents.refund_run(), "genai")
    assert export(server.addresses["grpc"], spans) is SpanExportResult.SUCCESS
    labels = {"agent": "refund-bot", "outcome": "complete", "reference": "none", "traffic": "live"}
    assert until(lambda: server.sample("toolwatch_tool_traces_total", labels) == 1)

    code, seconds = server.terminate(timeout=GRACE_SECONDS + 10)

    assert (code, seconds < GRACE_SECONDS) == (0, True)
    assert not any("scrape of /metrics" in line for line in server.log)


def test_ctrl_c_in_a_terminal_does_not_wait_for_a_last_scrape(tmp_path: Path) -> None:
    """The quick start: ``make serve`` in a terminal, one ``curl`` of ``/metrics``, Ctrl-C.
    That curl counted as a scraper, and the exit waited the whole linger for its next
    scrape. Stopped with Ctrl-C (SIGINT) from a terminal, ``serve`` drains and exits at
    once, and says why; a SIGTERM there (``docker stop`` of a ``docker run -it``, a pod with
    ``tty: true``) still waits (``test_sigterm_waits_for_a_last_scrape_at_most_the_linger``
    has no terminal; the review's case below has one)."""
    path = tmp_path / "terminal.yaml"
    config = write_config(
        path, {}, shutdown_grace_seconds=GRACE_SECONDS, shutdown_metrics_linger_seconds=60
    )
    terminal, side = os.openpty()
    server = ServeProcess(config, stdin=side)
    try:
        unfinished = without_root(agents.record(agents.refund_run(), "genai"))
        assert export(server.addresses["grpc"], unfinished) is SpanExportResult.SUCCESS
        assert server.sample("toolwatch_buffered_traces") == 1  # a scrape
        code, seconds = server.terminate(timeout=GRACE_SECONDS + 10, sig=signal.SIGINT)
    finally:
        if server.proc.poll() is None:
            server.kill()
        os.close(terminal)
        os.close(side)

    assert (code, seconds < GRACE_SECONDS) == (0, True)  # not the 60 s linger
    said = [line for line in server.log if "scrape of /metrics" in line]
    assert len(said) == 1, server.log
    assert "not waiting for a last scrape of /metrics: stopped with Ctrl-C in a terminal" in said[0]


def test_a_second_sigterm_skips_the_wait_for_a_last_scrape(
    tmp_path: Path, serve_process: Callable[[Path], ServeProcess]
) -> None:
    server = scraped_with_a_run_to_drain(tmp_path / "hurry.yaml", serve_process, linger=60)

    def signal_again() -> None:
        assert until(lambda: any("for a last scrape" in line for line in server.log))
        server.proc.send_signal(signal.SIGTERM)

    code, seconds = server.terminate(timeout=GRACE_SECONDS + 10, after_drain=signal_again)

    assert code == 0
    assert seconds < GRACE_SECONDS  # not the 60 s linger
    said = [line.split(": ", 1)[1].rstrip() for line in server.log if "last scrape" in line]
    assert said == [
        "waiting up to 60s for a last scrape of /metrics (signal again to skip)",
        "second signal: not waiting for a last scrape",
    ]


def test_sigterm_with_nothing_buffered_exits_at_once(
    tmp_path: Path, serve_process: Callable[[Path], ServeProcess]
) -> None:
    """Sent as soon as the start-up line is out: the handler must already be in place."""
    config = write_config(tmp_path / "idle.yaml", {}, shutdown_grace_seconds=GRACE_SECONDS)
    server = serve_process(config)

    code, seconds = server.terminate(timeout=GRACE_SECONDS + 10)

    assert (code, server.tooltraces, server.findings) == (0, [], [])
    assert seconds < GRACE_SECONDS


def test_sigterm_closes_otlp_http_at_once_and_waits_for_a_body_arriving_only_the_grace(
    tmp_path: Path, serve_process: Callable[[Path], ServeProcess]
) -> None:
    """shutdown_grace_seconds is the budget terminationGracePeriodSeconds is sized from
    (deploy/kubernetes, docs/deployment.md "Shutdown"): an OTLP/HTTP body still arriving held
    the exit until ingest.read_timeout_seconds, and the HTTP listener took requests (answered
    200) while gRPC's calls had their grace."""
    config = write_config(
        tmp_path / "stalled.yaml",
        {},
        shutdown_grace_seconds=GRACE_SECONDS,
        ingest={"read_timeout_seconds": 60},  # far past the grace and the exit's margin
    )
    server = serve_process(config)
    host, port = server.addresses["http"].rsplit(":", 1)
    during_grace: list[int | str] = []
    with socket.create_connection((host, int(port)), timeout=60) as stalled:
        # An exporter whose body is still on its way (a slow link, a stalled client).
        stalled.sendall(
            b"POST /v1/traces HTTP/1.1\r\nHost: toolwatch\r\n"
            b"Content-Type: application/x-protobuf\r\nContent-Length: 1000\r\n\r\n" + b"\n" * 10
        )
        assert until(lambda: server.sample("toolwatch_requests_in_flight") == 1)

        code, seconds = server.terminate(
            timeout=60, stopping=lambda: during_grace.append(post_a_run(server.addresses["http"]))
        )
        answer = stalled.recv(65536)  # sent before the exit

    assert code == 0
    # Waited for until the grace, no longer; the rest of the exit (nothing to drain) takes
    # under GRACE_SECONDS, as the idle exits above show.
    assert GRACE_SECONDS <= seconds < 2 * GRACE_SECONDS
    head = answer.partition(b"\r\n\r\n")[0].split(b"\r\n")
    assert (head[0], b"Retry-After: 1" in head) == (b"HTTP/1.1 503 Service Unavailable", True)
    assert during_grace == ["refused"]  # the listener closed at SIGTERM


def post_a_run(address: str) -> int | str:
    """The status of an OTLP/HTTP export of a refund run, or ``"refused"`` (no listener)."""
    body = encode_spans(agents.record(agents.refund_run(), "genai")).SerializeToString()
    headers = {"Content-Type": "application/x-protobuf"}
    request = urllib.request.Request(f"http://{address}/v1/traces", body, headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        with error:
            return error.code
    except urllib.error.URLError as error:
        if isinstance(error.reason, ConnectionRefusedError):
            return "refused"
        raise


# -- SIGKILL under load, then restart -------------------------------------------------------


@dataclass
class Export:
    trace_id: str
    spans: int
    started: float
    ended: float
    result: SpanExportResult


@dataclass
class LoadClient:
    """Exports one refund run after another with one SDK exporter until stopped."""

    address: str
    exports: list[Export] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    progress: threading.Condition = field(default_factory=threading.Condition)

    def run(self) -> None:
        # The SDK retries UNAVAILABLE with exponential backoff (1, 2, 4, 8 s) while the
        # server is down; the deadline leaves room for all of it.
        exporter = GrpcExporter(endpoint=self.address, insecure=True, timeout=45)
        try:
            while not self.stop.is_set():
                spans = agents.record(agents.refund_run(), "genai")
                started = time.monotonic()
                result = exporter.export(spans)
                done = Export(trace_id(spans), len(spans), started, time.monotonic(), result)
                with self.progress:
                    self.exports.append(done)
                    self.progress.notify_all()
        finally:
            exporter.shutdown()

    def wait_for(self, condition: Callable[[list[Export]], bool], timeout: float) -> bool:
        with self.progress:
            return self.progress.wait_for(lambda: condition(self.exports), timeout)


def test_sigkill_under_load_then_restart_delivers_retries_and_restarts_counters(
    tmp_path: Path, serve_process: Callable[[Path], ServeProcess]
) -> None:
    ports = {name: free_port() for name in LISTENERS}
    sections = {"assembly": {"completion_wait_seconds": 0.05, "tick_seconds": 0.05}}
    first = serve_process(write_config(tmp_path / "first.yaml", ports, **sections))
    load = LoadClient(first.addresses["grpc"])
    sender = threading.Thread(target=load.run, daemon=True)
    sender.start()
    assert load.wait_for(lambda done: len(done) >= 5, timeout=30)

    first.kill()  # mid-load: the export in flight, and the next ones, find no server
    killed_at = time.monotonic()
    second = serve_process(write_config(tmp_path / "second.yaml", ports, **sections))
    up_at = time.monotonic()
    assert second.addresses == first.addresses
    assert load.wait_for(lambda done: sum(e.started > up_at for e in done) >= 3, timeout=60)
    load.stop.set()
    sender.join(timeout=60)
    received = second.sample("toolwatch_spans_received_total", {"transport": "grpc"})
    assert second.terminate(timeout=30)[0] == 0  # drains into the second dump file

    assert [e.result for e in load.exports] == [SpanExportResult.SUCCESS] * len(load.exports)
    by_id = {e.trace_id: e for e in load.exports}
    delivered = {t["trace_id"] for t in second.tooltraces}
    # The client was exporting all along, so an export met the dead server; the SDK backs
    # off at least 0.8 s before a retry, which is how a retried export is told from the rest.
    retried = [e for e in load.exports if e.ended > killed_at and e.ended - e.started >= 0.8]
    assert len(retried) >= 1
    assert all(e.trace_id in delivered for e in retried)  # the retries reached the new one
    assert {e.trace_id for e in load.exports if e.started > killed_at} <= delivered
    # The new process counts from zero: exactly the spans it was sent, none of the first's.
    assert received == sum(by_id[t].spans for t in delivered)
    assert received < sum(e.spans for e in load.exports)


# -- an evaluator that raises -------------------------------------------------------------


class RaisesOnOneAgent:
    """A custom evaluator with a bug that only one agent's runs reach."""

    def __init__(self, agent: str) -> None:
        self.agent = agent
        self.seen: list[str | None] = []

    def __call__(self, trace: ToolTrace, reference: Reference) -> EvalResult | None:
        self.seen.append(trace.agent)
        if trace.agent == self.agent:
            raise KeyError("order_id")
        return EvalResult(evaluator="flaky", scores={"score": 1.0}, findings=(), explanation="ok")


def test_an_evaluator_that_raises_on_one_run_is_isolated_and_counted() -> None:
    registry = CollectorRegistry()
    settings = EvaluationSettings.model_validate({"policy": POLICY})
    flaky = RaisesOnOneAgent("cursed-bot")
    findings, dumped, clock = InMemoryFindingSink(), KeptToolTraces(), ManualClock()
    parts = EngineParts(
        limits=AssemblyLimits(),
        evaluation=EvaluationPipeline(settings, extra=[("flaky", flaky)]),
        normalize=settings.policy.normalizer(),
        findings=findings,
        tooltraces=dumped,
    )
    engine = Engine(parts, clock, PrometheusMetrics(registry))
    cursed = dataclasses.replace(agents.unverified_refund_run(), agent="cursed-bot")
    runs = [agents.record(run, "genai") for run in (cursed, agents.unverified_refund_run())]
    batch = decode_request(encode_spans(agents.spans_of(*runs)), DecodeOptions())

    assert engine.offer(batch, "grpc") is Admission.ACCEPTED
    clock.advance(2.001)
    assert engine.tick() == 2

    assert sorted(flaky.seen, key=str) == ["cursed-bot", "refund-bot"]
    assert sorted((f.agent, f.evaluator, str(f.category)) for f in findings.findings) == [
        ("cursed-bot", "safety", "MISSING_VERIFICATION_STEP"),  # the others still judged it
        ("refund-bot", "safety", "MISSING_VERIFICATION_STEP"),
    ]
    assert sorted(str(t.agent) for t in dumped.traces) == ["cursed-bot", "refund-bot"]

    def sample(name: str, evaluator: str) -> float | None:
        return registry.get_sample_value(name, {"evaluator": evaluator})

    assert sample("toolwatch_evaluator_failures_total", "flaky") == 1.0
    assert sample("toolwatch_evaluator_failures_total", "safety") == 0.0  # known, from 0
    assert sample("toolwatch_evaluator_score_count", "flaky") == 1.0  # the other run's result
    assert sample("toolwatch_evaluation_duration_seconds_count", "loops") == 2.0


class RaisesAgainstASource:
    """A custom evaluator with a bug only the shadow pair's pass reaches."""

    def __call__(self, trace: ToolTrace, reference: Reference) -> EvalResult | None:
        if reference.source is not None:
            raise KeyError("order_id")
        return EvalResult(evaluator="drift", scores={"score": 1.0}, findings=(), explanation="ok")


def test_an_evaluator_that_raises_on_a_shadow_pair_is_counted() -> None:
    registry, clock = CollectorRegistry(), ManualClock()
    metrics = PrometheusMetrics(registry)
    settings = EvaluationSettings.model_validate({"policy": POLICY})
    shadow = ShadowSettings(enabled=True)
    parts = EngineParts(
        limits=AssemblyLimits(),
        evaluation=EvaluationPipeline(settings, extra=[("drift", RaisesAgainstASource())]),
        normalize=settings.policy.normalizer(),
        findings=InMemoryFindingSink(),
        tooltraces=KeptToolTraces(),
        shadow=ShadowJoiner(shadow, clock, metrics),
    )
    engine = Engine(parts, clock, metrics)
    halves = [
        dataclasses.replace(
            agents.refund_run(),
            attributes={shadow.pair_key_attribute: "p1", shadow.role_attribute: role},
        )
        for role in ("source", "target")
    ]
    spans = agents.spans_of(*(agents.record(run, "genai") for run in halves))
    options = DecodeOptions(reference_keys=shadow.reference_keys())
    assert engine.offer(decode_request(encode_spans(spans), options), "grpc") is (
        Admission.ACCEPTED
    )
    clock.advance(2.001)
    assert engine.tick() == 2

    failures = registry.get_sample_value(
        "toolwatch_evaluator_failures_total", {"evaluator": "drift"}
    )
    assert failures == 1.0  # the pair's pass; each half alone was scored
    scored = registry.get_sample_value("toolwatch_evaluator_score_count", {"evaluator": "drift"})
    assert scored == 2.0


# -- a sink that fails ----------------------------------------------------------------------


def test_a_dump_file_on_a_full_disk_does_not_stop_completing_later_traces(
    tmp_path: Path, serve_process: Callable[[Path], ServeProcess]
) -> None:
    config = write_config(
        tmp_path / "full.yaml",
        {},
        assembly={"completion_wait_seconds": 0.01, "tick_seconds": 0.01},
        shutdown_grace_seconds=GRACE_SECONDS,
    )
    document = yaml.safe_load(config.read_text())
    document["output"]["dump_tooltraces"] = "/dev/full"  # every write fails: ENOSPC
    config.write_text(yaml.safe_dump(document))
    server = serve_process(config)

    def runs_completed() -> float:
        labels = {
            "agent": "refund-bot",
            "outcome": "complete",
            "reference": "none",
            "traffic": "live",
        }
        return server.sample("toolwatch_tool_traces_total", labels)

    for sent in (1, 2):
        spans = agents.record(agents.refund_run(), "genai")
        assert export(server.addresses["grpc"], spans) is SpanExportResult.SUCCESS
        assert until(lambda sent=sent: runs_completed() == sent)  # type: ignore[misc]

    # Each run is judged all the same; the dump's losses are counted and logged.
    assert server.sample("toolwatch_output_failures_total", {"output": "tooltraces"}) == 2
    assert any("could not write the ToolTrace dump" in line for line in server.log)
    # What failed was lost whole, not kept to fail again at the final flush.
    code, seconds = server.terminate(timeout=GRACE_SECONDS + 10)
    assert code == 0
    assert seconds < GRACE_SECONDS
    assert not any("could not flush" in line for line in server.log)


OUTPUTS = pytest.mark.parametrize(
    ("output", "label"), [("findings", "findings_log"), ("dump_tooltraces", "tooltraces")]
)


@OUTPUTS
def test_an_output_that_fills_up_mid_line_keeps_whole_lines_and_counts_exactly_what_it_lost(
    tmp_path: Path, serve_process: Callable[[Path], ServeProcess], output: str, label: str
) -> None:
    """A full disk takes part of a line and fails the rest: the file must not keep the torn
    part (the next line would be joined to it, and a log shipper or ``replay`` would lose
    both), nor write later what failed (counted lost)."""
    server, path = serve_one_output(tmp_path / "fills.yaml", serve_process, output)
    sent: list[str] = []

    send_long_run(server, sent)
    one_line = path.stat().st_size  # a ToolTrace line is longer than a file's 8 KiB buffer
    file_size_limit(server.proc.pid, one_line + one_line // 2)  # room for half a line
    send_long_run(server, sent)  # half of it is written, then the disk is full
    send_long_run(server, sent)  # none of it fits
    file_size_limit(server.proc.pid, resource.RLIM_INFINITY)  # space freed
    send_long_run(server, sent)

    lines = path.read_text().splitlines()
    written = [json.loads(line)["trace_id"] for line in lines]  # each line whole
    assert written == [sent[0], sent[3]]
    assert server.sample("toolwatch_output_failures_total", {"output": label}) == 2
    code, _ = server.terminate(timeout=GRACE_SECONDS + 10)
    assert code == 0
    assert path.read_text().splitlines() == lines  # nothing that failed comes out at the end


@OUTPUTS
def test_each_outage_of_an_output_is_logged_when_it_starts_and_when_it_ends(
    tmp_path: Path, serve_process: Callable[[Path], ServeProcess], output: str, label: str
) -> None:
    """Failures are logged rate-limited (the 1st, 2nd, 4th, ... of an outage), counted from
    each outage's start: a second full disk a week later is logged however many writes the
    first one failed, and the log says when writing works again."""
    server, path = serve_one_output(tmp_path / "outages.yaml", serve_process, output)
    sent: list[str] = []
    send_long_run(server, sent)

    failures = ("toolwatch_output_failures_total", {"output": label})

    def outage(runs: int) -> list[str]:
        """The lines logged while ``runs`` runs fail to be written and one then is. A run is
        written by the output's own thread after it is judged: each wait is for the write
        itself (its failure counted, then the line saying it worked again), or the disk
        could get its room back before the last failing run was written."""
        logged = len(server.log)
        failed = server.sample(*failures)
        file_size_limit(server.proc.pid, path.stat().st_size)  # full
        for _ in range(runs):
            send_long_run(server, sent)
        assert until(lambda: server.sample(*failures) == failed + runs)
        file_size_limit(server.proc.pid, resource.RLIM_INFINITY)
        send_long_run(server, sent)
        assert until(lambda: any(" is written again" in line for line in server.log[logged:]))
        told = [line for line in server.log[logged:] if " toolwatch" in line]
        return [line.split(": ", 1)[1].rstrip() for line in told]

    first, second = outage(5), outage(2)

    name = {"findings": "the findings log", "dump_tooltraces": "the ToolTrace dump"}[output]
    assert server.sample(*failures) == 7
    assert first == [
        f"could not write {name} ({path}): File too large (1 failure in a row)",
        f"could not write {name} ({path}): File too large (2 failures in a row)",
        f"could not write {name} ({path}): File too large (4 failures in a row)",
        f"{name} ({path}) is written again, after 5 failures in a row",
    ]
    assert second == [
        f"could not write {name} ({path}): File too large (1 failure in a row)",
        f"could not write {name} ({path}): File too large (2 failures in a row)",
        f"{name} ({path}) is written again, after 2 failures in a row",
    ]


def test_findings_a_stuck_subscriber_never_got_at_shutdown_are_counted_lost_before_the_last_scrape(
    tmp_path: Path, serve_process: Callable[[Path], ServeProcess]
) -> None:
    """A stopped ``tail`` holds its HTTP/2 window; what is left in its queue at SIGTERM is
    lost with the process (a restarted server holds none of it for a resume): counted in
    ``toolwatch_stream_dropped_findings_total`` where the last scrape reads it, and logged
    as lost, not as held for a resume."""
    config = write_config(
        tmp_path / "stuck.yaml",
        {},
        assembly={"completion_wait_seconds": 0.01, "tick_seconds": 0.01},
        shutdown_grace_seconds=GRACE_SECONDS,
        shutdown_metrics_linger_seconds=60,  # ends at the scrape after the drain
    )
    server = serve_process(config)
    tail = subprocess.Popen(
        [sys.executable, "-m", "toolwatch.cli", "tail", "--target", server.addresses["stream"]],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert until(lambda: server.sample("toolwatch_stream_subscribers") == 1)
        tail.send_signal(signal.SIGSTOP)
        # More than tail's 64 KiB window (about 240 findings) holds: the rest stays queued.
        runs = [agents.record(agents.unverified_refund_run(), "genai") for _ in range(400)]
        for first in range(0, len(runs), 50):
            batch = agents.spans_of(*runs[first : first + 50])
            assert export(server.addresses["grpc"], batch) is SpanExportResult.SUCCESS
        assert until(lambda: len(server.findings) == len(runs), timeout=60)
        assert server.sample("toolwatch_stream_dropped_findings_total") == 0
        last_scrape: list[float] = []

        code, _ = server.terminate(
            timeout=GRACE_SECONDS + 10,
            after_drain=lambda: last_scrape.append(
                server.sample("toolwatch_stream_dropped_findings_total")
            ),
        )
    finally:
        tail.kill()
        tail.wait(10)

    assert code == 0
    told = [line for line in server.log if "findings stream subscriber left" in line]
    assert len(told) == 1, told
    lost = int(re.search(r"left with (\d+) findings undelivered", told[0]).group(1))  # type: ignore[union-attr]
    assert 0 < lost < len(runs)
    assert "shutting down" in told[0]
    assert last_scrape == [lost]
