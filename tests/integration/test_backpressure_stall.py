"""A full buffer under ``overflow: backpressure`` takes a retrying exporter's batch once it has
refused for ``assembly.max_refusal_seconds``, by judging the oldest run in flight early.

The OpenTelemetry SDK's OTLP/gRPC exporter is the client: it retries UNAVAILABLE after the
server's RetryInfo delay. The buffer holds two runs in flight (their agent spans, which end
last, not sent yet), so a third run's batch does not fit, and nothing the server does on its
own makes room before ``max_trace_age_seconds``.

Was: the batch was refused until the runs in flight reached that age (300 s); the exporter
gave it up after its attempts, and it was lost to the server uncounted.
Now: after the limit, a retry is taken, the oldest run is judged incomplete (``evicted``),
and the rest of it, arriving later, is dropped ``late``: every span sent is accounted for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcExporter,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.integration.conftest import RunningServer, until
from tests.integration.faults_support import trace_id, without_root
from tests.integration.otlp_support import later, post, refund_spans

LIMIT_SECONDS = 5.0
RETRY_AFTER_SECONDS = 1.0  # the window to move the clock in: the exporter's five retries


def _root(run: Sequence[ReadableSpan]) -> list[ReadableSpan]:
    """The agent span of ``run``, its root: it ends last, and ends the run."""
    return [span for span in run if span.parent is None]


def _full(start_server: Callable[..., RunningServer], **overrides: object) -> RunningServer:
    """A server whose buffer holds two runs in flight, and no more traces."""
    settings: dict[str, object] = {
        "assembly__max_traces": 2,
        "ingest__retry_after_seconds": RETRY_AFTER_SECONDS,
    }
    return start_server(**(settings | overrides))


def _refused(server: RunningServer) -> float:
    return server.sample("toolwatch_spans_refused_total", {"transport": "grpc"}, missing_ok=True)


def test_a_stalled_buffer_takes_the_retried_batch_and_judges_the_oldest_run_early(
    start_server: Callable[..., RunningServer],
) -> None:
    server = _full(start_server, assembly__max_refusal_seconds=LIMIT_SECONDS)
    first, second, third = refund_spans(), refund_spans(), refund_spans()
    exporter = GrpcExporter(endpoint=server.address("grpc"), insecure=True, timeout=30)
    try:
        assert exporter.export(without_root(first)) is SpanExportResult.SUCCESS
        assert exporter.export(without_root(second)) is SpanExportResult.SUCCESS
        with ThreadPoolExecutor(1) as pool:
            sent = pool.submit(exporter.export, third)
            assert until(lambda: _refused(server) > 0)
            server.call(lambda: later(server, LIMIT_SECONDS))
            assert sent.result(timeout=30) is SpanExportResult.SUCCESS
        # The evicted run's agent span comes at last: its run was judged.
        assert exporter.export(_root(first)) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()

    assert server.sample("toolwatch_trace_evictions_total", {"reason": "max_traces"}) == 1
    server.settle()
    judged = {t["trace_id"]: t["incomplete_reason"] for t in server.tooltraces()}
    assert judged == {trace_id(first): "evicted", trace_id(third): None}
    assert server.sample("toolwatch_spans_dropped_total", {"reason": "late"}) == 1
    sent_spans = len(first) + len(without_root(second)) + len(third)
    assert server.sample("toolwatch_spans_received_total", {"transport": "grpc"}) == sent_spans
    assert _refused(server) % len(third) == 0 and _refused(server) >= len(third)
    buffered = len(without_root(second))
    assert server.sample("toolwatch_buffered_spans") == buffered
    built = server.sample("toolwatch_spans_built_total")
    assert built + 1 + buffered == sent_spans  # built, dropped late, or still buffered


def test_with_no_limit_a_full_buffer_refuses_until_its_runs_age_out(
    start_server: Callable[..., RunningServer],
) -> None:
    server = _full(
        start_server,
        assembly__max_refusal_seconds=None,
        ingest__retry_after_seconds=0.01,
    )
    first, second, third = refund_spans(), refund_spans(), refund_spans()
    exporter = GrpcExporter(endpoint=server.address("grpc"), insecure=True, timeout=30)
    try:
        assert exporter.export(without_root(first)) is SpanExportResult.SUCCESS
        assert exporter.export(without_root(second)) is SpanExportResult.SUCCESS
        assert exporter.export(third) is SpanExportResult.FAILURE
        server.call(lambda: later(server, 299))
        assert exporter.export(third) is SpanExportResult.FAILURE
    finally:
        exporter.shutdown()

    assert (
        server.sample("toolwatch_trace_evictions_total", {"reason": "max_traces"}, missing_ok=True)
        == 0
    )
    assert server.sample("toolwatch_buffered_traces") == 2


def test_over_http_the_batch_is_refused_503_then_taken_after_the_limit(
    start_server: Callable[..., RunningServer],
) -> None:
    """The OTLP/HTTP receiver shares the decision: 503 + ``Retry-After`` until the limit,
    then 200 for the same body, the oldest run in flight evicted."""
    server = _full(start_server, assembly__max_refusal_seconds=LIMIT_SECONDS)
    first, second = refund_spans(), refund_spans()
    for run in (first, second):
        assert post(server, encode_spans(without_root(run)).SerializeToString()).status == 200
    third = encode_spans(refund_spans()).SerializeToString()

    refused = post(server, third)
    assert (refused.status, refused.headers["Retry-After"]) == (503, "1")
    server.call(lambda: later(server, LIMIT_SECONDS - 0.001))
    assert post(server, third).status == 503
    server.call(lambda: later(server, 0.001))
    assert post(server, third).status == 200

    assert server.sample("toolwatch_trace_evictions_total", {"reason": "max_traces"}) == 1
    assert server.sample("toolwatch_spans_refused_total", {"transport": "http"}) == 12
