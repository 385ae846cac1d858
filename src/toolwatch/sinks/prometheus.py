"""Prometheus implementation of the pipeline's metrics interface.

``PrometheusMetrics`` turns the semantic calls of ``toolwatch.metrics.PipelineMetrics`` into
counters and histograms registered on a ``CollectorRegistry`` the app builds and passes in
(never the process-global ``REGISTRY``, so tests and several pipelines in one process do not
share series). State the pipeline already holds (buffered traces, spans and bytes; stream
subscribers) is read at scrape time by ``StateCollector`` (``sinks.scrape_state``) instead of
being mirrored into gauges. The series counted per agent run (runs, calls, spans built, each
evaluator's duration and score: a few updates per span) are counted natively in
``sinks.tally`` and rendered at scrape time by ``TallyCollector``, identically; the rest,
rarer (per request, per finding, per loss), stay ``prometheus_client`` metrics.

The families themselves (names, help, labels, buckets, the series started at 0) are defined
in ``sinks.prometheus_families``, whose ``MetricFamilies`` this class derives from; the label
limits in ``sinks.label_limits``. Names follow the Prometheus naming practices: base units
(seconds, bytes), ``_total`` on counters. Every label value comes from a bounded set
(``LabelLimiter``): configured names are always kept, other values are admitted up to a
per-label cap and then reported as ``_other``. Trace ids never become label values; they
travel as exemplars, which only the OpenMetrics exposition carries
(https://github.com/OpenObservability/OpenMetrics, "Exemplars").

Threading: the ``PipelineMetrics`` methods and ``LabelLimiter`` are called from the event loop
only, and the tallies are rendered there too (the metrics listener runs on the loop).
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, TypeVar, cast

from prometheus_client import CollectorRegistry, Counter, Histogram, Info

from toolwatch import __version__
from toolwatch.build_revision import UNKNOWN
from toolwatch.certificate_dates import CertificateDates
from toolwatch.metrics import (
    CONVERSATION_EVICTION_BOUNDS,
    DROP_REASONS,
    EVICTION_BOUNDS,
    REJECT_REASONS,
    REQUEST_OUTCOMES,
    UNMATCHED_CASE_REASONS,
    UNPAIRED_REASONS,
)
from toolwatch.model import MISSING_SPANS, CallStatus, Category, ReferenceKind, Severity, Traffic
from toolwatch.model_evaluation import Finding
from toolwatch.model_traces import ToolTrace
from toolwatch.sinks.label_limits import OTHER, LabelLimiter, PairLimiter
from toolwatch.sinks.prometheus_families import (
    _EVALUATORS,
    _LISTENERS,
    _RELOADED,
    _TRANSPORTS,
    OUTPUTS,
    MetricFamilies,
)
from toolwatch.sinks.scrape_state import BufferState, OthersCollector, StateCollector

__all__ = ["BufferState", "PrometheusMetrics", "StateCollector"]

# Exemplar label sets are limited to 128 UTF-8 characters (OpenMetrics); a W3C trace id is
# 32 hex digits, so anything else is not a trace id and gets no exemplar.
_TRACE_ID: Final = re.compile(r"[0-9a-fA-F]{32}")

_STATUSES: Final = ("ok", "error")
_MAX_EVALUATOR_KEYS: Final = 1024  # evaluator names whose label key is remembered
_OUTCOMES: Final = ("complete", "timed_out", "evicted", "span_limit", "shutdown", MISSING_SPANS)
#: What a run was compared with: a golden case, a shadow source, or nothing but the policy.
_REFERENCES: Final = ("expected", "source", "none")
#: ``toolwatch_tls_certificate_{expiry,not_before}_timestamp_seconds``: the served certificate,
#: the client CA.
_CERTIFICATE_FILES: Final = ("certificate", "client_ca")

_Metric = TypeVar("_Metric", Counter, Histogram)


class PrometheusMetrics(MetricFamilies):
    """``PipelineMetrics`` on Prometheus counters and histograms in ``registry``.

    ``agents`` and ``tools`` (configured names: policy tools, golden cases, allowed tools per
    agent) always keep their own label values; up to ``label_value_cap`` other values per
    label are admitted, the rest report as ``_other``; of the (agent, tool) pairs of two
    unconfigured names, ``agent_tool_pair_cap`` are admitted, later ones report their tool
    as ``_other`` (``PairLimiter``). Registers
    ``toolwatch_build_info{version,revision,decoder,hot_path}`` = 1 (``revision``: the build's,
    ``build_revision``; ``decoder``: which OTLP scanner
    runs, ``compiled`` or ``reference``; ``hot_path``: ``compiled`` when every module mypyc
    compiles runs compiled, else ``python``) and, when ``buffer_state`` is given, a
    ``StateCollector`` reading it (and ``stream_subscribers``, ``requests_in_flight``,
    ``stream_listening``) at scrape time; the callables are only called during scrapes, so
    they may refer to objects built after this one. Methods never raise on odd input.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        agents: Iterable[str] = (),
        tools: Iterable[str] = (),
        label_value_cap: int = 100,
        agent_tool_pair_cap: int = 1000,
        version: str = __version__,
        revision: str = UNKNOWN,
        decoder: str = "compiled",
        hot_path: str = "compiled",
        buffer_state: Callable[[], BufferState] | None = None,
        stream_subscribers: Callable[[], int] | None = None,
        requests_in_flight: Callable[[], int] | None = None,
        stream_listening: Callable[[], bool | None] | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._watched_cases: frozenset[str] = frozenset()  # with expected_every_seconds
        agents, tools = tuple(agents), tuple(tools)  # read twice: by name, then as pairs
        self._agent = LabelLimiter(agents, label_value_cap, "agent", folded=True)
        self._tool = LabelLimiter(tools, label_value_cap, "tool")
        self._pair = PairLimiter(agents, tools, agent_tool_pair_cap)
        # Label values that come from the code are known: always kept, whatever the cap
        # (which then bounds only values no release of toolwatch reports, and custom
        # evaluators' names).
        self._evaluator = LabelLimiter(_EVALUATORS, label_value_cap)
        self._rejected_reason = LabelLimiter(REJECT_REASONS, label_value_cap)
        self._dropped_reason = LabelLimiter(DROP_REASONS, label_value_cap)
        self._eviction_bound = LabelLimiter(EVICTION_BOUNDS, label_value_cap)
        self._conversation_bound = LabelLimiter(CONVERSATION_EVICTION_BOUNDS, label_value_cap)
        self._unpaired_reason = LabelLimiter(UNPAIRED_REASONS, label_value_cap)
        self._unmatched_reason = LabelLimiter(UNMATCHED_CASE_REASONS, label_value_cap)
        self._request_outcome = LabelLimiter(REQUEST_OUTCOMES, label_value_cap)
        self._transport = LabelLimiter(_TRANSPORTS, 0)
        self._status = LabelLimiter(_STATUSES, 0)
        self._trace_outcome = LabelLimiter(_OUTCOMES, 0)
        self._reference = LabelLimiter(_REFERENCES, 0)
        self._listener = LabelLimiter(_LISTENERS, 0)
        self._children: dict[tuple[Any, tuple[str, ...]], Any] = {}
        # Label values looked up once per run or evaluator, not worked out again: each
        # status's, and each evaluator name's key (names come from the code and config).
        self._status_labels = {status: self._status(str(status)) for status in CallStatus}
        self._evaluator_keys: dict[str, tuple[str]] = {}
        super().__init__(registry, wall_clock)
        limiters = (("agent", self._agent), ("tool", self._tool), ("pair", self._pair))
        registry.register(OthersCollector(limiters))
        Info("toolwatch_build", "toolwatch version, always 1.", registry=registry).info(
            {"version": version, "revision": revision, "decoder": decoder, "hot_path": hot_path}
        )
        if buffer_state is not None:
            collector = StateCollector(
                buffer_state, stream_subscribers, requests_in_flight, stream_listening
            )
            registry.register(collector)

    def _child(self, metric: _Metric, *values: str) -> _Metric:
        """``metric.labels(*values)``, memoized: ``labels`` validates and takes a lock on every
        call, and the pipeline asks for several children per agent run. The cache is as
        bounded as the label values (``LabelLimiter``)."""
        key = (metric, values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return cast("_Metric", child)

    def spans_received(self, n: int, transport: str) -> None:
        _add(self._child(self._received, self._transport.label(transport)), n)

    def spans_rejected(self, n: int, reason: str) -> None:
        _add(self._rejected.labels(self._rejected_reason(reason)), n)

    def spans_dropped(self, n: int, reason: str) -> None:
        _add(self._child(self._dropped, self._dropped_reason(reason)), n)

    def spans_refused(self, n: int, transport: str) -> None:
        _add(self._refused.labels(self._transport.label(transport)), n)

    def spans_built(self, n: int) -> None:
        self._built.inc((), n)

    def trace_evicted(self, reason: str) -> None:
        self._evictions.labels(self._eviction_bound(reason)).inc()

    def remembered_traces_evicted(self, n: int) -> None:
        _add(self._remembered_evictions, n)

    def conversation_evicted(self, reason: str) -> None:
        self._conversation_evictions.labels(self._conversation_bound(reason)).inc()

    def request_handled(self, transport: str, outcome: str, seconds: float) -> None:
        labels = (self._transport.label(transport), self._request_outcome.label(outcome))
        self._child(self._request_seconds, *labels).observe(seconds)

    def tool_trace(self, trace: ToolTrace, reference: str, traffic: Traffic) -> None:
        """Counts the run by outcome, reference and traffic, and each of its calls by tool,
        status and traffic."""
        reason = "complete" if trace.complete else trace.incomplete_reason or OTHER
        outcome = self._trace_outcome.label(reason)
        run_agent = self._agent.label(trace.agent)
        label = str(traffic)
        self._tool_traces.inc((run_agent, outcome, self._reference.label(reference), label))
        for call in trace.calls:
            same = not call.agent or call.agent == trace.agent  # the run's agent, usually
            agent = run_agent if same else self._agent.label(call.agent)
            status = self._status_labels.get(call.status) or self._status.label(str(call.status))
            tool = self._pair.tool_label(agent, self._tool.label(call.tool_name))
            self._tool_calls.inc((agent, tool, status, label))

    def evaluated(self, evaluator: str, score: float | None, seconds: float) -> None:
        key = self._evaluator_keys.get(evaluator)
        if key is None:
            key = (self._evaluator.label(evaluator),)  # the same for this name from now on
            if len(self._evaluator_keys) < _MAX_EVALUATOR_KEYS:
                self._evaluator_keys[evaluator] = key
        self._evaluation_seconds.observe(key, seconds)
        if score is not None and math.isfinite(score):
            self._scores.observe(key, score)

    def evaluator_failed(self, evaluator: str) -> None:
        self._evaluator_failures.labels(self._evaluator.label(evaluator)).inc()

    def finding(self, finding: Finding, detection_seconds: float | None, traffic: Traffic) -> None:
        """Counts the finding; its trace id rides along as an exemplar."""
        exemplar = {"trace_id": finding.trace_id} if _TRACE_ID.fullmatch(finding.trace_id) else None
        agent = self._agent.label(finding.agent)
        self._child(
            self._regressions,
            _enum_label(finding.category, Category),
            _enum_label(finding.severity, Severity),
            self._evaluator.label(finding.evaluator),
            agent,
            self._pair.tool_label(agent, self._tool.label(finding.tool)),
            str(traffic),
        ).inc(exemplar=exemplar)
        if detection_seconds is not None:
            self._detection_seconds.observe(detection_seconds, exemplar=exemplar)

    def run_findings(self, findings: Sequence[Finding], traffic: Traffic) -> None:
        """Counts the run once in each label set its findings fall in (labels as ``finding``
        reports them, less the severity, plus the reference judged against). Each distinct
        set of names is limited once, so a name past its cap is reported as ``_other`` once
        for the run, not once per finding."""
        named = dict.fromkeys(
            (f.category, f.evaluator, f.reference, f.agent, f.tool) for f in findings
        )
        counted: set[tuple[str, str, str, str, str, str]] = set()
        for category, evaluator, reference, agent_name, tool in named:
            agent = self._agent.label(agent_name)
            labels = (
                _enum_label(category, Category),
                self._evaluator.label(evaluator),
                _enum_label(reference, ReferenceKind),
                agent,
                self._pair.tool_label(agent, self._tool.label(tool)),
                str(traffic),
            )
            if labels not in counted:  # two names past a cap are both _other
                counted.add(labels)
                self._child(self._runs_with_findings, *labels).inc()

    def stream_dropped(self, n: int) -> None:
        _add(self._stream_dropped, n)

    def shadow_unpaired(self, reason: str) -> None:
        self._shadow_unpaired.labels(self._unpaired_reason(reason)).inc()

    def golden_unmatched(self, reason: str) -> None:
        self._golden_unmatched.labels(self._unmatched_reason(reason)).inc()

    def golden_cases_watched(self, every: Mapping[str, float]) -> None:
        """The cases watched from now on (a reload may add, drop or change them): a case
        kept keeps its last match; a dropped one loses its series."""
        for case_id in self._watched_cases.difference(every):
            self._case_every.remove(case_id)
            # Never matched: prometheus-client before 0.22 raises removing what is not there.
            with contextlib.suppress(KeyError):
                self._case_matched.remove(case_id)
        for case_id, seconds in every.items():
            self._case_every.labels(case_id).set(seconds)
        self._watched_cases = frozenset(every)

    def golden_case_judged(self, case_id: str) -> None:
        if case_id in self._watched_cases:  # else a case the engine no longer holds
            self._case_matched.labels(case_id).set(self._wall_clock())

    def output_failed(self, output: str) -> None:
        """An output (``OUTPUTS``: the findings log, the ToolTrace dump, the stream, a sink
        added in code) failed to take a write: what it held is missing from it."""
        self._sink_failures.labels(output if output in OUTPUTS else OTHER).inc()

    def namespaced_tool_names(self, tool: str, names: int) -> None:
        """``names`` tool names seen are the policy's ``tool`` in a namespace."""
        self._namespaced.labels(self._tool(tool)).set(names)

    def auth_failed(self, listener: str) -> None:
        self._auth_failures.labels(self._listener(listener)).inc()

    def connection_refused(self, listener: str, reason: str) -> None:
        self._connections_refused.labels(self._listener(listener), reason).inc()

    def reload_failed(self, what: str) -> None:
        """Thread-safe: prometheus_client's counters are."""
        self._reload_failures.labels(what if what in _RELOADED else OTHER).inc()

    def certificates_served(self, dates: Mapping[str, CertificateDates]) -> None:
        """Thread-safe: prometheus_client's gauges are, and the callers take turns
        (``tls.CertificateFiles`` reports under its lock)."""
        files = {name if name in _CERTIFICATE_FILES else OTHER: d for name, d in dates.items()}
        for name in self._certificate_files.difference(files):
            self._certificate_expiry.remove(name)
            self._certificate_not_before.remove(name)
        for name, served in files.items():
            self._certificate_expiry.labels(name).set(served.not_after.timestamp())
            self._certificate_not_before.labels(name).set(served.not_before.timestamp())
        self._certificate_files = frozenset(files)

    def config_reloaded(
        self, ok: bool, tools: Iterable[str] = (), agents: Iterable[str] = ()
    ) -> None:
        """A configuration reload worked (``tools`` and ``agents``: the names it holds, kept
        as label values from now on) or failed."""
        self._reload_ok.set(1 if ok else 0)
        if ok:
            self._reloaded_at.set(self._wall_clock())
            tools, agents = tuple(tools), tuple(agents)
            self._tool.know(tools)
            self._agent.know(agents)
            self._pair.know(agents, tools)


def _add(counter: Counter, n: int) -> None:
    """Adds ``n``; a negative count (a caller's bug) is ignored, since counters only grow
    and metrics must never raise into the pipeline."""
    if n > 0:
        counter.inc(n)


def _enum_label(value: str, kind: type[Category] | type[Severity] | type[ReferenceKind]) -> str:
    """``value`` if it names a member of ``kind`` (a closed set), else ``_other``."""
    return value if value in kind._value2member_map_ else OTHER
