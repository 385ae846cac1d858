"""``python -m bench.held``: what holding spans until their trace is due costs.

A trace is evaluated once no span of it has arrived for ``completion_wait``, so under load a
server holds every span of the last ``completion_wait`` (at 90,000 spans/s and 0.2 s, about
18,000 spans) and evaluates each trace when its records were made long ago and have left
the CPU's caches. The ceiling decodes a request and drops it at once. This runs the
benchmark's requests through the whole in-process ``Engine`` (decode, offer, tick, with the
server's Prometheus metrics, findings log and collector settings), stepping the clock so
that each trace falls due ``lag`` requests after its last span: the same work, holding more
or fewer spans. Reported per span, as the median over rounds (lags alternate within a
round), with the decode alone measured in the same rounds; the lags' ratios to the first
are what to read on a noisy machine.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from bench.plans import Settings
from bench.stages import evaluation_parts, request_bodies, server_engine, stage_config
from toolwatch.config import Config
from toolwatch.engine import Admission
from toolwatch.ingest.decode_requests import decode_protobuf
from toolwatch.ingest.decode_types import DecodeOptions
from toolwatch.model import ManualClock
from toolwatch.process_tuning import tune_gc

__all__ = ["Held", "hold", "main", "measure_held"]

_OPTIONS = DecodeOptions()


@dataclass(frozen=True, slots=True)
class Held:
    """One pass: CPU seconds, the spans decoded (every one admitted and, in the end,
    built), and the most spans held after a tick."""

    seconds: float
    spans: int
    most_held: int


def hold(config: Config, bodies: Sequence[bytes], lag: int) -> Held:
    """Offer ``bodies`` one by one, ticking after each, with the clock stepped so that a
    trace falls due ``lag`` requests after its last span; then let the rest fall due.
    Raises if a request is refused or a span never falls due: each is built once."""
    wait_ns = config.assembly.limits().completion_wait_ns
    step_ns = math.ceil(wait_ns / lag)
    clock = ManualClock()
    with open(os.devnull, "w", encoding="utf-8") as devnull:
        engine = server_engine(config, *evaluation_parts(config), clock, devnull)
        spans = most = 0
        began = time.process_time()
        for body in bodies:
            batch = decode_protobuf(body, _OPTIONS)
            spans += len(batch.spans)
            if engine.offer(batch, "grpc") is not Admission.ACCEPTED:
                raise RuntimeError(
                    f"the engine refused a request at {engine.buffer.buffered_spans:,} spans held"
                )
            clock.now_ns += step_ns
            engine.tick()
            most = max(most, engine.buffer.buffered_spans)
        clock.now_ns += wait_ns
        engine.tick()
        seconds = time.process_time() - began
        if engine.buffer.buffered_spans:
            raise RuntimeError(
                f"{engine.buffer.buffered_spans:,} of {spans:,} spans never fell due "
                "(a trace without its root waits for max_trace_age)"
            )
    return Held(seconds, spans, most)


def _decode_seconds(bodies: Sequence[bytes]) -> float:
    began = time.process_time()
    for body in bodies:
        decode_protobuf(body, _OPTIONS)
    return time.process_time() - began


def _check(lags: Sequence[int], rounds: int) -> None:
    if rounds < 1 or not lags or min(lags) < 1:
        raise ValueError(f"need rounds >= 1 and lags >= 1, got rounds {rounds}, lags {lags}")


def measure_held(
    config: Config, bodies: Sequence[bytes], lags: Sequence[int], rounds: int
) -> list[dict[str, float]]:
    """Per lag: the spans held (most, after a tick), and µs of CPU per span for the whole
    engine and for what follows decoding (median over ``rounds``)."""
    _check(lags, rounds)
    thresholds, frozen = gc.get_threshold(), gc.get_freeze_count()
    tune_gc()
    try:
        return _measure(config, bodies, lags, rounds)
    finally:  # the collector as it was (a test's process goes on)
        if not frozen:
            gc.unfreeze()
        gc.set_threshold(*thresholds)


def _measure(
    config: Config, bodies: Sequence[bytes], lags: Sequence[int], rounds: int
) -> list[dict[str, float]]:
    totals: dict[int, list[float]] = {lag: [] for lag in lags}
    held: dict[int, int] = {}
    decode: list[float] = []
    spans = 0
    for _ in range(rounds):
        decode.append(_decode_seconds(bodies))
        for lag in lags:
            result = hold(config, bodies, lag)
            totals[lag].append(result.seconds / result.spans * 1e6)
            held[lag], spans = result.most_held, result.spans
    decode_us = statistics.median(decode) / spans * 1e6
    rows = []
    for lag in lags:
        engine_us = statistics.median(totals[lag])
        rows.append(
            {
                "lag": lag,
                "most_held_spans": held[lag],
                "engine_us_per_span": engine_us,
                "after_decode_us_per_span": engine_us - decode_us,
                "decode_us_per_span": decode_us,
            }
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lags", default="1,100,300", help="requests before a trace is due")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--copies", type=int, default=40, help="renderings of the request pool")
    args = parser.parse_args(argv)
    try:
        lags = [int(x) for x in args.lags.split(",")]
        _check(lags, args.rounds)
    except ValueError as exc:
        parser.error(f"--lags {args.lags!r}, --rounds {args.rounds}: {exc}")
    settings = Settings()
    config = stage_config(settings.completion_wait)
    bodies = request_bodies(settings.templates().build(), args.copies)
    rows = measure_held(config, bodies, lags, args.rounds)
    first, first_lag = rows[0]["after_decode_us_per_span"], rows[0]["lag"]
    print(f"decode alone: {rows[0]['decode_us_per_span']:.2f} µs per span")
    for row in rows:
        after = row["after_decode_us_per_span"]
        print(
            f"lag {row['lag']:>4} requests, up to {row['most_held_spans']:>7,} spans held: "
            f"{row['engine_us_per_span']:5.2f} µs per span, {after:5.2f} after decoding "
            f"({after / first:.2f} times lag {first_lag:g}'s)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
