"""The ways an OTLP request is decoded into one ``DecodedBatch``, each feeding the per-span
loop of ``toolwatch.ingest.decode`` (``_Decoder``): ``decode_request`` of a parsed request
(OTLP/JSON, replay); ``PieceDecoder``, of one given piece by piece (OTLP/JSON's
``otlp_json_pieces``); ``decode_protobuf`` of a binary body, and ``scanner``, the scanner
an options value asks for.

A binary request protobuf refuses whole keeps the spans it can parse
(``toolwatch.ingest.salvage``, or the compiled ``_wire.sift``). One dense in resources,
scopes and spans (empty ones) is decoded a piece at a time to the same batch, so that what
is built per entry stays a small factor of its size: ``toolwatch.ingest.protobuf_pieces``
cuts the body into pieces by its framing (nothing decoded there), ``_decode_in_pieces``
here decodes them (``_decode_sifted``: the compiled sift's pieces). Also
``looks_like_otlp_protobuf``: whether a file's first bytes are a binary request (replay's
files). Options, batch and errors live in ``decode_types``. Pure functions; safe to call
from any thread.
"""

from __future__ import annotations

import functools
from typing import Any, Final

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from toolwatch.conventions import (
    ATTRIBUTE_KEYS,
    ATTRIBUTE_PREFIXES,
    EVENT_ATTRIBUTE_KEYS,
    EVENT_NAMES,
)
from toolwatch.conventions.history import ID_KEYS
from toolwatch.ingest.decode import _MAX_REPORTED, _SERVICE_NAME, _Decoder
from toolwatch.ingest.decode_types import DecodedBatch, DecodeError, DecodeOptions, IdProblems
from toolwatch.ingest.protobuf_pieces import FramingError, Sifted, is_dense, pieces
from toolwatch.ingest.salvage import salvage
from toolwatch.ingest.scan import Scan, Scanner, ScanPlan, Sift, WireError

__all__ = [
    "PieceDecoder",
    "decode_protobuf",
    "decode_request",
    "looks_like_otlp_protobuf",
    "scanner",
]


@functools.lru_cache(maxsize=16)
def scanner(options: DecodeOptions) -> Scanner:
    """The scanner of ``options`` (built once per options value: the compiled one hashes
    its key sets). Raises ``RuntimeError`` when a required compiled scanner is missing."""
    plan = ScanPlan(
        span_keys=ATTRIBUTE_KEYS
        | options.reference_keys
        | (ID_KEYS if options.read_histories else frozenset()),
        prefixes=ATTRIBUTE_PREFIXES,
        resource_keys=options.reference_keys | {_SERVICE_NAME},
        event_names=EVENT_NAMES,
        event_keys=EVENT_ATTRIBUTE_KEYS,
        max_value_bytes=options.max_value_bytes,
        max_span_attributes=options.max_span_attributes,
    )
    return Scanner.for_plan(plan, options.decoder)


def decode_request(
    request: ExportTraceServiceRequest,
    options: DecodeOptions,
    problems: IdProblems | None = None,
    json_names: bool = False,
) -> DecodedBatch:
    """Decode every span of an already parsed ``request`` (OTLP/JSON, replay); invalid
    spans are counted, never raised. ``problems`` names spans the parser found at fault
    (each stands in the request with an id no span has, and is rejected with that reason).
    ``json_names``: the rejected spans are named as in OTLP/JSON (``resourceSpans[0]...``,
    ``traceId``), for a client that sent JSON.

    ``parent_span_id`` of the records is ``None`` for roots (empty or all-zero parent).
    """
    decoder = _Decoder(options, known=problems or None, json_names=json_names)
    return decoder.scan(scanner(options).scan_message(request))


