"""Stream filters, the broker's bookkeeping and tail's line format, without a network."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import logging

import pytest
from prometheus_client import CollectorRegistry

from tests import factories
from toolwatch import tail_access, tail_cursor, tail_format
from toolwatch._proto.toolwatch.v1 import findings_pb2
from toolwatch.metrics import NoopMetrics
from toolwatch.model import Category, ReferenceKind, Severity
from toolwatch.model_evaluation import Finding
from toolwatch.model_traces import ToolTrace
from toolwatch.sinks.findings import FindingSink, Redaction, finding_record
from toolwatch.sinks.prometheus import PrometheusMetrics
from toolwatch.sinks.stream.broker import FindingsBroker, SubscribersFullError
from toolwatch.sinks.stream.filters import StreamFilter
from toolwatch.sinks.stream.messages import finding_message
from toolwatch.sinks.stream.service import deliver
from toolwatch.sinks.stream.subscription import Subscription
from toolwatch.tail_format import _Printer, format_finding_line

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


def finding(
    category: Category = Category.TOOL_ORDER_DRIFT,
    severity: Severity = Severity.MEDIUM,
) -> Finding:
    return factories.finding(
        category=category,
        severity=severity,
        evaluator="order",
        reference=ReferenceKind.EXPECTED,
        score=0.5,
        explanation="order",
        trace_id=TRACE_ID,
    )


def test_an_empty_request_matches_everything() -> None:
    stream_filter = StreamFilter.from_request(findings_pb2.SubscribeRequest())
    assert stream_filter == StreamFilter()
    assert stream_filter.matches(finding(severity=Severity.LOW), agent=None)


def test_request_names_are_case_insensitive() -> None:
    request = findings_pb2.SubscribeRequest(
        categories=["tool_order_drift"], min_severity="HIGH", agents=["a"]
    )
    assert StreamFilter.from_request(request) == StreamFilter(
        frozenset({Category.TOOL_ORDER_DRIFT}), Severity.HIGH, frozenset({"a"})
    )


@pytest.mark.parametrize(
    ("stream_filter", "item", "agent", "matches"),
    [
        (StreamFilter(min_severity=Severity.HIGH), finding(severity=Severity.MEDIUM), None, False),
        (StreamFilter(min_severity=Severity.HIGH), finding(severity=Severity.CRITICAL), None, True),
        (StreamFilter(frozenset({Category.REFUSAL_REGRESSION})), finding(), None, False),
        (StreamFilter(frozenset({Category.TOOL_ORDER_DRIFT})), finding(), None, True),
        (StreamFilter(agents=frozenset({"bot"})), finding(), "bot", True),
        (StreamFilter(agents=frozenset({"bot"})), finding(), "other", False),
        (StreamFilter(agents=frozenset({"bot"})), finding(), None, False),
    ],
)
def test_filter_matching(
    stream_filter: StreamFilter, item: Finding, agent: str | None, matches: bool
) -> None:
    assert stream_filter.matches(item, agent) is matches


@pytest.mark.parametrize(
    ("agents", "matches"),
    [({"support"}, True), ({"Billing"}, True), ({"other"}, False)],
)
def test_a_finding_on_a_nested_agents_call_reaches_its_subscribers_and_the_runs(
    agents: set[str], matches: bool
) -> None:
    nested = dataclasses.replace(finding(), agent="support", details={"call_agent": "billing"})
    stream_filter = StreamFilter(agents=frozenset(a.casefold() for a in agents))
    assert stream_filter.matches(nested, "support") is matches


def test_the_broker_is_a_finding_sink_and_validates_its_queue_size() -> None:
    broker: FindingSink = FindingsBroker(NoopMetrics())
    assert isinstance(broker, FindingsBroker)
    with pytest.raises(ValueError, match="queue_size"):
        FindingsBroker(NoopMetrics(), queue_size=0)


def test_the_broker_holds_at_most_max_subscribers_at_once() -> None:
    broker = FindingsBroker(NoopMetrics(), max_subscribers=2)
    first, _second = broker.subscribe(StreamFilter()), broker.subscribe(StreamFilter())
    with pytest.raises(SubscribersFullError, match=r"already has 2 subscribers"):
        broker.subscribe(StreamFilter())
    assert broker.subscriber_count == 2

    broker.unsubscribe(first)
    broker.subscribe(StreamFilter())  # a slot came free
    assert broker.subscriber_count == 2
    with pytest.raises(ValueError, match="max_subscribers must be >= 1, got 0"):
        FindingsBroker(NoopMetrics(), max_subscribers=0)


def test_a_closed_broker_refuses_subscriptions() -> None:
    broker = FindingsBroker(NoopMetrics())
    broker.close()
    assert broker.closed
    with pytest.raises(RuntimeError, match="closed"):
        broker.subscribe(StreamFilter())


def test_a_subscription_drains_its_queue_before_ending() -> None:
    async def scenario() -> list[str | None]:
        subscription = Subscription(StreamFilter(), queue_size=2)
        offers = [subscription.offer(findings_pb2.Finding(explanation=str(i))) for i in range(3)]
        assert offers == [True, True, False]
        assert subscription.dropped == 1
        subscription.close()
        assert not subscription.offer(findings_pb2.Finding())
        received = [await subscription.next() for _ in range(3)]
        return [m.explanation if m is not None else None for m in received]

    assert asyncio.run(scenario()) == ["0", "1", None]


def test_each_lost_finding_is_told_once_before_the_next_or_after_the_last() -> None:
    async def scenario() -> list[tuple[str, int, int]]:
        subscription = Subscription(StreamFilter(missed_after=True), queue_size=2)
        shared = [findings_pb2.Finding(explanation=str(i)) for i in range(9)]
        offered = [subscription.offer(m) for m in shared[:5]]  # 0 and 1 queued; 2-4 lost
        received = [await subscription.next()]  # 0; 1 still queued
        offered += [subscription.offer(m) for m in shared[5:7]]  # 5 queued (told of 3); 6 lost
        received += [await subscription.next() for _ in range(2)]  # 1, then 5: told of 6
        assert offered == [True, True, False, False, False, True, False]
        assert all(m.missed_before == m.missed_after == 0 for m in shared)  # copies were told
        return [(m.explanation, m.missed_before, m.missed_after) for m in received if m]

    told = asyncio.run(scenario())
    assert told == [("0", 0, 0), ("1", 0, 0), ("5", 3, 1)]


def test_a_subscriber_that_does_not_read_missed_after_is_told_in_the_next_finding() -> None:
    async def scenario() -> list[tuple[str, int, int]]:
        subscription = Subscription(StreamFilter(), queue_size=1)
        for i in range(3):  # 0 queued; 1 and 2 lost
            subscription.offer(findings_pb2.Finding(explanation=str(i)))
        received = [await subscription.next()]  # the queue runs empty: nothing told yet
        subscription.offer(findings_pb2.Finding(explanation="3"))
        received.append(await subscription.next())
        return [(m.explanation, m.missed_before, m.missed_after) for m in received if m]

    assert asyncio.run(scenario()) == [("0", 0, 0), ("3", 2, 0)]


def test_drops_are_counted_per_subscriber() -> None:
    async def scenario() -> float | None:
        registry = CollectorRegistry()
        broker = FindingsBroker(PrometheusMetrics(registry), queue_size=1)
        everything = broker.subscribe(StreamFilter())
        critical_only = broker.subscribe(StreamFilter(min_severity=Severity.CRITICAL))
        broker.publish(_trace(), [finding(), finding(), finding(severity=Severity.CRITICAL)])
        assert (everything.dropped, critical_only.dropped) == (2, 0)
        return registry.get_sample_value("toolwatch_stream_dropped_findings_total")

    assert asyncio.run(scenario()) == 2.0


def _trace() -> ToolTrace:
    return factories.tool_trace(trace_id=TRACE_ID)


def _order_drift(traffic: str = "") -> findings_pb2.Finding:
    """A finding with a category, a severity, a trace and nothing else to label."""
    return findings_pb2.Finding(
        category="TOOL_ORDER_DRIFT",
        severity="low",
        trace_id=TRACE_ID,
        explanation="Ordering: 50%.",
        time_unix_nano=0,
        traffic=traffic,
    )


def test_a_line_leaves_out_labels_the_finding_does_not_have() -> None:
    message = _order_drift()
    assert format_finding_line(message) == (
        f"1970-01-01T00:00:00Z LOW TOOL_ORDER_DRIFT trace={TRACE_ID} — Ordering: 50%."
    )
    assert format_finding_line(message, colour=True).startswith(
        "1970-01-01T00:00:00Z \x1b[36mLOW TOOL_ORDER_DRIFT\x1b[0m "
    )


def test_a_candidates_finding_is_marked_on_the_line_and_production_s_is_not() -> None:
    message = _order_drift(traffic="shadow")
    assert format_finding_line(message).endswith(
        f"trace={TRACE_ID} traffic=shadow — Ordering: 50%."
    )
    message.traffic = "live"
    assert "traffic" not in format_finding_line(message)


def test_a_line_names_the_agent_that_made_the_call_when_not_the_run_s() -> None:
    """A sub-agent's call (an agent used as a tool) is on the run's line as agent=, the
    alert's label; call_agent= names who made it."""
    message = _order_drift()
    message.agent = "support-bot"
    message.details["call_agent"] = "billing-bot"
    assert format_finding_line(message).startswith(
        "1970-01-01T00:00:00Z LOW TOOL_ORDER_DRIFT agent=support-bot call_agent=billing-bot "
    )
    message.details["call_agent"] = "support-bot"
    assert "call_agent" not in format_finding_line(message)


