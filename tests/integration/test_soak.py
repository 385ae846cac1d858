"""Soak under backpressure: clients offer twice what the server drains, for a bounded time.

The sustainable rate is made small and known instead of measured. The buffer holds
``CAPACITY_SPANS`` spans and only a driver thread empties it: it moves the ``ManualClock``
past ``completion_wait`` and runs one engine tick, on the server's loop. It does so only
once the server has refused at least ``CAPACITY_SPANS`` spans since its previous tick, so in
every drain interval the clients offered at least twice what was drained. ``CLIENTS`` threads
each run the OpenTelemetry SDK's real OTLP/gRPC exporter, which retries UNAVAILABLE after
the server's RetryInfo delay (``RETRY_AFTER_SECONDS``).

At the end every span a client saw accepted is accounted for (DESIGN §4: built, rejected or
dropped by reason, none still buffered), the buffer never held more than its bound, and a
request that was refused left no trace in the server: refusal is all or nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
from opentelemetry.exporter.otlp.proto.grpc import exporter as sdk_grpc_exporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcExporter,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.integration import agents
from tests.integration.conftest import RunningServer

CLIENTS = 8
EXPORTS_PER_CLIENT = 12
TRACES_PER_EXPORT = 3
SPANS_PER_TRACE = 6  # refund_run: agent, three model calls, two tools
EXPORT_SPANS = TRACES_PER_EXPORT * SPANS_PER_TRACE
CAPACITY_SPANS = CLIENTS * EXPORT_SPANS // 2  # half of what the clients keep in flight
RETRY_AFTER_SECONDS = 0.05
DEADLINE_SECONDS = 60.0  # bounds the whole soak; it normally takes two or three seconds

Outcome = tuple["Batch", SpanExportResult]


@dataclass(frozen=True)
class Batch:
    spans: tuple[ReadableSpan, ...]
    trace_ids: frozenset[str]


def make_batches(count: int) -> list[Batch]:
    """``count`` exports of ``TRACES_PER_EXPORT`` distinct refund runs each."""
    batches = []
    for n in range(count):
        style = sorted(agents.STYLES)[n % len(agents.STYLES)]
        runs = [agents.record(agents.refund_run(), style) for _ in range(TRACES_PER_EXPORT)]
        spans = tuple(agents.spans_of(*runs))
        assert len(spans) == EXPORT_SPANS
        ids = frozenset(format(run[0].context.trace_id, "032x") for run in runs)
        batches.append(Batch(spans, ids))
    return batches


def client(address: str, batches: Sequence[Batch]) -> list[Outcome]:
    """One SDK exporter sending ``batches`` in turn, as a BatchSpanProcessor would."""
    exporter = GrpcExporter(endpoint=address, insecure=True, timeout=DEADLINE_SECONDS)
    try:
        return [(batch, exporter.export(batch.spans)) for batch in batches]
    finally:
        exporter.shutdown()


@dataclass
class Driver:
    """Drains the server only while clients offer at least twice what it drains."""

    server: RunningServer
    refused_at_tick: float = 0.0
    peak_spans: float = 0.0
    peak_bytes: float = 0.0
    ticks: int = 0

    def poll(self) -> None:
        """On the server's loop: tick once ``CAPACITY_SPANS`` more spans were refused,
        first recording what is buffered (the interval's peak: only arrivals happened)."""
        refused = self.server.sample("toolwatch_spans_refused_total", {"transport": "grpc"})
        if refused - self.refused_at_tick < CAPACITY_SPANS:
            return
        self.refused_at_tick = refused
        self.peak_spans = max(self.peak_spans, self.server.sample("toolwatch_buffered_spans"))
        self.peak_bytes = max(self.peak_bytes, self.server.sample("toolwatch_buffered_bytes"))
        self.server.clock.advance(self.server.app.config.assembly.completion_wait_seconds)
        self.server.app.engine.tick()
        self.ticks += 1

    def run(self, until: Callable[[], bool], deadline: float) -> None:
        while not until() and time.monotonic() < deadline:
            self.server.call(self.poll)


def by_label(server: RunningServer, sample: str, label: str) -> dict[str, float]:
    """Every non-zero sample named ``sample``, keyed by the value of ``label``."""
    values = {
        s.labels.get(label, ""): s.value
        for family in server.registry.collect()
        for s in family.samples
        if s.name == sample
    }
    return {key: value for key, value in values.items() if value}


def soak(start_server: Callable[..., RunningServer]) -> tuple[RunningServer, list[Outcome], Driver]:
    """Run the clients against the driver, then settle what is left. Returns the server,
    every export's outcome and the driver."""
    server = start_server(
        assembly__max_buffered_spans=CAPACITY_SPANS,
        assembly__max_spans_per_trace=SPANS_PER_TRACE,  # under the buffer's bound, as required
        assembly__overflow="backpressure",
        ingest__retry_after_seconds=RETRY_AFTER_SECONDS,
    )
    batches = make_batches(CLIENTS * EXPORTS_PER_CLIENT)
    driver = Driver(server)
    deadline = time.monotonic() + DEADLINE_SECONDS
    with ThreadPoolExecutor(CLIENTS) as pool:
        address = server.address("grpc")
        futures = [pool.submit(client, address, batches[n::CLIENTS]) for n in range(CLIENTS)]
        driver.run(lambda: all(f.done() for f in futures), deadline)
        outcomes = [outcome for future in futures for outcome in future.result(timeout=5)]
    server.settle()
    return server, outcomes, driver


def spans_of(outcomes: Sequence[Outcome], result: SpanExportResult) -> int:
    return sum(len(batch.spans) for batch, got in outcomes if got is result)


def assert_conserved(server: RunningServer, outcomes: Sequence[Outcome]) -> None:
    sent = spans_of(outcomes, SpanExportResult.SUCCESS)
    received = by_label(server, "toolwatch_spans_received_total", "transport")
    rejected = by_label(server, "toolwatch_spans_rejected_total", "reason")
    dropped = by_label(server, "toolwatch_spans_dropped_total", "reason")
    built = server.sample("toolwatch_spans_built_total")

    assert received == {"grpc": sent}  # refused requests are not received; none doubled
    assert server.sample("toolwatch_buffered_spans") == 0
    assert sent == built + sum(rejected.values()) + sum(dropped.values())
    assert (rejected, dropped) == ({}, {})  # valid spans, each accepted once: all built


def assert_bounded(server: RunningServer, driver: Driver) -> None:
    assert driver.ticks > 0
    assert 0 < driver.peak_spans <= CAPACITY_SPANS
    assert driver.peak_bytes <= server.app.config.assembly.max_buffered_bytes
    refused = server.sample("toolwatch_spans_refused_total", {"transport": "grpc"})
    assert refused >= driver.ticks * CAPACITY_SPANS  # offered >= 2x drained, each interval


def test_soak_with_the_sdk_defaults_accounts_for_every_span_sent(
    start_server: Callable[..., RunningServer],
) -> None:
    """The SDK exporter gives up after six attempts, so under a sustained 2x overload some
    exports may fail: the client drops those, and the server must hold no part of them."""
    server, outcomes, driver = soak(start_server)

    assert_conserved(server, outcomes)
    assert_bounded(server, driver)
    failed = spans_of(outcomes, SpanExportResult.FAILURE)
    assert server.sample("toolwatch_spans_refused_total", {"transport": "grpc"}) >= failed * 6
    built = {t["trace_id"] for t in server.tooltraces()}
    for batch, result in outcomes:
        assert (batch.trace_ids <= built) is (result is SpanExportResult.SUCCESS)


def test_soak_loses_nothing_while_clients_keep_retrying(
    start_server: Callable[..., RunningServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a retry budget as long as the soak (the SDK has no setting for its attempt count,
    so the test raises it), every export is eventually accepted and every run evaluated."""
    monkeypatch.setattr(sdk_grpc_exporter, "_MAX_RETRYS", 10_000)
    server, outcomes, driver = soak(start_server)

    assert [got for _batch, got in outcomes if got is not SpanExportResult.SUCCESS] == []
    assert_conserved(server, outcomes)
    assert_bounded(server, driver)
    traces = sorted(trace_id for batch, _ in outcomes for trace_id in batch.trace_ids)
    dumped = server.tooltraces()
    assert sorted(t["trace_id"] for t in dumped) == traces
    assert all(t["complete"] and len(t["calls"]) == 2 for t in dumped)
    evaluated = {"evaluator": "loops"}  # loops judges every run
    assert server.sample("toolwatch_evaluation_duration_seconds_count", evaluated) == len(traces)
    assert by_label(server, "toolwatch_evaluator_failures_total", "evaluator") == {}
