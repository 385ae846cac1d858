"""The checks and error wording of OTLP/JSON decoding (``toolwatch.ingest.otlp_json``).

What ``ParseDict`` would let pass or word badly: a hex id that is no hex, an object where a
message belongs that is none, a non-finite number in an integer field, a field named twice;
and ``ParseDict``'s own reasons, read as paths, never quoting an attribute value. A fault
inside a span rejects that span alone (``IdProblems``); one inside a resource or a scope
(its ``resource`` or ``scope`` object, or a ``schemaUrl`` protobuf cannot hold: a lone
surrogate) rejects that resource's or scope's spans, as one
``ParseDict`` cannot read does (``empty_unparsable``); one elsewhere (where the spans
cannot be told apart) refuses the request.
"""

from __future__ import annotations

import base64
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

from toolwatch.ingest.decode import DecodeError, IdProblems
from toolwatch.ingest.salvage import MALFORMED

__all__ = [
    "Heads",
    "check_outline",
    "check_shapes",
    "check_span",
    "convert_request_ids",
    "convert_span_ids",
    "drop_head",
    "drop_heads",
    "empty_span",
    "empty_unparsable",
    "items",
    "parse_dict",
    "parse_error",
    "parse_part",
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


#: The messages whose list elements locate a span: ``(resource, scope, span)`` indices.
_LOCATING = frozenset(
    (ResourceSpans.DESCRIPTOR.full_name, ScopeSpans.DESCRIPTOR.full_name, Span.DESCRIPTOR.full_name)
)
#: The fields holding a resource's or a scope's own message ("heads"), by the message that
#: holds them: what is inside is located by its resource's or scope's indices and ``_HEAD``.
_HEADS = frozenset(
    (
        ResourceSpans.DESCRIPTOR.fields_by_name["resource"],
        ScopeSpans.DESCRIPTOR.fields_by_name["scope"],
    )
)
_HEAD = -1
#: A ResourceSpans' and a ScopeSpans' own text field: one protobuf cannot encode (a lone
#: surrogate, which no UTF-8 holds) costs their spans, as their resource's or scope's fault
#: does (``_HeadTextError``), as a protobuf ``schema_url`` that is not UTF-8 does.
_HEAD_TEXTS = frozenset(
    (
        ResourceSpans.DESCRIPTOR.fields_by_name["schema_url"],
        ScopeSpans.DESCRIPTOR.fields_by_name["schema_url"],
    )
)
#: A node to check: the object, its message type, its path, and its outline indices.
_Node = tuple[Any, Any, str, tuple[int, ...]]
#: A list of nodes to check: the list, its elements' message type, its path, its outline
#: indices, whether its elements' indices join them, and the indices left, last first.
_Run = tuple[list[Any], Any, str, tuple[int, ...], bool, Iterator[int]]
#: Resources ``(r,)`` and scopes ``(r, s)`` whose own object is at fault: why, as each of
#: their spans' rejection says it.
Heads = dict[tuple[int, ...], str]


class _HeadTextError(Exception):
    """A ResourceSpans' or ScopeSpans' own text that protobuf cannot encode
    (``_HEAD_TEXTS``), raised once the rest of it is checked: its spans are rejected, for
    ``reason``; ``error`` is the ``DecodeError`` that says so. Not a ``DecodeError`` itself:
    that class is compiled (mypyc), and an interpreted subclass of it cannot be made."""

    def __init__(self, path: str, key: str) -> None:
        message = f"{path}.{key}: a lone surrogate is not UTF-8"
        super().__init__(message)
        self.error = DecodeError(message, f"{path}.{key}")
        owner = path.rpartition(".")[2].partition("[")[0]
        self.reason = f"its {owner}' {key} cannot be parsed: a lone surrogate is not UTF-8"


def check_shapes(
    document: dict[str, Any], problems: IdProblems, heads: Heads
) -> DecodeError | None:
    """Refuse anything but an object where the request holds a message.

    ``ParseDict`` reads a message out of whatever it is given: with unknown fields ignored, a
    string there reads as an object of unknown one-letter keys and becomes an empty message,
    so a span or an attribute value would vanish without a word. Walks the document along
    the request's descriptors without recursion (AnyValues nest as deep as JSON allows).

    A fault inside a span rejects that span alone: the span is emptied (so ``ParseDict``
    reads the rest) and named in ``problems`` as ``malformed_span``. A fault inside a
    resource or scope is named in ``heads``, for ``drop_heads``. Returns the first such
    fault, for a parse that takes all or nothing. A fault elsewhere raises it.
    """
    root = (document, ExportTraceServiceRequest.DESCRIPTOR, "", ())
    return _check([root], {}, problems, heads)


def check_outline(document: dict[str, Any]) -> Heads:
    """``check_shapes`` outside the spans: raises the fault it would raise, in the same order,
    without looking into a span (each is checked on its own, ``check_span``). Returns the
    resources and scopes at fault."""
    heads: Heads = {}
    _check([(document, ExportTraceServiceRequest.DESCRIPTOR, "", ())], {}, {}, heads, False)
    return heads


def check_span(
    span: dict[str, Any], path: str, where: tuple[int, int, int], problems: IdProblems
) -> DecodeError | None:
    """``check_shapes`` of one span, at ``path`` (as the document spells its lists) and
    ``where`` (its indices)."""
    return _check([(span, Span.DESCRIPTOR, path, where)], {where: (span, path)}, problems, {})


def drop_heads(document: dict[str, Any], heads: Heads, problems: IdProblems) -> bool:
    """Take each resource and scope at fault (``heads``) out of the document, and empty
    their spans, named in ``problems`` (``malformed_span``, unless a fault of their own
    already is), as ``empty_unparsable`` does for one ``ParseDict`` cannot read. Returns
    whether a span was emptied."""
    emptied = False
    for r, resource_spans in items(document, "resourceSpans", "resource_spans"):
        resource = heads.get((r,))
        if resource is not None:
            drop_head(resource_spans, "resource")
        for s, scope_spans in items(resource_spans, "scopeSpans", "scope_spans"):
            scope = heads.get((r, s))
            if scope is not None:
                drop_head(scope_spans, "scope")
            why = resource or scope
            if why is None:
                continue
            for p, span in items(scope_spans, "spans"):
                empty_span(span)  # its ids are rejected, with this reason
                problems.setdefault((r, s, p), (MALFORMED, why))
                emptied = True
    return emptied


def drop_head(container: dict[str, Any], head: str) -> None:
    """Take a resource (``head`` "resource") or scope ("scope") at fault out of its
    ResourceSpans' or ScopeSpans' ``container``, with the container's own texts
    (``_HEAD_TEXTS``): the fault is in one of them."""
    for key in (head, "schemaUrl", "schema_url"):
        container.pop(key, None)


def _check(
    pending: list[_Node | _Run],
    spans: dict[tuple[int, ...], tuple[dict[str, Any], str]],  # each span and its path
    problems: IdProblems,
    heads: Heads,
    descend: bool = True,
) -> DecodeError | None:
    first: DecodeError | None = None
    emptied: set[tuple[int, ...]] = set()
    while pending:
        item = _next(pending, spans)
        if item is None:
            continue
        outline = item[3]
        if outline in emptied:
            continue  # a part of a span, resource or scope already rejected
        try:
            _check_node(item, pending, descend)
        except _HeadTextError as exc:  # what it holds is queued: checked all the same
            heads[outline] = exc.reason
            first = first or exc.error
        except DecodeError as exc:
            if outline[-1:] == (_HEAD,):
                heads[outline[:-1]] = _head_fault(exc, outline)
            elif len(outline) == 3:
                span, span_path = spans[outline]
                detail = str(exc).removeprefix(f"{span_path}.")
                problems.setdefault((outline[0], outline[1], outline[2]), (MALFORMED, detail))
                empty_span(span)  # its ids are rejected, with the reason above
            else:
                raise
            first = first or exc
            emptied.add(outline)
    return first


def _head_fault(exc: DecodeError, outline: tuple[int, ...]) -> str:
    """Why a resource's or scope's spans are rejected: its fault, at its path inside the
    resource or scope (the rest of ``exc.field`` after ``.resource`` or ``.scope``: no field
    inside either is so named)."""
    what = "resource" if len(outline) == 2 else "scope"
    head = re.search(rf"\.{what}(?:\.|$)", exc.field)
    inside = exc.field[head.end() :] if head else ""
    reason = str(exc).removeprefix(f"{exc.field}: ")
    at = f" at {inside}" if inside else ""
    return f"its {what} cannot be parsed{at}: {reason}"


def _next(
    pending: list[_Node | _Run], spans: dict[tuple[int, ...], tuple[dict[str, Any], str]]
) -> _Node | None:
    """The next object to check: the last queued, or the last element not yet checked of the
    last list queued (``None`` once there is none left: the list is dropped). A list's
    elements are taken one at a time, from its end, as if each had been queued in its
    place; a span's is noted in ``spans`` with its path."""
    item = pending[-1]
    if len(item) == 4:
        pending.pop()
        return item
    elements, message, where, outline, locates, indices = item
    index = next(indices, None)
    if index is None:
        pending.pop()
        return None
    at = f"{where}[{index}]"
    inner = (*outline, index) if locates else outline
    if locates and len(inner) == 3:
        spans[inner] = (elements[index], at)
    return (elements[index], message, at, inner)


def _check_node(item: _Node, pending: list[_Node | _Run], descend: bool) -> None:
    """Checks one object's fields; queues the objects it holds (a list's elements once each
    is seen to be an object). ``descend``: and its spans; else a span is only seen to be an
    object."""
    value, descriptor, path, outline = item
    node = _object(value, path)  # a head is queued as it is: its fault is its own
    unreadable: list[str] = []
    unencodable: str | None = None  # a text of the node's own at fault (``_HEAD_TEXTS``)
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
            if field in _HEAD_TEXTS and not _encodable(value):
                unencodable = unencodable or key
            continue
        if field in _HEADS:
            pending.append((value, message, where, (*outline, _HEAD)))
            continue
        if not field.is_repeated:
            pending.append((_object(value, where), message, where, outline))
            continue
        if not isinstance(value, list):
            raise DecodeError(f"{where}: {_shown(value, where)} is not an array", where)
        for index, element in enumerate(value):
            if not isinstance(element, dict):
                _object(element, f"{where}[{index}]")
        locates = message.full_name in _LOCATING and len(outline) < 3
        if value and (descend or not locates or len(outline) < 2):
            indices = iter(range(len(value) - 1, -1, -1))
            pending.append((value, message, where, outline, locates, indices))
    for key in unreadable:  # unknown fields, ignored (the OTLP specification says so)
        del node[key]
    if unencodable is not None:
        raise _HeadTextError(path, unencodable)


def _encodable(value: Any) -> bool:
    """Whether protobuf can hold ``value`` as a string field's: not a text with a lone
    surrogate (JSON's ``"\\ud800"``), which no UTF-8 holds."""
    if not isinstance(value, str) or value.isascii():
        return True
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


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
