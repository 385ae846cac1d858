"""The findings log, redaction, the in-memory sink and fan-out isolation."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
from collections.abc import Sequence

import pytest

from tests import factories
from toolwatch.model import Category, ReferenceKind, Severity, Traffic
from toolwatch.model_evaluation import Finding
from toolwatch.model_traces import ToolTrace
from toolwatch.sinks.findings import (
    REDACTED,
    FanOutSink,
    FindingSink,
    InMemoryFindingSink,
    JsonLinesFindingSink,
    Redaction,
    format_timestamp,
    render_details,
)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SOURCE_TRACE_ID = "0af7651916cd43dd8448eb211c80319c"  # a shadow pair's source run
# 2026-11-29T20:31:02.123456789Z
WALL_NS = 1_795_984_262_123_456_789


def make_trace(agent: str | None = "refund-bot", service: str | None = "support") -> ToolTrace:
    return factories.tool_trace(
        trace_id=TRACE_ID,
        run_span_id="00f067aa0ba902b7",
        service=service,
        agent=agent,
        model="gpt-x",
        end_ns=1,
        span_count=3,
    )


#: An argument evaluator's details: what it says of the value of each field it scored.
AMOUNT_DRIFT = {"fields": {"amount": {"expected": 10, "actual": 100, "score": 0.25}}}


def make_finding(
    tool: str | None = "issue_refund",
    field: str | None = "amount",
    details: dict[str, object] | None = None,
    agent: str | None = None,
    score: float | None = 0.25,
) -> Finding:
    return factories.finding(
        category=Category.ARGUMENT_VALUE_DRIFT,
        severity=Severity.HIGH,
        evaluator="tool_arguments",
        reference=ReferenceKind.EXPECTED,
        score=score,
        explanation="issue_refund.amount differs from the expected value",
        trace_id=TRACE_ID,
        span_id="b7ad6b7169203331",
        tool=tool,
        field=field,
        agent=agent,
        details=AMOUNT_DRIFT if details is None else details,
    )


def log_lines(
    findings: Sequence[Finding], redaction: Redaction | None = None, trace: ToolTrace | None = None
) -> list[dict[str, object]]:
    stream = io.StringIO()
    sink = JsonLinesFindingSink(stream, redaction, wall_clock=lambda: WALL_NS)
    sink.publish(trace or make_trace(), findings)
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_shadow_candidates_finding_says_so() -> None:
    """A candidate's finding pages no one (``traffic="shadow"`` in the metrics): the log
    says whose run it is, so the one reading it after ToolwatchShadowCandidateUnsafe does
    not take it for production's."""
    stream = io.StringIO()
    sink = JsonLinesFindingSink(stream, None, wall_clock=lambda: WALL_NS)
    sink.publish(make_trace(), [make_finding()], Traffic.SHADOW)
    sink.publish(make_trace(), [make_finding()])
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["traffic"] for line in lines] == ["shadow", "live"]


def test_one_json_object_per_finding_with_every_key() -> None:
    [line] = log_lines([make_finding()])
    assert line == {
        "category": "ARGUMENT_VALUE_DRIFT",
        "severity": "high",
        "evaluator": "tool_arguments",
        "reference": "expected",
        "case_id": None,
        "source_trace_id": None,
        "pair_key": None,
        "score": 0.25,
        "tool": "issue_refund",
        "field": "amount",
        "agent": "refund-bot",
        "explanation": "issue_refund.amount differs from the expected value",
        "trace_id": TRACE_ID,
        "span_id": "b7ad6b7169203331",
        "service": "support",
        "traffic": "live",
        "incomplete_reason": None,
        "timestamp": "2026-11-29T20:31:02.123Z",
        "details": {"fields": {"amount": REDACTED}},
    }


@pytest.mark.parametrize("reason", ["timed_out", "evicted", "shutdown", "span_limit"])
def test_a_finding_of_an_incomplete_run_names_why(reason: str) -> None:
    """The on-call tells a finding of a run judged without all its spans (a verification
    that never came) from one of a whole run by the line alone, not the ToolTrace dump."""
    incomplete = dataclasses.replace(make_trace(), complete=False, incomplete_reason=reason)
    [line] = log_lines([make_finding()], trace=incomplete)
    [whole] = log_lines([make_finding()])
    assert (line["incomplete_reason"], whole["incomplete_reason"]) == (reason, None)


