"""``make bench-instructions-server`` (``python -m bench.server_instructions``): CPU
instructions per span of the whole server process, toolwatch and the ceiling, counted by
valgrind's callgrind.

``make bench-instructions`` counts the engine's stages in process; this counts what a real
server executes for each span it is sent: gRPC, the event loop, the request handler, the
ticker and the engine, in every thread. Each server runs twice under callgrind, sent ``N``
and then ``2N`` of the benchmark's requests one after the other (a blocking client; the
server is about 50 times slower under valgrind), and the difference of the two totals,
divided by the ``N`` requests' spans, is the cost per span: start-up and shutdown cancel out.

toolwatch is stopped (SIGTERM) once the findings log holds a line for every run the requests
meant to be flagged, so every trace is evaluated as complete, as under load. Its ticker runs
every ``--tick`` seconds (0.5 by default): under valgrind that is about as many ticks per
request as the 10 ms of ``make bench`` give at full load; a shorter one counts the ticks'
own work many times over.

About 8 minutes: toolwatch, the ceiling and gRPC alone (``transport``), twice each.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import grpc

from bench.instructions import profile_total, valgrind
from bench.plans import Settings
from bench.server import ServerProcess, bench_config, free_port
from bench.traces import RequestTemplate, trace_id
from toolwatch.ingest.otlp_grpc import SERVICE_NAME

__all__ = ["KINDS", "instructions_per_span", "main"]

KINDS = ("toolwatch", "ceiling", "transport")
_TIMEOUT = 900.0  # seconds: a server under valgrind starts in about 20


def _server(kind: str, workdir: Path, ports: dict[str, int], tick: float) -> ServerProcess:
    """Server ``kind`` started under callgrind, its profile written to ``callgrind.out``."""
    wrapper = [valgrind(), "--tool=callgrind", f"--callgrind-out-file={workdir / 'callgrind.out'}"]
    if kind == "toolwatch":
        config = bench_config(ports, workdir / "findings.jsonl", completion_wait=0.2, tick=tick)
        return ServerProcess.toolwatch(config, workdir, kind, wrapper)
    mode = () if kind == "ceiling" else (kind,)
    return ServerProcess.ceiling(ports["grpc"], workdir, kind, mode, wrapper)


def _findings(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _run(kind: str, templates: Sequence[RequestTemplate], requests: int, tick: float) -> int:
    """The total instructions of one run of server ``kind`` sent ``requests`` requests."""
    with tempfile.TemporaryDirectory(prefix="toolwatch-server-instructions-") as tmp:
        workdir = Path(tmp)
        ports = {name: free_port() for name in ("grpc", "http", "metrics", "stream")}
        server = _server(kind, workdir, ports, tick)
        try:
            flagged = _send(ports["grpc"], templates, requests)
            if kind == "toolwatch":
                _wait_for(lambda: _findings(workdir / "findings.jsonl") >= flagged, server)
        finally:
            returncode = server.stop(_TIMEOUT)
        if returncode != 0:
            tail = (workdir / f"{kind}.log").read_text(errors="replace")[-2000:]
            raise SystemExit(f"the {kind} server exited with {returncode}:\n{tail}")
        return profile_total(workdir / "callgrind.out")


def _send(port: int, templates: Sequence[RequestTemplate], requests: int) -> int:
    """Sends ``requests`` requests one at a time; returns how many runs should be flagged."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        grpc.channel_ready_future(channel).result(timeout=_TIMEOUT)
        export = channel.unary_unary(f"/{SERVICE_NAME}/Export")
        flagged = 0
        for n in range(requests):
            template = templates[n % len(templates)]
            export(template.render([trace_id(0, n, run) for run in range(template.runs)]))
            flagged += len(template.unverified)
    return flagged


def _wait_for(done: Callable[[], bool], server: ServerProcess) -> None:
    deadline = time.monotonic() + _TIMEOUT
    while not done():
        if server.process.poll() is not None:
            raise SystemExit(f"the server exited early with {server.process.returncode}")
        if time.monotonic() > deadline:
            raise SystemExit("the server did not evaluate every run in time")
        time.sleep(0.5)


def instructions_per_span(kind: str, requests: int, tick: float) -> tuple[int, int]:
    """(instructions per span, spans counted) of server ``kind``: runs of N and 2N requests."""
    templates = Settings().templates().build()
    spans = sum(templates[n % len(templates)].spans for n in range(requests, 2 * requests))
    once = _run(kind, templates, requests, tick)
    twice = _run(kind, templates, 2 * requests, tick)
    return round((twice - once) / spans), spans


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.server_instructions", description=__doc__
    )
    parser.add_argument("--requests", type=int, default=32, help="N (default 32)")
    parser.add_argument("--tick", type=float, default=0.5, help="toolwatch's tick_seconds")
    parser.add_argument("--kind", action="append", choices=KINDS, help="only this (repeat)")
    parser.add_argument("--out", type=Path, help="also write the result here as JSON")
    args = parser.parse_args(argv)
    os.environ["PYTHONHASHSEED"] = "0"  # inherited by the servers: the same dict layouts
    result: dict[str, int] = {}
    spans = 0
    for kind in args.kind or KINDS:
        result[kind], spans = instructions_per_span(kind, args.requests, args.tick)
    print(f"instructions per span, whole server process ({spans} spans):")
    for kind, count in result.items():
        print(f"  {kind:<10} {count:>10,}")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        record = {"per_span": result, "spans": spans, "tick_seconds": args.tick}
        args.out.write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
