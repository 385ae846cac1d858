"""``bench.eviction`` times what it says: every trace it adds evicts the oldest live one,
which sits behind the traces that completed and left before it."""

from __future__ import annotations

from bench.eviction import _span, full_buffer, microseconds_per_eviction


def test_the_full_buffer_has_its_oldest_live_trace_behind_the_emitted_ones() -> None:
    buffer, number = full_buffer(20, emitted_fraction=0.5)

    assert (buffer.buffered_traces, number) == (20, 31)  # 1-10 left, 11-30 live
    evicted = buffer.add([_span(number, 0)])
    assert [t.trace_id for t in evicted] == [(11).to_bytes(16, "big")]
    # Its one span is its root: the run had ended, and is judged as it came.
    assert [t.incomplete_reason for t in evicted] == [None]
    assert buffer.buffered_traces == 20


def test_a_measurement_keeps_the_buffer_full() -> None:
    assert microseconds_per_eviction(20, emitted_fraction=0.5, added=50) > 0
