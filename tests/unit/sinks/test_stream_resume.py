"""The broker's sequence numbers and what it sends a subscriber that resumes, without a
network (the gRPC side is in tests/integration/test_stream.py)."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from tests import factories
from toolwatch._proto.toolwatch.v1 import findings_pb2
from toolwatch.metrics import NoopMetrics
from toolwatch.model import Category, Finding, Severity
from toolwatch.sinks.prometheus import PrometheusMetrics
from toolwatch.sinks.stream import (
    FindingsBroker,
    Resume,
    ResumeResult,
    StreamFilter,
    Subscription,
)


def finding(number: int, severity: Severity = Severity.HIGH) -> Finding:
    return factories.finding(
        category=Category.TOOL_ORDER_DRIFT, severity=severity, explanation=f"f{number}"
    )


def publish(broker: FindingsBroker, *findings: Finding) -> None:
    broker.publish(factories.tool_trace(agent="bot", service="svc"), findings)


def drain(subscription: Subscription) -> list[tuple[str, int, int]]:
    """(explanation, sequence, missed_before) of each queued finding."""

    async def take() -> list[findings_pb2.Finding]:
        subscription.close()
        taken = []
        while (message := await subscription.next()) is not None:
            taken.append(message)
        return taken

    return [(m.explanation, m.sequence, m.missed_before) for m in asyncio.run(take())]


def resumed(
    broker: FindingsBroker, resume: Resume, stream_filter: StreamFilter | None = None
) -> tuple[ResumeResult, list[tuple[str, int, int]]]:
    subscription = broker.subscribe(stream_filter or StreamFilter())
    result = broker.replay(subscription, resume)
    return result, drain(subscription)


def test_every_finding_published_is_numbered_whoever_receives_it() -> None:
    broker = FindingsBroker(NoopMetrics())
    publish(broker, finding(1))  # no subscriber yet
    subscription = broker.subscribe(StreamFilter(min_severity=Severity.HIGH))
    publish(broker, finding(2), finding(3, Severity.LOW), finding(4))
    assert broker.sequence == 4
    assert drain(subscription) == [("f2", 2, 0), ("f4", 4, 0)]
    assert FindingsBroker(NoopMetrics()).stream_id != broker.stream_id  # new at every start


def test_a_resume_gets_the_held_findings_after_its_cursor_that_pass_its_filter() -> None:
    broker = FindingsBroker(NoopMetrics())
    publish(broker, finding(1), finding(2), finding(3, Severity.LOW), finding(4))
    result, received = resumed(
        broker, Resume(broker.stream_id, 1), StreamFilter(min_severity=Severity.HIGH)
    )
    assert result == ResumeResult("same", 0)
    assert received == [("f2", 2, 0), ("f4", 4, 0)]


def test_a_resume_at_the_last_finding_gets_nothing_and_loses_nothing() -> None:
    broker = FindingsBroker(NoopMetrics())
    publish(broker, finding(1), finding(2))
    assert resumed(broker, Resume(broker.stream_id, 2)) == (ResumeResult("same", 0), [])


def test_findings_no_longer_held_are_told_as_lost() -> None:
    broker = FindingsBroker(NoopMetrics(), replay_size=2)
    publish(broker, *(finding(i) for i in range(1, 6)))
    result, received = resumed(broker, Resume(broker.stream_id, 1))
    assert result == ResumeResult("same", 2)  # f2 and f3 are gone
    assert received == [("f4", 4, 0), ("f5", 5, 0)]


def test_with_nothing_held_everything_after_the_cursor_is_lost() -> None:
    broker = FindingsBroker(NoopMetrics(), replay_size=0)
    publish(broker, finding(1), finding(2), finding(3))
    assert resumed(broker, Resume(broker.stream_id, 1)) == (ResumeResult("same", 2), [])


@pytest.mark.parametrize(("replay_size", "lost"), [(10, 0), (2, 1)])
def test_another_streams_cursor_gets_every_held_finding(replay_size: int, lost: int) -> None:
    """The server restarted: everything the new one published came after the client's last
    finding, however far the old stream had gone."""
    broker = FindingsBroker(NoopMetrics(), replay_size=replay_size)
    publish(broker, finding(1), finding(2), finding(3))
    result, received = resumed(broker, Resume("0123456789abcdef", 500))
    assert result == ResumeResult("other", lost)
    assert [sequence for _, sequence, _ in received] == [1, 2, 3][lost:]


def test_a_replay_beyond_the_queue_loses_the_rest_counted_and_told() -> None:
    registry = CollectorRegistry()
    broker = FindingsBroker(PrometheusMetrics(registry), queue_size=2)
    publish(broker, *(finding(i) for i in range(1, 6)))
    subscription = broker.subscribe(StreamFilter())
    assert broker.replay(subscription, Resume(broker.stream_id, 0)) == ResumeResult("same", 0)
    publish(broker, finding(6))
    # f3-f5 found the queue full, and so does f6: nothing has read the queue yet.
    assert drain(subscription) == [("f1", 1, 0), ("f2", 2, 0)]
    assert subscription.dropped == 4
    assert registry.get_sample_value("toolwatch_stream_dropped_findings_total") == 4


def test_a_cursor_past_this_streams_last_finding_is_refused() -> None:
    broker = FindingsBroker(NoopMetrics())
    publish(broker, finding(1))
    with pytest.raises(
        ValueError,
        match=rf"resume_after 2 is past the last finding of stream {broker.stream_id} \(1\)",
    ):
        broker.check_resume(Resume(broker.stream_id, 2))
    broker.check_resume(Resume(broker.stream_id, 1))
    broker.check_resume(Resume("another", 2))  # another stream's cursor is no error


def test_resume_requests() -> None:
    assert Resume.from_request(findings_pb2.SubscribeRequest()) is None
    request = findings_pb2.SubscribeRequest(resume_stream_id="ab", resume_after=7)
    assert Resume.from_request(request) == Resume("ab", 7)
    with pytest.raises(ValueError, match="resume_after 7 needs resume_stream_id"):
        Resume.from_request(findings_pb2.SubscribeRequest(resume_after=7))


def test_the_replay_size_is_validated() -> None:
    with pytest.raises(ValueError, match="replay_size must be >= 0, got -1"):
        FindingsBroker(NoopMetrics(), replay_size=-1)
