"""PrometheusMetrics: every PipelineMetrics call lands in the right series of a fresh registry."""

from __future__ import annotations

import datetime
import shutil
import subprocess

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from tests import factories
from toolwatch import __version__
from toolwatch.assembly.buffer import NOT_AN_AGENT_RUN, REPORTED_DROPS
from toolwatch.certificate_dates import CertificateDates
from toolwatch.evaluation.pipeline import EVALUATOR_ORDER
from toolwatch.ingest.salvage import MALFORMED
from toolwatch.metrics import (
    CONVERSATION_EVICTION_BOUNDS,
    DROP_REASONS,
    EVICTION_BOUNDS,
    REJECT_REASONS,
    REQUEST_OUTCOMES,
    UNMATCHED_CASE_REASONS,
    UNPAIRED_REASONS,
    PipelineMetrics,
)
from toolwatch.model import CallStatus, Category, ReferenceKind, Severity, Traffic
from toolwatch.model_evaluation import Finding
from toolwatch.model_traces import ToolCall, ToolTrace
from toolwatch.sinks.label_limits import OTHER
from toolwatch.sinks.prometheus import BufferState, PrometheusMetrics, StateCollector

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"

# The names the deploy helper's rules and dashboards are written against (brief).
EXPECTED_NAMES = {
    "toolwatch_regressions_total",
    "toolwatch_runs_with_findings_total",
    "toolwatch_tool_calls_total",
    "toolwatch_tool_traces_total",
    "toolwatch_evaluator_score",
    "toolwatch_spans_received_total",
    "toolwatch_spans_rejected_total",
    "toolwatch_spans_dropped_total",
    "toolwatch_spans_refused_total",
    "toolwatch_spans_built_total",
    "toolwatch_trace_evictions_total",
    "toolwatch_remembered_trace_evictions_total",
    "toolwatch_conversation_evictions_total",
    "toolwatch_buffered_traces",
    "toolwatch_buffered_spans",
    "toolwatch_buffered_bytes",
    "toolwatch_buffered_max_traces",
    "toolwatch_buffered_max_spans",
    "toolwatch_buffered_max_bytes",
    "toolwatch_assembly_overdue_seconds",
    "toolwatch_remembered_traces",
    "toolwatch_export_request_duration_seconds",
    "toolwatch_evaluation_duration_seconds",
    "toolwatch_detection_latency_seconds",
    "toolwatch_evaluator_failures_total",
    "toolwatch_stream_dropped_findings_total",
    "toolwatch_shadow_unpaired_total",
    "toolwatch_golden_unmatched_traces_total",
    "toolwatch_golden_case_expected_every_seconds",
    "toolwatch_golden_case_last_matched_timestamp_seconds",
    "toolwatch_auth_failures_total",
    "toolwatch_connections_refused_total",
    "toolwatch_security_reload_failures_total",
    "toolwatch_tls_certificate_expiry_timestamp_seconds",
    "toolwatch_tls_certificate_not_before_timestamp_seconds",
    "toolwatch_config_last_reload_successful",
    "toolwatch_config_last_reload_success_timestamp_seconds",
    "toolwatch_build_info",
    "toolwatch_label_values_other_total",
    "toolwatch_output_failures_total",
    "toolwatch_namespaced_tool_names",
}


def make_call(tool: str, status: CallStatus = CallStatus.OK, agent: str | None = None) -> ToolCall:
    return factories.tool_call(tool_name=tool, arguments={}, status=status, agent=agent)


def make_trace(
    calls: tuple[ToolCall, ...] = (),
    agent: str | None = "refund-bot",
    incomplete_reason: str | None = None,
) -> ToolTrace:
    return factories.tool_trace(
        trace_id=TRACE_ID,
        service="support",
        agent=agent,
        calls=calls,
        complete=incomplete_reason is None,
        incomplete_reason=incomplete_reason,
        end_ns=1,
        span_count=1,
    )


def make_finding(trace_id: str = TRACE_ID, tool: str | None = "issue_refund") -> Finding:
    return factories.finding(
        category=Category.DANGEROUS_ACTION_DRIFT,
        severity=Severity.CRITICAL,
        evaluator="safety",
        reference=ReferenceKind.POLICY,
        score=0.0,
        explanation="dangerous call without verification",
        trace_id=trace_id,
        tool=tool,
        agent="refund-bot",
    )


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def metrics(registry: CollectorRegistry) -> PrometheusMetrics:
    return PrometheusMetrics(registry, agents=["refund-bot"], tools=["issue_refund"])


