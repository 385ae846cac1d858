"""The compressed streams an OTLP/HTTP body may hold (``http_bodies``): a zlib, gzip or bare
deflate stream (``Inflating``), a Zstandard frame (``Unzstd``), each read from where it starts
in the body, its input given a slice at a time, so that neither the body nor what follows a
stream is ever copied whole.

zstd is optional: CPython 3.14's ``compression.zstd`` is missing from an interpreter built
without libzstd (as ``lzma`` is without liblzma), and below 3.14 it is the ``backports.zstd``
package. Without it, ``ZSTD_UNAVAILABLE`` says why, and the receiver answers
``Content-Encoding: zstd`` 415 (``http_answers.COMPRESSED``) instead of failing to start."""

from __future__ import annotations

import sys
import zlib
from typing import Protocol

try:
    if sys.version_info >= (3, 14):
        from compression import zstd
    else:  # the same module, CPython's own, for Python 3.9 to 3.13
        from backports import zstd
except ImportError as error:
    _ZSTD_MISSING: ImportError | None = error
else:
    _ZSTD_MISSING = None

__all__ = [
    "ZSTD_MAX_WINDOW_BYTES",
    "ZSTD_UNAVAILABLE",
    "Inflating",
    "Stream",
    "StreamError",
    "Unzstd",
]

#: RFC 9659 §3: a ``zstd`` content coding's window is at most 8 MiB, and a decoder may refuse
#: a larger one; refused, it is memory the decoder never allocates, whatever a frame asks.
#: The Collector's encoder (klauspost/compress) uses 8 MiB, libzstd's levels 1 to 19 at most.
ZSTD_MAX_WINDOW_BYTES = 8 * 2**20
#: How much of the body a stream is given at a time: what a decompressor may copy of it.
SLICE_BYTES = 64 * 1024
#: libzstd's text for ZSTD_error_frameParameter_windowTooLarge, in ZstdError's message (the
#: same since libzstd 1.3; test_http_bodies' window test fails if it changes).
_ZSTD_WINDOW_TOO_LARGE = "Frame requires too much memory for decoding"


def _zstd_unavailable(missing: ImportError | None) -> str:
    """Why this Python cannot read zstd ("" when it can), as the start-up log says it."""
    if missing is None:
        return ""
    if sys.version_info >= (3, 14):
        return f"compression.zstd cannot be imported ({missing}): Python built without libzstd"
    return f"backports.zstd cannot be imported ({missing}): pip install backports.zstd"


#: Why Content-Encoding zstd is answered 415 on this Python; "" when it is read.
ZSTD_UNAVAILABLE = _zstd_unavailable(_ZSTD_MISSING)


class StreamError(Exception):
    """The data is not what its coding says; the message says why."""


class Stream(Protocol):
    """One compressed stream of a body (a gzip member, a zstd frame), from where it starts."""

    @property
    def eof(self) -> bool:
        """Whether the stream has ended."""

    @property
    def end(self) -> int:
        """Where in the body the stream ended (what follows it starts), once ``eof``."""

    def read(self, max_length: int) -> bytes:
        """The next output, at most ``max_length`` (> 0) bytes; empty when the body ran out
        before the stream's end. Raises ``StreamError`` for data that is not the coding's."""


class _Sliced:
    """A stream's input: the body from ``start`` on, a slice at a time."""

    def __init__(self, body: memoryview, start: int) -> None:
        self._body = body
        self._at = start  # where the next slice starts

    def _next_slice(self) -> memoryview:
        """The next slice of the body, empty once the body has been given whole."""
        given = self._body[self._at : self._at + SLICE_BYTES]
        self._at += len(given)
        return given


class Inflating(_Sliced):
    """A zlib, gzip or bare deflate stream (``wbits``, as ``zlib.decompressobj`` takes it).
    zlib keeps as a copy what ``max_length`` left unread of its input (``unconsumed_tail``)
    and what follows the stream (``unused_data``): a slice at most."""

    def __init__(self, body: memoryview, start: int, wbits: int) -> None:
        super().__init__(body, start)
        self._inflater = zlib.decompressobj(wbits=wbits)
        self._tail = b""  # what the last read left unread of its slice

    @property
    def eof(self) -> bool:
        return self._inflater.eof

    @property
    def end(self) -> int:
        return self._at - len(self._inflater.unused_data)

    def read(self, max_length: int) -> bytes:
        while True:
            # Given nothing once the body is given whole: zlib may still hold output.
            given = self._tail or self._next_slice()
            try:
                output = self._inflater.decompress(given, max_length)
            except zlib.error as exc:
                raise StreamError(str(exc)) from None
            self._tail = self._inflater.unconsumed_tail
            if output or self.eof or not given:
                return output


class Unzstd(_Sliced):
    """A zstd frame (or a skippable one, RFC 8878 §3.1.2), its window at most
    ``ZSTD_MAX_WINDOW_BYTES``. The decompressor keeps as a copy what ``max_length`` left
    unread of its input and what follows the frame: a slice at most. Only to be built when
    ``ZSTD_UNAVAILABLE`` is empty."""

    def __init__(self, body: memoryview, start: int) -> None:
        super().__init__(body, start)
        window_log = ZSTD_MAX_WINDOW_BYTES.bit_length() - 1
        options: dict[int, int] = {zstd.DecompressionParameter.window_log_max: window_log}
        self._decompressor = zstd.ZstdDecompressor(options=options)

    @property
    def eof(self) -> bool:
        return self._decompressor.eof

    @property
    def end(self) -> int:
        return self._at - len(self._decompressor.unused_data)

    def read(self, max_length: int) -> bytes:
        while True:
            # A slice only when the decompressor has used what it was given: what it holds
            # unread is then nothing, or the rest of one slice.
            needs_input = self._decompressor.needs_input
            given = self._next_slice() if needs_input else b""
            try:
                output = self._decompressor.decompress(given, max_length)
            except zstd.ZstdError as exc:
                raise StreamError(_zstd_reason(exc)) from None
            if output or self.eof or (needs_input and not given):
                return output


def _zstd_reason(exc: Exception) -> str:
    """Why the data is refused, as the client can act on it: libzstd's "too much memory"
    is a window past RFC 9659's, which the sender chose (a level over 19, ``--long``)."""
    if _ZSTD_WINDOW_TOO_LARGE in str(exc):
        return f"a frame's window is over {ZSTD_MAX_WINDOW_BYTES} bytes, RFC 9659's limit"
    return str(exc)
