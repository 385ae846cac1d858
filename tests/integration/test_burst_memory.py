"""A burst of large requests cannot take the server's memory past its bounds: request slots
(``ingest.max_concurrent_requests``) are taken before a body is read, so bodies beyond them
are never read (gRPC: nor buffered ahead, ``ingest.grpc_bdp_probe`` off) and their clients
are told to retry. Measured on a real ``toolwatch serve`` process, by its peak resident set
(``VmHWM``), with the burst sent from another process. The open gRPC health check, which
takes no slot, reads its requests a few at a time (``grpc_health.READ_TURNS``).

The control case lifts the bound: the same burst must then cost what it costs unbounded,
so the test can tell the two apart.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from tests.integration.faults_support import ServeProcess, write_config
from toolwatch.bearer_tokens import HEALTH_CHECK
from toolwatch.ingest.grpc_health import READ_TURNS

MIB = 2**20
REQUESTS = 24
REQUEST_MIB = 4


def peak_resident(pid: int) -> int:
    """The process's peak resident set so far, bytes (``VmHWM``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/<pid>/status")


def burst(transport: str, address: str) -> dict[str, object]:
    command = [sys.executable, "-m", "tests.integration.burst", transport, address]
    done = subprocess.run(
        [*command, str(REQUESTS), str(REQUEST_MIB)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    answers: dict[str, object] = json.loads(done.stdout)
    return answers


@pytest.mark.parametrize("transport", ["grpc", "http"])
@pytest.mark.parametrize(
    ("slots", "bounded"), [(2, True), (REQUESTS, False)], ids=["bounded", "control"]
)
def test_a_burst_of_large_requests_stays_within_the_request_slots(
    serve_process: Callable[[Path], ServeProcess],
    tmp_path: Path,
    transport: str,
    slots: int,
    bounded: bool,
) -> None:
    ingest = {"max_concurrent_requests": slots, "max_request_bytes": 8 * MIB}
    server = serve_process(write_config(tmp_path / "toolwatch.yaml", {}, ingest=ingest))
    before = peak_resident(server.proc.pid)

    answers = burst(transport, server.addresses[transport])

    grown = peak_resident(server.proc.pid) - before
    assert answers["failed"] == []
    accepted = server.sample("toolwatch_spans_received_total", {"transport": transport})
    assert accepted == answers["ok"] and answers["ok"] >= 1
    # Each body in flight costs about 2.5 times its size (the transport's copy, ours and
    # the allocator's slack): with two slots the peak grows by ~5 bodies (measured 20-25
    # MiB), unbounded by 17-38 (70-150 MiB; a fresh CI clone saw 70, fewer as decoding got
    # faster and each body is freed sooner). The control must break the bound slots keep.
    body = REQUEST_MIB * MIB
    bound = 10 * body
    if bounded:
        assert answers["refused"] == REQUESTS - answers["ok"]
        assert grown < bound, f"peak grew {grown / MIB:.0f} MiB"
    else:
        assert answers["ok"] == REQUESTS
        assert grown > bound, f"peak grew only {grown / MIB:.0f} MiB"


def test_a_burst_of_large_health_checks_without_a_token_is_read_a_few_at_a_time(
    serve_process: Callable[[Path], ServeProcess], tmp_path: Path
) -> None:
    """The health check is open to callers without a token, on the listener whose messages
    may be ``max_request_bytes`` long. Served as a unary handler, gRPC read every concurrent
    check's request whole (the burst below grew the peak by 120-160 MiB, 30-40 bodies);
    read in turn and refused past a service name's size, 20-25 MiB with one turn, 43-69
    MiB with four (four runs each at ``0879540`` and after, 2026-12-06: the same spread): the
    bound, four bodies a turn and four more, 80 MiB, is half what a whole read took."""
    tokens = tmp_path / "tokens"
    tokens.write_text("good-token\n")
    ingest = {"max_concurrent_requests": 1, "max_request_bytes": 8 * MIB}
    security = {"auth": {"bearer_token_file": str(tokens)}}
    server = serve_process(
        write_config(tmp_path / "toolwatch.yaml", {}, ingest=ingest, security=security)
    )
    body = REQUEST_MIB * MIB
    request = health_pb2.HealthCheckRequest(service="x" * (body - 64)).SerializeToString()
    before = peak_resident(server.proc.pid)

    answers = asyncio.run(health_checks(server.addresses["grpc"], request, REQUESTS))

    grown = peak_resident(server.proc.pid) - before
    bound = (4 * READ_TURNS + 4) * body
    assert grown < bound, f"peak grew {grown / MIB:.0f} MiB for {sorted(set(answers))}"
    # Too large; not read within its turn (a machine busy enough that 4 MiB take longer than
    # a turn); too many at once. Never served: a body past a service name's size is refused.
    refused = {"RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED"}
    assert set(answers) <= {*refused, "UNAVAILABLE"}
    assert refused & set(answers)


async def health_checks(address: str, request: bytes, calls: int) -> list[str]:
    """``calls`` concurrent health checks of ``request`` without a token: the codes answered."""
    options = [("grpc.max_send_message_length", 2**30)]
    async with grpc.aio.insecure_channel(address, options) as channel:
        check = channel.unary_unary(HEALTH_CHECK)

        async def one() -> str:
            try:
                await check(request, timeout=120)
            except grpc.aio.AioRpcError as error:
                return str(error.code().name)
            return "OK"

        return list(await asyncio.gather(*(one() for _ in range(calls))))
