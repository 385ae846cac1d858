"""The load generator: client processes sending pre-encoded OTLP/gRPC export requests.

Each client process builds the shared pool of request templates (``bench.traces``), then
sends rendered requests (fresh trace ids, no protobuf work) on one ``grpc.aio`` channel with a
raw-bytes unary call. Two modes:

- ``closed``: ``concurrency`` requests always in flight, each sent as soon as the previous
  one is answered: the offered load saturates the server (sustained throughput).
- ``open``: requests at a fixed ``rate`` whatever the answers (detection latency at a given
  load); ``concurrency`` only bounds what may be in flight.

An ``UNAVAILABLE`` answer is retried after the delay its ``google.rpc.RetryInfo`` trailer asks
for (OTLP's retry rule), and counted. Every client records, per request, its sequence number,
its span count and the wall-clock time (``time.time_ns``) it was acknowledged.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context

import grpc
from google.rpc import error_details_pb2

from bench.traces import RequestTemplate, build_templates, trace_id

__all__ = ["ClientPlan", "ClientPool", "ClientResult", "TemplateSpec", "Window"]

_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
_RETRY_TRAILER = "google.rpc.retryinfo-bin"
_DEFAULT_BACKOFF = 1.0


@dataclass(frozen=True, slots=True)
class TemplateSpec:
    """Which request pool to build (every process builds the same one from the seed)."""

    count: int = 32
    runs_per_request: int = 16
    unverified_fraction: float = 0.1
    seed: int = 7
    orphan: bool = False
    history: bool = False  # each model call's input holds the run's turns before it

    def build(self) -> list[RequestTemplate]:
        return build_templates(
            self.count,
            self.runs_per_request,
            self.unverified_fraction,
            self.seed,
            orphan=self.orphan,
            history=self.history,
        )


@dataclass(frozen=True, slots=True)
class ClientPlan:
    """What one client process does. ``client`` goes into every trace id it sends, so it
    must be unique per server lifetime (the server remembers emitted trace ids)."""

    client: int
    target: str
    mode: str  # "closed" or "open"
    start_at: float  # wall-clock second to send the first request
    duration: float  # seconds of sending
    concurrency: int
    rate: float = 0.0  # open mode: requests per second of this client
    templates: TemplateSpec = TemplateSpec()
    cpus: frozenset[int] = frozenset()


@dataclass(slots=True)
class ClientResult:
    """Per acknowledged request: sequence number, spans and ack wall time (ns)."""

    client: int
    sequences: list[int] = field(default_factory=list)
    spans: list[int] = field(default_factory=list)
    acked_ns: list[int] = field(default_factory=list)
    refused: int = 0  # UNAVAILABLE answers (retried after RetryInfo)
    failed: int = 0  # other errors (not retried)
    late_sends: int = 0  # open mode: sends delayed because ``concurrency`` were in flight


_BUILT: dict[TemplateSpec, list[RequestTemplate]] = {}  # per client process


def _templates(spec: TemplateSpec) -> list[RequestTemplate]:
    """The request pool of ``spec``, built once per process."""
    if spec not in _BUILT:
        _BUILT[spec] = spec.build()
    return _BUILT[spec]


def _retry_delay(error: grpc.aio.AioRpcError) -> float:
    for key, value in error.trailing_metadata() or ():
        if key == _RETRY_TRAILER and isinstance(value, bytes):
            info = error_details_pb2.RetryInfo.FromString(value)
            delay: float = info.retry_delay.seconds + info.retry_delay.nanos / 1e9
            return delay
    return _DEFAULT_BACKOFF


class _Client:
    def __init__(self, plan: ClientPlan, channel: grpc.aio.Channel) -> None:
        self.plan = plan
        self.export = channel.unary_unary(_METHOD)  # no serializers: bytes in, bytes out
        self.templates = _templates(plan.templates)
        self.result = ClientResult(plan.client)
        self.end_at = plan.start_at + plan.duration

    async def send(self, sequence: int) -> None:
        template = self.templates[sequence % len(self.templates)]
        ids = [trace_id(self.plan.client, sequence, run) for run in range(template.runs)]
        body = template.render(ids)
        while True:
            try:
                await self.export(body, timeout=60)
            except grpc.aio.AioRpcError as error:
                if error.code() != grpc.StatusCode.UNAVAILABLE:
                    self.result.failed += 1
                    return
                self.result.refused += 1
                await asyncio.sleep(_retry_delay(error))
                continue
            break
        result = self.result
        result.acked_ns.append(time.time_ns())
        result.sequences.append(sequence)
        result.spans.append(template.spans)

    async def closed(self) -> None:
        sequences = itertools.count()

        async def worker() -> None:
            while time.time() < self.end_at:
                await self.send(next(sequences))

        await asyncio.gather(*(worker() for _ in range(self.plan.concurrency)))

    async def open(self) -> None:
        period = 1.0 / self.plan.rate
        slots = asyncio.Semaphore(self.plan.concurrency)
        tasks: set[asyncio.Task[None]] = set()

        async def one(sequence: int) -> None:
            try:
                await self.send(sequence)
            finally:
                slots.release()

        for sequence in itertools.count():
            due = self.plan.start_at + sequence * period
            if due >= self.end_at:
                break
            await asyncio.sleep(max(0.0, due - time.time()))
            if slots.locked():
                self.result.late_sends += 1
            await slots.acquire()
            task = asyncio.get_running_loop().create_task(one(sequence))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        await asyncio.gather(*tasks)


async def _run(plan: ClientPlan) -> ClientResult:
    async with grpc.aio.insecure_channel(plan.target) as channel:
        client = _Client(plan, channel)
        await channel.channel_ready()
        await asyncio.sleep(max(0.0, plan.start_at - time.time()))
        await (client.closed() if plan.mode == "closed" else client.open())
        return client.result


def _client_main(plan: ClientPlan) -> ClientResult:
    if plan.cpus:
        os.sched_setaffinity(0, plan.cpus)
    return asyncio.run(_run(plan))


class ClientPool:
    """Client processes (spawned once, pinned per plan) that run one window after another:
    a window starts in about a second instead of the time it takes to spawn interpreters
    and build the request pool, so windows can be short and many."""

    def __init__(self, size: int, spec: TemplateSpec) -> None:
        self.size = size
        self._pool = ProcessPoolExecutor(
            max_workers=size,
            mp_context=get_context("spawn"),
            initializer=_templates,
            initargs=(spec,),
        )

    def start(self, plans: Sequence[ClientPlan]) -> Window:
        """Run one plan per process (at most ``size``); returns at once."""
        if len(plans) > self.size:
            raise ValueError(f"{len(plans)} plans for {self.size} client processes")
        return Window(plans, [self._pool.submit(_client_main, plan) for plan in plans])

    def close(self) -> None:
        self._pool.shutdown()


class Window:
    """A load window in progress; ``results`` waits for every client of it."""

    def __init__(self, plans: Sequence[ClientPlan], futures: list[Future[ClientResult]]) -> None:
        self.start_at = min(plan.start_at for plan in plans)
        self._futures = futures

    def results(self) -> list[ClientResult]:
        return [future.result() for future in self._futures]
