"""The server's ticker: it sleeps until the next trace is due (at least ``tick_seconds``),
and while nothing is buffered it waits for spans instead of waking every tick.

These wait on the real event loop with bounded timeouts: what is checked is when the ticker
wakes, which is real time by design (assembly itself runs on the injected clock)."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from tests.integration import agents
from toolwatch.app import App, tick_delay
from toolwatch.config import Config
from toolwatch.ingest.decode_requests import decode_protobuf
from toolwatch.ingest.decode_types import DecodeOptions
from toolwatch.model import ManualClock


@pytest.mark.parametrize(
    ("due_in", "period", "longest", "expected"),
    [
        (0.5, 0.01, 1.0, 0.5),  # sleep until the trace is due...
        (0.002, 0.01, 1.0, 0.01),  # ...but ticks stay a period apart
        (-3.0, 0.01, 1.0, 0.01),  # overdue: at the next period
        (40.0, 0.01, 1.0, 1.0),  # never past the housekeeping bound
    ],
)
def test_tick_delay(due_in: float, period: float, longest: float, expected: float) -> None:
    now = 5_000_000_000
    assert tick_delay(now, now + int(due_in * 1e9), period, longest) == pytest.approx(expected)


def test_an_idle_ticker_waits_for_spans_then_for_their_deadline() -> None:
    clock = ManualClock()
    config = Config.model_validate(
        {
            "assembly": {"completion_wait_seconds": 0.2, "tick_seconds": 0.001},
            "output": {"findings": None},
        }
    )
    app = App(config, clock=clock)
    body = encode_spans(agents.record(agents.refund_run(), "genai")).SerializeToString()

    async def scenario() -> tuple[bool, bool, float]:
        waiting = asyncio.create_task(app._until_next_tick(0.001))
        # With ticks every millisecond this would be done long before; idle, it waits.
        done, _ = await asyncio.wait({waiting}, timeout=0.1)
        idle = not done
        app._offer(decode_protobuf(body, DecodeOptions()), "grpc")
        loop = asyncio.get_running_loop()
        offered = loop.time()
        await asyncio.wait_for(waiting, timeout=5)
        return idle, app.engine.buffer.next_due_ns() is not None, loop.time() - offered

    idle, buffered, slept = asyncio.run(scenario())
    assert idle
    assert buffered
    assert 0.19 <= slept < 1.0  # the run's completion wait (0.2 s on the injected clock)
