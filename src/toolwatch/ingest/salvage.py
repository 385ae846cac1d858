"""The readable spans of a binary request that protobuf refuses whole.

protobuf parses a request all or nothing: one span nested past its depth limit (100 messages,
an attribute about 48 arrays deep), with a string that is not UTF-8, or corrupt inside, makes
the whole request unreadable, and a client told INVALID_ARGUMENT drops every span it sent
with it (the Collector's exporter batches up to thousands). The request's outline is still
readable: OTLP nests it as ResourceSpans → ScopeSpans → Span, each a length-delimited field,
so a view of those messages that declares their children as ``bytes`` splits the request
without parsing any span. Each span, resource and scope is then parsed on its own, in an
envelope that puts it at its own depth (protobuf's limit counts from the request); those it
accepts are merged into a new request, and the spans of those it refuses stay empty and are
rejected: the rest of the request is kept, as OTLP's partial success allows. So are a
ResourceSpans' and a ScopeSpans' other fields, parsed at their place (a ``schema_url``
that is not UTF-8, unknown groups nested too deep there): protobuf refuses them as it
refuses their resource or scope, and they cost their spans alone the same way. A span left
empty keeps its trace id when that field alone can be read, so its trace is judged
incomplete (``DecodedBatch.rejected_traces``).

The outline types are built at import from a descriptor (``_OUTLINE``), not generated code:
they are four messages of one or two ``repeated bytes`` fields, wire-compatible with
opentelemetry-proto's (a length-delimited field reads the same as a message or as bytes).
A field that appears twice is merged, as protobuf merges a repeated message field. Used only
after the whole parse failed, so it costs nothing on valid requests. Pure; thread-safe.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError as ProtobufDecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

if TYPE_CHECKING:  # decode calls salvage: its alias is for the type checker alone
    from toolwatch.ingest.decode_types import IdProblems

__all__ = ["MALFORMED", "salvage"]

#: The rejection reason of a span protobuf cannot parse, or whose resource or scope it cannot.
MALFORMED: Final = "malformed_span"

_REPEATED_BYTES: Final = (
    descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
    descriptor_pb2.FieldDescriptorProto.TYPE_BYTES,
)

#: name -> {field number: field name}: the outline of ExportTraceServiceRequest (field 1,
#: resource_spans), ResourceSpans (1 resource, 2 scope_spans), ScopeSpans (1 scope,
#: 2 spans) and Span (1 trace_id), as opentelemetry-proto numbers them (tests check against
#: its descriptors). Their other fields (``schema_url``) are unknown fields of the outline.
_OUTLINE: Final = {
    "Request": {1: "resource_spans"},
    "ResourceSpans": {1: "resource", 2: "scope_spans"},
    "ScopeSpans": {1: "scope", 2: "spans"},
    "Span": {1: "trace_id"},
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
_Span: Final = _TYPES["toolwatch.outline.Span"]


def _envelope(part: bytes, level: str) -> bytes:
    """``part`` where it sits in a request (``level``: a resource, a scope or a span, or a
    ResourceSpans' or ScopeSpans' own fields), so that it parses at its own depth:
    protobuf's limit counts from the request."""
    if level == "span":
        part = _ScopeSpans(spans=[part]).SerializeToString()
    elif level == "scope":
        part = _ScopeSpans(scope=[part]).SerializeToString()
    if level == "resource":
        part = _ResourceSpans(resource=[part]).SerializeToString()
    elif level != "resource_spans":
        part = _ResourceSpans(scope_spans=[part]).SerializeToString()
    body: bytes = _Request(resource_spans=[part]).SerializeToString()
    return body


#: What a rejected span's message calls the message protobuf could not parse, by level.
_WHAT: Final = {
    "span": "the span",
    "scope": "its scope",
    "resource": "its resource",
    "scope_spans": "its scope_spans' schema_url or unknown fields",
    "resource_spans": "its resource_spans' schema_url or unknown fields",
}


def _problem(parts: Any, level: str) -> str | None:
    """Why protobuf cannot parse the serialized ``parts`` of one message, or ``None``."""
    try:
        for part in parts:
            ExportTraceServiceRequest.FromString(_envelope(part, level))
    except ProtobufDecodeError as exc:
        return (
            f"protobuf cannot parse {_WHAT[level]} ({exc or 'unreadable'}): corrupt, a string"
            " that is not UTF-8, or values nested deeper than protobuf's 100 levels"
        )
    return None


def _own_problem(outline: Any, level: str) -> str | None:
    """Why protobuf cannot parse, where they stand, the fields of a ResourceSpans' or a
    ScopeSpans' ``outline`` that it does not read (``level``): all but its resource or
    scope and its children, or ``None``."""
    rest = type(outline)()
    rest.CopyFrom(outline)
    for name in _OUTLINE["ResourceSpans" if level == "resource_spans" else "ScopeSpans"].values():
        rest.ClearField(name)
    own = rest.SerializeToString()
    return _problem((own,), level) if own else None


def _trace_id(span_part: bytes) -> bytes:
    """The serialized span's trace id, its other fields skipped unparsed (what protobuf
    refused is in one of them: nesting, a string that is not UTF-8); empty when even that
    cannot be read. The last one, as protobuf reads a field sent twice."""
    try:
        found = _Span.FromString(span_part).trace_id
    except ProtobufDecodeError:
        return b""
    return bytes(found[-1]) if found else b""


def salvage(body: bytes) -> tuple[ExportTraceServiceRequest, IdProblems] | None:
    """The request with each span protobuf cannot parse (or whose resource or scope it cannot)
    left empty, and why each was; ``None`` when even the outline is unreadable (a truncated
    or random body), so the spans cannot be told apart or counted, or when what protobuf
    refused holds no span (a resource it cannot parse, without spans)."""
    request = ExportTraceServiceRequest()
    problems: IdProblems = {}
    try:
        outline = _Request.FromString(body)
        for r, resource_part in enumerate(outline.resource_spans):
            resource_outline = _ResourceSpans.FromString(resource_part)
            resource_spans = request.resource_spans.add()
            resource_problem = _problem(resource_outline.resource, "resource")
            resource_problem = resource_problem or _own_problem(resource_outline, "resource_spans")
            if resource_problem is None:
                for part in resource_outline.resource:  # merged, as protobuf merges
                    resource_spans.resource.MergeFromString(part)
            for s, scope_part in enumerate(resource_outline.scope_spans):
                scope_outline = _ScopeSpans.FromString(scope_part)
                scope_spans = resource_spans.scope_spans.add()
                problem = resource_problem or _problem(scope_outline.scope, "scope")
                problem = problem or _own_problem(scope_outline, "scope_spans")
                if problem is None:
                    for part in scope_outline.scope:
                        scope_spans.scope.MergeFromString(part)
                for p, span_part in enumerate(scope_outline.spans):
                    span = scope_spans.spans.add()  # an empty span's ids are rejected
                    span_problem = problem or _problem((span_part,), "span")
                    if span_problem is None:
                        span.MergeFromString(span_part)
                    else:
                        problems[r, s, p] = (MALFORMED, span_problem)
                        span.trace_id = _trace_id(span_part)  # its run misses it
    except ProtobufDecodeError:
        return None
    return (request, problems) if problems else None