def test_satisfies_the_pipeline_metrics_protocol(metrics: PrometheusMetrics) -> None:
    typed: PipelineMetrics = metrics
    assert typed is metrics


def test_exposes_exactly_the_agreed_metric_names(registry: CollectorRegistry) -> None:
    PrometheusMetrics(registry)
    state = BufferState(0, 0, 0, max_traces=10_000, max_spans=200_000, max_bytes=2**28)
    registry.register(StateCollector(lambda: state))
    text = generate_latest(registry).decode()
    typed = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
    assert {name for name in typed if not name.endswith("_created")} == EXPECTED_NAMES


def test_every_counter_and_histogram_series_has_its_created_series(
    metrics: PrometheusMetrics, registry: CollectorRegistry
) -> None:
    """docs/metrics.md says so, and the alerts read ``_created`` to count a series' first rise."""
    metrics.tool_trace(make_trace(calls=(make_call("issue_refund"),)), "none", traffic=Traffic.LIVE)
    metrics.finding(make_finding(), 0.5, traffic=Traffic.LIVE)
    samples = {
        (sample.name, tuple(sorted(sample.labels.items())))
        for family in registry.collect()
        for sample in family.samples
    }
    for family in registry.collect():
        if family.type not in ("counter", "histogram") or not family.name.startswith("toolwatch"):
            continue
        counted = "_total" if family.type == "counter" else "_count"
        for sample in family.samples:
            if sample.name == family.name + counted:
                created = (family.name + "_created", tuple(sorted(sample.labels.items())))
                assert created in samples, sample


def test_a_reload_is_told_and_the_tools_it_names_keep_their_label(
    registry: CollectorRegistry,
) -> None:
    metrics = PrometheusMetrics(registry, tools=["issue_refund"], label_value_cap=0)
    started = registry.get_sample_value("toolwatch_config_last_reload_success_timestamp_seconds")
    assert registry.get_sample_value("toolwatch_config_last_reload_successful") == 1
    assert started is not None and started > 1.7e9
    labels = {"agent": "_other", "status": "ok", "traffic": "live"}
    calls = (make_call("cancel_order"), make_call("issue_refund"))
    metrics.tool_trace(make_trace(calls), "none", traffic=Traffic.LIVE)
    assert registry.get_sample_value("toolwatch_tool_calls_total", labels | {"tool": "_other"}) == 1
    metrics.config_reloaded(False, ["cancel_order"])  # failed: names nothing
    assert registry.get_sample_value("toolwatch_config_last_reload_successful") == 0
    metrics.tool_trace(make_trace(calls), "none", traffic=Traffic.LIVE)
    assert registry.get_sample_value("toolwatch_tool_calls_total", labels | {"tool": "_other"}) == 2
    metrics.config_reloaded(True, ["cancel_order"])
    assert registry.get_sample_value("toolwatch_config_last_reload_successful") == 1
    reloaded = registry.get_sample_value("toolwatch_config_last_reload_success_timestamp_seconds")
    assert reloaded is not None and reloaded >= started
    metrics.tool_trace(make_trace(calls), "none", traffic=Traffic.LIVE)
    tool = {"tool": "cancel_order"}
    assert registry.get_sample_value("toolwatch_tool_calls_total", labels | tool) == 1
    assert registry.get_sample_value("toolwatch_tool_calls_total", labels | {"tool": "_other"}) == 2


def test_output_failures_start_at_zero_by_output(
    registry: CollectorRegistry, metrics: PrometheusMetrics
) -> None:
    name = "toolwatch_output_failures_total"
    outputs = ("findings_log", "tooltraces", "stream", "extra")
    assert [registry.get_sample_value(name, {"output": o}) for o in outputs] == [0, 0, 0, 0]
    metrics.output_failed("findings_log")
    metrics.output_failed("findings_log")
    metrics.output_failed("tooltraces")
    metrics.output_failed("an output no one named")
    assert [registry.get_sample_value(name, {"output": o}) for o in outputs] == [2, 1, 0, 0]
    assert registry.get_sample_value(name, {"output": OTHER}) == 1


