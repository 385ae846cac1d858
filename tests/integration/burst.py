"""A burst of concurrent large export requests, from a process of its own (so that the
server's memory is measured without the client's): ``python -m tests.integration.burst
{grpc|http} ADDRESS REQUESTS MIB``. Prints ``{"ok": n, "refused": n, "failed": [...]}``:
answered with success, with the retryable overload status, or otherwise.

Each request is one valid span carrying an attribute of ``MIB`` MiB that toolwatch does not
read: the body is large, the span it makes is not, so only bodies in flight weigh.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import aiohttp
import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def body(mib: int) -> bytes:
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = os.urandom(16), os.urandom(8), "padded"
    padding = span.attributes.add()
    padding.key, padding.value.string_value = "padding", "x" * (mib * 2**20)
    return request.SerializeToString()


async def _grpc(address: str, bodies: list[bytes]) -> list[str]:
    async with grpc.aio.insecure_channel(
        address, options=[("grpc.max_send_message_length", 2**30)]
    ) as channel:
        export = channel.unary_unary(EXPORT_METHOD)

        async def one(payload: bytes) -> str:
            try:
                await export(payload, timeout=120)
            except grpc.aio.AioRpcError as error:
                return "refused" if error.code() is grpc.StatusCode.UNAVAILABLE else str(error)
            return "ok"

        return list(await asyncio.gather(*(one(b) for b in bodies)))


async def _http(address: str, bodies: list[bytes]) -> list[str]:
    url = f"http://{address}/v1/traces"
    headers = {"Content-Type": "application/x-protobuf"}
    timeout = aiohttp.ClientTimeout(total=120)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one(payload: bytes) -> str:
            async with session.post(url, data=payload, headers=headers) as response:
                await response.read()
                return {200: "ok", 503: "refused"}.get(response.status, str(response.status))

        return list(await asyncio.gather(*(one(b) for b in bodies)))


def main(argv: list[str]) -> dict[str, Any]:
    transport, address, requests, mib = argv[0], argv[1], int(argv[2]), int(argv[3])
    bodies = [body(mib) for _ in range(requests)]
    answers = asyncio.run((_grpc if transport == "grpc" else _http)(address, bodies))
    failed = [a for a in answers if a not in ("ok", "refused")]
    return {"ok": answers.count("ok"), "refused": answers.count("refused"), "failed": failed}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
