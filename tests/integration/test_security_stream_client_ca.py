"""A findings stream lasts as long as its client runs, so its connection is never made again
(no ``ingest.max_connection_age_seconds`` there): when a reload takes a CA out of
``tls.client_ca_file``, every open stream is ended UNAVAILABLE, for its client to connect
again through a new TLS handshake, which the CAs served then decide; what it had not been
sent is held for its resume. No certificate is judged by toolwatch itself. Real gRPC
clients and ``toolwatch tail``, certificates made at run time."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
import trustme

from tests.integration.conftest import RunningServer, StartServer
from tests.integration.pki_support import Pki
from tests.integration.security_support import AUTH_FAILURES, tail_during, tls, until_unsubscribed
from tests.integration.stream_ca_helpers import listening_again
from tests.integration.stream_support import make_finding, make_trace, serve
from tests.integration.stream_support import subscribe as subscribe_aio
from toolwatch._proto.toolwatch.v1 import findings_pb2, findings_pb2_grpc
from toolwatch.sinks.stream.protocol import (
    CLIENT_CAS_CHANGED,
    RESUME_TOKEN_KEY,
    STREAM_ID_KEY,
    STREAM_SEQUENCE_KEY,
)
from toolwatch.tail_access import StreamAccess

DROPPED = "toolwatch_stream_dropped_findings_total"
RELOAD_SECONDS = 30
ENDED = (grpc.StatusCode.UNAVAILABLE, CLIENT_CAS_CHANGED)
#: How tail ends what it tells of a handshake that refused its client certificate.
REFUSED_HINT = (
    " (is the stream plaintext? drop --tls-ca and drop --tls-cert; or does the server's TLS"
    " handshake refuse the client certificate of --tls-cert {}: its CA not trusted (taken out"
    " of the client CA file?), or the certificate expired?); reconnecting"
)


def _write_client_cas(path: Path, cas: Sequence[trustme.CA]) -> None:
    """``cas`` as the client CA file, put in place as a Secret update does (beside, renamed)."""
    staged = path.with_suffix(".new")
    staged.write_bytes(b"".join(ca.cert_pem.bytes() for ca in cas))
    os.replace(staged, path)


def _reload_client_cas(server: RunningServer, path: Path, cas: Sequence[trustme.CA]) -> None:
    """Rewrite the client CA file and let the server's tick reload it; a CA taken out, the
    stream listener restarts, and is listening again on return."""
    _write_client_cas(path, cas)
    server.clock.advance(RELOAD_SECONDS)
    server.call(server.app.tick)
    listening_again(server)


def _server(start_server: StartServer, pki: Pki, path: Path, **more: Any) -> RunningServer:
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


def _ended(call: Iterator[Any]) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as ended:
        next(call)
    return ended.value.code(), ended.value.details()


def _ended_streams(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "findings stream(s)" in r.getMessage()]


def _ended_log(count: int) -> str:
    return (
        f"a CA was taken out of the client CA file: ended {count} findings stream(s)"
        " UNAVAILABLE, for their clients to connect again through a new TLS handshake"
    )


def test_taking_a_client_ca_out_ends_every_stream_and_the_handshake_decides_who_is_back(
    start_server: StartServer, pki: Pki, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Was: the stream's client certificate was checked by toolwatch's own chain check, as
    it subscribed and whenever the client CAs changed, and a stream it refused was ended
    UNAUTHENTICATED and counted; that check refused certificates the handshake took. Now:
    a reload that takes a CA out ends every stream UNAVAILABLE, not counted, logged once;
    each client connects again, the one whose CA is kept gets back in, the other's
    handshake refuses it. Adding a CA, or writing the same ones again, ends nothing."""
    old_ca, kept_ca, added_ca = pki.clients, trustme.CA(), trustme.CA()
    path = tmp_path / "client-ca.pem"
    _write_client_cas(path, [old_ca, kept_ca])
    server = _server(start_server, pki, path)
    old_identity, kept_identity = _identity(old_ca), _identity(kept_ca)
    with (
        caplog.at_level(logging.INFO, logger="toolwatch.sinks.stream"),
        _channel(server, pki, old_identity) as old_channel,
        _channel(server, pki, kept_identity) as kept_channel,
    ):
        old, kept = _subscribe(old_channel), _subscribe(kept_channel)
        _subscribers(server, 2)
        _reload_client_cas(server, path, [kept_ca, old_ca])  # the same CAs: nothing ends
        _reload_client_cas(server, path, [kept_ca, old_ca, added_ca])  # one added: neither
        _publish(server, "first")
        assert [next(old).explanation, next(kept).explanation] == ["first", "first"]
        assert _ended_streams(caplog) == []

        _reload_client_cas(server, path, [kept_ca, added_ca])
        assert [_ended(old), _ended(kept)] == [ENDED, ENDED]
        assert _ended_streams(caplog) == [_ended_log(2)]
        _subscribers(server, 0)

    with (
        _channel(server, pki, kept_identity) as kept_channel,
        _channel(server, pki, old_identity) as old_channel,
    ):
        kept = _subscribe(kept_channel)
        refused = _ended(_subscribe_later(old_channel))  # at the handshake
        _publish(server, "second")
        assert next(kept).explanation == "second"
        kept.cancel()
    assert (refused[0], CLIENT_CAS_CHANGED in refused[1]) == (grpc.StatusCode.UNAVAILABLE, False)
    assert server.sample(AUTH_FAILURES, {"listener": "stream"}) == 0
    assert server.sample(DROPPED) == 0


