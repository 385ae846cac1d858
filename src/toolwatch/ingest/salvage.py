"""The readable spans of a binary request that protobuf refuses whole.

protobuf parses a request all or nothing: one span nested past its depth limit (100 messages,
an attribute about 48 arrays deep), with a string that is not UTF-8, or corrupt inside, makes
the whole request unreadable, and a client told INVALID_ARGUMENT drops every span it sent
with it (the Collector's exporter batches up to thousands). The request's outline is still
readable: OTLP nests it as ResourceSpans → ScopeSpans → Span, each a length-delimited field,
so a view of those messages that declares their children as ``bytes`` splits the request
without parsing any span. Each span, resource and scope is then parsed on its own, and only
those protobuf refuses are rejected: the rest of the request is kept, as OTLP's partial
success allows.

The outline types are built at import from a descriptor (``_OUTLINE``), not generated code:
they are three messages of one or two ``repeated bytes`` fields, wire-compatible with
opentelemetry-proto's (a length-delimited field reads the same as a message or as bytes).
A field that appears twice is merged, as protobuf merges a repeated message field. Used only
after the whole parse failed, so it costs nothing on valid requests. Pure; thread-safe.
"""

from __future__ import annotations

from typing import Any, Final

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError as ProtobufDecodeError
from google.protobuf.message import Message
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

__all__ = ["MALFORMED", "salvage"]

#: The rejection reason of a span protobuf cannot parse, or whose resource or scope it cannot.
MALFORMED: Final = "malformed_span"

_REPEATED_BYTES: Final = (
    descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
    descriptor_pb2.FieldDescriptorProto.TYPE_BYTES,
)

#: name -> {field number: field name}: the outline of ExportTraceServiceRequest (field 1,
#: resource_spans), ResourceSpans (1 resource, 2 scope_spans) and ScopeSpans (1 scope,
#: 2 spans), as opentelemetry-proto numbers them (tests check against its descriptors).
_OUTLINE: Final = {
    "Request": {1: "resource_spans"},
    "ResourceSpans": {1: "resource", 2: "scope_spans"},
    "ScopeSpans": {1: "scope", 2: "spans"},
}


def _outline_types() -> dict[str, Any]:
    file = descriptor_pb2.FileDescriptorProto(
        name="toolwatch/ingest/otlp_outline.proto", package="toolwatch.outline", syntax="proto3"
    )
    for name, fields in _OUTLINE.items():
        message = file.message_type.add(name=name)
        for number, field in fields.items():
            label, kind = _REPEATED_BYTES
            message.field.add(name=field, number=number, label=label, type=kind)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessages([file], pool=pool)


_TYPES: Final = _outline_types()
_Request: Final = _TYPES["toolwatch.outline.Request"]
_ResourceSpans: Final = _TYPES["toolwatch.outline.ResourceSpans"]
_ScopeSpans: Final = _TYPES["toolwatch.outline.ScopeSpans"]

#: ``(reason, detail)`` by (resource, scope, span) index, as ``decode.IdProblems``.
Problems = dict[tuple[int, int, int], tuple[str, str]]


def _merged(target: Message, parts: Any) -> str | None:
    """Merges each serialized part into ``target``; protobuf's reason if one is unreadable."""
    try:
        for part in parts:
            target.MergeFromString(part)
    except ProtobufDecodeError as exc:
        return str(exc) or "unreadable"
    return None


def _detail(what: str, problem: str) -> str:
    return (
        f"protobuf cannot parse {what} ({problem}): corrupt, a string that is not UTF-8, "
        "or values nested deeper than protobuf's 100 levels"
    )


def salvage(body: bytes) -> tuple[ExportTraceServiceRequest, Problems] | None:
    """The request with each span protobuf cannot parse (or whose resource or scope it cannot)
    replaced by an empty span, and why each was replaced; ``None`` when even the outline is
    unreadable (a truncated or random body), so the spans cannot be told apart or counted, or
    when every span, resource and scope reads (what protobuf refused is elsewhere, such as a
    ``schema_url`` that is not UTF-8), so nothing could be named."""
    request = ExportTraceServiceRequest()
    problems: Problems = {}
    try:
        outline = _Request.FromString(body)
        for r, resource_part in enumerate(outline.resource_spans):
            resource_outline = _ResourceSpans.FromString(resource_part)
            resource_spans: ResourceSpans = request.resource_spans.add()
            resource_problem = _merged(resource_spans.resource, resource_outline.resource)
            for s, scope_part in enumerate(resource_outline.scope_spans):
                scope_outline = _ScopeSpans.FromString(scope_part)
                scope_spans: ScopeSpans = resource_spans.scope_spans.add()
                scope_problem = _merged(scope_spans.scope, scope_outline.scope)
                for p, span_part in enumerate(scope_outline.spans):
                    span: Span = scope_spans.spans.add()
                    if resource_problem is not None:
                        problems[r, s, p] = (MALFORMED, _detail("its resource", resource_problem))
                    elif scope_problem is not None:
                        problems[r, s, p] = (MALFORMED, _detail("its scope", scope_problem))
                    elif (problem := _merged(span, (span_part,))) is not None:
                        span.Clear()  # an empty span: its ids are rejected, with this reason
                        problems[r, s, p] = (MALFORMED, _detail("the span", problem))
    except ProtobufDecodeError:
        return None
    return (request, problems) if problems else None
