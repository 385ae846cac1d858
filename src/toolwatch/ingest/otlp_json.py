"""OTLP/JSON request bodies (``POST /v1/traces`` with ``Content-Type: application/json``).

OTLP/JSON is the proto3 JSON mapping with the deviations of the OTLP specification
("JSON Protobuf Encoding"): trace and span ids are **hex** strings, not base64; enums are
integers; field names are lowerCamelCase (snake_case is accepted too, as proto3 JSON parsers
do); 64-bit integers may be strings or numbers; unknown fields are ignored. This module
rewrites the hex ids into the base64 form ``json_format`` expects and lets ``ParseDict`` do
the rest. An id of the wrong length, or one that is no hex, is not a parse error: that span
alone is rejected (partial success), as in a protobuf request. So is a span holding a value
of the wrong type or nested past protobuf's 100 levels (``malformed_span``); a fault outside
the spans refuses the request.

Decoded, an OTLP/JSON document holds about four times its size in Python objects (the
project's recorded captures), but a document of tiny objects holds far more: ``[{},{},...]``
about a hundred times. So a body may hold at most one JSON object or array per
``MIN_BYTES_PER_CONTAINER`` bytes of the largest body the receiver accepts (the captures
have one per 50), counted before it is parsed: decoding one costs at most about 14 times
that largest body (measured: 70 MB for 262,000 empty objects and the 5 MiB default), 3.5
times ``max_request_bytes``, however dense a smaller one is.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import re
import string
from collections.abc import Iterator
from itertools import groupby
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from toolwatch.ingest.decode import (
    DecodedBatch,
    DecodeError,
    DecodeLimitError,
    DecodeOptions,
    IdProblems,
    decode_request,
)
from toolwatch.ingest.salvage import MALFORMED

__all__ = [
    "MIN_BYTES_PER_CONTAINER",
    "decode_otlp_json",
    "latest_end_ns",
    "parse_otlp_json",
]

_HEX_DIGITS = string.hexdigits
#: A span's id fields (both spellings proto3 JSON accepts) and the reason a bad one gives.
_SPAN_IDS = (
    ("traceId", "invalid_trace_id"),
    ("trace_id", "invalid_trace_id"),
    ("spanId", "invalid_span_id"),
    ("span_id", "invalid_span_id"),
    ("parentSpanId", "invalid_parent_span_id"),
    ("parent_span_id", "invalid_parent_span_id"),
)
_LINK_IDS = ("traceId", "trace_id", "spanId", "span_id")
_SHOWN_VALUE_CHARS = 40


def _text(body: bytes | str) -> str:
    if isinstance(body, str):
        return body
    try:
        return body.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"body is not UTF-8: invalid byte at offset {exc.start}") from exc


#: See the module docstring: a body may hold one JSON object or array per this many bytes
#: of the largest body accepted, and any body at least ``_FEW_CONTAINERS``.
MIN_BYTES_PER_CONTAINER = 20
_FEW_CONTAINERS = 1_000
#: The bound of ``parse_otlp_json`` when none is given (the HTTP receiver's default cap).
_DEFAULT_MAX_CONTAINERS = 5 * 2**20 // MIN_BYTES_PER_CONTAINER


def _check_containers(body: bytes | str, limit: int) -> None:
    # Braces inside strings count too: the bound errs on the safe side, and only bodies
    # near the largest accepted can reach it.
    if isinstance(body, str):
        containers = body.count("{") + body.count("[")
    else:
        containers = body.count(b"{") + body.count(b"[")
    limit = max(limit, _FEW_CONTAINERS)
    if containers > limit:
        raise DecodeLimitError(
            f"body holds up to {containers} JSON objects and arrays, more than the"
            f" {limit} a body may (decoded, each holds about 100 bytes):"
            " send protobuf or smaller batches"
        )


def _document(body: bytes | str, max_containers: int) -> dict[str, Any]:
    _check_containers(body, max_containers)
    try:
        document = json.loads(_text(body))
    except json.JSONDecodeError as exc:
        raise DecodeError(
            f"body is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from exc
    except RecursionError as exc:
        raise DecodeError("body is not usable JSON: nested too deeply") from exc
    if not isinstance(document, dict):
        raise DecodeError(f"body must be a JSON object, got {type(document).__name__}")
    return document


def _items(container: dict[str, Any], *names: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(index, element)`` of the list under the first present of ``names``.

    Elements that are not objects are skipped here; ``_check_shapes`` reports them.
    """
    for name in names:
        elements = container.get(name)
        if elements is None:
            continue
        for index, element in enumerate(elements if isinstance(elements, list) else ()):
            if isinstance(element, dict):
                yield index, element
        return