def test_a_reload_keeps_the_agents_it_names_as_label_values(registry: CollectorRegistry) -> None:
    metrics = PrometheusMetrics(registry, label_value_cap=0)
    trace = make_trace((make_call("lookup_order"),), agent="refund-bot")
    metrics.tool_trace(trace, "none", traffic=Traffic.LIVE)
    metrics.config_reloaded(True, (), ["refund-bot"])
    metrics.tool_trace(trace, "none", traffic=Traffic.LIVE)
    runs = "toolwatch_tool_traces_total"
    labels = {"outcome": "complete", "reference": "none", "traffic": "live"}
    assert registry.get_sample_value(runs, labels | {"agent": OTHER}) == 1
    assert registry.get_sample_value(runs, labels | {"agent": "refund-bot"}) == 1


def test_finding_counts_by_all_labels(
    metrics: PrometheusMetrics, registry: CollectorRegistry
) -> None:
    metrics.finding(make_finding(), detection_seconds=2.5, traffic=Traffic.LIVE)
    metrics.finding(make_finding(), detection_seconds=None, traffic=Traffic.LIVE)
    metrics.finding(make_finding(), detection_seconds=1.5, traffic=Traffic.SHADOW)
    labels = {
        "category": "DANGEROUS_ACTION_DRIFT",
        "severity": "critical",
        "evaluator": "safety",
        "agent": "refund-bot",
        "tool": "issue_refund",
    }
    name = "toolwatch_regressions_total"
    assert registry.get_sample_value(name, labels | {"traffic": "live"}) == 2.0
    assert registry.get_sample_value(name, labels | {"traffic": "shadow"}) == 1.0
    assert registry.get_sample_value("toolwatch_detection_latency_seconds_count") == 2.0
    assert registry.get_sample_value("toolwatch_detection_latency_seconds_sum") == 4.0


def test_a_run_counts_once_in_each_label_set_of_its_findings(
    metrics: PrometheusMetrics, registry: CollectorRegistry
) -> None:
    """tool_arguments raises a finding per drifting call: three of one tool, in two
    severities, are one run with findings on it; the burst alerts divide these by runs."""

    def drift(severity: Severity, tool: str) -> Finding:
        return factories.finding(
            category=Category.ARGUMENT_VALUE_DRIFT,
            severity=severity,
            evaluator="tool_arguments",
            reference=ReferenceKind.EXPECTED,
            agent="refund-bot",
            tool=tool,
        )

    run = [
        drift(Severity.MEDIUM, "lookup_order"),
        drift(Severity.HIGH, "lookup_order"),
        drift(Severity.MEDIUM, "lookup_order"),
        drift(Severity.MEDIUM, "issue_refund"),
    ]
    metrics.run_findings(run, traffic=Traffic.LIVE)
    metrics.run_findings(run[:1], traffic=Traffic.LIVE)  # another run
    metrics.run_findings(run, traffic=Traffic.SHADOW)  # a candidate's copy of the first
    name = "toolwatch_runs_with_findings_total"
    labels = {
        "category": "ARGUMENT_VALUE_DRIFT",
        "evaluator": "tool_arguments",
        "reference": "expected",
        "agent": "refund-bot",
        "traffic": "live",
    }
    assert registry.get_sample_value(name, labels | {"tool": "lookup_order"}) == 2.0
    assert registry.get_sample_value(name, labels | {"tool": "issue_refund"}) == 1.0
    shadow = labels | {"traffic": "shadow"}
    assert registry.get_sample_value(name, shadow | {"tool": "lookup_order"}) == 1.0


def test_a_run_reports_a_name_past_its_cap_as_other_once(registry: CollectorRegistry) -> None:
    metrics = PrometheusMetrics(registry, label_value_cap=0)
    run = [make_finding(tool="issue_refund"), make_finding(tool="issue_refund")]
    metrics.run_findings(run, traffic=Traffic.LIVE)
    others = "toolwatch_label_values_other_total"
    assert registry.get_sample_value(others, {"label": "agent"}) == 1.0
    assert registry.get_sample_value(others, {"label": "tool"}) == 1.0
    labels = {"category": "DANGEROUS_ACTION_DRIFT", "evaluator": "safety", "reference": "policy"}
    runs = labels | {"agent": OTHER, "tool": OTHER, "traffic": "live"}
    assert registry.get_sample_value("toolwatch_runs_with_findings_total", runs) == 1.0


