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

Names follow the Prometheus naming practices: base units (seconds, bytes), ``_total`` on
counters. Every label value comes from a bounded set (``LabelLimiter``): configured names are
always kept, other values are admitted up to a per-label cap and then reported as ``_other``.
Trace ids never become label values; they travel as exemplars, which only the OpenMetrics
exposition carries (https://github.com/OpenObservability/OpenMetrics, "Exemplars").

Threading: the ``PipelineMetrics`` methods and ``LabelLimiter`` are called from the event loop
only, and the tallies are rendered there too (the metrics listener runs on the loop).
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, TypeVar, cast

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

from toolwatch import __version__
from toolwatch.build_revision import UNKNOWN
from toolwatch.certificate_dates import CertificateDates
from toolwatch.evaluation.pipeline import EVALUATOR_ORDER
from toolwatch.metrics import (
    CONVERSATION_EVICTION_BOUNDS,
    DROP_REASONS,
    EVICTION_BOUNDS,
    REJECT_REASONS,
    REQUEST_OUTCOMES,
    UNMATCHED_CASE_REASONS,
    UNPAIRED_REASONS,
)
from toolwatch.model import (
    MISSING_SPANS,
    CallStatus,
    Category,
    Finding,
    ReferenceKind,
    Severity,
    ToolTrace,
    Traffic,
)
from toolwatch.names import Spellings
from toolwatch.sinks.scrape_state import (
    BufferState,
    OthersCollector,
    StateCollector,
    TallyCollector,
)
from toolwatch.sinks.tally import CounterTally, HistogramTally

__all__ = [
    "OTHER",
    "OUTPUTS",
    "BufferState",
    "LabelLimiter",
    "PairLimiter",
    "PrometheusMetrics",
    "StateCollector",
]

_log = logging.getLogger(__name__)

#: The label value that stands for every value past a label's cap.
OTHER: Final = "_other"

#: Values longer than this are free text, not names: they always map to ``_other``.
_MAX_LABEL_VALUE_LENGTH: Final = 128

# Exemplar label sets are limited to 128 UTF-8 characters (OpenMetrics); a W3C trace id is
# 32 hex digits, so anything else is not a trace id and gets no exemplar.
_TRACE_ID: Final = re.compile(r"[0-9a-fA-F]{32}")

# Not ``Final``: mypyc 2.4 keeps a Final tuple of floats unboxed and reads it back as unset
# (NameError).
_SCORE_BUCKETS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)
_EVALUATION_BUCKETS = (1e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.05, 0.1, 1.0)
# Up to the default read timeout (ingest.read_timeout_seconds, 30 s): a timed-out read is seen.
_REQUEST_BUCKETS = (
    *(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5),
    *(1.0, 2.5, 5.0, 10.0, 30.0),
)
# Detection waits at least the assembly's completion wait (2 s by default) and at most the
# maximum trace age (300 s by default), so the buckets are dense between those: the ones just
# above 2 s show what toolwatch adds to the default wait; the first ones resolve the
# sub-second waits latency-sensitive deployments (and the benchmark) use.
_DETECTION_BUCKETS = (
    *(0.1, 0.2, 0.25, 0.3, 0.5),
    *(1.0, 2.0, 2.05, 2.1, 2.25, 2.5, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0),
)

_TRANSPORTS: Final = ("grpc", "http")
_STATUSES: Final = ("ok", "error")
_MAX_EVALUATOR_KEYS: Final = 1024  # evaluator names whose label key is remembered
_OUTCOMES: Final = ("complete", "timed_out", "evicted", "span_limit", "shutdown", MISSING_SPANS)
#: What a run was compared with: a golden case, a shadow source, or nothing but the policy.
_REFERENCES: Final = ("expected", "source", "none")
_LISTENERS: Final = ("grpc", "http", "metrics", "stream")
_RELOADED: Final = ("tokens", "certificate")
#: ``toolwatch_connections_refused_total``: the listeners whose connections toolwatch accepts
#: itself (gRPC's own are refused unseen), and why one is closed before any request.
_GATED: Final = ("http", "metrics")
_CONNECTION_REFUSALS: Final = (
    "tls_handshake",
    "connection_limit",
    "connection_limit_idle",
    "heads_budget",
    "answer_unread",
)
#: ``toolwatch_tls_certificate_{expiry,not_before}_timestamp_seconds``: the served certificate,
#: the client CA.
_CERTIFICATE_FILES: Final = ("certificate", "client_ca")
#: Evaluator labels: the built-in evaluators, and the engine's own stage (an unexpected error
#: while it evaluates a batch).
_EVALUATORS: Final = (*EVALUATOR_ORDER, "engine")
#: Request outcomes the shipped alerts watch: their series start at 0 (histograms, so not all).
_ALERTED_OUTCOMES: Final = ("invalid", "refused", "overloaded", "timeout", "aborted")

