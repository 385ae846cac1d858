"""Span ids are validated per OTLP; invalid spans are rejected and counted, the rest kept."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from ingest_support import ROOT_ID, TRACE_ID, decode, decode_bytes, decode_one, request, span

from toolwatch.conventions import Recognition, RoleFields, recognize
from toolwatch.ingest.decode import _Decoder
from toolwatch.ingest.decode_requests import decode_protobuf, scanner
from toolwatch.ingest.decode_types import DecodeError, DecodeOptions


def test_valid_span_keeps_ids_times_kind_and_status() -> None:
    record = decode_one(
        span("work", span_id=b"\x01" * 8, parent=ROOT_ID, kind=3, status=2, start=5, end=9)
    )
    assert (record.trace_id, record.span_id, record.parent_span_id) == (
        TRACE_ID,
        b"\x01" * 8,
        ROOT_ID,
    )
    assert (record.name, record.kind, record.status_code) == ("work", 3, 2)
    assert (record.start_ns, record.end_ns) == (5, 9)


def test_empty_parent_is_root() -> None:
    assert decode_one(span(parent=b"")).parent_span_id is None


def test_all_zero_parent_is_root() -> None:
    assert decode_one(span(parent=bytes(8))).parent_span_id is None


@pytest.mark.parametrize(
    ("flags", "local"),
    [
        (0x100, True),  # the parent's remoteness is known: not remote (the Python SDK's)
        (0x101, True),  # the sampled bit beside it
        (0x300, False),  # remote: another service's span
        (0x200, False),  # "remote" without "known": not a claim
        (0x001, False),  # nothing said (older SDKs, other senders)
    ],
)
def test_a_parent_is_local_only_when_the_span_flags_say_so(flags: int, local: bool) -> None:
    one = span()
    one.flags = flags
    assert decode_one(one).parent_local is local


def test_a_root_has_no_local_parent_whatever_its_flags() -> None:
    one = span(parent=b"")
    one.flags = 0x100
    assert decode_one(one).parent_local is False


def test_short_trace_id_is_rejected_with_path_and_length() -> None:
    batch = decode(span(), span(trace_id=b"abc"), span())
    assert batch.received == 3
    assert len(batch.spans) == 2
    assert batch.rejected == {"invalid_trace_id": 1}
    assert batch.error_message == (
        "1 span rejected; resource_spans[0].scope_spans[0].spans[1]: "
        "trace_id must be 16 bytes, got 3"
    )


def test_all_zero_trace_id_is_rejected() -> None:
    batch = decode(span(trace_id=bytes(16)))
    assert batch.rejected == {"invalid_trace_id": 1}
    assert batch.error_message is not None
    assert batch.error_message.endswith("trace_id must not be all zero")


def test_span_id_of_wrong_length_is_rejected() -> None:
    batch = decode(span(span_id=b"\x01" * 4))
    assert batch.rejected == {"invalid_span_id": 1}
    assert batch.error_message is not None
    assert "span_id must be 8 bytes, got 4" in batch.error_message


def test_missing_span_id_is_rejected() -> None:
    batch = decode(span(span_id=b""))
    assert batch.rejected == {"invalid_span_id": 1}


def test_all_zero_span_id_is_rejected() -> None:
    batch = decode(span(span_id=bytes(8)))
    assert batch.rejected == {"invalid_span_id": 1}
    assert batch.error_message is not None
    assert batch.error_message.endswith("span_id must not be all zero")


def test_parent_of_wrong_length_is_rejected() -> None:
    batch = decode(span(parent=b"\x01" * 5))
    assert batch.rejected == {"invalid_parent_span_id": 1}
    assert batch.error_message is not None
    assert "parent_span_id must be empty or 8 bytes, got 5" in batch.error_message


def test_rejections_are_counted_by_reason_and_paths_name_scopes() -> None:
    scopes = [[span(), span(trace_id=b"x")], [span(span_id=b""), span(trace_id=b"")]]
    batch = decode_bytes(request(scopes=scopes), DecodeOptions())
    assert batch.received == 4
    assert len(batch.spans) == 1
    assert batch.rejected == {"invalid_trace_id": 2, "invalid_span_id": 1}
    assert batch.error_message == (
        "3 spans rejected; "
        "resource_spans[0].scope_spans[0].spans[1]: trace_id must be 16 bytes, got 1; "
        "resource_spans[0].scope_spans[1].spans[0]: span_id must be 8 bytes, got 0; "
        "resource_spans[0].scope_spans[1].spans[1]: trace_id must be 16 bytes, got 0"
    )


def test_message_names_the_first_three_offenders_only() -> None:
    batch = decode(*(span(trace_id=b"bad") for _ in range(5)))
    assert batch.rejected == {"invalid_trace_id": 5}
    assert batch.error_message is not None
    assert batch.error_message.startswith("5 spans rejected; ")
    assert batch.error_message.count("trace_id must be") == 3
    assert batch.error_message.endswith("; and 2 more")


def test_the_valid_trace_ids_of_rejected_spans_are_handed_on_once_each() -> None:
    # Their runs miss a span: the buffer judges them incomplete (TraceBuffer.flag_rejected).
    first, second, kept = (bytes([n]) * 16 for n in (1, 2, 3))
    batch = decode(
        span(trace_id=first, parent=b"\x05" * 3),
        span(trace_id=second, span_id=bytes(8)),
        span(trace_id=first, parent=b"\x05" * 3),
        span(trace_id=kept),
        span(trace_id=b"abc"),  # no trace to tell
        span(trace_id=bytes(16)),
    )
    assert batch.rejected == {
        "invalid_parent_span_id": 2,
        "invalid_span_id": 1,
        "invalid_trace_id": 2,
    }
    assert batch.rejected_traces == (first, second)


def test_no_rejection_means_no_message() -> None:
    batch = decode(span(), span())
    assert (batch.rejected, batch.error_message, batch.received) == ({}, None, 2)


def test_empty_request_is_an_empty_batch() -> None:
    batch = decode_bytes(request(), DecodeOptions())
    assert (batch.spans, batch.received, batch.rejected) == ((), 0, {})


def test_span_ending_before_it_starts_is_kept_with_end_clamped() -> None:
    record = decode_one(span(start=5_000, end=4_000))
    assert (record.start_ns, record.end_ns) == (5_000, 5_000)


def test_a_recognizer_failure_costs_one_span_not_the_request() -> None:
    def fragile(name: str, *args: Any) -> Recognition:
        if name == "bad":
            raise KeyError("boom")
        return recognize(name, *args)

    scan = scanner(DecodeOptions()).scan_message(request(span("good"), span("bad")))
    batch = _Decoder(DecodeOptions(), fragile).scan(scan)
    assert [record.name for record in batch.spans] == ["good"]
    assert batch.rejected == {"malformed_attributes": 1}
    assert batch.rejected_traces == (TRACE_ID,)
    assert batch.error_message == (
        "1 span rejected; resource_spans[0].scope_spans[0].spans[1]: "
        "attributes could not be read (KeyError('boom'))"
    )


def test_decode_protobuf_decodes_a_serialized_request() -> None:
    body = request(span("a"), span("b", trace_id=b"short")).SerializeToString()
    batch = decode_protobuf(body, DecodeOptions())
    assert [record.name for record in batch.spans] == ["a"]
    assert (batch.received, batch.rejected) == (2, {"invalid_trace_id": 1})


def test_decode_protobuf_rejects_a_body_that_is_not_a_request() -> None:
    with pytest.raises(DecodeError, match="body is not a valid ExportTraceServiceRequest"):
        decode_protobuf(b"\x0a\xff\xff\xff", DecodeOptions())


def test_every_role_field_a_recognizer_fills_reaches_the_record() -> None:
    # decode names the role fields one by one (a ``**`` splat is not compiled): one left out
    # of that list would be dropped silently.
    tuples = {"finish_reasons", "output_tool_calls"}  # compiled, the record checks types
    filled: dict[str, object] = {
        key: (f"value of {key}",) if key in tuples else f"value of {key}"
        for key in RoleFields.__annotations__
    }

    def everything(name: str, *args: Any) -> Recognition:
        role, convention, _ = recognize(name, *args)
        return Recognition(role, convention, cast("RoleFields", filled))

    scan = scanner(DecodeOptions()).scan_message(request(span("tool")))
    (record,) = _Decoder(DecodeOptions(), everything).scan(scan).spans
    assert {key: getattr(record, key) for key in filled} == filled


def test_input_histories_are_read_for_model_spans_only_when_asked() -> None:
    """``SpanRecord.prior_turns``: read from a model span's input history only with
    ``DecodeOptions.read_histories`` (``assembly.missing_spans_from_history``); off, and for
    every other role, -1, nothing of the history parsed."""
    history = [
        {"role": "user", "parts": [{"type": "text", "content": "Refund A-1."}]},
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "lookup"}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "ok"}]},
    ]
    sent = json.dumps(history)
    model = span("chat gpt-4o", {"gen_ai.operation.name": "chat", "gen_ai.input.messages": sent})
    tool = span(
        "execute_tool lookup",
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "lookup",
            "gen_ai.input.messages": sent,
        },
        span_id=b"\x02" * 8,
    )
    body = request(model, tool).SerializeToString()
    read = decode_protobuf(body, DecodeOptions(read_histories=True)).spans
    unread = decode_protobuf(body, DecodeOptions()).spans
    assert [(s.prior_turns, s.prior_call_ids) for s in read] == [(1, ("c1",)), (-1, ())]
    assert [(s.prior_turns, s.prior_call_ids) for s in unread] == [(-1, ()), (-1, ())]
    # The ids a record holds are counted in the buffer's byte bound.
    assert read[0].size_bytes > unread[0].size_bytes


def test_openinference_input_call_ids_are_asked_of_the_scanner_only_with_histories() -> None:
    """``llm.input_messages.<i>.message.tool_calls.0.tool_call.id``: scanned (and counted
    against ``ingest.max_span_attributes``) only with ``read_histories``."""
    attrs = {
        "openinference.span.kind": "LLM",
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.1.message.role": "assistant",
        "llm.input_messages.1.message.tool_calls.0.tool_call.id": "call_1",
        "llm.input_messages.2.message.role": "tool",
        "llm.output_messages.0.message.role": "assistant",
    }
    model = span("ChatCompletion", attrs)
    read = decode_one(model, DecodeOptions(read_histories=True))
    assert (read.prior_turns, read.prior_call_ids) == (1, ("call_1",))
    unread = decode_one(model, DecodeOptions())
    assert (unread.prior_turns, unread.prior_call_ids) == (-1, ())
    # Off, the id key is not one the scanner keeps: a span of many is not rejected for it.
    capped = decode(model, options=DecodeOptions(max_span_attributes=len(attrs) - 1))
    assert capped.rejected == {}
