"""The --dump-tooltraces format: every field, stable names, exact round trip."""

from __future__ import annotations

import dataclasses
import io
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests import factories
from toolwatch.model import CallStatus
from toolwatch.model_traces import ToolCall, ToolTrace
from toolwatch.sinks.tooltraces import (
    TOOLTRACE_FORMAT,
    ToolTraceWriter,
    read_tooltraces,
    tooltrace_from_dict,
    tooltrace_to_dict,
)

hex_ids = st.binary(min_size=8, max_size=8).map(bytes.hex)
trace_ids = st.binary(min_size=16, max_size=16).map(bytes.hex)
texts = st.text(max_size=20)
maybe_text = st.none() | texts
nanos = st.integers(min_value=0, max_value=2**64 - 1)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=10,
)

tool_calls = st.builds(
    ToolCall,
    tool_name=texts,
    raw_name=texts,
    arguments=json_values,
    arguments_error=maybe_text,
    call_id=maybe_text,
    parent_call_id=maybe_text,
    sequence_index=st.integers(min_value=0, max_value=1000),
    parallel_group=st.none() | st.integers(min_value=0, max_value=100),
    status=st.sampled_from(CallStatus),
    error_type=maybe_text,
    agent=maybe_text,
    span_id=st.none() | hex_ids,
    start_ns=st.none() | nanos,
    end_ns=st.none() | nanos,
    result=json_values,
    hosted=st.booleans(),
    handoff=st.booleans(),
    rerun=st.booleans(),
    service=maybe_text,
)

tool_traces = st.builds(
    ToolTrace,
    trace_id=trace_ids,
    run_span_id=st.none() | hex_ids,
    service=maybe_text,
    agent=maybe_text,
    model=maybe_text,
    calls=st.lists(tool_calls, max_size=4).map(tuple),
    final_text=maybe_text,
    refusal=st.booleans(),
    refusal_reason=maybe_text,
    error_count=st.integers(min_value=0, max_value=100),
    complete=st.booleans(),
    incomplete_reason=st.none() | st.sampled_from(["timed_out", "evicted", "span_limit"]),
    start_ns=nanos,
    end_ns=nanos,
    span_count=st.integers(min_value=0, max_value=5000),
    conversation_id=maybe_text,
    reference_keys=st.dictionaries(texts, texts, max_size=3),
    agents=st.lists(texts, max_size=3, unique=True).map(tuple),
)


@given(tool_traces)
def test_a_dumped_line_reads_back_as_the_same_tooltrace(trace: ToolTrace) -> None:
    stream = io.StringIO()
    ToolTraceWriter(stream).write(trace)
    assert stream.getvalue().count("\n") == 1
    # str.splitlines splits on every Unicode line break: the strictest reader there is.
    assert list(read_tooltraces(stream.getvalue().splitlines())) == [trace]


def sample_trace() -> ToolTrace:
    call = factories.tool_call(
        tool_name="issue_refund",
        raw_name="Issue_Refund",
        arguments={"order_id": "A-1", "amount": 12.5, "items": [1, 2]},
        call_id="call_1",
        status=CallStatus.ERROR,
        error_type="TimeoutError",
        agent="refund-bot",
        span_id="b7ad6b7169203331",
        start_ns=1_700_000_000_000_000_000,
        end_ns=1_700_000_000_500_000_000,
    )
    unparsed = dataclasses.replace(
        call, arguments="{not json", arguments_error="Expecting property name", sequence_index=1
    )
    return factories.tool_trace(
        trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
        run_span_id="00f067aa0ba902b7",
        service="support",
        agent="refund-bot",
        model="gpt-x",
        calls=(call, unparsed),
        final_text="Refund issued.",
        error_count=1,
        complete=False,
        incomplete_reason="timed_out",
        start_ns=1_700_000_000_000_000_000,
        end_ns=1_700_000_001_000_000_000,
        span_count=6,
        conversation_id="conv-9",
        reference_keys={"toolwatch.case_id": "refund-happy-path"},
        agents=("refund-bot", "billing-bot"),
    )


def test_the_format_names_every_field_of_the_records() -> None:
    data = tooltrace_to_dict(sample_trace())
    trace_fields = {f.name for f in dataclasses.fields(ToolTrace)}
    call_fields = {f.name for f in dataclasses.fields(ToolCall)}
    assert set(data) == trace_fields | {"format"}
    assert all(set(call) == call_fields for call in data["calls"])


