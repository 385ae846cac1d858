"""Dense and hostile binary requests for the scanner fuzzer, and the check of the census and
the sift (``toolwatch.ingest._wire.census`` and ``sift``) against protobuf and a whole decode.

``dense_body`` builds a request of runs of tiny entries, the shapes ``_wire.sift`` reads
(``toolwatch.ingest.protobuf_pieces``): empty and few-byte spans, spans protobuf refuses
(field 0, truncated varints, wire types 3, 4, 6 and 7, groups ended by another's tag, groups
and arrays nested past protobuf's 100 levels, lengths near 2^64 or past the end, varints and
tags longer than protobuf reads, strings that are not UTF-8), spans with ids valid or not,
and resources and scopes whose own fields are valid, corrupt or odd (non-canonical varints),
some entries with stray fields between them.

``check_sifted`` holds the census and the sift to their contracts for any body: the census
counts what ``protobuf_pieces.entries`` counts, and what protobuf parses where it parses
the body (else a dense request could pass for a sparse one); the sift's pieces are well
formed, handed on in batches as it returns them, and
decoding them (``decode_requests._decode_sifted``) gives the batch a whole decode gives (protobuf's
parse and the reference scanner, else ``salvage``; refused by both or neither).
"""

from __future__ import annotations

import random
from typing import Any

from google.protobuf.message import DecodeError as ProtobufDecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from bench.hostile_decode import field, varint
from toolwatch.ingest.decode import _Decoder
from toolwatch.ingest.decode_requests import _decode_sifted, decode_request, scanner
from toolwatch.ingest.decode_types import DecodedBatch, DecodeError, DecodeOptions
from toolwatch.ingest.protobuf_pieces import SIFTED_REASONS, entries
from toolwatch.ingest.salvage import salvage
from toolwatch.ingest.scan import WireError

__all__ = ["check_sifted", "dense_body", "whole_outcome"]

_TRACE = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")
_OPTIONS = DecodeOptions(decoder="reference", reference_keys=frozenset({"toolwatch.case_id"}))
_KINDS = ("resource", "spans", "rejected")


def _overlong(value: int, extra: int) -> bytes:
    """``value`` as a varint ``extra`` bytes longer than it needs (protobuf reads up to 10)."""
    out = bytearray(varint(value))
    out[-1] |= 0x80
    out.extend(b"\x80" * (extra - 1) + b"\x00")
    return bytes(out)


def _groups(depth: int, number: int = 20) -> bytes:
    opened, closed = varint(number << 3 | 3), varint(number << 3 | 4)
    return opened * depth + closed * depth


def _arrays(depth: int) -> bytes:
    value = b""
    for _ in range(depth):
        value = field(5, field(1, value))
    return field(9, field(1, b"k") + field(2, value))


def _ids(rng: random.Random) -> bytes:
    trace = rng.choice([_TRACE, bytes(16), b"\x01", _TRACE[:15]])
    span = rng.choice([rng.randbytes(8), bytes(8), b"\x02" * 7, b""])
    parent = rng.choice([b"", b"", rng.randbytes(8), b"\x03"])
    body = field(1, trace) + field(2, span)
    return body + (field(4, parent) if parent else b"")


def _hostile(rng: random.Random) -> bytes:
    """A few bytes protobuf refuses, or reads oddly, as a message's content."""
    tag = varint(rng.randint(1, 20) << 3 | 2)
    return rng.choice(
        [
            b"\x00",  # field 0
            b"\x08",  # a truncated varint
            bytes([rng.randint(1, 15) << 3 | rng.choice((6, 7))]),  # wire types 6, 7
            varint(rng.randint(1, 20) << 3 | 4),  # an end-group tag outside a group
            varint(20 << 3 | 3) + varint(21 << 3 | 4),  # a group ended by another's tag
            varint(20 << 3 | 3),  # a group never ended
            varint(20 << 3 | 3) + b"\x00\x00\x03\x04" + varint(20 << 3 | 4),  # field 0 inside
            _groups(rng.choice((1, 96, 97, 98, 99, 100, 101))),
            _arrays(rng.choice((1, 46, 47, 48, 49))),
            tag + varint(2**64 - 1),  # a length near 2^64
            tag + varint(2**63 + rng.randint(0, 9)),
            tag + varint(2**32 + 1) + b"x",
            tag + b"\xff" * 9 + b"\x7f",  # a 10-byte length past 2^64
            tag + varint(5) + b"abc",  # a length past the end
            b"\x08" + b"\xff" * 10 + b"\x01",  # a varint of 11 bytes
            _overlong(1 << 3 | 2, 5) + b"\x00",  # a tag of 6 bytes
            _overlong(5 << 3 | 2, 3) + _overlong(1, 4) + b"n",  # a tag of 4, a length of 5
            b"\x08" + _overlong(7, 9),  # a varint of 10 bytes
            field(5, b"\xff"),  # a name that is not UTF-8
            field(5, b"\xed\xa0\x80"),  # a surrogate
            field(9, field(1, b"\xc0\x80")),  # an attribute key, overlong UTF-8
            b"\x08\x00",  # a trace id sent as a varint: unknown
            varint(1 << 3 | 5) + b"abcd",  # and as fixed32
        ]
    )