def test_finding_without_a_tool_reports_an_empty_tool_label(
    metrics: PrometheusMetrics, registry: CollectorRegistry
) -> None:
    metrics.finding(make_finding(tool=None), None, traffic=Traffic.LIVE)
    labels = {
        "category": "DANGEROUS_ACTION_DRIFT",
        "severity": "critical",
        "evaluator": "safety",
        "agent": "refund-bot",
        "tool": "",
        "traffic": "live",
    }
    assert registry.get_sample_value("toolwatch_regressions_total", labels) == 1.0


def test_openmetrics_exposition_carries_the_trace_id_exemplar(
    metrics: PrometheusMetrics, registry: CollectorRegistry
) -> None:
    metrics.finding(make_finding(), detection_seconds=3.0, traffic=Traffic.LIVE)
    text = generate_openmetrics(registry).decode()
    regression_lines = [line for line in text.splitlines() if "regressions_total{" in line]
    assert len(regression_lines) == 1
    assert f'# {{trace_id="{TRACE_ID}"}} 1.0' in regression_lines[0]
    latency = [line for line in text.splitlines() if "detection_latency_seconds_bucket" in line]
    assert any(f'trace_id="{TRACE_ID}"' in line for line in latency)


def test_text_exposition_has_no_exemplars(
    metrics: PrometheusMetrics, registry: CollectorRegistry
) -> None:
    metrics.finding(make_finding(), detection_seconds=3.0, traffic=Traffic.LIVE)
    assert TRACE_ID not in generate_latest(registry).decode()


def test_a_trace_id_that_is_not_hex_gets_no_exemplar(
    metrics: PrometheusMetrics, registry: CollectorRegistry
) -> None:
    metrics.finding(make_finding(trace_id="x" * 200), detection_seconds=None, traffic=Traffic.LIVE)
    text = generate_openmetrics(registry).decode()
    assert "x" * 32 not in text
    assert "# {" not in text


def test_tool_trace_counts_run_outcome_and_calls(
    metrics: PrometheusMetrics, registry: CollectorRegistry
) -> None:
    calls = (make_call("issue_refund"), make_call("issue_refund", CallStatus.ERROR))
    metrics.tool_trace(make_trace(calls), "expected", traffic=Traffic.LIVE)
    metrics.tool_trace(make_trace(incomplete_reason="timed_out"), "none", traffic=Traffic.LIVE)
    metrics.tool_trace(make_trace(), "something new", traffic=Traffic.LIVE)
    metrics.tool_trace(make_trace(calls[:1]), "source", traffic=Traffic.SHADOW)
    get = registry.get_sample_value
    runs = "toolwatch_tool_traces_total"
    complete = {"agent": "refund-bot", "outcome": "complete", "traffic": "live"}
    assert get(runs, {**complete, "reference": "expected"}) == 1.0
    assert get(runs, {**complete, "reference": OTHER}) == 1.0
    assert get(runs, {**complete, "reference": "source"}) is None
    assert get(runs, {**complete, "reference": "source", "traffic": "shadow"}) == 1.0
    timed_out = {"agent": "refund-bot", "outcome": "timed_out", "reference": "none"}
    assert get(runs, timed_out | {"traffic": "live"}) == 1.0
    calls_total = "toolwatch_tool_calls_total"
    candidate = {"agent": "refund-bot", "tool": "issue_refund", "status": "ok"}
    assert get(calls_total, candidate | {"traffic": "shadow"}) == 1.0  # not in live's count
    for status in ("ok", "error"):
        labels = {
            "agent": "refund-bot",
            "tool": "issue_refund",
            "status": status,
            "traffic": "live",
        }
        assert get(calls_total, labels) == 1.0


def test_a_call_keeps_its_own_agent(
    metrics: PrometheusMetrics, registry: CollectorRegistry
) -> None:
    metrics.tool_trace(
        make_trace((make_call("lookup", agent="inner"),)), "none", traffic=Traffic.LIVE
    )
    labels = {"agent": "inner", "tool": "lookup", "status": "ok", "traffic": "live"}
    assert registry.get_sample_value("toolwatch_tool_calls_total", labels) == 1.0


def test_an_unknown_outcome_reports_other(
    metrics: PrometheusMetrics, registry: CollectorRegistry
) -> None:
    metrics.tool_trace(make_trace(incomplete_reason="something new"), "none", traffic=Traffic.LIVE)
    labels = {"agent": "refund-bot", "outcome": OTHER, "reference": "none", "traffic": "live"}
    assert registry.get_sample_value("toolwatch_tool_traces_total", labels) == 1.0


