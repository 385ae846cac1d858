"""The natively counted families (sinks.tally) render exactly as prometheus_client's own."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from toolwatch.sinks.scrape_state import TallyCollector
from toolwatch.sinks.tally import CounterTally, HistogramTally

BUCKETS = (0.0, 0.1, 0.25, 1.0, 10.0)
LABELS = ("agent", "tool")
# The _created values differ (each side reads its own clock): compared as a placeholder.
_CREATED = re.compile(r"^(\w+_created(?:\{[^}]*\})?) \S+$", re.M)

label_values = st.sampled_from(["refund-bot", "", "a b", 'quote"d', "ünï"])
keys = st.tuples(label_values, label_values)
amounts = st.floats(min_value=0, max_value=1e6, allow_nan=False)
values = st.one_of(
    st.sampled_from([*BUCKETS, -1.0, 11.0, math.inf]),
    st.floats(min_value=-5, max_value=20, allow_nan=False),
)


def expositions(registry: CollectorRegistry) -> tuple[str, str]:
    def normal(text: bytes) -> str:
        return _CREATED.sub(r"\1 T", text.decode())

    return normal(generate_latest(registry)), normal(generate_openmetrics(registry))


def native(*tallies: CounterTally | HistogramTally) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(TallyCollector(tallies))
    return registry


@given(st.lists(st.tuples(keys, amounts), max_size=30))
def test_a_counter_renders_as_prometheus_clients(incs: list[tuple[tuple[str, str], float]]) -> None:
    reference = CollectorRegistry()
    counter = Counter("calls_total", "Calls.", LABELS, registry=reference)
    tally = CounterTally("calls_total", "Calls.", LABELS)
    for key, amount in incs:
        counter.labels(*key).inc(amount)
        tally.inc(key, amount)
    assert expositions(native(tally)) == expositions(reference)


@given(st.lists(st.tuples(keys, values), max_size=30))
def test_a_histogram_renders_as_prometheus_clients(
    observations: list[tuple[tuple[str, str], float]],
) -> None:
    reference = CollectorRegistry()
    histogram = Histogram("wait_seconds", "Waits.", LABELS, buckets=BUCKETS, registry=reference)
    tally = HistogramTally("wait_seconds", "Waits.", LABELS, BUCKETS)
    for key, value in observations:
        histogram.labels(*key).observe(value)
        tally.observe(key, value)
    assert expositions(native(tally)) == expositions(reference)


def test_a_counter_without_labels_exists_at_zero_from_the_start() -> None:
    reference = CollectorRegistry()
    Counter("built_total", "Built.", registry=reference)
    tally = CounterTally("built_total", "Built.")
    assert expositions(native(tally)) == expositions(reference)
    assert native(tally).get_sample_value("built_total") == 0.0


def test_a_negative_amount_is_ignored() -> None:
    tally = CounterTally("built_total", "Built.")
    tally.inc((), 3)
    tally.inc((), -2)
    assert native(tally).get_sample_value("built_total") == 3.0


def test_a_value_on_a_bound_counts_in_that_bucket_and_nan_in_inf_only() -> None:
    tally = HistogramTally("wait_seconds", "Waits.", (), BUCKETS)
    for value in (0.1, 0.1000001, math.nan):
        tally.observe((), value)
    registry = native(tally)

    def bucket(le: str) -> float | None:
        return registry.get_sample_value("wait_seconds_bucket", {"le": le})

    assert [bucket(le) for le in ("0.0", "0.1", "0.25", "10.0", "+Inf")] == [0, 1, 2, 2, 3]
    assert registry.get_sample_value("wait_seconds_count") == 3.0


def test_created_is_read_once_per_new_label_set() -> None:
    ticks = iter([100.0, 200.0, 300.0])
    clock: Callable[[], float] = lambda: next(ticks)  # noqa: E731
    tally = HistogramTally("wait_seconds", "Waits.", ("agent",), BUCKETS, clock)
    for agent in ("a", "a", "b", "a"):
        tally.observe((agent,), 1.0)
    registry = native(tally)
    created = [registry.get_sample_value("wait_seconds_created", {"agent": a}) for a in "ab"]
    assert created == [100.0, 200.0]


def test_the_collector_describes_its_names_so_the_registry_refuses_a_duplicate() -> None:
    registry = native(CounterTally("calls_total", "Calls.", LABELS))
    with pytest.raises(ValueError, match="calls"):
        Counter("calls_total", "Calls again.", registry=registry)


@pytest.mark.parametrize("buckets", [(), (1.0, 0.5), (0.5, 0.5)])
def test_buckets_must_be_distinct_and_ascending(buckets: tuple[float, ...]) -> None:
    with pytest.raises(ValueError, match="wait_seconds: buckets must be distinct and ascending"):
        HistogramTally("wait_seconds", "Waits.", (), buckets)
