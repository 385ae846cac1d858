"""What the tests of a findings stream through a client CA's removal share: a real server
(``start_server``) with mutual TLS whose client CA file is replaced as a Secret update does it,
and real gRPC subscribers showing client certificates of trustme's CAs or, for certificates the
TLS stack takes and a certificate check of toolwatch's own (745c865's) refused, made at run
time with ``cryptography`` (shapes trustme does not issue). Those are valid from 2020 to 2100,
so that gRPC's handshake takes them whatever the clock. While the listener restarts, its
address can be taken as another process would take it (``being_written``, ``take_address``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import os
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.integration.conftest import RunningServer, StartServer
from tests.integration.pki_support import Pki, make_pki
from tests.integration.security_support import tls
from tests.integration.stream_support import make_finding, make_trace
from toolwatch._proto.toolwatch.v1 import findings_pb2, findings_pb2_grpc
from toolwatch.listeners import listening_socket

#: Seconds of the server's clock between two looks at its client CA file.
RELOAD_SECONDS = 30
NOT_BEFORE = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
NOT_AFTER = datetime.datetime(2100, 1, 1, tzinfo=datetime.UTC)
Key = ec.EllipticCurvePrivateKey


def key() -> Key:
    return ec.generate_private_key(ec.SECP256R1())


def common_name(value: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, value)])


def certificate(
    subject: x509.Name,
    subject_key: Key,
    issuer: x509.Name,
    issuer_key: Key,
    extensions: Sequence[x509.ExtensionType] = (),
) -> x509.Certificate:
    """A v3 certificate of ``subject_key`` signed by ``issuer_key``, with ``extensions``
    (critical) and no others."""
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(subject_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOT_BEFORE)
        .not_valid_after(NOT_AFTER)
    )
    for extension in extensions:
        builder = builder.add_extension(extension, critical=True)
    return builder.sign(issuer_key, hashes.SHA256())


def _der_length(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(body)]) + body


def _tlv(tag: int, body: bytes) -> bytes:
    return bytes([tag]) + _der_length(len(body)) + body


#: AlgorithmIdentifier ecdsa-with-SHA256 (RFC 5758 3.2), DER.
_ECDSA_SHA256 = bytes.fromhex("300a06082a8648ce3d040302")


def with_bytes_replaced(
    cert: x509.Certificate, signer: Key, old: bytes, new: bytes
) -> x509.Certificate:
    """``cert`` with ``old`` replaced by ``new`` (same length) in its TBSCertificate,
    signed again by ``signer``: encodings ``cryptography``'s builder does not write."""
    tbs = cert.tbs_certificate_bytes
    assert len(old) == len(new) and old in tbs
    tbs = tbs.replace(old, new)
    signature = signer.sign(tbs, ec.ECDSA(hashes.SHA256()))
    der = _tlv(0x30, tbs + _ECDSA_SHA256 + _tlv(0x03, b"\x00" + signature))
    return x509.load_der_x509_certificate(der)


def pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def key_pem(private: Key) -> bytes:
    return private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def channel(server: RunningServer, pki: Pki, cert: bytes, private: bytes) -> grpc.Channel:
    """A channel of its own connection to the stream, showing ``cert`` (PEM chain)."""
    credentials = grpc.ssl_channel_credentials(pki.read("ca"), private, cert)
    options = [("grpc.use_local_subchannel_pool", 1)]
    return grpc.secure_channel(server.address("stream"), credentials, options)


def ca_channel(
    address: str, pki: Pki, ca: trustme.CA, options: Sequence[tuple[str, Any]] = ()
) -> grpc.Channel:
    """A channel of its own connection to ``address``, showing a client certificate ``ca``
    signed; ``options``, gRPC's channel arguments, added."""
    leaf = ca.issue_cert("agent.example")
    credentials = grpc.ssl_channel_credentials(
        pki.read("ca"), leaf.private_key_pem.bytes(), leaf.cert_chain_pems[0].bytes()
    )
    return grpc.secure_channel(
        address, credentials, [("grpc.use_local_subchannel_pool", 1), *options]
    )


def subscribe(chan: grpc.Channel) -> Any:
    """A subscription whose headers have come, or whose call has ended: either way gRPC's
    handshake took the client certificate (required by the server's client CA file), and
    the servicer's ``Subscribe`` ran."""
    stub = findings_pb2_grpc.FindingsServiceStub(chan)  # type: ignore[no-untyped-call]
    call = stub.Subscribe(findings_pb2.SubscribeRequest(), timeout=30)
    call.initial_metadata()
    return call


