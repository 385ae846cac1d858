"""A client certificate chained to its CA by OpenSSL's canonical name comparison (moved from
the review of 745c865): the findings stream follows whatever gRPC's handshake decides."""

from __future__ import annotations

from pathlib import Path

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


def test_a_client_whose_issuer_name_differs_from_its_cas_only_in_case_streams_on(
    start_server: StartServer, tmp_path: Path
) -> None:
    """Was: toolwatch's own check linked a certificate to its issuer by ``cryptography``'s
    exact comparison of names, where OpenSSL and BoringSSL chain by canonical form (case
    folded, spaces collapsed: RFC 5280 7.1), so a client whose certificate names its CA
    ``CN=client ca`` (the CA: ``CN=Client CA``) was ended UNAUTHENTICATED as it subscribed,
    counted, though the handshake had taken it. Now: no certificate is checked but by the
    handshake; the stream gets its findings, a reload that takes another CA out ends it
    UNAVAILABLE, and the handshake lets its client back in."""
    ca_key, client_key = key(), key()
    is_a_ca = [x509.BasicConstraints(ca=True, path_length=None)]
    ca = certificate(common_name("Client CA"), ca_key, common_name("Client CA"), ca_key, is_a_ca)
    client = certificate(common_name("agent"), client_key, common_name("client ca"), ca_key)
    other = trustme.CA().cert_pem.bytes()
    server, pki, path = serving(start_server, tmp_path, pem(ca) + other)
    seen = through_a_removal(server, pki, path, (pem(client), key_pem(client_key)), pem(ca))
    assert seen == ["first", "ticked", f"UNAVAILABLE: {CLIENT_CAS_CHANGED}", "again"]
    assert server.sample(AUTH_FAILURES, {"listener": "stream"}) == 0
