"""A body of many small zstd frames (or gzip members) is decompressed in time quadratic in
the number of frames: each frame's ``unused_data`` is a fresh copy of all the body that
follows it. Frames that decompress to nothing (skippable frames, empty frames) never move
the cap, so the cap does not stop it: a 20 MiB body of 8-byte skippable frames keeps the
decode thread, which the gRPC receiver shares, busy for tens of minutes."""

from __future__ import annotations

import gzip
import struct
import subprocess
import sys
import textwrap

import pytest

MIB = 2**20
#: Run in a child process, so that a quadratic decompression is cut off at the timeout
#: instead of running on (and taking the CPU) after the test has failed.
_CHILD = textwrap.dedent(
    """
    import sys, time
    from toolwatch.ingest.http_answers import RejectError
    from toolwatch.ingest.http_bodies import decompress
    body, encoding = sys.stdin.buffer.read(), sys.argv[1]
    started = time.perf_counter()
    try:
        decompress(body, encoding, 20 * 2**20)
    except RejectError:
        pass
    print(time.perf_counter() - started)
    """
)


def _seconds_to_decompress(body: bytes, encoding: str, timeout: float) -> float:
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, encoding],
            input=body,
            capture_output=True,
            timeout=timeout,
            check=True,
        )
    except subprocess.TimeoutExpired:
        return float("inf")
    return float(done.stdout)


SKIPPABLE = struct.pack("<II", 0x184D2A50, 0)  # RFC 8878 §3.1.2: a skippable frame, empty
EMPTY_ZSTD = bytes.fromhex("28b52ffd2000010000")  # a frame of no content (zstd.compress(b""))
EMPTY_GZIP = gzip.compress(b"", mtime=0)  # a gzip member of no content, 20 bytes


@pytest.mark.parametrize(
    ("encoding", "unit"),
    [
        ("zstd", SKIPPABLE),
        ("zstd", EMPTY_ZSTD),
        ("gzip", EMPTY_GZIP),  # the same on main: not fixed by the rewrite
    ],
    ids=["zstd-skippable-frames", "zstd-empty-frames", "gzip-empty-members"],
)
def test_a_body_of_many_empty_frames_is_decompressed_or_refused_in_linear_time(
    encoding: str, unit: bytes
) -> None:
    """Wrong: 2 MiB of empty zstd frames (or gzip members) takes ~20 s, 20 MiB (the default
    cap) ~40 min, in the decode thread shared with gRPC: every frame copies the rest of the
    body (``unused_data``). Should: be read without copying what follows each frame (a
    memoryview, as ``_Inflating`` does within a stream), or refuse a body of more frames
    than a sender writes (400/413) — either way a 2 MiB body is done in a second or two,
    as a legit 20 MiB body is (~20-90 ms)."""
    body = unit * (2 * MIB // len(unit))
    seconds = _seconds_to_decompress(body, encoding, timeout=8)
    assert seconds < 2.0, f"{len(body)} bytes of {len(unit)}-byte frames took {seconds:.1f} s"
