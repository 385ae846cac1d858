"""What a resume's token claims, and which token the resumed subscription gets
(``FindingsBroker._resumes``, ``_supersede``, ``_keep``).

A client reads findings here through ``Subscription.next``, as ``deliver`` does: the finding
it took last is the one being written (``Subscription.writing``), as when a write waits on a
connection gone silent."""

from __future__ import annotations

import asyncio
import secrets

import pytest
from prometheus_client import CollectorRegistry

from tests import factories
from tests.unit.sinks.broker_support import DROPPED, publish, read, resuming
from toolwatch._proto.toolwatch.v1 import findings_pb2
from toolwatch.model import Category, Severity
from toolwatch.sinks.prometheus import PrometheusMetrics
from toolwatch.sinks.stream.broker import FindingsBroker, SubscribersFullError
from toolwatch.sinks.stream.filters import StreamFilter
from toolwatch.sinks.stream.resumes import Resume, ResumeResult
from toolwatch.sinks.stream.subscription import Subscription


def broker_of(**settings: int) -> tuple[FindingsBroker, CollectorRegistry]:
    registry = CollectorRegistry()
    return FindingsBroker(PrometheusMetrics(registry), **settings), registry


def take(subscription: Subscription) -> findings_pb2.Finding:
    """The next finding, taken for a write that does not end (a connection gone silent)."""
    message = asyncio.run(subscription.next())
    assert message is not None
    assert subscription.writing is message
    return message


def test_a_resume_with_the_token_of_an_open_subscription_supersedes_it() -> None:
    """The old subscription took f1 for a write that hangs and has f2, f3 queued when its
    client resumes after 0 with its token. The resume takes its place and its token, and is
    sent f1..f3 (its replay); f4, published since, goes to it alone (not counted lost to the
    old one). When the old one's write fails at last (the server sees its connection gone),
    it holds and counts nothing: at shutdown nothing is counted.
    Was: the resume claimed nothing (no departed record yet), and the old one's f1..f3 were
    then held under its token, counted at shutdown: 3."""
    broker, registry = broker_of(replay_size=10)
    old = broker.subscribe(StreamFilter())
    publish(broker, 1, 2, 3)
    in_flight = take(old)
    back = broker.subscribe(StreamFilter(), resuming(broker, 0, old.token))
    assert broker.subscriptions == (back,)
    assert (back.token, back.resumed) == (old.token, ResumeResult("same", 0))
    publish(broker, 4)
    assert read(back, 4) == [1, 2, 3, 4]
    broker.unsubscribe(old, unsent=in_flight)  # as ``deliver`` does when its write fails
    assert registry.get_sample_value(DROPPED) == 0
    broker.close()
    assert registry.get_sample_value(DROPPED) == 0


def test_what_a_superseded_subscription_owed_and_was_let_go_is_counted_once() -> None:
    """``replay_size`` 2: the old subscription took f1 for a write that hangs, f2..f4 queued;
    the broker holds f3, f4. The resume after 0 is told of f1, f2 lost and sent f3, f4; f1
    (being written) and f2 (queued) are counted as the old one is superseded, as they would
    be as it left, and not again when it ends, nor at shutdown: 2."""
    broker, registry = broker_of(replay_size=2)
    old = broker.subscribe(StreamFilter())
    publish(broker, 1, 2, 3, 4)
    in_flight = take(old)
    back = broker.subscribe(StreamFilter(), resuming(broker, 0, old.token))
    assert back.resumed == ResumeResult("same", 2)
    assert registry.get_sample_value(DROPPED) == 2
    assert read(back, 2) == [3, 4]
    broker.unsubscribe(old, unsent=in_flight)
    broker.unsubscribe(back)
    broker.close()
    assert registry.get_sample_value(DROPPED) == 2


def test_what_the_client_of_a_superseded_subscription_has_is_not_counted() -> None:
    """The old subscription's client read f1, f2 (the server's write of f2 not seen done
    yet); f3, f4 are published and the broker (``replay_size`` 2) lets go of f1, f2. Its
    resume after 2 is told of nothing lost and sent f3, f4: f2, which its cursor says it
    has, is not counted, nor anything else."""
    broker, registry = broker_of(replay_size=2)
    old = broker.subscribe(StreamFilter())
    publish(broker, 1, 2)
    assert read(old, 2) == [1, 2]
    publish(broker, 3, 4)
    back = broker.subscribe(StreamFilter(), resuming(broker, 2, old.token))
    assert back.resumed == ResumeResult("same", 0)
    assert read(back, 2) == [3, 4]
    broker.unsubscribe(old)
    broker.close()
    assert registry.get_sample_value(DROPPED) == 0