class PieceDecoder:
    """Decodes a request given piece by piece into one batch: OTLP/JSON, whose parsed pieces
    are let go as they are decoded. A piece is a request of whole resources, of whole scopes
    of one resource, or of a run of one scope's spans; ``problems`` and ``json_names`` as for
    ``decode_request`` (``problems`` need only hold the piece's spans when it is added). Not
    shared between requests or threads."""

    __slots__ = ("_decoder", "_scanner")

    def __init__(self, options: DecodeOptions, problems: IdProblems, json_names: bool) -> None:
        self._decoder = _Decoder(options, known=problems, json_names=json_names)
        self._scanner = scanner(options)

    def add(
        self,
        piece: ExportTraceServiceRequest,
        at: tuple[int, int, int],
        resource: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """Decode the piece's spans; ``at``: where its first span sits in the request,
        ``(resource, scope, span)``. ``resource``: what the scan of an earlier piece kept of
        the piece's one resource (sent with that piece only). Returns what the scan kept of
        each of the piece's resources."""
        scan = self._scanner.scan_message(piece)
        if resource is not None and scan.resources:  # none: a later null cleared the list
            scan.resources[0] = resource
        self._decoder.add(scan, at)
        return scan.resources

    def batch(self) -> DecodedBatch:
        """The spans of the pieces added, and the accounting of the rest."""
        return self._decoder.batch()


def decode_protobuf(body: bytes, options: DecodeOptions) -> DecodedBatch:
    """Decode a binary protobuf ``ExportTraceServiceRequest``.

    A request protobuf refuses whole, whose spans can still be told apart, keeps the spans it
    can parse: the others are rejected as ``malformed_span`` (``toolwatch.ingest.salvage``;
    the compiled ``_wire.sift`` where the extension is built, which gives the same batch).
    A request dense in resources, scopes and spans (empty ones: "empty envelopes") is decoded
    piece by piece, to the same batch (``toolwatch.ingest.protobuf_pieces``), so that its
    decoding costs a small factor of its size, like any other's.
    Raises ``DecodeError`` when ``body`` is not a valid message and cannot be salvaged.
    """
    found = scanner(options)
    if is_dense(body, found.entries(body)):
        return _decode_in_pieces(body, options, found)
    try:
        scan = found.scan_bytes(body)
    except WireError as exc:
        sift = found.sift()  # compiled: salvage's answer, at C speed
        sifted = _decode_sifted(body, options, found, sift) if sift is not None else None
        if isinstance(sifted, DecodedBatch):
            return sifted
        salvaged = salvage(body) if sift is None else None
        if salvaged is None:
            raise DecodeError(f"body is not a valid ExportTraceServiceRequest: {exc}") from exc
        request, problems = salvaged
        return decode_request(request, options, problems)
    return _Decoder(options).scan(scan)


#: The Collector's file exporter with ``format: proto`` writes each request after its size:
#: 4 bytes, big-endian.
_FILE_EXPORTER_PREFIX: Final = 4


#: How many length-delimited fields, each inside the one before, begin a request:
#: ``resource_spans``, then its ``resource`` (or ``scope_spans``), then that one's first.
_NESTED_FIELDS: Final = 3


def looks_like_otlp_protobuf(head: bytes) -> bool:
    """Whether ``head``, the first bytes of a file (64 are enough), look like a binary
    ``ExportTraceServiceRequest``: one as an OTLP/HTTP body holds it, or as the Collector's
    file exporter writes it with ``format: proto`` (``_FILE_EXPORTER_PREFIX``). A guess from
    the wire format, to tell a reader of text what such a file is: field 1
    (``resource_spans``, tag 0x0a) and the fields nested in it, each length-delimited and
    within its parent (text that opens with newlines, 0x0a too, is not)."""
    return _starts_request(head) or _starts_request(head[_FILE_EXPORTER_PREFIX:])


def _starts_request(data: bytes) -> bool:
    at, limit = 0, None  # where the enclosing field ends (None: the request, past ``data``)
    for depth in range(_NESTED_FIELDS):
        tag = data[at] if at < len(data) else 0
        if tag & 0x07 != 2 or (depth == 0 and tag != 0x0A):  # wire type 2: length-delimited
            return False
        length, at = _varint(data, at + 1)
        if not length or (limit is not None and at + length > limit):
            return False
        limit = at + length
    return True


def _varint(data: bytes, at: int) -> tuple[int | None, int]:
    """The varint at ``at`` (at most 5 bytes: a length) and where it ends; ``None`` if
    there is none."""
    value = 0
    for shift, byte in enumerate(data[at : at + 5]):
        value |= (byte & 0x7F) << (7 * shift)
        if not byte & 0x80:
            return value, at + shift + 1
    return None, at


def _decode_in_pieces(body: bytes, options: DecodeOptions, found: Scanner) -> DecodedBatch:
    """``decode_protobuf`` of a dense request, a piece at a time (``protobuf_pieces.pieces``):
    runs of small resources whole; a larger resource's own fields scanned once, for its
    attributes, a larger scope's checked once; runs of its small scopes, or of a larger
    scope's spans, scanned with those attributes; a piece protobuf refuses salvaged alone."""
    sift = found.sift()
    if sift is not None:
        sifted = _decode_sifted(body, options, found, sift)
        if isinstance(sifted, str):
            raise DecodeError(f"body is not a valid ExportTraceServiceRequest: {sifted}")
        return sifted
    problems: IdProblems = {}
    decoder = _Decoder(options, known=problems)
    attributes: dict[str, Any] = {}
    try:
        for kind, at, piece, count in pieces(body):
            if kind == "empty":
                decoder.empty_spans(at, count)
            elif kind == "resources":
                _add_piece(decoder, found, piece, at, attributes=None, problems=problems)
            elif kind in ("scopes", "spans"):
                _add_piece(decoder, found, piece, at, attributes=attributes, problems=problems)
            else:  # a resource's or a scope's own fields: protobuf must accept them
                scanned = _scan_piece(found, piece, at, kind)
                if kind == "resource":
                    attributes = scanned.resources[0]
    except FramingError as exc:
        raise DecodeError(f"body is not a valid ExportTraceServiceRequest: {exc}") from exc
    return decoder.batch()


def _decode_sifted(
    body: bytes, options: DecodeOptions, found: Scanner, sift: Sift
) -> DecodedBatch | str:
    """``_decode_in_pieces`` from the compiled sift (``protobuf_pieces.Sifted``), or what
    makes the request undecodable: runs of spans to scan, each resource's own fields scanned
    once for its attributes, runs of spans rejected unscanned counted at once, the first of
    them decoded only to be named. The sift hands the pieces on a batch at a time as it finds
    them, each decoded and let go: what accumulates is the records of valid spans."""
    problems: IdProblems = {}
    decoder = _Decoder(options, known=problems)
    attributes: dict[str, Any] = {}

    def consume(sifted: list[Sifted]) -> None:
        nonlocal attributes
        for index, (kind, at, piece, count, counts, traces) in enumerate(sifted):
            sifted[index] = _DONE  # let go as decoded: its request is a copy of the body's
            if kind == "resource":
                attributes = _scan_piece(found, piece, at, kind).resources[0]
            elif kind == "spans":
                _add_piece(decoder, found, piece, at, attributes=attributes, problems=problems)
            else:
                offenders: list[str] = []
                if piece and len(decoder.offenders) < _MAX_REPORTED:
                    named_problems: IdProblems = {}
                    named = _Decoder(options, known=named_problems)
                    _add_piece(named, found, piece, at, attributes=None, problems=named_problems)
                    offenders = named.offenders
                decoder.rejected_run(count, counts, offenders, traces)

    refused = sift(body, consume)
    return refused if refused is not None else decoder.batch()


_DONE: Final[Sifted] = ("", (0, 0, 0), b"", 0, (), ())


def _scan_piece(found: Scanner, piece: bytes, at: tuple[int, int, int], kind: str) -> Scan:
    try:
        return found.scan_bytes(piece)
    except WireError as exc:
        where = f"resource_spans[{at[0]}]" + (f".scope_spans[{at[1]}]" if kind == "scope" else "")
        message = f"body is not a valid ExportTraceServiceRequest: {where}: {exc}"
        raise DecodeError(message) from exc


def _add_piece(
    decoder: _Decoder,
    found: Scanner,
    piece: bytes,
    at: tuple[int, int, int],
    *,
    attributes: dict[str, Any] | None,
    problems: IdProblems,
) -> None:
    """Decode a piece whose first entry is at ``at``, its one resource's ``attributes``
    given unless it holds its resources whole; a piece protobuf refuses keeps the spans it
    can parse (``salvage``). ``problems``: the decoder's, for this piece only."""
    try:
        scan = found.scan_bytes(piece)
    except WireError as exc:
        salvaged = salvage(piece)
        if salvaged is None:
            raise DecodeError(f"body is not a valid ExportTraceServiceRequest: {exc}") from exc
        request, found_problems = salvaged
        for (r, s, p), problem in found_problems.items():
            problems[at[0] + r, at[1] + s, at[2] + p] = problem
        scan = found.scan_message(request)
    if attributes is not None:
        scan.resources[0] = attributes
    decoder.add(scan, at)
    problems.clear()  # held for this piece only: each names a span (a text for each)
