"""``bench.traces`` with ``history``: each model call carries the run's turns before it in its
input, as GenAI instrumentations record ``gen_ai.input.messages`` with content capture on,
and toolwatch reads them as such (``SpanRecord.prior_turns``). Without it, the user's message
alone, as ``make bench`` has always sent."""

from __future__ import annotations

from collections import defaultdict

import pytest

from bench.traces import build_templates, trace_id
from toolwatch.ingest.decode_requests import decode_protobuf
from toolwatch.ingest.decode_types import DecodeOptions
from toolwatch.model import SpanRole


def _turns(history: bool) -> list[list[int]]:
    """Each run's model spans' ``prior_turns``, in start order."""
    (template,) = build_templates(1, 4, 0.0, history=history)
    body = template.render([trace_id(0, 0, run) for run in range(4)])
    runs: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    for span in decode_protobuf(body, DecodeOptions(read_histories=True)).spans:
        if span.role is SpanRole.LLM:
            runs[span.trace_id].append((span.start_ns, span.prior_turns))
    return [[turns for _start, turns in sorted(spans)] for spans in runs.values()]


@pytest.mark.parametrize("history", [False, True])
def test_each_model_call_shows_the_turns_before_it_only_with_history(history: bool) -> None:
    runs = _turns(history)
    assert len(runs) == 4
    for turns in runs:
        assert len(turns) >= 2  # a call's turn at least, and the answer
        expected = list(range(len(turns))) if history else [0] * len(turns)
        assert turns == expected