SOURCE_TRACE = "0af7651916cd43dd8448eb211c80319c"


def test_a_line_names_the_golden_case_a_finding_was_judged_against() -> None:
    message = _order_drift()
    message.case_id = "refund-canary"
    assert format_finding_line(message).endswith(
        f"trace={TRACE_ID} case=refund-canary — Ordering: 50%."
    )


def test_a_line_names_the_shadow_source_run_and_pair_key() -> None:
    message = _order_drift(traffic="shadow")
    message.source_trace_id, message.pair_key = SOURCE_TRACE, "req-42"
    assert format_finding_line(message).endswith(
        f"trace={TRACE_ID} source_trace={SOURCE_TRACE} pair=req-42 traffic=shadow — Ordering: 50%."
    )


def test_a_finding_of_an_incomplete_run_says_so_first_on_the_line_and_in_json() -> None:
    """A finding of a run judged without all its spans (its root never came, say) is told
    apart on tail's line, right after the category, and in --json as the log has it; a whole
    run's says nothing of it."""
    trace = factories.tool_trace(trace_id=TRACE_ID)
    timed_out = dataclasses.replace(trace, complete=False, incomplete_reason="timed_out")
    message = finding_message(timed_out, finding(), Redaction(), 0)
    assert message.incomplete_reason == "timed_out"
    assert format_finding_line(message).startswith(
        f"1970-01-01T00:00:00Z MEDIUM TOOL_ORDER_DRIFT incomplete=timed_out trace={TRACE_ID} "
    )
    out = io.StringIO()
    _Printer(out, as_json=True, colour=False)(message, "")
    logged = finding_record(timed_out, finding(), Redaction(), 0)
    assert json.loads(out.getvalue())["incomplete_reason"] == logged["incomplete_reason"]
    assert logged["incomplete_reason"] == "timed_out"
    whole = finding_message(trace, finding(), Redaction(), 0)
    assert (whole.incomplete_reason, "incomplete" in format_finding_line(whole)) == ("", False)


