"""What a resumed subscription had still to replay when it is given up, and how its replay's
losses are told, without a network (the gRPC side, and tail's words, are in
tests/integration/test_stream_replay_losses.py)."""

from __future__ import annotations

import asyncio
import io

import pytest
from prometheus_client import CollectorRegistry

from tests import factories
from toolwatch._proto.toolwatch.v1 import findings_pb2
from toolwatch.model import Category, Severity
from toolwatch.model_evaluation import Finding
from toolwatch.sinks.prometheus import PrometheusMetrics
from toolwatch.sinks.stream.broker import FindingsBroker
from toolwatch.sinks.stream.filters import StreamFilter
from toolwatch.sinks.stream.resumes import Resume, ResumeResult
from toolwatch.sinks.stream.subscription import Subscription
from toolwatch.tail import _tell_missed

DROPPED = "toolwatch_stream_dropped_findings_total"
HIGH = StreamFilter(min_severity=Severity.HIGH)
LOW = (2, 6, 8)  # the numbers of the low-severity findings, which ``HIGH`` does not pass


def finding(number: int) -> Finding:
    severity = Severity.LOW if number in LOW else Severity.HIGH
    return factories.finding(
        category=Category.TOOL_ORDER_DRIFT, severity=severity, explanation=f"f{number}"
    )


def publish(broker: FindingsBroker, first: int, last: int) -> None:
    trace = factories.tool_trace(agent="bot", service="svc")
    broker.publish(trace, [finding(n) for n in range(first, last + 1)])


def take(subscription: Subscription) -> findings_pb2.Finding:
    """The next finding its client is sent (what ``deliver`` would be writing)."""
    message = asyncio.run(subscription.next())
    assert message is not None
    return message


def told(message: findings_pb2.Finding) -> tuple[str, int, int]:
    return message.explanation, message.missed_before, message.missed_from_replay


class Stuck:
    """A ``HIGH`` client resumed from the start (f1..f4 held, ``replay_size`` 4) took f1 to
    write and wrote it no further; f5..f10 were published, so the broker let go of f2..f6
    and holds f7..f10. Its replay had still to send f3, f4, f5 (let go) and f7, f9, f10
    (held); f2, f6 and f8 do not pass its filter."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.broker = FindingsBroker(PrometheusMetrics(self.registry), replay_size=4)
        publish(self.broker, 1, 4)
        self.subscription = self.broker.subscribe(HIGH, Resume({self.broker.stream_id: 0}))
        self.being_written = take(self.subscription)
        assert self.being_written.explanation == "f1"
        publish(self.broker, 5, 10)
        assert self.dropped == 0  # not read past: nothing counted yet

    @property
    def dropped(self) -> float | None:
        return self.registry.get_sample_value(DROPPED)

    def leaves(self) -> None:
        """Its call ends (``deliver``): with f1 unwritten and its replay unread."""
        self.broker.unsubscribe(self.subscription, unsent=self.being_written)


def test_a_client_that_leaves_mid_replay_has_its_losses_counted_and_the_rest_held() -> None:
    """Was: only f1, the finding being written, counted as it left (its replay dropped
    uncounted, none of it held for a resume), and nothing at the shutdown.
    Now: f1 and f3, f4, f5, let go, as it leaves (those that pass its filter, by the index of
    what was published); f7, f9, f10, held for its resume, when the server shuts down
    without one: 7, as a fresh subscriber's queue of the same findings would be."""
    client = Stuck()
    client.leaves()
    assert client.dropped == 4
    client.broker.close()
    assert client.dropped == 7


def test_a_client_that_left_mid_replay_and_resumes_gets_what_was_held_for_it() -> None:
    """Its resume after f1 is told of the 3 let go, sent f7, f9 and f10, and claims what was
    held for it: nothing more is counted at the shutdown."""
    client = Stuck()
    client.leaves()
    back = client.broker.subscribe(HIGH, Resume({client.broker.stream_id: 1}))
    assert back.resumed == ResumeResult("same", 3)
    back.close()
    assert [take(back).explanation for _ in range(3)] == ["f7", "f9", "f10"]
    assert asyncio.run(back.next()) is None
    client.broker.unsubscribe(back)
    client.broker.close()
    assert client.dropped == 4


def test_a_client_still_replaying_when_the_server_shuts_down_has_all_it_was_owed_counted() -> None:
    """Was: 1 (f1, being written when the grace ended).
    Now: f1, f3, f4, f5 and f7, f9, f10: none is held for a resume by the next server."""
    client = Stuck()
    client.broker.close()
    client.leaves()
    assert client.dropped == 7


