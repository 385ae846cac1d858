"""Differential fuzzing of the compiled OTLP scanner, census and sift against protobuf, for
memory safety.

``make fuzz`` (``tools/fuzz/run.sh``) builds ``toolwatch.ingest._wire`` with AddressSanitizer
and UndefinedBehaviorSanitizer into a scratch directory, preloads the sanitizers and runs this
module: it mutates real requests (the benchmark's GenAI runs and every captured
instrumentation fixture; bytes flipped, inserted, deleted, duplicated), dense hostile requests
(``tools.fuzz.dense``: runs of tiny, empty and corrupt spans, deep nesting, huge and overlong
lengths, every wire type), mutated or not, and random bytes. For each body and a choice of
``max_value_bytes`` it checks the compiled scanner's contract (``toolwatch.ingest.scan``): it
hands the body back, or protobuf accepts the body too and the reference scanner gives the
same scan; and the census's and the sift's (``tools.fuzz.dense.check_sifted``): the census
counts what ``protobuf_pieces.entries`` counts, and the sift's pieces decode to the batch a
whole decode gives. A memory error stops the process with the sanitizer's report; a
difference stops it with the body in hex.

    python -m tools.fuzz.scanner SO_PATH SECONDS [SEED [BODIES]]

(``make fuzz FUZZ_SECONDS=300 FUZZ_SEED=1 FUZZ_BODIES=0``.) BODIES (0, the default: no
limit) stops it after that many bodies, within SECONDS.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import itertools
import random
import sys
import time
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tools.fuzz.corpus import protobuf_seeds
from tools.fuzz.dense import check_sifted, dense_body
from toolwatch.ingest.decode_requests import scanner
from toolwatch.ingest.decode_types import DecodeOptions
from toolwatch.ingest.scan import Scan, Scanner, WireError

_LIMITS = (1, 7, 64, 65_536)  # max_value_bytes: cuts inside keys, values, arrays and none


def _load_extension(path: str) -> object:
    spec = importlib.util.spec_from_file_location("toolwatch.ingest._wire", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _mutate(body: bytes, rng: random.Random) -> bytes:
    out = bytearray(body)
    for _ in range(rng.randint(1, 8)):
        if not out:
            break
        at, roll = rng.randrange(len(out)), rng.random()
        if roll < 0.4:
            out[at] = rng.randrange(256)
        elif roll < 0.6:
            out[at:at] = rng.randbytes(rng.randint(1, 4))
        elif roll < 0.8:
            del out[at : at + rng.randint(1, 4)]
        else:  # a copy of another stretch: repeated and nested fields
            start = rng.randrange(len(out))
            out[at:at] = out[start : start + rng.randint(1, 32)]
    return bytes(out)


def _kept(body: bytes) -> str:
    """The body in hex, or, when long, the file it is written to (``.fuzz/``)."""
    if len(body) <= 2048:
        return body.hex()
    path = Path(".fuzz") / f"scanner-{hashlib.sha1(body).hexdigest()}"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(body)
    return f"{len(body):,} bytes in {path}"


def _spans_of(seeds: list[bytes]) -> list[bytes]:
    """Every span of the seeds, serialized alone: real spans to mix into dense bodies."""
    found: list[bytes] = []
    for seed in seeds:
        request = ExportTraceServiceRequest.FromString(seed)
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                found.extend(span.SerializeToString() for span in scope.spans)
    return found


def _body(seeds: list[bytes], spans: list[bytes], rng: random.Random) -> bytes:
    roll = rng.random()
    if roll < 0.5:
        return _mutate(rng.choice(seeds), rng)
    if roll < 0.95:
        body = dense_body(rng, spans)
        return _mutate(body, rng) if rng.random() < 0.5 else body
    return rng.randbytes(200)


def main(argv: list[str]) -> int:
    so_path, seconds, seed = argv[0], float(argv[1]), int(argv[2]) if len(argv) > 2 else 1
    most = int(argv[3]) if len(argv) > 3 else 0
    wire = _load_extension(so_path)
    rng = random.Random(seed)
    seeds = protobuf_seeds()
    spans = _spans_of(seeds)
    base = scanner(DecodeOptions(reference_keys=frozenset({"toolwatch.case_id"}))).plan
    pairs = []
    for limit, cap in itertools.product(_LIMITS, (2, 1024)):  # spans over the cap, and not
        plan = dataclasses.replace(base, max_value_bytes=limit, max_span_attributes=cap)
        fields = (plan.span_keys, plan.prefixes, plan.resource_keys, plan.event_names)
        compiled = wire.Plan(*fields, plan.event_keys, limit, cap)  # type: ignore[attr-defined]
        pairs.append((compiled, Scanner.for_plan(plan, "reference")))
    deadline, bodies, taken = time.monotonic() + seconds, 0, 0
    while time.monotonic() < deadline and (not most or bodies < most):
        body = _body(seeds, spans, rng)
        problem = check_sifted(wire, body)
        if problem is not None:
            raise SystemExit(f"census or sift: {problem}\nbody: {_kept(body)}")
        compiled, reference = rng.choice(pairs)
        fast = compiled.scan(body)
        try:
            expected: Scan | None = reference.scan_bytes(body)
        except WireError:
            expected = None
        bodies += 1
        if fast is None:
            continue
        taken += 1
        if expected is None:
            raise SystemExit(f"took a body protobuf rejects: {_kept(body)}")
        if repr(Scan(*fast)) != repr(expected):  # repr: NaN equals NaN
            raise SystemExit(f"scans differ: {_kept(body)}")
    print(
        f"{bodies:,} bodies ({taken:,} taken by the compiled scanner): same scans, census"
        " and sifted batches, no error"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