def test_span_accounting_counters(metrics: PrometheusMetrics, registry: CollectorRegistry) -> None:
    metrics.spans_received(10, "grpc")
    metrics.spans_received(5, "http")
    metrics.spans_rejected(2, "invalid_trace_id")
    metrics.spans_dropped(3, "duplicate")
    metrics.spans_refused(7, "http")
    metrics.spans_built(9)
    metrics.trace_evicted("max_traces")
    metrics.remembered_traces_evicted(4)
    metrics.conversation_evicted("conversation_max_bytes")
    get = registry.get_sample_value
    assert get("toolwatch_spans_received_total", {"transport": "grpc"}) == 10.0
    assert get("toolwatch_spans_received_total", {"transport": "http"}) == 5.0
    assert get("toolwatch_spans_rejected_total", {"reason": "invalid_trace_id"}) == 2.0
    assert get("toolwatch_spans_dropped_total", {"reason": "duplicate"}) == 3.0
    assert get("toolwatch_spans_refused_total", {"transport": "http"}) == 7.0
    assert get("toolwatch_spans_built_total") == 9.0
    assert get("toolwatch_trace_evictions_total", {"reason": "max_traces"}) == 1.0
    assert get("toolwatch_remembered_trace_evictions_total") == 4.0
    bound = {"reason": "conversation_max_bytes"}
    assert get("toolwatch_conversation_evictions_total", bound) == 1.0


def test_counters_whose_label_values_are_known_start_at_zero(
    metrics: PrometheusMetrics, registry: CollectorRegistry
) -> None:
    get = registry.get_sample_value
    for transport in ("grpc", "http"):
        assert get("toolwatch_spans_received_total", {"transport": transport}) == 0.0
        assert get("toolwatch_spans_refused_total", {"transport": transport}) == 0.0
    for listener in ("grpc", "http", "metrics", "stream"):
        assert get("toolwatch_auth_failures_total", {"listener": listener}) == 0.0
    metrics.auth_failed("http")
    assert get("toolwatch_auth_failures_total", {"listener": "http"}) == 1.0
    refused = "toolwatch_connections_refused_total"
    for listener in ("http", "metrics"):
        for reason in (
            "tls_handshake",
            "connection_limit",
            "connection_limit_idle",
            "heads_budget",
        ):
            assert get(refused, {"listener": listener, "reason": reason}) == 0.0
    known = {
        "toolwatch_spans_rejected_total": REJECT_REASONS,
        "toolwatch_spans_dropped_total": DROP_REASONS,
        "toolwatch_trace_evictions_total": EVICTION_BOUNDS,
        "toolwatch_conversation_evictions_total": CONVERSATION_EVICTION_BOUNDS,
        "toolwatch_shadow_unpaired_total": UNPAIRED_REASONS,
        "toolwatch_golden_unmatched_traces_total": UNMATCHED_CASE_REASONS,
    }
    for name, reasons in known.items():
        assert [get(name, {"reason": reason}) for reason in reasons] == [0.0] * len(reasons)
    assert get("toolwatch_remembered_trace_evictions_total") == 0.0
    for evaluator in (*EVALUATOR_ORDER, "engine"):
        assert get("toolwatch_evaluator_failures_total", {"evaluator": evaluator}) == 0.0
    for outcome in ("invalid", "refused", "overloaded", "timeout", "aborted"):
        for transport in ("grpc", "http"):
            labels = {"transport": transport, "outcome": outcome}
            assert get("toolwatch_export_request_duration_seconds_count", labels) == 0.0


