"""A server's findings stream for tests: an in-process server (``serve``, its ``Harness``),
findings and ToolTraces to publish on it (``findings``: each larger than the HTTP/2 window of
a client that does not grow it, ``NO_BDP``), and a subscriber."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import grpc
from prometheus_client import CollectorRegistry

from tests import factories
from toolwatch._proto.toolwatch.v1 import findings_pb2, findings_pb2_grpc
from toolwatch.model import Category, ReferenceKind, Severity
from toolwatch.model_evaluation import Finding
from toolwatch.model_traces import ToolTrace
from toolwatch.sinks.findings import Redaction
from toolwatch.sinks.prometheus import PrometheusMetrics
from toolwatch.sinks.stream.broker import FindingsBroker
from toolwatch.sinks.stream.service import Authorize, FindingsStreamServicer, add_findings_service

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
WALL_NS = 1_795_984_262_123_456_789  # 2026-11-29T20:31:02.123Z
DROPPED = "toolwatch_stream_dropped_findings_total"
#: A finding larger than HTTP/2's 64 KiB window: the server can never write one whole into
#: a client that does not read.
BIG = 70_000
#: tail's receive window: HTTP/2's 64 KiB (``toolwatch.tail_access._channel_options``).
NO_BDP = (("grpc.http2.bdp_probe", 0),)


def make_trace(agent: str = "refund-bot") -> ToolTrace:
    return factories.tool_trace(
        trace_id=TRACE_ID,
        run_span_id="00f067aa0ba902b7",
        service="support",
        agent=agent,
        end_ns=1,
        span_count=2,
    )


def make_finding(
    category: Category = Category.DANGEROUS_ACTION_DRIFT,
    severity: Severity = Severity.CRITICAL,
    explanation: str = "issue_refund was called without an earlier lookup_order",
) -> Finding:
    return factories.finding(
        category=category,
        severity=severity,
        evaluator="safety",
        reference=ReferenceKind.POLICY,
        score=0.0,
        explanation=explanation,
        trace_id=TRACE_ID,
        span_id="b7ad6b7169203331",
        tool="issue_refund",
        details={"calls": 2, "fields": {"order_id": "A-17", "amount": 120}},
    )


@dataclass
class Harness:
    broker: FindingsBroker
    registry: CollectorRegistry
    target: str
    server: grpc.aio.Server
    servicer: FindingsStreamServicer


@asynccontextmanager
async def serve(
    queue_size: int = 1000,
    redaction: Redaction | None = None,
    max_subscribers: int = 64,
    replay_size: int = 1000,
    options: Sequence[tuple[str, int]] = (),
    authorize: Authorize | None = None,
    refused: Callable[[], None] = lambda: None,
) -> AsyncIterator[Harness]:
    registry = CollectorRegistry()
    broker = FindingsBroker(
        PrometheusMetrics(registry),
        redaction,
        wall_clock=lambda: WALL_NS,
        queue_size=queue_size,
        max_subscribers=max_subscribers,
        replay_size=replay_size,
    )
    server = grpc.aio.server(options=options)
    servicer = add_findings_service(server, broker, authorize, refused)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield Harness(broker, registry, f"127.0.0.1:{port}", server, servicer)
    finally:
        broker.close()
        await server.stop(None)


def findings(first: int, last: int) -> list[Finding]:
    """Findings ``f<first>`` to ``f<last>``, each larger than a client's window (``BIG``)."""
    return [make_finding(explanation=f"f{i} " + "x" * BIG) for i in range(first, last + 1)]


def subscribe(
    channel: grpc.aio.Channel,
    categories: Sequence[str] = (),
    min_severity: str = "",
    agents: Sequence[str] = (),
    missed_after: bool = False,
) -> grpc.aio.UnaryStreamCall:
    request = findings_pb2.SubscribeRequest(
        categories=list(categories),
        min_severity=min_severity,
        agents=list(agents),
        missed_after=missed_after,
    )
    return findings_pb2_grpc.FindingsServiceStub(channel).Subscribe(request)