def latest_end_ns(document: dict[str, Any]) -> int:
    """The latest ``endTimeUnixNano`` of the spans of an OTLP/JSON request as parsed JSON
    (a string or a number, as proto3 JSON writes a 64-bit integer); 0 when no span has a
    usable one. Nothing is checked: read before decoding, to order requests by time."""
    latest = 0
    for _, resource_spans in _items(document, "resourceSpans", "resource_spans"):
        for _, scope_spans in _items(resource_spans, "scopeSpans", "scope_spans"):
            for _, span in _items(scope_spans, "spans"):
                end = span.get("endTimeUnixNano", span.get("end_time_unix_nano"))
                if isinstance(end, bool) or not isinstance(end, str | int):
                    continue
                with contextlib.suppress(ValueError):
                    latest = max(latest, int(end))
    return latest


def _shown(value: Any, where: str = "") -> str:
    """``value`` as an error names it: its JSON, cut to 40 characters; only its kind under
    ``attributes`` (prompts, arguments, results), which an error answer must not echo: an
    exporter logs it."""
    if _HOLDS_DATA in where:
        return _KINDS.get(type(value), "a value")
    text = json.dumps(value)
    return text if len(text) <= _SHOWN_VALUE_CHARS else text[:_SHOWN_VALUE_CHARS] + "..."


#: Where the client's data lives: attribute values, of spans, events, links, resources and
#: scopes.
_HOLDS_DATA = "attributes"
_KINDS: dict[type, str] = {
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    list: "an array",
    dict: "an object",
}


def _hex_to_base64(value: Any) -> str:
    """A hex id as proto3 JSON bytes (base64); any length, including empty, passes.
    Raises ``ValueError`` saying what is wrong with ``value``."""
    if not isinstance(value, str):
        raise ValueError(f"{_shown(value)} is not a hex string")
    if not value.isascii() or value.strip(_HEX_DIGITS):
        raise ValueError(f"{_shown(value)} is not hex")
    if len(value) % 2:
        raise ValueError(f"{_shown(value)} has an odd number of hex digits")
    return base64.b64encode(bytes.fromhex(value)).decode("ascii")


#: What stands for an id that is no hex: one byte, which no id is, so the decoder refuses
#: the span (``IdProblems`` gives it the reason).
_UNUSABLE_ID = base64.b64encode(b"\x00").decode("ascii")


def _convert_request_ids(document: dict[str, Any], problems: IdProblems) -> DecodeError | None:
    """Rewrite every hex id as base64. A span with an id that is no hex stays in place (the
    paths of the others hold) with a placeholder id, and is named in ``problems``, so that
    span alone is rejected, as a wrong-length id is. A link's bad id is dropped: links are
    not read. Returns the first such fault as the error a strict parse raises."""
    first: DecodeError | None = None
    for r, resource_spans in _items(document, "resourceSpans", "resource_spans"):
        for s, scope_spans in _items(resource_spans, "scopeSpans", "scope_spans"):
            for p, span in _items(scope_spans, "spans"):
                path = f"resourceSpans[{r}].scopeSpans[{s}].spans[{p}]"
                for name, reason in _SPAN_IDS:
                    value = span.get(name)
                    if value is None:  # proto3 JSON: null is the default value
                        continue
                    try:
                        span[name] = _hex_to_base64(value)
                    except ValueError as exc:
                        span[name] = _UNUSABLE_ID
                        problems.setdefault((r, s, p), (reason, f"{name} {exc}"))
                        first = first or DecodeError(f"{path}.{name}: {exc}", f"{path}.{name}")
                for k, link in _items(span, "links"):
                    for name in _LINK_IDS:
                        if link.get(name) is None:
                            continue
                        try:
                            link[name] = _hex_to_base64(link[name])
                        except ValueError as exc:
                            link[name] = None
                            where = f"{path}.links[{k}].{name}"
                            first = first or DecodeError(f"{where}: {exc}", where)
    return first