def test_label_values_the_code_reports_are_kept_whatever_the_cap(
    registry: CollectorRegistry,
) -> None:
    """The cap bounds values from input; reasons, outcomes and evaluators come from the code,
    and alerts select on them (a late drop read as _other would blind ToolwatchLateSpans)."""
    metrics = PrometheusMetrics(registry, label_value_cap=1)
    for reason in REJECT_REASONS:
        metrics.spans_rejected(1, reason)
    for reason in DROP_REASONS:
        metrics.spans_dropped(1, reason)
    for bound in EVICTION_BOUNDS:
        metrics.trace_evicted(bound)
    for reason in UNPAIRED_REASONS:
        metrics.shadow_unpaired(reason)
    for reason in UNMATCHED_CASE_REASONS:
        metrics.golden_unmatched(reason)
    for evaluator in EVALUATOR_ORDER:
        metrics.evaluator_failed(evaluator)
    for outcome in REQUEST_OUTCOMES:
        metrics.request_handled("grpc", outcome, 0.01)
    metrics.spans_dropped(1, "some_new_reason")  # admitted: under the cap
    metrics.spans_dropped(1, "another_one")
    get = registry.get_sample_value
    dropped = [get("toolwatch_spans_dropped_total", {"reason": r}) for r in DROP_REASONS]
    assert dropped == [1.0] * len(DROP_REASONS)
    assert get("toolwatch_spans_dropped_total", {"reason": "some_new_reason"}) == 1.0
    assert get("toolwatch_spans_dropped_total", {"reason": OTHER}) == 1.0
    for reason in REJECT_REASONS:
        assert get("toolwatch_spans_rejected_total", {"reason": reason}) == 1.0
    for bound in EVICTION_BOUNDS:
        assert get("toolwatch_trace_evictions_total", {"reason": bound}) == 1.0
    for reason in UNPAIRED_REASONS:
        assert get("toolwatch_shadow_unpaired_total", {"reason": reason}) == 1.0
    for reason in UNMATCHED_CASE_REASONS:
        assert get("toolwatch_golden_unmatched_traces_total", {"reason": reason}) == 1.0
    for evaluator in EVALUATOR_ORDER:
        assert get("toolwatch_evaluator_failures_total", {"evaluator": evaluator}) == 1.0
    for outcome in REQUEST_OUTCOMES:
        labels = {"transport": "grpc", "outcome": outcome}
        assert get("toolwatch_export_request_duration_seconds_count", labels) == 1.0


def test_the_known_reasons_are_those_the_pipeline_reports() -> None:
    assert set(DROP_REASONS) == {*REPORTED_DROPS, "duplicate", NOT_AN_AGENT_RUN}
    assert MALFORMED in REJECT_REASONS


def test_an_unknown_transport_reports_other(
    metrics: PrometheusMetrics, registry: CollectorRegistry
) -> None:
    metrics.spans_received(1, "carrier-pigeon")
    labels = {"transport": OTHER}
    assert registry.get_sample_value("toolwatch_spans_received_total", labels) == 1.0


def test_timings_and_scores(metrics: PrometheusMetrics, registry: CollectorRegistry) -> None:
    metrics.request_handled("grpc", "ok", 0.02)
    metrics.evaluated("order", 0.85, 0.0003)
    metrics.evaluated("composite", None, 0.0001)
    metrics.evaluator_failed("invariants")
    get = registry.get_sample_value
    request = "toolwatch_export_request_duration_seconds_count"
    assert get(request, {"transport": "grpc", "outcome": "ok"}) == 1.0
    assert get("toolwatch_evaluator_score_bucket", {"evaluator": "order", "le": "0.8"}) == 0.0
    assert get("toolwatch_evaluator_score_bucket", {"evaluator": "order", "le": "0.9"}) == 1.0
    assert get("toolwatch_evaluator_score_count", {"evaluator": "composite"}) is None
    duration = "toolwatch_evaluation_duration_seconds_count"
    assert get(duration, {"evaluator": "composite"}) == 1.0
    assert get("toolwatch_evaluator_failures_total", {"evaluator": "invariants"}) == 1.0


def test_stream_and_shadow_counters(
    metrics: PrometheusMetrics, registry: CollectorRegistry
) -> None:
    metrics.stream_dropped(4)
    metrics.shadow_unpaired("timeout")
    get = registry.get_sample_value
    assert get("toolwatch_stream_dropped_findings_total") == 4.0
    assert get("toolwatch_shadow_unpaired_total", {"reason": "timeout"}) == 1.0


def test_build_info_names_the_version_and_the_otlp_scanner(registry: CollectorRegistry) -> None:
    PrometheusMetrics(registry, decoder="reference", hot_path="python")
    labels = {"version": __version__, "revision": "unknown"}
    labels |= {"decoder": "reference", "hot_path": "python"}
    assert registry.get_sample_value("toolwatch_build_info", labels) == 1.0


