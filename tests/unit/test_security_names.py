"""``security.tls.client_names``: the names read from a client certificate, and the gRPC
check in front of every handler shape (a real TLS server on port 0, real certificates)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from tests.certificates import alt_names, client_certificate, with_edi_party_name
from toolwatch.client_certificates import ClientNameInterceptor, ClientNames
from toolwatch.client_names import certificate_names
from toolwatch.model import ManualClock
from toolwatch.senders import SenderLog

CA = trustme.CA()


def names_of(common_names: list[str], alternative: list[str]) -> frozenset[str]:
    cert, _ = client_certificate(CA, common_names, alt_names(*alternative))
    der = x509.load_pem_x509_certificate(cert).public_bytes(serialization.Encoding.DER)
    assert certificate_names(der) == certificate_names(cert)  # DER (HTTPS) as PEM (gRPC)
    return certificate_names(cert)


def test_every_common_name_and_dns_uri_and_email_name_but_no_address() -> None:
    found = names_of(
        ["a", "b"],
        ["dns:c.example", "uri:spiffe://td/ns/x/sa/y", "email:e@example.com", "ip:10.0.0.1"],
    )
    assert found == {"a", "b", "c.example", "spiffe://td/ns/x/sa/y", "e@example.com"}


def test_a_name_is_read_whole_past_a_nul_byte() -> None:
    assert names_of(["collector\x00.evil"], ["dns:c.example\x00.evil"]) == {
        "collector\x00.evil",
        "c.example\x00.evil",
    }


def test_a_certificate_without_names_or_unreadable_names_no_client() -> None:
    assert names_of([], []) == frozenset()
    assert certificate_names(b"not a certificate") == frozenset()
    # OpenSSL verifies it; cryptography cannot read its alternative names: none is taken
    cert, _ = client_certificate(CA, ["collector"], with_edi_party_name("c.example"))
    assert certificate_names(cert) == frozenset()
    assert not ClientNames(["a"]).admit(None)
    assert not ClientNames(["a"]).admit_grpc({"x509_common_name": [b"a"]})  # no certificate


class Counted:
    def __init__(self) -> None:
        self.failures: list[str] = []

    def auth_failed(self, listener: str) -> None:
        self.failures.append(listener)


async def unary(request: bytes, context: Any) -> bytes:
    return b"unary:" + request


async def stream_yielded(request: bytes, context: Any) -> AsyncIterator[bytes]:
    for n in range(2):
        yield b"yielded%d" % n


async def stream_written(request: bytes, context: Any) -> None:
    for n in range(2):
        await context.write(b"written%d" % n)


async def client_stream(requests: AsyncIterator[bytes], context: Any) -> bytes:
    return b"read:%d" % len([r async for r in requests])


async def both_streams(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
    async for request in requests:
        yield b"echo:" + request


HANDLERS = {
    "/t/unary": grpc.unary_unary_rpc_method_handler(unary),
    "/t/stream_yielded": grpc.unary_stream_rpc_method_handler(stream_yielded),
    "/t/stream_written": grpc.unary_stream_rpc_method_handler(stream_written),
    "/t/client_stream": grpc.stream_unary_rpc_method_handler(client_stream),
    "/t/both_streams": grpc.stream_stream_rpc_method_handler(both_streams),
}
ANSWERS: dict[str, Any] = {
    "/t/unary": b"unary:x",
    "/t/stream_yielded": [b"yielded0", b"yielded1"],
    "/t/stream_written": [b"written0", b"written1"],
    "/t/client_stream": b"read:2",
    "/t/both_streams": [b"echo:a", b"echo:b"],
}


class Methods(grpc.GenericRpcHandler):
    def service(self, details: Any) -> Any:
        return HANDLERS.get(details.method)


async def call(channel: grpc.aio.Channel, method: str, send: bool) -> Any:
    """``method``'s answer, or the code that refused it; a streaming request sends two
    messages, or (``send`` false) none: a client still sending when the server aborts can
    see INTERNAL instead of the server's code, whoever aborts."""
    requests = [b"a", b"b"] if send else []
    try:
        if method.startswith("/t/unary"):
            return await channel.unary_unary(method)(b"x", timeout=5)
        if method.startswith("/t/stream"):
            return [r async for r in channel.unary_stream(method)(b"x", timeout=5)]
        if method == "/t/client_stream":
            return await channel.stream_unary(method)(iter(requests), timeout=5)
        return [r async for r in channel.stream_stream(method)(iter(requests), timeout=5)]
    except grpc.aio.AioRpcError as error:
        return error.code()


async def answers(common_name: str) -> tuple[dict[str, Any], list[str]]:
    server_ca = trustme.CA()
    leaf = server_ca.issue_cert("localhost")
    metrics = Counted()
    server = grpc.aio.server(
        interceptors=[
            ClientNameInterceptor(
                ClientNames(["collector"]), metrics, "grpc", senders=SenderLog(ManualClock())
            )
        ]
    )
    server.add_generic_rpc_handlers((Methods(),))
    credentials = grpc.ssl_server_credentials(
        [(leaf.private_key_pem.bytes(), leaf.cert_chain_pems[0].bytes())],
        root_certificates=CA.cert_pem.bytes(),
        require_client_auth=True,
    )
    port = server.add_secure_port("127.0.0.1:0", credentials)
    await server.start()
    cert, key = client_certificate(CA, [common_name])
    channel_credentials = grpc.ssl_channel_credentials(server_ca.cert_pem.bytes(), key, cert)
    options = (("grpc.ssl_target_name_override", "localhost"),)
    try:
        async with grpc.aio.secure_channel(
            f"127.0.0.1:{port}", channel_credentials, options
        ) as channel:
            send = common_name == "collector"
            found = {method: await call(channel, method, send) for method in HANDLERS}
            found["/t/missing"] = await call(channel, "/t/unary_missing", send)
    finally:
        await server.stop(None)
    return found, metrics.failures


def test_an_accepted_client_is_served_by_every_handler_shape() -> None:
    found, failures = asyncio.run(answers("collector"))
    assert found == {**ANSWERS, "/t/missing": grpc.StatusCode.UNIMPLEMENTED}
    assert failures == []


def test_another_client_is_denied_by_every_handler_shape_and_counted_once_each() -> None:
    """A method no service serves too: the client learns nothing of what is served (nor,
    behind a token check, whether its token was good)."""
    found, failures = asyncio.run(answers("someone-else"))
    assert found == dict.fromkeys([*HANDLERS, "/t/missing"], grpc.StatusCode.PERMISSION_DENIED)
    assert failures == ["grpc"] * (len(HANDLERS) + 1)


def sync_unary(request: bytes, context: Any) -> bytes:
    return request


def test_a_sync_handler_is_refused_for_it_would_block_the_event_loop() -> None:
    interceptor = ClientNameInterceptor(
        ClientNames(["collector"]), Counted(), "grpc", senders=SenderLog(ManualClock())
    )
    with pytest.raises(TypeError, match=r"serves grpc\.aio handlers"):
        interceptor._checked(grpc.unary_unary_rpc_method_handler(sync_unary))


@pytest.mark.parametrize("certificate", [b"", b"-----BEGIN CERTIFICATE-----\nnot base64\n"])
def test_a_certificate_that_cannot_be_read_names_no_client(certificate: bytes) -> None:
    assert certificate_names(certificate) == frozenset()
