"""The shape checks of OTLP/JSON decoding (``toolwatch.ingest.otlp_json``): an object where
the request holds a message, a non-finite number only in a floating-point field, a field named
once, a resource's or scope's own text that protobuf can hold.

``check_shapes`` walks a whole document, ``check_outline`` and ``check_span`` its outline and
each span apart (``otlp_json_pieces``); ``drop_heads`` takes the resources and scopes at fault
out. A fault inside a span rejects that span alone; one inside a resource or a scope rejects
its spans; one elsewhere refuses the request. The ids are checked in ``otlp_json_checks``
(which also holds what the checks share: ``items``, ``empty_span``, ``_shown``), and
``ParseDict``'s own reasons read in ``otlp_json_parse``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from toolwatch.ingest.decode_types import DecodeError, IdProblems
from toolwatch.ingest.otlp_json_checks import _shown, empty_span, items
from toolwatch.ingest.salvage import MALFORMED

__all__ = [
    "Heads",
    "check_outline",
    "check_shapes",
    "check_span",
    "drop_head",
    "drop_heads",
]

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
