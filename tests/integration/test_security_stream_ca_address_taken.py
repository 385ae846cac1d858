"""A client CA taken out restarts the findings stream's listener (``StreamListener``): the
server is stopped, every connection closed, and a new one bound to the same address. Should
another process take the port in between, the server does not crash: the failure is logged
at ERROR, naming ``listen.stream`` and why (once), ``/readyz`` stays ready, OTLP is still
served, and each tick tries the bind again until it works, which is logged; the stream then
serves again, and ``toolwatch_stream_subscribers`` counts what is open throughout.
``toolwatch_stream_listening``, scraped from the real /metrics, reads 1 during the restart
(its milliseconds are no outage), 0 while the address is taken, and 1 once bound again.

Real server with mutual TLS; the window in which the port is free is the restart's grace,
held open by a client that reads nothing while a finding larger than its receive window is
written to it (its call ends only when the grace cancels it); the port is taken then by a
real socket, as another process would.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest
import trustme
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import RunningServer, StartServer, until
from tests.integration.pki_support import Pki, make_pki
from tests.integration.security_support import client_context, http_get
from tests.integration.stream_ca_helpers import (
    RELOAD_SECONDS,
    being_written,
    ca_channel,
    listening_again,
    mutual_tls,
    outcome,
    publish,
    subscribe,
    take_address,
    write_cas,
)
from tests.integration.stream_support import BIG, NO_BDP

LISTENER_LOG = "toolwatch.stream_listener"
SUBSCRIBERS = "toolwatch_stream_subscribers"
LISTENING = "toolwatch_stream_listening"


def _listening(server: RunningServer, pki: Pki) -> list[float]:
    """``toolwatch_stream_listening``'s samples, as a scrape of the real /metrics over mutual
    TLS reads them (none: no series)."""
    scraped = http_get(
        f"https://{server.address('metrics')}/metrics", client_context(pki, client=True)
    )
    assert scraped.status == 200
    families = text_string_to_metric_families(scraped.body.decode())
    return [sample.value for f in families if f.name == LISTENING for sample in f.samples]


def test_a_stream_address_taken_while_the_listener_restarts_is_bound_again_at_a_tick(
    start_server: StartServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pki = make_pki(tmp_path)
    path = tmp_path / "client-ca.pem"
    write_cas(path, [pki.clients, trustme.CA()])
    server = start_server(**mutual_tls(pki, path))
    address = server.address("stream")
    readyz = f"https://{server.address('metrics')}/readyz"
    listener = server.app.stream_listener
    assert listener is not None
    taken: list[socket.socket] = []
    caplog.set_level(logging.INFO, logger=LISTENER_LOG)
    # NO_BDP: a connection that does not grow its receive window (64 KiB).
    with ca_channel(address, pki, pki.clients, NO_BDP) as stuck_channel:
        stuck = subscribe(stuck_channel)  # reads nothing from now on
        publish(server, "x" * BIG)
        assert until(lambda: being_written(server))  # larger than its window: the write waits
        write_cas(path, [pki.clients])  # another CA taken out
        server.clock.advance(RELOAD_SECONDS)
        server.call(server.app.tick)
        # The old server no longer listens; its stop waits on the stuck write (the grace).
        assert until(lambda: take_address(address, taken))
        # Still restarting (the grace, a second, is not over): no outage yet.
        restarting = (listener.serving, _listening(server, pki))
        listening_again(server)
        stuck.cancel()
    try:
        ready = http_get(readyz, client_context(pki)).status
        down = (listener.serving, server.sample(SUBSCRIBERS), ready, _listening(server, pki))
        server.call(server.app.tick)  # the port still taken: tried again, not told again
        listening_again(server)
        still_down = (listener.serving, _listening(server, pki))
    finally:
        for sock in taken:
            sock.close()
    server.call(server.app.tick)  # the port free again
    listening_again(server)
    with ca_channel(address, pki, pki.clients, NO_BDP) as channel:
        back = subscribe(channel)
        publish(server, "back")
        after = (outcome(back), server.sample(SUBSCRIBERS), _listening(server, pki))
        back.cancel()

    assert restarting == (False, [1.0])
    assert (down, still_down) == ((False, 0, 200, [0.0]), (False, [0.0]))
    assert after == ("back", 1, [1.0])
    told = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == LISTENER_LOG]
    assert told[1:] == [
        (
            "ERROR",
            f"cannot listen on {address} (listen.stream): Address already in use: the findings"
            " stream is down, trying again at each tick (ingestion and /readyz are unaffected)",
        ),
        ("INFO", f"listening again on {address} (listen.stream)"),
    ]
