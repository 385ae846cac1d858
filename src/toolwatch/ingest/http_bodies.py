"""OTLP/HTTP request bodies decompressed (``Content-Encoding``: gzip, deflate, zlib, zstd,
identity), cut off at the receiver's cap *after* decompression, so that a gzip or zstd bomb
is refused, not inflated; the streams themselves are read by ``compressed_streams``.

The codings are those an OpenTelemetry Collector's ``otlphttp`` exporter sends (confighttp
``compression``), less ``snappy``, ``x-snappy-framed`` and ``lz4``, answered 415 (see
docs/configuration.md, "Compressed requests"), as is zstd on a Python that cannot read it
(``compressed_streams.ZSTD_UNAVAILABLE``)."""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from toolwatch.ingest.compressed_streams import (
    ZSTD_UNAVAILABLE,
    Inflating,
    Stream,
    StreamError,
    Unzstd,
)
from toolwatch.ingest.http_answers import IDENTITY, RejectError, unsupported_encoding

__all__ = ["MAX_PARTS", "decompress"]

_GZIP_WBITS = 16 + zlib.MAX_WBITS  # a gzip member (RFC 1952)
_ZLIB_WBITS = zlib.MAX_WBITS  # a zlib stream (RFC 1950): what "deflate" names (RFC 9110)
_RAW_WBITS = -zlib.MAX_WBITS  # bare deflate data (RFC 1951), which some clients send instead
#: What one read asks of a decompressor: what a bomb may add to the cap.
_CHUNK_BYTES = 64 * 1024
#: The most gzip members or zstd frames a body may hold (the Collector and the SDKs write
#: one). Each costs a decompressor, and one that holds nothing (an empty member, a skippable
#: frame: 8 bytes) never moves the cap: 20 MiB of those would keep the decode turn busy.
MAX_PARTS = 1000


@dataclass(frozen=True, slots=True)
class _Coding:
    """How to read a body: ``name`` as messages say it; ``opens`` a stream starting at an
    offset of the body; ``part``: what the coding calls each of several streams a body may
    hold (a gzip "member", RFC 1952 §2.2; a zstd "frame", RFC 8878 §3), or ``None`` when
    it is one stream."""

    name: str
    opens: Callable[[memoryview, int], Stream]
    part: str | None = None

    def invalid(self, number: int) -> str:
        """What a 400's message starts with for a fault in the ``number``th stream."""
        where = f" ({self.part} {number})" if number > 1 else ""
        return f"body is not valid {self.name}{where}"


def decompress(raw: bytes, encoding: str, max_bytes: int) -> bytes:
    """``raw`` as its Content-Encoding says (gzip, deflate, zlib, zstd or none), never past
    ``max_bytes`` decompressed. Raises ``RejectError``: 400 for a body that is no such data,
    413 past the cap or ``MAX_PARTS``, 415 for another coding (zstd too, when this Python
    cannot read it)."""
    if encoding in IDENTITY:
        return raw
    if encoding in ("gzip", "x-gzip"):  # RFC 9110 §8.4.1.3: x-gzip is gzip
        return _decompressed(raw, _Coding("gzip", _inflating(_GZIP_WBITS), "member"), max_bytes)
    if encoding == "deflate":  # the OpenTelemetry SDKs' Compression.Deflate
        return _decompressed(raw, _Coding("deflate", _inflating(_deflate_wbits(raw))), max_bytes)
    if encoding == "zlib":  # the Collector's compression: zlib, a zlib stream as for deflate
        return _decompressed(raw, _Coding("zlib", _inflating(_ZLIB_WBITS)), max_bytes)
    if encoding == "zstd" and not ZSTD_UNAVAILABLE:  # RFC 8878 §3: frames, one after another
        return _decompressed(raw, _Coding("zstd", Unzstd, "frame"), max_bytes)
    raise unsupported_encoding(encoding)


def _decompressed(raw: bytes, coding: _Coding, max_bytes: int) -> bytes:
    """``raw`` decompressed, never past the cap. A coding of several parts reads them one
    after another to the end of the body (what follows the first may hold spans), the cap
    counting them all, ``MAX_PARTS`` at most; another reads one stream and refuses anything
    after it. Each stream is read where it starts in the body: no part of the body is copied
    but a slice at a time (giving each the rest of the body copied it once a part)."""
    if not raw:
        raise RejectError(400, f"body is not valid {coding.name}: it is empty")
    body, output, start = memoryview(raw), _Output(max_bytes), 0
    for number in range(1, MAX_PARTS + 1):
        stream = coding.opens(body, start)
        output.read(stream, coding.invalid(number))
        start = stream.end
        if start == len(body):
            return output.joined()
        if coding.part is None:
            raise RejectError(400, f"body is not valid {coding.name}: data after the stream")
    raise RejectError(413, f"body holds more than {MAX_PARTS} {coding.name} {coding.part}s")


class _Output:
    """What a body decompresses to, read a chunk at a time, never past ``max_bytes``."""

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._chunks: list[bytes] = []
        self._size = 0

    def read(self, stream: Stream, invalid: str) -> None:
        """``stream``'s output to its end. No read asks for more than a chunk, nor for more
        than is left of the cap plus one byte (to tell a body at the cap from one past it),
        so that a bomb is refused holding the cap and a chunk at most. Raises
        ``RejectError``: 400 (``invalid``, then why) for data that is not the coding's or
        that ends before the stream does; 413 past the cap."""
        while True:
            try:
                chunk = stream.read(min(_CHUNK_BYTES, self._max_bytes + 1 - self._size))
            except StreamError as exc:
                raise RejectError(400, f"{invalid}: {exc}") from None
            self._size += len(chunk)
            if self._size > self._max_bytes:
                raise RejectError(413, f"decompressed body exceeds {self._max_bytes} bytes")
            self._chunks.append(chunk)
            if stream.eof:
                return
            if not chunk:
                raise RejectError(400, f"{invalid}: the stream is truncated")

    def joined(self) -> bytes:
        return b"".join(self._chunks)


def _inflating(wbits: int) -> Callable[[memoryview, int], Stream]:
    return functools.partial(Inflating, wbits=wbits)


def _deflate_wbits(raw: bytes) -> int:
    """A zlib stream's, or bare deflate data's: a zlib header is a deflate method byte and
    a check value that makes the first two bytes a multiple of 31 (RFC 1950 §2.2)."""
    if len(raw) >= 2 and raw[0] & 0x0F == 8 and (raw[0] << 8 | raw[1]) % 31 == 0:
        return _ZLIB_WBITS
    return _RAW_WBITS
