"""``assembly.max_buffered_bytes`` bounds what the buffer holds when a sender makes the texts
it copies into every span long: the resource's ``service.name`` (``SpanRecord.service``) and
the configured reference keys (``SpanRecord.reference_keys``: a golden case id, a shadow pair
key), each up to ``ingest.max_value_bytes`` (64 KiB). The span's estimate left both out: a
request of one span per resource, each with 60 KB of either, was counted about 1 KB a span,
and 400 spans counted 415 KB held 24.5 MB (docs/deployment.md sizes the container at 1.1 x
``max_buffered_bytes`` for the buffer, "Memory")."""

from __future__ import annotations

import gc
import tracemalloc

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.ingest.decode_requests import decode_protobuf
from toolwatch.ingest.decode_types import DecodeOptions
from toolwatch.metrics import NoopMetrics
from toolwatch.model import ManualClock

MIB = 2**20
LONG = 60_000  # under max_value_bytes (64 KiB): kept whole
CASE_KEY = "toolwatch.case_id"


def _request(first: int, spans: int, service: str, case_id: str | None, tool: str) -> bytes:
    """``spans`` tool spans of traces ``first``.., each under a resource of its own (so each
    has a service name of its own), each string unique (none is shared)."""
    message = ExportTraceServiceRequest()
    for n in range(first, first + spans):
        resource = message.resource_spans.add()
        attribute = resource.resource.attributes.add()
        attribute.key, attribute.value.string_value = "service.name", f"{n:08d}{service}"
        span = resource.scope_spans.add().spans.add()
        span.trace_id, span.span_id = (n + 1).to_bytes(16, "big"), (n + 1).to_bytes(8, "big")
        span.parent_span_id = b"\x01" * 8  # rootless: it stays buffered
        span.name, span.start_time_unix_nano, span.end_time_unix_nano = "execute_tool t", 1, 2
        tool_name = f"{n:08d}{tool}"
        attributes = [("gen_ai.operation.name", "execute_tool"), ("gen_ai.tool.name", tool_name)]
        if case_id is not None:
            attributes.append((CASE_KEY, f"{n:08d}{case_id}"))
        for key, value in attributes:
            kv = span.attributes.add()
            kv.key, kv.value.string_value = key, value
    return message.SerializeToString()


def _held_by_a_full_buffer(
    options: DecodeOptions, service: str = "agent", case_id: str | None = None, tool: str = "t"
) -> tuple[int, TraceBuffer]:
    """Offer requests of such spans to a 2 MiB buffer (backpressure) until it refuses one;
    what the buffer then holds, resident."""
    limits = AssemblyLimits(max_buffered_bytes=2 * MIB, max_traces=100_000)
    gc.collect()
    tracemalloc.start()
    try:
        buffer = TraceBuffer(limits, ManualClock(), NoopMetrics())
        for first in range(0, 400, 5):
            batch = decode_protobuf(_request(first, 5, service, case_id, tool), options)
            fits = buffer.admit(batch.spans, sum(s.size_bytes for s in batch.spans)) is not None
            del batch  # a refused request is the client's to keep, not the buffer's
            if not fits:
                break
        gc.collect()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return held, buffer


def _assert_within_the_bound(held: int, buffer: TraceBuffer) -> None:
    """The buffer counted no more than its 2 MiB, and holds at most the 1.1x of it
    docs/deployment.md budgets (its "Memory" section)."""
    assert buffer.buffered_bytes <= 2 * MIB
    assert held <= 1.1 * 2 * MIB, (
        f"{buffer.buffered_spans} spans counted {buffer.buffered_bytes} B, held {held} B"
        f" ({held / (2 * MIB):.1f} x max_buffered_bytes)"
    )


# 60,000 UTF-8 bytes each; CPython holds CJK at two bytes a character, emoji at four.
@pytest.mark.parametrize("char", ["s", "中", "😀"])
def test_a_long_service_name_is_counted_by_the_byte_bound(char: str) -> None:
    service = char * (LONG // len(char.encode()))
    held, buffer = _held_by_a_full_buffer(DecodeOptions(), service=service)
    _assert_within_the_bound(held, buffer)


def test_a_long_reference_key_value_is_counted_by_the_byte_bound() -> None:
    options = DecodeOptions(reference_keys=frozenset({CASE_KEY}))
    held, buffer = _held_by_a_full_buffer(options, case_id="c" * LONG)
    _assert_within_the_bound(held, buffer)


@pytest.mark.parametrize("char", ["s", "中", "😀"])
def test_a_long_tool_name_is_counted_at_its_width(char: str) -> None:
    """The short texts a span names (tool, call id, agent, model, ...) are up to
    ``max_value_bytes`` each too: counted a byte a character, a tool name in emoji was held
    at four times its count."""
    tool = char * (LONG // len(char.encode()))
    held, buffer = _held_by_a_full_buffer(DecodeOptions(), tool=tool)
    _assert_within_the_bound(held, buffer)
