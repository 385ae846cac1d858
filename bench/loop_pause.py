"""``python -m bench.loop_pause``: the longest pause of a server's event loop while it takes
one large request.

For each case a fresh interpreter runs an ``App`` (defaults, ports 0) with a probe task on
its loop that sleeps 1 ms at a time and records the gaps between its wake-ups, then another
process sends the case's body once (OTLP/HTTP with ``urllib``, or OTLP/gRPC) and waits for
the answer. Reported: the answer, the longest gap while the request was in flight, the
server's CPU seconds, and how long the engine took to take the batch (``Engine.admit``, on
the loop by design) and the full garbage collections (both pause the loop wherever the
decode runs). Before decoding moved off the loop (``toolwatch.ingest.decode_thread``) the
longest gap was the whole decode. Run it with ``PYTHONPATH`` naming the source to measure
(another checkout's ``src`` for a comparison); the machine's other load shows up as gaps.

Cases (``--cases``): ``transport:builder:MiB``, ``transport`` one of ``http`` (OTLP/JSON),
``http-gzip`` (the same, gzip-compressed), ``http-protobuf`` and ``grpc`` (protobuf),
``builder`` one of ``bench.json_memory.BUILDERS``. The default sizes are the largest that
20 MiB accepts of each (``toolwatch.ingest.otlp_json``'s bound on values).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.json_memory import BUILDERS
from toolwatch.ingest.otlp_json import parse_otlp_json

__all__ = ["main"]

MIB = 2**20

_DEFAULT_CASES = (
    "http:agent:19.5",
    "http:captures:18",
    "http:dense:15.3",
    "http:attrs:15.3",
    "http-gzip:captures:18",
    "grpc:captures:18",
    "grpc:dense:15.3",
)

#: Sends argv[3] (a file) to argv[2] by argv[1]'s transport; prints the answer.
_CLIENT = """
import sys, urllib.error, urllib.request
transport, address, path = sys.argv[1:4]
body = open(path, "rb").read()
if transport == "grpc":
    import grpc
    options = [("grpc.max_send_message_length", 64 << 20)]
    with grpc.insecure_channel(address, options=options) as channel:
        export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
        try:
            export(body, timeout=300)
            print("OK")
        except grpc.RpcError as error:
            print(error.code().name)
else:
    headers = {"Content-Type": "application/x-protobuf" if transport == "http-protobuf"
               else "application/json"}
    if transport == "http-gzip":
        headers["Content-Encoding"] = "gzip"
    request = urllib.request.Request(f"http://{address}/v1/traces", body, headers)
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            print(response.status)
    except urllib.error.HTTPError as error:
        print(error.code)
"""

#: Runs in the fresh interpreter: argv is the transport and the body's file.
_SERVER = """
import asyncio, gc, json, subprocess, sys, time
from toolwatch.app import App
from toolwatch.config import load_config

transport, path, client = sys.argv[1:4]

async def main():
    listen = {f"listen.{name}": "127.0.0.1:0" for name in ("grpc", "http", "metrics", "stream")}
    app = App(load_config(None, listen))
    await app.start()
    admitted, collections, gaps = [], [], []
    admit = app.engine.admit

    def timed_admit(*args):
        started = time.perf_counter()
        try:
            return admit(*args)
        finally:
            admitted.append(time.perf_counter() - started)

    app.engine.admit = timed_admit
    started_gc = [0.0]

    def collected(phase, info):
        if phase == "start":
            started_gc[0] = time.perf_counter()
        elif info["generation"] == 2:
            collections.append(time.perf_counter() - started_gc[0])

    gc.callbacks.append(collected)
    sending = [True]

    async def probe():
        last = time.perf_counter()
        while sending[0]:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    probing = asyncio.create_task(probe())
    await asyncio.sleep(0.1)
    gaps.clear()
    address = app.addresses["grpc" if transport == "grpc" else "http"]
    cpu = time.process_time()
    sender = await asyncio.create_subprocess_exec(
        sys.executable, "-c", client, transport, address, path, stdout=subprocess.PIPE
    )
    answer, _ = await sender.communicate()
    cpu = time.process_time() - cpu
    sending[0] = False
    await probing
    await app.stop(grace=1)
    print(json.dumps({
        "answer": answer.decode().strip(),
        "longest_gap": max(gaps),
        "cpu": cpu,
        "admit": max(admitted, default=0.0),
        "collections": collections,
    }))

asyncio.run(main())
"""


def _body(builder: str, size: float, transport: str) -> bytes:
    body = BUILDERS[builder](int(size * MIB))
    if transport in ("grpc", "http-protobuf"):
        return bytes(parse_otlp_json(body, max_values=sys.maxsize).SerializeToString())
    if transport == "http-gzip":
        return gzip.compress(body)
    return body


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="*", default=list(_DEFAULT_CASES))
    args = parser.parse_args(argv)
    env = dict(os.environ)
    head = f"{'case':<24}{'body MiB':>9}  {'answer':<7}{'longest gap ms':>15}{'CPU s':>7}"
    print(f"{head}{'admit ms':>9}  full collections ms")
    with tempfile.TemporaryDirectory() as directory:
        for case in args.cases:
            transport, builder, size = case.split(":")
            body = _body(builder, float(size), transport)
            path = Path(directory) / "body"
            path.write_bytes(body)
            command = [sys.executable, "-c", _SERVER, transport, str(path), _CLIENT]
            done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
            got = json.loads(done.stdout.splitlines()[-1])
            collections = ", ".join(f"{c * 1000:.0f}" for c in got["collections"]) or "-"
            print(
                f"{case:<24}{len(body) / MIB:>9.2f}  {got['answer']:<7}"
                f"{got['longest_gap'] * 1000:>15.0f}{got['cpu']:>7.2f}{got['admit'] * 1000:>9.0f}"
                f"  {collections}",
                flush=True,
            )
            path.unlink()


if __name__ == "__main__":
    main()
