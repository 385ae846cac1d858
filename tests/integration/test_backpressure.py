"""Under ``overflow: backpressure`` (the default) a request that does not fit is refused, and
no run in flight is evaluated early to make room for it.

One span bigger than ``max_buffered_bytes`` made its request one that "can never fit":
``TraceBuffer.has_room`` let it through, and ``add``, having dropped that span
(``span_too_large``), evicted the oldest traces for the request's ordinary spans, as
``evict_oldest`` would. The run evicted was judged on the calls so far (policy only), and
the rest of it, arriving later, was dropped ``late``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.engine import Admission, DiscardToolTraces, Engine, EngineParts
from toolwatch.evaluation.pipeline import EvaluationPipeline
from toolwatch.evaluation.settings import EvaluationSettings
from toolwatch.ingest.decode_types import DecodedBatch
from toolwatch.model import ManualClock, SpanRecord, SpanRole
from toolwatch.sinks.findings import InMemoryFindingSink
from toolwatch.sinks.prometheus import PrometheusMetrics

MAX_BYTES = 10_000


def _tool_span(trace: int, size: int) -> SpanRecord:
    """A tool span of ``size`` bytes (as decoded) whose agent is still running."""
    return SpanRecord(
        trace_id=trace.to_bytes(16, "big"),
        span_id=(2).to_bytes(8, "big"),
        parent_span_id=(1).to_bytes(8, "big"),
        name="execute_tool lookup_order",
        kind=1,
        start_ns=1,
        end_ns=2,
        status_code=0,
        service="refund-agent",
        role=SpanRole.TOOL,
        tool_name="lookup_order",
        size_bytes=size,
    )


def _batch(*spans: SpanRecord) -> DecodedBatch:
    return DecodedBatch(spans, len(spans), {}, None)


def _evictions(registry: CollectorRegistry) -> float:
    return sum(
        sample.value
        for family in registry.collect()
        for sample in family.samples
        if sample.name == "toolwatch_trace_evictions_total"
    )


def test_a_span_bigger_than_the_buffer_does_not_let_its_request_evict_runs_in_flight() -> None:
    registry, clock = CollectorRegistry(), ManualClock()
    settings = EvaluationSettings.model_validate({})
    engine = Engine(
        EngineParts(
            limits=AssemblyLimits(max_buffered_bytes=MAX_BYTES),  # overflow: backpressure
            evaluation=EvaluationPipeline(settings),
            normalize=settings.policy.normalizer(),
            findings=InMemoryFindingSink(),
            tooltraces=DiscardToolTraces(),
        ),
        clock,
        PrometheusMetrics(registry),
    )
    assert engine.offer(_batch(_tool_span(1, 9_000)), "grpc") is Admission.ACCEPTED
    ordinary = _tool_span(2, 2_000)
    assert engine.offer(_batch(ordinary), "grpc") is Admission.OVERLOADED

    # The same ordinary span, next to one that can never fit:
    receipt = engine.admit(_batch(_tool_span(3, MAX_BYTES + 1), ordinary), "grpc")

    assert receipt.admission is Admission.OVERLOADED  # as without it: the client retries
    assert _evictions(registry) == 0, f"evicted a run in flight ({dict(receipt.refused)})"
    assert (engine.buffer.buffered_traces, engine.buffer.buffered_spans) == (1, 1)