def test_several_findings_are_several_lines() -> None:
    lines = log_lines([make_finding(), make_finding(field="currency")])
    assert [line["field"] for line in lines] == ["amount", "currency"]


def test_absent_values_are_null() -> None:
    finding = make_finding(tool=None, field=None, details={}, score=None)
    [line] = log_lines([finding], trace=make_trace(agent=None, service=None))
    assert [line[k] for k in ("tool", "field", "agent", "service", "score")] == [None] * 5
    assert line["details"] == {}


def test_a_finding_names_the_golden_case_it_was_judged_against() -> None:
    finding = dataclasses.replace(make_finding(), case_id="refund-canary")
    [line] = log_lines([finding])
    assert (line["case_id"], line["source_trace_id"], line["pair_key"]) == (
        "refund-canary",
        None,
        None,
    )


def test_a_finding_names_the_shadow_source_run_it_was_compared_with() -> None:
    finding = dataclasses.replace(
        make_finding(),
        reference=ReferenceKind.SOURCE,
        source_trace_id=SOURCE_TRACE_ID,
        pair_key="req-42",
    )
    [line] = log_lines([finding], trace=make_trace())
    assert (line["reference"], line["case_id"]) == ("source", None)
    assert (line["source_trace_id"], line["pair_key"]) == (SOURCE_TRACE_ID, "req-42")


def test_a_finding_against_the_policy_names_no_reference() -> None:
    finding = dataclasses.replace(make_finding(), reference=ReferenceKind.POLICY)
    [line] = log_lines([finding])
    assert [line[k] for k in ("case_id", "source_trace_id", "pair_key")] == [None] * 3


@pytest.mark.parametrize(
    "redaction", [Redaction(), Redaction(show_values=True), Redaction(show_fields=frozenset())]
)
def test_the_reference_a_finding_names_leaves_redaction_as_it_was(redaction: Redaction) -> None:
    """Case ids, trace ids and pair keys are no argument values: written as they are, and
    ``details`` redacted exactly as for a finding that names no reference."""
    plain = make_finding()
    named = dataclasses.replace(
        plain, case_id="refund-canary", source_trace_id=SOURCE_TRACE_ID, pair_key="req-42"
    )
    [with_names, without] = log_lines([named, plain], redaction)
    assert with_names["details"] == without["details"]
    assert (with_names["case_id"], with_names["pair_key"]) == ("refund-canary", "req-42")


def test_a_non_finite_score_is_written_as_null() -> None:
    [line] = log_lines([make_finding(score=float("nan"))])
    assert line["score"] is None


def test_the_findings_own_agent_wins_over_the_runs() -> None:
    [line] = log_lines([make_finding(agent="inner-agent")])
    assert line["agent"] == "inner-agent"


def test_nothing_is_written_for_no_findings() -> None:
    stream = io.StringIO()
    JsonLinesFindingSink(stream).publish(make_trace(), [])
    assert stream.getvalue() == ""


@pytest.mark.parametrize(
    ("redaction", "shown"),
    [
        (Redaction(), False),
        (Redaction(show_values=True), True),
        (Redaction(show_fields=frozenset({"amount"})), True),
        (Redaction(show_fields=frozenset({"issue_refund.amount"})), True),
        (Redaction(show_fields=frozenset({"lookup_order.amount"})), False),
        (Redaction(show_fields=frozenset({"currency"})), False),
    ],
)
def test_redaction_of_a_field(redaction: Redaction, shown: bool) -> None:
    [line] = log_lines([make_finding()], redaction)
    expected = AMOUNT_DRIFT if shown else {"fields": {"amount": REDACTED}}
    assert line["details"] == expected


def test_each_field_is_shown_or_hidden_on_its_own() -> None:
    """The finding names its first field; that must not show the others (a card number
    beside an allowed amount)."""
    details = {"fields": {"amount": {"actual": 100}, "card": {"actual": "4111-1111"}}}
    finding = make_finding(field="amount", details=details)
    [line] = log_lines([finding], Redaction(show_fields=frozenset({"issue_refund.amount"})))
    assert line["details"] == {"fields": {"amount": {"actual": 100}, "card": REDACTED}}


