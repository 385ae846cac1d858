"""OTLP/HTTP request bodies decompressed (``Content-Encoding``: gzip, deflate, identity),
cut off at the receiver's cap *after* decompression, so that a gzip bomb is refused, not
inflated."""

from __future__ import annotations

import zlib

from toolwatch.ingest.http_answers import IDENTITY, RejectError, unsupported_encoding

__all__ = ["decompress"]

_GZIP_WBITS = 16 + zlib.MAX_WBITS  # a gzip member (RFC 1952)
_ZLIB_WBITS = zlib.MAX_WBITS  # a zlib stream (RFC 1950): what "deflate" names (RFC 9110)
_RAW_WBITS = -zlib.MAX_WBITS  # bare deflate data (RFC 1951), which some clients send instead


def decompress(raw: bytes, encoding: str, max_bytes: int) -> bytes:
    """``raw`` as its Content-Encoding says (gzip, deflate or none), never past ``max_bytes``
    decompressed. Raises ``RejectError``: 400 for a body that is no such data, 413 past the
    cap, 415 for another coding."""
    if encoding in IDENTITY:
        return raw
    if encoding in ("gzip", "x-gzip"):  # RFC 9110 §8.4.1.3: x-gzip is gzip
        return _inflate(raw, "gzip", _GZIP_WBITS, max_bytes, members=True)
    if encoding == "deflate":  # the OpenTelemetry SDKs' Compression.Deflate
        return _inflate(raw, "deflate", _deflate_wbits(raw), max_bytes, members=False)
    raise unsupported_encoding(encoding)


def _inflate(raw: bytes, name: str, wbits: int, max_bytes: int, members: bool) -> bytes:
    """``raw`` decompressed, never past the cap. RFC 1952 §2.2: a gzip body is one or
    more members, decompressed one after another (what follows the first is not ignored:
    it may hold spans), and the cap counts them all; a deflate body is one stream."""
    parts: list[bytes] = []
    size, rest = 0, raw
    while rest:
        inflater = zlib.decompressobj(wbits=wbits)
        try:
            part = inflater.decompress(rest, max_bytes + 1 - size)
        except zlib.error as exc:
            where = f" (member {len(parts) + 1})" if parts else ""
            raise RejectError(400, f"body is not valid {name}{where}: {exc}") from None
        size += len(part)
        if size > max_bytes:
            raise RejectError(413, f"decompressed body exceeds {max_bytes} bytes")
        if not inflater.eof:
            raise RejectError(400, f"body is not valid {name}: the stream is truncated")
        parts.append(part)
        rest = inflater.unused_data
        if rest and not members:
            raise RejectError(400, f"body is not valid {name}: data after the stream")
    if not parts:
        raise RejectError(400, f"body is not valid {name}: it is empty")
    return b"".join(parts)


def _deflate_wbits(raw: bytes) -> int:
    """A zlib stream's, or bare deflate data's: a zlib header is a deflate method byte and
    a check value that makes the first two bytes a multiple of 31 (RFC 1950 §2.2)."""
    if len(raw) >= 2 and raw[0] & 0x0F == 8 and (raw[0] << 8 | raw[1]) % 31 == 0:
        return _ZLIB_WBITS
    return _RAW_WBITS
