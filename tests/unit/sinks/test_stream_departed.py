"""Which departed subscriber a resume claims (``FindingsBroker._resumes``)."""

from __future__ import annotations

import re
import secrets

from prometheus_client import CollectorRegistry

from tests.unit.sinks.broker_support import DROPPED, publish, read, resuming
from toolwatch.metrics import NoopMetrics
from toolwatch.sinks.prometheus import PrometheusMetrics
from toolwatch.sinks.stream.broker import FindingsBroker
from toolwatch.sinks.stream.filters import StreamFilter
from toolwatch.sinks.stream.resumes import Resume, ResumeResult


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


def claims(resume_token: str) -> tuple[list[int], float | None]:
    """Two unfiltered clients: B read f1, f2 and left with f3, f4 held for it; A subscribed
    after f2, read nothing, and left with f3..f6 held for it. A resumes after 2 with
    ``resume_token`` (``"A"``: the token of its subscription; ``"B"``: B's) and reads its
    replay; the server shuts down. What A read, and what was counted."""
    registry = CollectorRegistry()
    broker = FindingsBroker(PrometheusMetrics(registry), replay_size=100)
    b = broker.subscribe(StreamFilter())
    publish(broker, 1, 2)
    assert read(b, 2) == [1, 2]
    a = broker.subscribe(StreamFilter())
    publish(broker, 3, 4)
    broker.unsubscribe(b)  # 3, 4 held for B
    publish(broker, 5, 6)
    broker.unsubscribe(a)  # 3..6 held for A
    token = {"A": a.token, "B": b.token}.get(resume_token, resume_token)
    back = broker.subscribe(StreamFilter(), resuming(broker, 2, token))
    sent = read(back, 4)
    broker.unsubscribe(back)
    broker.close()
    return sent, registry.get_sample_value(DROPPED)


def test_a_resume_with_its_token_claims_its_own_departure_and_no_other() -> None:
    """Without a token the guess takes B's (the earlier of two departures of its filter), so
    at shutdown A's 4, which it was sent, are counted and B's 2 are not. With A's token, A's
    own: B's 2 are counted."""
    assert claims("") == ([3, 4, 5, 6], 4)  # guessed: B's
    assert claims("A") == ([3, 4, 5, 6], 2)


def test_a_token_of_no_departure_held_claims_nothing() -> None:
    """Another server's, one forgotten, or one made up: what was held for A and for B is
    counted at shutdown (4 and 2), though A was sent its own. A token is no key to another
    client's findings but that client's own (B's token takes B's, which only B had)."""
    assert claims(secrets.token_hex(16)) == ([3, 4, 5, 6], 6)
    assert claims("B") == ([3, 4, 5, 6], 4)


def test_each_subscription_has_its_own_random_token() -> None:
    broker = FindingsBroker(NoopMetrics())
    tokens = {broker.subscribe(StreamFilter()).token for _ in range(20)}
    assert len(tokens) == 20
    assert all(re.fullmatch("[0-9a-f]{32}", token) for token in tokens)


def test_what_was_held_for_a_departure_and_let_go_before_its_resume_is_counted_then() -> None:
    """A client leaves with f3, f4 held for it (``replay_size`` 4); f5..f8 are published, so
    the broker lets go of f3, f4; it resumes after 2 with its token and is told of them lost.
    Was: told to the client, never counted (only a departure never resumed counts them, at
    shutdown). Now: counted as its resume claims them: 2, and nothing at shutdown."""
    registry = CollectorRegistry()
    broker = FindingsBroker(PrometheusMetrics(registry), replay_size=4)
    gone = broker.subscribe(StreamFilter())
    publish(broker, 1, 2)
    assert read(gone, 2) == [1, 2]
    publish(broker, 3, 4)
    broker.unsubscribe(gone)
    publish(broker, 5, 6, 7, 8)
    assert registry.get_sample_value(DROPPED) == 0
    back = broker.subscribe(StreamFilter(), resuming(broker, 2, gone.token))
    assert back.resumed == ResumeResult("same", 2)
    assert registry.get_sample_value(DROPPED) == 2
    assert read(back, 4) == [5, 6, 7, 8]
    broker.unsubscribe(back)
    broker.close()
    assert registry.get_sample_value(DROPPED) == 2


def test_the_departures_held_are_the_latest_max_subscribers() -> None:
    """Memory stays bounded however many clients leave: of three departures with a finding
    held each, with ``max_subscribers`` 2 (``replay_size`` 2), the oldest is let go as the
    third leaves, and what it held (f1) counted then; the two latest are counted at
    shutdown. Its client's resume after 0, with its token, claims nothing, is told of f1
    lost and counts it no second time; it is sent f2, f3 (held for the others), and keeps
    its token, remembered as a token that left nothing held.
    Was: the oldest was forgotten uncounted: f1, which its client never got, was told to it
    and never counted (2 in all). Now: 3.
    Was (da5ae9d): the resume got a new token, as one with a token the broker never gave
    does. Now: it keeps its own."""
    registry = CollectorRegistry()
    broker = FindingsBroker(PrometheusMetrics(registry), max_subscribers=2, replay_size=2)
    tokens = []
    for number in (1, 2, 3):
        subscription = broker.subscribe(StreamFilter())
        publish(broker, number)
        broker.unsubscribe(subscription)
        tokens.append(subscription.token)
    assert registry.get_sample_value(DROPPED) == 1  # f1, as its departure was let go
    first = broker.subscribe(StreamFilter(), resuming(broker, 0, tokens[0]))
    assert (first.resumed, first.token) == (ResumeResult("same", 1), tokens[0])
    assert registry.get_sample_value(DROPPED) == 1
    assert read(first, 2) == [2, 3]
    broker.unsubscribe(first)
    broker.close()
    assert registry.get_sample_value(DROPPED) == 3  # then f2 and f3
