"""OTLP/JSON request bodies (``POST /v1/traces`` with ``Content-Type: application/json``).

OTLP/JSON is the proto3 JSON mapping with the deviations of the OTLP specification
("JSON Protobuf Encoding"): trace and span ids are **hex** strings, not base64; enums are
integers; field names are lowerCamelCase (snake_case is accepted too, as proto3 JSON parsers
do); 64-bit integers may be strings or numbers; unknown fields are ignored. This module
rewrites the hex ids into the base64 form ``json_format`` expects and lets ``ParseDict`` do
the rest. An id of the wrong length is not a parse error: it reaches ``decode_request`` and
that span alone is rejected (partial success).

Decoded, an OTLP/JSON document holds about four times its size in Python objects (the
project's recorded captures), but a document of tiny objects holds far more: ``[{},{},...]``
about a hundred times. A body with more than one JSON object or array per
``_MIN_BYTES_PER_CONTAINER`` bytes (the captures have one per 50) is refused before it is
parsed, so decoding one costs at most about ten times its size.
"""

from __future__ import annotations

import base64
import json
import math
import string
from collections.abc import Iterator
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from toolwatch.ingest.decode import DecodeError

__all__ = ["parse_otlp_json"]

_HEX_DIGITS = string.hexdigits
_SPAN_IDS = (("traceId", "trace_id"), ("spanId", "span_id"), ("parentSpanId", "parent_span_id"))
_LINK_IDS = (("traceId", "trace_id"), ("spanId", "span_id"))
_SHOWN_VALUE_CHARS = 40


def _text(body: bytes | str) -> str:
    if isinstance(body, str):
        return body
    try:
        return body.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"body is not UTF-8: invalid byte at offset {exc.start}") from exc


#: See the module docstring; bodies of up to ``_FEW_CONTAINERS`` are not looked at.
_MIN_BYTES_PER_CONTAINER = 20
_FEW_CONTAINERS = 1_000


def _check_density(body: bytes | str) -> None:
    if isinstance(body, str):
        containers = body.count("{") + body.count("[")
    else:
        containers = body.count(b"{") + body.count(b"[")
    if containers > _FEW_CONTAINERS and containers * _MIN_BYTES_PER_CONTAINER > len(body):
        raise DecodeError(
            f"body holds {containers} JSON objects and arrays in {len(body)} bytes, more than"
            f" one per {_MIN_BYTES_PER_CONTAINER}: decoded, it would hold many times its size"
        )


def _document(body: bytes | str) -> dict[str, Any]:
    _check_density(body)
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


def _items(container: dict[str, Any], *names: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(path segment, element)`` of the list under the first present of ``names``.

    Elements that are not objects are skipped here; ``_check_shapes`` reports them.
    """
    for name in names:
        elements = container.get(name)
        if elements is None:
            continue
        for index, element in enumerate(elements if isinstance(elements, list) else ()):
            if isinstance(element, dict):
                yield f"{name}[{index}]", element
        return


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= _SHOWN_VALUE_CHARS else text[:_SHOWN_VALUE_CHARS] + "..."


def _hex_to_base64(value: Any, path: str) -> str:
    """A hex id as proto3 JSON bytes (base64); any length, including empty, passes."""
    if not isinstance(value, str):
        raise DecodeError(f"{path}: {_shown(value)} is not a hex string", path)
    if not value.isascii() or value.strip(_HEX_DIGITS):
        raise DecodeError(f"{path}: {_shown(value)} is not hex", path)
    if len(value) % 2:
        raise DecodeError(f"{path}: {_shown(value)} has an odd number of hex digits", path)
    return base64.b64encode(bytes.fromhex(value)).decode("ascii")


def _convert_ids(element: dict[str, Any], fields: tuple[tuple[str, str], ...], path: str) -> None:
    for names in fields:
        for name in names:
            value = element.get(name)
            if value is not None:  # proto3 JSON: null is the default value
                element[name] = _hex_to_base64(value, f"{path}.{name}")


def _convert_request_ids(document: dict[str, Any]) -> None:
    for r, resource_spans in _items(document, "resourceSpans", "resource_spans"):
        for s, scope_spans in _items(resource_spans, "scopeSpans", "scope_spans"):
            for p, span in _items(scope_spans, "spans"):
                path = f"{r}.{s}.{p}"
                _convert_ids(span, _SPAN_IDS, path)
                for k, link in _items(span, "links"):
                    _convert_ids(link, _LINK_IDS, f"{path}.{k}")


def _check_shapes(document: dict[str, Any]) -> None:
    """Refuse anything but an object where the request holds a message.

    ``ParseDict`` reads a message out of whatever it is given: with unknown fields ignored, a
    string there reads as an object of unknown one-letter keys and becomes an empty message,
    so a span or an attribute value would vanish without a word. Walks the document along
    the request's descriptors without recursion (AnyValues nest as deep as JSON allows).
    """
    pending: list[tuple[dict[str, Any], Any, str]] = [
        (document, ExportTraceServiceRequest.DESCRIPTOR, "")
    ]
    while pending:
        node, descriptor, path = pending.pop()
        for key, value in node.items():
            field = descriptor.fields_by_camelcase_name.get(key) or descriptor.fields_by_name.get(
                key
            )
            if field is None or value is None:
                continue
            where = f"{path}.{key}" if path else key
            if field.message_type is None:
                _check_number(value, field, where)
                continue
            if not field.is_repeated:
                pending.append((_object(value, where), field.message_type, where))
                continue
            if not isinstance(value, list):
                raise DecodeError(f"{where}: {_shown(value)} is not an array", where)
            for index, element in enumerate(value):
                at = f"{where}[{index}]"
                pending.append((_object(element, at), field.message_type, at))


_FLOATING = (FieldDescriptor.CPPTYPE_DOUBLE, FieldDescriptor.CPPTYPE_FLOAT)


def _check_number(value: Any, field: FieldDescriptor, path: str) -> None:
    """Refuse a non-finite number (``NaN``, ``Infinity``: Python's ``json`` reads them) where
    the field is not floating point: ``ParseDict`` would raise ``OverflowError`` on an enum."""
    if isinstance(value, float) and not math.isfinite(value) and field.cpp_type not in _FLOATING:
        raise DecodeError(f"{path}: {_shown(value)} is not a value this field can hold", path)


def _object(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DecodeError(f"{path}: {_shown(value)} is not an object", path)
    return value


def parse_otlp_json(body: bytes | str) -> ExportTraceServiceRequest:
    """Parse an OTLP/JSON ``ExportTraceServiceRequest``.

    Raises ``DecodeError`` naming the JSON path, the value and the reason, e.g.
    ``resourceSpans[0].scopeSpans[0].spans[2].traceId: "xyz" is not hex``.
    """
    document = _document(body)
    _check_shapes(document)
    _convert_request_ids(document)
    try:
        return json_format.ParseDict(
            document, ExportTraceServiceRequest(), ignore_unknown_fields=True
        )
    except json_format.ParseError as exc:
        raise DecodeError(f"invalid OTLP/JSON request: {exc}") from exc
    except RecursionError as exc:
        raise DecodeError("invalid OTLP/JSON request: nested too deeply") from exc
