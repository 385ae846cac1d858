"""Review: a client CA taken out of ``tls.client_ca_file`` keeps serving the clients it
signed on every connection they opened before the reload, for as long as they keep it open.

The README has new connections take "only the new client CA" and goes as far as TLS 1.3 only
and no session tickets "so a client whose CA was taken out cannot get back in on an earlier
session"; yet a client that never disconnects needs no resumption. An OTLP exporter (the
Collector, the SDKs) holds one HTTP/2 connection for days, and the gRPC servers set no
``grpc.max_connection_age_ms``; an HTTPS keep-alive connection lives as long as requests
come within ``ingest.idle_timeout_seconds``. So taking a compromised or retired CA out, the
one way mutual TLS offers to shut its clients out (there is no CRL), does not shut out the
ones connected, and nothing (log, metric) says they are still in. Bearer tokens, by
contrast, are checked on every call, and a findings stream is ended when its token goes.
"""

from __future__ import annotations

import http.client
import os
from pathlib import Path

import grpc
import trustme
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from tests.integration.conftest import RunningServer
from tests.integration.test_security import Pki, Start, client_context, tls

_EMPTY_EXPORT = trace_service_pb2.ExportTraceServiceRequest()
#: A connection of its own per channel: none shared with another channel of the test.
_OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]


def _export(channel: grpc.Channel) -> grpc.StatusCode:
    stub = trace_service_pb2_grpc.TraceServiceStub(channel)  # type: ignore[no-untyped-call]
    try:
        stub.Export(_EMPTY_EXPORT, timeout=10)
    except grpc.RpcError as error:
        code: grpc.StatusCode = error.code()
        return code
    return grpc.StatusCode.OK


def _server_trusting_a_rotatable_client_ca(
    start_server: Start, pki: Pki, tmp_path: Path
) -> tuple[RunningServer, Path]:
    client_ca = tmp_path / "client-ca.pem"
    client_ca.write_bytes(pki.read("client_ca"))
    server = start_server(
        **tls(pki),
        security__tls__client_ca_file=str(client_ca),
        security__tls__reload_seconds=30,
    )
    return server, client_ca


def _take_the_client_ca_out(server: RunningServer, client_ca: Path) -> None:
    """Replace the client CA with another (as a Secret update does) and let both gRPC and the
    HTTPS listeners take it."""
    staged = client_ca.with_suffix(".new")
    trustme.CA().cert_pem.write_to_path(str(staged))
    os.replace(staged, client_ca)
    server.clock.advance(30)
    server.call(server.app.tick)


def test_a_grpc_connection_opened_before_its_client_ca_was_taken_out_is_refused(
    start_server: Start, pki: Pki, tmp_path: Path
) -> None:
    server, client_ca = _server_trusting_a_rotatable_client_ca(start_server, pki, tmp_path)
    target = server.address("grpc")
    credentials = grpc.ssl_channel_credentials(
        pki.read("ca"), pki.read("client_key"), pki.read("client_cert")
    )
    with grpc.secure_channel(target, credentials, _OWN_CONNECTION) as connected:
        assert _export(connected) == grpc.StatusCode.OK

        _take_the_client_ca_out(server, client_ca)
        with grpc.secure_channel(target, credentials, _OWN_CONNECTION) as fresh:
            assert _export(fresh) == grpc.StatusCode.UNAVAILABLE  # the handshake fails

        assert _export(connected) != grpc.StatusCode.OK


def test_an_https_connection_opened_before_its_client_ca_was_taken_out_is_refused(
    start_server: Start, pki: Pki, tmp_path: Path
) -> None:
    server, client_ca = _server_trusting_a_rotatable_client_ca(start_server, pki, tmp_path)
    host, _, port = server.address("http").rpartition(":")
    body = _EMPTY_EXPORT.SerializeToString()
    headers = {"Content-Type": "application/x-protobuf"}
    connection = http.client.HTTPSConnection(
        host, int(port), context=client_context(pki, client=True), timeout=10
    )
    try:
        connection.request("POST", "/v1/traces", body, headers)
        first = connection.getresponse()
        assert (first.status, first.read()) == (200, b"")
        assert not first.will_close

        _take_the_client_ca_out(server, client_ca)
        connection.request("POST", "/v1/traces", body, headers)
        assert connection.getresponse().status != 200
    finally:
        connection.close()