def test_the_line_is_plain_json_with_hex_ids_and_integer_nanoseconds() -> None:
    stream = io.StringIO()
    ToolTraceWriter(stream).write(sample_trace())
    data = json.loads(stream.getvalue())
    assert data["format"] == TOOLTRACE_FORMAT == "toolwatch.tooltrace/v1"
    assert data["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert data["start_ns"] == 1_700_000_000_000_000_000
    first, second = data["calls"]
    assert first["arguments"] == {"order_id": "A-1", "amount": 12.5, "items": [1, 2]}
    assert first["status"] == "error"
    assert first["span_id"] == "b7ad6b7169203331"
    assert (second["arguments"], second["arguments_error"]) == (
        "{not json",
        "Expecting property name",
    )
    assert data["reference_keys"] == {"toolwatch.case_id": "refund-happy-path"}


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("trace_id"), "^missing field 'trace_id'$"),
        (lambda d: d.pop("calls"), "^missing field 'calls'$"),
        (lambda d: d.update(format="toolwatch.tooltrace/v9"), "unsupported format"),
        (lambda d: d.pop("format"), '^no "format" field: every --dump-tooltraces line has'),
        (lambda d: d.update(surprise=1), "^unknown field 'surprise'$"),
        (lambda d: d["calls"][0].update(surprise=1), "^unknown field 'surprise' in a call$"),
        (lambda d: d["calls"][0].pop("raw_name"), "^missing field 'raw_name' in a call$"),
        (lambda d: d["calls"].append("lookup_order"), "^expected an object in a call, got str$"),
        (lambda d: d["calls"][0].update(status="maybe"), "'maybe' is not a valid CallStatus"),
        (
            lambda d: d["calls"][0].update(hosted="yes"),
            r"^calls\[0\]\.hosted must be true or false",
        ),
        (
            lambda d: d["calls"][1].update(handoff=None),
            r"^calls\[1\]\.handoff must be true or false",
        ),
        (
            lambda d: d["calls"][1].update(tool_name=1),
            r"^calls\[1\]\.tool_name must be a string, got 1$",
        ),
        (
            lambda d: d["calls"][0].update(end_ns=1.5),
            r"^calls\[0\]\.end_ns must be an integer or null",
        ),
        (lambda d: d.update(start_ns="x"), "^start_ns must be an integer, got 'x'$"),
        (lambda d: d.update(complete=1), "^complete must be true or false, got 1$"),
        (lambda d: d.update(trace_id="zz"), "^trace_id must be 32 hex digits, got 'zz'$"),
        (
            lambda d: d.update(reference_keys={"toolwatch.case_id": ["a"]}),
            "^reference_keys must map names to strings",
        ),
        (lambda d: d.update(agents="refund-bot"), "^agents must be a list, got 'refund-bot'$"),
        (lambda d: d.update(agents=[1]), "^agents must be a list of agent names"),
    ],
)
def test_malformed_objects_are_refused_with_the_reason(mutate: object, message: str) -> None:
    data = tooltrace_to_dict(sample_trace())
    data["calls"] = [dict(c) for c in data["calls"]]
    mutate(data)  # type: ignore[operator]
    with pytest.raises(ValueError, match=message):
        tooltrace_from_dict(data)


def test_a_dump_written_before_agents_were_listed_reads_with_none() -> None:
    data = tooltrace_to_dict(sample_trace())
    del data["agents"]
    assert tooltrace_from_dict(data) == dataclasses.replace(sample_trace(), agents=())


def test_reading_names_the_bad_line_and_skips_blank_ones() -> None:
    good = json.dumps(tooltrace_to_dict(sample_trace()))
    assert len(list(read_tooltraces([good, "", "  ", good]))) == 2
    with pytest.raises(ValueError, match="line 3"):
        list(read_tooltraces([good, "", "{oops", good]))


def test_a_line_that_is_json_but_not_an_object_is_refused_naming_it() -> None:
    good = json.dumps(tooltrace_to_dict(sample_trace()))
    with pytest.raises(ValueError, match=r"^line 2: expected a ToolTrace object, got list$"):
        list(read_tooltraces([good, "[1, 2]"]))


def test_a_dump_written_before_hosted_calls_were_marked_reads_them_as_not_hosted() -> None:
    hosted = dataclasses.replace(sample_trace().calls[0], hosted=True, span_id=None)
    trace = dataclasses.replace(sample_trace(), calls=(hosted,))
    data = tooltrace_to_dict(trace)
    assert data["calls"][0]["hosted"] is True
    assert tooltrace_from_dict(data) == trace
    del data["calls"][0]["hosted"]
    assert tooltrace_from_dict(data).calls == (dataclasses.replace(hosted, hosted=False),)


def test_a_dump_written_before_handoffs_were_marked_reads_them_as_not_handoffs() -> None:
    transfer = dataclasses.replace(sample_trace().calls[0], tool_name="transfer_to_refunds")
    handed = dataclasses.replace(transfer, handoff=True)
    trace = dataclasses.replace(sample_trace(), calls=(handed,))
    data = tooltrace_to_dict(trace)
    assert data["calls"][0]["handoff"] is True
    assert tooltrace_from_dict(data) == trace
    del data["calls"][0]["handoff"]
    assert tooltrace_from_dict(data).calls == (transfer,)


def test_a_dump_written_before_reruns_were_marked_reads_them_as_not_reruns() -> None:
    first = sample_trace().calls[0]
    rerun = dataclasses.replace(first, rerun=True)
    trace = dataclasses.replace(sample_trace(), calls=(rerun,))
    data = tooltrace_to_dict(trace)
    assert data["calls"][0]["rerun"] is True
    assert tooltrace_from_dict(data) == trace
    del data["calls"][0]["rerun"]
    assert tooltrace_from_dict(data).calls == (first,)


def test_a_dump_written_before_calls_carried_their_service_reads_none() -> None:
    first = sample_trace().calls[0]
    served = dataclasses.replace(first, service="billing")
    trace = dataclasses.replace(sample_trace(), calls=(served,))
    data = tooltrace_to_dict(trace)
    assert data["calls"][0]["service"] == "billing"
    assert tooltrace_from_dict(data) == trace
    del data["calls"][0]["service"]
    assert tooltrace_from_dict(data).calls == (first,)
