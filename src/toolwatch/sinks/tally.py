"""Counters and histograms for the per-trace series, counted in plain compiled code.

``prometheus_client``'s ``Counter.inc`` and ``Histogram.observe`` are interpreted and take a
lock on every call; the pipeline makes a few of those calls per span (each run, each of its
calls, each evaluator's duration and score), about a tenth of its work. The families here
keep the same numbers in dicts instead, and ``TallyCollector`` (``sinks.scrape_state``)
renders them at scrape time as the ``prometheus_client`` metric of the same name would: the
same samples, labels, ``le`` values and ``_created`` series, in both expositions.

No lock: the families are updated from the event loop and rendered on it too (the metrics
listener runs there, ``sinks.exposition``). A family reads its clock (``time.time``, as
``prometheus_client`` does) once per new label set, for the ``_created`` series.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

__all__ = ["CounterTally", "HistogramSeries", "HistogramTally"]

#: Label values, in the order of the family's label names.
Key = tuple[str, ...]


class CounterTally:
    """A counter family by label values. ``inc`` ignores a negative amount (counters only
    grow, and metrics never raise into the pipeline). A family without labels exists, at 0,
    from the start, as a ``prometheus_client`` ``Counter`` without labels does."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labels: tuple[str, ...] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labels = labels
        # Per label set, its value in a one-item list, added to in place: one dict lookup per
        # ``inc`` instead of a lookup and a store (each hashes and compares the key tuple).
        self.values: dict[Key, list[float]] = {}
        self.created: dict[Key, float] = {}
        self._clock = clock
        if not labels:
            self.inc((), 0.0)

    def inc(self, key: Key, amount: float = 1.0) -> None:
        cell = self.values.get(key)
        if cell is None:
            cell = self.values[key] = [0.0]
            self.created[key] = self._clock()
        if amount > 0.0:
            cell[0] += amount


class HistogramTally:
    """A histogram family by label values: per label set, the count in each bucket (not
    cumulative; the last bucket is ``+Inf``) and the sum. A value lands in the first bucket
    whose upper bound is at least it; a NaN lands in ``+Inf``."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labels: tuple[str, ...],
        buckets: tuple[float, ...],
        clock: Callable[[], float] = time.time,
    ) -> None:
        if list(buckets) != sorted(set(buckets)) or not buckets:
            raise ValueError(f"histogram {name}: buckets must be distinct and ascending")
        self.name = name
        self.documentation = documentation
        self.labels = labels
        self.bounds: tuple[float, ...] = (
            buckets if buckets[-1] == math.inf else (*buckets, math.inf)
        )
        # Per label set, its buckets and sum in one record: one dict lookup per ``observe``.
        self.series: dict[Key, HistogramSeries] = {}
        self.created: dict[Key, float] = {}
        self._clock = clock

    def observe(self, key: Key, value: float) -> None:
        series = self.series.get(key)
        if series is None:
            series = self.series[key] = HistogramSeries(len(self.bounds))
            self.created[key] = self._clock()
        counts = series.counts
        last = len(counts) - 1
        index = 0
        for bound in self.bounds:
            if value <= bound or index == last:
                break
            index += 1
        counts[index] += 1
        series.total += value


class HistogramSeries:
    """One label set of a histogram: the count in each bucket (not cumulative) and the sum."""

    __slots__ = ("counts", "total")

    def __init__(self, buckets: int) -> None:
        self.counts: list[int] = [0] * buckets
        self.total = 0.0
