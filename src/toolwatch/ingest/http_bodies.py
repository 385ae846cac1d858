"""OTLP/HTTP request bodies decompressed (``Content-Encoding``: gzip, deflate, zlib, zstd,
identity), cut off at the receiver's cap *after* decompression, so that a gzip or zstd bomb
is refused, not inflated.

The codings are those an OpenTelemetry Collector's ``otlphttp`` exporter sends (confighttp
``compression``), less ``snappy``, ``x-snappy-framed`` and ``lz4``, answered 415 (see
docs/configuration.md, "Compressed requests")."""

from __future__ import annotations

import functools
import sys
import zlib
from collections.abc import Callable
from typing import Protocol

from toolwatch.ingest.http_answers import IDENTITY, RejectError, unsupported_encoding

if sys.version_info >= (3, 14):
    from compression import zstd
else:  # the same module, CPython's own, for Python 3.9 to 3.13
    from backports import zstd

__all__ = ["ZSTD_MAX_WINDOW_BYTES", "decompress"]

_GZIP_WBITS = 16 + zlib.MAX_WBITS  # a gzip member (RFC 1952)
_ZLIB_WBITS = zlib.MAX_WBITS  # a zlib stream (RFC 1950): what "deflate" names (RFC 9110)
_RAW_WBITS = -zlib.MAX_WBITS  # bare deflate data (RFC 1951), which some clients send instead
#: RFC 9659 §3: a ``zstd`` content coding's window is at most 8 MiB, and a decoder may refuse
#: a larger one; refused, it is memory the decoder never allocates, whatever a frame asks.
#: The Collector's encoder (klauspost/compress) uses 8 MiB, libzstd's levels 1 to 19 at most.
ZSTD_MAX_WINDOW_BYTES = 8 * 2**20
_ZSTD_OPTIONS: dict[int, int] = {
    zstd.DecompressionParameter.window_log_max: ZSTD_MAX_WINDOW_BYTES.bit_length() - 1
}
#: What one read asks of a decompressor: what a bomb may add to the cap.
_CHUNK_BYTES = 64 * 1024
#: libzstd's name for ZSTD_error_frameParameter_windowTooLarge, in ZstdError's message.
_ZSTD_WINDOW_TOO_LARGE = "Frame requires too much memory for decoding"


class _Stream(Protocol):
    """One compressed stream (a gzip member, a zstd frame) being decompressed."""

    @property
    def eof(self) -> bool:
        """Whether the stream has ended."""

    @property
    def unused_data(self) -> bytes:
        """What followed the stream's end."""

    def read(self, max_length: int) -> bytes:
        """The next output, at most ``max_length`` bytes; empty when the input ran out."""


class _Inflating:
    """A zlib, gzip or bare deflate stream, its input given a slice at a time: zlib keeps
    what ``max_length`` left unread of a slice as a copy (``unconsumed_tail``), so that
    giving it the whole body each read would copy it once a chunk."""

    def __init__(self, data: bytes, wbits: int) -> None:
        self._inflater = zlib.decompressobj(wbits=wbits)
        self._data = memoryview(data)
        self._at = 0  # where the next slice starts
        self._tail = b""  # what the last read left unread of its slice

    @property
    def eof(self) -> bool:
        return self._inflater.eof

    @property
    def unused_data(self) -> bytes:
        return self._inflater.unused_data + self._data[self._at :].tobytes()

    def read(self, max_length: int) -> bytes:
        while True:
            given = self._tail or self._data[self._at : self._at + _CHUNK_BYTES]
            if not self._tail:
                self._at += len(given)
            output = self._inflater.decompress(given, max_length)
            self._tail = self._inflater.unconsumed_tail
            if output or self._inflater.eof or self._at == len(self._data):
                return output


class _Unzstd:
    """A zstd frame, its window at most ``ZSTD_MAX_WINDOW_BYTES``: what ``max_length``
    leaves unread of the input the decompressor keeps."""

    def __init__(self, data: bytes) -> None:
        self._decompressor = zstd.ZstdDecompressor(options=_ZSTD_OPTIONS)
        self._input = data

    @property
    def eof(self) -> bool:
        return self._decompressor.eof

    @property
    def unused_data(self) -> bytes:
        return self._decompressor.unused_data

    def read(self, max_length: int) -> bytes:
        output = self._decompressor.decompress(self._input, max_length)
        self._input = b""
        return output


