"""``python -m bench.remembered``: what the ids of evaluated traces cost the buffer.

The buffer remembers each emitted trace's id for ``assembly.late_span_window_seconds``
(``toolwatch.assembly.remembered``). This feeds a ``RememberedTraces`` a steady rate of
emitted traces for a whole window, in ticks of 10 ms as the server's ticker emits them,
forgetting the expired ids at each tick, then reports:

- the memory each id held takes (``tracemalloc``, in a separate pass: it slows the others);
- an addition, as the fill's time per id (forgetting the expired ids included);
- the longest tick of the fill (additions and forgetting): a pause of the event loop;
- a lookup of an id not remembered (every new trace's first span) and of one remembered (a
  late span), newest and oldest.

Times are the best of a few rounds, in nanoseconds; run it compiled (the default install)
and with ``TOOLWATCH_PURE_PYTHON=1`` for the source. In process, no server.
"""

from __future__ import annotations

import argparse
import gc
import os
import time
import tracemalloc
from collections.abc import Sequence
from dataclasses import dataclass

from toolwatch.assembly.remembered import RememberedTraces

__all__ = ["Costs", "fill", "main", "measure"]

_SECOND = 1_000_000_000
_TICK_NS = 10_000_000
_LOOKUPS = 50_000
_ROUNDS = 3


@dataclass(frozen=True, slots=True)
class Costs:
    """What ``measure`` found: ids held at the end, bytes per id, and nanoseconds."""

    held: int
    bytes_per_id: float
    add_ns: float
    worst_tick_ms: float
    miss_ns: float
    hit_newest_ns: float
    hit_oldest_ns: float


def _ids(count: int) -> list[bytes]:
    ids = [os.urandom(16) for _ in range(count)]
    for trace_id in ids:
        hash(trace_id)  # cached, as the buffer's dict lookups leave it
    return ids


def fill(
    remembered: RememberedTraces, ids: Sequence[bytes], rate: int, start_ns: int = 0
) -> tuple[int, float]:
    """Add ``ids`` at ``rate`` per second, a tick's share every 10 ms, forgetting the expired
    ids at each tick; return the clock at the end and the longest tick in seconds."""
    per_tick = max(1, rate * _TICK_NS // _SECOND)
    now, worst = start_ns, 0.0
    for first in range(0, len(ids), per_tick):
        now += _TICK_NS
        started = time.perf_counter()
        remembered.forget(now)
        for trace_id in ids[first : first + per_tick]:
            remembered.add(trace_id, now)
        worst = max(worst, time.perf_counter() - started)
    return now, worst


def _per_lookup(remembered: RememberedTraces, ids: Sequence[bytes], expected: bool) -> float:
    started = time.perf_counter()
    for trace_id in ids:
        if (trace_id in remembered) is not expected:
            raise RuntimeError(f"an id was {'not ' if expected else ''}remembered")
    return (time.perf_counter() - started) / len(ids) * 1e9


def _bytes_per_id(window_s: int, capacity: int, ids: Sequence[bytes], rate: int) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        remembered = RememberedTraces(window_s * _SECOND, capacity)
        fill(remembered, ids, rate)
        return (tracemalloc.get_traced_memory()[0] - before) / len(remembered)
    finally:
        tracemalloc.stop()


def measure(rate: int, window_s: int = 300, capacity: int = 10**8) -> Costs:
    """Costs at ``rate`` emitted traces per second, after a window and a tenth of one."""
    ids = _ids(rate * window_s * 11 // 10)
    misses = _ids(_LOOKUPS)
    # As the server's tune_gc: what is there now is out of the collector's reach, so that
    # collections do not walk the ids (a pause that would be the harness's, not the ids').
    frozen = gc.get_freeze_count()
    gc.collect()
    gc.freeze()
    try:
        return _measure(rate, window_s, capacity, ids, misses)
    finally:  # the collector as it was (a test's process goes on)
        if not frozen:
            gc.unfreeze()


def _measure(
    rate: int, window_s: int, capacity: int, ids: Sequence[bytes], misses: Sequence[bytes]
) -> Costs:
    add = worst = miss = newest = oldest = float("inf")
    held = 0
    for _ in range(_ROUNDS):
        remembered = RememberedTraces(window_s * _SECOND, capacity)
        started = time.perf_counter()
        _, tick = fill(remembered, ids, rate)
        add = min(add, (time.perf_counter() - started) / len(ids) * 1e9)
        worst = min(worst, tick)
        held = len(remembered)
        looked_up = min(_LOOKUPS, held)
        oldest_ids = ids[len(ids) - held : len(ids) - held + looked_up]
        miss = min(miss, _per_lookup(remembered, misses, expected=False))
        newest = min(newest, _per_lookup(remembered, ids[-looked_up:], expected=True))
        oldest = min(oldest, _per_lookup(remembered, oldest_ids, expected=True))
    per_id = _bytes_per_id(window_s, capacity, ids, rate)
    return Costs(held, per_id, add, worst * 1e3, miss, newest, oldest)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rate", type=int, action="append", help="traces per second (repeat; 1,000 and 5,000)"
    )
    parser.add_argument("--window", type=int, default=300, help="seconds (300)")
    args = parser.parse_args(argv)
    for rate in args.rate or [1_000, 5_000]:
        c = measure(rate, args.window)
        print(
            f"{rate:>6,}/s for {args.window} s: {c.held:>9,} ids, {c.bytes_per_id:5.1f} B each;"
            f" add {c.add_ns:4.0f} ns, longest tick {c.worst_tick_ms:5.1f} ms; lookup:"
            f" miss {c.miss_ns:4.0f} ns, hit newest {c.hit_newest_ns:4.0f} ns,"
            f" oldest {c.hit_oldest_ns:4.0f} ns"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