def test_a_superseded_subscription_still_writing_keeps_a_slot_of_its_own() -> None:
    """``max_subscribers`` 2, both taken. A resume with the token of one takes that one's
    slot. The one superseded, its write waiting on a silent connection, still has a call
    open: a second resume with the token is refused until that call ends, so a client that
    resumes again and again keeps at most one call more than ``max_subscribers`` open.
    ``subscriber_count`` (the gauge) counts the calls open, a superseded one's included.
    Was: it left the superseded out: 2 while 3 calls were open, the gauge below what the
    refusals counted. Now: 3, one more than ``max_subscribers`` until the one superseded
    last has ended, and the refusal says how many."""
    broker, _registry = broker_of(max_subscribers=2, replay_size=10)
    old = broker.subscribe(StreamFilter())
    broker.subscribe(StreamFilter())
    publish(broker, 1)
    take(old)
    back = broker.subscribe(StreamFilter(), resuming(broker, 0, old.token))
    with pytest.raises(SubscribersFullError):
        broker.subscribe(StreamFilter(), resuming(broker, 0, back.token))
    with pytest.raises(SubscribersFullError, match="already has 3 subscribers, at most 2 "):
        broker.subscribe(StreamFilter())
    assert broker.subscriber_count == 3
    broker.unsubscribe(old)  # its call ends
    assert broker.subscriber_count == 2
    again = broker.subscribe(StreamFilter(), resuming(broker, 0, back.token))
    assert (broker.subscriber_count, again.token) == (3, old.token)
    broker.unsubscribe(back)  # the call of the one superseded now ends
    assert broker.subscriber_count == 2


def test_a_resumed_subscription_keeps_the_token_it_claimed() -> None:
    """A client left with f1..f3 held for it (token T); its resume claims them and keeps T,
    then ends before its client learnt anything (its answer lost): f1..f3, not read, are held
    under T again, and the client's next try with T, the only token it has, claims them.
    Was: the resume got a new token, under which f1..f3 were held, never claimed, counted at
    shutdown though the next try was sent them: 3. Now: 0."""
    broker, registry = broker_of(replay_size=10)
    first = broker.subscribe(StreamFilter())
    publish(broker, 1, 2, 3)
    broker.unsubscribe(first)
    unanswered = broker.subscribe(StreamFilter(), resuming(broker, 0, first.token))
    assert unanswered.token == first.token
    broker.unsubscribe(unanswered)
    again = broker.subscribe(StreamFilter(), resuming(broker, 0, first.token))
    assert (again.token, again.resumed) == (first.token, ResumeResult("same", 0))
    assert read(again, 3) == [1, 2, 3]
    broker.unsubscribe(again)
    broker.close()
    assert registry.get_sample_value(DROPPED) == 0


def test_a_resume_of_a_subscription_that_left_nothing_held_keeps_its_token() -> None:
    """Its client read all it was sent: nothing is held for it, but its token still names it,
    so the resume keeps it (a retry after a lost answer then claims what that resume left)."""
    broker, registry = broker_of(replay_size=10)
    first = broker.subscribe(StreamFilter())
    publish(broker, 1)
    assert read(first, 1) == [1]
    broker.unsubscribe(first)
    publish(broker, 2)
    unanswered = broker.subscribe(StreamFilter(), resuming(broker, 1, first.token))
    assert unanswered.token == first.token
    broker.unsubscribe(unanswered)  # f2 held under the token
    again = broker.subscribe(StreamFilter(), resuming(broker, 1, first.token))
    assert read(again, 1) == [2]
    broker.unsubscribe(again)
    broker.close()
    assert registry.get_sample_value(DROPPED) == 0


@pytest.mark.parametrize(
    "sends",
    ["no resume", "no token", "a token of no subscription", "a token of another stream"],
)
def test_a_subscription_whose_resume_names_no_subscription_gets_a_new_token(sends: str) -> None:
    """A fresh subscription, a resume without a token (guessed), and one whose token this
    broker never gave (another server's, or one a client made up: not taken) each get a new
    random token."""
    broker, _registry = broker_of(replay_size=10)
    made_up = secrets.token_hex(16)
    resume = {
        "no resume": None,
        "no token": Resume({broker.stream_id: 0}),
        "a token of no subscription": resuming(broker, 0, made_up),
        "a token of another stream": Resume(
            {broker.stream_id: 0, "elsewhere": 3}, {"elsewhere": made_up}
        ),
    }[sends]
    subscription = broker.subscribe(StreamFilter(), resume)
    assert len(subscription.token) == 32
    assert subscription.token != made_up


def test_a_resume_claims_its_record_whatever_its_filter_and_counts_what_passes_it() -> None:
    """An unfiltered client left with f1..f4 held for it (f1, f3 high; f2, f4 low); f5
    (high) and f6 (low) are published and the broker (``replay_size`` 4) lets go of f1, f2.
    It resumes with its token asking for high findings only: it is told of f1 lost (counted
    now) and sent f3, f5. f2, f4, which its new filter rejects, are neither sent nor
    counted, let go or held, and its record is claimed: nothing at shutdown.
    Was: f2 counted as the resume claimed the record: 2."""
    broker, registry = broker_of(replay_size=4)
    trace = factories.tool_trace(agent="bot", service="svc")
    gone = broker.subscribe(StreamFilter())
    severities = [Severity.HIGH, Severity.LOW] * 3
    findings = [
        factories.finding(
            category=Category.TOOL_ORDER_DRIFT, severity=severity, explanation=f"f{number}"
        )
        for number, severity in enumerate(severities, start=1)
    ]
    broker.publish(trace, findings[:4])
    broker.unsubscribe(gone)
    broker.publish(trace, findings[4:])
    high = StreamFilter(min_severity=Severity.HIGH)
    back = broker.subscribe(high, resuming(broker, 0, gone.token))
    assert back.resumed == ResumeResult("same", 1)
    assert registry.get_sample_value(DROPPED) == 1
    assert read(back, 2) == [3, 5]
    broker.unsubscribe(back)
    broker.close()
    assert registry.get_sample_value(DROPPED) == 1