def decompress(raw: bytes, encoding: str, max_bytes: int) -> bytes:
    """``raw`` as its Content-Encoding says (gzip, deflate, zlib, zstd or none), never past
    ``max_bytes`` decompressed. Raises ``RejectError``: 400 for a body that is no such data,
    413 past the cap, 415 for another coding."""
    if encoding in IDENTITY:
        return raw
    if encoding in ("gzip", "x-gzip"):  # RFC 9110 §8.4.1.3: x-gzip is gzip
        return _decompressed(raw, "gzip", _inflating(_GZIP_WBITS), max_bytes, "member")
    if encoding == "deflate":  # the OpenTelemetry SDKs' Compression.Deflate
        return _decompressed(raw, "deflate", _inflating(_deflate_wbits(raw)), max_bytes)
    if encoding == "zlib":  # the Collector's compression: zlib, a zlib stream as for deflate
        return _decompressed(raw, "zlib", _inflating(_ZLIB_WBITS), max_bytes)
    if encoding == "zstd":  # RFC 8878 §3: one or more frames, decompressed one after another
        return _decompressed(raw, "zstd", _Unzstd, max_bytes, "frame")
    raise unsupported_encoding(encoding)


def _decompressed(
    raw: bytes,
    name: str,
    stream: Callable[[bytes], _Stream],
    max_bytes: int,
    several: str | None = None,
) -> bytes:
    """``raw`` decompressed, never past the cap. With ``several`` (what the coding calls
    each part: a gzip "member", RFC 1952 §2.2; a zstd "frame") the body is one or more
    parts, decompressed one after another (what follows the first is not ignored: it may
    hold spans) and the cap counts them all; else it is one stream."""
    chunks: list[bytes] = []
    size, rest, streams = 0, raw, 0
    while rest:
        streams += 1
        where = f" ({several} {streams})" if streams > 1 else ""
        part = stream(rest)
        size = _read_stream(part, chunks, size, max_bytes, f"body is not valid {name}{where}")
        rest = part.unused_data
        if rest and several is None:
            raise RejectError(400, f"body is not valid {name}: data after the stream")
    if not streams:
        raise RejectError(400, f"body is not valid {name}: it is empty")
    return b"".join(chunks)


def _read_stream(
    stream: _Stream, chunks: list[bytes], size: int, max_bytes: int, invalid: str
) -> int:
    """``stream``'s output appended to ``chunks`` (``size`` bytes so far) a chunk at a time,
    the new size returned: no read asks for more than a chunk, nor for more than is left of
    the cap plus one byte (to tell a body at the cap from one past it), so that a bomb is
    refused holding the cap and a chunk at most."""
    while True:
        try:
            chunk = stream.read(min(_CHUNK_BYTES, max_bytes + 1 - size))
        except (zlib.error, zstd.ZstdError) as exc:
            raise RejectError(400, f"{invalid}: {_reason(exc)}") from None
        size += len(chunk)
        if size > max_bytes:
            raise RejectError(413, f"decompressed body exceeds {max_bytes} bytes")
        chunks.append(chunk)
        if stream.eof:
            return size
        if not chunk:
            raise RejectError(400, f"{invalid}: the stream is truncated")


def _inflating(wbits: int) -> Callable[[bytes], _Stream]:
    return functools.partial(_Inflating, wbits=wbits)


def _reason(exc: Exception) -> str:
    """Why the data is refused, as the client can act on it: libzstd's "too much memory"
    is a window past RFC 9659's, which the sender chose (a level over 19, ``--long``)."""
    if _ZSTD_WINDOW_TOO_LARGE in str(exc):
        return f"a frame's window is over {ZSTD_MAX_WINDOW_BYTES} bytes, RFC 9659's limit"
    return str(exc)


def _deflate_wbits(raw: bytes) -> int:
    """A zlib stream's, or bare deflate data's: a zlib header is a deflate method byte and
    a check value that makes the first two bytes a multiple of 31 (RFC 1950 §2.2)."""
    if len(raw) >= 2 and raw[0] & 0x0F == 8 and (raw[0] << 8 | raw[1]) % 31 == 0:
        return _ZLIB_WBITS
    return _RAW_WBITS
