"""The broker's sequence numbers and what it sends a subscriber that resumes, without a
network (the gRPC side is in tests/integration/test_stream_resume.py)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from prometheus_client import CollectorRegistry

from tests import factories
from toolwatch._proto.toolwatch.v1 import findings_pb2
from toolwatch.metrics import NoopMetrics
from toolwatch.model import Category, Severity
from toolwatch.model_evaluation import Finding
from toolwatch.sinks.findings import Redaction
from toolwatch.sinks.prometheus import PrometheusMetrics
from toolwatch.sinks.stream.broker import FindingsBroker
from toolwatch.sinks.stream.filters import StreamFilter
from toolwatch.sinks.stream.messages import MAX_STREAM_TEXT
from toolwatch.sinks.stream.resumes import INDEX_FACTOR, Resume, ResumeResult
from toolwatch.sinks.stream.subscription import Subscription

DROPPED = "toolwatch_stream_dropped_findings_total"
HIGH = StreamFilter(min_severity=Severity.HIGH)
#: Two tool names alike for longer than what is sent of them (``MAX_STREAM_TEXT``): both are
#: sent, held and queued as the same cut name.
LONG_TOOL = "billing__" + "x" * 200 + "__issue_refund"
TWIN_TOOL = "billing__" + "x" * 200 + "__cancel_order"
ORDER = {"fields": {"order_id": "A-7", "amount": 9}}


def finding(number: int, severity: Severity = Severity.HIGH, **fields: object) -> Finding:
    return factories.finding(
        category=Category.TOOL_ORDER_DRIFT,
        severity=severity,
        explanation=f"f{number}",
        **fields,  # type: ignore[arg-type]
    )


def publish(broker: FindingsBroker, *findings: Finding) -> None:
    broker.publish(factories.tool_trace(agent="bot", service="svc"), findings)


def received(subscription: Subscription) -> list[findings_pb2.Finding]:
    """Each finding it has for its client, the subscription closed first."""

    async def take() -> list[findings_pb2.Finding]:
        subscription.close()
        taken = []
        while (message := await subscription.next()) is not None:
            taken.append(message)
        return taken

    return asyncio.run(take())


def drain(subscription: Subscription) -> list[tuple[str, int, int]]:
    """(explanation, sequence, missed_before) of each finding it has for its client."""
    return [(m.explanation, m.sequence, m.missed_before) for m in received(subscription)]


def shown_fields(subscription: Subscription) -> dict[str, str]:
    """The ``details.fields`` of each finding it has for its client, by explanation."""
    return {m.explanation: m.details["fields"] for m in received(subscription)}


def resumed_fields(broker: FindingsBroker) -> dict[str, str]:
    """The ``details.fields`` of each finding a client resuming from the stream's start is
    sent, by explanation."""
    return shown_fields(broker.subscribe(StreamFilter(), Resume({broker.stream_id: 0})))


def resumed(
    broker: FindingsBroker, resume: Resume, stream_filter: StreamFilter | None = None
) -> tuple[ResumeResult | None, list[tuple[str, int, int]]]:
    subscription = broker.subscribe(stream_filter or StreamFilter(), resume)
    return subscription.resumed, drain(subscription)


def test_every_finding_published_is_numbered_whoever_receives_it() -> None:
    broker = FindingsBroker(NoopMetrics())
    publish(broker, finding(1))  # no subscriber yet
    subscription = broker.subscribe(HIGH)
    publish(broker, finding(2), finding(3, Severity.LOW), finding(4))
    assert broker.sequence == 4
    assert drain(subscription) == [("f2", 2, 0), ("f4", 4, 0)]
    assert FindingsBroker(NoopMetrics()).stream_id != broker.stream_id  # new at every start


def test_a_resume_gets_the_held_findings_after_its_cursor_that_pass_its_filter() -> None:
    broker = FindingsBroker(NoopMetrics())
    publish(broker, finding(1), finding(2), finding(3, Severity.LOW), finding(4))
    result, received = resumed(broker, Resume({broker.stream_id: 1}), HIGH)
    assert result == ResumeResult("same", 0)
    assert received == [("f2", 2, 0), ("f4", 4, 0)]


def test_a_resume_at_the_last_finding_gets_nothing_and_loses_nothing() -> None:
    broker = FindingsBroker(NoopMetrics())
    publish(broker, finding(1), finding(2))
    assert resumed(broker, Resume({broker.stream_id: 2})) == (ResumeResult("same", 0), [])


def test_findings_no_longer_held_are_told_as_lost() -> None:
    broker = FindingsBroker(NoopMetrics(), replay_size=2)
    publish(broker, *(finding(i) for i in range(1, 6)))
    result, received = resumed(broker, Resume({broker.stream_id: 1}))
    assert result == ResumeResult("same", 2)  # f2 and f3 are gone
    assert received == [("f4", 4, 0), ("f5", 5, 0)]


def test_only_unheld_findings_that_pass_the_filter_are_told_as_lost() -> None:
    """A filtered subscriber's cursor stays at the last finding it was sent: the others
    published since are no loss of its, held or not (the index of what was published says
    which passed); past the index every one counts."""
    broker = FindingsBroker(NoopMetrics(), replay_size=2)
    publish(broker, finding(1), *(finding(i, Severity.LOW) for i in range(2, 30)), finding(30))
    publish(broker, finding(31, Severity.LOW), finding(32, Severity.LOW))
    assert resumed(broker, Resume({broker.stream_id: 1}), HIGH) == (ResumeResult("same", 1), [])
    old = FindingsBroker(NoopMetrics(), replay_size=1)
    publish(old, *(finding(i, Severity.LOW) for i in range(1, INDEX_FACTOR + 4)))
    # Sequences 2 and 3 are older than the index (16 tags, of 4 to 19): told, unknown.
    assert resumed(old, Resume({old.stream_id: 1}), HIGH) == (ResumeResult("same", 2), [])


def test_with_nothing_held_everything_after_the_cursor_that_passes_is_lost() -> None:
    broker = FindingsBroker(NoopMetrics(), replay_size=0)
    publish(broker, finding(1), finding(2), finding(3))
    assert resumed(broker, Resume({broker.stream_id: 1})) == (ResumeResult("same", 2), [])


@pytest.mark.parametrize(("replay_size", "lost"), [(10, 0), (2, 1)])
def test_a_stream_new_to_the_client_sends_every_held_finding(replay_size: int, lost: int) -> None:
    """The server restarted (or another answers): the client has seen none of its findings."""
    broker = FindingsBroker(NoopMetrics(), replay_size=replay_size)
    publish(broker, finding(1), finding(2), finding(3))
    result, received = resumed(broker, Resume({"0123456789abcdef": 500}))
    assert result == ResumeResult("new", lost)
    assert [sequence for _, sequence, _ in received] == [1, 2, 3][lost:]


def test_a_client_back_on_a_stream_it_followed_resumes_its_own_cursor_there() -> None:
    """A -> B -> A (a rollback, a Service over replicas): A sends only what came after the
    client's last finding of A, whatever it saw of B."""
    broker = FindingsBroker(NoopMetrics())
    publish(broker, finding(1), finding(2), finding(3), finding(4))
    result, received = resumed(broker, Resume({broker.stream_id: 3, "0123456789abcdef": 9}))
    assert result == ResumeResult("same", 0)
    assert received == [("f4", 4, 0)]