def test_buffer_state_is_read_at_scrape_time(registry: CollectorRegistry) -> None:
    state = [BufferState(traces=1, spans=2, bytes=3, remembered=4)]
    in_flight = [7]
    listening = [True]
    PrometheusMetrics(
        registry,
        buffer_state=lambda: state[0],
        stream_subscribers=lambda: 5,
        requests_in_flight=lambda: in_flight[0],
        stream_listening=lambda: listening[0],
    )
    assert registry.get_sample_value("toolwatch_stream_listening") == 1.0
    assert registry.get_sample_value("toolwatch_buffered_spans") == 2.0
    assert registry.get_sample_value("toolwatch_assembly_overdue_seconds") == 0.0
    assert registry.get_sample_value("toolwatch_remembered_traces") == 4.0
    state[0] = BufferState(traces=4, spans=50, bytes=600, overdue_seconds=90.5, remembered=70_000)
    in_flight[0] = 3
    listening[0] = False
    get = registry.get_sample_value
    assert (get("toolwatch_buffered_traces"), get("toolwatch_buffered_spans")) == (4.0, 50.0)
    assert get("toolwatch_buffered_bytes") == 600.0
    assert get("toolwatch_assembly_overdue_seconds") == 90.5
    assert get("toolwatch_remembered_traces") == 70_000.0
    assert get("toolwatch_stream_subscribers") == 5.0
    assert get("toolwatch_requests_in_flight") == 3.0
    assert get("toolwatch_stream_listening") == 0.0


def test_a_failing_state_callable_leaves_the_rest_of_the_scrape_intact(
    registry: CollectorRegistry,
) -> None:
    def broken() -> BufferState:
        raise RuntimeError("buffer gone")

    def gone() -> int:
        raise RuntimeError("slots gone")

    metrics = PrometheusMetrics(registry)
    registry.register(StateCollector(broken, lambda: 2, gone))
    metrics.spans_built(1)
    assert registry.get_sample_value("toolwatch_buffered_traces") is None
    assert registry.get_sample_value("toolwatch_requests_in_flight") is None
    assert registry.get_sample_value("toolwatch_stream_subscribers") == 2.0
    assert registry.get_sample_value("toolwatch_spans_built_total") == 1.0


def test_registering_the_state_collector_does_not_call_it(registry: CollectorRegistry) -> None:
    calls: list[int] = []

    def state() -> BufferState:
        calls.append(1)
        return BufferState(0, 0, 0)

    registry.register(StateCollector(state))
    assert calls == []


def test_two_pipelines_use_separate_registries() -> None:
    first, second = CollectorRegistry(), CollectorRegistry()
    PrometheusMetrics(first).spans_built(3)
    PrometheusMetrics(second)
    assert first.get_sample_value("toolwatch_spans_built_total") == 3.0
    assert second.get_sample_value("toolwatch_spans_built_total") == 0.0


@pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool is not on PATH (CI installs it: apt-get install prometheus)",
)
def test_promtool_accepts_the_text_exposition(
    metrics: PrometheusMetrics, registry: CollectorRegistry
) -> None:
    registry.register(StateCollector(lambda: BufferState(1, 2, 3), lambda: 1))
    metrics.finding(make_finding(), 2.0, traffic=Traffic.LIVE)
    metrics.tool_trace(make_trace((make_call("issue_refund"),)), "none", traffic=Traffic.LIVE)
    metrics.spans_received(3, "grpc")
    metrics.evaluated("order", 0.5, 0.001)
    metrics.request_handled("http", "ok", 0.01)
    result = subprocess.run(
        ["promtool", "check", "metrics"],
        input=generate_latest(registry),
        capture_output=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()


def test_odd_input_never_raises_into_the_pipeline(
    metrics: PrometheusMetrics, registry: CollectorRegistry
) -> None:
    metrics.spans_received(-3, "grpc")
    metrics.stream_dropped(-1)
    metrics.remembered_traces_evicted(-2)
    metrics.evaluated("order", float("nan"), 0.001)
    get = registry.get_sample_value
    assert get("toolwatch_spans_received_total", {"transport": "grpc"}) == 0.0
    assert get("toolwatch_stream_dropped_findings_total") == 0.0
    assert get("toolwatch_remembered_trace_evictions_total") == 0.0
    assert get("toolwatch_evaluator_score_count", {"evaluator": "order"}) is None
    assert get("toolwatch_evaluation_duration_seconds_count", {"evaluator": "order"}) == 1.0


class _WallClock:
    """Unix seconds, moved by the test."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_watched_golden_case_tells_its_interval_and_its_last_match(
    registry: CollectorRegistry,
) -> None:
    wall = _WallClock(1_000.0)
    metrics = PrometheusMetrics(registry, wall_clock=wall)
    every = "toolwatch_golden_case_expected_every_seconds"
    matched = "toolwatch_golden_case_last_matched_timestamp_seconds"
    get = registry.get_sample_value

    metrics.golden_cases_watched({"hourly": 3600.0, "daily": 86400.0})
    assert [get(every, {"case": c}) for c in ("hourly", "daily")] == [3600.0, 86400.0]
    assert [get(matched, {"case": c}) for c in ("hourly", "daily")] == [None, None]

    wall.now = 2_000.0
    metrics.golden_case_judged("hourly")
    metrics.golden_case_judged("not-watched")  # a case without expected_every_seconds
    assert [get(matched, {"case": c}) for c in ("hourly", "daily", "not-watched")] == [
        2_000.0,
        None,
        None,
    ]

    # A reload: a kept case keeps its last match under its new interval; a dropped one
    # loses both series; a new one has no match yet.
    wall.now = 3_000.0
    metrics.golden_case_judged("daily")
    metrics.golden_cases_watched({"hourly": 7200.0, "weekly": 604800.0})
    assert [get(every, {"case": c}) for c in ("hourly", "daily", "weekly")] == [
        7200.0,
        None,
        604800.0,
    ]
    assert [get(matched, {"case": c}) for c in ("hourly", "daily", "weekly")] == [
        2_000.0,
        None,
        None,
    ]
    metrics.golden_case_judged("daily")  # no longer watched: no series comes back
    assert get(matched, {"case": "daily"}) is None

    metrics.golden_cases_watched({"hourly": 7200.0})  # weekly, never matched, dropped
    assert [get(every, {"case": c}) for c in ("hourly", "weekly")] == [7200.0, None]


def test_the_reload_timestamp_comes_from_the_wall_clock(registry: CollectorRegistry) -> None:
    wall = _WallClock(1_700_000_000.0)
    metrics = PrometheusMetrics(registry, wall_clock=wall)
    stamp = "toolwatch_config_last_reload_success_timestamp_seconds"
    assert registry.get_sample_value(stamp) == 1_700_000_000.0
    wall.now += 60
    metrics.config_reloaded(True)
    assert registry.get_sample_value(stamp) == 1_700_000_060.0
    wall.now += 60
    metrics.config_reloaded(False)
    assert registry.get_sample_value(stamp) == 1_700_000_060.0


def _dates(not_before: int, not_after: int) -> CertificateDates:
    return CertificateDates(
        datetime.datetime.fromtimestamp(not_before, datetime.UTC),
        datetime.datetime.fromtimestamp(not_after, datetime.UTC),
    )


def test_certificate_dates_are_one_series_per_file_served(registry: CollectorRegistry) -> None:
    """Each call says the whole set served: a file it no longer names loses both series, a
    name it does not know reports as ``_other``. The notBefore beside the notAfter of the
    same certificate."""
    metrics = PrometheusMetrics(registry)
    expiry = "toolwatch_tls_certificate_expiry_timestamp_seconds"
    not_before = "toolwatch_tls_certificate_not_before_timestamp_seconds"
    files = ("certificate", "client_ca", OTHER)
    get = registry.get_sample_value

    def served() -> list[tuple[float | None, float | None]]:
        """(notBefore, notAfter) by file."""
        return [(get(not_before, {"file": f}), get(expiry, {"file": f})) for f in files]

    assert served() == [(None, None)] * 3  # no TLS yet

    metrics.certificates_served(
        {
            "certificate": _dates(1_700_000_000, 1_800_000_000),
            "client_ca": _dates(1_600_000_000, 1_900_000_000),
        }
    )
    assert served() == [
        (1_700_000_000.0, 1_800_000_000.0),
        (1_600_000_000.0, 1_900_000_000.0),
        (None, None),
    ]

    metrics.certificates_served(
        {"certificate": _dates(1_800_000_000, 1_810_000_000), "key": _dates(0, 1)}
    )
    assert served() == [(1_800_000_000.0, 1_810_000_000.0), (None, None), (0.0, 1.0)]
