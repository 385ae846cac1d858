"""What a zstd body holds while it is decompressed, beyond the cap and a chunk."""

from __future__ import annotations

import os
import struct
import sys
import tracemalloc

from toolwatch.ingest.http_answers import RejectError
from toolwatch.ingest.http_bodies import decompress

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

MIB = 2**20


def zstd_rle_frame(blocks: int) -> bytes:
    """A zstd frame of ``blocks`` RLE blocks of 128 KiB of zeros, no content size."""
    header = b"\x28\xb5\x2f\xfd" + bytes([0x00, (23 - 10) << 3])
    rle = ((128 * 1024 << 3) | (1 << 1)).to_bytes(3, "little") + b"\0"
    last = ((128 * 1024 << 3) | (1 << 1) | 1).to_bytes(3, "little") + b"\0"
    return header + rle * (blocks - 1) + last


def _peak_bytes(body: bytes, encoding: str, cap: int) -> tuple[int, int]:
    tracemalloc.start()
    try:
        try:
            decompress(body, encoding, cap)
            status = 200
        except RejectError as error:
            status = error.status
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return status, peak


def test_a_zstd_bomb_followed_by_more_body_holds_no_copy_of_the_body() -> None:
    """Wrong: ``_Unzstd.read`` gives the decompressor the whole rest of the body at once;
    when ``max_length`` stops it, CPython's ZstdDecompressor copies all the unread input
    into a buffer of its own, so a zstd bomb followed by 8 MiB (a skippable frame) holds
    ~9 MiB for a 1 MiB cap, where the docs promise "no more than the cap and 64 KiB, plus a
    zstd decoder's window" (C memory, not counted here) and a gzip body of the same shape
    holds ~1.2 MiB. Should: give the decompressor its input a slice at a time, as
    ``_Inflating`` does, so that the peak stays under the cap plus a few chunks."""
    padding = struct.pack("<II", 0x184D2A50, 8 * MIB) + bytes(8 * MIB)
    body = zstd_rle_frame(400) + padding  # 50 MiB of zeros, then 8 MiB skipped

    status, peak = _peak_bytes(body, "zstd", MIB)

    assert status == 413
    assert peak < MIB + 512 * 1024, f"peak {peak / MIB:.1f} MiB for a 1 MiB cap"


def test_a_large_legit_zstd_body_is_not_copied_whole_into_the_decompressor() -> None:
    """Wrong: a 16 MiB zstd body that does not compress (already-compressed attribute
    values, random ids) is copied whole into the decompressor's input buffer at its first
    64 KiB read: the peak is the output twice (chunks, then their join) plus the input
    again; gzip's and deflate's are the output twice. Should: be no more than gzip's, the
    body given a slice at a time."""
    data = os.urandom(16 * MIB)
    body = zstd.compress(data, level=1)

    status, peak = _peak_bytes(body, "zstd", 20 * MIB)

    assert status == 200
    assert peak < 2 * len(data) + 2 * MIB, f"peak {peak / MIB:.1f} MiB for 16 MiB"
