"""Bearer tokens on the gRPC and HTTP listeners: refused, counted, rotated by reloading the
file."""

from __future__ import annotations

import os
from pathlib import Path

import grpc
from google.rpc import code_pb2, status_pb2
from grpc_health.v1 import health_pb2
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.integration.conftest import StartServer
from tests.integration.otlp_support import refund_spans
from tests.integration.pki_support import TOKEN, Pki
from tests.integration.security_support import (
    AUTH_FAILURES,
    assert_one_refund_trace,
    auth,
    bearer,
    client_context,
    grpc_credentials,
    health_check,
    health_watch,
    post_traces,
    raw_export,
    send_grpc,
    send_http,
    tls,
)


def test_grpc_without_the_right_token_is_unauthenticated_and_counted(
    start_server: StartServer, pki: Pki
) -> None:
    server = start_server(**tls(pki), **auth(pki.token_file))
    credentials = grpc_credentials(pki)
    assert raw_export(server, credentials) == grpc.StatusCode.UNAUTHENTICATED
    assert raw_export(server, credentials, bearer("wrong")) == grpc.StatusCode.UNAUTHENTICATED
    assert raw_export(server, credentials, (("authorization", TOKEN),)) == (
        grpc.StatusCode.UNAUTHENTICATED
    )
    assert server.sample(AUTH_FAILURES, {"listener": "grpc"}) == 3
    assert server.sample("toolwatch_spans_received_total", {"transport": "grpc"}) == 0
    # kubelet gRPC probes send no token: the health service stays open.
    status = health_check(server.address("grpc"), credentials)
    assert status == health_pb2.HealthCheckResponse.SERVING

    result = send_grpc(server, refund_spans(), credentials, token=TOKEN)
    assert result is SpanExportResult.SUCCESS
    assert_one_refund_trace(server)
    assert server.sample(AUTH_FAILURES, {"listener": "grpc"}) == 3


def test_a_health_watch_stream_needs_a_token_where_check_does_not(
    start_server: StartServer, pki: Pki
) -> None:
    """A Watch lasts as long as its caller likes: open to anyone who can connect, any number
    of them could be held. Probes call Check."""
    server = start_server(**tls(pki), **auth(pki.token_file))
    credentials, target = grpc_credentials(pki), server.address("grpc")

    assert health_watch(target, credentials) == grpc.StatusCode.UNAUTHENTICATED
    assert server.sample(AUTH_FAILURES, {"listener": "grpc"}) == 1
    assert health_watch(target, credentials, bearer(TOKEN)) == (
        health_pb2.HealthCheckResponse.SERVING
    )
    assert health_check(target, credentials) == health_pb2.HealthCheckResponse.SERVING
    assert server.sample(AUTH_FAILURES, {"listener": "grpc"}) == 1


def test_http_without_the_right_token_is_401_and_counted(
    start_server: StartServer, pki: Pki
) -> None:
    server = start_server(**tls(pki), **auth(pki.token_file))
    context = client_context(pki)
    # The last two go out as bytes that are not UTF-8 (http.client writes latin-1). OTLP:
    # the body of every error answer is a google.rpc.Status; this one says only its code.
    unauthenticated = status_pb2.Status(code=code_pb2.UNAUTHENTICATED).SerializeToString()
    for token in (None, "wrong", "s3cr\xe9t", "\xff\xfe"):
        answer = post_traces(server, context, token)
        assert (answer.status, answer.headers["WWW-Authenticate"], answer.body) == (
            401,
            'Bearer realm="toolwatch"',
            unauthenticated,
        )
        assert answer.headers["Content-Type"] == "application/x-protobuf"
    assert server.sample(AUTH_FAILURES, {"listener": "http"}) == 4
    assert send_http(server, refund_spans(), pki) is SpanExportResult.FAILURE

    assert send_http(server, refund_spans(), pki, token=TOKEN) is SpanExportResult.SUCCESS
    assert_one_refund_trace(server)
    assert server.sample(AUTH_FAILURES, {"listener": "http"}) == 5


def test_a_rotated_token_file_applies_after_reload_seconds(
    start_server: StartServer, tmp_path: Path
) -> None:
    token_file = tmp_path / "tokens"
    token_file.write_text("old-token\n")
    server = start_server(**auth(token_file, security__auth__reload_seconds=30))
    assert raw_export(server, metadata=bearer("old-token")) == grpc.StatusCode.OK

    staging = tmp_path / "tokens.new"
    staging.write_text("new-token\n")
    os.replace(staging, token_file)
    server.clock.advance(29)
    assert raw_export(server, metadata=bearer("old-token")) == grpc.StatusCode.OK
    assert raw_export(server, metadata=bearer("new-token")) == grpc.StatusCode.UNAUTHENTICATED

    server.clock.advance(1)
    assert raw_export(server, metadata=bearer("new-token")) == grpc.StatusCode.OK
    assert raw_export(server, metadata=bearer("old-token")) == grpc.StatusCode.UNAUTHENTICATED
    assert server.sample(AUTH_FAILURES, {"listener": "grpc"}) == 2
