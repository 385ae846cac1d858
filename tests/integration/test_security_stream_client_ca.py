"""A findings stream lasts as long as its client runs, so its connection is never made again
(no ``ingest.max_connection_age_seconds`` there): when a reload takes a client CA out of
``tls.client_ca_file``, the streams whose client certificate no longer verifies against the
client CAs served are ended UNAUTHENTICATED and counted, as a revoked token's are; the others
stream on (``toolwatch.client_ca``). Real gRPC clients and ``toolwatch tail``, certificates
made at run time."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
import trustme

from tests.integration.conftest import RunningServer
from tests.integration.test_security import (
    AUTH_FAILURES,
    Pki,
    Start,
    make_pki,
    tail_during,
    tls,
    until_unsubscribed,
)
from tests.integration.test_stream import make_finding, make_trace, serve
from tests.integration.test_stream import subscribe as subscribe_aio
from toolwatch._proto.toolwatch.v1 import findings_pb2, findings_pb2_grpc
from toolwatch.sinks.stream import CERTIFICATE_REFUSED
from toolwatch.tail import StreamAccess

DROPPED = "toolwatch_stream_dropped_findings_total"
RELOAD_SECONDS = 30


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _write_client_cas(path: Path, cas: Sequence[trustme.CA]) -> None:
    """``cas`` as the client CA file, put in place as a Secret update does (beside, renamed)."""
    staged = path.with_suffix(".new")
    staged.write_bytes(b"".join(ca.cert_pem.bytes() for ca in cas))
    os.replace(staged, path)


def _reload_client_cas(server: RunningServer, path: Path, cas: Sequence[trustme.CA]) -> None:
    """Rewrite the client CA file and let the server's tick reload it."""
    _write_client_cas(path, cas)
    server.clock.advance(RELOAD_SECONDS)
    server.call(server.app.tick)


def _server(start_server: Start, pki: Pki, path: Path, **more: Any) -> RunningServer:
    return start_server(
        **tls(pki),
        security__tls__client_ca_file=str(path),
        security__tls__reload_seconds=RELOAD_SECONDS,
        **more,
    )


def _identity(ca: trustme.CA) -> tuple[bytes, bytes]:
    """A client certificate ``ca`` signed, and its key (PEM)."""
    leaf = ca.issue_cert("agent.example")
    return leaf.cert_chain_pems[0].bytes(), leaf.private_key_pem.bytes()


def _channel(server: RunningServer, pki: Pki, identity: tuple[bytes, bytes]) -> grpc.Channel:
    """A channel of its own connection to the stream, showing ``identity``."""
    cert, key = identity
    credentials = grpc.ssl_channel_credentials(pki.read("ca"), key, cert)
    options = [("grpc.use_local_subchannel_pool", 1)]
    return grpc.secure_channel(server.address("stream"), credentials, options)


def _subscribe(channel: grpc.Channel, **request: Any) -> Any:
    """A subscription, once the server has sent its headers (it is subscribed)."""
    stub = findings_pb2_grpc.FindingsServiceStub(channel)  # type: ignore[no-untyped-call]
    call = stub.Subscribe(findings_pb2.SubscribeRequest(**request), timeout=30)
    call.initial_metadata()
    return call


def _subscribe_later(channel: grpc.Channel) -> Any:
    """A subscription whose headers are not waited for (the call may fail first)."""
    stub = findings_pb2_grpc.FindingsServiceStub(channel)  # type: ignore[no-untyped-call]
    return stub.Subscribe(findings_pb2.SubscribeRequest(), timeout=30)


def _subscribers(server: RunningServer, count: int) -> None:
    waiting = server.app.broker.wait_for_subscribers(count)
    asyncio.run_coroutine_threadsafe(waiting, server.loop).result(timeout=10)


def _publish(server: RunningServer, explanation: str) -> None:
    finding = make_finding(explanation=explanation)
    server.call(lambda: server.app.broker.publish(make_trace(), [finding]))