def test_a_replay_larger_than_the_queue_loses_nothing_held() -> None:
    """The replay is read from the held findings, not copied into the queue, which bounds
    only the live findings."""
    broker = FindingsBroker(NoopMetrics(), queue_size=2, replay_size=5000)
    publish(broker, *(finding(i) for i in range(1, 1501)))
    subscription = broker.subscribe(StreamFilter(), Resume({broker.stream_id: 0}))
    publish(broker, finding(1501), finding(1502))
    assert [sequence for _, sequence, _ in drain(subscription)] == list(range(1, 1503))
    assert subscription.dropped == 0


def test_what_the_broker_lets_go_before_a_slow_replay_reads_it_is_told_and_counted() -> None:
    registry = CollectorRegistry()
    broker = FindingsBroker(PrometheusMetrics(registry), replay_size=3)
    publish(broker, *(finding(i) for i in range(1, 4)))
    subscription = broker.subscribe(StreamFilter(), Resume({broker.stream_id: 0}))
    first = asyncio.run(subscription.next())
    assert first is not None and first.sequence == 1
    publish(broker, finding(4), finding(5), finding(6))  # 2 and 3 are let go; 4-6 are live
    assert drain(subscription) == [("f4", 4, 2), ("f5", 5, 0), ("f6", 6, 0)]
    assert subscription.dropped == 2
    assert registry.get_sample_value(DROPPED) == 2


