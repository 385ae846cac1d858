"""Certificates whose names ``cryptography`` cannot read, which gRPC's handshake takes (moved
from the review of 745c865): a T61String holding Latin-1 (as legacy CAs wrote ``O=Müller
AG``), which OpenSSL and BoringSSL read as Latin-1 and chain by canonical form. Certificates
made with ``cryptography``, a name's bytes replaced and signed again."""

from __future__ import annotations

from pathlib import Path

import trustme
from cryptography import x509
from cryptography.x509.name import _ASN1Type
from cryptography.x509.oid import NameOID

from tests.integration.conftest import StartServer
from tests.integration.security_support import AUTH_FAILURES
from tests.integration.stream_ca_helpers import (
    Key,
    certificate,
    channel,
    common_name,
    key,
    key_pem,
    outcome,
    pem,
    publish,
    reload_client_cas,
    serving,
    subscribe,
    subscribers_once_all_ended,
    through_a_removal,
    with_bytes_replaced,
)
from toolwatch.sinks.stream.protocol import CLIENT_CAS_CHANGED

IS_A_CA = [x509.BasicConstraints(ca=True, path_length=None)]
#: ``O=Mxller AG`` as T61String; then its ``x`` made Latin-1 ``ü``.
PLACEHOLDER, LATIN_1 = b"\x14\x09Mxller AG", b"\x14\x09M\xfcller AG"
ENDED = f"UNAVAILABLE: {CLIENT_CAS_CHANGED}"


def _legacy_name(organization_type: _ASN1Type, organization: str = "Mxller AG") -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization, _type=organization_type),
            x509.NameAttribute(NameOID.COMMON_NAME, "Client CA"),
        ]
    )


def _client_of(ca_name: x509.Name, ca_key: Key) -> tuple[bytes, bytes]:
    """A client certificate ``ca_key`` signed, its issuer ``O=Müller AG`` in a Latin-1
    T61String, and its key (PEM)."""
    client_key = key()
    client = certificate(common_name("agent"), client_key, ca_name, ca_key)
    return pem(with_bytes_replaced(client, ca_key, PLACEHOLDER, LATIN_1)), key_pem(client_key)


def test_a_client_of_a_legacy_ca_streams_and_is_back_after_another_ca_goes(
    start_server: StartServer, tmp_path: Path
) -> None:
    """Was: toolwatch's own check read the names outside its ``try``, so this client's
    ``Subscribe`` failed UNKNOWN ("error parsing asn1 value") and its subscription was never
    let go (enough attempts filled ``output.stream_max_subscribers``). Now: no name is read;
    the stream gets its findings, a reload that takes another CA out ends it UNAVAILABLE,
    the handshake lets its client back in, and once the calls end no subscriber is left.
    The client CA file: one CA named ``O=Müller AG`` in a Latin-1 T61String."""
    ca_key, name = key(), _legacy_name(_ASN1Type.T61String)
    ca = with_bytes_replaced(
        certificate(name, ca_key, name, ca_key, IS_A_CA), ca_key, PLACEHOLDER, LATIN_1
    )
    other = trustme.CA().cert_pem.bytes()
    server, pki, path = serving(start_server, tmp_path, pem(ca) + other)
    seen = through_a_removal(server, pki, path, _client_of(name, ca_key), kept=pem(ca))
    assert (seen, subscribers_once_all_ended(server)) == (
        ["first", "ticked", ENDED, "again"],
        0,
    )
    assert server.sample(AUTH_FAILURES, {"listener": "stream"}) == 0


def test_a_removed_cas_client_is_refused_at_its_handshake_beside_an_unreadable_one(
    start_server: StartServer, tmp_path: Path
) -> None:
    """Was: the check of the unreadable client, subscribed first, raised out of every
    recheck, so taking trustme's CA out ended no stream (the other client's streamed on) and
    the reload's tick raised. Now: the tick goes through and ends both streams UNAVAILABLE;
    connecting again, the client of the CA kept (``O=Müller AG`` in UTF8String; its
    certificate names it in a Latin-1 T61String, which BoringSSL chains by canonical form)
    is let in, and trustme's client is refused at its handshake."""
    ca_key, readable = key(), _legacy_name(_ASN1Type.UTF8String, "Müller AG")
    ca = certificate(readable, ca_key, readable, ca_key, IS_A_CA)
    legacy_cert, legacy_key = _client_of(_legacy_name(_ASN1Type.T61String), ca_key)
    other_ca = trustme.CA()
    other = other_ca.issue_cert("agent.example")
    other_cert, other_key = other.cert_chain_pems[0].bytes(), other.private_key_pem.bytes()
    server, pki, path = serving(start_server, tmp_path, pem(ca) + other_ca.cert_pem.bytes())
    with (
        channel(server, pki, legacy_cert, legacy_key) as legacy_channel,
        channel(server, pki, other_cert, other_key) as other_channel,
    ):
        legacy_call, other_call = subscribe(legacy_channel), subscribe(other_channel)
        publish(server, "first")
        before = [outcome(legacy_call), outcome(other_call)]
        tick = reload_client_cas(server, path, pem(ca))  # trustme's CA taken out
        ended = [outcome(legacy_call), outcome(other_call)]
    with (
        channel(server, pki, legacy_cert, legacy_key) as legacy_channel,
        channel(server, pki, other_cert, other_key) as other_channel,
    ):
        legacy_call, other_call = subscribe(legacy_channel), subscribe(other_channel)
        publish(server, "again")
        again = [outcome(legacy_call), outcome(other_call)]
        legacy_call.cancel()
    assert (before, tick, ended) == (["first", "first"], "ticked", [ENDED, ENDED])
    assert again[0] == "again"
    assert again[1].startswith("UNAVAILABLE: failed to connect to all addresses"), again[1]
    assert server.sample(AUTH_FAILURES, {"listener": "stream"}) == 0
