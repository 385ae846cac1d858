"""Compressed bodies for the tests of ``http_bodies`` and the OTLP/HTTP receiver: bombs, and
the smallest parts a gzip or zstd body may be made of.

Import as ``from tests.compressed import zstd_rle_frame`` (as ``tests.factories``)."""

from __future__ import annotations

import gzip
import struct

__all__ = ["EMPTY_GZIP_MEMBER", "EMPTY_ZSTD_FRAME", "SKIPPABLE_FRAME", "zstd_rle_frame"]

#: RFC 8878 §3.1.2: a skippable frame holding nothing, 8 bytes.
SKIPPABLE_FRAME = struct.pack("<II", 0x184D2A50, 0)
#: A zstd frame of no content, 9 bytes (``zstd.compress(b"")``).
EMPTY_ZSTD_FRAME = bytes.fromhex("28b52ffd2000010000")
#: A gzip member of no content, 20 bytes.
EMPTY_GZIP_MEMBER = gzip.compress(b"", mtime=0)


def zstd_rle_frame(blocks: int, byte: int = 0, window_log: int = 23) -> bytes:
    """A zstd frame (RFC 8878 §3.1.1) of ``blocks`` RLE blocks of 128 KiB each: four bytes
    a block, the densest zstd there is (32,768 to 1). No content size, so that nothing but
    decoding it tells how large it is."""
    header = b"\x28\xb5\x2f\xfd" + bytes([0x00, (window_log - 10) << 3])
    block = 128 * 1024
    rle = ((block << 3) | (1 << 1)).to_bytes(3, "little") + bytes([byte])
    last = ((block << 3) | (1 << 1) | 1).to_bytes(3, "little") + bytes([byte])
    return header + rle * (blocks - 1) + last
