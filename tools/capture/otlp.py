"""Collect finished spans in memory and write them as OTLP/JSON, the Collector's file format.

The file format is what the OpenTelemetry Collector's ``file`` exporter writes: one JSON
``ExportTraceServiceRequest`` per line, proto3 JSON mapping with lowerCamelCase field names,
and -- the one OTLP/JSON deviation from plain proto3 JSON -- trace and span ids as lower-case
hex strings instead of base64 (OTLP specification, "JSON Protobuf Encoding").

Spans are encoded with the official SDK encoder (``encode_spans``), so the bytes are exactly
what an ``OTLPSpanExporter`` would have sent.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from google.protobuf.json_format import (  # type: ignore[import-untyped]
    MessageToDict,
    ParseDict,
)
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = [
    "Capture",
    "configure_logfire",
    "read_fixture",
    "summarize",
    "to_json_line",
]

_ID_KEYS = frozenset({"traceId", "spanId", "parentSpanId"})


class Capture:
    """A tracer provider whose finished spans are kept in memory."""

    def __init__(self, service_name: str) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        #: The name of the span whose trace is the fixture's when the scenario also starts
        #: traces of its own (an MCP client's connection, before the run): the others are
        #: left out of the fixture. ``None``: every span must be of one trace.
        self.trace_of: str | None = None
        #: OTLP/JSON files of another process's spans (an instrumented MCP server's), merged
        #: into the fixture as resources of their own: their spans of the fixture's trace,
        #: at least one. Cleared by ``write``.
        self.foreign: list[Path] = []

    def spans(self) -> tuple[ReadableSpan, ...]:
        """The finished spans so far, after flushing the provider."""
        self.provider.force_flush()
        return tuple(self.exporter.get_finished_spans())

    def write(self, path: Path) -> int:
        """Write the finished spans to ``path`` as one OTLP/JSON line; return the span count.

        Refuses (``ValueError``) when the spans belong to more than one trace: a fixture is
        one scenario, one trace (with ``trace_of`` set, the trace of the span so named).
        """
        spans = self.spans()
        if self.trace_of is not None:
            kept = {s.context.trace_id for s in spans if s.name == self.trace_of and s.context}
            spans = tuple(s for s in spans if s.context is not None and s.context.trace_id in kept)
        traces = {span.context.trace_id for span in spans if span.context is not None}
        if len(traces) != 1:
            raise ValueError(f"{path.name}: expected one trace, got {len(traces)}")
        request = encode_spans(spans)
        count = len(spans)
        [trace_id] = traces
        foreign, self.foreign = self.foreign, []  # this scenario's, whatever happens next
        for other in foreign:
            joined = _spans_of_trace(read_fixture(other), trace_id.to_bytes(16, "big"))
            if not joined:
                raise ValueError(f"{path.name}: no span of {other.name} is of the run's trace")
            request.resource_spans.extend(joined)
            count += sum(len(scope.spans) for part in joined for scope in part.scope_spans)
        path.write_text(_json_line(request) + "\n", encoding="utf-8")
        return count


def configure_logfire(capture: Capture, service_name: str) -> Any:
    """Pydantic Logfire set up to send nowhere, with ``capture``'s exporter as an extra span
    processor: Logfire's own tracer provider is what an application using it runs. Returns
    the ``logfire`` module (installed only in ``.venv-capture-logfire``)."""
    import logfire  # noqa: PLC0415

    logfire.configure(
        send_to_logfire=False,
        console=False,
        service_name=service_name,
        additional_span_processors=[SimpleSpanProcessor(capture.exporter)],
    )
    return logfire


def to_json_line(spans: Sequence[ReadableSpan]) -> str:
    """``spans`` as one OTLP/JSON ``ExportTraceServiceRequest`` (hex ids, no newline)."""
    return _json_line(encode_spans(spans))


def _json_line(request: ExportTraceServiceRequest) -> str:
    as_dict = MessageToDict(request)
    return json.dumps(_map_ids(as_dict, _b64_to_hex), separators=(",", ":"), sort_keys=False)


def _spans_of_trace(
    requests: Iterable[ExportTraceServiceRequest], trace_id: bytes
) -> list[ResourceSpans]:
    """The requests' resources with only their spans of ``trace_id`` (none: left out)."""
    joined = []
    for request in requests:
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                kept = [span for span in scope_spans.spans if span.trace_id == trace_id]
                del scope_spans.spans[:]
                scope_spans.spans.extend(kept)
            scopes = [scope for scope in resource_spans.scope_spans if scope.spans]
            if scopes:
                del resource_spans.scope_spans[:]
                resource_spans.scope_spans.extend(scopes)
                joined.append(resource_spans)
    return joined


def read_fixture(path: Path) -> list[ExportTraceServiceRequest]:
    """Parse a fixture back (hex ids -> base64 -> protobuf), one request per line."""
    requests = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            request = ExportTraceServiceRequest()
            ParseDict(_map_ids(json.loads(line), _hex_to_b64), request)
            requests.append(request)
    return requests


def summarize(path: Path) -> str:
    """One line: file, span count, span names, and the attribute keys on tool-ish spans."""
    names: list[str] = []
    tool_keys: dict[str, list[str]] = {}
    count = 0
    for span in _all_spans(read_fixture(path)):
        count += 1
        names.append(span.name)
        keys = [attribute.key for attribute in span.attributes]
        if _looks_like_tool(span.name, keys):
            tool_keys.setdefault(span.name, keys)
    tools = "; ".join(f"{name}: {','.join(keys)}" for name, keys in tool_keys.items())
    return f"{path.name}: {count} spans [{' | '.join(names)}] tool keys {{{tools}}}"


def _all_spans(requests: Iterable[ExportTraceServiceRequest]) -> Iterable[Any]:
    for request in requests:
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                yield from scope_spans.spans


def _looks_like_tool(name: str, keys: list[str]) -> bool:
    markers = ("tool.name", "gen_ai.tool.name", "tool_arguments", "ai.toolCall.name")
    return any(key in keys for key in markers) or name.startswith("execute_tool")


def _map_ids(node: Any, convert: Any) -> Any:
    if isinstance(node, dict):
        return {
            key: convert(value)
            if key in _ID_KEYS and isinstance(value, str)
            else _map_ids(value, convert)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_map_ids(item, convert) for item in node]
    return node


def _b64_to_hex(value: str) -> str:
    return base64.b64decode(value).hex()


def _hex_to_b64(value: str) -> str:
    return base64.b64encode(bytes.fromhex(value)).decode("ascii")
