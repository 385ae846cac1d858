"""The gRPC health service (``grpc.health.v1.Health``) of the OTLP/gRPC listener, served so
that its requests cannot take the server's memory.

The listener takes messages up to ``ingest.max_request_bytes`` (an Export body), and gRPC
reads a unary request whole before its handler runs, outside the request slots that bound
Export bodies (``toolwatch.ingest.slots``). ``Check`` is open to callers without a token
(kubelet's probes send none): served as gRPC's unary handler, any client that can connect had
the server hold one body of that size per concurrent call (40 calls of 19 MiB: 2.3 GB).

So, as ``otlp_grpc`` serves Export, each method is served on the wire as client-streaming
with undecoded messages, which a unary client cannot tell apart: a call's request is read
only in one of the service's ``READ_TURNS`` read turns, so at most that many health requests
are being read or held, whatever the number of calls. At most ``MAX_WAITING`` calls are in a
turn or wait for one (in the order they came), each waiting holding no more of its request
than gRPC's 64 KiB window (``ingest.grpc_bdp_probe`` off); more are answered UNAVAILABLE. In
its turn a request must arrive within ``read_timeout`` seconds (at most
``MAX_READ_SECONDS``), else the call is answered DEADLINE_EXCEEDED and the turn passes on: a
client that sends slowly or nothing, or a flood of checks, can delay the others, not take
memory. grpc.aio cannot tell a call whose request has started to arrive from one that sends
nothing, so the hold is kept short and the turns several: a check's request follows its
headers at once, and a probe behind ``MAX_WAITING - 1`` calls that send nothing is read
within ``(MAX_WAITING - READ_TURNS) / READ_TURNS * MAX_READ_SECONDS`` (0.6 s), under the 1 s
kubelet's gRPC probe waits. A request larger than ``MAX_REQUEST_BYTES`` (a
``HealthCheckRequest`` is a service name) is answered RESOURCE_EXHAUSTED undecoded; one that
is no ``HealthCheckRequest``, or a call with no request or two, INVALID_ARGUMENT.

What is answered is gRPC's own ``HealthServicer``'s (``Check`` and ``Watch``; ``List`` is
not served). Runs on the server's event loop.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeAlias

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health_pb2
from grpc_health.v1._async import HealthServicer

from toolwatch.ingest.slots import RequestSlots

__all__ = [
    "MAX_READ_SECONDS",
    "MAX_REQUEST_BYTES",
    "MAX_WAITING",
    "READ_TURNS",
    "SERVICE_NAME",
    "health_handler",
]

SERVICE_NAME = "grpc.health.v1.Health"

#: The largest ``HealthCheckRequest`` read: a service name, ours are under 60 bytes.
MAX_REQUEST_BYTES = 1024

#: The longest a request is waited for in its turn (``read_timeout`` when shorter): a check's
#: request follows its headers at once; a client that holds a turn sending nothing delays
#: the calls queued behind it this long.
MAX_READ_SECONDS = 0.2

#: Requests read at once, each up to ``ingest.max_request_bytes`` (gRPC reads a message whole
#: before a size can be checked): the service's share of memory, the ``+ 4`` of the memory sum
#: (docs/deployment.md, Memory).
READ_TURNS = 4

#: Calls being read or waiting for their turn at once; more are answered UNAVAILABLE. A call
#: waiting holds at most gRPC's 64 KiB window of its request (``ingest.grpc_bdp_probe`` off).
#: With ``READ_TURNS`` and ``MAX_READ_SECONDS``, it bounds how long calls sending nothing
#: delay a probe: ``(MAX_WAITING - READ_TURNS) / READ_TURNS * MAX_READ_SECONDS`` = 0.6 s,
#: under kubelet's 1 s gRPC probe timeout.
MAX_WAITING = 16

#: A call's request, or the status to refuse the call with.
_Parsed: TypeAlias = health_pb2.HealthCheckRequest | tuple[grpc.StatusCode, str]

_BUSY = "too many health checks at once; retry"


class _Health:
    def __init__(self, servicer: HealthServicer, read_timeout: float) -> None:
        self._servicer = servicer
        self._calls = RequestSlots(MAX_WAITING, read_timeout)  # in turn or waiting for it
        self._turns = asyncio.Semaphore(READ_TURNS)  # fair: waiters take them as they came

    async def check(
        self, _requests: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> health_pb2.HealthCheckResponse:
        request = await self._request(context)
        response: health_pb2.HealthCheckResponse = await self._servicer.Check(request, context)
        return response

    async def watch(self, _requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await self._servicer.Watch(await self._request(context), context)  # writes to context

    async def _request(
        self, context: grpc.aio.ServicerContext[Any, Any]
    ) -> health_pb2.HealthCheckRequest:
        """The call's one request message; the call is aborted (this raises) when too many
        wait, or its request is missing, late, too large or no ``HealthCheckRequest``."""
        if not self._calls.take():
            parsed: _Parsed = (grpc.StatusCode.UNAVAILABLE, _BUSY)
        else:
            try:
                parsed = await self._read(context)
            finally:
                self._calls.give()
        if isinstance(parsed, health_pb2.HealthCheckRequest):
            return parsed
        await context.abort(*parsed)  # raises
        raise AssertionError("ServicerContext.abort returned")

    async def _read(self, context: grpc.aio.ServicerContext[Any, Any]) -> _Parsed:
        async with self._turns:
            try:
                async with asyncio.timeout(self._calls.read_timeout):
                    raw = await context.read()
                    extra = grpc.aio.EOF if raw is grpc.aio.EOF else await context.read()
            except TimeoutError:
                message = f"the request was not received within {self._calls.read_timeout:g} s"
                return grpc.StatusCode.DEADLINE_EXCEEDED, message
        # Parsed here, so that the bytes go with this frame: what abort raises holds the
        # frames it passes through, and is freed only by the cycle collector.
        return _parsed(raw, extra)


def _parsed(raw: Any, extra: Any) -> _Parsed:
    """The request a call's messages carry, else the status to refuse it with."""
    if raw is grpc.aio.EOF or extra is not grpc.aio.EOF:
        return grpc.StatusCode.INVALID_ARGUMENT, "a health call carries one HealthCheckRequest"
    if len(raw) > MAX_REQUEST_BYTES:
        message = f"a HealthCheckRequest is at most {MAX_REQUEST_BYTES} bytes"
        return grpc.StatusCode.RESOURCE_EXHAUSTED, message
    try:
        return health_pb2.HealthCheckRequest.FromString(raw)
    except DecodeError:
        return grpc.StatusCode.INVALID_ARGUMENT, "not a HealthCheckRequest"


def health_handler(servicer: HealthServicer, read_timeout: float) -> grpc.GenericRpcHandler:
    """The health service to add to a ``grpc.aio`` server, answering from ``servicer``
    (whose statuses the app sets); each request is read within ``read_timeout`` seconds,
    ``MAX_READ_SECONDS`` at most."""
    health = _Health(servicer, min(read_timeout, MAX_READ_SECONDS))
    serialize = health_pb2.HealthCheckResponse.SerializeToString
    methods = {
        "Check": grpc.stream_unary_rpc_method_handler(health.check, response_serializer=serialize),
        "Watch": grpc.stream_stream_rpc_method_handler(health.watch, response_serializer=serialize),
    }
    return grpc.method_handlers_generic_handler(SERVICE_NAME, methods)
