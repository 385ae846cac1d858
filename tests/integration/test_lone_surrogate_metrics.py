"""A tool name holding an escaped lone surrogate (in a model's output-messages JSON: valid
JSON, a valid protobuf request) is read as U+FFFD (``jsontext.loads``), and a label value
that cannot be written as UTF-8 reports as ``_other``: ``/metrics`` keeps answering. It did
not: the name became a ``tool`` label value, prometheus_client could not encode the page, and
every scrape failed until a restart, the regression counters the alerts read included."""

from __future__ import annotations

import asyncio

from aiohttp.test_utils import TestClient, TestServer
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
from toolwatch.sinks.exposition import metrics_app
from toolwatch.sinks.findings import InMemoryFindingSink
from toolwatch.sinks.prometheus import PrometheusMetrics


def test_metrics_are_still_served_after_a_tool_name_with_a_lone_surrogate() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    settings = EvaluationSettings.model_validate({"policy": {}})
    clock = ManualClock()
    parts = EngineParts(
        limits=AssemblyLimits(),
        evaluation=EvaluationPipeline(settings),
        normalize=settings.policy.normalizer(),
        findings=InMemoryFindingSink(),
        tooltraces=DiscardToolTraces(),
    )
    engine = Engine(parts, clock, metrics)
    odd = agents.Call("web\ud800search", {"q": "x"}, "call_9", executed=False)
    run = agents.AgentRun("search-bot", (agents.Turn((odd,)), agents.Turn(text="ok")))
    request = encode_spans(agents.spans_of(agents.record(run, "genai")))
    engine.offer(decode_request(request, DecodeOptions()), "grpc")
    clock.advance(3)
    assert engine.tick() == 1

    async def scrape(accept: str) -> int:
        async with TestClient(TestServer(metrics_app(registry, lambda: True))) as client:
            response = await client.get("/metrics", headers={"Accept": accept})
            return response.status

    assert asyncio.run(scrape("text/plain")) == 200
    assert asyncio.run(scrape("application/openmetrics-text; version=1.0.0")) == 200
