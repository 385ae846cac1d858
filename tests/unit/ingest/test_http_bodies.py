"""OTLP/HTTP bodies decompressed by their Content-Encoding (``http_bodies.decompress``): every
coding an OpenTelemetry Collector sends that toolwatch accepts, the cap counted after
decompression with no more than the cap ever held, and every broken stream refused by name."""

from __future__ import annotations

import gzip
import random
import subprocess
import sys
import textwrap
import tracemalloc
import zlib
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.compressed import (
    EMPTY_GZIP_MEMBER,
    EMPTY_ZSTD_FRAME,
    SKIPPABLE_FRAME,
    zstd_rle_frame,
)
from toolwatch.ingest.compressed_streams import ZSTD_MAX_WINDOW_BYTES
from toolwatch.ingest.http_answers import RejectError
from toolwatch.ingest.http_bodies import MAX_PARTS, decompress

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

MIB = 2**20
_Level = zstd.CompressionParameter

COMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    "deflate": zlib.compress,
    "zlib": zlib.compress,  # Go's compress/zlib, the Collector's zlib and deflate alike
    "zstd": zstd.compress,
}


def refused(raw: bytes, encoding: str, max_bytes: int = MIB) -> RejectError:
    with pytest.raises(RejectError) as raised:
        decompress(raw, encoding, max_bytes)
    return raised.value


# --- what is accepted -------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", sorted(COMPRESSORS))
def test_each_coding_gives_back_the_body(encoding: str) -> None:
    body = b"spans " * 10_000
    assert decompress(COMPRESSORS[encoding](body), encoding, MIB) == body


def test_a_body_of_several_zstd_frames_is_read_to_the_end() -> None:
    # RFC 8878 §3: zstd data is one or more frames; skippable frames carry nothing.
    skippable = b"\x50\x2a\x4d\x18" + (4).to_bytes(4, "little") + b"meta"
    body = skippable + zstd.compress(b"first ") + zstd.compress(b"second")
    assert decompress(body, "zstd", MIB) == b"first second"


@pytest.mark.parametrize(
    "options",
    [
        {_Level.content_size_flag: 0},  # a streaming encoder's frame: size unknown
        {_Level.checksum_flag: 1},  # the Collector's encoder writes the checksum
        {_Level.compression_level: 19, _Level.window_log: 23},  # the largest window allowed
    ],
)
def test_zstd_frames_as_encoders_write_them_are_accepted(options: dict[int, int]) -> None:
    body = bytes(range(256)) * 20_000  # 5 MB: several blocks
    assert decompress(zstd.compress(body, options=options), "zstd", 8 * MIB) == body


def test_a_zstd_body_exactly_at_the_cap_is_accepted() -> None:
    assert decompress(zstd_rle_frame(8, byte=7), "zstd", MIB) == b"\x07" * MIB


# --- what is refused --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (zstd.compress(b"x" * 1000)[:-3], "body is not valid zstd: the stream is truncated"),
        (b"", "body is not valid zstd: it is empty"),
        (b"not zstd", "body is not valid zstd: Unable to decompress Zstandard data: Unknown"),
        (
            zstd.compress(b"x") + b"junk",
            "body is not valid zstd (frame 2): Unable to decompress Zstandard data: Unknown",
        ),
        (
            zstd.compress(b"x" * 1000, options={_Level.checksum_flag: 1})[:-1] + b"\x00",
            "body is not valid zstd: Unable to decompress Zstandard data: Restored data doesn't",
        ),
        (
            zstd_rle_frame(1, window_log=24),
            f"body is not valid zstd: a frame's window is over {ZSTD_MAX_WINDOW_BYTES} bytes, "
            "RFC 9659's limit",
        ),
        (zlib.compress(b"x" * 100)[:-6], "body is not valid zlib: the stream is truncated"),
        (zlib.compress(b"x") + b"more", "body is not valid zlib: data after the stream"),
    ],
)
def test_a_broken_stream_is_400_naming_the_coding_and_why(body: bytes, said: str) -> None:
    encoding = "zlib" if "zlib" in said else "zstd"
    error = refused(body, encoding)
    assert (error.status, error.field) == (400, "body")
    assert str(error).startswith(said)


def test_zlib_is_a_zlib_stream_not_bare_deflate() -> None:
    # The Collector's "zlib" is Go's compress/zlib (RFC 1950); "deflate" also takes bare
    # RFC 1951 data, which some clients send, but "zlib" names the header too.
    bare = zlib.compress(b"x" * 100, wbits=-zlib.MAX_WBITS)
    assert decompress(bare, "deflate", MIB) == b"x" * 100
    error = refused(bare, "zlib")
    assert (error.status, str(error)) == (
        400,
        "body is not valid zlib: Error -3 while decompressing data: incorrect header check",
    )