#: The messages whose list elements locate a span: ``(resource, scope, span)`` indices.
_LOCATING = frozenset(
    (ResourceSpans.DESCRIPTOR.full_name, ScopeSpans.DESCRIPTOR.full_name, Span.DESCRIPTOR.full_name)
)
#: A node to check: the object, its message type, its path, and its outline indices.
_Node = tuple[dict[str, Any], Any, str, tuple[int, ...]]


def _check_shapes(document: dict[str, Any], problems: IdProblems) -> DecodeError | None:
    """Refuse anything but an object where the request holds a message.

    ``ParseDict`` reads a message out of whatever it is given: with unknown fields ignored, a
    string there reads as an object of unknown one-letter keys and becomes an empty message,
    so a span or an attribute value would vanish without a word. Walks the document along
    the request's descriptors without recursion (AnyValues nest as deep as JSON allows).

    A fault inside a span rejects that span alone: the span is emptied (so ``ParseDict``
    reads the rest) and named in ``problems`` as ``malformed_span``. Returns the first such
    fault, for a parse that takes all or nothing. A fault outside the spans raises it.
    """
    pending: list[_Node] = [(document, ExportTraceServiceRequest.DESCRIPTOR, "", ())]
    spans: dict[tuple[int, ...], tuple[dict[str, Any], str]] = {}  # each span and its path
    first: DecodeError | None = None
    emptied: set[tuple[int, ...]] = set()
    while pending:
        item = pending.pop()
        outline = item[3]
        if outline in emptied:
            continue  # a part of a span already rejected
        try:
            _check_node(item, pending, spans)
        except DecodeError as exc:
            if len(outline) != 3:
                raise
            span, span_path = spans[outline]
            detail = str(exc).removeprefix(f"{span_path}.")
            problems.setdefault((outline[0], outline[1], outline[2]), (MALFORMED, detail))
            first = first or exc
            emptied.add(outline)
            span.clear()  # an empty span: its ids are rejected, with the reason above
    return first


def _check_node(
    item: _Node, pending: list[_Node], spans: dict[tuple[int, ...], tuple[dict[str, Any], str]]
) -> None:
    """Checks one object's fields; queues the objects it holds, and notes each span it
    holds in ``spans`` with its path."""
    node, descriptor, path, outline = item
    unreadable: list[str] = []
    for key, value in node.items():
        if not key.isascii():  # no field's name; protobuf's maps fail on a lone surrogate
            unreadable.append(key)
            continue
        field = descriptor.fields_by_camelcase_name.get(key) or descriptor.fields_by_name.get(key)
        if field is None or value is None:
            continue
        if field.enum_type is not None and isinstance(value, str) and not value.isascii():
            unreadable.append(key)  # no value's name: ignored, as any unknown enum name is
            continue
        where = f"{path}.{key}" if path else key
        # "span_id" and "spanId" both: which one would ParseDict keep?
        if key != field.json_name and node.get(field.json_name) is not None:
            raise DecodeError(f"{where}: names the same field as {field.json_name}", where)
        message = field.message_type
        if message is None:
            _check_number(value, field, where)
            continue
        if not field.is_repeated:
            pending.append((_object(value, where), message, where, outline))
            continue
        if not isinstance(value, list):
            raise DecodeError(f"{where}: {_shown(value, where)} is not an array", where)
        locates = message.full_name in _LOCATING and len(outline) < 3
        for index, element in enumerate(value):
            at = f"{where}[{index}]"
            inner = (*outline, index) if locates else outline
            child = _object(element, at)
            if locates and len(inner) == 3:
                spans[inner] = (child, at)
            pending.append((child, message, at, inner))
    for key in unreadable:  # unknown fields, ignored (the OTLP specification says so)
        del node[key]


_FLOATING = (FieldDescriptor.CPPTYPE_DOUBLE, FieldDescriptor.CPPTYPE_FLOAT)


def _check_number(value: Any, field: FieldDescriptor, path: str) -> None:
    """Refuse a non-finite number (``NaN``, ``Infinity``: Python's ``json`` reads them) where
    the field is not floating point: ``ParseDict`` would raise ``OverflowError`` on an enum."""
    if isinstance(value, float) and not math.isfinite(value) and field.cpp_type not in _FLOATING:
        raise DecodeError(f"{path}: {_shown(value, path)} is not a value this field can hold", path)


