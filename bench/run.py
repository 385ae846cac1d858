"""``make bench`` (``python -m bench.run``): toolwatch's throughput, latency and memory.

Phases, in one run and on the same pool of requests (``bench.traces``):

1. stages — each pipeline stage timed in-process (µs of CPU per span): where time goes;
2. throughput — ``toolwatch serve`` and the decode-only ceiling (``bench.ceiling``) under the
   same saturating closed-loop load, in alternating rounds (``bench.throughput``); also, for
   information, the same ceiling decoding with protobuf's parse, and decoding nothing;
3. latency — open-loop load at half the sustained rate: last span acknowledged -> finding
   logged (``bench.latency``);
4. memory — runs that never complete fill the buffer; resident memory per buffered span
   (``bench.memory``).

Servers run on core ``SERVER_CPU``; this process and the clients on the other cores. The
report is printed and written as JSON (``--out``, default ``bench/results/latest.json``);
server logs, configurations and the findings log go to a ``run-*`` directory next to it.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import report
from bench.latency import measure_latency
from bench.loadgen import ClientPool
from bench.memory import measure_memory
from bench.plans import Settings, client_cpus, free_ports
from bench.server import SERVER_CPU, ServerProcess, bench_config, free_port, scrape
from bench.stages import measure_stages, stage_config
from bench.throughput import BUFFERED, measure_throughput

__all__ = ["main"]

_DEFAULTS = Settings()


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    add = parser.add_argument
    add("--clients", type=int, default=_DEFAULTS.clients, help="client processes")
    add("--concurrency", type=int, default=_DEFAULTS.concurrency, help="in flight per client")
    add("--warmup", type=float, default=_DEFAULTS.warmup, help="seconds before each window")
    add("--window", type=float, default=_DEFAULTS.window, help="seconds of each window")
    add("--rounds", type=int, default=_DEFAULTS.rounds, help="ceiling/toolwatch rounds")
    add("--latency-seconds", type=float, default=_DEFAULTS.latency_seconds)
    add("--completion-wait", type=float, default=_DEFAULTS.completion_wait)
    add("--tick", type=float, default=_DEFAULTS.tick, help="assembly.tick_seconds")
    add("--runs-per-request", type=int, default=_DEFAULTS.runs_per_request)
    add("--unverified", type=float, default=_DEFAULTS.unverified, help="share of runs")
    add("--memory-spans", type=int, default=_DEFAULTS.memory_spans)
    add("--skip", action="append", default=[], choices=["stages", "memory"])
    add("--out", type=Path, default=Path("bench/results/latest.json"))
    return parser.parse_args(argv)


def _settings(args: argparse.Namespace) -> Settings:
    names = {f.name for f in dataclasses.fields(Settings)}
    return Settings(**{k: v for k, v in vars(args).items() if k in names})


def _stages(settings: Settings) -> dict[str, Any]:
    config = stage_config(settings.completion_wait)
    return dataclasses.asdict(measure_stages(config, settings.templates().build()))


def _wait_drained(metrics_port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and scrape(metrics_port).get(BUFFERED, 0.0) > 0:
        time.sleep(0.25)


# The strict ceiling decodes as toolwatch does; the reference one with protobuf's parse; the
# transport one not at all (what gRPC alone costs).
_CEILINGS: dict[str, tuple[str, ...]] = {
    "ceiling": (),
    "ceiling_reference": ("reference",),
    "ceiling_transport": ("transport",),
}


def _ceiling(workdir: Path, name: str, *extra: str) -> tuple[ServerProcess, int]:
    port = free_port()
    return ServerProcess.ceiling(port, workdir, name, extra), port


def _servers(settings: Settings, workdir: Path) -> dict[str, Any]:
    """Throughput (both servers up, alternating rounds), then latency on toolwatch."""
    ports = free_ports()
    findings = workdir / "findings.jsonl"
    config = bench_config(
        ports, findings, completion_wait=settings.completion_wait, tick=settings.tick
    )
    clients = ClientPool(settings.clients, settings.templates())
    toolwatch = ServerProcess.toolwatch(config, workdir, "toolwatch")
    ceilings = {name: _ceiling(workdir, name, *extra) for name, extra in _CEILINGS.items()}
    try:
        toolwatch.wait_for_port(ports["metrics"])
        for server, port in ceilings.values():
            server.wait_for_port(port)
        throughput = measure_throughput(settings, clients, toolwatch, ports, ceilings)
        for server, _ in ceilings.values():
            server.stop()
        _wait_drained(ports["metrics"])
        half = throughput["spans_per_second"] / 2
        latency = measure_latency(settings, clients, toolwatch, ports, findings, half)
    finally:
        clients.close()
        for server, _ in ceilings.values():
            server.stop()
        toolwatch.stop()
    return {"throughput": throughput, "latency": latency}


def _load(settings: Settings) -> dict[str, Any]:
    templates = settings.templates().build()
    spans = statistics.mean(t.spans for t in templates)
    size = statistics.mean(len(t.body) for t in templates)
    return {
        "clients": settings.clients,
        "runs_per_request": settings.runs_per_request,
        "mean_spans_per_request": spans,
        "mean_request_bytes": size,
        "unverified_fraction": settings.unverified,
        "describe": f"{settings.clients} client processes on cores {sorted(client_cpus())}, "
        f"server on core {SERVER_CPU}; {settings.runs_per_request} runs per request "
        f"(~{spans:.0f} spans, {size / 1024:.0f} KiB); {settings.rounds} rounds of "
        f"{settings.window:g} s",
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = _arguments(argv)
    settings = _settings(args)
    os.sched_setaffinity(0, client_cpus())
    workdir = args.out.parent / time.strftime("run-%Y%m%d-%H%M%S")
    workdir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"machine": report.machine(), "load": _load(settings)}
    if "stages" not in args.skip:
        results["stages"] = _stages(settings)
    results.update(_servers(settings, workdir))
    if "memory" not in args.skip:
        results["memory"] = measure_memory(settings, workdir)
    results["targets"] = report.check_targets(results)
    report.write_json(results, args.out)
    print(report.render(results))
    print(f"\nresults: {args.out}  (server logs and findings: {workdir})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
