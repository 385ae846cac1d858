"""The ceiling: a bare OTLP/gRPC server that only decodes each request.

``python -m bench.ceiling PORT`` serves ``TraceService/Export`` on 127.0.0.1:PORT with the
same ``grpc.aio`` setup as toolwatch's receiver (raw bytes in, read as toolwatch reads them:
one request message then the end of the call, on a client-streaming handler; the same
message-size options, BDP probing off); its handler runs ``decode_protobuf`` exactly as
toolwatch's does (the same scanner reads the
attributes the conventions need, then each span is recognized and made a SpanRecord) and
discards the result. Nothing is buffered, assembled, evaluated or
counted: what it sustains is the most a server of this design could take on this machine,
and toolwatch's throughput is reported as a fraction of it.

``python -m bench.ceiling PORT reference`` decodes with protobuf's own parse instead of the
compiled scanner (``ingest.decoder: reference``): the bare server anyone would write with the
standard library, reported beside the strict ceiling for information (the target is on the
strict one).

``python -m bench.ceiling PORT transport`` reads each request and decodes nothing: what gRPC
alone costs on this machine, the floor under any server of this design (for information).
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator
from typing import Any

import grpc

from toolwatch.ingest.decode_requests import decode_protobuf
from toolwatch.ingest.decode_types import DecodeOptions
from toolwatch.ingest.otlp_grpc import SERVICE_NAME
from toolwatch.ingest.scan import Decoder

__all__ = ["serve"]

_EMPTY_RESPONSE = b""  # an ExportTraceServiceResponse with no partial success
_MAX_REQUEST_BYTES = 20 * 2**20  # toolwatch's ingest.max_request_bytes default


def _handler(options: DecodeOptions | None) -> Any:
    async def export(_requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> bytes:
        body = await context.read()
        await context.read()  # the end of the call, as toolwatch checks it
        if options is not None:
            decode_protobuf(body, options)
        return _EMPTY_RESPONSE

    return export


async def serve(port: int, decoder: Decoder | None = "auto") -> None:
    """Serve until SIGTERM; ``decoder`` ``None`` decodes nothing (the transport floor)."""
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", _MAX_REQUEST_BYTES),
            ("grpc.max_send_message_length", 4 * 2**20),
            ("grpc.http2.bdp_probe", 0),  # toolwatch's default (ingest.grpc_bdp_probe)
        ],
    )
    options = None if decoder is None else DecodeOptions(decoder=decoder)
    method = grpc.stream_unary_rpc_method_handler(_handler(options))
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE_NAME, {"Export": method}),)
    )
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(1.0)


_MODES: dict[str, Decoder | None] = {"strict": "auto", "reference": "reference", "transport": None}

if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1]), _MODES[sys.argv[2] if len(sys.argv) > 2 else "strict"]))