def _span(rng: random.Random, spans: list[bytes]) -> bytes:
    roll = rng.random()
    if roll < 0.2:
        return b""
    if roll < 0.45:
        return _hostile(rng)
    if roll < 0.65:
        return _ids(rng)
    if roll < 0.8 and spans:
        return rng.choice(spans)
    return _ids(rng) + _hostile(rng)


def _own(rng: random.Random, fields: list[bytes]) -> bytes:
    """A resource's or scope's own fields: none, valid, corrupt, or with an odd varint."""
    roll = rng.random()
    if roll < 0.4:
        return b""
    if roll < 0.7:
        return rng.choice(fields)
    if roll < 0.85:
        return field(1, _hostile(rng))
    return varint(30 << 3 | 2) + _overlong(1, 3) + b"x"  # an unknown field, length overlong


_RESOURCES = [field(1, field(1, b"service.name" + b"")), field(3, b"https://x"), b"\x10\x07"]
_SCOPES = [field(1, field(1, b"tool")), field(2, b"1.0"), field(3, b"\xff"), b"\x20\x01"]


_MAX_BYTES = 32 * 1024  # bodies stay small: each is decoded whole and salvaged too


def dense_body(rng: random.Random, spans: list[bytes]) -> bytes:
    """A request of runs of small entries (``spans``: real spans' bytes to mix in), of at
    most ``_MAX_BYTES``."""
    while len(body := _dense(rng, spans)) > _MAX_BYTES:
        pass
    return body


def _dense(rng: random.Random, spans: list[bytes]) -> bytes:
    resources = []
    for _ in range(rng.randint(1, 4)):
        scopes = []
        for _ in range(rng.randint(0, 4)):
            entries_ = []
            for _ in range(rng.randint(0, 6)):
                entry = field(2, _span(rng, spans))
                entries_.append(entry * rng.choice((1, 1, 2, 3, 8, 40)))
            if rng.random() < 0.1:  # a stray field between the spans
                entries_.insert(rng.randint(0, len(entries_)), _hostile(rng))
            own = _own(rng, _SCOPES)
            at = rng.randint(0, len(entries_))
            scopes.append(field(2, b"".join(entries_[:at]) + own + b"".join(entries_[at:])))
        body = _own(rng, _RESOURCES) + b"".join(scopes)
        resources.append(field(1, body) * rng.choice((1, 1, 2, 5)))
    if rng.random() < 0.05:
        resources.insert(rng.randint(0, len(resources)), _hostile(rng))
    return b"".join(resources)


def whole_outcome(body: bytes, options: DecodeOptions = _OPTIONS) -> DecodedBatch | str:
    """A whole decode's outcome: protobuf's parse, else salvage's; ``"DecodeError"`` when
    the request is refused. What the sift's pieces must decode to."""
    try:
        return _Decoder(options).scan(scanner(options).scan_bytes(body))
    except WireError:
        salvaged = salvage(body)
        if salvaged is None:
            return "DecodeError"
        return decode_request(salvaged[0], options, salvaged[1])


def _parsed_entries(body: bytes) -> int | None:
    """The resources, scopes and spans protobuf parses in ``body``; ``None``: it refuses it."""
    try:
        request = ExportTraceServiceRequest.FromString(body)
    except ProtobufDecodeError:
        return None
    count = len(request.resource_spans)
    for resource in request.resource_spans:
        count += len(resource.scope_spans) + sum(len(s.spans) for s in resource.scope_spans)
    return count


def _check_pieces(sifted: list[Any]) -> None:
    for piece in sifted:
        kind, at, data, count, counts, traces = piece
        assert kind in _KINDS and len(at) == 3 and isinstance(data, bytes), piece
        assert all(type(n) is int and n >= 0 for n in (*at, count)), piece
        if kind == "rejected":
            assert len(counts) == len(SIFTED_REASONS) and sum(counts) == count > 0, piece
            assert all(type(t) is bytes and len(t) == 16 for t in traces), piece
        else:
            assert counts == () and traces == () and (count > 0) == (kind == "spans"), piece


def check_sifted(wire: Any, body: bytes) -> str | None:
    """What the census or the sift of ``body`` gets wrong, or ``None``."""
    counted, expected = wire.census(body), entries(body)
    if counted != expected:
        return f"census counts {counted}, entries {expected}"
    parsed = _parsed_entries(body)
    if parsed is not None and counted != parsed:  # a dense request hidden from the census
        return f"census counts {counted}, protobuf parses {parsed}"
    sifted = wire.sift(body)
    batches: list[list[Any]] = []
    handed = wire.sift(body, batches.append)
    if isinstance(sifted, list):
        _check_pieces(sifted)
        if handed is not None or [piece for batch in batches for piece in batch] != sifted:
            return f"the sift hands on other pieces than it returns ({handed!r:.200})"
    elif not isinstance(sifted, str):
        return f"sift returned {type(sifted).__name__}"
    elif handed != sifted:
        return f"the sift refuses for {sifted!r} and, handing on, for {handed!r}"
    try:
        got: DecodedBatch | str = _decode_sifted(body, _OPTIONS, scanner(_OPTIONS), wire.sift)
    except DecodeError:
        got = "DecodeError"
    if isinstance(got, str):
        got = "DecodeError"
    want = whole_outcome(body)
    if got != want:
        return f"sifted {got!r:.600}\nwhole {want!r:.600}"
    return None
