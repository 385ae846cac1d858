"""The checks and error wording of OTLP/JSON decoding (``toolwatch.ingest.otlp_json``): the
ids, and what every check shares.

What ``ParseDict`` would let pass or word badly: a hex id that is no hex (here), an object
where a message belongs that is none, a non-finite number in an integer field, a field named
twice (``otlp_json_shapes``); and ``ParseDict``'s own reasons, read as paths, never quoting an
attribute value (``otlp_json_parse``). A fault inside a span rejects that span alone
(``IdProblems``); one inside a resource or a scope (its ``resource`` or ``scope`` object, or a
``schemaUrl`` protobuf cannot hold: a lone surrogate) rejects that resource's or scope's spans,
as one ``ParseDict`` cannot read does (``empty_unparsable``); one elsewhere (where the spans
cannot be told apart) refuses the request.

Here: the hex ids rewritten as proto3 JSON's base64 (``convert_request_ids``,
``convert_span_ids``), and what the checks share: a document's lists walked (``items``), a
rejected span emptied (``empty_span``), a value named in an error without echoing an
attribute's (``_shown``, ``LongInteger``).
"""

from __future__ import annotations

import base64
import json
import string
from collections.abc import Iterator
from typing import Any

from toolwatch.ingest.decode_types import DecodeError, IdProblems

__all__ = [
    "LongInteger",
    "convert_request_ids",
    "convert_span_ids",
    "empty_span",
    "items",
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


def empty_span(span: dict[str, Any]) -> None:
    """Empty a span rejected as ``malformed_span`` (its ids are then rejected, and
    ``IdProblems`` gives the reason), keeping its trace id when that is text (hex or, once
    converted, base64), in one spelling: its trace is then judged incomplete
    (``DecodedBatch.rejected_traces``). One that is no hex is rejected as any is."""
    kept = [(key, span[key]) for key in ("traceId", "trace_id") if isinstance(span.get(key), str)]
    span.clear()
    span.update(kept[:1])


def items(container: dict[str, Any], *names: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(index, element)`` of the list under the first present of ``names``.

    Elements that are not objects are skipped here; ``check_shapes`` reports them.
    """
    for name in names:
        elements = container.get(name)
        if elements is None:
            continue
        for index, element in enumerate(elements if isinstance(elements, list) else ()):
            if isinstance(element, dict):
                yield index, element
        return


class LongInteger(float):
    """An integer literal of more digits than CPython converts
    (``sys.get_int_max_str_digits``, 4,300 by default), read as the infinity of its sign
    that it is beyond (``otlp_json.read_integer``); ``digits`` says how long it was."""

    digits: int = 0


def _shown(value: Any, where: str = "") -> str:
    """``value`` as an error names it: its JSON, cut to 40 characters; only its kind under
    ``attributes`` (prompts, arguments, results), which an error answer must not echo: an
    exporter logs it."""
    if isinstance(value, LongInteger):
        return f"an integer literal of {value.digits} digits"
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


def convert_request_ids(document: dict[str, Any], problems: IdProblems) -> DecodeError | None:
    """Rewrite every hex id as base64 (``convert_span_ids``). Returns the first fault, as
    the error a strict parse raises."""
    first: DecodeError | None = None
    for r, resource_spans in items(document, "resourceSpans", "resource_spans"):
        for s, scope_spans in items(resource_spans, "scopeSpans", "scope_spans"):
            for p, span in items(scope_spans, "spans"):
                fault = convert_span_ids(span, (r, s, p), problems)
                first = first or fault
    return first


def convert_span_ids(
    span: dict[str, Any], where: tuple[int, int, int], problems: IdProblems
) -> DecodeError | None:
    """Rewrite the span's hex ids, and its links', as base64. A span with an id that is no
    hex stays in place (the paths of the others hold) with a placeholder id, and is named in
    ``problems`` at ``where`` (its resource, scope and span indices), so that span alone is
    rejected, as a wrong-length id is. A link's bad id is dropped: links are not read.
    Returns the first such fault as the error a strict parse raises."""
    first: DecodeError | None = None
    path = "resourceSpans[{}].scopeSpans[{}].spans[{}]".format(*where)
    for name, reason in _SPAN_IDS:
        value = span.get(name)
        if value is None:  # proto3 JSON: null is the default value
            continue
        try:
            span[name] = _hex_to_base64(value)
        except ValueError as exc:
            span[name] = _UNUSABLE_ID
            problems.setdefault(where, (reason, f"{name} {exc}"))
            first = first or DecodeError(f"{path}.{name}: {exc}", f"{path}.{name}")
    for k, link in items(span, "links"):
        for name in _LINK_IDS:
            if link.get(name) is None:
                continue
            try:
                link[name] = _hex_to_base64(link[name])
            except ValueError as exc:
                link[name] = None
                at = f"{path}.links[{k}].{name}"
                first = first or DecodeError(f"{at}: {exc}", at)
    return first
