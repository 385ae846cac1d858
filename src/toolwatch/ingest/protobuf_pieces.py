"""A binary OTLP request dense in entries, read piece by piece, so that what it costs to
decode is bounded by a small factor of its size whatever it holds.

Decoding builds objects per entry: protobuf's parse (``ExportTraceServiceRequest.FromString``)
about 32 bytes per ``ResourceSpans`` or ``ScopeSpans`` and 87 per ``Span``, the scan a tuple
per span (about 250 bytes) and a dict per resource, the decoder a record of it. An entry of
an SDK's request is tens to thousands of bytes on the wire, so that is a few times the body;
but an empty message is two bytes (OTLP calls a request of them "empty envelopes"), and a
20 MiB body of empty spans took a server from 81 MiB to 4.7 GB and 67 s (compiled: 2 GB,
77 s), every other export waiting its turn meanwhile.

So ``toolwatch.ingest.decode_requests`` first counts a request's resources, scopes and
spans from their framing, nothing built (``entries``; the compiled ``_wire.census`` where it
is built), and decodes one that holds more than one per ``MIN_ENTRY_BYTES`` of its size (a
valid span takes at least 28) from its ``pieces``: each resource's own fields once (its
attributes, as every span of it keeps them), then runs of at most ``_PIECE_SPANS`` spans or
``_PIECE_BYTES`` bytes of one scope, each its own small request, scanned, decoded and let
go, and each scope's own fields, checked. What accumulates is the records of valid spans
(the bound of any request) and the accounting. A run of empty messages is read at once
(a regular expression); empty spans are rejected unread (``invalid_trace_id``, as a scan
of one would be: no trace id), empty resources and scopes cost nothing. The batch is the one
a whole decode gives: the same spans, rejections, reasons and places, a span protobuf
cannot parse rejected as ``malformed_span`` (``toolwatch.ingest.salvage``, on its piece).
Unlike a whole decode, a resource or scope whose own fields protobuf cannot parse refuses
the request (a whole decode rejects its spans one by one), and one that holds no span but
empty ones is not read.

Where the extension is built, the compiled ``_wire.sift`` reads a dense request instead of
``pieces`` (``Sifted``): it judges every span, resource and scope as protobuf would parse it,
so spans rejected for their ids or as ``malformed_span`` are counted in C, unscanned (a body
of a million spans of a few bytes, corrupt or not, decodes in hundredths of a second where
``pieces`` and ``salvage`` took seconds to minutes: ``python -m bench.hostile_decode``), and
a resource or scope protobuf cannot parse rejects its spans whatever its size, as a whole
decode does. ``decode_requests`` uses it too for a request protobuf refuses whole, in place of
``salvage``. It hands its pieces on a batch at a time as it finds them, each decoded and let
go, so that what a request alternating kept and rejected spans costs (a piece per span) is
not all held at once.

Pure functions: they read their arguments only; safe from any thread.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Iterator
from typing import Final

__all__ = [
    "MIN_ENTRY_BYTES",
    "SIFTED_REASONS",
    "FramingError",
    "Piece",
    "Sifted",
    "entries",
    "is_dense",
    "pieces",
]

#: A request with more resources, scopes and spans than one per this many bytes is decoded
#: in pieces: below it, what a whole decode builds per entry (at most about 470 bytes with
#: the reference scanner, a span's parsed message and its scan) stays within 16 times the
#: body. An SDK's spans take 60 to thousands of bytes each; one of nothing but ids, 30.
MIN_ENTRY_BYTES: Final = 32
_PIECE_SPANS: Final = 1024
_PIECE_BYTES: Final = 256 * 1024
#: Resources and scopes of at most this many bytes are decoded whole, runs of them in one
#: piece of at most about as many: at most 8,192 entries of two bytes.
_RUN_BYTES: Final = 16 * 1024
#: Field numbers (opentelemetry-proto): ExportTraceServiceRequest.resource_spans,
#: ResourceSpans.scope_spans, ScopeSpans.spans; each length-delimited (wire type 2).
_RESOURCE_SPANS: Final = 1
_SCOPE_SPANS: Final = 2
_SPANS: Final = 2
_LENGTH_DELIMITED: Final = 2
_MAX_GROUP_DEPTH: Final = 100
#: A run of empty messages of field 1 or 2 (its tag, length 0), read at C speed.
_EMPTY_RUNS: Final = {
    number: re.compile(b"(?:" + re.escape(bytes([number << 3 | _LENGTH_DELIMITED, 0])) + b")++")
    for number in (1, 2)
}

#: A field: its number, wire type, where its value starts and ends in the data (for a
#: length-delimited field the bytes inside, for the others the value as on the wire), and
#: where the whole field (its tag included) starts.
_Field = tuple[int, int, int, int, int]


class FramingError(ValueError):
    """The framing cannot be read (truncated, a wire type that does not exist)."""


def _varint(data: bytes, at: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= end or shift >= 70:
            raise FramingError("truncated")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def _field(data: bytes, at: int, end: int, in_group: bool = False) -> _Field:
    """The field at ``at``; ``FramingError`` where the wire format breaks. A group (wire types
    3 and 4), which protobuf keeps as an unknown field, is read whole. ``in_group``: the
    field is in one, where upb skips field number 0 too (it refuses it in a message)."""
    tag, value_start = _varint(data, at, end)
    number, wire = tag >> 3, tag & 7
    if (number == 0 and not in_group) or tag > 0xFFFFFFFF:
        raise FramingError("a field numbered 0")
    if wire == _LENGTH_DELIMITED:
        length, value_start = _varint(data, value_start, end)
        value_end = value_start + length
    elif wire == 0:
        value_end = _varint(data, value_start, end)[1]
    elif wire in (1, 5):
        value_end = value_start + (8 if wire == 1 else 4)
    elif wire == 3:
        value_end = _group_end(data, value_start, end, number, 0)
    else:
        raise FramingError(f"wire type {wire}")
    if value_end > end:
        raise FramingError("truncated")
    return number, wire, value_start, value_end, at


def _group_end(data: bytes, at: int, end: int, number: int, depth: int) -> int:
    """Where the group of field ``number`` opened before ``at`` ends (after its end tag)."""
    if depth >= _MAX_GROUP_DEPTH:
        raise FramingError("groups nested too deeply")
    while at < end:
        tag, after = _varint(data, at, end)
        if tag > 0xFFFFFFFF:
            raise FramingError("a tag past 32 bits")
        if tag & 7 == 4:
            if tag >> 3 != number:
                raise FramingError("a group ends with another's tag")
            return after
        if tag & 7 == 3:
            at = _group_end(data, after, end, tag >> 3, depth + 1)
        else:
            at = _field(data, at, end, in_group=True)[3]
    raise FramingError("truncated")


def _children(
    data: bytes, start: int, end: int, number: int, others: list[bytes] | None = None
) -> Iterator[tuple[int, int, int, int]]:
    """The child messages (field ``number``, length-delimited) of ``data[start:end]``: where
    each field starts, its bytes' ``(start, end)``, and 1; a run of empty ones as one, the
    count of them last (its bytes empty). The other fields are added to ``others``."""
    empty = _EMPTY_RUNS[number]
    at = start
    while at < end:
        run = empty.match(data, at, end)
        if run is not None:
            yield at, at, at, (run.end() - at) // 2
            at = run.end()
            continue
        found, wire, value_start, value_end, _ = _field(data, at, end)
        if found == number and wire == _LENGTH_DELIMITED:
            yield at, value_start, value_end, 1
        elif others is not None:
            others.append(data[at:value_end])
        at = value_end


def entries(body: bytes) -> int:
    """The resources, scopes and spans of a binary request, counted from its framing (no
    object is built for them), up to where the framing breaks (protobuf will refuse the
    body then). The compiled scanner's ``_wire.census`` counts the same."""
    count = 0
    try:
        for _, r_start, r_end, resources in _children(body, 0, len(body), _RESOURCE_SPANS):
            count += resources
            for _, s_start, s_end, scopes in _children(body, r_start, r_end, _SCOPE_SPANS):
                count += scopes
                for *_, spans in _children(body, s_start, s_end, _SPANS):
                    count += spans
    except FramingError:
        pass  # counted so far
    return count


