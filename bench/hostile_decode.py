"""``python -m bench.hostile_decode``: CPU seconds to decode hostile binary OTLP bodies.

A body up to ``ingest.max_request_bytes`` (20 MiB by default; gzip makes one of repeated
bytes a few KiB on the wire) can come from any client that can connect, and decoding runs
one request at a time: a body that takes seconds delays every other export. This builds each
shape below at ``--mib`` MiB (2 by default), decodes it with ``decode_protobuf`` and prints
CPU seconds (``time.process_time``, the best of ``--rounds``: the machine may be shared),
the spans received and the rejections, once per path:

- ``compiled``: the C scanner, census and sift (``toolwatch.ingest._wire``, ``decoder: auto``);
- ``reference``: the reference scanner (``decoder: reference``), the census and sift in C;
- ``python``: the reference scanner, the census's Python twin and the Python pieces and
  salvage, as without the extension.

Whether the hot path (``toolwatch.compiled``, mypyc) runs compiled is printed too: in a
source tree not built by ``make``, or with ``TOOLWATCH_PURE_PYTHON=1``, it runs as Python.

Shapes (each entry repeated to the size; "corrupt" means protobuf refuses it):

- ``corrupt_3``: spans of 3 bytes, a 1-byte body with tag 0 (corrupt);
- ``spans_5``: spans of 5 bytes, a 1-byte trace id each (``invalid_trace_id``);
- ``spans_2``: empty spans, 2 bytes (OTLP's empty envelopes);
- ``wire_type_4``: spans of 4 bytes whose trace id is sent as a varint (protobuf keeps it as
  an unknown field; the C scanner hands such a span back to protobuf);
- ``resources_4``: ResourceSpans of 4 bytes, each an empty Resource;
- ``resources_2``: empty ResourceSpans;
- ``scopes_2``: one ResourceSpans of empty ScopeSpans;
- ``scopes_4``: one ResourceSpans of 4-byte ScopeSpans, each an empty scope;
- ``nested_6``: ResourceSpans of one ScopeSpans of one empty span, 6 bytes each;
- ``mixed``: valid spans of ids only (30 bytes) alternating with ``corrupt_3`` ones;
- ``corrupt_33``: spans of 33 bytes, a valid trace id and a name that is not UTF-8 (not
  dense: the whole body is salvaged);
- ``valid_30``: valid spans of ids only, 30 bytes (the cheapest spans that make records).
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from toolwatch import compiled_state
from toolwatch.ingest import protobuf_pieces, scan
from toolwatch.ingest.decode_requests import decode_protobuf, scanner
from toolwatch.ingest.decode_types import DecodedBatch, DecodeOptions

__all__ = ["SHAPES", "field", "main", "varint"]

_TRACE = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")
_MIB = 2**20


def varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def _repeat(entry: bytes, size: int) -> bytes:
    return entry * max(1, size // len(entry))


def _in_scope(spans: bytes) -> bytes:
    return field(1, field(2, spans))


def _valid_span(number: int) -> bytes:
    return field(1, _TRACE) + field(2, (number + 1).to_bytes(8, "big"))


def _spans_of(entry: bytes) -> Callable[[int], bytes]:
    return lambda size: _in_scope(_repeat(entry, size - 16))


def _mixed(size: int) -> bytes:
    corrupt = field(2, b"\x00")
    parts = []
    total = number = 0
    while total < size - 64:
        part = field(2, _valid_span(number)) + corrupt
        parts.append(part)
        total += len(part)
        number += 1
    return _in_scope(b"".join(parts))


def _valid(size: int) -> bytes:
    parts = []
    total = number = 0
    while total < size - 64:
        part = field(2, _valid_span(number))
        parts.append(part)
        total += len(part)
        number += 1
    return _in_scope(b"".join(parts))


#: name -> a builder of a body of about the given size.
SHAPES: dict[str, Callable[[int], bytes]] = {
    "corrupt_3": _spans_of(field(2, b"\x00")),
    "spans_5": _spans_of(field(2, field(1, b"\x01"))),
    "spans_2": _spans_of(field(2, b"")),
    "wire_type_4": _spans_of(field(2, b"\x08\x00")),
    "resources_4": lambda size: _repeat(field(1, field(1, b"")), size),
    "resources_2": lambda size: _repeat(field(1, b""), size),
    "scopes_2": lambda size: field(1, _repeat(field(2, b""), size - 8)),
    "scopes_4": lambda size: field(1, _repeat(field(2, field(1, b"")), size - 8)),
    "nested_6": lambda size: _repeat(field(1, field(2, field(2, b""))), size),
    "mixed": _mixed,
    "corrupt_33": _spans_of(field(2, field(1, _TRACE) + field(5, b"\xff" * 11))),
    "valid_30": _valid,
}


@contextmanager
def _python_path() -> Iterator[None]:
    """The census's Python twin and no sift, as without the extension (the scanner:
    ``reference``)."""
    saved = scan._CENSUS, scan._SIFT
    scan._CENSUS, scan._SIFT = protobuf_pieces.entries, None
    try:
        yield
    finally:
        scan._CENSUS, scan._SIFT = saved


def _time(body: bytes, options: DecodeOptions, rounds: int) -> tuple[float, DecodedBatch | str]:
    best = float("inf")
    outcome: DecodedBatch | str = ""
    for _ in range(rounds):
        gc.collect()
        started = time.process_time()
        try:
            outcome = decode_protobuf(body, options)
        except ValueError as exc:
            outcome = f"{type(exc).__name__}: {exc}"[:60]
        best = min(best, time.process_time() - started)
    return best, outcome


def _describe(outcome: DecodedBatch | str) -> str:
    if isinstance(outcome, str):
        return outcome
    rejected = ", ".join(f"{k} {v}" for k, v in sorted(outcome.rejected.items()))
    return f"received {outcome.received}, kept {len(outcome.spans)}; {rejected}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hostile_decode", description=__doc__)
    parser.add_argument("--mib", type=float, default=2.0, help="body size (MiB)")
    parser.add_argument("--rounds", type=int, default=1, help="best of this many")
    parser.add_argument("--shape", action="append", default=[], help="only this shape")
    paths = ["compiled", "reference", "python"]
    parser.add_argument("--path", action="append", choices=paths, default=[])
    args = parser.parse_args(argv)
    size = int(args.mib * _MIB)
    hot_path = compiled_state.state().describe()
    print(f"hot path: {hot_path}; scanner: {scan.COMPILED_UNAVAILABLE or 'C'}")
    for path in args.path or paths:
        options = DecodeOptions(decoder="auto" if path == "compiled" else "reference")
        if path == "compiled" and not scanner(options).compiled:
            print(f"{path}: unavailable ({scan.COMPILED_UNAVAILABLE})")
            continue
        for name in args.shape or SHAPES:
            body = SHAPES[name](size)
            if path == "python":
                with _python_path():
                    seconds, outcome = _time(body, options, args.rounds)
            else:
                seconds, outcome = _time(body, options, args.rounds)
            mib = len(body) / _MIB
            print(f"{path:<9} {name:<12} {seconds:7.3f} s  {mib:.2f} MiB  {_describe(outcome)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
