"""Sending a run's spans through the OpenTelemetry SDK's OTLP/gRPC exporter (``send_grpc``),
and a request's bytes by hand to the OTLP/HTTP receiver (``post_protobuf``, ``post_json``)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

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


def post_protobuf(server: RunningServer, body: bytes) -> tuple[int, bytes]:
    request = urllib.request.Request(
        f"http://{server.address('http')}/v1/traces",
        data=body,
        headers={"Content-Type": "application/x-protobuf"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read()


def post_json(server: RunningServer, line: bytes) -> tuple[int, dict[str, Any]]:
    """POST one OTLP/JSON request; the HTTP status and the decoded response body."""
    request = urllib.request.Request(
        f"http://{server.address('http')}/v1/traces",
        data=line,
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        body = response.read()
        return response.status, json.loads(body) if body else {}