def is_dense(body: bytes, counted: int) -> bool:
    """Whether a body of ``counted`` entries (``entries``) is to be decoded in pieces: one
    whose framing breaks too, by what was counted before (a whole decode would build all
    of that before protobuf refuses it)."""
    return counted * MIN_ENTRY_BYTES > len(body)


def _delimited(number: int, payload: bytes) -> bytes:
    length = len(payload)
    head = bytearray([number << 3 | _LENGTH_DELIMITED])
    while length >= 0x80:
        head.append(length & 0x7F | 0x80)
        length >>= 7
    head.append(length)
    return bytes(head) + payload


def _request(resource: bytes, scope: bytes | None = None) -> bytes:
    """A request of one ResourceSpans of ``resource`` (its serialized fields) and, given
    ``scope``, one ScopeSpans of it."""
    if scope is not None:
        resource += _delimited(_SCOPE_SPANS, scope)
    return _delimited(_RESOURCE_SPANS, resource)


def _own_fields(data: bytes, start: int, end: int, child: int) -> bytes:
    """The fields of a message but its ``child`` messages, serialized, in order."""
    own: list[bytes] = []
    for _ in _children(data, start, end, child, own):
        pass
    return b"".join(own)


#: What ``pieces`` yields: ``(kind, (resource, scope, span), request, count)``, the place
#: being that of the piece's first entry. ``resources``: a run of whole small resources, as
#: a request; ``resource``: a larger resource's own fields (all but its scopes), as a
#: request, before its first ``scopes`` or ``spans``; ``scopes``: a run of whole small
#: scopes of one resource, as a request of a resource without its own fields; ``spans``: a
#: run of consecutive spans of one scope, as a request of an empty resource and scope;
#: ``empty``: ``count`` empty spans (no request); ``scope``: a larger scope's own fields
#: (all but its spans), as a request of an empty resource, after its runs (to check them:
#: its spans are read without them). ``count`` is 1 but for ``empty``.
Piece = tuple[str, tuple[int, int, int], bytes, int]

