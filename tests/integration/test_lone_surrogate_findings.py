"""The same tool name reaches the findings log and the stream as U+FFFD: the finding is
written and sent. It was lost from both (the log's strict UTF-8 file and the stream's
protobuf message refused the lone surrogate), counted only as an output failure, while
Prometheus counted it."""

from __future__ import annotations

import json
from pathlib import Path

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from prometheus_client import CollectorRegistry

from tests.integration import agents
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.engine import DiscardToolTraces, Engine, EngineParts
from toolwatch.evaluation.pipeline import EvaluationPipeline
from toolwatch.evaluation.settings import EvaluationSettings
from toolwatch.ingest.decode_requests import decode_request
from toolwatch.ingest.decode_types import DecodeOptions
from toolwatch.model import ManualClock
from toolwatch.sinks.findings import FanOutSink, InMemoryFindingSink, JsonLinesFindingSink
from toolwatch.sinks.prometheus import PrometheusMetrics
from toolwatch.sinks.stream.broker import FindingsBroker

POLICY = {
    "dangerous_tools": ["issue_refund"],
    "verification_tools": ["lookup_order"],
    "allowed_tools": {"refund-bot": ["lookup_order", "issue_refund"]},
}


def _run(tmp_path: Path) -> tuple[Path, FindingsBroker, InMemoryFindingSink, FanOutSink]:
    settings = EvaluationSettings.model_validate({"policy": POLICY})
    clock = ManualClock()
    log_path = tmp_path / "findings.jsonl"
    # as app._open_text opens --findings
    stream = open(log_path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
    metrics = PrometheusMetrics(CollectorRegistry())
    broker = FindingsBroker(metrics)
    seen = InMemoryFindingSink()
    sink = FanOutSink([JsonLinesFindingSink(stream), broker, seen])
    parts = EngineParts(
        limits=AssemblyLimits(),
        evaluation=EvaluationPipeline(settings),
        normalize=settings.policy.normalizer(),
        findings=sink,
        tooltraces=DiscardToolTraces(),
    )
    engine = Engine(parts, clock, metrics)
    # A hosted tool call seen only in the model's output messages (a JSON string attribute,
    # json.dumps writes the surrogate as the ASCII escape \ud800).
    odd = agents.Call("web\ud800search", {"q": "x"}, "call_9", executed=False)
    run = agents.AgentRun("refund-bot", (agents.Turn((odd,)), agents.Turn(text="ok")))
    request = encode_spans(agents.spans_of(agents.record(run, "genai")))
    request.SerializeToString()  # the request itself is valid protobuf (UTF-8 strings)
    engine.offer(decode_request(request, DecodeOptions()), "grpc")
    clock.advance(3)
    engine.tick()
    stream.close()
    return log_path, broker, seen, sink


def test_a_finding_on_a_tool_name_with_a_lone_surrogate_reaches_the_findings_log(
    tmp_path: Path,
) -> None:
    log_path, _, seen, sink = _run(tmp_path)
    assert len(seen.findings) == 1  # the evaluators did raise it
    lines = log_path.read_text(encoding="utf-8").splitlines()
    assert sink.failures["0:JsonLinesFindingSink"] == 0
    assert len(lines) == 1
    assert json.loads(lines[0])["category"] == "TOOL_SELECTION_DRIFT"


def test_a_finding_on_a_tool_name_with_a_lone_surrogate_reaches_the_stream(
    tmp_path: Path,
) -> None:
    _, broker, seen, sink = _run(tmp_path)
    assert len(seen.findings) == 1
    assert sink.failures["1:FindingsBroker"] == 0
    assert [h.message.category for h in broker.held] == ["TOOL_SELECTION_DRIFT"]
