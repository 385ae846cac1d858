"""What is read at scrape time: ``StateCollector`` reports what the buffer, the findings
stream and the receivers hold now as gauges, instead of mirroring it into gauges on every
change, and the buffer's bounds beside what it holds; ``TallyCollector`` renders the
per-trace counters and histograms the pipeline counts natively (``sinks.tally``).

Not in ``sinks.prometheus``: that module is compiled (``toolwatch.compiled``), and a compiled
class cannot derive from ``prometheus_client``'s ``Collector`` (the build does not see it, and
the class it made crashed the interpreter).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from toolwatch.sinks.tally import CounterTally, HistogramTally

__all__ = ["BufferState", "OthersCollector", "StateCollector", "TallyCollector"]

_log = logging.getLogger(__name__)

#: A scrape-time read of one unlabelled gauge: its value, or ``None`` for no series.
_Read = Callable[[], float | None]


@dataclass(frozen=True, slots=True)
class BufferState:
    """What the trace buffer holds right now (``TraceBuffer.buffered_*``, and
    ``remembered_traces``), how long its earliest completion check has been due without
    being made (``TraceBuffer.overdue_ns``, in seconds), and the bounds it holds them
    under (``AssemblyLimits.max_traces``, ``max_buffered_spans``, ``max_buffered_bytes``):
    ``None``, no series, where the caller has no buffer's bounds to tell."""

    traces: int
    spans: int
    bytes: int
    overdue_seconds: float = 0.0
    remembered: int = 0
    max_traces: int | None = None
    max_spans: int | None = None
    max_bytes: int | None = None


class StateCollector(Collector):
    """Reads pipeline state at scrape time and reports it as gauges.

    ``buffer`` returns the buffer's current ``BufferState``, its bounds included (their
    gauges left out where it gives none); ``stream_subscribers`` (optional) the number of
    open findings-stream subscriptions; ``requests_in_flight`` (optional) the export
    requests being read or handled; ``stream_listening`` (optional) whether the
    findings stream's listener is bound, ``False`` while it is down for want of its address
    (``StreamListener.down``), ``None`` while there is no listener (its gauge left out). All
    are called on every scrape, from the scraping thread, so they must be cheap reads. A
    callable that raises is logged and its gauges are left out of that scrape rather than
    failing the whole exposition.
    """

    def __init__(
        self,
        buffer: Callable[[], BufferState],
        stream_subscribers: Callable[[], int] | None = None,
        requests_in_flight: Callable[[], int] | None = None,
        stream_listening: Callable[[], bool | None] | None = None,
    ) -> None:
        self._buffer = buffer
        reads: tuple[tuple[Callable[[], GaugeMetricFamily], _Read | None], ...] = (
            (_subscribers_family, stream_subscribers),
            (_in_flight_family, requests_in_flight),
            (_listening_family, stream_listening),
        )
        self._reads = [(family, read) for family, read in reads if read is not None]

    def describe(self) -> Iterable[GaugeMetricFamily]:
        # Lets the registry check names at registration without calling the callables.
        families = (*self._families(), *_bound_families())
        return [*families, *(family() for family, _ in self._reads)]

    def collect(self) -> Iterable[GaugeMetricFamily]:
        try:
            state = self._buffer()
        except Exception:
            _log.exception("reading the trace buffer's state for a scrape failed")
        else:
            values = (
                state.traces,
                state.spans,
                state.bytes,
                state.overdue_seconds,
                state.remembered,
            )
            for family, value in zip(self._families(), values, strict=True):
                family.add_metric([], value)
                yield family
            bounds = (state.max_traces, state.max_spans, state.max_bytes)
            for family, bound in zip(_bound_families(), bounds, strict=True):
                if bound is not None:
                    family.add_metric([], bound)
                    yield family
        for make, read in self._reads:
            gauge = make()
            try:
                read_now = read()
            except Exception:
                _log.exception("reading %s for a scrape failed", gauge.name)
                continue
            if read_now is not None:  # ``None``: nothing to report yet, no series
                gauge.add_metric([], float(read_now))
                yield gauge

    def _families(self) -> list[GaugeMetricFamily]:
        return [
            GaugeMetricFamily("toolwatch_buffered_traces", "Traces waiting in the buffer."),
            GaugeMetricFamily("toolwatch_buffered_spans", "Spans waiting in the buffer."),
            GaugeMetricFamily(
                "toolwatch_buffered_bytes", "Approximate payload bytes waiting in the buffer."
            ),
            GaugeMetricFamily(
                "toolwatch_assembly_overdue_seconds",
                "How long the buffer's earliest completion check has been due without being"
                " made: near 0 while assembly keeps up, growing while nothing completes traces.",
            ),
            GaugeMetricFamily(
                "toolwatch_remembered_traces",
                "Ids of evaluated traces remembered, so that their late spans are dropped"
                " (at most assembly.max_remembered_traces).",
            ),
        ]


