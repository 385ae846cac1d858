"""What the findings stream keeps does not grow with the names a sender chooses: an agent,
service, tool or field name is an attribute of up to ``ingest.max_value_bytes`` (64 KiB),
and each finding reaches the index, the held findings and every subscriber's queue."""

from __future__ import annotations

import asyncio
import json

from tests import factories
from tests.memory import retained
from toolwatch.evaluation.severity import CALL_AGENT
from toolwatch.metrics import NoopMetrics
from toolwatch.model import Category, ReferenceKind, Severity
from toolwatch.model_evaluation import DETAIL_FIELDS, Finding
from toolwatch.sinks.findings import REDACTED, Redaction, finding_record
from toolwatch.sinks.stream.broker import FindingsBroker
from toolwatch.sinks.stream.filters import StreamFilter
from toolwatch.sinks.stream.messages import MAX_STREAM_TEXT, finding_message
from toolwatch.sinks.stream.resumes import Resume
from toolwatch.tail_format import format_finding_line

#: ``ingest.max_value_bytes``' default: the longest attribute value a span keeps.
MAX_VALUE = 65_536


def long_name(prefix: str, i: int) -> str:
    """A distinct name as long as a span may carry, ``prefix`` and ``i`` first."""
    head = f"{prefix}-{i:06d}-"
    return head + "x" * (MAX_VALUE - len(head))


def long_named(i: int) -> tuple[Finding, str]:
    """A finding on a call another agent made, every name of it ``long_name`` (the pair key
    of the shadow source it was compared with too); and the run's agent."""
    finding = factories.finding(
        category=Category.DANGEROUS_ACTION_DRIFT,
        severity=Severity.CRITICAL,
        reference=ReferenceKind.SOURCE,
        tool=long_name("tool", i),
        field=long_name("field", i),
        details={CALL_AGENT: long_name("caller", i), "calls": [long_name("call", i)] * 3},
        source_trace_id="cd" * 16,
        pair_key=long_name("pair", i),
    )
    return finding, long_name("agent", i)


def publish(broker: FindingsBroker, finding: Finding, agent: str) -> None:
    broker.publish(factories.tool_trace(agent=agent, service=long_name("service", 0)), [finding])


def test_the_index_keeps_no_name_whole() -> None:
    """160 findings indexed, 10 of them held: 21 MB kept when the index (and each held
    finding's tag) kept the run's agent name and its call's agent whole."""
    broker = FindingsBroker(NoopMetrics(), replay_size=10)

    def publish_all() -> None:
        for i in range(160):
            publish(broker, *long_named(i))

    kept = retained(publish_all)

    assert broker.sequence == 160
    # Measured: 50 KB, about 210 bytes an index entry (two agent keys) and the ten held.
    assert kept <= 160 * 1024, f"{kept:,} bytes kept by 160 findings published"


def test_a_held_finding_is_about_half_a_kilobyte_as_sent_whatever_its_names() -> None:
    broker = FindingsBroker(NoopMetrics())
    for i in range(10):
        publish(broker, *long_named(i))

    sizes = [held.message.ByteSize() for held in broker.held]
    # Measured: 1,377 bytes each, six names (the pair key one) and three texts cut; 590,028
    # with them whole. (356 bytes with short names.)
    assert max(sizes) <= 2048, f"{max(sizes):,} bytes a held finding as sent"


def test_names_and_detail_texts_are_cut_in_the_stream_and_whole_in_the_log() -> None:
    finding, agent = long_named(7)
    trace = factories.tool_trace(agent=agent, service=long_name("service", 7))

    message = finding_message(trace, finding, Redaction(), 0)
    record = finding_record(trace, finding, Redaction(), 0)

    for name in ("agent", "service", "tool", "field", "pair_key"):
        sent, whole = getattr(message, name), record[name]
        assert len(whole) == MAX_VALUE
        assert sent == whole[: MAX_STREAM_TEXT - 1] + "…"
    assert message.details[CALL_AGENT] == long_name("caller", 7)[: MAX_STREAM_TEXT - 1] + "…"
    calls = json.loads(message.details["calls"])  # still JSON: the texts in it are cut
    assert calls == [long_name("call", 7)[: MAX_STREAM_TEXT - 1] + "…"] * 3
    assert record["details"][CALL_AGENT] == long_name("caller", 7)


