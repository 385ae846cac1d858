"""A subscription interrupted for its client to connect again (``Subscription.interrupt``,
what ``FindingsStreamServicer.reconnect_all`` does as a client CA is taken out): its stream
ends at once, and what it was not sent is held for its resume, as for a client that left."""

from __future__ import annotations

import asyncio
import logging

import pytest
from prometheus_client import CollectorRegistry

from tests import factories
from toolwatch._proto.toolwatch.v1 import findings_pb2
from toolwatch.model import Category, Severity
from toolwatch.sinks.prometheus import PrometheusMetrics
from toolwatch.sinks.stream.broker import FindingsBroker
from toolwatch.sinks.stream.filters import StreamFilter
from toolwatch.sinks.stream.resumes import Resume
from toolwatch.sinks.stream.service import FindingsStreamServicer, deliver
from toolwatch.sinks.stream.subscription import Subscription

DROPPED = "toolwatch_stream_dropped_findings_total"


def publish(broker: FindingsBroker, *numbers: int) -> None:
    trace = factories.tool_trace(agent="bot", service="svc")
    findings = [
        factories.finding(
            category=Category.TOOL_ORDER_DRIFT, severity=Severity.HIGH, explanation=f"f{n}"
        )
        for n in numbers
    ]
    broker.publish(trace, findings)


def delivered(
    broker: FindingsBroker, subscription: Subscription, interrupt_after: int
) -> list[int]:
    """The sequences ``deliver`` writes to ``subscription`` until it ends, the subscription
    interrupted once ``interrupt_after`` are written (at once for 0)."""
    written: list[int] = []

    async def write(message: findings_pb2.Finding) -> None:
        written.append(message.sequence)
        if len(written) == interrupt_after:
            subscription.interrupt()

    async def run() -> bool:
        if interrupt_after == 0:
            subscription.interrupt()
        return await deliver(broker, subscription, write)

    assert asyncio.run(run()) is True  # not refused: its findings are not withheld
    return written


def resumed(broker: FindingsBroker, subscription: Subscription, after: int) -> list[int]:
    """The sequences a resume after ``after``, as ``subscription`` (its token), is sent: all
    published since."""
    back = broker.subscribe(
        StreamFilter(), Resume({broker.stream_id: after}, {broker.stream_id: subscription.token})
    )

    async def take() -> list[int]:
        sent = [await asyncio.wait_for(back.next(), 1) for _ in range(broker.sequence - after)]
        return [message.sequence for message in sent if message is not None]

    taken = asyncio.run(take())
    broker.unsubscribe(back)
    return taken


@pytest.mark.parametrize("resumes", [True, False])
def test_queued_findings_of_an_interrupted_stream_are_held_for_its_resume(resumes: bool) -> None:
    """Held as for a client that left, not withheld as from a revoked token's stream: they
    come to its resume, or are counted lost at shutdown when it does not come back."""
    registry = CollectorRegistry()
    broker = FindingsBroker(PrometheusMetrics(registry), replay_size=100)
    subscription = broker.subscribe(StreamFilter())
    publish(broker, 1, 2, 3)
    assert delivered(broker, subscription, interrupt_after=0) == []
    assert (subscription.interrupted, broker.subscriber_count) == (True, 0)
    sent = resumed(broker, subscription, after=0) if resumes else []
    broker.close()
    assert (sent, registry.get_sample_value(DROPPED)) == (([1, 2, 3], 0) if resumes else ([], 3))


@pytest.mark.parametrize("resumes", [True, False])
def test_an_interrupted_replay_is_held_for_its_resume_from_where_it_was(resumes: bool) -> None:
    """A resumed subscription still replaying (1..4 held) is interrupted once it was sent
    two: the rest of its replay is held for its next resume."""
    registry = CollectorRegistry()
    broker = FindingsBroker(PrometheusMetrics(registry), replay_size=100)
    publish(broker, 1, 2, 3, 4)
    replaying = broker.subscribe(StreamFilter(), Resume({broker.stream_id: 0}))
    assert delivered(broker, replaying, interrupt_after=2) == [1, 2]
    sent = resumed(broker, replaying, after=2) if resumes else []
    broker.close()
    assert (sent, registry.get_sample_value(DROPPED)) == (([3, 4], 0) if resumes else ([], 2))


def test_reconnect_all_logs_only_when_it_ended_a_stream(caplog: pytest.LogCaptureFixture) -> None:
    """Was: "ended 0 findings stream(s)" at INFO at every removal of a client CA with no
    stream open (the stream listener restarts then too, and logs that itself). Now: logged
    when one was ended, with how many."""
    broker = FindingsBroker(PrometheusMetrics(CollectorRegistry()))
    servicer = FindingsStreamServicer(broker)
    with caplog.at_level(logging.INFO, logger="toolwatch.sinks.stream"):
        none = servicer.reconnect_all()
        broker.subscribe(StreamFilter())
        one = servicer.reconnect_all()
        again = servicer.reconnect_all()  # already ended: not counted twice
    assert (none, one, again) == (0, 1, 0)
    assert [r.getMessage() for r in caplog.records] == [
        "a CA was taken out of the client CA file: ended 1 findings stream(s) UNAVAILABLE,"
        " for their clients to connect again through a new TLS handshake"
    ]