def test_a_subscriber_gone_with_held_findings_queued_loses_none_of_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A client that will resume gets them again: no drop is counted, and the alert on
    stream drops does not fire at every reconnect."""
    registry = CollectorRegistry()
    broker = FindingsBroker(PrometheusMetrics(registry), replay_size=2)
    subscription = broker.subscribe(StreamFilter())
    publish(broker, *(finding(i) for i in range(1, 5)))
    with caplog.at_level(logging.INFO):
        broker.unsubscribe(subscription)
    assert registry.get_sample_value(DROPPED) == 2  # f1 and f2, no longer held
    assert [r.getMessage() for r in caplog.records] == [
        "a findings stream subscriber left with 2 findings undelivered"
        " (counted in toolwatch_stream_dropped_findings_total)",
        "a findings stream subscriber left with 2 findings undelivered, held for it if it"
        " resumes (output.stream_replay_size)",
    ]


def test_findings_held_for_a_subscriber_that_never_resumed_are_counted_lost_at_shutdown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Held for its resume, they go with the process at a SIGTERM: the restarted server holds
    none of them, and a client resuming there is told only that the stream is new. Those no
    longer held when it left were counted then (f1, f2); f3 and f4 at the shutdown."""
    registry = CollectorRegistry()
    broker = FindingsBroker(PrometheusMetrics(registry), replay_size=2)
    gone = broker.subscribe(StreamFilter())
    publish(broker, *(finding(i) for i in range(1, 5)))
    broker.unsubscribe(gone)
    assert registry.get_sample_value(DROPPED) == 2
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        broker.close()
    assert registry.get_sample_value(DROPPED) == 4
    assert [r.getMessage() for r in caplog.records] == [
        "2 findings held for 1 findings stream subscriber(s) that left and did not resume go"
        " with the process (toolwatch is shutting down; counted in"
        " toolwatch_stream_dropped_findings_total)"
    ]
    broker.close()  # a second close counts nothing again
    assert registry.get_sample_value(DROPPED) == 4


def test_a_subscriber_that_resumed_is_not_counted_at_shutdown() -> None:
    """Of two that left with findings held (filters ``HIGH`` and all), the one that resumed
    was sent them: only the other's are counted at the shutdown, whichever resumed."""
    for resumes_with in (HIGH, StreamFilter()):
        registry = CollectorRegistry()
        broker = FindingsBroker(PrometheusMetrics(registry), replay_size=10)
        high, everything = broker.subscribe(HIGH), broker.subscribe(StreamFilter())
        publish(broker, finding(1), finding(2, Severity.LOW), finding(3))
        broker.unsubscribe(high)  # f1, f3 held for it
        broker.unsubscribe(everything)  # f1, f2, f3 held for it
        result, sent = resumed(broker, Resume({broker.stream_id: 0}), resumes_with)
        assert result == ResumeResult("same", 0)
        broker.close()
        other = 3 if resumes_with == HIGH else 2
        assert (len(sent), registry.get_sample_value(DROPPED)) == (5 - other, other)


def test_a_resume_on_a_new_stream_claims_no_departed_subscriber() -> None:
    """A cursor of another stream (the client followed another replica) is not a subscriber
    that left this one: what was held for the one that left is still counted."""
    registry = CollectorRegistry()
    broker = FindingsBroker(PrometheusMetrics(registry), replay_size=10)
    gone = broker.subscribe(StreamFilter())
    publish(broker, finding(1))
    broker.unsubscribe(gone)
    assert resumed(broker, Resume({"0123456789abcdef": 7}))[0] == ResumeResult("new", 0)
    broker.close()
    assert registry.get_sample_value(DROPPED) == 1


