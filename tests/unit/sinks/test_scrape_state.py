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


BOUNDS = ("toolwatch_buffered_max_traces", "toolwatch_buffered_max_spans")
BOUNDS += ("toolwatch_buffered_max_bytes",)


def test_the_buffer_bounds_are_read_at_scrape_time_beside_what_it_holds() -> None:
    state = [BufferState(traces=1, spans=2, bytes=3, max_traces=10, max_spans=20, max_bytes=30)]
    registry = CollectorRegistry()
    registry.register(StateCollector(lambda: state[0]))
    first = [registry.get_sample_value(name) for name in BOUNDS]
    state[0] = BufferState(9, 180, 29, max_traces=10_000, max_spans=200_000, max_bytes=2**28)
    held = ("toolwatch_buffered_traces", "toolwatch_buffered_spans", "toolwatch_buffered_bytes")
    assert first == [10.0, 20.0, 30.0]
    assert [registry.get_sample_value(name) for name in BOUNDS] == [10_000.0, 200_000.0, 2.0**28]
    assert [registry.get_sample_value(name) for name in held] == [9.0, 180.0, 29.0]


def test_a_bound_is_an_unlabelled_gauge_that_names_its_setting() -> None:
    registry = CollectorRegistry()
    registry.register(StateCollector(lambda: BufferState(0, 0, 0, max_spans=50_000)))
    text = generate_latest(registry).decode()
    lines = [line for line in text.splitlines() if "toolwatch_buffered_max_spans" in line]
    assert lines == [
        "# HELP toolwatch_buffered_max_spans assembly.max_buffered_spans: the most spans the"
        " buffer holds, as toolwatch_buffered_max_traces bounds traces.",
        "# TYPE toolwatch_buffered_max_spans gauge",
        "toolwatch_buffered_max_spans 50000.0",
    ]


def test_bounds_not_given_have_no_series() -> None:
    registry = CollectorRegistry()
    registry.register(StateCollector(lambda: BufferState(0, 0, 0, max_bytes=64)))
    typed = [
        line.split()[2]
        for line in generate_latest(registry).decode().splitlines()
        if line.startswith("# TYPE ")
    ]
    assert [name in typed for name in BOUNDS] == [False, False, True]
    assert [registry.get_sample_value(name) for name in BOUNDS] == [None, None, 64.0]
    assert registry.get_sample_value("toolwatch_buffered_spans") == 0.0


def test_a_bound_name_is_taken_at_registration() -> None:
    registry = CollectorRegistry()
    registry.register(StateCollector(_idle))  # no bounds given: their names taken all the same
    with pytest.raises(ValueError, match="toolwatch_buffered_max_bytes"):
        registry.register(StateCollector(_idle))