def test_tail_json_has_the_findings_logs_keys_and_its_nulls() -> None:
    """``--json`` writes the findings-log object: the same keys in the same order; what a
    finding does not name is ``null`` (the stream's empty string), as in the log."""
    trace = factories.tool_trace(trace_id=TRACE_ID)
    against_source = dataclasses.replace(
        finding(), reference=ReferenceKind.SOURCE, source_trace_id=SOURCE_TRACE, pair_key="k"
    )
    names = ("case_id", "source_trace_id", "pair_key")
    for one in (finding(), against_source):
        logged = finding_record(trace, one, Redaction(), 0)
        out = io.StringIO()
        _Printer(out, as_json=True, colour=False)(finding_message(trace, one, Redaction(), 0), "")
        printed = json.loads(out.getvalue())
        assert list(printed) == list(logged)
        assert [printed[k] for k in names] == [logged[k] for k in names]
    assert [printed[k] for k in names] == [None, SOURCE_TRACE, "k"]


def test_control_characters_an_agent_sent_are_escaped_on_the_line() -> None:
    """Agent, tool and field names and the explanation come from spans: a terminal must not
    run their escape sequences, nor show a line break that forges a second finding."""
    message = findings_pb2.Finding(
        category="TOOL_ORDER_DRIFT",
        severity="low",
        agent="bot\x1b]0;owned\x07\x1b[2J",
        tool="refund\nLOW DANGEROUS_ACTION_DRIFT agent=x",
        field="id\u2028",
        trace_id=TRACE_ID,
        explanation="Ordering: 50%.\x9b1m\r\u202e",
        time_unix_nano=0,
    )
    line = format_finding_line(message, colour=True)
    assert line == (
        "1970-01-01T00:00:00Z \x1b[36mLOW TOOL_ORDER_DRIFT\x1b[0m"
        " agent=bot\\x1b]0;owned\\x07\\x1b[2J"
        " tool=refund\\nLOW DANGEROUS_ACTION_DRIFT agent=x field=id\\u2028"
        f" trace={TRACE_ID} — Ordering: 50%.\\x9b1m\\r\\u202e"
    )
    out = io.StringIO()
    _Printer(out, as_json=True, colour=False)(message, "")  # --json: escaped as JSON, read back
    (line,) = out.getvalue().splitlines()
    assert not [c for c in line if ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or c == "\u202e"]
    assert json.loads(line)["explanation"] == message.explanation


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("no_color", "coloured"), [(None, True), ("1", False), ("", True)])
def test_auto_colour_follows_the_terminal_and_no_color(
    monkeypatch: pytest.MonkeyPatch, no_color: str | None, coloured: bool
) -> None:
    if no_color is None:
        monkeypatch.delenv("NO_COLOR", raising=False)
    else:
        monkeypatch.setenv("NO_COLOR", no_color)
    assert tail_format._use_colour(Terminal()) is coloured
    assert tail_format._use_colour(io.StringIO()) is False


