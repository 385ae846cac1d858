"""Where a span's time goes: each pipeline stage timed in-process, in µs of CPU per span.

The same requests the load generator sends go through each stage on its own: ``scan`` (the
compiled scanner on the wire bytes), ``scan_reference`` (the same scan on protobuf's parsed
messages, parse included: what the compiled scanner replaced), ``records`` (convention
recognition and SpanRecords, from a scan), ``decode`` (``decode_protobuf``: scan + records),
assembly (buffer add and poll), timeline, evaluation, metrics (the Prometheus
implementation), findings log. ``engine`` runs the whole ``Engine`` (offer + tick) with the
server's Prometheus metrics and sinks, which is the work of the server minus gRPC. CPU time
(``time.process_time``), best of ``repeat`` runs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from prometheus_client import CollectorRegistry

from bench.server import bench_config
from bench.traces import RequestTemplate, trace_id
from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.assembly.completed import CompletedTrace
from toolwatch.assembly.timeline import build_tool_traces
from toolwatch.config import Config
from toolwatch.engine import DiscardToolTraces, Engine, EngineParts
from toolwatch.engine_setup import build_references
from toolwatch.evaluation.pipeline import EvaluationPipeline, PipelineResult
from toolwatch.evaluation.settings import EvaluationSettings
from toolwatch.ingest.decode import _Decoder
from toolwatch.ingest.decode_requests import decode_protobuf, scanner
from toolwatch.ingest.decode_types import DecodedBatch, DecodeOptions
from toolwatch.ingest.scan import Scan, Scanner
from toolwatch.metrics import NoopMetrics
from toolwatch.model import ManualClock, Traffic
from toolwatch.model_traces import ToolTrace
from toolwatch.names import NameNormalizer
from toolwatch.sinks.findings import FanOutSink, JsonLinesFindingSink, Redaction
from toolwatch.sinks.prometheus import PrometheusMetrics

__all__ = [
    "StageCosts",
    "evaluation_parts",
    "measure_stages",
    "request_bodies",
    "server_engine",
    "stage_config",
    "stage_runs",
]


@dataclass(frozen=True, slots=True)
class StageCosts:
    """µs of CPU per span for each stage, the spans measured, and the runs they formed."""

    per_span_us: dict[str, float]
    spans: int
    runs: int
    findings: int


def _best(run: Callable[[], Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        began = time.process_time()
        run()
        best = min(best, time.process_time() - began)
    return best


def request_bodies(templates: Sequence[RequestTemplate], copies: int) -> list[bytes]:
    """``copies`` renderings of each template, every trace id unique."""
    return [
        template.render([trace_id(0, n, run) for run in range(template.runs)])
        for n, template in enumerate(list(templates) * copies)
    ]


class _Pipeline:
    """One pass over the requests, stage by stage, keeping each stage's output."""

    def __init__(self, config: Config, bodies: list[bytes]) -> None:
        self.config = config
        self.bodies = bodies
        history = self.history = config.assembly.missing_spans_from_history
        self.options = DecodeOptions(read_histories=history)
        self.evaluation, self.normalize = evaluation_parts(config)
        self.scanner = scanner(self.options)
        self.reference = Scanner.for_plan(self.scanner.plan, "reference")
        self.scans = [self.scanner.scan_bytes(b) for b in bodies]
        self.batches = [decode_protobuf(b, self.options) for b in bodies]
        self.completed = self._assemble()
        self.traces = [
            t
            for c in self.completed
            for t in build_tool_traces(c, self.normalize, from_history=history)
        ]
        self.results = [self.evaluation.evaluate(t) for t in self.traces]
        self.spans = sum(len(b.spans) for b in self.batches)

    def _assemble(self) -> list[CompletedTrace]:
        clock = ManualClock()
        buffer = TraceBuffer(self.config.assembly.limits(), clock, NoopMetrics())
        for batch in self.batches:
            buffer.add(batch.spans)
        clock.advance(self.config.assembly.completion_wait_seconds + 1)
        return buffer.poll()

    def metrics(self) -> None:
        metrics = _prometheus(self.config)
        for batch in self.batches:
            metrics.request_handled("grpc", "ok", 0.001)
            metrics.spans_received(batch.received, "grpc")
        for completed in self.completed:
            metrics.spans_built(len(completed.spans))
        for trace, result in zip(self.traces, self.results, strict=True):
            _count(metrics, trace, result)

    def findings(self) -> None:
        with open(os.devnull, "w", encoding="utf-8") as devnull:
            sink = JsonLinesFindingSink(devnull, Redaction())
            for trace, result in zip(self.traces, self.results, strict=True):
                if result.findings:
                    sink.publish(trace, result.findings)

    def engine(self) -> None:
        clock = ManualClock()
        with open(os.devnull, "w", encoding="utf-8") as devnull:
            engine = server_engine(self.config, self.evaluation, self.normalize, clock, devnull)
            for body in self.bodies:
                engine.offer(decode_protobuf(body, self.options), "grpc")
            clock.advance(self.config.assembly.completion_wait_seconds + 1)
            engine.tick()


