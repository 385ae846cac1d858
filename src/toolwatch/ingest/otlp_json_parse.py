"""``ParseDict``'s side of OTLP/JSON decoding (``toolwatch.ingest.otlp_json``): the request
parsed, its reasons read as paths without quoting an attribute value (``parse_error``), and,
when it refuses a request, each resource, scope and span tried on its own so that only the
parts that do not parse are rejected (``empty_unparsable``, ``parse_part``).

The checks that run before it are ``otlp_json_checks`` (the ids, and what the checks share)
and ``otlp_json_shapes`` (objects, numbers and fields where the request holds a message).
"""

from __future__ import annotations

import re
from itertools import groupby
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from toolwatch.ingest.decode_types import DecodeError, IdProblems
from toolwatch.ingest.otlp_json_checks import _HOLDS_DATA, empty_span, items
from toolwatch.ingest.salvage import MALFORMED

__all__ = ["empty_unparsable", "parse_dict", "parse_error", "parse_part"]


def parse_error(exc: Exception, skip: int = 0) -> str:
    """``ParseDict``'s reason, its chain of "Failed to parse X field: " (one per level) read
    as the field's path, a run of one name written once with its count: a value nested past
    protobuf's 100 levels names ``values`` about fifty times."""
    if isinstance(exc, RecursionError):
        return "(nested too deeply)"
    text = str(exc)
    reason = _PARSE_CHAIN.sub("", text).strip(" .") or "unreadable"
    names = _PARSE_CHAIN.findall(text)[skip:]
    runs = [(name, len(list(run))) for name, run in groupby(names)]
    path = ".".join(name if n == 1 else f"{name}(x{n})" for name, n in runs)
    if _HOLDS_DATA in names or _HOLDS_DATA in reason:
        reason = _value_free(reason)
    elif len(reason) > _SHOWN_REASON_CHARS:
        reason = reason[:_SHOWN_REASON_CHARS] + "..."
    return f"at {path}: {reason}" if path else f"({reason})"


_PARSE_CHAIN = re.compile(r"Failed to parse (\w+) field: ")
#: protobuf's reason quotes the value: long enough for the field and the kind of fault.
_SHOWN_REASON_CHARS = 120
#: protobuf's reasons for an attribute value it cannot read, by their first words, and what
#: is said instead: the reasons quote the value.
_VALUE_FREE_REASONS = (
    ("Couldn't parse integer", "not an integer"),
    ("Couldn't parse non-integer", "not an integer"),
    ("invalid literal for int", "not an integer"),
    ("expected string", "not a string"),
    ("Bool value", "a boolean where an integer belongs"),
    ("Couldn't parse", "not a number"),
    ("Float value too", "a number out of range"),
    ('Expected "true" or "false"', "not a boolean"),
    ("Expected true or false", "not a boolean"),
)


def _value_free(reason: str) -> str:
    """protobuf's ``reason`` for an attribute value, without the value."""
    for start, said in _VALUE_FREE_REASONS:
        if reason.startswith(start):
            return said
    return "a value of the wrong type"


def parse_dict(document: dict[str, Any]) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    json_format.ParseDict(document, request, ignore_unknown_fields=True)
    return request


def empty_unparsable(document: dict[str, Any], problems: IdProblems) -> DecodeError | None:
    """``ParseDict`` refused the request: try each resource, scope and span on its own (at
    its own depth: protobuf's limit of 100 levels counts from the request). Each span that
    does not parse (nested too deeply, a value of the wrong kind), or whose resource or
    scope does not, is emptied and named in ``problems`` (``malformed_span``), as
    ``toolwatch.ingest.salvage`` does for protobuf. Returns the first such fault, or
    ``None`` when every part parses (the fault is elsewhere)."""
    first: DecodeError | None = None
    for r, resource_doc in items(document, "resourceSpans", "resource_spans"):
        resource = parse_part({"resource": resource_doc.get("resource")}, "resource")
        if resource is not None:
            del resource_doc["resource"]  # its spans are rejected: the rest parses without it
        for s, scope_doc in items(resource_doc, "scopeSpans", "scope_spans"):
            scope = resource or parse_part({"scope": scope_doc.get("scope")}, "scope")
            if scope is not None and resource is None:
                del scope_doc["scope"]
            for p, span_doc in items(scope_doc, "spans"):
                detail = scope or parse_part({"spans": [span_doc]}, "the span")
                if detail is None:
                    continue
                empty_span(span_doc)  # its ids are rejected, with this reason
                problems.setdefault((r, s, p), (MALFORMED, detail))
                path = f"resourceSpans[{r}].scopeSpans[{s}].spans[{p}]"
                first = first or DecodeError(f"{path}: {detail}", path)
    return first


def parse_part(part: dict[str, Any], what: str) -> str | None:
    """Why ``ParseDict`` cannot read ``part`` (a resource's, a scope's or a span's fields,
    the ``resource``/``scope`` key in an object of its own) where it sits in a request, or
    ``None``."""
    envelope: dict[str, Any]
    if what == "resource":  # the path of the error starts with the envelope's: skip it
        envelope, what, skip = {"resourceSpans": [part]}, "its resource", 2
    elif what == "scope":
        envelope, what, skip = {"resourceSpans": [{"scopeSpans": [part]}]}, "its scope", 3
    else:
        envelope, skip = {"resourceSpans": [{"scopeSpans": [part]}]}, 3
    try:
        parse_dict(envelope)
    except (json_format.ParseError, RecursionError) as exc:
        return f"{what} cannot be parsed {parse_error(exc, skip)}"
    return None
