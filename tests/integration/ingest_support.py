"""Sending a run's spans through the OpenTelemetry SDK's OTLP/gRPC exporter (``send_grpc``)."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcExporter,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.integration.conftest import RunningServer


def send_grpc(server: RunningServer, spans: Sequence[ReadableSpan]) -> SpanExportResult:
    exporter = GrpcExporter(endpoint=server.address("grpc"), insecure=True, timeout=10)
    try:
        return exporter.export(spans)
    finally:
        exporter.shutdown()