def _object(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DecodeError(f"{path}: {_shown(value, path)} is not an object", path)
    return value


def parse_otlp_json(
    body: bytes | str, max_containers: int = _DEFAULT_MAX_CONTAINERS
) -> ExportTraceServiceRequest:
    """Parse an OTLP/JSON ``ExportTraceServiceRequest``, all of it or nothing.

    Raises ``DecodeError`` naming the JSON path, the value and the reason, e.g.
    ``resourceSpans[0].scopeSpans[0].spans[2].traceId: "xyz" is not hex``; a
    ``DecodeLimitError`` for a body of more than ``max_containers`` objects and arrays.
    ``decode_otlp_json`` rejects a span whose ids are no hex alone, as the receiver does.
    """
    request, _, first = _parse(body, max_containers)
    if first is not None:
        raise first
    return request


def decode_otlp_json(
    body: bytes | str, options: DecodeOptions, max_containers: int = _DEFAULT_MAX_CONTAINERS
) -> DecodedBatch:
    """The valid spans of an OTLP/JSON request (``decode_request``): a span whose ids are no
    hex is rejected alone, named in the batch's message. Raises as ``parse_otlp_json`` does
    for the rest."""
    request, problems, _ = _parse(body, max_containers)
    return decode_request(request, options, problems, json_names=True)


def _parse(
    body: bytes | str, max_containers: int
) -> tuple[ExportTraceServiceRequest, IdProblems, DecodeError | None]:
    document = _document(body, max_containers)
    problems: IdProblems = {}
    shape = _check_shapes(document, problems)
    ids = _convert_request_ids(document, problems)
    first = shape or ids
    try:
        request = _parse_dict(document)
    except (json_format.ParseError, RecursionError) as exc:
        # A span that ParseDict cannot read: empty it, so it alone is rejected, and parse
        # the rest; a fault elsewhere (in no span, resource or scope) refuses the request.
        emptied = _empty_unparsable(document, problems)
        if emptied is None:
            raise DecodeError(f"OTLP/JSON request cannot be parsed {_parse_error(exc)}") from exc
        try:
            request = _parse_dict(document)
        except (json_format.ParseError, RecursionError) as again:
            raise DecodeError(
                f"OTLP/JSON request cannot be parsed {_parse_error(again)}"
            ) from again
        first = first or emptied
    return request, problems, first


def _parse_error(exc: Exception, skip: int = 0) -> str:
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


def _parse_dict(document: dict[str, Any]) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    json_format.ParseDict(document, request, ignore_unknown_fields=True)
    return request


def _empty_unparsable(document: dict[str, Any], problems: IdProblems) -> DecodeError | None:
    """``ParseDict`` refused the request: try each resource, scope and span on its own (at
    its own depth: protobuf's limit of 100 levels counts from the request). Each span that
    does not parse (nested too deeply, a value of the wrong kind), or whose resource or
    scope does not, is emptied and named in ``problems`` (``malformed_span``), as
    ``toolwatch.ingest.salvage`` does for protobuf. Returns the first such fault, or
    ``None`` when every part parses (the fault is elsewhere)."""
    first: DecodeError | None = None
    for r, resource_doc in _items(document, "resourceSpans", "resource_spans"):
        resource = _parse_part({"resource": resource_doc.get("resource")}, "resource")
        if resource is not None:
            del resource_doc["resource"]  # its spans are rejected: the rest parses without it
        for s, scope_doc in _items(resource_doc, "scopeSpans", "scope_spans"):
            scope = resource or _parse_part({"scope": scope_doc.get("scope")}, "scope")
            if scope is not None and resource is None:
                del scope_doc["scope"]
            for p, span_doc in _items(scope_doc, "spans"):
                detail = scope or _parse_part({"spans": [span_doc]}, "the span")
                if detail is None:
                    continue
                span_doc.clear()  # an empty span: its ids are rejected, with this reason
                problems.setdefault((r, s, p), (MALFORMED, detail))
                path = f"resourceSpans[{r}].scopeSpans[{s}].spans[{p}]"
                first = first or DecodeError(f"{path}: {detail}", path)
    return first


def _parse_part(part: dict[str, Any], what: str) -> str | None:
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
        _parse_dict(envelope)
    except (json_format.ParseError, RecursionError) as exc:
        return f"{what} cannot be parsed {_parse_error(exc, skip)}"
    return None