def test_a_detail_key_is_never_read_as_a_field_name() -> None:
    """Only ``fields`` and ``errors`` hold values; showing a field called ``value`` or
    ``fields`` shows nothing else."""
    details = {"failed_verification_spans": ["ab"], "fields": {"account": "DE89-3704"}}
    finding = make_finding(field="account", details=details)
    allowed = Redaction(show_fields=frozenset({"value", "fields", "issue_refund.fields"}))
    [line] = log_lines([finding], allowed)
    assert line["details"] == {"failed_verification_spans": ["ab"], "fields": {"account": REDACTED}}


def test_a_field_shows_the_fields_inside_it() -> None:
    details = {"fields": {"order.id": 7, "order": {"id": 7}, "orderly": 1}}
    [line] = log_lines([make_finding(details=details)], Redaction(show_fields=frozenset({"order"})))
    assert line["details"] == {"fields": {"order.id": 7, "order": {"id": 7}, "orderly": REDACTED}}


def test_schema_messages_are_shown_only_for_their_field() -> None:
    errors = [
        {"field": "amount", "message": "900 is greater than the maximum of 500"},
        {"field": None, "message": "{'card': '4111'} has too many properties"},
    ]
    finding = make_finding(details={"rule": "refund-args", "errors": errors})
    [line] = log_lines([finding], Redaction(show_fields=frozenset({"amount"})))
    assert line["details"] == {
        "rule": "refund-args",
        "errors": [errors[0], {"field": None, "message": REDACTED}],
    }


def test_a_finding_on_no_tool_shows_only_the_fields_named_for_any_tool() -> None:
    """``None.amount`` names a tool called ``None``, not findings on no tool."""
    on_no_tool = make_finding(tool=None)
    [line] = log_lines([on_no_tool], Redaction(show_fields=frozenset({"None.amount"})))
    assert line["details"] == {"fields": {"amount": REDACTED}}
    [line] = log_lines([on_no_tool], Redaction(show_fields=frozenset({"amount"})))
    assert line["details"] == AMOUNT_DRIFT


def test_the_tools_show_fields_names_are_each_entry_before_each_dot() -> None:
    """A tool not among them shows what a finding on no tool shows (a reload redacts the
    findings the stream holds by it, knowing their tool by a digest)."""
    redaction = Redaction(show_fields=frozenset({"amount", "issue_refund.amount", "a.b.c"}))
    assert redaction.named_tools() == {"issue_refund", "a", "a.b"}
    for name in ["amount", "b.c", "c", "issue_refund.amount", "other"]:
        assert redaction.shows("lookup_order", name) is redaction.shows(None, name)
    assert [redaction.shows("a", "b.c"), redaction.shows("a.b", "c")] == [True, True]
    assert Redaction(show_values=True).named_tools() == frozenset()


@pytest.mark.parametrize("shape", [{"fields": "4111"}, {"errors": "4111"}, {"errors": ["4111"]}])
def test_value_keys_of_an_unexpected_shape_are_hidden_whole(shape: dict[str, object]) -> None:
    [line] = log_lines([make_finding(details=shape)], Redaction(show_fields=frozenset({"amount"})))
    assert "4111" not in json.dumps(line)


def test_explanations_are_written_unredacted() -> None:
    [line] = log_lines([make_finding()])
    assert line["explanation"] == "issue_refund.amount differs from the expected value"


def test_non_json_detail_values_do_not_break_the_log() -> None:
    finding = make_finding(details={"raw": b"\x01\xff", "set": frozenset({2, 1})})
    [line] = log_lines([finding], Redaction(show_values=True))
    assert line["details"] == {"raw": "01ff", "set": [1, 2]}


def test_render_details_keeps_strings_and_encodes_the_rest() -> None:
    rendered = render_details({"s": "text", "n": 10, "o": {"a": [1, None]}, "r": REDACTED})
    assert rendered == {"s": "text", "n": "10", "o": '{"a":[1,null]}', "r": REDACTED}


@pytest.mark.parametrize(
    ("time_ns", "text"),
    [
        (0, "1970-01-01T00:00:00.000Z"),
        (WALL_NS, "2026-11-29T20:31:02.123Z"),
        (1_000_000_000 - 1, "1970-01-01T00:00:00.999Z"),
    ],
)
def test_format_timestamp(time_ns: int, text: str) -> None:
    assert format_timestamp(time_ns) == text


