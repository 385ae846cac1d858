"""Which departed subscriber a resume claims (``FindingsBroker._resumes``)."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from tests import factories
from toolwatch.model import Category, Finding, Severity
from toolwatch.sinks.prometheus import PrometheusMetrics
from toolwatch.sinks.stream import FindingsBroker, Resume, StreamFilter, Subscription

DROPPED = "toolwatch_stream_dropped_findings_total"


def finding(number: int) -> Finding:
    return factories.finding(
        category=Category.TOOL_ORDER_DRIFT, severity=Severity.HIGH, explanation=f"f{number}"
    )


def publish(broker: FindingsBroker, *numbers: int) -> None:
    trace = factories.tool_trace(agent="bot", service="svc")
    broker.publish(trace, [finding(n) for n in numbers])


def read(subscription: Subscription, count: int) -> list[int]:
    """The sequences of the next ``count`` findings its client reads (the stream stays open)."""

    async def take() -> list[int]:
        taken = []
        for _ in range(count):
            message = await subscription.next()
            assert message is not None
            taken.append(message.sequence)
        return taken

    return asyncio.run(take())


def test_a_resume_claims_its_own_departure_not_an_earlier_clients() -> None:
    """Scenario: two unfiltered clients (two ``toolwatch tail``s). Slow has read nothing of
    f1..f4 when its connection is lost and it never comes back (1..4 held for it); quick read
    f1, f2, then lost its connection with f3, f4 queued, and resumes after 2.
    Was: the resume claims the departure whose held findings start earliest (slow's, 1..4:
    its last one is after 2, the new test), so at shutdown quick's 2 findings, which it was
    sent, are counted lost and slow's 4 are not: dropped 2.
    Now: quick claims its own departure (held findings starting after its cursor, as
    before b1db5d0 a resume only claimed one whose first held finding was after it), and
    slow's 4 are counted: dropped 4.
    Regression (b1db5d0: ``d.first > after`` became ``d.sequences[-1] > after``)."""
    registry = CollectorRegistry()
    broker = FindingsBroker(PrometheusMetrics(registry), replay_size=100)
    slow = broker.subscribe(StreamFilter())
    quick = broker.subscribe(StreamFilter())
    publish(broker, 1, 2)
    assert read(quick, 2) == [1, 2]
    publish(broker, 3, 4)
    broker.unsubscribe(slow)  # 1..4 held for it; it never resumes
    broker.unsubscribe(quick)  # 3, 4 held for it
    back = broker.subscribe(StreamFilter(), Resume({broker.stream_id: 2}))
    assert read(back, 2) == [3, 4]
    broker.unsubscribe(back)

    broker.close()

    assert registry.get_sample_value(DROPPED) == 4
