"""OTLP/JSON request bodies (``POST /v1/traces`` with ``Content-Type: application/json``).

OTLP/JSON is the proto3 JSON mapping with the deviations of the OTLP specification
("JSON Protobuf Encoding"): trace and span ids are **hex** strings, not base64; enums are
integers; field names are lowerCamelCase (snake_case is accepted too, as proto3 JSON parsers
do); 64-bit integers may be strings or numbers; unknown fields are ignored. This module
rewrites the hex ids into the base64 form ``json_format`` expects and lets ``ParseDict`` do
the rest. An id of the wrong length, or one that is no hex, is not a parse error: that span
alone is rejected (partial success), as in a protobuf request. So is a span holding a value
of the wrong type or nested past protobuf's 100 levels (``malformed_span``), and every span
of a resource or scope that does (its ``resource`` or ``scope`` object of the wrong shape,
or one protobuf cannot read, or a ``schemaUrl`` holding a lone surrogate); a fault elsewhere
outside the spans refuses the request. An
integer literal of more digits than Python converts (4,300) is read as the infinity it is
beyond (``read_integer``): ignored in a field receivers ignore, refused where an integer
belongs.

Pure functions: they read their arguments and module constants only, so the receiver runs
them in its decode thread (``toolwatch.ingest.decode_thread``).

``decode_otlp_json`` decodes a body piece by piece (``otlp_json_pieces``), holding its text
(1 to 4 bytes a character, as Python holds text), its outline (its resources and scopes,
16 bytes a span), one piece's spans (parsed, converted to protobuf and scanned) and the
records made. Measured (``python -m bench.json_memory``, pure Python), its peak is 1.2 to
1.6 times the body for exports of the recorded captures, agent spans of 10-40 KB prompts
and small spans of many attributes; 3.8 times for attribute-less spans (their records);
4.6 times for agent spans holding an emoji (their text, 4 bytes a character). Holding the
whole parsed document, its protobuf message and its scan, it was 2 to 9.5 times, and the
receiver refused a body beyond a quarter of ``max_request_bytes``. ``parse_otlp_json``
still parses a body whole: it returns the whole message.

What is parsed at once still costs up to about 270 bytes for each JSON value it holds (a
one-key object in an array; an empty object or a short string about 75): a span, a resource
or a field toolwatch does not read is parsed whole, however many tiny values it holds. So
a body may hold at most one comma (each value after the first of an object or array) per
``MIN_BYTES_PER_VALUE`` bytes of the largest body the receiver accepts, counted before it
is parsed (commas in strings too): decoding any body so bounded peaks at about 7 times that
largest body (measured: 138 MiB for 524,000 one-key objects and the 20 MiB default).
Exports of the captures hold one per 36 bytes, agent spans with long prompts one per 50,
attribute-less or many-attribute small spans one per 31: a body of those is accepted up to
the largest, 90% of it, and 77% of it.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable
from typing import Any, TypeVar

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from toolwatch.ingest.decode_types import (
    DecodedBatch,
    DecodeError,
    DecodeLimitError,
    DecodeOptions,
    IdProblems,
)
from toolwatch.ingest.otlp_json_checks import LongInteger, convert_request_ids, items
from toolwatch.ingest.otlp_json_parse import empty_unparsable, parse_dict, parse_error
from toolwatch.ingest.otlp_json_pieces import Outline, decode_pieces
from toolwatch.ingest.otlp_json_shapes import Heads, check_shapes, drop_heads

__all__ = [
    "MIN_BYTES_PER_VALUE",
    "decode_otlp_json",
    "latest_end_ns",
    "parse_otlp_json",
    "read_integer",
]


def _text(body: bytes | str) -> str:
    if isinstance(body, str):
        return body
    try:
        return body.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"body is not UTF-8: invalid byte at offset {exc.start}") from exc


#: See the module docstring: a body may hold one comma per this many bytes of the largest
#: body accepted, and any body at least ``_FEW_VALUES``.
MIN_BYTES_PER_VALUE = 40
_FEW_VALUES = 1_000
#: The bound of ``parse_otlp_json`` when none is given (the HTTP receiver's default cap).
_DEFAULT_MAX_VALUES = 20 * 2**20 // MIN_BYTES_PER_VALUE
_Parsed = TypeVar("_Parsed")


def _check_values(body: bytes | str, limit: int) -> None:
    # Commas inside strings count too: the bound errs on the safe side, and only bodies
    # near the largest accepted can reach it. A container without a comma holds one value
    # at most: nesting them is bounded by json's recursion limit.
    values = body.count(",") if isinstance(body, str) else body.count(b",")
    limit = max(limit, _FEW_VALUES)
    if values > limit:
        raise DecodeLimitError(
            f"body holds up to {values} JSON values after the first of an object or array"
            f" (commas), more than the {limit} a body may (one per {MIN_BYTES_PER_VALUE} bytes"
            " of the largest body: decoded, each holds up to 270 bytes):"
            " send protobuf or smaller batches"
        )


def _document(body: bytes | str, max_values: int) -> dict[str, Any]:
    _check_values(body, max_values)
    return _parsed(json.loads, _text(body))


def _outline(body: bytes | str) -> Outline:
    """The body parsed but for its spans (``otlp_json_pieces``), its text held until they
    are read."""
    return _parsed(Outline, _text(body))


def read_integer(literal: str) -> int | float:
    """``json``'s ``parse_int`` for a text holding an integer literal of more digits than
    CPython converts (``sys.get_int_max_str_digits``, 4,300 by default): such a literal is
    an infinity of its sign, as ``json`` reads ``1e400``. No OTLP integer has more than 20
    digits, so ``ParseDict`` refuses it in an integer field (the span alone, or the request
    outside spans), a ``doubleValue`` is the infinity the number is beyond, and in a field
    OTLP/JSON receivers ignore (an unknown one) it costs nothing."""
    try:
        return int(literal)
    except ValueError:
        beyond = LongInteger(-math.inf if literal.startswith("-") else math.inf)
        beyond.digits = len(literal.lstrip("-"))
        return beyond


def _parsed(parse: Callable[..., _Parsed], text: str) -> _Parsed:
    try:
        try:
            parsed = parse(text)
        except ValueError as exc:
            if isinstance(exc, json.JSONDecodeError):
                raise
            # json's other ValueError: int() of a literal too long. Parsed again, as rare
            # as such a literal is, so that no other body pays for a parse_int hook.
            parsed = parse(text, parse_int=read_integer)
    except json.JSONDecodeError as exc:
        raise DecodeError(
            f"body is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from exc
    except RecursionError as exc:
        raise DecodeError("body is not usable JSON: nested too deeply") from exc
    document = parsed.document if isinstance(parsed, Outline) else parsed
    if not isinstance(document, dict):
        raise DecodeError(f"body must be a JSON object, got {type(document).__name__}")
    return parsed


def latest_end_ns(document: dict[str, Any]) -> int:
    """The latest ``endTimeUnixNano`` of the spans of an OTLP/JSON request as parsed JSON
    (a string or a number, as proto3 JSON writes a 64-bit integer); 0 when no span has a
    usable one. Nothing is checked: read before decoding, to order requests by time."""
    latest = 0
    for _, resource_spans in items(document, "resourceSpans", "resource_spans"):
        for _, scope_spans in items(resource_spans, "scopeSpans", "scope_spans"):
            for _, span in items(scope_spans, "spans"):
                end = span.get("endTimeUnixNano", span.get("end_time_unix_nano"))
                if isinstance(end, bool) or not isinstance(end, str | int):
                    continue
                with contextlib.suppress(ValueError):
                    latest = max(latest, int(end))
    return latest


def parse_otlp_json(
    body: bytes | str, max_values: int = _DEFAULT_MAX_VALUES
) -> ExportTraceServiceRequest:
    """Parse an OTLP/JSON ``ExportTraceServiceRequest``, all of it or nothing.

    Raises ``DecodeError`` naming the JSON path, the value and the reason, e.g.
    ``resourceSpans[0].scopeSpans[0].spans[2].traceId: "xyz" is not hex``; a
    ``DecodeLimitError`` for a body of more than ``max_values`` commas (the module's
    docstring).
    ``decode_otlp_json`` rejects a span whose ids are no hex alone, as the receiver does.
    """
    request, _, first = _parse(body, max_values)
    if first is not None:
        raise first
    return request


def decode_otlp_json(
    body: bytes | str, options: DecodeOptions, max_values: int = _DEFAULT_MAX_VALUES
) -> DecodedBatch:
    """The valid spans of an OTLP/JSON request (``decode_request``): a span whose ids are no
    hex is rejected alone, named in the batch's message. Raises as ``parse_otlp_json`` does
    for the rest. Decoded a piece at a time (``_Pieces``): the same batch, or the same
    error, as parsing the request whole and decoding it."""
    _check_values(body, max_values)
    return decode_pieces(_outline(body), options)


def _parse(
    body: bytes | str, max_values: int
) -> tuple[ExportTraceServiceRequest, IdProblems, DecodeError | None]:
    document = _document(body, max_values)
    problems: IdProblems = {}
    heads: Heads = {}
    shape = check_shapes(document, problems, heads)
    ids = convert_request_ids(document, problems)
    dropped = drop_heads(document, heads, problems)  # after the spans' own faults, as pieces
    first = shape or ids
    try:
        request = parse_dict(document)
    except (json_format.ParseError, RecursionError) as exc:
        # A span that ParseDict cannot read: empty it, so it alone is rejected, and parse
        # the rest; a fault elsewhere (in no span, resource or scope) refuses the request,
        # as does one in a resource or scope without spans when no span was rejected so.
        emptied = empty_unparsable(document, problems)
        if emptied is None and not dropped:
            raise DecodeError(f"OTLP/JSON request cannot be parsed {parse_error(exc)}") from exc
        try:
            request = parse_dict(document)
        except (json_format.ParseError, RecursionError) as again:
            raise DecodeError(f"OTLP/JSON request cannot be parsed {parse_error(again)}") from again
        first = first or emptied
    return request, problems, first
