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
from pathlib import Path

import pytest
import trustme

from tests.integration.conftest import StartServer
from tests.integration.pki_support import make_pki
from tests.integration.stream_ca_helpers import (
    RELOAD_SECONDS,
    ca_channel,
    listening_again,
    mutual_tls,
    outcome,
    publish,
    subscribe,
    write_cas,
)
from toolwatch.sinks.stream.protocol import CLIENT_CAS_CHANGED

ENDED = f"UNAVAILABLE: {CLIENT_CAS_CHANGED}"


def test_a_client_whose_ca_was_taken_out_cannot_subscribe_again_on_the_connection_it_had(
    start_server: StartServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pki = make_pki(tmp_path)
    removed, kept = pki.clients, trustme.CA()
    path = tmp_path / "client-ca.pem"
    write_cas(path, [removed, kept])
    server = start_server(**mutual_tls(pki, path))
    address = server.address("stream")
    with (
        caplog.at_level(logging.INFO, logger="toolwatch.stream_listener"),
        ca_channel(address, pki, removed) as removed_channel,
        ca_channel(address, pki, kept) as kept_channel,
    ):
        first, other = subscribe(removed_channel), subscribe(kept_channel)
        publish(server, "before the removal")
        before = [outcome(first), outcome(other)]
        write_cas(path, [kept])  # the CA that signed the first client's certificate is taken out
        server.clock.advance(RELOAD_SECONDS)
        server.call(server.app.tick)
        ended = [outcome(first), outcome(other)]
        listening_again(server)
        again = subscribe(removed_channel)  # its channel: it had a connection, now closed
        back = subscribe(kept_channel)
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
