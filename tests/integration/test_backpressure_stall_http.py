"""Was (found by review, fixed): the batch that ends the oldest run, taken once the
buffer is stalled, judges that run ``evicted``.

The OpenTelemetry SDK's OTLP/HTTP exporter is the client (it retries 503). The buffer holds
two runs in flight (their agent spans, which end last, not sent yet): max_traces 2. The SDK's
next batch carries what the commit says such batches carry: the last span of the first run
(its agent span) with the spans of a new run. It is refused, retried, and taken after
``max_refusal_seconds``; the new run needs a trace, and the oldest run is evicted: the first
run, although its agent span came in that very batch. Judged incomplete (policy only) where
its end had arrived. See test_stall_evicts_the_run_its_request_ends.py for the unit form.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpExporter,
)
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.integration.conftest import RunningServer, until
from tests.integration.faults_support import trace_id, without_root
from tests.integration.otlp_support import later, refund_spans

LIMIT_SECONDS = 5.0


def _refused(server: RunningServer) -> float:
    return server.sample("toolwatch_spans_refused_total", {"transport": "http"}, missing_ok=True)


def test_a_stalled_buffer_does_not_evict_the_run_the_taken_batch_ends(
    start_server: Callable[..., RunningServer],
) -> None:
    server = start_server(
        assembly__max_traces=2,
        assembly__max_refusal_seconds=LIMIT_SECONDS,
        ingest__retry_after_seconds=1.0,
    )
    first, second, third = refund_spans(), refund_spans(), refund_spans()
    endpoint = f"http://{server.address('http')}/v1/traces"
    exporter = HttpExporter(endpoint=endpoint, timeout=30)
    try:
        assert exporter.export(without_root(first)) is SpanExportResult.SUCCESS
        assert exporter.export(without_root(second)) is SpanExportResult.SUCCESS
        ending_first = [*(s for s in first if s.parent is None), *third]  # ends first; starts third
        with ThreadPoolExecutor(1) as pool:
            sent = pool.submit(exporter.export, ending_first)
            assert until(lambda: _refused(server) > 0)
            server.call(lambda: later(server, LIMIT_SECONDS))
            assert sent.result(timeout=30) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()  # type: ignore[no-untyped-call]

    server.settle()
    judged = {t["trace_id"]: t["incomplete_reason"] for t in server.tooltraces()}
    assert judged.get(trace_id(first), "absent") is None  # Was: "evicted"
