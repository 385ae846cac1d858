"""``python -m bench.idle``: the CPU an idle ``toolwatch serve`` uses.

A sidecar next to a quiet agent is idle most of the time, so what it burns doing nothing is
part of its cost. This starts the benchmark's server configuration, lets it settle, and
reads its CPU time (``/proc/<pid>/stat``) over a window in which nothing is sent. Every
wake-up of the event loop costs CPU even when there is nothing to do: about 250 µs on a
shared VM, so a ticker waking every 10 ms would use 2.5% of a core.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.plans import Settings, free_ports
from bench.server import ServerProcess, bench_config

__all__ = ["idle_cpu", "main"]

_SETTLE_SECONDS = 2.0


def idle_cpu(workdir: Path, seconds: float, tick: float) -> float:
    """The server's CPU utilization (1.0 = one core) over ``seconds`` with no load."""
    ports = free_ports()
    config = bench_config(
        ports,
        workdir / "findings.jsonl",
        completion_wait=Settings().completion_wait,
        tick=tick,
    )
    server = ServerProcess.toolwatch(config, workdir, "idle")
    try:
        server.wait_for_port(ports["metrics"])
        time.sleep(_SETTLE_SECONDS)
        cpu, started = server.cpu_seconds(), time.monotonic()
        time.sleep(seconds)
        return (server.cpu_seconds() - cpu) / (time.monotonic() - started)
    finally:
        server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="idle window")
    parser.add_argument("--tick", type=float, default=Settings().tick, help="tick_seconds")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="toolwatch-idle-") as tmp:
        utilization = idle_cpu(Path(tmp), args.seconds, args.tick)
    print(f"idle server, tick_seconds {args.tick:g}: {utilization:.2%} of a core")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