#: What the compiled ``_wire.sift`` hands on for a dense request (a list at a time), in its
#: order, instead of ``pieces``:
#: ``(kind, (resource, scope, span), request, count, counts, trace_ids)``.
#: ``resource``: a resource's own fields as a request, before the first ``spans`` of it;
#: ``spans``: a run of ``count`` consecutive spans to scan, as a request of an empty resource
#: and scope; ``rejected``: ``count`` consecutive spans rejected unscanned, ``counts`` of them
#: by reason (``SIFTED_REASONS``), ``trace_ids`` the valid ones they hand on, in order, and,
#: for the first three such runs, ``request``: their resource's and scope's own fields and
#: the run's first three spans, to decode for the partial success's message (else empty).
#: The sift judges each span, resource and scope as protobuf would parse it where it stands,
#: and a span's ids as ``decode`` would: the batch is the one a whole decode gives.
Sifted = tuple[str, tuple[int, int, int], bytes, int, tuple[int, ...], tuple[bytes, ...]]
#: The reasons of ``Sifted`` counts, in order (``decode``'s and ``salvage``'s names).
SIFTED_REASONS: Final = (
    "invalid_trace_id",
    "invalid_span_id",
    "invalid_parent_span_id",
    "malformed_span",
)


class _Run:
    """Whole small messages gathered into one piece: consecutive, at most ``_RUN_BYTES``."""

    __slots__ = ("first", "parts", "size")

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.first = self.size = 0

    def add(self, place: int, part: bytes) -> bool:
        """Add ``part`` at ``place``; whether the run is now full."""
        if not self.parts:
            self.first = place
        self.parts.append(part)
        self.size += len(part)
        return self.size >= _RUN_BYTES

    def take(self) -> bytes:
        joined = b"".join(self.parts)
        self.parts, self.size = [], 0
        return joined


