"""``python -m bench.compare DIR [DIR ...]``: toolwatch builds side by side, as ratios.

On a shared machine two runs of ``make bench`` an hour apart can differ by more than a change
does. This runs ``toolwatch serve`` from each checkout (``DIR/.venv/bin/python``; the first is
the baseline) at the same time, pinned to the server core, and gives each the same saturating
load in turn, round after round. Each round's rate is spans built per second of server CPU;
the result is the median over rounds of each build's rate over the baseline's in that round.

``make bench-compare BASE=<git rev>`` checks the revision out next to this one, installs it
and compares it with this checkout.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from bench.loadgen import ClientPool
from bench.plans import Settings, client_cpus, free_ports, plans, sleep_until
from bench.server import ServerProcess, bench_config, scrape

__all__ = ["main"]

_BUILT = "toolwatch_spans_built_total"
_PAUSE = 1.5  # seconds between windows, for the previous server to drain


@dataclass
class _Build:
    checkout: Path
    server: ServerProcess
    metrics_port: int
    grpc_port: int
    rates: list[float]

    @property
    def name(self) -> str:
        return self.checkout.name


def _start(checkout: Path, workdir: Path, index: int, settings: Settings) -> _Build:
    ports = free_ports()
    config = bench_config(
        ports, workdir / f"findings-{index}.jsonl", completion_wait=settings.completion_wait
    )
    path = workdir / f"build-{index}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    python = checkout / ".venv" / "bin" / "python"
    command = [str(python), "-m", "toolwatch.cli", "serve", "--config", str(path)]
    server = ServerProcess(command, workdir, f"build-{index}")
    return _Build(checkout, server, ports["metrics"], ports["grpc"], [])


def _window(build: _Build, pool: ClientPool, settings: Settings, base: int) -> float:
    """Spans built per second of server CPU under one saturating window."""
    target = f"127.0.0.1:{build.grpc_port}"
    fleet = pool.start(plans(settings, target, "closed", base, settings.warmup + settings.window))
    start = fleet.start_at + settings.warmup
    sleep_until(start)
    cpu, built = build.server.cpu_seconds(), scrape(build.metrics_port)[_BUILT]
    sleep_until(start + settings.window)
    cpu = build.server.cpu_seconds() - cpu
    built = scrape(build.metrics_port)[_BUILT] - built
    fleet.results()
    return built / cpu if cpu else 0.0


def compare(checkouts: Sequence[Path], settings: Settings, workdir: Path) -> list[_Build]:
    pool = ClientPool(settings.clients, settings.templates())
    builds: list[_Build] = []
    try:
        for index, checkout in enumerate(checkouts):  # one listening before the next picks ports
            builds.append(_start(checkout, workdir, index, settings))
            builds[-1].server.wait_for_port(builds[-1].metrics_port)
        base = 0
        for number in range(settings.rounds):
            for build in builds:
                build.rates.append(_window(build, pool, settings, base))
                base += 10  # fresh client numbers: fresh trace ids
                print(f"round {number + 1}: {build.name:<24} {build.rates[-1]:9,.0f} spans/CPU-s")
                time.sleep(_PAUSE)
    finally:
        for build in builds:
            build.server.stop()
        pool.close()
    return builds


def _report(builds: Sequence[_Build]) -> str:
    baseline = builds[0]
    lines = [f"{'build':<24} {'median spans/CPU-s':>20} {'ratio to ' + baseline.name:>28}"]
    for build in builds:
        ratios = [b / a for a, b in zip(baseline.rates, build.rates, strict=True) if a]
        spread = f"{min(ratios):.2f}-{max(ratios):.2f}" if ratios else "-"
        lines.append(
            f"{build.name:<24} {statistics.median(build.rates):>20,.0f} "
            f"{statistics.median(ratios):>20.2f} ({spread})"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__)
    parser.add_argument("checkouts", nargs="+", type=Path, help="the baseline first")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--window", type=float, default=6.0, help="seconds per window")
    args = parser.parse_args(argv)
    os.sched_setaffinity(0, client_cpus())
    settings = Settings(rounds=args.rounds, window=args.window, warmup=2.0)
    workdir = Path("bench/results") / time.strftime("compare-%Y%m%d-%H%M%S")
    workdir.mkdir(parents=True, exist_ok=True)
    print(_report(compare([c.resolve() for c in args.checkouts], settings, workdir)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