def test_names_as_long_as_the_cap_are_sent_whole() -> None:
    name = "a" * MAX_STREAM_TEXT
    trace = factories.tool_trace(agent=name)
    finding = factories.finding(tool=name, details={CALL_AGENT: name})

    message = finding_message(trace, finding, Redaction(), 0)

    assert message.agent == message.tool == message.details[CALL_AGENT] == name


def test_a_filter_on_a_long_agent_name_matches_it_exactly_in_any_case() -> None:
    """Two names alike for longer than what is sent of them are told apart; the run's agent
    and the agent of the finding's call both match."""
    broker = FindingsBroker(NoopMetrics())
    finding, agent = long_named(1)
    twin = agent[:-1] + "y"
    by_name = broker.subscribe(StreamFilter(agents=frozenset({agent.upper().casefold()})))
    by_twin = broker.subscribe(StreamFilter(agents=frozenset({twin.casefold()})))
    by_caller = broker.subscribe(StreamFilter(agents=frozenset({long_name("caller", 1)})))
    by_cut = broker.subscribe(StreamFilter(agents=frozenset({agent[: MAX_STREAM_TEXT - 1] + "…"})))

    publish(broker, finding, agent)

    assert (by_name.queued, by_twin.queued, by_caller.queued, by_cut.queued) == (1, 0, 1, 0)


def test_a_resume_on_a_long_agent_name_counts_and_replays_what_passes() -> None:
    """The index (what is lost) and the held findings (what is replayed) match on it too."""
    broker = FindingsBroker(NoopMetrics(), replay_size=2)
    findings = [long_named(i) for i in range(4)]
    for finding, agent in findings:
        publish(broker, finding, agent)
    first, last = findings[0][1], findings[3][1]
    stream_filter = StreamFilter(agents=frozenset({first.casefold(), last.casefold()}))

    subscription = broker.subscribe(stream_filter, Resume({broker.stream_id: 0}))

    async def replayed() -> list[int]:
        subscription.close()
        return [m.sequence for m in [await subscription.next()] if m is not None]

    assert subscription.resumed is not None
    assert subscription.resumed.lost == 1  # the first: no longer held, indexed
    assert asyncio.run(replayed()) == [4]


def test_tail_prints_a_cut_name_on_one_line() -> None:
    finding, agent = long_named(3)
    message = finding_message(factories.tool_trace(agent=agent), finding, Redaction(), 0)

    line = format_finding_line(message)

    assert f"agent={agent[: MAX_STREAM_TEXT - 1]}… " in line
    assert "\n" not in line
    assert len(line) < 1024


def test_an_argument_drift_finding_as_streamed_stays_near_the_documented_size() -> None:
    """docs/deployment.md, Memory: a streamed finding is about 0.5 KB as sent (argument values
    redacted), 16 KB at most. An argument drift on a call whose (sender-chosen) arguments hold
    4,000 unexpected fields has a ``fields`` entry per field, and ``make_finding`` bounds only
    top-level lists: 105 KB as sent, every value redacted and every key kept. Every object
    and array is now cut to its first 50 entries, the rest counted."""
    drifted = {f"field_{i}": 0 for i in range(4_001)}
    finding = factories.finding(tool="search", details={DETAIL_FIELDS: drifted})
    message = finding_message(factories.tool_trace(), finding, Redaction(), 0)  # redacted
    fields = json.loads(message.details[DETAIL_FIELDS])
    assert fields.pop("…") == "3951 more"
    assert list(fields) == [f"field_{i}" for i in range(50)]
    assert set(fields.values()) == {REDACTED}
    assert message.ByteSize() <= 16 * 1024, f"{message.ByteSize():,} bytes as sent"


def test_details_nested_past_the_streams_depth_are_sent_as_cut_text() -> None:
    """Past eight levels (the details' own included) a value is sent as its JSON text, cut:
    the cutting walks no deeper, however deep a sender nests an argument."""
    nested: object = "deep"
    for _ in range(20):
        nested = {"k": nested}
    finding = factories.finding(details={"shape": nested})
    message = finding_message(factories.tool_trace(), finding, Redaction(show_values=True), 0)
    value = json.loads(message.details["shape"])
    kept = 0
    while isinstance(value, dict):
        value, kept = value["k"], kept + 1
    assert kept == 7
    rest: object = "deep"
    for _ in range(20 - kept):
        rest = {"k": rest}
    assert value == json.dumps(rest)
