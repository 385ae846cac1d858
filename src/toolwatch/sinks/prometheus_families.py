"""The metric families ``PrometheusMetrics`` updates: their names, help texts, labels and
buckets, registered on the app's ``CollectorRegistry``.

``MetricFamilies`` is the base class of ``PrometheusMetrics`` (``sinks.prometheus``): its
constructor registers every family, and starts at 0 the series whose label values are known,
so that ``rate()`` and ``increase()`` see their first increment; ``PrometheusMetrics`` adds
the label limits (``sinks.label_limits``) and the semantic methods that update the families.
The families counted per agent run are ``sinks.tally``'s, rendered at scrape time by
``TallyCollector`` (``sinks.scrape_state``); the rest are ``prometheus_client`` metrics.
Compiled, as ``sinks.prometheus`` is (a compiled class derives from compiled classes only).

Names follow the Prometheus naming practices: base units (seconds, bytes), ``_total`` on
counters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from toolwatch.evaluation.pipeline import EVALUATOR_ORDER
from toolwatch.metrics import (
    CONVERSATION_EVICTION_BOUNDS,
    DROP_REASONS,
    EVICTION_BOUNDS,
    REJECT_REASONS,
    UNMATCHED_CASE_REASONS,
    UNPAIRED_REASONS,
)
from toolwatch.sinks.scrape_state import TallyCollector
from toolwatch.sinks.tally import CounterTally, HistogramTally

__all__ = ["OUTPUTS", "MetricFamilies"]

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
#: Evaluator labels: the built-in evaluators, and the engine's own stage (an unexpected error
#: while it evaluates a batch).
_EVALUATORS: Final = (*EVALUATOR_ORDER, "engine")
#: Request outcomes the shipped alerts watch: their series start at 0 (histograms, so not all).
_ALERTED_OUTCOMES: Final = ("invalid", "refused", "overloaded", "timeout", "aborted")

#: The ``output`` label of ``toolwatch_output_failures_total``: the findings log
#: (``output.findings``), the ToolTrace dump (``output.dump_tooltraces``), the findings
#: stream, and a findings sink added in code (``extra``).
OUTPUTS: Final = ("findings_log", "tooltraces", "stream", "extra")


class MetricFamilies:
    """Every family ``PrometheusMetrics`` updates, registered on ``registry`` when built;
    ``wall_clock`` (Unix seconds) dates the configuration's load
    (``toolwatch_config_last_reload_success_timestamp_seconds``)."""

    def __init__(self, registry: CollectorRegistry, wall_clock: Callable[[], float]) -> None:
        self._wall_clock = wall_clock
        self._register(registry)

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
