"""Review: under mutual TLS, an OTLP client refused for its client certificate at the
handshake (none, expired, or signed by another CA) is not counted anywhere.

``toolwatch_auth_failures_total`` says it counts "requests refused for their credentials: a
missing or wrong bearer token or client certificate", and ToolwatchExportsUnauthenticated,
built on it, says toolwatch "refuses OTLP exports ... for a missing or wrong bearer token or a
client certificate it does not accept". On the gRPC and OTLP/HTTP listeners a client
certificate is required at the handshake (only the metrics listener lets a client without one
in, and counts it), so these refusals happen below the application: after a client CA
rotation that did not reach the exporters, or an exporter certificate that expired, every
export fails while the counter stays at 0, the alert never fires, and toolwatch logs nothing
(gRPC core's handshake lines are under ``GRPC_VERBOSITY=ERROR``; asyncio logs a failed
handshake at DEBUG). The only sign left is traffic that stopped.
"""

from __future__ import annotations

import datetime
import urllib.error
from pathlib import Path

import grpc
import pytest

from tests.integration.test_security import (
    AUTH_FAILURES,
    Pki,
    Start,
    client_context,
    grpc_credentials,
    post_traces,
    raw_export,
    tls,
)

_DAY = datetime.timedelta(days=1)


def _expired_client(pki: Pki) -> tuple[bytes, bytes]:
    """A client certificate the client CA signed, expired yesterday, and its key (PEM)."""
    now = datetime.datetime.now(datetime.UTC)
    issued = pki.clients.issue_cert(
        "agent.example", not_before=now - 30 * _DAY, not_after=now - _DAY
    )
    return issued.cert_chain_pems[0].bytes(), issued.private_key_pem.bytes()


def test_grpc_clients_refused_at_the_handshake_are_counted(start_server: Start, pki: Pki) -> None:
    server = start_server(**tls(pki, mutual=True))
    expired_cert, expired_key = _expired_client(pki)
    expired = grpc.ssl_channel_credentials(pki.read("ca"), expired_key, expired_cert)
    for credentials in (grpc_credentials(pki), expired, grpc_credentials(pki, "rogue")):
        assert raw_export(server, credentials) == grpc.StatusCode.UNAVAILABLE
    assert raw_export(server, grpc_credentials(pki, "client")) == grpc.StatusCode.OK
    assert server.sample(AUTH_FAILURES, {"listener": "grpc"}) == 3


def test_otlp_http_clients_refused_at_the_handshake_are_counted(
    start_server: Start, pki: Pki, tmp_path: Path
) -> None:
    server = start_server(**tls(pki, mutual=True))
    expired_cert, expired_key = _expired_client(pki)
    expired = client_context(pki)
    expired.load_cert_chain(*pki.client_files(tmp_path, expired_cert, expired_key))
    for context in (client_context(pki), expired, client_context(pki, "rogue")):
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            post_traces(server, context, token=None)
    assert post_traces(server, client_context(pki, client=True), token=None).status == 200
    assert server.sample(AUTH_FAILURES, {"listener": "http"}) == 3