def test_findings_not_yet_sent_when_the_stream_ends_come_to_its_resume() -> None:
    """An ended stream is not a refusal: what it had queued is held for its resume, as for a
    client that left (not withheld, as from a revoked token's stream), and its client,
    resuming with its cursor and token, gets all of it; nothing counted lost or refused."""
    refusals: list[None] = []

    async def scenario() -> tuple[tuple[grpc.StatusCode, str], int, list[str], int]:
        async with (
            serve(refused=lambda: refusals.append(None)) as h,
            grpc.aio.insecure_channel(h.target) as channel,
        ):
            call = subscribe_aio(channel)
            headers = dict(await asyncio.wait_for(call.initial_metadata(), timeout=10))
            for explanation in ("queued 1", "queued 2"):  # not written before it ends
                h.broker.publish(make_trace(), [make_finding(explanation=explanation)])
            ended_count = h.servicer.reconnect_all()
            with pytest.raises(grpc.aio.AioRpcError) as ended:
                await asyncio.wait_for(call.read(), timeout=10)
            cursor = findings_pb2.StreamCursor(
                stream_id=headers[STREAM_ID_KEY],
                after=int(headers[STREAM_SEQUENCE_KEY]),
                token=headers[RESUME_TOKEN_KEY],
            )
            stub = findings_pb2_grpc.FindingsServiceStub(channel)  # type: ignore[no-untyped-call]
            again = stub.Subscribe(findings_pb2.SubscribeRequest(resume=[cursor]))
            got = [(await asyncio.wait_for(again.read(), timeout=10)).explanation for _ in "12"]
            again.cancel()
            code = ended.value.code(), ended.value.details() or ""
            return code, ended_count, got, h.broker.dropped

    assert asyncio.run(scenario()) == (ENDED, 1, ["queued 1", "queued 2"], 0)
    assert refusals == []


def _tail_access(pki: Pki, directory: Path, ca: trustme.CA) -> StreamAccess:
    """What tail reaches the stream with: a client certificate ``ca`` signed, in files."""
    cert, key = pki.client_files(directory, *_identity(ca))
    return StreamAccess(ca_file=pki.ca, cert_file=cert, key_file=key)


def test_tail_is_told_to_connect_again_and_exits_to_be_restarted(
    start_server: StartServer, pki: Pki, tmp_path: Path
) -> None:
    """Was: tail was told that the server no longer accepted its certificate, though its CA
    may have been kept. Now: without ``--reconnect`` it says the server ended the stream for
    it to connect again and exits 1, the code of what is worth trying again."""
    path = tmp_path / "client-ca.pem"
    _write_client_cas(path, [pki.clients, trustme.CA()])
    server = _server(start_server, pki, path)
    target = server.address("stream")

    def act() -> None:
        _reload_client_cas(server, path, [pki.clients])
        until_unsubscribed(server)

    run = tail_during(server, act, _tail_access(pki, tmp_path, pki.clients), as_json=True)
    assert (run.code, run.out) == (1, "")
    assert run.err == f"toolwatch tail: {target} ended the stream: {CLIENT_CAS_CHANGED}\n"
    assert server.sample(AUTH_FAILURES, {"listener": "stream"}) == 0