def test_findings_queued_for_a_subscriber_that_leaves_are_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A client stopped (SIGSTOP) until its connection is lost: what waited for it was lost
    # without a count.
    registry = CollectorRegistry()
    # Nothing held for a resume (see test_stream_resume for what is): every one is lost.
    broker = FindingsBroker(PrometheusMetrics(registry), queue_size=10, replay_size=0)
    gone = broker.subscribe(StreamFilter())
    kept = broker.subscribe(StreamFilter())
    broker.publish(factories.tool_trace(), [factories.finding()] * 3)
    with caplog.at_level(logging.WARNING):
        broker.unsubscribe(gone)
    assert registry.get_sample_value("toolwatch_stream_dropped_findings_total") == 3
    assert [r.getMessage() for r in caplog.records] == [
        "a findings stream subscriber left with 3 findings undelivered"
        " (counted in toolwatch_stream_dropped_findings_total)"
    ]
    assert broker.subscriber_count == 1 and kept.dropped == 0


@pytest.mark.parametrize("ending", ["the write fails", "the call is cancelled"])
def test_a_finding_taken_for_a_write_that_never_completes_is_counted_as_dropped(
    ending: str,
) -> None:
    """Delivered + dropped = published, also for the finding in hand when the stream ends:
    it had left the queue, so it was counted nowhere."""
    written: list[str] = []

    async def scenario() -> float | None:
        registry = CollectorRegistry()
        broker = FindingsBroker(PrometheusMetrics(registry), queue_size=10, replay_size=0)
        subscription = broker.subscribe(StreamFilter())
        broker.publish(_trace(), [factories.finding(explanation=str(i)) for i in range(5)])
        in_write = asyncio.Event()

        async def write(message: findings_pb2.Finding) -> None:
            if len(written) == 2:  # the third: 2 written, this one lost, 2 still queued
                in_write.set()
                if ending == "the write fails":
                    raise RuntimeError("the client went away")
                await asyncio.Event().wait()  # until cancelled
            written.append(message.explanation)

        task = asyncio.create_task(deliver(broker, subscription, write))
        await in_write.wait()
        if ending == "the call is cancelled":
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert broker.subscriber_count == 0
        return registry.get_sample_value("toolwatch_stream_dropped_findings_total")

    assert asyncio.run(scenario()) == 3.0
    assert written == ["0", "1"]


