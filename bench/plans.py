"""What every benchmark phase shares: the settings, the client plans, small helpers."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass

from bench.loadgen import ClientPlan, ClientResult, TemplateSpec
from bench.server import SERVER_CPU

__all__ = [
    "METHOD",
    "Settings",
    "acked_rate",
    "client_cpus",
    "free_ports",
    "plans",
    "sleep_until",
]

METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
_START_DELAY = 1.5  # seconds for the (already running) client processes to connect
_OPEN_LOOP_IN_FLIGHT = 64  # open loop: requests that may be outstanding per client


@dataclass(frozen=True, slots=True)
class Settings:
    """The benchmark's knobs (``python -m bench.run --help``)."""

    clients: int = 3
    concurrency: int = 4
    warmup: float = 3.0
    window: float = 8.0
    rounds: int = 6
    latency_seconds: float = 20.0
    completion_wait: float = 0.2
    tick: float = 0.01
    runs_per_request: int = 16
    unverified: float = 0.1
    memory_spans: int = 200_000

    def templates(self, orphan: bool = False) -> TemplateSpec:
        return TemplateSpec(
            runs_per_request=self.runs_per_request,
            unverified_fraction=self.unverified,
            orphan=orphan,
        )


def free_ports() -> dict[str, int]:
    """A free loopback port for each toolwatch listener, four different ones: each socket is
    held until all four are chosen (one released at once may be handed out again)."""
    names = ("grpc", "http", "metrics", "stream")
    with contextlib.ExitStack() as held:
        socks = [held.enter_context(socket.socket()) for _ in names]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return {name: sock.getsockname()[1] for name, sock in zip(names, socks, strict=True)}


def client_cpus() -> frozenset[int]:
    """Every allowed core but the server's (the server's own on a one-core machine)."""
    others = frozenset(os.sched_getaffinity(0)) - {SERVER_CPU}
    return others or frozenset({SERVER_CPU})


def plans(
    settings: Settings,
    target: str,
    mode: str,
    base: int,
    duration: float,
    rate: float = 0.0,
) -> list[ClientPlan]:
    """One plan per client process, numbered from ``base``, starting together shortly."""
    start_at = time.time() + _START_DELAY
    closed = mode == "closed"
    return [
        ClientPlan(
            client=base + i,
            target=target,
            mode=mode,
            start_at=start_at,
            duration=duration,
            concurrency=settings.concurrency if closed else _OPEN_LOOP_IN_FLIGHT,
            rate=rate,
            templates=settings.templates(),
            cpus=client_cpus(),
        )
        for i in range(settings.clients)
    ]


def sleep_until(when: float) -> None:
    time.sleep(max(0.0, when - time.time()))


def acked_rate(results: Sequence[ClientResult], start: float, end: float) -> float:
    """Spans per second acknowledged between the wall-clock seconds ``start`` and ``end``."""
    lo, hi = int(start * 1e9), int(end * 1e9)
    spans = sum(
        n for r in results for n, at in zip(r.spans, r.acked_ns, strict=True) if lo <= at < hi
    )
    return spans / (end - start)
