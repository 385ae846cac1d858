"""The gRPC health service under kubelet's probes and idle checks, and the connections an
error answer, unfinished headers or a body given up at the grace leave."""

from __future__ import annotations

import http.client
import logging
import socket
import time
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.integration.conftest import RunningServer, StartServer
from tests.integration.otlp_support import (
    PROTOBUF,
    QUIET,
    REQUESTS_COUNTED,
    SLOW,
    TRACE_SERVICE,
    HeldCall,
    grpc_channel,
    health_status,
    stalled_body,
    stopping,
)
from toolwatch.bearer_tokens import HEALTH_CHECK
from toolwatch.ingest.grpc_health import MAX_READ_SECONDS, MAX_WAITING, READ_TURNS


def test_grpc_health_service_answers_serving(start_server: StartServer) -> None:
    server = start_server()
    with grpc_channel(server) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        statuses = [
            health.Check(health_pb2.HealthCheckRequest(service=name), timeout=10).status
            for name in ("", TRACE_SERVICE)
        ]
        with pytest.raises(grpc.RpcError) as unknown:
            health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=10)
    assert statuses == [health_pb2.HealthCheckResponse.SERVING] * 2
    assert unknown.value.code() is grpc.StatusCode.NOT_FOUND


def test_a_health_check_larger_than_a_service_name_is_refused_undecoded(
    start_server: StartServer,
) -> None:
    """The listener takes Export bodies of ``max_request_bytes``; a HealthCheckRequest is a
    service name (grpc_health.MAX_REQUEST_BYTES)."""
    server = start_server(**QUIET)
    with grpc_channel(server) as channel:
        check = health_pb2_grpc.HealthStub(channel).Check
        with pytest.raises(grpc.RpcError) as refused:
            check(health_pb2.HealthCheckRequest(service="x" * 2048), timeout=10)
    assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert refused.value.details() == "a HealthCheckRequest is at most 1024 bytes"
    assert health_status(server) == health_pb2.HealthCheckResponse.SERVING


def test_a_health_check_that_never_sends_its_request_gives_its_turn_back(
    start_server: StartServer,
) -> None:
    """Health requests are read in a few turns: a check whose request does not come is
    answered at the read timeout, as an Export is, and its turn given back."""
    server = start_server(**SLOW)
    stalled = HeldCall(server, [], HEALTH_CHECK, health_pb2.HealthCheckResponse.FromString)

    status = health_status(server)  # read in another turn and answered

    error = stalled.future.exception(timeout=10)  # the server ends it; the client sent nothing
    stalled.cancel()
    assert isinstance(error, grpc.RpcError)
    assert error.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    assert error.details() == "the request was not received within 0.2 s"
    assert status == health_pb2.HealthCheckResponse.SERVING


def test_a_health_check_is_waited_for_a_fraction_of_a_probes_timeout_at_most(
    start_server: StartServer,
) -> None:
    """With the default 30 s read timeout, a check that sends nothing holds its turn (and
    delays the checks queued behind it) for 0.2 s, not 30."""
    server = start_server()
    stalled = HeldCall(server, [], HEALTH_CHECK, health_pb2.HealthCheckResponse.FromString)

    status = health_status(server)

    error = stalled.future.exception(timeout=10)
    stalled.cancel()
    assert isinstance(error, grpc.RpcError)
    assert error.details() == f"the request was not received within {MAX_READ_SECONDS:g} s"
    assert status == health_pb2.HealthCheckResponse.SERVING


KUBELET_PROBE_TIMEOUT = 1.0  # a gRPC probe's default timeoutSeconds


