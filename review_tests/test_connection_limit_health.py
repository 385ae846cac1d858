"""``ingest.max_connections`` on the metrics listener against the liveness checks that ask it."""

from __future__ import annotations

import socket
from collections.abc import Callable

from tests.integration.conftest import RunningServer
from toolwatch import healthcheck

Start = Callable[..., RunningServer]


def test_a_flood_of_the_metrics_listener_does_not_fail_the_health_check(
    start_server: Start,
) -> None:
    """The bound is said to keep a flood "to the listener it floods" (docs/security.md,
    connection_gate). But the image's HEALTHCHECK and the Kubernetes livenessProbe
    (deploy/kubernetes/gateway.yaml: ``/healthz`` on ``port: metrics``, 3 failures) ask the
    metrics listener: a peer that holds ``max_connections`` idle connections there (reopened
    every ``idle_timeout_seconds``) makes the check fail, so the orchestrator kills and
    restarts toolwatch, every listener and the buffered traces with it. Before the bound,
    the same 512 connections left ``/healthz`` answering. Should: the liveness check from
    loopback is still answered (a reserve kept for loopback peers, or probes exempt)."""
    server = start_server(ingest__max_connections=8)
    host, port = server.address("metrics").rsplit(":", 1)
    held = [socket.create_connection((host, int(port)), timeout=5) for _ in range(8)]
    try:
        for _ in range(3):
            server.call(lambda: None)
        assert healthcheck.check(host, int(port)) == 200
    finally:
        for sock in held:
            sock.close()