#: The ``output`` label of ``toolwatch_output_failures_total``: the findings log
#: (``output.findings``), the ToolTrace dump (``output.dump_tooltraces``), the findings
#: stream, and a findings sink added in code (``extra``).
OUTPUTS: Final = ("findings_log", "tooltraces", "stream", "extra")

_Metric = TypeVar("_Metric", Counter, Histogram)


def _utf8(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class LabelLimiter:
    """Bounds the values one label can take.

    Configured (``known``) values and the empty string (the label does not apply) always
    pass. Any other value is admitted the first time it is seen while fewer than ``cap``
    such values have been admitted; after that, and for values longer than 128 characters or
    not encodable as UTF-8, the result is ``_other``. So a label never has more than
    ``len(known) + cap + 2`` distinct values, whatever the input. Not thread-safe: call it
    from the event loop.
    """

    __slots__ = ("_admitted", "_cap", "_known", "_name", "_spellings", "others")

    def __init__(
        self, known: Iterable[str] = (), cap: int = 100, name: str = "", folded: bool = False
    ) -> None:
        if cap < 0:
            raise ValueError(f"label cap must be >= 0, got {cap}")
        self._known = frozenset(known) | {""}
        self._admitted: set[str] = set()
        self._cap = cap
        self._name = name  # named: the first value reported as _other is logged
        # folded: a value that is a known one trimmed and case-folded reports as the known
        # spelling (the policy names agents so: "Refund-Bot" is the agent refund-bot), as
        # the findings name it (``Spellings``, the engine's too).
        self._spellings = Spellings(self._known) if folded else None
        self.others = 0  # values reported as _other so far (each time)

    def __call__(self, value: str | None) -> str:
        """The label value to report for ``value`` (``None`` reports as ``""``)."""
        if value is None or value in self._known:
            return value or ""
        if self._spellings is not None:  # before the admitted: a reload may name one
            spelled = self._spellings.get(value)
            if spelled is not None:
                return spelled
        if value in self._admitted:
            return value
        if (
            len(value) > _MAX_LABEL_VALUE_LENGTH
            or len(self._admitted) >= self._cap
            or not _utf8(value)  # a lone surrogate: no exposition could carry it
        ):
            self.others += 1
            if self.others == 1 and self._name:
                _first_other(self._name, self._cap)
            return OTHER
        self._admitted.add(value)
        return value

    @property
    def admitted(self) -> frozenset[str]:
        """The values admitted beyond the configured ones, so far."""
        return frozenset(self._admitted)

    def know(self, values: Iterable[str]) -> None:
        """Configured values added (a configuration reloaded): they always pass from now on."""
        self._known |= frozenset(values)
        if self._spellings is not None:
            self._spellings.know(self._known)


class PairLimiter:
    """Bounds the (agent, tool) pairs the per-call series take, so a family's series grow
    with the caps, not with their product.

    Each label is limited on its own first (``LabelLimiter``); that alone allows
    ``(cap + 2)²`` pairs when agent and tool names both churn (a name per tenant, hostile
    input). A pair passes when either side is configured, or is ``""`` or ``_other``: those
    pairs are bounded by the configuration times one cap. Of the pairs of two unconfigured
    names, the first ``cap`` seen are admitted; after that the tool reports as ``_other``
    (the agent keeps its label, so per-agent rates stay whole). Not thread-safe: call it from
    the event loop.
    """

    __slots__ = ("_admitted", "_agents", "_cap", "_count", "_tools", "others")

    def __init__(self, agents: Iterable[str] = (), tools: Iterable[str] = (), cap: int = 1000):
        if cap < 0:
            raise ValueError(f"pair cap must be >= 0, got {cap}")
        self._agents = frozenset(agents) | {"", OTHER}
        self._tools = frozenset(tools) | {"", OTHER}
        # The admitted tools of each agent: two lookups a call, no pair tuple to build.
        self._admitted: dict[str, set[str]] = {}
        self._count = 0  # pairs admitted
        self._cap = cap
        self.others = 0  # tools reported as _other beside their agent so far

    def know(self, agents: Iterable[str], tools: Iterable[str]) -> None:
        """Configured names added (a configuration reloaded): their pairs always pass."""
        self._agents |= frozenset(agents)
        self._tools |= frozenset(tools)

    def tool_label(self, agent: str, tool: str) -> str:
        """The tool label to report beside ``agent``; both are already limited labels. A
        named method, not ``__call__``: compiled callers call it directly, not through the
        interpreter's call slot (130 instructions a span in ``make bench-instructions``)."""
        admitted = self._admitted.get(agent)
        if admitted is not None and tool in admitted:
            return tool
        if tool in self._tools or agent in self._agents:
            return tool
        if self._count >= self._cap:
            self.others += 1
            if self.others == 1:
                _first_other("(agent, tool) pair", self._cap)
            return OTHER
        if admitted is None:
            admitted = self._admitted[agent] = set()
        admitted.add(tool)
        self._count += 1
        return tool


def _first_other(label: str, cap: int) -> None:
    """Says once per label that values now report as ``_other``: pages and dashboards then
    name ``_other`` for them (``toolwatch_label_values_other_total`` counts them)."""
    _log.warning(
        "%s label: a value past the cap (%d values) or longer than %d characters reports as"
        " _other from now on; name the agents and tools to keep in metrics.agents and"
        " metrics.tools (always kept), or raise the metrics section's caps",
        label,
        cap,
        _MAX_LABEL_VALUE_LENGTH,
    )


class PrometheusMetrics:
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
        self._wall_clock = wall_clock
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
        self._register(registry)
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

    def _register(self, r: CollectorRegistry) -> None:
        self._regressions = Counter(
            "toolwatch_regressions_total",
            "Findings: tool-call regressions detected, by category, severity, evaluator, agent,"
            " tool and traffic (live, or shadow: a shadow target's run, a candidate's).",
            ["category", "severity", "evaluator", "agent", "tool", "traffic"],
            registry=r,
        )
        # No severity: a run whose findings of one kind differ in severity is still one run.
        self._runs_with_findings = Counter(
            "toolwatch_runs_with_findings_total",
            "Agent runs with findings, by category, evaluator, reference, agent, tool and"
            " traffic: a run counts once in each, however many findings it has there.",
            ["category", "evaluator", "reference", "agent", "tool", "traffic"],
            registry=r,
        )
        self._register_per_run(r)
        self._register_ingest(r)
        self._register_latency(r)
        self._register_losses(r)
        self._register_sinks(r)
        self._register_certificates(r)

    def _register_certificates(self, r: CollectorRegistry) -> None:
        # One series per file, not per listener: every TLS listener serves the one set.
        self._certificate_expiry = Gauge(
            "toolwatch_tls_certificate_expiry_timestamp_seconds",
            "When the TLS files served now expire, Unix seconds: certificate, the notAfter of"
            " the served (leaf) certificate; client_ca, the earliest notAfter of the client CA"
            " file's certificates valid when the set was taken (the latest, when none is)."
            " Absent without TLS.",
            ["file"],
            registry=r,
        )
        # With the expiry, the lifetime the alerts' thresholds are a share of.
        self._certificate_not_before = Gauge(
            "toolwatch_tls_certificate_not_before_timestamp_seconds",
            "Since when the TLS files served now are valid, Unix seconds: the notBefore of the"
            " certificate whose notAfter toolwatch_tls_certificate_expiry_timestamp_seconds"
            " reports for the same file. Absent without TLS.",
            ["file"],
            registry=r,
        )
        self._certificate_files: frozenset[str] = frozenset()

    def _register_per_run(self, r: CollectorRegistry) -> None:
        """The series updated for every agent run (``sinks.tally``), in one collector."""
        self._tool_calls = CounterTally(
            "toolwatch_tool_calls_total",
            "Tool calls in evaluated agent runs, by agent, tool, status and traffic (live, or"
            " shadow: a shadow target's run, a candidate's).",
            ("agent", "tool", "status", "traffic"),
        )
        self._tool_traces = CounterTally(
            "toolwatch_tool_traces_total",
            "Agent runs (ToolTraces) evaluated, by whether the run was complete, what it was"
            " compared with (expected: a golden case; source: its shadow source; none) and"
            " traffic (live, or shadow: a shadow target's run, a candidate's).",
            ("agent", "outcome", "reference", "traffic"),
        )
        self._scores = HistogramTally(
            "toolwatch_evaluator_score",
            "Scores in [0, 1] given by each evaluator (1 is a perfect match).",
            ("evaluator",),
            _SCORE_BUCKETS,
        )
        self._built = CounterTally(
            "toolwatch_spans_built_total", "Spans that became part of an evaluated ToolTrace."
        )
        self._evaluation_seconds = HistogramTally(
            "toolwatch_evaluation_duration_seconds",
            "Time one evaluator took on one ToolTrace.",
            ("evaluator",),
            _EVALUATION_BUCKETS,
        )
        tallies = (
            self._tool_calls,
            self._tool_traces,
            self._scores,
            self._built,
            self._evaluation_seconds,
        )
        r.register(TallyCollector(tallies))

    def _register_ingest(self, r: CollectorRegistry) -> None:
        self._received = Counter(
            "toolwatch_spans_received_total",
            "Spans in accepted OTLP export requests.",
            ["transport"],
            registry=r,
        )
        self._rejected = Counter(
            "toolwatch_spans_rejected_total",
            "Spans rejected as invalid at ingest (reported in OTLP partial_success).",
            ["reason"],
            registry=r,
        )
        self._refused = Counter(
            "toolwatch_spans_refused_total",
            "Spans of requests refused with a retryable overload status.",
            ["transport"],
            registry=r,
        )

    def _register_latency(self, r: CollectorRegistry) -> None:
        self._request_seconds = Histogram(
            "toolwatch_export_request_duration_seconds",
            "Time to handle one OTLP export request.",
            ["transport", "outcome"],
            buckets=_REQUEST_BUCKETS,
            registry=r,
        )
        self._detection_seconds = Histogram(
            "toolwatch_detection_latency_seconds",
            "Time from the last span of a trace being received to a finding about it.",
            buckets=_DETECTION_BUCKETS,
            registry=r,
        )

    def _register_sinks(self, r: CollectorRegistry) -> None:
        self._sink_failures = Counter(
            "toolwatch_output_failures_total",
            "Writes an output failed (the findings log or the ToolTrace dump on a full disk,"
            " or blocked behind a stalled log driver): what they held is counted in the"
            " metrics but missing there.",
            ["output"],
            registry=r,
        )
        for output in OUTPUTS:
            self._sink_failures.labels(output)  # from 0, so that increase() sees the first

    def _register_losses(self, r: CollectorRegistry) -> None:
        self._namespaced = Gauge(
            "toolwatch_namespaced_tool_names",
            "Tool names seen since the configuration was loaded that are a policy tool's in a"
            " namespace (billing__issue_refund for issue_refund): the policy does not apply"
            " to their calls until policy.tool_prefix or an alias names them.",
            ["tool"],
            registry=r,
        )
        self._dropped = Counter(
            "toolwatch_spans_dropped_total",
            "Valid spans never evaluated (duplicate, late, over a bound, ...).",
            ["reason"],
            registry=r,
        )
        self._evictions = Counter(
            "toolwatch_trace_evictions_total",
            "Traces evicted from the buffer and evaluated as incomplete.",
            ["reason"],
            registry=r,
        )
        self._remembered_evictions = Counter(
            "toolwatch_remembered_trace_evictions_total",
            "Ids of evaluated traces forgotten before assembly.late_span_window_seconds passed,"
            " because assembly.max_remembered_traces were remembered: a span of such a trace"
            " that comes later starts a second, partial trace instead of being dropped as late.",
            registry=r,
        )
        self._conversation_evictions = Counter(
            "toolwatch_conversation_evictions_total",
            "Conversations whose verifications policy.verification_scope: conversation forgot"
            " to make room (reason: max_conversations, 10,000 were remembered;"
            " conversation_max_bytes, what they held reached policy.conversation_max_bytes):"
            " a later run of such a conversation is judged without its earlier runs'"
            " verifications.",
            ["reason"],
            registry=r,
        )
        self._evaluator_failures = Counter(
            "toolwatch_evaluator_failures_total",
            "Evaluator runs that raised (isolated; the other evaluators still ran).",
            ["evaluator"],
            registry=r,
        )
        self._stream_dropped = Counter(
            "toolwatch_stream_dropped_findings_total",
            "Findings a findings-stream subscription did not deliver: dropped from its full queue,"
            " let go before its replay read them, or queued when its client left and no longer"
            " held for a resume.",
            registry=r,
        )
        self._shadow_unpaired = Counter(
            "toolwatch_shadow_unpaired_total",
            "Shadow-pair runs never compared because their twin did not arrive.",
            ["reason"],
            registry=r,
        )
        self._golden_unmatched = Counter(
            "toolwatch_golden_unmatched_traces_total",
            "Traces whose complete runs name a golden case id none of them was matched to, so"
            " no case judged the canary: unknown_case (no case has the id: a typo, an old"
            " file), several_runs (the id is on a span above several runs and the case names"
            " no agent to say which is its run), agent_not_run (the case names an agent none"
            " of those runs is).",
            ["reason"],
            registry=r,
        )
        # The last match alone, not a deadline: a replica that starts knows of no match, and
        # must not say the case is fine until some time after. The alert rules keep the
        # latest over replicas, restarts and scrape gaps (a recording rule that remembers).
        self._case_every = Gauge(
            "toolwatch_golden_case_expected_every_seconds",
            "How often a run matched to the golden case is expected (its"
            " expected_every_seconds): only the cases that set it.",
            ["case"],
            registry=r,
        )
        self._case_matched = Gauge(
            "toolwatch_golden_case_last_matched_timestamp_seconds",
            "When a complete run was last matched to the golden case, Unix seconds: cases"
            " with expected_every_seconds, once one was since start-up.",
            ["case"],
            registry=r,
        )
        # What toolwatch refuses once a connection's TLS handshake is done. A handshake that
        # fails (mutual TLS: a client certificate missing, expired or of another CA) fails in
        # OpenSSL or gRPC: the HTTP listeners' are connections_refused, gRPC's are unseen
        # (gRPC has no hook for it).
        self._auth_failures = Counter(
            "toolwatch_auth_failures_total",
            "Requests refused for their credentials after the TLS handshake: a missing or"
            " wrong bearer token (UNAUTHENTICATED, 401), a client certificate whose names are"
            " not allowed (PERMISSION_DENIED, 403), or no client certificate on the metrics"
            " listener (403); and findings streams ended for a token taken out of the file"
            " (UNAUTHENTICATED). Not counted: clients refused in the TLS handshake (no client"
            " certificate on another listener, an expired one, one the client CA did not"
            " sign), their own errors tell; findings streams ended for their clients to"
            " connect again when a CA is taken out of the client CA file (UNAVAILABLE), whose"
            " new handshakes decide.",
            ["listener"],
            registry=r,
        )
        self._connections_refused = Counter(
            "toolwatch_connections_refused_total",
            "Connections an HTTP listener (http, metrics) closed, not for a request: its TLS"
            " handshake failed (tls_handshake: no or a refused client certificate, toolwatch's"
            " refused by the client, an old protocol, not done in time), ingest.max_connections"
            " were open, each handling a request (connection_limit), or an idle one was closed"
            " to make room for a new one at that bound (connection_limit_idle), or the one"
            " with the largest head still arriving was closed when the listener's heads"
            " arriving passed 64 MiB in all (heads_budget), or its client read none of its"
            " answer for ingest.read_timeout_seconds (answer_unread). gRPC's listeners refuse"
            " theirs unseen.",
            ["listener", "reason"],
            registry=r,
        )
        for listener in _GATED:
            for why in _CONNECTION_REFUSALS:
                self._connections_refused.labels(listener, why)
        self._reload_failures = Counter(
            "toolwatch_security_reload_failures_total",
            "Changed security files that could not be used, so the previous ones still are "
            "(tokens: the bearer token file; certificate: the TLS files).",
            ["file"],
            registry=r,
        )
        # As Prometheus names its own: 1 at start-up, 0 after a reload that failed (the
        # configuration running is the one before it), 1 again after one that worked.
        self._reload_ok = Gauge(
            "toolwatch_config_last_reload_successful",
            "Whether the last configuration reload (SIGHUP) worked: 1, or 0 when it failed and"
            " the configuration before it still runs.",
            registry=r,
        )
        self._reload_ok.set(1)
        self._reloaded_at = Gauge(
            "toolwatch_config_last_reload_success_timestamp_seconds",
            "When the configuration running was loaded (start-up or a reload), Unix seconds.",
            registry=r,
        )
        self._reloaded_at.set(self._wall_clock())
        # Series whose label values are known start at 0, so rate() and increase() see
        # their first increment (a series born at 1 shows none).
        known: tuple[tuple[Counter, tuple[str, ...]], ...] = (
            (self._reload_failures, _RELOADED),
            (self._rejected, REJECT_REASONS),
            (self._dropped, DROP_REASONS),
            (self._evictions, EVICTION_BOUNDS),
            (self._conversation_evictions, CONVERSATION_EVICTION_BOUNDS),
            (self._shadow_unpaired, UNPAIRED_REASONS),
            (self._golden_unmatched, UNMATCHED_CASE_REASONS),
            (self._evaluator_failures, _EVALUATORS),
            (self._auth_failures, _LISTENERS),
            (self._received, _TRANSPORTS),
            (self._refused, _TRANSPORTS),
        )
        for counter, values in known:
            for value in values:
                counter.labels(value)
        # What ToolwatchBackpressure, ToolwatchExportsRejected and ToolwatchExportsAborted read.
        for transport in _TRANSPORTS:
            for outcome in _ALERTED_OUTCOMES:
                self._request_seconds.labels(transport, outcome)

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
        _add(self._child(self._received, self._transport(transport)), n)

    def spans_rejected(self, n: int, reason: str) -> None:
        _add(self._rejected.labels(self._rejected_reason(reason)), n)

    def spans_dropped(self, n: int, reason: str) -> None:
        _add(self._child(self._dropped, self._dropped_reason(reason)), n)

    def spans_refused(self, n: int, transport: str) -> None:
        _add(self._refused.labels(self._transport(transport)), n)

    def spans_built(self, n: int) -> None:
        self._built.inc((), n)

    def trace_evicted(self, reason: str) -> None:
        self._evictions.labels(self._eviction_bound(reason)).inc()

    def remembered_traces_evicted(self, n: int) -> None:
        _add(self._remembered_evictions, n)

    def conversation_evicted(self, reason: str) -> None:
        self._conversation_evictions.labels(self._conversation_bound(reason)).inc()

    def request_handled(self, transport: str, outcome: str, seconds: float) -> None:
        labels = (self._transport(transport), self._request_outcome(outcome))
        self._child(self._request_seconds, *labels).observe(seconds)

    def tool_trace(self, trace: ToolTrace, reference: str, traffic: Traffic) -> None:
        """Counts the run by outcome, reference and traffic, and each of its calls by tool,
        status and traffic."""
        reason = "complete" if trace.complete else trace.incomplete_reason or OTHER
        outcome = self._trace_outcome(reason)
        run_agent = self._agent(trace.agent)
        label = str(traffic)
        self._tool_traces.inc((run_agent, outcome, self._reference(reference), label))
        for call in trace.calls:
            same = not call.agent or call.agent == trace.agent  # the run's agent, usually
            agent = run_agent if same else self._agent(call.agent)
            status = self._status_labels.get(call.status) or self._status(str(call.status))
            tool = self._pair.tool_label(agent, self._tool(call.tool_name))
            self._tool_calls.inc((agent, tool, status, label))

    def evaluated(self, evaluator: str, score: float | None, seconds: float) -> None:
        key = self._evaluator_keys.get(evaluator)
        if key is None:
            key = (self._evaluator(evaluator),)  # the same for this name from now on
            if len(self._evaluator_keys) < _MAX_EVALUATOR_KEYS:
                self._evaluator_keys[evaluator] = key
        self._evaluation_seconds.observe(key, seconds)
        if score is not None and math.isfinite(score):
            self._scores.observe(key, score)

    def evaluator_failed(self, evaluator: str) -> None:
        self._evaluator_failures.labels(self._evaluator(evaluator)).inc()

    def finding(self, finding: Finding, detection_seconds: float | None, traffic: Traffic) -> None:
        """Counts the finding; its trace id rides along as an exemplar."""
        exemplar = {"trace_id": finding.trace_id} if _TRACE_ID.fullmatch(finding.trace_id) else None
        agent = self._agent(finding.agent)
        self._child(
            self._regressions,
            _enum_label(finding.category, Category),
            _enum_label(finding.severity, Severity),
            self._evaluator(finding.evaluator),
            agent,
            self._pair.tool_label(agent, self._tool(finding.tool)),
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
            agent = self._agent(agent_name)
            labels = (
                _enum_label(category, Category),
                self._evaluator(evaluator),
                _enum_label(reference, ReferenceKind),
                agent,
                self._pair.tool_label(agent, self._tool(tool)),
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