def test_held_findings_are_kept_rendered_and_redacted() -> None:
    """Argument values a loop finding carries are not held, only their redacted text."""
    broker = FindingsBroker(NoopMetrics())
    publish(broker, finding(1, details={"fields": {"": {"q": "x" * 60_000}}}))
    (held,) = broker.held
    assert held.message.details["fields"] == '{"":"[redacted]"}'
    assert held.message.ByteSize() < 500


def test_a_cursor_past_this_streams_last_finding_is_refused() -> None:
    broker = FindingsBroker(NoopMetrics())
    publish(broker, finding(1))
    with pytest.raises(
        ValueError,
        match=rf"resume cursor 2 is past the last finding of stream {broker.stream_id} \(1\)",
    ):
        broker.check_resume(Resume({broker.stream_id: 2}))
    broker.check_resume(Resume({broker.stream_id: 1}))
    broker.check_resume(Resume({"another": 2}))  # another stream's cursor is no error


def test_resume_requests() -> None:
    assert Resume.from_request(findings_pb2.SubscribeRequest()) is None
    request = findings_pb2.SubscribeRequest(
        resume=[findings_pb2.StreamCursor(stream_id="ab", after=7), {"stream_id": "cd"}]
    )
    assert Resume.from_request(request) == Resume({"ab": 7, "cd": 0})
    tokens = [{"stream_id": "ab", "after": 7, "token": "t1"}, {"stream_id": "cd", "token": ""}]
    with_tokens = Resume.from_request(findings_pb2.SubscribeRequest(resume=tokens))
    assert with_tokens == Resume({"ab": 7, "cd": 0}, {"ab": "t1"})  # "": a client without one
    with pytest.raises(ValueError, match="resume\\[1\\] has no stream_id"):
        Resume.from_request(
            findings_pb2.SubscribeRequest(resume=[{"stream_id": "ab"}, {"after": 7}])
        )


def test_the_replay_size_is_validated() -> None:
    with pytest.raises(ValueError, match="replay_size must be >= 0, got -1"):
        FindingsBroker(NoopMetrics(), replay_size=-1)


def test_findings_published_during_a_replay_join_it_rather_than_overflow_the_queue() -> None:
    broker = FindingsBroker(NoopMetrics(), queue_size=2)
    publish(broker, finding(1), finding(2))
    subscription = broker.subscribe(StreamFilter(), Resume({broker.stream_id: 0}))
    publish(broker, *(finding(i) for i in range(3, 11)))  # the replay has not been read yet
    assert [sequence for _, sequence, _ in drain(subscription)] == list(range(1, 11))
    assert subscription.dropped == 0


def test_with_nothing_held_a_resumed_subscription_gets_live_findings_through_its_queue() -> None:
    broker = FindingsBroker(NoopMetrics(), replay_size=0)
    publish(broker, finding(1))
    subscription = broker.subscribe(StreamFilter(), Resume({broker.stream_id: 1}))
    publish(broker, finding(2))
    assert drain(subscription) == [("f2", 2, 0)]


def test_an_unfiltered_count_of_unheld_findings_is_the_indexed_count_of_every_finding() -> None:
    """A subscriber that asked for no filter is told its losses without the index being read:
    the same count as a filter that every finding passes, which reads it."""
    broker = FindingsBroker(NoopMetrics(), replay_size=4)  # indexes 64 findings' tags
    severities = list(Severity)
    for number in range(1, 101):
        publish(broker, finding(number, severities[number % len(severities)]))
    everything = StreamFilter(categories=frozenset(Category))
    assert StreamFilter().passes_all and not everything.passes_all
    assert not HIGH.passes_all and not StreamFilter(agents=frozenset({"bot"})).passes_all
    for first, last in [(1, 96), (30, 60), (50, 96), (90, 80), (37, 37)]:
        count = broker.unheld_passing(first, last, StreamFilter())
        assert count == broker.unheld_passing(first, last, everything) == max(0, last - first + 1)
    high = sum(severities[n % len(severities)].rank >= Severity.HIGH.rank for n in range(50, 97))
    assert broker.unheld_passing(50, 96, HIGH) == high