def evaluation_parts(config: Config) -> tuple[EvaluationPipeline, NameNormalizer]:
    """The evaluation pipeline and name normalizer the server builds from ``config``."""
    _golden, normalize = build_references(config)
    settings = EvaluationSettings(policy=config.policy, evaluators=config.evaluators)
    return EvaluationPipeline(settings), normalize


def server_engine(
    config: Config,
    evaluation: EvaluationPipeline,
    normalize: NameNormalizer,
    clock: ManualClock,
    findings: TextIO,
) -> Engine:
    """An ``Engine`` as the server builds it from ``config`` (its Prometheus metrics, the
    findings log written to ``findings``), on ``clock``."""
    parts = EngineParts(
        limits=config.assembly.limits(),
        evaluation=evaluation,
        normalize=normalize,
        findings=FanOutSink([JsonLinesFindingSink(findings, Redaction())]),
        tooltraces=DiscardToolTraces(),
    )
    return Engine(parts, clock, _prometheus(config))


def _prometheus(config: Config) -> PrometheusMetrics:
    return PrometheusMetrics(
        CollectorRegistry(),
        agents=config.metrics.agents,
        tools=config.metrics.tools,
        label_value_cap=config.metrics.label_value_cap,
        agent_tool_pair_cap=config.metrics.agent_tool_pair_cap,
    )


def _count(metrics: PrometheusMetrics, trace: ToolTrace, result: PipelineResult) -> None:
    # The benchmark runs have no golden case or shadow twin, and are live.
    metrics.tool_trace(trace, "none", Traffic.LIVE)
    for evaluated in result.results:
        score = evaluated.scores.get("score")
        metrics.evaluated(evaluated.evaluator, score, result.durations[evaluated.evaluator])
    for finding in result.findings:
        metrics.finding(finding, 0.2, Traffic.LIVE)


def _records(pipeline: _Pipeline) -> list[DecodedBatch]:
    # A decoder consumes its scan: each round decodes copies (a list copy per request).
    options = pipeline.options
    return [
        _Decoder(options).scan(Scan(scan.resources, list(scan.spans))) for scan in pipeline.scans
    ]


def _scan_all(scanner: Scanner, bodies: Sequence[bytes]) -> list[Scan]:
    return [scanner.scan_bytes(body) for body in bodies]


def stage_config(completion_wait: float) -> Config:
    """The benchmark server's configuration, for the stages run in process (no listener
    is bound; findings go to the null device)."""
    ports = dict.fromkeys(("grpc", "http", "metrics", "stream"), 0)
    mapping = bench_config(ports, Path(os.devnull), completion_wait=completion_wait)
    return Config.model_validate(mapping)


def stage_runs(
    config: Config, templates: Sequence[RequestTemplate], copies: int = 4
) -> tuple[dict[str, Callable[[], Any]], _Pipeline]:
    """Each stage as a callable over ``copies`` renderings of ``templates`` (unique trace
    ids), in report order, and the pipeline holding their inputs."""
    p = _Pipeline(config, request_bodies(templates, copies))
    stages: dict[str, Callable[[], Any]] = {
        "scan": lambda: _scan_all(p.scanner, p.bodies),
        "scan_reference": lambda: _scan_all(p.reference, p.bodies),
        "records": lambda: _records(p),
        "decode": lambda: [decode_protobuf(b, p.options) for b in p.bodies],
        "assemble": p._assemble,
        "timeline": lambda: [
            build_tool_traces(c, p.normalize, from_history=p.history) for c in p.completed
        ],
        "evaluate": lambda: [p.evaluation.evaluate(t) for t in p.traces],
        "metrics": p.metrics,
        "findings": p.findings,
        "engine": p.engine,
    }
    return stages, p


def measure_stages(
    config: Config, templates: Sequence[RequestTemplate], copies: int = 4, repeat: int = 5
) -> StageCosts:
    """Time each stage over ``copies`` renderings of ``templates`` (unique trace ids)."""
    stages, p = stage_runs(config, templates, copies)
    costs = {name: _best(run, repeat) / p.spans * 1e6 for name, run in stages.items()}
    findings = sum(len(r.findings) for r in p.results)
    return StageCosts(costs, p.spans, len(p.traces), findings)
