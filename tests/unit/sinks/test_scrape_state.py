"""StateCollector's ``toolwatch_stream_listening``: whether the findings stream's listener is
bound, read at scrape time from the app's callable (``StreamListener.down``)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from toolwatch.sinks.scrape_state import BufferState, StateCollector

LISTENING = "toolwatch_stream_listening"


def _idle() -> BufferState:
    return BufferState(traces=0, spans=0, bytes=0)


def test_stream_listening_reads_1_while_bound_and_0_while_down() -> None:
    registry = CollectorRegistry()
    listening = [True]
    registry.register(StateCollector(_idle, stream_listening=lambda: listening[0]))
    bound = registry.get_sample_value(LISTENING)
    listening[0] = False  # a restart could not bind listen.stream again
    down = registry.get_sample_value(LISTENING)
    listening[0] = True  # a tick bound it again
    assert (bound, down, registry.get_sample_value(LISTENING)) == (1.0, 0.0, 1.0)


def test_stream_listening_is_absent_until_there_is_a_listener() -> None:
    registry = CollectorRegistry()
    listening: list[bool | None] = [None]
    registry.register(StateCollector(_idle, stream_listening=lambda: listening[0]))
    before = (registry.get_sample_value(LISTENING), LISTENING in generate_latest(registry).decode())
    listening[0] = True
    assert before == (None, False)
    assert registry.get_sample_value(LISTENING) == 1.0


def test_stream_listening_is_an_unlabelled_gauge_with_help() -> None:
    registry = CollectorRegistry()
    registry.register(StateCollector(_idle, stream_listening=lambda: False))
    lines = [line for line in generate_latest(registry).decode().splitlines() if LISTENING in line]
    assert lines == [
        f"# HELP {LISTENING} 1 while the findings stream's listener is bound (a restart for a"
        " client CA taken out included), 0 while a restart could not bind listen.stream again"
        " (the port taken, the address no longer this host's, its name not resolving): live"
        " subscribers miss findings, the findings log and metrics have them.",
        f"# TYPE {LISTENING} gauge",
        f"{LISTENING} 0.0",
    ]


def test_a_failing_listening_read_leaves_the_other_gauges(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def gone() -> bool:
        raise RuntimeError("listener gone")

    collector = StateCollector(_idle, stream_subscribers=lambda: 3, stream_listening=gone)
    scraped = {s.name: s.value for family in collector.collect() for s in family.samples}
    assert scraped == {
        "toolwatch_buffered_traces": 0.0,
        "toolwatch_buffered_spans": 0.0,
        "toolwatch_buffered_bytes": 0.0,
        "toolwatch_assembly_overdue_seconds": 0.0,
        "toolwatch_remembered_traces": 0.0,
        "toolwatch_stream_subscribers": 3.0,
    }
    assert [r.getMessage() for r in caplog.records] == [f"reading {LISTENING} for a scrape failed"]


def test_registering_does_not_read_whether_the_stream_listens() -> None:
    calls: list[int] = []

    def listening() -> bool:
        calls.append(1)
        return True

    registry = CollectorRegistry()
    registry.register(StateCollector(_idle, stream_listening=listening))
    with pytest.raises(ValueError, match=LISTENING):  # its name is taken at registration
        registry.register(StateCollector(_idle, stream_listening=listening))
    assert calls == []
