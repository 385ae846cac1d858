"""OTLP/HTTP bodies decompressed by their Content-Encoding (``http_bodies.decompress``): every
coding an OpenTelemetry Collector sends that toolwatch accepts, the cap counted after
decompression with no more than the cap ever held, and every broken stream refused by name."""

from __future__ import annotations

import gzip
import sys
import tracemalloc
import zlib
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolwatch.ingest.http_answers import RejectError
from toolwatch.ingest.http_bodies import ZSTD_MAX_WINDOW_BYTES, decompress

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


def zstd_rle_frame(blocks: int, byte: int = 0, window_log: int = 23) -> bytes:
    """A zstd frame (RFC 8878 §3.1.1) of ``blocks`` RLE blocks of 128 KiB each: four bytes
    a block, the densest zstd there is (32,768 to 1). No content size, so that nothing but
    decoding it tells how large it is."""
    header = b"\x28\xb5\x2f\xfd" + bytes([0x00, (window_log - 10) << 3])
    block = 128 * 1024
    rle = ((block << 3) | (1 << 1)).to_bytes(3, "little") + bytes([byte])
    last = ((block << 3) | (1 << 1) | 1).to_bytes(3, "little") + bytes([byte])
    return header + rle * (blocks - 1) + last


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