def _bound_families() -> list[GaugeMetricFamily]:
    """The bounds of ``toolwatch_buffered_traces``, ``_spans`` and ``_bytes``, named as
    ``process_max_fds`` is beside ``process_open_fds`` and ``process_virtual_memory_max_bytes``
    beside ``process_virtual_memory_bytes``: ``max_`` before the unit, which the Prometheus
    naming practices put last (``_bytes``), so a ratio divides two names that differ by it."""
    return [
        GaugeMetricFamily(
            "toolwatch_buffered_max_traces",
            "assembly.max_traces: the most traces the buffer holds; past it a request that"
            " starts a trace is refused (overflow: backpressure) or the oldest run is judged"
            " early (evict_oldest, or once refusing for assembly.max_refusal_seconds).",
        ),
        GaugeMetricFamily(
            "toolwatch_buffered_max_spans",
            "assembly.max_buffered_spans: the most spans the buffer holds, as"
            " toolwatch_buffered_max_traces bounds traces.",
        ),
        GaugeMetricFamily(
            "toolwatch_buffered_max_bytes",
            "assembly.max_buffered_bytes: the most payload bytes the buffer holds, by its"
            " estimate (toolwatch_buffered_bytes), as toolwatch_buffered_max_traces bounds"
            " traces.",
        ),
    ]


def _subscribers_family() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        "toolwatch_stream_subscribers",
        "Findings-stream subscriptions whose call is open, one superseded by a resume until its"
        " call ends: what output.stream_max_subscribers bounds.",
    )


def _listening_family() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        "toolwatch_stream_listening",
        "1 while the findings stream's listener is bound (a restart for a client CA taken out"
        " included), 0 while a restart could not bind listen.stream again (the port taken, the"
        " address no longer this host's, its name not resolving):"
        " live subscribers miss findings, the findings log and metrics have them.",
    )


def _in_flight_family() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        "toolwatch_requests_in_flight",
        "OTLP export requests being read or handled (ingest.max_concurrent_requests caps it).",
    )


class TallyCollector(Collector):
    """Renders ``CounterTally`` and ``HistogramTally`` families as the ``prometheus_client``
    ``Counter`` and ``Histogram`` of the same name and labels would render them: the same
    samples in the same order (label sets in the order first seen; ``_total`` and
    ``_created``; cumulative ``_bucket`` with ``floatToGoString`` bounds, ``_count``,
    ``_sum``, ``_created``), so scrapers, rules and dashboards see no difference (only the
    order of families in the exposition can move: one collector's families come together)."""

    def __init__(self, tallies: Iterable[CounterTally | HistogramTally]) -> None:
        self._tallies = tuple(tallies)

    def describe(self) -> Iterable[Metric]:
        # The names, for the registry's duplicate check: reading the tallies is cheap.
        return self.collect()

    def collect(self) -> Iterable[Metric]:
        return [_render(tally) for tally in self._tallies]


def _render(tally: CounterTally | HistogramTally) -> Metric:
    if isinstance(tally, CounterTally):
        counter = CounterMetricFamily(tally.name, tally.documentation, labels=tally.labels)
        for key, (value,) in tally.values.items():
            counter.add_metric(key, value, created=tally.created[key])
        return counter
    histogram = HistogramMetricFamily(tally.name, tally.documentation, labels=tally.labels)
    # The ``le`` values as prometheus_client writes them ("0.1", "1.0", "+Inf").
    bounds = [floatToGoString(bound) for bound in tally.bounds]  # type: ignore[no-untyped-call]
    for key, series in tally.series.items():
        cumulative = list(itertools.accumulate(float(count) for count in series.counts))
        histogram.add_metric(key, list(zip(bounds, cumulative, strict=True)), series.total)
        labels = dict(zip(tally.labels, key, strict=True))
        histogram.add_sample(f"{histogram.name}_created", labels, tally.created[key])
    return histogram


class _Limiter(Protocol):
    """A label limit (``sinks.label_limits.LabelLimiter``, ``PairLimiter``)."""

    @property
    def others(self) -> int: ...


class OthersCollector(Collector):
    """``toolwatch_label_values_other_total{label}``: how many times the agent, tool and
    (agent, tool) pair limits reported a value as ``_other``, once per series update it
    labels (``PrometheusMetrics``: ``tool_trace``'s run and calls, ``finding``, and
    ``run_findings``' label sets), not once per distinct name; read from
    the limiters at scrape time (counting them is an integer increment on the call path)."""

    def __init__(self, limiters: Iterable[tuple[str, _Limiter]]) -> None:
        self._limiters = tuple(limiters)
        self._created = time.time()  # the limiters count from now: the series' _created

    def describe(self) -> Iterable[CounterMetricFamily]:
        return [self._family()]

    def collect(self) -> Iterable[CounterMetricFamily]:
        family = self._family()
        for label, limiter in self._limiters:
            family.add_metric([label], limiter.others, created=self._created)
        yield family

    @staticmethod
    def _family() -> CounterMetricFamily:
        return CounterMetricFamily(
            "toolwatch_label_values_other",
            "Times a label value was reported as _other: each series update it was folded"
            " into _other for counts once (a run's agent; each call's tool and pair, and its"
            " agent where not the run's; each finding; each label set of a run's findings),"
            " so this counts reports, not distinct names. A value is _other past its label's"
            " cap"
            " (metrics.label_value_cap, metrics.agent_tool_pair_cap), longer than 128"
            " characters, or not writable as UTF-8.",
            labels=["label"],
        )
