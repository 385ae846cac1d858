"""Review of "Findings stream: what a stuck subscriber never got at shutdown is counted lost,
before the last scrape" (b282d77).

The commit counts the queue of a subscription still open at shutdown. A subscriber whose
connection was lost shortly before (its tail restarted in the same rollout, a proxy in
between cut it) is told in the log that its findings are "held for it if it resumes"; at
shutdown they go with the process just the same (a restarted server holds none of them, and
a client resuming there is told of no loss: the stream id is new), yet they are never counted
in toolwatch_stream_dropped_findings_total, nor logged as lost: the case the commit
describes ("a log line saying nothing was lost", no ToolwatchFindingsStreamDropping)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from prometheus_client import CollectorRegistry

from tests import factories
from toolwatch.model import Category, Severity
from toolwatch.sinks.prometheus import PrometheusMetrics
from toolwatch.sinks.stream import FindingsBroker, StreamFilter

DROPPED = "toolwatch_stream_dropped_findings_total"


def test_findings_held_for_a_subscriber_gone_before_shutdown_are_counted_lost_at_shutdown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> float | None:
        registry = CollectorRegistry()
        broker = FindingsBroker(PrometheusMetrics(registry))
        gone = broker.subscribe(StreamFilter())
        findings = [
            factories.finding(
                category=Category.TOOL_ORDER_DRIFT, severity=Severity.HIGH, explanation=f"f{n}"
            )
            for n in range(3)
        ]
        broker.publish(factories.tool_trace(agent="bot", service="svc"), findings)
        broker.unsubscribe(gone)  # its connection is lost: held for a resume, not counted
        assert registry.get_sample_value(DROPPED) == 0
        broker.close()  # SIGTERM: the drain ends the stream; nothing held survives it
        return registry.get_sample_value(DROPPED)

    with caplog.at_level(logging.INFO, logger="toolwatch.sinks.stream"):
        dropped = asyncio.run(scenario())
    told = [r.getMessage() for r in caplog.records]
    assert dropped == 3, (
        f"3 findings its subscriber never got went with the process; counted: {dropped};"
        f" logged: {told}"
    )
