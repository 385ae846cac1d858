"""The fuzzers' seeds: real requests, as the receivers get them.

The benchmark's GenAI agent runs and every captured instrumentation fixture
(``tests/fixtures/otlp``), as protobuf bodies; ``write_pipeline_seeds`` also keeps each
fixture's OTLP/JSON text, with the one-byte prefix ``tools.fuzz.pipeline`` reads the
encoding from.

    python -m tools.fuzz.corpus DIR     (the pipeline fuzzer's seeds into DIR)
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from bench.traces import build_templates
from toolwatch.ingest.otlp_json import parse_otlp_json

__all__ = ["JSON", "PROTOBUF", "fixture_texts", "protobuf_seeds", "write_pipeline_seeds"]

FIXTURES = Path(__file__).parents[2] / "tests" / "fixtures" / "otlp"
PROTOBUF, JSON = b"\x00", b"\x01"  # the pipeline fuzzer's first byte: even protobuf, odd JSON


def fixture_texts() -> list[bytes]:
    """Every captured fixture's OTLP/JSON text."""
    paths = sorted(FIXTURES.glob("*.json"))
    return [p.read_bytes() for p in paths if not p.name.endswith(".expected.json")]


def protobuf_seeds() -> list[bytes]:
    """Benchmark requests and fixtures, as binary protobuf bodies."""
    bodies = [t.render([bytes(range(1, 17))] * t.runs) for t in build_templates(4, 4, 0.2)]
    bodies.extend(parse_otlp_json(text).SerializeToString() for text in fixture_texts())
    return bodies


def write_pipeline_seeds(directory: Path) -> int:
    """Write the pipeline fuzzer's seeds into ``directory`` (named by content); how many."""
    directory.mkdir(parents=True, exist_ok=True)
    seeds = [PROTOBUF + body for body in protobuf_seeds()]
    seeds.extend(JSON + text for text in fixture_texts())
    for seed in seeds:
        (directory / hashlib.sha1(seed).hexdigest()).write_bytes(seed)
    return len(seeds)


if __name__ == "__main__":
    print(f"{write_pipeline_seeds(Path(sys.argv[1]))} seeds in {sys.argv[1]}")