def test_a_reloaded_redaction_redacts_what_is_held_and_queued_again() -> None:
    """A value shown before a reload that hides it is sent to no one after it: not from a
    subscriber's queue, not to a client that resumes from the held findings."""
    shown = {"fields": {"order_id": "A-7", "amount": 9}}
    broker = FindingsBroker(NoopMetrics(), Redaction(show_values=True), replay_size=2)
    waiting = broker.subscribe(StreamFilter())
    publish(broker, *(finding(n, details=shown, tool="issue_refund") for n in (1, 2, 3)))
    assert broker.redact_with(Redaction(show_fields=frozenset({"order_id"}))) == 3
    publish(broker, finding(4, details=shown, tool="issue_refund"))
    hidden = '{"order_id":"A-7","amount":"[redacted]"}'
    assert [m.details["fields"] for m, _ in waiting.waiting] == [hidden] * 4
    _, replayed = resumed(broker, Resume({broker.stream_id: 2}))
    assert [sequence for _, sequence, _ in replayed] == [3, 4]
    assert {held.message.details["fields"] for held in broker.held} == {hidden}


def test_a_reload_decides_on_a_long_tool_name_whole_not_as_sent() -> None:
    """A tool named longer than ``MAX_STREAM_TEXT`` is held and queued by its name cut. A
    reload decides which of its values still show by its whole name, as publishing did: the
    field show_fields names of that tool stays shown, for a client that resumes and for one
    whose queue holds it, and the same field of a tool whose name is cut alike stays hidden.
    (It was hidden in both: the cut name matched no entry.)"""
    broker = FindingsBroker(NoopMetrics(), Redaction(show_values=True))
    waiting = broker.subscribe(StreamFilter())
    publish(
        broker, finding(1, details=ORDER, tool=LONG_TOOL), finding(2, details=ORDER, tool=TWIN_TOOL)
    )
    assert {held.message.tool for held in broker.held} == {LONG_TOOL[: MAX_STREAM_TEXT - 1] + "…"}

    # (A tool the entries do not name is redacted as a finding on no tool: "None.amount"
    # names a tool called None.)
    reloaded = Redaction(show_fields=frozenset({f"{LONG_TOOL}.order_id", "None.amount"}))
    assert broker.redact_with(reloaded) == 2

    expected = {
        "f1": '{"order_id":"A-7","amount":"[redacted]"}',
        "f2": '{"order_id":"[redacted]","amount":"[redacted]"}',
    }
    assert resumed_fields(broker) == expected
    assert shown_fields(waiting) == expected


def test_a_reload_that_hides_a_field_of_a_long_named_tool_hides_it_in_held_findings() -> None:
    """What the new show_fields no longer names is hidden, long tool name or not; what it
    still names stays shown; what was hidden when published stays hidden even when the
    reload names it (its value is no longer held)."""
    published = Redaction(show_fields=frozenset({f"{LONG_TOOL}.order_id"}))
    broker = FindingsBroker(NoopMetrics(), published)
    publish(broker, finding(1, details=ORDER, tool=LONG_TOOL))
    assert resumed_fields(broker) == {"f1": '{"order_id":"A-7","amount":"[redacted]"}'}

    broker.redact_with(Redaction(show_fields=frozenset({f"{LONG_TOOL}.amount", "customer"})))
    assert resumed_fields(broker) == {"f1": '{"order_id":"[redacted]","amount":"[redacted]"}'}

    broker = FindingsBroker(NoopMetrics(), published)
    publish(broker, finding(1, details=ORDER, tool=LONG_TOOL))
    broker.redact_with(Redaction(show_fields=frozenset({f"{LONG_TOOL}.order_id", "amount"})))
    assert resumed_fields(broker) == {"f1": '{"order_id":"A-7","amount":"[redacted]"}'}


