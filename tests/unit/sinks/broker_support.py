"""What the findings broker's unit tests share: findings ``f<n>`` published on a broker, a
subscription's client reading them, and a resume of the broker's stream."""

from __future__ import annotations

import asyncio

from tests import factories
from toolwatch.model import Category, Severity
from toolwatch.model_evaluation import Finding
from toolwatch.sinks.stream.broker import FindingsBroker
from toolwatch.sinks.stream.resumes import Resume
from toolwatch.sinks.stream.subscription import Subscription

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


def resuming(broker: FindingsBroker, after: int, token: str) -> Resume:
    """A resume of ``broker``'s stream after ``after``, as the subscription of ``token``."""
    return Resume({broker.stream_id: after}, {broker.stream_id: token})
