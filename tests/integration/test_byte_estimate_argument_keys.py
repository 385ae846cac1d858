"""Parsed arguments' keys are still counted a byte a character.

Commit 8c8e085 counts a span's short texts, requested calls included, at their width
(``jsontext.text_size``), but the arguments of a requested call are parsed JSON and
``jsontext.held_size`` counts each dict key as ``_STR_BYTES + len(key)``: a key in CJK
is held at two bytes a character, in emoji at four. A sender chooses the keys (the model
writes them; a tool schema in Chinese has Chinese field names), up to ``max_value_bytes``.

User-visible harm: ``assembly.max_buffered_bytes`` stops bounding memory (README "Memory"
budgets 1.1x): model outputs whose calls have non-ASCII argument names are held at up to
2.5x what the buffer counts, so a toolwatch sized by the README is OOM-killed under such
traffic instead of applying backpressure.
"""

from __future__ import annotations

import gc
import tracemalloc

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.integration import agents
from toolwatch.ingest.decode import DecodeOptions, decode_request


def _held_and_estimated(char: str, keys: int) -> tuple[int, int]:
    args = {f"{i:03d}" + char * 250: 1 for i in range(keys)}  # short keys, small values
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
def test_argument_keys_are_counted_at_their_width(char: str, keys: int) -> None:
    held, estimated = _held_and_estimated(char, keys)
    assert held <= 1.1 * estimated, (
        f"held {held} B, counted {estimated} B ({held / estimated:.2f}x)"
    )