def test_a_replays_losses_are_told_as_the_replays_and_a_queues_as_the_queues() -> None:
    """A ``HIGH`` client resumed from the start (``replay_size`` 2, ``queue_size`` 1) takes
    f1; f3 (high), f4 and f5 (low: not for it) are published, so the broker lets go of f2 and
    f3 before its replay reads them and the replay ends there, nothing more to send: the next
    finding, f6, queued, tells those 2 as the replay's (``missed_from_replay``). Then f8 and
    f9 overflow its queue (f7 waits there): f10 tells those 2, none the replay's.
    Was: no ``missed_from_replay``: tail could not tell the two apart, and named the queue's
    setting for both."""
    registry = CollectorRegistry()
    broker = FindingsBroker(PrometheusMetrics(registry), queue_size=1, replay_size=2)
    trace = factories.tool_trace(agent="bot", service="svc")

    def publish_high(*numbers: int, low: tuple[int, ...] = ()) -> None:
        severity = {n: Severity.LOW for n in low}
        broker.publish(
            trace,
            [
                factories.finding(
                    category=Category.TOOL_ORDER_DRIFT,
                    severity=severity.get(n, Severity.HIGH),
                    explanation=f"f{n}",
                )
                for n in numbers
            ],
        )

    async def scenario() -> list[tuple[str, int, int]]:
        publish_high(1, 2)
        subscription = broker.subscribe(HIGH, Resume({broker.stream_id: 0}))
        seen = [told(await next_of(subscription))]
        publish_high(3, 4, 5, low=(4, 5))
        waiting = asyncio.ensure_future(next_of(subscription))
        await asyncio.sleep(0)  # it reads the rest of its replay, then waits for its queue
        assert not waiting.done()
        publish_high(6)
        seen.append(told(await waiting))
        publish_high(7, 8, 9)
        seen.append(told(await next_of(subscription)))
        publish_high(10)
        seen.append(told(await next_of(subscription)))
        return seen

    assert asyncio.run(scenario()) == [("f1", 0, 0), ("f6", 2, 2), ("f7", 0, 0), ("f10", 2, 0)]
    assert registry.get_sample_value(DROPPED) == 4


async def next_of(subscription: Subscription) -> findings_pb2.Finding:
    message = await subscription.next()
    assert message is not None
    return message


@pytest.mark.parametrize(
    ("from_replay", "why"),
    [
        (0, "the server's queue for this subscriber was full (output.stream_queue_size)"),
        (
            5,
            "the server let go of them before this resumed subscription's replay read them"
            " (output.stream_replay_size)",
        ),
        (
            3,
            "3 the server let go of before this resumed subscription's replay read them"
            " (output.stream_replay_size), 2 as its queue for this subscriber was full"
            " (output.stream_queue_size)",
        ),
    ],
    ids=["queue", "replay", "both"],
)
def test_tail_names_the_setting_that_bounded_each_loss(from_replay: int, why: str) -> None:
    """What tail says of ``missed_before`` 5, ``missed_from_replay`` of them from the replay.
    Was: the queue's setting whatever the cause. (A server older than the field sends 0:
    told as the queue's, as before.)"""
    err = io.StringIO()
    _tell_missed(err, 5, "before the next", from_replay)
    assert err.getvalue() == f"toolwatch tail: 5 findings missed before the next: {why}\n"


def test_losses_no_finding_told_are_left_for_the_streams_end() -> None:
    """What ``Subscription.untold`` leaves for the trailing metadata as the server ends the
    stream: a ``HIGH`` client resumed from the start (f3, f4, f5 held, ``replay_size`` 3)
    takes f3; f2, f6, f8 (low: not for it) are published, so the broker lets go of f4, f5
    before its replay reads them, and no finding for it follows to tell them
    (``missed_before``): 2, both the replay's. A queue's losses after the last finding taken,
    to a client that did not ask for ``missed_after``, are left too (none the replay's)."""
    registry = CollectorRegistry()
    broker = FindingsBroker(PrometheusMetrics(registry), replay_size=3)

    async def ended(subscription: Subscription) -> tuple[list[str], tuple[int, int]]:
        taken = [(await next_of(subscription)).explanation]
        for low in LOW:
            publish(broker, low, low)
        subscription.close()  # the server shuts down
        assert await subscription.next() is None
        return taken, subscription.untold

    publish(broker, 3, 5)
    resumed = broker.subscribe(HIGH, Resume({broker.stream_id: 0}))
    assert asyncio.run(ended(resumed)) == (["f3"], (2, 2))
    assert registry.get_sample_value(DROPPED) == 2

    queue = Subscription(StreamFilter(), queue_size=1)
    message = findings_pb2.Finding(explanation="f1")
    assert [queue.offer(message), queue.offer(message), queue.offer(message)] == [
        True,
        False,
        False,
    ]
    queue.close()
    assert asyncio.run(next_of(queue)).missed_after == 0  # not asked for: left for the end
    assert queue.untold == (2, 0)
