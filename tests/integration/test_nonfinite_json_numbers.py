"""Arguments ``{"order_id": NaN, "amount_usd": 1e999}`` are read with those numbers kept as
their text (``jsontext.loads``), so the ToolTrace dump and the findings log (the fields shown)
stay JSON. They were written back as the bare tokens ``NaN`` and ``Infinity``, which are not
JSON (RFC 8259 §6): jq, Go's encoding/json and JavaScript's JSON.parse refused the line."""

from __future__ import annotations

import io
import json

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from prometheus_client import CollectorRegistry

from tests.integration import agents
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.engine import Engine, EngineParts
from toolwatch.evaluation.pipeline import EvaluationPipeline
from toolwatch.evaluation.settings import EvaluationSettings
from toolwatch.ingest.decode_requests import decode_request
from toolwatch.ingest.decode_types import DecodeOptions
from toolwatch.model import ManualClock
from toolwatch.sinks.findings import JsonLinesFindingSink, Redaction
from toolwatch.sinks.prometheus import PrometheusMetrics
from toolwatch.sinks.tooltraces import ToolTraceWriter

POLICY = {
    "dangerous_tools": ["issue_refund"],
    "verification_tools": ["lookup_order"],
    "bindings": {"issue_refund.order_id": "lookup_order.order_id"},
}


def _strict(line: str) -> object:
    def refuse(token: str) -> object:
        raise ValueError(f"not JSON: {token}")

    return json.loads(line, parse_constant=refuse)


def _outputs() -> tuple[str, str]:
    settings = EvaluationSettings.model_validate({"policy": POLICY})
    clock, log, dump = ManualClock(), io.StringIO(), io.StringIO()
    parts = EngineParts(
        limits=AssemblyLimits(),
        evaluation=EvaluationPipeline(settings),
        normalize=settings.policy.normalizer(),
        findings=JsonLinesFindingSink(log, Redaction(show_fields=frozenset({"order_id"}))),
        tooltraces=ToolTraceWriter(dump),
    )
    engine = Engine(parts, clock, PrometheusMetrics(CollectorRegistry()))
    call = agents.Call("issue_refund", {"order_id": "X"}, "call_2")
    run = agents.AgentRun("refund-bot", (agents.Turn((call,)), agents.Turn(text="ok")))
    request = encode_spans(list(agents.record(run, "genai")))
    for resource in request.resource_spans:
        for scope in resource.scope_spans:
            for span in scope.spans:
                for kv in span.attributes:
                    if kv.key == "gen_ai.tool.call.arguments":
                        kv.value.string_value = '{"order_id": NaN, "amount_usd": 1e999}'
    engine.offer(decode_request(request, DecodeOptions()), "grpc")
    clock.advance(3)
    assert engine.tick() == 1
    return log.getvalue(), dump.getvalue()


@pytest.mark.parametrize("output", ["findings log", "tooltrace dump"])
def test_every_output_line_is_standard_json(output: str) -> None:
    log, dump = _outputs()
    text = log if output == "findings log" else dump
    lines = text.splitlines()
    assert lines
    for line in lines:
        _strict(line)
