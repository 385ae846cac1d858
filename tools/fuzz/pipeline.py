"""Coverage-guided fuzzing (atheris, libFuzzer) of the whole pipeline, one request per input.

Each input is an OTLP request body, read as protobuf or (first byte odd) as OTLP/JSON, and
goes where a receiver would send it: ``decode_protobuf`` / ``decode_otlp_json``, then an
``Engine`` with the example configuration's policy, golden cases and shadow pairs, the
Prometheus metrics and the findings log, run to the end (``drain``).
libFuzzer mutates the seeds (the benchmark's GenAI runs and every captured instrumentation
fixture) guided by the Python lines each input reaches: recognizers, timeline, evaluators.

The contract checked on every input, any violation stopping the run with the input saved by
libFuzzer (``crash-<sha1>``):

- a body is decoded, or refused with ``DecodeError`` (a clear error, never another one);
- after that nothing raises: no isolated failure of the engine or of an evaluator is
  counted (``evaluator_failed``), since each is a bug met on some trace;
- every span is accounted for: received = built + rejected + dropped, by reason.

    python -m tools.fuzz.pipeline [libFuzzer flags] CORPUS_DIR    (make fuzz-pipeline)
"""

from __future__ import annotations

import io
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import atheris

with atheris.instrument_imports(include=["toolwatch"]):
    from prometheus_client import CollectorRegistry

    from toolwatch import compiled_state
    from toolwatch.config import load_config
    from toolwatch.engine import DiscardToolTraces, Engine, EngineParts
    from toolwatch.engine_setup import build_references
    from toolwatch.evaluation.pipeline import EvaluationPipeline
    from toolwatch.evaluation.settings import EvaluationSettings
    from toolwatch.ingest.decode_requests import decode_protobuf
    from toolwatch.ingest.decode_types import DecodedBatch, DecodeError, DecodeOptions
    from toolwatch.ingest.otlp_json import decode_otlp_json
    from toolwatch.model import ManualClock
    from toolwatch.references.shadow import ShadowJoiner
    from toolwatch.sinks.findings import FanOutSink, JsonLinesFindingSink, Redaction
    from toolwatch.sinks.prometheus import PrometheusMetrics

_ROOT = Path(__file__).resolve().parents[2]
_CONFIG = load_config(_ROOT / "examples" / "toolwatch.yaml")
_GOLDEN, _NORMALIZE = build_references(_CONFIG)
_OPTIONS = DecodeOptions(
    reference_keys=frozenset(
        {
            _CONFIG.golden.case_id_attribute,
            _CONFIG.shadow.pair_key_attribute,
            _CONFIG.shadow.role_attribute,
        }
    ),
    max_value_bytes=_CONFIG.ingest.max_value_bytes,
)
_EVALUATION = EvaluationPipeline(
    EvaluationSettings(policy=_CONFIG.policy, evaluators=_CONFIG.evaluators)
)


class _Watched:
    """The server's metrics, plus what the contract checks: span accounting and failures.
    It wraps them rather than subclassing: the compiled PrometheusMetrics cannot be."""

    def __init__(self) -> None:
        self._metrics = PrometheusMetrics(CollectorRegistry(), agents=_CONFIG.metrics.agents)
        self.ended: Counter[str] = Counter()
        self.failures: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._metrics, name)

    def spans_rejected(self, n: int, reason: str) -> None:
        self._metrics.spans_rejected(n, reason)
        self.ended[f"rejected:{reason}"] += n

    def spans_dropped(self, n: int, reason: str) -> None:
        self._metrics.spans_dropped(n, reason)
        self.ended[f"dropped:{reason}"] += n

    def spans_built(self, n: int) -> None:
        self._metrics.spans_built(n)
        self.ended["built"] += n

    def evaluator_failed(self, evaluator: str) -> None:
        self._metrics.evaluator_failed(evaluator)
        self.failures.append(evaluator)


def _decode(data: bytes) -> DecodedBatch | None:
    try:
        if data[:1] and data[0] & 1:  # tools.fuzz.corpus: an odd first byte is OTLP/JSON
            return decode_otlp_json(data[1:], _OPTIONS)
        return decode_protobuf(data[1:], _OPTIONS)
    except DecodeError:
        return None  # a clear refusal: the contract for a body that is not a request


def test_one_input(data: bytes) -> None:
    batch = _decode(data)
    if batch is None:
        return
    clock = ManualClock()
    metrics = _Watched()
    parts = EngineParts(
        limits=_CONFIG.assembly.limits(),
        evaluation=_EVALUATION,
        normalize=_NORMALIZE,
        findings=FanOutSink([JsonLinesFindingSink(io.StringIO(), Redaction())]),
        tooltraces=DiscardToolTraces(),
        golden=_GOLDEN,
        shadow=ShadowJoiner(_CONFIG.shadow, clock, metrics),
    )
    engine = Engine(parts, clock, metrics)
    engine.offer(batch, "grpc")
    clock.advance(_CONFIG.assembly.completion_wait_seconds + 1)
    engine.tick()
    engine.drain()
    if metrics.failures:
        raise AssertionError(f"isolated failures (a bug on this input): {metrics.failures}")
    ended = sum(metrics.ended.values())
    if ended != batch.received:
        raise AssertionError(f"{batch.received} spans received, {ended} ended: {metrics.ended}")


def main(argv: list[str]) -> None:
    print(f"toolwatch hot path: {compiled_state.state().describe()}", file=sys.stderr, flush=True)
    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