def test_in_memory_sink_keeps_findings_and_traces_until_cleared() -> None:
    sink = InMemoryFindingSink()
    trace = make_trace()
    sink.publish(trace, [make_finding(), make_finding(field="currency")])
    assert [f.field for f in sink.findings] == ["amount", "currency"]
    assert sink.traces == [trace]
    sink.clear()
    assert (sink.findings, sink.traces) == ([], [])
    sink.close()
    assert sink.closed


class ExplodingSink:
    def publish(self, trace: ToolTrace, findings: Sequence[Finding]) -> None:
        raise OSError("disk full")

    def close(self) -> None:
        raise OSError("disk full")


def test_fan_out_isolates_a_failing_sink(caplog: pytest.LogCaptureFixture) -> None:
    before, after = InMemoryFindingSink(), InMemoryFindingSink()
    sinks: list[FindingSink] = [before, ExplodingSink(), after]
    fan_out = FanOutSink(sinks)
    with caplog.at_level(logging.ERROR, logger="toolwatch.sinks.findings"):
        for _ in range(3):
            fan_out.publish(make_trace(), [make_finding()])
        fan_out.close()
    assert len(before.findings) == len(after.findings) == 3
    assert before.closed and after.closed
    assert fan_out.failures == {
        "0:InMemoryFindingSink": 0,
        "1:ExplodingSink": 4,
        "2:InMemoryFindingSink": 0,
    }
    # Rate-limited: failures 1, 2 and 4 are logged, the 3rd is not.
    assert len(caplog.records) == 3
    assert "1:ExplodingSink failed to publish" in caplog.records[0].getMessage()
    assert "failed to close (4 failures so far)" in caplog.records[2].getMessage()


def test_fan_out_tells_each_failure_by_the_sinks_position() -> None:
    failed: list[int] = []
    sinks: list[FindingSink] = [InMemoryFindingSink(), ExplodingSink()]
    fan_out = FanOutSink(sinks, failed=failed.append)
    fan_out.publish(make_trace(), [make_finding()])
    fan_out.publish(make_trace(), [make_finding()])
    assert failed == [1, 1]


RENDERED_CASES = [
    AMOUNT_DRIFT,
    {"fields": {"amount": {"actual": 100}, "card": {"actual": "4111-1111"}}},
    {"fields": {"order.id": 7, "order": {"id": 7}, "orderly": 1}, "rule": "r"},
    {"errors": [{"field": "amount", "message": "900 > 500"}, {"field": None, "message": "x"}]},
    {"fields": "4111", "errors": ["4111"], "failed_verification_spans": ["ab"]},
]
REDACTIONS = [
    Redaction(show_values=True),
    Redaction(show_fields=frozenset({"amount", "order"})),
    Redaction(show_fields=frozenset({"issue_refund.amount"})),
    Redaction(),
]


@pytest.mark.parametrize("details", RENDERED_CASES)
def test_rendered_details_redacted_again_read_as_if_redacted_so_at_first(
    details: dict[str, object],
) -> None:
    """A reload that shows less: details rendered under a redaction that showed more, then
    redacted by the new one, are what the new one gives; a value hidden before stays hidden."""
    finding = make_finding(details=details)
    for before, looser in enumerate(REDACTIONS):
        rendered = render_details(looser.details(finding))
        for after in REDACTIONS[before:]:
            again = after.redact_rendered(finding.tool, rendered)
            assert again == render_details(after.details(finding)), (looser, after)
        assert REDACTIONS[0].redact_rendered(finding.tool, rendered) == rendered


def test_a_rendered_value_that_is_no_json_is_hidden_when_redacted_again() -> None:
    rendered = {"fields": "{not json", "errors": "[" * 100_000, "rule": "{kept"}
    again = Redaction(show_fields=frozenset({"amount"})).redact_rendered("t", rendered)
    assert again == {"fields": REDACTED, "errors": REDACTED, "rule": "{kept"}


def test_the_log_redacts_by_a_reloaded_redaction_from_then_on() -> None:
    stream = io.StringIO()
    sink = JsonLinesFindingSink(stream, Redaction(show_values=True), wall_clock=lambda: WALL_NS)
    sink.publish(make_trace(), [make_finding()])
    sink.redact_with(Redaction())
    sink.publish(make_trace(), [make_finding()])
    first, second = (json.loads(line)["details"] for line in stream.getvalue().splitlines())
    assert (first, second) == (AMOUNT_DRIFT, {"fields": {"amount": REDACTED}})
