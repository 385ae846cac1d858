"""``bench.held`` holds what it says: with the clock stepped so that a trace falls due
``lag`` requests after its last span, the engine holds the spans of the ``lag - 1`` requests
before each tick, and every span is built in the end."""

from __future__ import annotations

import gc

import pytest

from bench.held import hold, measure_held
from bench.plans import Settings
from bench.stages import request_bodies, stage_config
from toolwatch.ingest.decode_requests import decode_protobuf
from toolwatch.ingest.decode_types import DecodeOptions


@pytest.fixture(scope="module")
def bodies() -> list[bytes]:
    return request_bodies(Settings().templates().build(), copies=1)[:12]


def _spans(body: bytes) -> int:
    return len(decode_protobuf(body, DecodeOptions()).spans)


@pytest.mark.parametrize("lag", [1, 2, 4])
def test_the_engine_holds_the_requests_of_the_lag_before_each_tick(
    bodies: list[bytes], lag: int
) -> None:
    config = stage_config(Settings().completion_wait)
    counts = [_spans(body) for body in bodies]
    windows = [sum(counts[max(0, i - lag + 2) : i + 1]) for i in range(len(counts))]

    held = hold(config, bodies, lag)

    assert held.most_held == max(windows)  # 0 at lag 1: each tick empties the buffer
    assert held.spans == sum(counts)  # and none left: ``hold`` raises otherwise


def test_a_measurement_reports_each_lag_with_what_it_held(bodies: list[bytes]) -> None:
    config = stage_config(Settings().completion_wait)

    thresholds, frozen = gc.get_threshold(), gc.get_freeze_count()

    rows = measure_held(config, bodies, [1, 3], rounds=1)

    assert (gc.get_threshold(), gc.get_freeze_count()) == (thresholds, frozen)  # as it was

    assert [row["lag"] for row in rows] == [1, 3]
    assert [row["most_held_spans"] for row in rows] == [0, hold(config, bodies, 3).most_held]
    assert all(row["engine_us_per_span"] > 0 and row["decode_us_per_span"] > 0 for row in rows)


@pytest.mark.parametrize(("lags", "rounds"), [([0], 1), ([], 1), ([1], 0)])
def test_a_measurement_refuses_lags_or_rounds_below_one(
    bodies: list[bytes], lags: list[int], rounds: int
) -> None:
    with pytest.raises(ValueError, match="need rounds >= 1 and lags >= 1"):
        measure_held(stage_config(Settings().completion_wait), bodies, lags, rounds)


def test_a_pass_refuses_to_report_spans_that_never_fell_due() -> None:
    orphans = request_bodies(Settings().templates(orphan=True).build(), copies=1)[:2]

    with pytest.raises(RuntimeError, match="spans never fell due"):
        hold(stage_config(Settings().completion_wait), orphans, 1)