def test_tail_reconnecting_whose_ca_is_kept_resumes_and_loses_nothing(
    start_server: StartServer, pki: Pki, tmp_path: Path
) -> None:
    """Another client's CA is taken out: tail's stream ends as every stream does, with
    findings queued for it and not yet written (published in the same turn of the server's
    loop as the reload); it connects again at once, its handshake accepted, and resumes:
    every finding comes, once."""
    path = tmp_path / "client-ca.pem"
    _write_client_cas(path, [pki.clients, trustme.CA()])
    server = _server(start_server, pki, path)
    target = server.address("stream")
    waits: list[float] = []

    def wait(seconds: float) -> None:  # tail's wait before it subscribes again
        waits.append(seconds)
        if len(waits) == 2:  # the server closed the stream at the end: stop
            raise KeyboardInterrupt
        listening_again(server)  # what half a second is for: the listener restarts

    def act() -> None:
        _publish(server, "before")
        _write_client_cas(path, [pki.clients])
        server.clock.advance(RELOAD_SECONDS)

        def publish_then_reload() -> None:
            finding = make_finding(explanation="queued as it ended")
            server.app.broker.publish(make_trace(), [finding])
            server.app.tick()

        server.call(publish_then_reload)
        until_unsubscribed(server)
        _subscribers(server, 1)
        _publish(server, "after")

    run = tail_during(
        server,
        act,
        _tail_access(pki, tmp_path, pki.clients),
        as_json=True,
        reconnect=True,
        sleep=wait,
    )
    explanations = [json.loads(line)["explanation"] for line in run.out.splitlines()]
    assert explanations == ["before", "queued as it ended", "after"]
    assert (run.code, waits) == (130, [0.5, 0.5])
    assert run.err.splitlines()[:2] == [
        f"toolwatch tail: {target} ended the stream: {CLIENT_CAS_CHANGED}; reconnecting",
        f"toolwatch tail: reconnected to {target}, resuming where it left off",
    ]
    assert server.sample(AUTH_FAILURES, {"listener": "stream"}) == 0
    assert server.sample(DROPPED) == 0


def test_tail_reconnecting_through_a_client_ca_rotation_loses_no_finding(
    start_server: StartServer, pki: Pki, tmp_path: Path
) -> None:
    """The server's client CA file is rotated to a new CA before tail's certificate is: its
    stream ends, the next attempt is refused at the handshake and told as an outage begins
    (once), each attempt reads ``--tls-cert`` again, and once its file holds a certificate
    the new CA signed it resumes where it left off: the findings published meanwhile come."""
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
        listening_again(server)  # what half a second is for: the listener restarts
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
    told = run.err.splitlines()
    assert told[0] == (
        f"toolwatch tail: {target} ended the stream: {CLIENT_CAS_CHANGED}; reconnecting"
    )
    refused = f"toolwatch tail: cannot reach the findings stream at {target}: "
    assert (told[1].startswith(refused), told[1].endswith(REFUSED_HINT.format(cert_file))) == (
        True,
        True,
    ), told[1]
    assert told[2] == f"toolwatch tail: reconnected to {target}, resuming where it left off"
    assert server.sample(AUTH_FAILURES, {"listener": "stream"}) == 0
    assert server.sample(DROPPED) == 0


def test_a_stream_without_tls_client_auth_is_untouched_by_a_client_ca_change(
    start_server: StartServer, pki: Pki, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The OTLP listeners take client certificates, the stream is served in plaintext: a
    client CA taken out there ends none of its streams."""
    path = tmp_path / "client-ca.pem"
    _write_client_cas(path, [pki.clients])
    server = _server(start_server, pki, path, security__tls__listeners=["grpc", "http", "metrics"])

    def act() -> None:
        _reload_client_cas(server, path, [trustme.CA()])
        _publish(server, "after the change")

    with caplog.at_level(logging.INFO, logger="toolwatch.sinks.stream"):
        run = tail_during(server, act, StreamAccess(), as_json=True)
    assert run.code == 0
    assert '"explanation": "after the change"' in run.out
    assert _ended_streams(caplog) == []