def publish(server: RunningServer, explanation: str) -> None:
    finding = make_finding(explanation=explanation)
    server.call(lambda: server.app.broker.publish(make_trace(), [finding]))


def outcome(call: Any) -> str:
    """The next finding's explanation, or how the call ended (``CODE: details``)."""
    try:
        return str(next(call).explanation)
    except grpc.RpcError as error:
        return f"{error.code().name}: {error.details()}"


def subscribers_once_all_ended(server: RunningServer) -> int:
    """The broker's subscriber count once it reaches 0 (every call here has ended), or
    after 3 s if it does not."""
    waiting = asyncio.run_coroutine_threadsafe(
        server.app.broker.wait_for_subscribers(0), server.loop
    )
    try:
        waiting.result(timeout=3)
    except concurrent.futures.TimeoutError:
        waiting.cancel()
    return server.call(lambda: server.app.broker.subscriber_count)


def listening_again(server: RunningServer) -> None:
    """Returns once the stream listener is not restarting (a client CA taken out closes
    every connection and listens again: ``StreamListener``), so that a client's next
    connection is answered by the new server, not refused while it binds."""
    listener = server.app.stream_listener
    assert listener is not None
    asyncio.run_coroutine_threadsafe(listener.settled(), server.loop).result(timeout=10)


def being_written(server: RunningServer) -> bool:
    """Whether the one subscription open has a finding being written."""
    writing = server.call(lambda: [s.writing for s in server.app.broker.subscriptions])
    return len(writing) == 1 and writing[0] is not None


def take_address(address: str, taken: list[socket.socket]) -> bool:
    """Whether ``taken`` holds a listening socket on ``address`` (as another process would
    take it), taken now if the address is free."""
    if not taken:
        try:
            taken.append(listening_socket(address))
        except OSError:  # the server still listens there
            return False
    return True


def _put(path: Path, pem: bytes) -> None:
    """``pem`` at ``path``, put in place as a Secret update does (beside, renamed)."""
    staged = path.with_suffix(".new")
    staged.write_bytes(pem)
    os.replace(staged, path)


def write_cas(path: Path, cas: Sequence[trustme.CA]) -> None:
    """The certificates of ``cas`` as the client CA file ``path``, put in place as a Secret
    update does (beside, renamed)."""
    _put(path, b"".join(ca.cert_pem.bytes() for ca in cas))


def mutual_tls(pki: Pki, client_ca_file: Path) -> dict[str, Any]:
    """``start_server`` overrides for mutual TLS on every listener, the client CAs read from
    ``client_ca_file``, looked at every ``RELOAD_SECONDS`` of the server's clock."""
    return tls(
        pki,
        security__tls__client_ca_file=str(client_ca_file),
        security__tls__reload_seconds=RELOAD_SECONDS,
    )


def reload_client_cas(server: RunningServer, path: Path, pem: bytes) -> str:
    """``pem`` as the client CA file, put in place as a Secret update does (beside, renamed),
    and the server's tick that reloads it: ``"ticked"``, or what it raised; then the stream
    listener's restart, if the reload took a CA out (``listening_again``)."""
    _put(path, pem)
    server.clock.advance(RELOAD_SECONDS)
    try:
        server.call(server.app.tick)
    except Exception as error:  # what the tick loop would log and go on from
        return f"tick raised {type(error).__name__}"
    listening_again(server)
    return "ticked"


def serving(
    start_server: StartServer, tmp_path: Path, client_cas: bytes
) -> tuple[RunningServer, Pki, Path]:
    """A server with mutual TLS on every listener, its client CA file (returned) holding
    ``client_cas`` (PEM), looked at every ``RELOAD_SECONDS`` of its clock."""
    pki = make_pki(tmp_path)
    path = tmp_path / "client-ca.pem"
    path.write_bytes(client_cas)
    return start_server(**mutual_tls(pki, path)), pki, path


def through_a_removal(
    server: RunningServer, pki: Pki, path: Path, identity: tuple[bytes, bytes], kept: bytes
) -> list[str]:
    """What a client showing ``identity`` (PEM certificate chain, key) is sent: a finding
    once subscribed; then, as a reload leaves only ``kept`` in the client CA file ``path``,
    how the tick went and how its stream ended; then, subscribed again on a new connection
    (a new handshake), a finding, or how the call ended."""
    cert, private = identity
    with channel(server, pki, cert, private) as first:
        call = subscribe(first)
        publish(server, "first")
        seen = [outcome(call), reload_client_cas(server, path, kept), outcome(call)]
    with channel(server, pki, cert, private) as again:
        call = subscribe(again)
        publish(server, "again")
        seen.append(outcome(call))
        call.cancel()
    return seen
