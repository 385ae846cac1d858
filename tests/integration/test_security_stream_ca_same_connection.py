"""Was (review of e7110fe): a client CA taken out of ``tls.client_ca_file`` ended every open
findings stream UNAVAILABLE (``reconnect_all``), "for its client to connect again, through a
new TLS handshake", but nothing made that handshake happen: the server ended the *calls*, not
the connections (HTTP/2 keeps one for as many calls as its client likes; the stream listener
has no connection age), and no certificate is checked as a stream subscribes. A client whose
CA was taken out that subscribed again on the channel it had, as a gRPC client is ordinarily
written (one channel, a call retried on UNAVAILABLE), was let straight back in with no
handshake, and streamed on for as long as it kept its connection: the removal held only
against clients that cooperate, when cutting off one that does not (a leaked key, a
compromised host) is why a CA is taken out.

Now: the stream listener restarts (``toolwatch.stream_listener``): the streams are ended as
before, the server stopped (every connection closed) and a new one bound to the same address,
so every client handshakes again, against the CAs served now. The removed CA's client,
subscribing again on its channel, is refused at the handshake; a client of a CA kept, doing
the same, gets back in and is sent the next finding; ``toolwatch_stream_subscribers`` counts
it alone.

Shown with a real server with mutual TLS, gRPC clients each on a channel of its own
connection, and the CA taken out as a Secret update does it (renamed into place; the server's
tick reloads it).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import grpc
import pytest
import trustme

from tests.integration.stream_ca_helpers import listening_again, outcome, publish
from tests.integration.test_security import Pki, Start, make_pki, tls
from toolwatch._proto.toolwatch.v1 import findings_pb2, findings_pb2_grpc
from toolwatch.sinks.stream.protocol import CLIENT_CAS_CHANGED

RELOAD_SECONDS = 30
ENDED = f"UNAVAILABLE: {CLIENT_CAS_CHANGED}"


def _write(path: Path, cas: list[trustme.CA]) -> None:
    staged = path.with_suffix(".new")
    staged.write_bytes(b"".join(ca.cert_pem.bytes() for ca in cas))
    os.replace(staged, path)


def _channel(address: str, pki: Pki, ca: trustme.CA) -> grpc.Channel:
    """A channel of its own connection, showing a client certificate ``ca`` signed."""
    leaf = ca.issue_cert("agent.example")
    credentials = grpc.ssl_channel_credentials(
        pki.read("ca"), leaf.private_key_pem.bytes(), leaf.cert_chain_pems[0].bytes()
    )
    return grpc.secure_channel(address, credentials, [("grpc.use_local_subchannel_pool", 1)])


def _subscribe(channel: grpc.Channel) -> Any:
    stub = findings_pb2_grpc.FindingsServiceStub(channel)  # type: ignore[no-untyped-call]
    call = stub.Subscribe(findings_pb2.SubscribeRequest(), timeout=30)
    call.initial_metadata()
    return call


def test_a_client_whose_ca_was_taken_out_cannot_subscribe_again_on_the_connection_it_had(
    start_server: Start, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pki = make_pki(tmp_path)
    removed, kept = pki.clients, trustme.CA()
    path = tmp_path / "client-ca.pem"
    _write(path, [removed, kept])
    server = start_server(
        **tls(pki),
        security__tls__client_ca_file=str(path),
        security__tls__reload_seconds=RELOAD_SECONDS,
    )
    address = server.address("stream")
    with (
        caplog.at_level(logging.INFO, logger="toolwatch.stream_listener"),
        _channel(address, pki, removed) as removed_channel,
        _channel(address, pki, kept) as kept_channel,
    ):
        first, other = _subscribe(removed_channel), _subscribe(kept_channel)
        publish(server, "before the removal")
        before = [outcome(first), outcome(other)]
        _write(path, [kept])  # the CA that signed the first client's certificate is taken out
        server.clock.advance(RELOAD_SECONDS)
        server.call(server.app.tick)
        ended = [outcome(first), outcome(other)]
        listening_again(server)
        again = _subscribe(removed_channel)  # its channel: it had a connection, now closed
        back = _subscribe(kept_channel)
        publish(server, "after the removal")
        after = [outcome(again), outcome(back)]
        subscribers = server.sample("toolwatch_stream_subscribers")
        back.cancel()

    assert (before, ended) == (["before the removal"] * 2, [ENDED, ENDED])
    # Was: "after the removal": the removed CA's client, on the connection it had, was let
    # in. Now: refused by its new connection's handshake (gRPC's UNAVAILABLE, not the
    # server's CLIENT_CAS_CHANGED); the kept CA's client back in.
    refused, kept_back = after
    assert (refused.split(":")[0], CLIENT_CAS_CHANGED in refused) == ("UNAVAILABLE", False)
    assert (kept_back, subscribers) == ("after the removal", 1)
    assert [r.getMessage() for r in caplog.records if r.name == "toolwatch.stream_listener"] == [
        f"closing every connection of the findings stream (listen.stream {address}) and"
        " listening again, for each client to connect through a new TLS handshake: a CA was"
        " taken out of the client CA file"
    ]
