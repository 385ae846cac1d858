"""``bench.remembered`` measures what it says: a steady rate for a whole window, the ids of
the last window held at the end, each lookup answered right."""

from __future__ import annotations

from bench.remembered import fill, measure
from toolwatch.assembly.remembered import RememberedTraces


def test_the_fill_holds_the_last_window_of_ids() -> None:
    remembered = RememberedTraces(2 * 1_000_000_000, capacity=10**6)
    ids = [n.to_bytes(16, "big") for n in range(1, 601)]
    now, _ = fill(remembered, ids, rate=200)  # 2 per 10 ms: 3 s

    assert now == 3_000_000_000
    # Forgotten at the tick after their bucket's end (1/256 of 2 s) plus 2 s had passed.
    assert len(remembered) == 400 + 2
    assert ids[197] not in remembered and ids[198] in remembered


def test_a_measurement_reports_a_window_of_ids() -> None:
    costs = measure(rate=1_000, window_s=2)
    assert costs.held == 2_000 + 10  # 2 s and the bucket being forgotten (7.8 ms: a tick)
    assert 8 <= costs.bytes_per_id < 200
    assert min(costs.add_ns, costs.miss_ns, costs.hit_newest_ns, costs.hit_oldest_ns) > 0