@pytest.mark.parametrize("tool", ["issue_refund", "t" * MAX_STREAM_TEXT])
def test_a_reload_redacts_a_tool_named_within_what_is_sent_by_its_name(tool: str) -> None:
    broker = FindingsBroker(NoopMetrics(), Redaction(show_values=True))
    publish(broker, finding(1, details=ORDER, tool=tool), finding(2, details=ORDER, tool="x"))

    broker.redact_with(Redaction(show_fields=frozenset({f"{tool}.order_id"})))

    assert resumed_fields(broker) == {
        "f1": '{"order_id":"A-7","amount":"[redacted]"}',
        "f2": '{"order_id":"[redacted]","amount":"[redacted]"}',
    }


def test_a_reload_decides_on_the_whole_tool_name_of_findings_only_queued() -> None:
    """Findings a subscriber's queue holds and the broker does not (here it holds none),
    the copy told of a loss among them, are redacted again by the whole name too."""
    shown = Redaction(show_fields=frozenset({f"{LONG_TOOL}.order_id"}))
    broker = FindingsBroker(NoopMetrics(), shown, queue_size=2, replay_size=0)
    waiting = broker.subscribe(StreamFilter())
    publish(broker, *(finding(n, details=ORDER, tool=LONG_TOOL) for n in (1, 2, 3)))  # 3 lost
    assert asyncio.run(waiting.next()) is not None  # f1 sent: room for the next one
    publish(broker, finding(4, details=ORDER, tool=LONG_TOOL))  # queued, told of f3

    assert broker.redact_with(Redaction(show_fields=shown.show_fields | {"customer"})) == 2

    assert shown_fields(broker.subscribe(StreamFilter())) == {}  # nothing held
    messages = received(waiting)
    assert [(m.explanation, m.missed_before) for m in messages] == [("f2", 0), ("f4", 1)]
    assert {m.details["fields"] for m in messages} == {'{"order_id":"A-7","amount":"[redacted]"}'}


def test_a_finding_that_cannot_be_rendered_takes_no_number() -> None:
    """Its publication fails (an output failure, counted by the caller), and the findings
    held stay numbered without a gap, as a resume reads them: one rendered after its number
    was taken made a resume skip a finding it never sent, or fail with an IndexError."""
    broker = FindingsBroker(NoopMetrics())
    publish(broker, finding(1), finding(2))
    with pytest.raises(ValueError, match="surrogates not allowed"):
        publish(broker, finding(3, tool="x\ud800"))  # no protobuf string can hold it
    publish(broker, finding(4), finding(5))
    assert broker.sequence == 4
    assert [held.message.sequence for held in broker.held] == [1, 2, 3, 4]
    assert resumed(broker, Resume({broker.stream_id: 1})) == (
        ResumeResult("same", 0),
        [("f2", 2, 0), ("f4", 3, 0), ("f5", 4, 0)],
    )
    assert resumed(broker, Resume({broker.stream_id: 3}))[1] == [("f5", 4, 0)]


def test_a_resume_sent_none_of_a_departed_subscribers_findings_does_not_claim_them() -> None:
    """Two clients: one unfiltered leaves with f1 and f2 held for it and never comes back;
    one following only MISSING_VERIFICATION_STEP, sent nothing, loses its connection and
    resumes from 0. It is sent neither finding, so it is not the one that left them: they
    are still counted lost at shutdown."""
    registry = CollectorRegistry()
    broker = FindingsBroker(PrometheusMetrics(registry), replay_size=10)
    only_verification = StreamFilter(categories=frozenset({Category.MISSING_VERIFICATION_STEP}))
    orders = broker.subscribe(only_verification)
    everything = broker.subscribe(StreamFilter())
    publish(broker, finding(1), finding(2))
    broker.unsubscribe(everything)  # f1, f2 held for it; it never resumes
    broker.unsubscribe(orders)  # nothing queued for it: nothing held
    back = broker.subscribe(only_verification, Resume({broker.stream_id: 0}))
    assert drain(back) == []  # f1 and f2 are not for it
    broker.unsubscribe(back)

    broker.close()

    assert registry.get_sample_value(DROPPED) == 2