def probe_behind_idle_checks(server: RunningServer, idle_calls: int) -> Any:
    """A kubelet-like probe (its request sent at once, 1 s deadline) made while
    ``idle_calls`` checks are open without sending their request: its status or error code."""
    idle = [
        HeldCall(server, [], HEALTH_CHECK, health_pb2.HealthCheckResponse.FromString)
        for _ in range(idle_calls)
    ]
    time.sleep(0.05)  # the calls reached the server: in a turn, or waiting for one
    try:
        with grpc_channel(server) as channel:
            check = health_pb2_grpc.HealthStub(channel).Check
            try:
                return check(health_pb2.HealthCheckRequest(), timeout=KUBELET_PROBE_TIMEOUT).status
            except grpc.RpcError as error:
                return error.code()
    finally:
        for call in idle:
            call.cancel()


def test_two_idle_health_calls_do_not_fail_a_kubelet_probe(start_server: StartServer) -> None:
    """With one read turn held up to 1 s, two checks sending nothing made the probe queued
    behind them miss kubelet's 1 s timeout (DEADLINE_EXCEEDED)."""
    server = start_server()
    status = probe_behind_idle_checks(server, 2)
    assert status == health_pb2.HealthCheckResponse.SERVING


def test_a_health_probe_behind_as_many_idle_checks_as_may_wait_is_answered_in_time(
    start_server: StartServer,
) -> None:
    """The most calls that may wait besides the probe, all sending nothing, hold the turns
    for (MAX_WAITING - READ_TURNS) / READ_TURNS * MAX_READ_SECONDS (0.6 s) before the probe
    is read: under kubelet's timeout."""
    assert (MAX_WAITING - READ_TURNS) / READ_TURNS * MAX_READ_SECONDS < KUBELET_PROBE_TIMEOUT
    server = start_server()
    status = probe_behind_idle_checks(server, MAX_WAITING - 1)
    assert status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/v1/traces"), ("POST", "/v1/metrics"), ("POST", "/v1/trace")]
)
def test_an_error_answer_keeps_the_connection_for_the_next_export(
    start_server: StartServer, method: str, path: str
) -> None:
    """OTLP clients keep their connection alive: a 404 or 405 (a mistyped path) must not
    close it, or the next export pipelined on it is lost."""
    server = start_server()
    host, port = server.address("http").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request(method, path, body=b"" if method == "POST" else None)
        wrong = connection.getresponse()
        wrong.read()
        assert (wrong.status, wrong.getheader("Connection")) in ((404, None), (405, None))
        sock = connection.sock
        connection.request("POST", "/v1/traces", body=b"", headers={"Content-Type": PROTOBUF})
        right = connection.getresponse()
        right.read()
        assert right.status == 200
        assert connection.sock is sock  # the same connection, not a new one
    finally:
        connection.close()


def test_a_connection_that_never_finishes_its_headers_is_closed(
    start_server: StartServer,
) -> None:
    """Slowloris: a client that opens connections and sends half a request head must not
    hold their sockets (aiohttp's own limit is an hour): closed at ingest.idle_timeout_seconds.
    Real time is the point of this test: 0.5 s."""
    server = start_server(ingest__idle_timeout_seconds=0.5)
    host, port = server.address("http").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as client:
        client.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n")
        assert client.recv(100) == b""  # closed by the server, before the 10 s timeout


def test_a_body_given_up_at_the_grace_logs_no_unhandled_error(
    start_server: StartServer, caplog: pytest.LogCaptureFixture
) -> None:
    """``InFlight.abandon`` leaves ReadAbandonedError set on aiohttp's payload. After the
    handler's 503, aiohttp's lingering read of the unread rest of the body calls
    ``payload.readany()``, which raises it: aiohttp logs 'Unhandled exception' at ERROR with
    a traceback (ProtocolErrorLog passes it on), once per body given up."""
    server = start_server(**QUIET)
    with stalled_body(server) as client:
        with caplog.at_level(logging.DEBUG):
            stopping(server, grace=0.2).result(10)
        answer = client.recv(65536).decode("latin-1")

    assert answer.startswith("HTTP/1.1 503 Service Unavailable")
    aborted = {"transport": "http", "outcome": "aborted"}
    assert server.sample(REQUESTS_COUNTED, aborted) == 1
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [(r.name, r.getMessage(), r.exc_info and r.exc_info[0]) for r in errors]
