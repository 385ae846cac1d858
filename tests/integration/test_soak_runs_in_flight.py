"""Soak under backpressure with the buffer full of runs in flight, the case refusing cannot
clear: each export carries the end of one run and the start of the next, as an agent's
batch processor sends them.

``CLIENTS`` threads each run the OpenTelemetry SDK's real OTLP/gRPC exporter (six attempts,
the server's RetryInfo delay apart) over ``RUNS_PER_CLIENT`` runs: export ``j`` is the
agent span of run ``j - 1`` (its end) and every other span of run ``j``. The buffer holds
``CLIENTS - 1`` traces, so once that many clients have a run in flight every export starts
a trace it has no room for, and the run it would end is one of those it holds. A driver moves
the ``ManualClock`` on and ticks the engine, on the server's loop, each time more spans were
refused: time passes only while the clients are refused.

With ``assembly.max_refusal_seconds`` (the default) every export is taken within the
exporter's attempts: the oldest runs are judged early (``evicted``), their ends dropped
``late``, and every span sent is accounted for. Without it (``null``) the buffer refuses
until its runs reach ``max_trace_age_seconds``, and the exporters give batches up: lost to
toolwatch, never counted there (the case the limit exists for).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcExporter,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.integration import agents
from tests.integration.conftest import RunningServer

CLIENTS = 4
RUNS_PER_CLIENT = 6
RETRY_AFTER_SECONDS = 0.05
STEP_SECONDS = 5.0  # the clock's move per refusal seen: one passes the 5 s limit
DEADLINE_SECONDS = 60.0  # bounds the whole soak; it normally takes a second or two

Outcome = tuple[Sequence[ReadableSpan], SpanExportResult]


def exports() -> list[list[ReadableSpan]]:
    """One client's exports: each run's start (all but its agent span) with the previous
    run's end (its agent span), then the last run's end alone."""
    runs = [agents.record(agents.refund_run(), "genai") for _ in range(RUNS_PER_CLIENT)]
    batches: list[list[ReadableSpan]] = []
    end: list[ReadableSpan] = []
    for run in runs:
        batches.append(end + [s for s in run if s.parent is not None])
        end = [s for s in run if s.parent is None]
    return [*batches, end]


def client(address: str, batches: Sequence[Sequence[ReadableSpan]]) -> list[Outcome]:
    exporter = GrpcExporter(endpoint=address, insecure=True, timeout=DEADLINE_SECONDS)
    try:
        return [(batch, exporter.export(batch)) for batch in batches]
    finally:
        exporter.shutdown()


@dataclass
class Driver:
    """Moves the clock on and ticks each time more spans were refused."""

    server: RunningServer
    refused_at_step: float = 0.0
    steps: int = 0

    def poll(self) -> None:
        refused = self.server.sample(
            "toolwatch_spans_refused_total", {"transport": "grpc"}, missing_ok=True
        )
        if refused == self.refused_at_step:
            return
        self.refused_at_step = refused
        self.server.clock.advance(STEP_SECONDS)
        self.server.app.engine.tick()
        self.steps += 1


def soak(
    start_server: Callable[..., RunningServer], **overrides: object
) -> tuple[RunningServer, list[Outcome], Driver]:
    server = start_server(
        assembly__max_traces=CLIENTS - 1,
        assembly__max_trace_age_seconds=3_600,  # runs in flight never age out here
        ingest__retry_after_seconds=RETRY_AFTER_SECONDS,
        **overrides,
    )
    driver = Driver(server)
    deadline = time.monotonic() + DEADLINE_SECONDS
    with ThreadPoolExecutor(CLIENTS) as pool:
        address = server.address("grpc")
        futures = [pool.submit(client, address, exports()) for _ in range(CLIENTS)]
        while not all(f.done() for f in futures) and time.monotonic() < deadline:
            server.call(driver.poll)
        outcomes = [outcome for future in futures for outcome in future.result(timeout=5)]
    server.settle()
    return server, outcomes, driver


def spans_of(outcomes: Sequence[Outcome], result: SpanExportResult) -> int:
    return sum(len(batch) for batch, got in outcomes if got is result)


def total(server: RunningServer, name: str, **labels: str) -> float:
    """The sum of the samples ``name`` whose labels include ``labels``."""
    return sum(
        s.value
        for family in server.registry.collect()
        for s in family.samples
        if s.name == name and labels.items() <= s.labels.items()
    )


def accounted(server: RunningServer) -> float:
    """What the server says became of the spans it took: built, dropped, or buffered."""
    dropped = total(server, "toolwatch_spans_dropped_total")
    built = server.sample("toolwatch_spans_built_total")
    return built + dropped + server.sample("toolwatch_buffered_spans")


def test_with_the_limit_every_export_is_taken_and_every_span_accounted_for(
    start_server: Callable[..., RunningServer],
) -> None:
    server, outcomes, driver = soak(start_server)

    assert [got for _, got in outcomes if got is not SpanExportResult.SUCCESS] == []
    sent = spans_of(outcomes, SpanExportResult.SUCCESS)
    assert server.sample("toolwatch_spans_received_total", {"transport": "grpc"}) == sent
    assert accounted(server) == sent
    assert server.sample("toolwatch_buffered_spans") == 0
    assert driver.steps > 0
    evicted = total(server, "toolwatch_tool_traces_total", outcome="evicted")
    assert evicted > 0
    # An evicted run's end came later: dropped late, one agent span each.
    late = server.sample("toolwatch_spans_dropped_total", {"reason": "late"}, missing_ok=True)
    assert late == evicted


def test_without_the_limit_the_exporters_give_batches_up(
    start_server: Callable[..., RunningServer],
) -> None:
    server, outcomes, _ = soak(start_server, assembly__max_refusal_seconds=None)

    failed = spans_of(outcomes, SpanExportResult.FAILURE)
    assert failed > 0
    sent = spans_of(outcomes, SpanExportResult.SUCCESS)
    assert server.sample("toolwatch_spans_received_total", {"transport": "grpc"}) == sent
    assert (
        server.sample("toolwatch_trace_evictions_total", {"reason": "max_traces"}, missing_ok=True)
        == 0
    )
