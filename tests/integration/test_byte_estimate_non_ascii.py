"""The buffer's byte estimate stays on the safe side for parsed arguments of short non-ASCII
strings. ``jsontext.text_size`` counted a text of up to 256 characters at one byte a
character, but CPython holds CJK text at two bytes a character and emoji at four: a
conversation in Chinese or with emoji was held at 1.4 to 2.4 times what the buffer counted,
and ``max_buffered_bytes`` no longer bounded memory (docs/deployment.md "Memory")."""

from __future__ import annotations

import gc
import tracemalloc

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.integration import agents
from toolwatch.ingest.decode_requests import decode_request
from toolwatch.ingest.decode_types import DecodeOptions


def _held_and_estimated(char: str, keys: int, *, in_keys: bool = False) -> tuple[int, int]:
    """What the requests' spans hold, and what the buffer counts them, with arguments of
    ``keys`` fields whose values (or, ``in_keys``, whose names) are 250 of ``char``."""
    text = char * 250  # a short text: at most 256 characters
    if in_keys:
        args: dict[str, object] = {f"{i:03d}" + text: 1 for i in range(keys)}
    else:
        args = {f"k{i}": text for i in range(keys)}
    calls = tuple(agents.Call("lookup_order", args, f"call_{i}", executed=False) for i in range(5))
    run = agents.AgentRun(
        "refund-bot", (*(agents.Turn((c,)) for c in calls), agents.Turn(text="ok"))
    )
    spans = agents.spans_of(
        *(agents.record(run, "genai", start_ns=agents.BASE_NS + k * 10**12) for k in range(10))
    )
    body = encode_spans(spans).SerializeToString()
    gc.collect()
    tracemalloc.start()
    try:
        request = ExportTraceServiceRequest.FromString(body)
        batch = decode_request(request, DecodeOptions())
        del request
        gc.collect()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return held, sum(s.size_bytes for s in batch.spans)


@pytest.mark.parametrize(("char", "keys"), [("a", 200), ("中", 40), ("😀", 20)])
def test_the_byte_estimate_is_on_the_safe_side_whatever_the_script(char: str, keys: int) -> None:
    held, estimated = _held_and_estimated(char, keys)
    # docs/deployment.md budgets 1.1 x max_buffered_bytes for what the buffer's bytes hold
    assert held <= 1.1 * estimated, (
        f"held {held} B, counted {estimated} B ({held / estimated:.2f}x)"
    )


@pytest.mark.parametrize(("char", "keys"), [("a", 200), ("中", 40), ("😀", 20)])
def test_argument_keys_are_counted_at_their_width(char: str, keys: int) -> None:
    """Keys too: the model writes them (a tool schema in Chinese has Chinese field names).
    ``held_size`` counted them a byte a character, held at 1.5x (CJK) and 2.5x (emoji)."""
    held, estimated = _held_and_estimated(char, keys, in_keys=True)
    assert held <= 1.1 * estimated, (
        f"held {held} B, counted {estimated} B ({held / estimated:.2f}x)"
    )
