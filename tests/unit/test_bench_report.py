"""``bench.report`` says under what load the detection latency was measured."""

from __future__ import annotations

from bench.report import _load_line


def test_the_latency_phase_load_is_reported_and_flagged_when_it_was_not_half() -> None:
    assert _load_line({"server_cpu_utilization": 0.48}) == ["    server CPU while sending: 48%"]
    (line,) = _load_line({"server_cpu_utilization": 0.86})
    assert line.startswith("    server CPU while sending: 86% - not half load")
    assert _load_line({}) == []  # a result written before the figure existed
