"""Span conservation end to end (DESIGN §4, ``toolwatch.metrics``)::

    received = built + rejected + dropped (all reasons) + still buffered

A mix of valid traces, retries, invalid spans, late spans and spans over
``max_spans_per_trace`` goes through both transports, with settles in between on a
``ManualClock``. At every checkpoint the law holds on the registry's counters and every
per-reason count equals what the test sent.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpExporter,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.integration import agents
from tests.integration.conftest import RunningServer
from tests.integration.ingest_support import post_protobuf

SPAN_LIMIT = 6


@dataclass
class Ledger:
    """What the test sent, and where each span must have ended up."""

    received: Counter[str] = field(default_factory=Counter)  # by transport
    rejected: Counter[str] = field(default_factory=Counter)  # by reason
    dropped: Counter[str] = field(default_factory=Counter)  # by reason
    built: int = 0
    buffered: int = 0


def by_label(server: RunningServer, sample: str, label: str) -> dict[str, float]:
    """Every non-zero sample named ``sample``, keyed by the value of ``label``."""
    values = {
        s.labels.get(label, ""): s.value
        for family in server.registry.collect()
        for s in family.samples
        if s.name == sample
    }
    return {key: value for key, value in values.items() if value}


def checkpoint(server: RunningServer, ledger: Ledger) -> None:
    received = by_label(server, "toolwatch_spans_received_total", "transport")
    rejected = by_label(server, "toolwatch_spans_rejected_total", "reason")
    dropped = by_label(server, "toolwatch_spans_dropped_total", "reason")
    built = server.sample("toolwatch_spans_built_total")
    buffered = server.sample("toolwatch_buffered_spans")

    assert sum(received.values()) == (
        built + sum(rejected.values()) + sum(dropped.values()) + buffered
    )
    assert received == dict(ledger.received)
    assert rejected == dict(ledger.rejected)
    assert dropped == dict(ledger.dropped)
    assert (built, buffered) == (ledger.built, ledger.buffered)


def send_sdk(server: RunningServer, transport: str, spans: Sequence[ReadableSpan]) -> None:
    """Through the SDK's own OTLP exporter for ``transport``."""
    if transport == "grpc":
        exporter: GrpcExporter | HttpExporter = GrpcExporter(
            endpoint=server.address("grpc"), insecure=True, timeout=10
        )
    else:
        exporter = HttpExporter(endpoint=f"http://{server.address('http')}/v1/traces", timeout=10)
    try:
        assert exporter.export(spans) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()


def with_invalid_spans(spans: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
    """``spans`` plus one span per id rule of trace.proto broken, as a raw request."""
    request = encode_spans(spans)
    scope = request.resource_spans[0].scope_spans[0]
    template = scope.spans[0]
    for attribute, value in (
        ("trace_id", b"\x07" * 12),
        ("span_id", bytes(8)),
        ("parent_span_id", b"\x05" * 3),
    ):
        bad = scope.spans.add()
        bad.CopyFrom(template)
        setattr(bad, attribute, value)
    return request


def trace_id(spans: Sequence[ReadableSpan]) -> str:
    return format(spans[0].context.trace_id, "032x")


def run(scenario: Callable[[], agents.AgentRun]) -> tuple[ReadableSpan, ...]:
    return agents.record(scenario(), "genai")


def test_every_span_is_accounted_for(start_server: Callable[..., RunningServer]) -> None:
    server = start_server(
        assembly__max_spans_per_trace=SPAN_LIMIT,
        assembly__max_trace_age_seconds=60,
        assembly__tick_seconds=10,  # only ``settle`` ticks the engine
    )
    ledger = Ledger()
    checkpoint(server, ledger)

    # A valid trace over gRPC, then the exporter's retry of it over HTTP.
    a = run(agents.refund_run)
    send_sdk(server, "grpc", a)
    ledger.received["grpc"] += 6
    ledger.buffered += 6
    checkpoint(server, ledger)
    send_sdk(server, "http", a)
    ledger.received["http"] += 6
    ledger.dropped["duplicate"] += 6
    checkpoint(server, ledger)

    # B without one child, mixed with three invalid spans (OTLP partial success).
    b = run(agents.refund_run)
    held_back, b_sent = b[0], b[1:]
    status, body = post_protobuf(server, with_invalid_spans(b_sent).SerializeToString())
    assert status == 200
    assert ExportTraceServiceResponse.FromString(body).partial_success.rejected_spans == 3
    ledger.received["http"] += 8
    ledger.rejected.update(invalid_trace_id=1, invalid_span_id=1, invalid_parent_span_id=1)
    ledger.buffered += 5
    checkpoint(server, ledger)

    # C has more spans than a trace may hold. Its root ends last, past the cap, and is held
    # all the same (it encloses the spans held); its last model call, past it, is dropped.
    c = run(agents.nested_run)
    assert len(c) == SPAN_LIMIT + 2 and c[-1].parent is None
    send_sdk(server, "grpc", c)
    ledger.received["grpc"] += len(c)
    ledger.dropped["trace_span_limit"] += 1
    ledger.buffered += SPAN_LIMIT + 1
    checkpoint(server, ledger)

    # A malformed body is refused whole: no span of it is received.
    assert post_protobuf(server, b"\x0a\xff\xff\xff\xff\x0f")[0] == 400
    checkpoint(server, ledger)

    # E is no agent run (an HTTP request and its query): held like any trace, then dropped.
    e = agents.http_request_spans()
    send_sdk(server, "grpc", e)
    ledger.received["grpc"] += 2
    ledger.buffered += 2
    checkpoint(server, ledger)

    # A, B and C are built; E is dropped.
    server.settle(rejected=True)  # B has a rejected span. Was: completion_wait alone
    ledger.built += 6 + 5 + SPAN_LIMIT + 1
    ledger.buffered -= 6 + 5 + SPAN_LIMIT + 1 + 2
    ledger.dropped["not_an_agent_run"] += 2
    checkpoint(server, ledger)

    # Late: B's held-back child, and another retry of all of A.
    send_sdk(server, "http", [held_back])
    send_sdk(server, "grpc", a)
    ledger.received.update(http=1, grpc=6)
    ledger.dropped["late"] += 7
    checkpoint(server, ledger)

    # D is half sent when the test ends: it is still buffered.
    d = run(agents.refund_run)
    send_sdk(server, "http", d[:3])
    ledger.received["http"] += 3
    ledger.buffered += 3
    server.settle(1.0)
    checkpoint(server, ledger)

    outcomes = {(t["trace_id"], t["complete"], t["incomplete_reason"]) for t in server.tooltraces()}
    assert outcomes == {
        (trace_id(a), True, None),
        (trace_id(b), False, "span_limit"),  # two rejected spans carried its trace id
        (trace_id(c), False, "span_limit"),
    }