@pytest.mark.parametrize("encoding", ["snappy", "x-snappy-framed", "lz4", "br"])
def test_codings_toolwatch_cannot_read_are_415_naming_those_it_can(encoding: str) -> None:
    error = refused(b"whatever", encoding)
    assert (error.status, error.field) == (415, "Content-Encoding")
    assert str(error) == (
        f"content encoding {encoding!r} is not one of gzip, deflate, zlib, zstd, identity"
    )


def gzip_of_zeros(size: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [compressor.compress(bytes(MIB)) for _ in range(size // MIB)]
    return b"".join([*parts, compressor.flush()])


@pytest.mark.parametrize(
    ("encoding", "bomb"),
    [
        ("zstd", zstd_rle_frame(16_384)),  # 64 KiB that decompress to 2 GiB
        ("gzip", gzip_of_zeros(64 * MIB)),  # 64 KiB that decompress to 64 MiB
    ],
)
def test_a_bomb_is_413_holding_no_more_than_the_cap_and_a_chunk(encoding: str, bomb: bytes) -> None:
    assert len(bomb) < 65 * 1024
    tracemalloc.start()
    try:
        error = refused(bomb, encoding, MIB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (error.status, str(error)) == (413, f"decompressed body exceeds {MIB} bytes")
    # The decompressed bytes Python holds: the cap and a byte, and the last chunk read
    # (64 KiB, which CPython's output buffer holds twice while it joins its blocks). The
    # zstd decoder's window, at most ZSTD_MAX_WINDOW_BYTES, is C memory: the server's test
    # (tests/integration/test_otlp_http_encodings.py) measures it with the process's RSS.
    assert MIB < peak < MIB + 256 * 1024


def test_a_zstd_bomb_after_a_first_frame_is_413_counting_both() -> None:
    body = zstd_rle_frame(4) + zstd_rle_frame(5)  # 512 KiB, then 640 KiB
    error = refused(body, "zstd", MIB)
    assert (error.status, str(error)) == (413, f"decompressed body exceeds {MIB} bytes")


def peak_bytes(raw: bytes, encoding: str, max_bytes: int) -> tuple[int, int]:
    """The answer's status (200 when the body is read) and the most Python held meanwhile."""
    tracemalloc.start()
    try:
        try:
            decompress(raw, encoding, max_bytes)
            status = 200
        except RejectError as error:
            status = error.status
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return status, peak


def test_a_zstd_bomb_followed_by_more_body_holds_no_copy_of_the_body() -> None:
    """The docs promise no more than the cap and 64 KiB (the decoder's window, C memory, is
    not counted here), whatever follows the bomb: here a skippable frame of 8 MiB.
    Was: the decompressor was given the whole rest of the body and, stopped by
    ``max_length``, copied all it left unread: 9.1 MiB for a 1 MiB cap. Now: it is given a
    64 KiB slice at a time, as zlib is: 1.1 MiB."""
    padding = SKIPPABLE_FRAME[:4] + (8 * MIB).to_bytes(4, "little") + bytes(8 * MIB)
    body = zstd_rle_frame(400) + padding  # 50 MiB of zeros, then 8 MiB skipped

    status, peak = peak_bytes(body, "zstd", MIB)

    assert status == 413
    assert MIB < peak < MIB + 256 * 1024, f"peak {peak / MIB:.2f} MiB for a 1 MiB cap"


def test_a_large_zstd_body_holds_no_more_than_gzip_does() -> None:
    """16 MiB that do not compress (random ids, already-compressed values): the output
    twice (the chunks, then their join), as gzip's. Was: the decompressor copied the whole
    body into its input buffer at the first read: 47.9 MiB. Now: 32.0 MiB."""
    data = random.Random(7).randbytes(16 * MIB)

    status, peak = peak_bytes(zstd.compress(data, level=1), "zstd", 20 * MIB)

    assert status == 200
    assert 2 * len(data) < peak < 2 * len(data) + MIB, f"peak {peak / MIB:.1f} MiB"


# --- many parts -------------------------------------------------------------------------------

#: Run in a child process, so that a decompression that takes minutes is cut off at the
#: test's timeout instead of running on, taking the CPU, after the test has failed.
_TIMED = textwrap.dedent(
    """
    import sys, time
    from toolwatch.ingest.http_answers import RejectError
    from toolwatch.ingest.http_bodies import decompress
    body, encoding = sys.stdin.buffer.read(), sys.argv[1]
    started = time.perf_counter()
    try:
        answer = f"200 {len(decompress(body, encoding, 20 * 2**20))} bytes"
    except RejectError as error:
        answer = f"{error.status} {error}"
    print(time.perf_counter() - started, answer)
    """
)


def timed_decompress(body: bytes, encoding: str, timeout: float = 20) -> tuple[float, str]:
    """How long ``decompress`` took (20 MiB cap), in seconds (infinite past ``timeout``,
    the child's start-up included), and its answer: status and message, or the length."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _TIMED, encoding],
            input=body,
            capture_output=True,
            timeout=timeout,
            check=True,
        )
    except subprocess.TimeoutExpired:
        return float("inf"), "(timed out)"
    seconds, answer = done.stdout.decode().rstrip("\n").split(" ", 1)
    return float(seconds), answer


@pytest.mark.parametrize(
    ("encoding", "part", "name"),
    [
        ("zstd", SKIPPABLE_FRAME, "zstd frames"),
        ("zstd", EMPTY_ZSTD_FRAME, "zstd frames"),
        ("gzip", EMPTY_GZIP_MEMBER, "gzip members"),
    ],
    ids=["zstd-skippable-frames", "zstd-empty-frames", "gzip-empty-members"],
)
def test_20_mib_of_empty_parts_is_refused_in_milliseconds(
    encoding: str, part: bytes, name: str
) -> None:
    """A part that holds nothing never moves the cap: only their number bounds the work.
    Was: every part was read, each given a copy of the rest of the body: 2 MiB of them took
    16 to 33 s, 20 MiB about 40 min, in the decode turn the gRPC receiver shares. Now:
    refused 413 past ``MAX_PARTS``, in about 30 ms."""
    body = part * (20 * MIB // len(part))

    seconds, answer = timed_decompress(body, encoding)

    assert answer == f"413 body holds more than {MAX_PARTS} {name}"
    assert seconds < 1.0


@pytest.mark.parametrize("encoding", ["zstd", "gzip"])
def test_the_parts_before_a_large_one_are_read_without_copying_the_rest(encoding: str) -> None:
    """``MAX_PARTS`` - 1 small parts, then 16 MiB that do not compress: within the limit,
    so read whole. Was: each part was given a copy of the rest of the body (16 MiB, 999
    times): seconds. Now: a slice at a time, where each part starts: milliseconds."""
    data = random.Random(7).randbytes(16 * MIB)
    last = zstd.compress(data, level=1) if encoding == "zstd" else gzip.compress(data, 1)
    body = COMPRESSORS[encoding](b"x") * (MAX_PARTS - 1) + last

    seconds, answer = timed_decompress(body, encoding)

    assert answer == f"200 {MAX_PARTS - 1 + 16 * MIB} bytes"
    assert seconds < 1.0


@pytest.mark.parametrize(("encoding", "name"), [("zstd", "frames"), ("gzip", "members")])
def test_max_parts_are_read_and_one_more_is_413(encoding: str, name: str) -> None:
    """Was: any number of parts was read. Now: ``MAX_PARTS`` (1000: a sender writes one),
    each one's output kept in order; one more is refused, the message naming the limit."""
    compress = COMPRESSORS[encoding]
    texts = [b"%d," % n for n in range(MAX_PARTS)]
    body = b"".join(compress(text) for text in texts)

    assert decompress(body, encoding, MIB) == b"".join(texts)
    error = refused(body + compress(b"one more"), encoding)
    assert (error.status, str(error)) == (
        413,
        f"body holds more than {MAX_PARTS} {encoding} {name}",
    )


# --- properties -------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(sorted(COMPRESSORS)),
    st.lists(st.binary(max_size=3000), min_size=1, max_size=4),
    st.integers(min_value=0, max_value=6000),
)
def test_any_body_decompresses_to_itself_or_is_413_past_the_cap(
    encoding: str, pieces: list[bytes], cap: int
) -> None:
    """gzip members and zstd frames may follow one another; deflate and zlib are one stream."""
    compress = COMPRESSORS[encoding]
    if encoding in ("gzip", "zstd"):
        raw = b"".join(compress(piece) for piece in pieces)
    else:
        raw = compress(b"".join(pieces))
    body = b"".join(pieces)
    if len(body) <= cap:
        assert decompress(raw, encoding, cap) == body
    else:
        error = refused(raw, encoding, cap)
        assert (error.status, str(error)) == (413, f"decompressed body exceeds {cap} bytes")


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=1, max_size=2000), st.data())
def test_any_cut_or_flipped_zstd_body_is_decoded_or_refused_with_a_reason(
    payload: bytes, data: st.DataObject
) -> None:
    """Never another exception, never more than the cap: 400 with a message, or 413."""
    raw = bytearray(zstd.compress(payload, options={_Level.checksum_flag: 1}))
    if data.draw(st.booleans(), label="cut"):
        raw = raw[: data.draw(st.integers(0, len(raw) - 1), label="cut at")]
    else:
        at = data.draw(st.integers(0, len(raw) - 1), label="flipped at")
        raw[at] ^= data.draw(st.integers(1, 255), label="by")
    try:
        body = decompress(bytes(raw), "zstd", 4096)
    except RejectError as error:
        assert error.status in (400, 413)
        assert str(error).startswith(("body is not valid zstd", "decompressed body exceeds"))
    else:
        assert len(body) <= 4096