def test_a_write_that_fails_once_its_stream_was_revoked_is_withheld_not_lost() -> None:
    """The token went while a finding was being written, and the write then failed: what
    the stream had is withheld from a client no longer allowed, not a slow client's loss."""

    async def scenario() -> tuple[bool, float | None]:
        registry = CollectorRegistry()
        broker = FindingsBroker(PrometheusMetrics(registry), queue_size=10, replay_size=0)
        subscription = broker.subscribe(StreamFilter())
        broker.publish(_trace(), [factories.finding(explanation=str(i)) for i in range(3)])

        async def write(message: findings_pb2.Finding) -> None:
            subscription.revoke()  # a reload, while gRPC sends it
            raise RuntimeError("the client went away")

        accepted = await deliver(broker, subscription, write, allowed=lambda: True)
        return accepted, registry.get_sample_value("toolwatch_stream_dropped_findings_total")

    assert asyncio.run(scenario()) == (False, 0.0)


@pytest.mark.parametrize(
    ("host", "local"),
    [
        ("localhost", True),
        ("[::1]", True),
        ("dns:///localhost", True),
        ("ipv4:127.0.0.1", True),
        ("unix:/run/toolwatch.sock", True),
        ("10.0.0.7", False),
        ("dns:///toolwatch.example", False),
        ("unixbox.example.com", False),
    ],
)
def test_tail_knows_which_targets_keep_a_token_on_this_machine(host: str, local: bool) -> None:
    assert tail_access._local(host) is local


def test_an_agent_filter_ignores_case() -> None:
    request = findings_pb2.SubscribeRequest(agents=["Refund-Bot"])
    wanted = StreamFilter.from_request(request)
    assert wanted.matches(factories.finding(), "refund-bot")
    assert not wanted.matches(factories.finding(), "billing-bot")
    assert not wanted.matches(factories.finding(), None)


@pytest.mark.parametrize(
    ("resume", "streams"),
    [
        ({}, {"s1": 3, "s2": 7}),  # a fresh subscription starts where the stream was
        ({"toolwatch-resume": "same", "toolwatch-resume-lost": "0"}, {"s1": 3, "s2": 5}),
        ({"toolwatch-resume": "new", "toolwatch-resume-lost": "0"}, {"s1": 3, "s2": 0}),
    ],
)
def test_tails_cursors_after_subscribing(resume: dict[str, str], streams: dict[str, int]) -> None:
    """Where tail would resume from: a fresh cursor at the stream's sequence (from 0, it would
    be sent what was published before it subscribed), a stream new to it from its start."""
    state = tail_cursor._Cursor({"s1": 3, "s2": 5}, "s1")
    metadata = {"toolwatch-stream-id": "s2", "toolwatch-stream-sequence": "7", **resume}
    state.subscribed(metadata, "host:1")
    assert (state.streams, state.stream_id) == (streams, "s2")


def test_tail_keeps_the_cursors_of_the_latest_streams() -> None:
    state = tail_cursor._Cursor()
    for number in range(tail_cursor.KEPT_CURSORS + 2):
        state.subscribed(
            {"toolwatch-stream-id": f"s{number}", "toolwatch-stream-sequence": "1"}, "h:1"
        )
    assert list(state.streams) == [f"s{n}" for n in range(2, tail_cursor.KEPT_CURSORS + 2)]
    request = state.resuming(findings_pb2.SubscribeRequest(min_severity="high"))
    assert request.min_severity == "high"
    assert [(c.stream_id, c.after) for c in request.resume][-1] == (
        f"s{tail_cursor.KEPT_CURSORS + 1}",
        1,
    )


def test_tail_json_writes_a_character_beyond_the_bmp_as_a_pair_of_escapes() -> None:
    """Unicode tag characters (escaped: they hide text) are written as JSON writes them, a
    surrogate pair of ``\\u`` escapes: a single escape of five hex digits read back as another
    character followed by a digit."""
    text = "refund\U000e0041ed"
    message = findings_pb2.Finding(
        category="TOOL_SELECTION_DRIFT", severity="high", explanation=text, tool="t"
    )
    out = io.StringIO()
    _Printer(out, as_json=True, colour=False)(message, "")
    (line,) = out.getvalue().splitlines()
    assert "\\udb40\\udc41" in line
    assert json.loads(line)["explanation"] == text
