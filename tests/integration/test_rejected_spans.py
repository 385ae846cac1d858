"""A run missing a span that ingest rejected is judged incomplete, as one missing a span a
limit dropped is.

The decoder rejects a span with a readable trace id (``invalid_parent_span_id``,
``too_many_attributes``, ``malformed_attributes``, ``malformed_span``) and counts it, but its
trace was not told: the run was built without it and judged complete, so against its golden
case or shadow source too, where the missing call reads as drift (a false page), while the
shipped ``ToolwatchSpansRejected`` alert said those runs were not evaluated at all.
"""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from prometheus_client import CollectorRegistry

from tests.integration import agents
from toolwatch.assembly.buffer import AssemblyLimits
from toolwatch.engine import Admission, Engine, EngineParts
from toolwatch.evaluation.pipeline import EvaluationPipeline
from toolwatch.evaluation.settings import EvaluationSettings
from toolwatch.ingest.decode import DecodeOptions, decode_request
from toolwatch.model import ManualClock, ToolTrace
from toolwatch.sinks.findings import InMemoryFindingSink
from toolwatch.sinks.prometheus import PrometheusMetrics

POLICY = {"dangerous_tools": ["issue_refund"], "verification_tools": ["lookup_order"]}


class KeptToolTraces:
    def __init__(self) -> None:
        self.traces: list[ToolTrace] = []

    def write(self, trace: ToolTrace) -> None:
        self.traces.append(trace)

    def close(self) -> None:
        pass


def _outcomes(registry: CollectorRegistry) -> dict[str, float]:
    return {
        sample.labels["outcome"]: sample.value
        for family in registry.collect()
        for sample in family.samples
        if sample.name == "toolwatch_tool_traces_total" and sample.value
    }


def test_a_run_missing_a_span_rejected_at_ingest_is_judged_incomplete() -> None:
    spans = agents.record(agents.refund_run(), "genai")
    request = encode_spans(spans)
    scope = request.resource_spans[0].scope_spans[0]
    (lookup,) = [s for s in scope.spans if s.name == "execute_tool lookup_order"]
    lookup.parent_span_id = b"\x05" * 3  # OTLP: a parent id is empty or 8 bytes
    batch = decode_request(request, DecodeOptions())
    assert dict(batch.rejected) == {"invalid_parent_span_id": 1}

    registry, dumped, clock = CollectorRegistry(), KeptToolTraces(), ManualClock()
    settings = EvaluationSettings.model_validate({"policy": POLICY})
    engine = Engine(
        EngineParts(
            limits=AssemblyLimits(),
            evaluation=EvaluationPipeline(settings),
            normalize=settings.policy.normalizer(),
            findings=InMemoryFindingSink(),
            tooltraces=dumped,
        ),
        clock,
        PrometheusMetrics(registry),
    )
    assert engine.offer(batch, "grpc") is Admission.ACCEPTED
    clock.advance(2.001)
    engine.tick()

    (run,) = dumped.traces
    assert run.span_count == len(spans) - 1  # built without the rejected span
    assert (run.complete, run.incomplete_reason) == (False, "span_limit")
    assert _outcomes(registry) == {"span_limit": 1.0}
