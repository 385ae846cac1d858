"""Was (review of e7110fe): ``ListenerSecurity.refresh`` (the server's tick) told
``on_client_ca_removed`` when the client CAs of the set served *now* lacked one of the set
*it saw last*. But the tick is not the only reader of the files: gRPC's certificate fetcher
reloads them before every handshake (``_CertificateFetcher`` calls
``CertificateFiles.refresh``), so a set can be served, accept a client, and be replaced
between two ticks. A CA added and taken out in that time was never seen by the tick: it
compared the set after the removal with the set before the addition, found them equal, and
the stream the short-lived set let in went on, though the CA that admitted it was gone and a
new handshake with its certificate was refused. It takes two reloads between ticks:
``tls.reload_seconds`` below the gap between ticks (at least ``max(assembly.tick_seconds,
1 s)`` when idle), or a tick late by ``reload_seconds`` (a loop stalled); and a CA put in by
mistake and taken out at once is the case where the removal matters.

Now: the client CAs of every set handed to ``on_served`` (which sees each set that becomes
current, whichever thread reloaded it) are collected until the next ``refresh``, and one of
them missing from the set served then is a removal: the stream is ended.

Shown with a real server with mutual TLS (``tick_seconds`` 10, so its own ticker stays idle
through the test; its clock advanced by hand past ``reload_seconds``): the client CA file
holds A; B is added and a client of B subscribes (its handshake makes gRPC reload: B served);
B is taken out and a client of A connects (gRPC reloads again: B no longer served, as a new
handshake of B's client shows); then the tick.
"""

from __future__ import annotations

from pathlib import Path

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


def test_a_client_ca_added_and_taken_out_between_two_ticks_ends_the_stream_it_let_in(
    start_server: StartServer, tmp_path: Path
) -> None:
    pki = make_pki(tmp_path)
    kept, short_lived = pki.clients, trustme.CA()
    path = tmp_path / "client-ca.pem"
    write_cas(path, [kept])
    server = start_server(**mutual_tls(pki, path), assembly__tick_seconds=10)
    address = server.address("stream")
    write_cas(path, [kept, short_lived])
    server.clock.advance(RELOAD_SECONDS)
    with (
        ca_channel(address, pki, short_lived) as admitted,
        ca_channel(address, pki, kept) as other,
        ca_channel(address, pki, short_lived) as after,
    ):
        stream = subscribe(admitted)  # its handshake reloads the file: B is served
        publish(server, "while B is trusted")
        first = outcome(stream)
        write_cas(path, [kept])
        server.clock.advance(RELOAD_SECONDS)
        subscribe(other).cancel()  # another handshake reloads it: B is no longer served
        refused = outcome(subscribe(after))
        server.call(server.app.tick)
        publish(server, "after B was taken out")
        still = outcome(stream)
        listening_again(server)

    assert first == "while B is trusted"
    assert refused.startswith("UNAVAILABLE") and CLIENT_CAS_CHANGED not in refused, refused
    # Was: "after B was taken out": the stream B's CA let in went on.
    assert still == f"UNAVAILABLE: {CLIENT_CAS_CHANGED}"
