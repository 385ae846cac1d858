"""Client CA files whose anchor is no CA to OpenSSL's ``X509_check_ca`` (moved from the
review of 745c865): gRPC (BoringSSL) trusts every certificate of ``root_certificates`` as an
anchor, and the findings stream follows whatever its handshake decides."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import trustme
from cryptography import x509

from tests.integration.conftest import StartServer
from tests.integration.security_support import AUTH_FAILURES
from tests.integration.stream_ca_helpers import (
    certificate,
    common_name,
    key,
    key_pem,
    pem,
    serving,
    through_a_removal,
)
from toolwatch.sinks.stream.protocol import CLIENT_CAS_CHANGED

#: (client CA file, client certificate, its key), PEM.
Identity = tuple[bytes, bytes, bytes]


def _ca_without_extensions() -> Identity:
    ca_key, client_key = key(), key()
    ca = certificate(common_name("Client CA"), ca_key, common_name("Client CA"), ca_key)
    client = certificate(common_name("agent"), client_key, common_name("Client CA"), ca_key)
    return pem(ca), pem(client), key_pem(client_key)


def _pinned_self_signed_client() -> Identity:
    client_key = key()
    not_a_ca = [x509.BasicConstraints(ca=False, path_length=None)]
    client = certificate(
        common_name("agent"), client_key, common_name("agent"), client_key, not_a_ca
    )
    return pem(client), pem(client), key_pem(client_key)


SHAPES: dict[str, Callable[[], Identity]] = {
    "a v3 CA with neither basicConstraints nor keyUsage": _ca_without_extensions,
    "a self-signed client certificate pinned as the client CA": _pinned_self_signed_client,
}


@pytest.mark.parametrize("shape", SHAPES)
def test_a_client_certificate_grpc_trusts_streams_and_is_back_after_another_ca_goes(
    start_server: StartServer, tmp_path: Path, shape: str
) -> None:
    """Was: the client CAs were taken from ``SSLContext.get_ca_certs()``, which lists only
    what passes ``X509_check_ca``, so toolwatch's own check found no anchor for these
    clients and ended every subscription UNAUTHENTICATED as it subscribed, counted, though
    the handshake had taken it. Now: no certificate is checked but by the handshake; the
    stream gets its findings, and when a reload takes another CA out of the file it is ended
    UNAVAILABLE like every stream, and its client, connecting again, is let back in by the
    handshake. Nothing counted as refused."""
    client_ca, cert, private = SHAPES[shape]()
    other = trustme.CA().cert_pem.bytes()
    server, pki, path = serving(start_server, tmp_path, client_ca + other)
    seen = through_a_removal(server, pki, path, (cert, private), kept=client_ca)
    assert seen == ["first", "ticked", f"UNAVAILABLE: {CLIENT_CAS_CHANGED}", "again"]
    assert server.sample(AUTH_FAILURES, {"listener": "stream"}) == 0
