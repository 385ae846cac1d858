"""``ingest.max_connections`` (512) against the process's open-file limit: the bound is there so
that a flood cannot take every descriptor (EMFILE), yet its default, on the four listeners,
is twice systemd's default soft limit (1,024)."""

from __future__ import annotations

import socket
import time

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.integration.test_cli import FREE_PORTS, LISTENING, Served, clean_env, toolwatch_script
from tests.integration.test_security import refund_spans


def _flood(address: str, n: int) -> list[socket.socket]:
    host, port = address.rsplit(":", 1)
    return [socket.create_connection((host, int(port)), timeout=10) for _ in range(n)]


def test_default_max_connections_floods_do_not_exhaust_a_1024_descriptor_limit() -> None:
    """Under ``ulimit -n 1024`` (systemd's default soft limit; docs/security.md names it) with
    the default ``ingest.max_connections`` (512), a peer holding 512 idle connections on the
    OTLP/HTTP listener and 512 on the metrics one (both within the bound) takes every file
    descriptor of the process: the OTLP/gRPC listener can accept nothing (EMFILE), exactly
    what the bound was added to prevent. toolwatch neither raises its soft limit toward the
    hard one (process_tuning), nor refuses/warns at start-up. Should: the gRPC listener
    still serves (raise RLIMIT_NOFILE's soft limit to fit 4 x max_connections, or derive the
    default bound from it)."""
    served = Served(
        FREE_PORTS,
        clean_env(),
        command=["prlimit", "--nofile=1024:20000", toolwatch_script(), "serve"],
    )
    held: list[socket.socket] = []
    try:
        match = served.wait_for(LISTENING)
        held += _flood(match["http"], 512)
        held += _flood(match["metrics"], 512)
        time.sleep(1.0)  # the server's loop accepts them
        exporter = OTLPSpanExporter(endpoint=match["grpc"], insecure=True, timeout=10)
        try:
            result = exporter.export(refund_spans())
        finally:
            exporter.shutdown()
        assert result is SpanExportResult.SUCCESS, served.seen[-5:]
    finally:
        for sock in held:
            sock.close()
        served.process.kill()
        served.process.wait(timeout=10)
