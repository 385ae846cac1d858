"""End to end through real OTLP exporters: spans in each convention become the expected
ToolTraces, read back from ``--dump-tooltraces``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpExporter,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.integration import agents
from tests.integration.conftest import RunningServer
from tests.integration.ingest_support import send_grpc

STYLES = sorted(agents.STYLES)


def send_http(server: RunningServer, spans: Sequence[ReadableSpan]) -> SpanExportResult:
    endpoint = f"http://{server.address('http')}/v1/traces"
    exporter = HttpExporter(endpoint=endpoint, timeout=10, compression=Compression.Gzip)
    try:
        return exporter.export(spans)
    finally:
        exporter.shutdown()


SENDERS: dict[str, Callable[[RunningServer, Sequence[ReadableSpan]], SpanExportResult]] = {
    "grpc": send_grpc,
    "http": send_http,
}


def only_trace(server: RunningServer) -> dict[str, Any]:
    traces = server.tooltraces()
    assert len(traces) == 1, traces
    return traces[0]


def calls(trace: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [
        (c["tool_name"], c["arguments"], c["status"], c["sequence_index"]) for c in trace["calls"]
    ]


@pytest.mark.parametrize("transport", sorted(SENDERS))
@pytest.mark.parametrize("style", STYLES)
def test_refund_run_becomes_one_tooltrace(
    start_server: Callable[..., RunningServer], style: str, transport: str
) -> None:
    server = start_server()
    spans = agents.record(agents.refund_run(), style)

    assert SENDERS[transport](server, spans) is SpanExportResult.SUCCESS
    assert server.settle() == 1

    trace = only_trace(server)
    assert trace["agent"] == "refund-bot"
    assert trace["service"] == "refund-agent"
    assert trace["complete"] is True
    assert trace["trace_id"] == format(spans[0].context.trace_id, "032x")
    assert calls(trace) == [
        ("lookup_order", {"order_id": "A-1001"}, "ok", 0),
        ("issue_refund", {"order_id": "A-1001", "amount_usd": 25.0}, "ok", 1),
    ]
    assert [c["call_id"] for c in trace["calls"]] == ["call_1", "call_2"]
    assert all(c["span_id"] is not None for c in trace["calls"])
    assert trace["final_text"] == "Your refund of $25 is on its way."
    assert trace["refusal"] is False


@pytest.mark.parametrize("style", STYLES)
def test_parallel_calls_share_a_group_in_emission_order(
    start_server: Callable[..., RunningServer], style: str
) -> None:
    server = start_server()
    send_grpc(server, agents.record(agents.parallel_run(), style))
    server.settle()

    trace = only_trace(server)
    cities = [c["arguments"]["city"] for c in trace["calls"]]
    groups = {c["parallel_group"] for c in trace["calls"]}
    assert cities == ["Paris", "London"]
    assert len(groups) == 1 and None not in groups


@pytest.mark.parametrize("style", STYLES)
def test_agent_as_tool_calls_carry_the_outer_call_id(
    start_server: Callable[..., RunningServer], style: str
) -> None:
    server = start_server()
    send_grpc(server, agents.record(agents.nested_run(), style))
    server.settle()

    trace = only_trace(server)
    assert trace["agent"] == "support-bot"
    by_name = {c["tool_name"]: c for c in trace["calls"]}
    assert set(by_name) == {"ask_billing", "lookup_order"}
    assert by_name["ask_billing"]["parent_call_id"] is None
    assert by_name["lookup_order"]["parent_call_id"] == "call_outer"
    assert by_name["lookup_order"]["agent"] == "billing-bot"


@pytest.mark.parametrize("style", STYLES)
def test_failed_tool_call_is_an_error(
    start_server: Callable[..., RunningServer], style: str
) -> None:
    server = start_server()
    send_grpc(server, agents.record(agents.failed_run(), style))
    server.settle()

    trace = only_trace(server)
    (call,) = trace["calls"]
    assert call["status"] == "error"
    assert call["error_type"] == "OrderNotFound"
    assert trace["error_count"] == 1


@pytest.mark.parametrize("style", STYLES)
def test_content_filter_is_a_refusal(
    start_server: Callable[..., RunningServer], style: str
) -> None:
    server = start_server()
    send_grpc(server, agents.record(agents.refusal_run(), style))
    server.settle()

    trace = only_trace(server)
    assert trace["calls"] == []
    assert trace["refusal"] is True
    assert trace["refusal_reason"]


@pytest.mark.parametrize("style", STYLES)
def test_call_seen_only_in_llm_output_is_a_call(
    start_server: Callable[..., RunningServer], style: str
) -> None:
    server = start_server()
    send_grpc(server, agents.record(agents.llm_only_run(), style))
    server.settle()

    (call,) = only_trace(server)["calls"]
    assert call["tool_name"] == "web_search"
    assert call["arguments"] == {"query": "refund policy"}
    assert call["span_id"] is None
    assert call["call_id"] == "call_ws"


def test_trace_is_not_built_before_completion_wait(
    start_server: Callable[..., RunningServer],
) -> None:
    server = start_server(assembly__completion_wait_seconds=5)
    send_grpc(server, agents.record(agents.refund_run(), "genai"))

    assert server.settle(4.0) == 0
    assert server.tooltraces() == []
    assert server.settle(1.1) == 1


def test_retried_spans_count_once(start_server: Callable[..., RunningServer]) -> None:
    server = start_server()
    spans = agents.record(agents.refund_run(), "genai")
    send_grpc(server, spans)
    send_grpc(server, spans)
    server.settle()

    assert len(only_trace(server)["calls"]) == 2
    assert server.sample("toolwatch_spans_received_total", {"transport": "grpc"}) == 2 * len(spans)
    assert server.sample("toolwatch_spans_dropped_total", {"reason": "duplicate"}) == len(spans)
    assert server.sample("toolwatch_spans_built_total") == len(spans)


def test_unfinished_trace_is_built_incomplete_at_max_age(
    start_server: Callable[..., RunningServer],
) -> None:
    server = start_server(assembly__max_trace_age_seconds=30)
    spans = agents.record(agents.refund_run(), "genai")
    without_root = [s for s in spans if s.parent is not None]
    send_grpc(server, without_root)

    assert server.settle(29.0) == 0
    assert server.settle(1.5) == 1
    trace = only_trace(server)
    assert trace["complete"] is False
    assert trace["incomplete_reason"] == "timed_out"
    assert [c["tool_name"] for c in trace["calls"]] == ["lookup_order", "issue_refund"]