def _ended(call: Iterator[Any]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as ended:
        next(call)
    return ended.value


def test_a_stream_whose_client_ca_was_taken_out_ends_and_a_kept_cas_streams_on(
    start_server: Start, pki: Pki, tmp_path: Path
) -> None:
    """Was: a subscriber whose client certificate's CA was taken out of
    ``tls.client_ca_file`` kept streaming until it reconnected; only new handshakes were
    refused. Now: the reload ends its stream UNAUTHENTICATED, saying why, counted as a
    revoked token's stream is (and nothing counted lost); a subscriber whose CA is kept
    streams on, and a reload that writes the same CAs again ends nothing."""
    old_ca, kept_ca = pki.clients, trustme.CA()
    path = tmp_path / "client-ca.pem"
    _write_client_cas(path, [old_ca, kept_ca])
    server = _server(start_server, pki, path)
    old_identity, kept_identity = _identity(old_ca), _identity(kept_ca)
    with (
        _channel(server, pki, old_identity) as old_channel,
        _channel(server, pki, kept_identity) as kept_channel,
    ):
        old, kept = _subscribe(old_channel), _subscribe(kept_channel)
        _subscribers(server, 2)
        _publish(server, "first")
        assert [next(old).explanation, next(kept).explanation] == ["first", "first"]

        _reload_client_cas(server, path, [kept_ca, old_ca])  # the same CAs: nothing ends
        _publish(server, "second")
        assert [next(old).explanation, next(kept).explanation] == ["second", "second"]

        _reload_client_cas(server, path, [kept_ca])
        ended = _ended(old)
        assert (ended.code(), ended.details()) == (
            grpc.StatusCode.UNAUTHENTICATED,
            CERTIFICATE_REFUSED,
        )
        _subscribers(server, 1)
        _publish(server, "third")
        assert next(kept).explanation == "third"
        with _channel(server, pki, old_identity) as again:  # refused at the handshake
            assert _ended(_subscribe_later(again)).code() == grpc.StatusCode.UNAVAILABLE
        kept.cancel()
    assert server.sample(AUTH_FAILURES, {"listener": "stream"}) == 1
    assert server.sample(DROPPED) == 0


def test_a_subscription_on_a_connection_made_before_its_ca_was_taken_out_is_refused(
    start_server: Start, pki: Pki, tmp_path: Path
) -> None:
    """A client keeps its connection between calls: one made while its CA was trusted
    subscribes after the reload without a new handshake. It is checked as it subscribes, so
    no recheck has to have seen it (a stream that no finding passes is never written to)."""
    path = tmp_path / "client-ca.pem"
    _write_client_cas(path, [pki.clients])
    server = _server(start_server, pki, path)
    with _channel(server, pki, _identity(pki.clients)) as channel:
        refused = _ended(_subscribe(channel, categories=["NO_SUCH_CATEGORY"]))
        assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT  # the connection is made

        _reload_client_cas(server, path, [trustme.CA()])
        ended = _ended(_subscribe(channel, agents=["nobody"]))
        assert (ended.code(), ended.details()) == (
            grpc.StatusCode.UNAUTHENTICATED,
            CERTIFICATE_REFUSED,
        )
    assert server.app.broker.subscriber_count == 0
    assert server.sample(AUTH_FAILURES, {"listener": "stream"}) == 1


def _tail_access(pki: Pki, directory: Path, ca: trustme.CA) -> StreamAccess:
    """What tail reaches the stream with: a client certificate ``ca`` signed, in files."""
    cert, key = pki.client_files(directory, *_identity(ca))
    return StreamAccess(ca_file=pki.ca, cert_file=cert, key_file=key)


def test_tail_is_told_its_certificate_is_no_longer_accepted(
    start_server: Start, pki: Pki, tmp_path: Path
) -> None:
    """Without ``--reconnect`` tail exits 1, as for a revoked token, saying that the server
    no longer accepts its certificate and that connecting again takes another one."""
    path = tmp_path / "client-ca.pem"
    _write_client_cas(path, [pki.clients])
    server = _server(start_server, pki, path)
    target = server.address("stream")

    def act() -> None:
        _publish(server, "before")
        _reload_client_cas(server, path, [trustme.CA()])
        until_unsubscribed(server)

    run = tail_during(server, act, _tail_access(pki, tmp_path, pki.clients), as_json=True)
    assert run.code == 1
    assert run.err == (
        f"toolwatch tail: {target} no longer accepts this client certificate"
        f" (UNAUTHENTICATED): {CERTIFICATE_REFUSED}; connecting again takes a certificate of a"
        " CA it trusts (its TLS handshake refuses this one)\n"
    )
    assert server.sample(AUTH_FAILURES, {"listener": "stream"}) == 1


def test_tail_reconnecting_through_a_client_ca_rotation_loses_no_finding(
    start_server: Start, pki: Pki, tmp_path: Path
) -> None:
    """The server's client CA file is rotated to a new CA before tail's certificate is: its
    stream ends, each attempt to connect again is refused at the handshake until its
    certificate file holds one the new CA signed (read again at each attempt), and it resumes
    where it left off: the findings published meanwhile, and any withheld at the end, come."""
    path = tmp_path / "client-ca.pem"
    _write_client_cas(path, [pki.clients])
    server = _server(start_server, pki, path)
    target = server.address("stream")
    new_ca = trustme.CA()
    cert_file, key_file = pki.client_files(tmp_path, *_identity(pki.clients))
    access = StreamAccess(ca_file=pki.ca, cert_file=cert_file, key_file=key_file)
    waits: list[float] = []
    renewed = threading.Event()

    def wait(seconds: float) -> None:  # tail's wait before it subscribes again
        waits.append(seconds)
        if len(waits) == 2:  # refused once at the handshake: the renewal reaches tail
            cert, key = _identity(new_ca)
            key_file.write_bytes(key)
            cert_file.write_bytes(cert)
            renewed.set()
        if len(waits) > 20:
            raise KeyboardInterrupt  # the server closed the stream at the end: stop

    def act() -> None:
        _publish(server, "first")
        _reload_client_cas(server, path, [new_ca])
        until_unsubscribed(server)
        _publish(server, "second")
        assert renewed.wait(timeout=10)
        _subscribers(server, 1)

    run = tail_during(server, act, access, as_json=True, reconnect=True, sleep=wait)
    assert [line.count('"explanation"') for line in run.out.splitlines()] == [1, 1]
    assert ['"first"' in run.out, '"second"' in run.out] == [True, True]
    assert waits[:2] == [0.5, 1.0]
    assert run.err.splitlines()[:2] == [
        f"toolwatch tail: {target} no longer accepts this client certificate"
        f" (UNAUTHENTICATED): {CERTIFICATE_REFUSED}; connecting again takes a certificate of a"
        f" CA it trusts (its TLS handshake refuses this one); reconnecting, reading"
        f" {cert_file} again at each attempt",
        f"toolwatch tail: reconnected to {target}, resuming where it left off",
    ]
    assert server.sample(AUTH_FAILURES, {"listener": "stream"}) == 1
    assert server.sample(DROPPED) == 0


def test_a_stream_without_tls_client_auth_is_untouched_by_a_client_ca_change(
    start_server: Start, pki: Pki, tmp_path: Path
) -> None:
    """The OTLP listeners take client certificates, the stream is served in plaintext: a
    client CA change there ends none of its streams."""
    path = tmp_path / "client-ca.pem"
    _write_client_cas(path, [pki.clients])
    server = _server(start_server, pki, path, security__tls__listeners=["grpc", "http", "metrics"])

    def act() -> None:
        _reload_client_cas(server, path, [trustme.CA()])
        _publish(server, "after the change")

    run = tail_during(server, act, StreamAccess(), as_json=True)
    assert run.code == 0
    assert '"explanation": "after the change"' in run.out
    assert server.sample(AUTH_FAILURES, {"listener": "stream"}) == 0


def test_a_stream_whose_certificate_cannot_be_checked_streams_on_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What ``toolwatch.client_ca`` cannot judge (a CA ``cryptography`` cannot read) ends no
    stream: the client would be told its certificate is refused when it may not be. The
    operator is told how to end it."""
    verdict: list[bool | None] = [True]
    refusals: list[None] = []

    async def scenario() -> tuple[str, grpc.StatusCode, str]:
        async with (
            serve(
                trust=lambda _auth: lambda: verdict[0], refused=lambda: refusals.append(None)
            ) as h,
            grpc.aio.insecure_channel(h.target) as channel,
        ):
            call = subscribe_aio(channel)
            await asyncio.wait_for(call.initial_metadata(), timeout=10)
            verdict[0] = None
            h.servicer.recheck_certificates()
            h.broker.publish(make_trace(), [make_finding(explanation="kept")])
            kept = await asyncio.wait_for(call.read(), timeout=10)
            verdict[0] = False
            h.servicer.recheck_certificates()
            with pytest.raises(grpc.aio.AioRpcError) as ended:
                await asyncio.wait_for(call.read(), timeout=10)
            return kept.explanation, ended.value.code(), ended.value.details() or ""

    with caplog.at_level(logging.WARNING, logger="toolwatch"):
        assert asyncio.run(scenario()) == (
            "kept",
            grpc.StatusCode.UNAUTHENTICATED,
            CERTIFICATE_REFUSED,
        )
    assert len(refusals) == 1
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "the client CAs changed, and the client certificates of 1 findings stream(s) cannot be"
        " checked against them: they stream on (take their token out, or restart toolwatch,"
        " to end them)"
    ]
