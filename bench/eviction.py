"""``python -m bench.eviction``: what one eviction costs when the buffer is full of traces.

Under ``assembly.overflow: evict_oldest`` every new trace at ``max_traces`` evicts the oldest
live one (backpressure never evicts: it refuses, or drops what can never fit). This fills a
``TraceBuffer`` with ``max_traces`` one-span traces, lets most of them complete (so the
oldest live trace sits behind many emitted ones, as in a server that has been running),
then times adding new one-span traces, each of which evicts one. Reported in microseconds
per added trace, the best of a few rounds; run it on two revisions to compare (in process,
no server: the eviction path alone).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.metrics import NoopMetrics
from toolwatch.model import ManualClock, SpanRecord, SpanRole

__all__ = ["full_buffer", "main", "microseconds_per_eviction"]

_SECOND = 1_000_000_000
_ADDED = 20_000
_ROUNDS = 3


def _span(number: int, start_ns: int) -> SpanRecord:
    return SpanRecord(
        trace_id=number.to_bytes(16, "big"),
        span_id=(number % 2**63 + 1).to_bytes(8, "big"),
        parent_span_id=None,
        name="invoke_agent",
        kind=1,
        start_ns=start_ns,
        end_ns=start_ns + 1,
        status_code=0,
        service="bench",
        role=SpanRole.AGENT,
        size_bytes=100,
    )


def full_buffer(max_traces: int, emitted_fraction: float = 0.9) -> tuple[TraceBuffer, int]:
    """A buffer holding ``max_traces`` one-span traces, behind ``emitted_fraction`` of that
    many which completed and left; and the number of the next new trace."""
    clock = ManualClock()
    limits = AssemblyLimits(
        completion_wait_ns=_SECOND,
        max_trace_age_ns=3600 * _SECOND,
        max_traces=max_traces,
        max_buffered_spans=10 * max_traces,
        overflow="evict_oldest",
    )
    buffer = TraceBuffer(limits, clock, NoopMetrics())
    number = 1
    for _ in range(int(max_traces * emitted_fraction)):
        buffer.add([_span(number, clock())])
        number += 1
    clock.advance(2.0)
    buffer.poll()  # root spans: complete once the wait is over
    while buffer.buffered_traces < max_traces:
        buffer.add([_span(number, clock())])
        number += 1
    return buffer, number


def microseconds_per_eviction(
    max_traces: int, emitted_fraction: float = 0.9, added: int = _ADDED
) -> float:
    """Best-of-rounds time to add one new trace to a full ``full_buffer``."""
    buffer, number = full_buffer(max_traces, emitted_fraction)
    best = float("inf")
    for _ in range(_ROUNDS):
        batches = [[_span(number + i, 0)] for i in range(added)]
        number += added
        started = time.perf_counter()
        for batch in batches:
            buffer.add(batch)
        best = min(best, time.perf_counter() - started)
    if buffer.buffered_traces != max_traces:
        raise RuntimeError(f"the buffer holds {buffer.buffered_traces} traces, not {max_traces}")
    return best / added * 1e6


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--max-traces", type=int, action="append", help="buffer size (repeat; 10,000 and 100,000)"
    )
    args = parser.parse_args(argv)
    for max_traces in args.max_traces or [10_000, 100_000]:
        cost = microseconds_per_eviction(max_traces)
        print(f"max_traces {max_traces:>9,}: {cost:6.2f} µs per trace added (one eviction each)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