def pieces(body: bytes) -> Iterator[Piece]:
    """The pieces of a binary request, in its order (the module's docstring). Raises
    ``FramingError`` where its framing breaks. A resource or scope that holds no span but
    empty ones is not read."""
    run = _Run()
    r = 0
    for field_start, r_start, r_end, resources in _children(body, 0, len(body), _RESOURCE_SPANS):
        small = r_start != r_end and r_end - field_start <= _RUN_BYTES
        if small and run.add(r, body[field_start:r_end]):
            yield "resources", (run.first, 0, 0), run.take(), 1
        elif not small:
            if run.parts:
                yield "resources", (run.first, 0, 0), run.take(), 1
            if r_start != r_end:  # else a run of empty resources: nothing to read
                yield from _scopes(body, r, (r_start, r_end))
        r += resources
    if run.parts:
        yield "resources", (run.first, 0, 0), run.take(), 1


def _scopes(body: bytes, r: int, resource: tuple[int, int]) -> Iterator[Piece]:
    """The pieces of a larger resource's scopes, its own fields before the first."""
    head: tuple[int, int] | None = resource  # its own fields, read before its first piece
    run = _Run()
    s = 0
    for field_start, s_start, s_end, scopes in _children(body, *resource, _SCOPE_SPANS):
        small = s_start != s_end and s_end - field_start <= _RUN_BYTES
        if small and run.add(s, body[field_start:s_end]):
            yield from _head(body, r, head)
            head = None
            yield "scopes", (r, run.first, 0), _delimited(_RESOURCE_SPANS, run.take()), 1
        elif not small:
            if run.parts:
                yield from _head(body, r, head)
                head = None
                yield "scopes", (r, run.first, 0), _delimited(_RESOURCE_SPANS, run.take()), 1
            if s_start != s_end:
                head = yield from _runs(body, (r, s), (s_start, s_end), head)
        s += scopes
    if run.parts:
        yield from _head(body, r, head)
        yield "scopes", (r, run.first, 0), _delimited(_RESOURCE_SPANS, run.take()), 1


def _head(body: bytes, r: int, resource: tuple[int, int] | None) -> Generator[Piece, None, None]:
    """A resource's own fields, unless they were yielded already (``resource`` None)."""
    if resource is not None:
        yield "resource", (r, 0, 0), _request(_own_fields(body, *resource, _SCOPE_SPANS)), 1


def _runs(
    body: bytes, place: tuple[int, int], scope: tuple[int, int], resource: tuple[int, int] | None
) -> Generator[Piece, None, tuple[int, int] | None]:
    """The pieces of a larger scope's spans; ``resource``: where the fields of its resource
    are, if they were not yielded yet (then before the first run). Returns the same, after."""
    r, s = place
    own: list[bytes] = []
    run: list[bytes] = []
    first = size = p = 0
    ran = False
    for field_start, span_start, span_end, count in _children(body, *scope, _SPANS, own):
        if span_start == span_end:
            if run:
                yield "spans", (r, s, first), _request(b"", b"".join(run)), 1
                run, size = [], 0
            yield "empty", (r, s, p), b"", count
            p += count
            continue
        if not run:
            yield from _head(body, r, resource)
            first, ran, resource = p, True, None
        run.append(body[field_start:span_end])
        size += span_end - span_start
        p += 1
        if len(run) >= _PIECE_SPANS or size >= _PIECE_BYTES:
            yield "spans", (r, s, first), _request(b"", b"".join(run)), 1
            run, size = [], 0
    if run:
        yield "spans", (r, s, first), _request(b"", b"".join(run)), 1
    if own and ran:
        yield "scope", (r, s, 0), _request(b"", b"".join(own)), 1
    return resource
