"""OTLP/JSON decoded piece by piece (``toolwatch.ingest.otlp_json``), so that a request's
parsed JSON, its protobuf message and its scan are never held whole.

``Outline`` parses the body as ``json.loads`` does (the same checks, errors and values, with
``json``'s own parsers), except each span, an object in the ``spans`` list of a scope of a
resource: that is only read to its end, and parsed again when its piece asks for it. A
piece holds up to ``_PIECE_PARTS`` resources, scopes and spans (small resources and scopes
whole, a large scope's spans a run at a time); each is checked, converted to protobuf
inside its scope and resource (at its depth in the request, beside the same fields, so that
protobuf finds and words a fault as in the whole request), scanned, decoded and let go. A
resource or scope is converted with its request's first piece only (a large resource's
others reuse what its scan kept): a resource of many attributes is converted once.

A piece protobuf cannot parse is handled as the whole request was
(``otlp_json_parse.empty_unparsable``): a span, scope or resource that does not parse alone
rejects its spans. Whether the request is refused, and for which fault, is decided once
every piece is read, from the outline (each span an empty object: what is left is what a
parse of the whole request meets first).
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Callable, Iterator
from itertools import groupby
from json.decoder import JSONArray, JSONObject  # type: ignore[attr-defined]
from json.scanner import make_scanner
from typing import Any, Final

from google.protobuf import json_format

from toolwatch.ingest.decode_requests import PieceDecoder
from toolwatch.ingest.decode_types import DecodedBatch, DecodeError, DecodeOptions, IdProblems
from toolwatch.ingest.otlp_json_checks import convert_span_ids, empty_span, items
from toolwatch.ingest.otlp_json_parse import parse_dict, parse_error, parse_part
from toolwatch.ingest.otlp_json_shapes import Heads, check_outline, check_span, drop_head
from toolwatch.ingest.salvage import MALFORMED

__all__ = ["Outline", "decode_pieces"]

#: Resources, scopes and spans in one piece: the spans' parsed JSON, protobuf message and
#: scan are held together, then let go.
_PIECE_PARTS: Final = 64
_RESOURCE_SPANS: Final = ("resourceSpans", "resource_spans")
_SCOPE_SPANS: Final = ("scopeSpans", "scope_spans")
_ANY_PARSE_ERROR: Final = (json_format.ParseError, RecursionError)
#: Where the outline descends: for each object on the way to the spans, its keys that hold
#: the next list; ``""``: the spans list's elements.
_LISTS: Final[dict[str, dict[str, str]]] = {
    "document": dict.fromkeys(_RESOURCE_SPANS, "resource"),
    "resource": dict.fromkeys(_SCOPE_SPANS, "scope"),
    "scope": {"spans": ""},
}

_Scan = Callable[[str, int], tuple[Any, int]]
#: Spans ``[start, stop)`` of scope ``s`` (-1: a resource without scopes) of resource ``r``.
_Part = tuple[int, int, int, int]


class _Unread(dict[str, Any]):
    """A span not parsed yet (``Outline.span``); refuses to be changed."""

    def __setitem__(self, key: str, value: Any) -> None:
        raise TypeError("an unread span")

    def clear(self) -> None:
        raise TypeError("an unread span")


_UNREAD: Final = _Unread()


class _KeyWatch(dict[str, str]):
    """``JSONObject``'s memo of keys, which it asks for each key just before it parses the
    key's value: so the value's parser knows its key."""

    key = ""

    def setdefault(self, key: str, default: str | None = None) -> str:
        self.key = key
        return key


class Outline:
    """An OTLP/JSON body parsed but for its spans: ``document`` is what ``json.loads`` gives,
    each span ``_UNREAD`` until ``span`` parses it. Raises what ``json.loads`` raises.
    Holds ``text`` until dropped."""

    __slots__ = ("_scan", "_starts", "document", "text")

    def __init__(self, text: str, parse_int: Callable[[str], Any] | None = None) -> None:
        if text.startswith("\ufeff"):  # json.loads' own check
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        self.text = text
        decoder = json.JSONDecoder(parse_int=parse_int)
        self._scan: _Scan = make_scanner(decoder)  # type: ignore[arg-type]
        self._starts: dict[int, tuple[list[Any], array[int]]] = {}  # each spans list's
        decoder.scan_once = self._scanner("document")  # type: ignore[attr-defined]
        self.document: Any = decoder.decode(text)

    def span(self, spans: list[Any], index: int) -> Any:
        """The element ``index`` of ``spans`` (a list of the outline), parsed."""
        element = spans[index]
        if element is not _UNREAD:
            return element
        return self._scan(self.text, self._starts[id(spans)][1][index])[0]

    def _scanner(self, level: str) -> _Scan:
        """Parses a value where an object of ``level`` belongs (or a list of such)."""
        scan = self._scan

        def value(text: str, start: int) -> tuple[Any, int]:
            if text.startswith("{", start):
                return self._object(text, start, level)
            return scan(text, start)

        return value

    def _object(self, text: str, start: int, level: str) -> tuple[Any, int]:
        watch = _KeyWatch()
        lists = _LISTS[level]
        scan = self._scan

        def value(text: str, at: int) -> tuple[Any, int]:
            inner = lists.get(watch.key)
            if inner is None or not text.startswith("[", at):
                return scan(text, at)
            if inner:
                return JSONArray((text, at + 1), self._scanner(inner))  # type: ignore[no-any-return]
            return self._spans(text, at)

        return JSONObject((text, start + 1), True, value, None, None, watch)  # type: ignore[no-any-return]

    def _spans(self, text: str, start: int) -> tuple[list[Any], int]:
        starts: array[int] = array("q")
        scan = self._scan

        def element(text: str, at: int) -> tuple[Any, int]:
            starts.append(at)
            found, end = scan(text, at)
            return (_UNREAD if isinstance(found, dict) else found), end

        spans, end = JSONArray((text, start + 1), element)
        self._starts[id(spans)] = (spans, starts)
        return spans, end


def decode_pieces(
    outline: Outline, options: DecodeOptions, size: int = _PIECE_PARTS
) -> DecodedBatch:
    """The request's batch (``decode_request`` of it parsed whole, with ``otlp_json``'s
    checks), decoded ``size`` parts at a time; raises ``DecodeError`` as that would."""
    return _Pieces(outline, options, size).decode()


class _Pieces:
    """One request's decoding state. Not shared between requests or threads."""

    __slots__ = (
        "_bad",
        "_checked",
        "_decoder",
        "_dropped",
        "_emptied",
        "_failed",
        "_first",
        "_key",
        "_outline",
        "_problems",
        "_resource",
        "_sent",
        "_size",
        "_unresolved",
    )

    def __init__(self, outline: Outline, options: DecodeOptions, size: int) -> None:
        self._outline = outline
        self._size = size
        self._problems: IdProblems = {}
        self._decoder = PieceDecoder(options, self._problems, json_names=True)
        self._key = _list_key(outline.document, _RESOURCE_SPANS)
        self._sent = (-1, -1)  # the last resource and scope converted (pieces are in order)
        self._resource: tuple[int, dict[str, Any]] = (-1, {})  # a large one's scanned values
        self._checked: set[tuple[int, ...]] = set()  # resources and scopes parsed alone
        self._bad: dict[tuple[int, ...], str] = {}  # those that do not parse alone: why
        self._dropped: Heads = {}  # those of the wrong shape, taken out at the outset: why
        self._failed = False  # a piece did not parse as it came
        self._first: Exception | None = None  # the first piece's fault
        self._emptied = False  # spans were emptied so that their pieces would parse
        self._unresolved = False  # a piece did not parse even then

    def decode(self) -> DecodedBatch:
        self._drop_heads(check_outline(self._outline.document))
        read = False
        for piece in self._plan():
            self._piece(piece)
            read = True
        if not read:  # the request's own fields, which each piece holds, are read still
            try:
                parse_dict(_replaced(self._outline.document, self._key, []))
            except _ANY_PARSE_ERROR as exc:
                self._failed, self._first = True, exc
        if self._failed:
            self._verdict()
        return self._decoder.batch()

    def _drop_heads(self, heads: Heads) -> None:
        """Resources and scopes whose own object is of the wrong shape: taken out of the
        request, their spans rejected as they are read (``_read``), as ``drop_heads`` does
        for the request parsed whole."""
        resources = self._resources()
        for head in heads:
            container = resources[head[0]]
            if len(head) == 2:
                container = container[_list_key(container, _SCOPE_SPANS)][head[1]]
            drop_head(container, "scope" if len(head) == 2 else "resource")
        self._dropped = heads

    # --- the pieces ------------------------------------------------------------------------

    def _resources(self) -> list[Any]:
        found = self._outline.document.get(self._key) if self._key else None
        return found if isinstance(found, list) else []

    def _plan(self) -> Iterator[list[_Part]]:
        """Whole resources together while they fit; a larger one's whole scopes together
        while they fit, a larger scope's spans ``size`` at a time."""
        group: list[_Part] = []
        weight = 0
        for r, resource_spans in items(self._outline.document, *_RESOURCE_SPANS):
            parts = _parts(r, resource_spans)
            whole = 1 + sum(1 + stop for _, _, _, stop in parts)
            if weight + whole > self._size and group:
                yield group
                group, weight = [], 0
            if whole <= self._size:
                group += parts
                weight += whole
                continue
            yield from self._split(parts)
        if group:
            yield group

    def _split(self, parts: list[_Part]) -> Iterator[list[_Part]]:
        group: list[_Part] = []
        weight = 0
        for r, s, _, count in parts:
            if weight + 1 + count > self._size and group:
                yield group
                group, weight = [], 0
            if 1 + count <= self._size:
                group.append((r, s, 0, count))
                weight += 1 + count
                continue
            for start in range(0, count, self._size):
                yield [(r, s, start, min(count, start + self._size))]
        if group:
            yield group

    def _piece(self, piece: list[_Part]) -> None:
        heads: set[tuple[int, ...]] = {(r,) for r, _, _, _ in piece if (r,) > self._sent[:1]}
        heads |= {(r, s) for r, s, _, _ in piece if (r, s) > self._sent and s >= 0}
        self._sent = max(self._sent, piece[-1][:2])
        spans = self._read(piece)
        try:
            request = parse_dict(self._envelope(piece, spans, heads))
        except _ANY_PARSE_ERROR as exc:
            self._failed = True
            self._first = self._first or exc
            self._empty_unparsable(piece, spans)
            try:
                request = parse_dict(self._envelope(piece, spans, heads))
            except _ANY_PARSE_ERROR:
                self._unresolved = True  # refused: no piece need be decoded
        if not self._unresolved:
            r = piece[0][0]
            at = _at(piece)
            reuse = None if (r,) in heads else self._resource[1] if self._resource[0] == r else {}
            scanned = self._decoder.add(request, at, reuse)
            if scanned and (r,) in heads and r == piece[-1][0]:  # a large one's first?
                self._resource = (r, scanned[-1])
        for r, s, start, stop in piece:  # decoded: what the parser found is no longer asked
            for p in range(start, stop):
                self._problems.pop((r, s, p), None)

    def _read(self, piece: list[_Part]) -> dict[tuple[int, int], list[dict[str, Any]]]:
        """The piece's spans of each scope, parsed, checked and their ids converted."""
        outline, problems = self._outline, self._problems
        resources = self._resources()
        read: dict[tuple[int, int], list[dict[str, Any]]] = {}
        for r, s, start, stop in piece:
            if s < 0:
                continue
            scopes_key = _list_key(resources[r], _SCOPE_SPANS)
            spans = resources[r][scopes_key][s]["spans"] if stop else []
            where = f"{self._key}[{r}].{scopes_key}[{s}].spans"
            parsed = []
            for p in range(start, stop):
                span = outline.span(spans, p)
                check_span(span, f"{where}[{p}]", (r, s, p), problems)
                convert_span_ids(span, (r, s, p), problems)
                parsed.append(span)
            dropped, bad = self._dropped, self._bad  # a wrong shape's reason first, as whole
            known = dropped.get((r,)) or dropped.get((r, s)) or bad.get((r,)) or bad.get((r, s))
            if known is not None:  # found at the outset, or at an earlier piece of its own
                self._reject(parsed, (r, s, start), known)
            read[(r, s)] = parsed
        return read

    def _envelope(
        self,
        piece: list[_Part],
        spans: dict[tuple[int, int], list[dict[str, Any]]],
        heads: set[tuple[int, ...]],
    ) -> dict[str, Any]:
        """The piece as a request: its resources' fields and its scopes', in their order,
        around its spans; a resource or scope only where it is first seen, and not when it
        does not parse alone."""
        resources = self._resources()
        outers = []
        for r, parts in groupby(piece, key=lambda part: part[0]):
            resource_spans = resources[r]
            dropped = "resource" if (r,) in self._bad or (r,) not in heads else None
            outer = {k: v for k, v in resource_spans.items() if k != dropped}
            scopes_key = _list_key(resource_spans, _SCOPE_SPANS)
            inners = []
            for _, s, _, _ in parts:
                if s < 0:
                    continue
                scope_spans = resource_spans[scopes_key][s]
                dropped = "scope" if (r, s) in self._bad or (r, s) not in heads else None
                inner = {k: v for k, v in scope_spans.items() if k != dropped}
                if isinstance(inner.get("spans"), list):
                    inner["spans"] = spans[(r, s)]
                inners.append(inner)
            if scopes_key is not None:
                outer[scopes_key] = inners
            outers.append(outer)
        return _replaced(self._outline.document, self._key, outers)

    # --- what protobuf cannot parse --------------------------------------------------------

    def _empty_unparsable(
        self, piece: list[_Part], spans: dict[tuple[int, int], list[dict[str, Any]]]
    ) -> None:
        """``empty_unparsable`` of the piece: each resource and scope tried alone once."""
        resources = self._resources()
        for r, s, start, _ in piece:
            resource_spans = resources[r]
            if (r,) not in self._checked:
                self._checked.add((r,))
                why = parse_part({"resource": resource_spans.get("resource")}, "resource")
                if why is not None:
                    self._bad[(r,)] = why
            if s < 0:
                continue
            detail = self._bad.get((r,))
            if detail is None and (r, s) not in self._checked:  # a bad resource's scopes stay
                self._checked.add((r, s))
                scope_spans = resource_spans[_list_key(resource_spans, _SCOPE_SPANS)][s]
                why = parse_part({"scope": scope_spans.get("scope")}, "scope")
                if why is not None:
                    self._bad[(r, s)] = detail = why
            for p, span in enumerate(spans[(r, s)], start):
                why = detail or parse_part({"spans": [span]}, "the span")
                if why is not None:
                    self._reject([span], (r, s, p), why)

    def _reject(self, spans: list[dict[str, Any]], at: tuple[int, int, int], why: str) -> None:
        r, s, start = at
        for p, span in enumerate(spans, start):
            empty_span(span)  # its ids are rejected, with this reason
            self._problems.setdefault((r, s, p), (MALFORMED, why))
        self._emptied = self._emptied or bool(spans)

    def _verdict(self) -> None:
        """Raise, if parsing the request whole would have refused it: when no span was
        emptied, at its first fault; else at the first left once every span, resource and
        scope at fault was emptied or dropped."""
        if self._emptied and not self._unresolved:
            return
        try:
            parse_dict(self._skeleton(dropped=self._emptied))
        except _ANY_PARSE_ERROR as exc:
            raise DecodeError(f"OTLP/JSON request cannot be parsed {parse_error(exc)}") from exc
        first = self._first or json_format.ParseError()
        raise DecodeError(f"OTLP/JSON request cannot be parsed {parse_error(first)}")

    def _skeleton(self, dropped: bool) -> dict[str, Any]:
        """The request with every span an empty object, and (``dropped``) without the
        resources and scopes that do not parse alone."""
        outers = []
        for r, resource_spans in items(self._outline.document, *_RESOURCE_SPANS):
            scopes_key = _list_key(resource_spans, _SCOPE_SPANS)
            inners = []
            for s, scope_spans in items(resource_spans, *_SCOPE_SPANS):
                gone = "scope" if dropped and (r, s) in self._bad else None
                inner = {k: v for k, v in scope_spans.items() if k != gone}
                if isinstance(inner.get("spans"), list):
                    inner["spans"] = [{}] * len(inner["spans"])
                inners.append(inner)
            gone = "resource" if dropped and (r,) in self._bad else None
            outer = {k: v for k, v in resource_spans.items() if k != gone}
            if scopes_key is not None:
                outer[scopes_key] = inners
            outers.append(outer)
        return _replaced(self._outline.document, self._key, outers)


def _parts(r: int, resource_spans: dict[str, Any]) -> list[_Part]:
    scopes = [
        (r, s, 0, len(spans) if isinstance(spans := scope_spans.get("spans"), list) else 0)
        for s, scope_spans in items(resource_spans, *_SCOPE_SPANS)
    ]
    return scopes or [(r, -1, 0, 0)]


def _at(piece: list[_Part]) -> tuple[int, int, int]:
    """Where the piece's first span sits in the request: its resources are whole, or its
    scopes are (``_plan``), or it is a run of one scope's spans."""
    r, s, start, _ = piece[0]
    if any(part[0] != r for part in piece):
        return (r, 0, 0)
    if any(part[1] != s for part in piece):
        return (r, s, 0)
    return (r, max(s, 0), start)


def _list_key(container: dict[str, Any], names: tuple[str, ...]) -> str | None:
    """Which of ``names`` ``items`` reads."""
    return next((name for name in names if container.get(name) is not None), None)


def _replaced(document: dict[str, Any], key: str | None, value: list[Any]) -> dict[str, Any]:
    """The document's fields with ``value`` for ``key``'s, in their order: a later null in
    the other spelling clears the list, as ``ParseDict`` reads it."""
    return {k: value if k == key else v for k, v in document.items()}
