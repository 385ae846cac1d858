"""HTTPS certificate reloads: real TLS handshakes (OpenSSL over a socket pair) against the
context the HTTP listeners serve, with the files rotated on an injected clock."""

from __future__ import annotations

import logging
import os
import socket
import ssl
import threading
from pathlib import Path

import pytest
import trustme
from prometheus_client import CollectorRegistry

from toolwatch.config import SecuritySettings, TlsSettings
from toolwatch.model import ManualClock
from toolwatch.security import ListenerSecurity
from toolwatch.sinks.prometheus import PrometheusMetrics

RELOAD_SECONDS = 30.0


class Files:
    """The served certificate and key, replaced as a rotation does (written beside, then
    renamed over them)."""

    def __init__(self, tmp_path: Path) -> None:
        self.cert, self.key = tmp_path / "tls.crt", tmp_path / "tls.key"

    def install(self, ca: trustme.CA, *, key: bool = True) -> None:
        issued = ca.issue_cert("127.0.0.1")
        staged = self.cert.with_suffix(".new")
        for pem in issued.cert_chain_pems:
            pem.write_to_path(str(staged), append=True)
        os.replace(staged, self.cert)
        if key:
            staged = self.key.with_suffix(".new")
            issued.private_key_pem.write_to_path(str(staged))
            os.replace(staged, self.key)


def security(files: Files, clock: ManualClock) -> ListenerSecurity:
    tls = TlsSettings(cert_file=files.cert, key_file=files.key, reload_seconds=RELOAD_SECONDS)
    metrics = PrometheusMetrics(CollectorRegistry())
    return ListenerSecurity(SecuritySettings(tls=tls), clock, metrics)


def handshake(served: ssl.SSLContext, trusting: trustme.CA) -> bool:
    """Whether a client trusting only ``trusting`` completes a handshake with ``served``
    (an IP address: the client sends no SNI, as with most agents' exporters)."""
    client = ssl.create_default_context(cadata=trusting.cert_pem.bytes().decode())
    ours, theirs = socket.socketpair()
    outcome: list[bool] = []

    def serve() -> None:
        try:
            with served.wrap_socket(theirs, server_side=True) as tls:
                tls.recv(1)
        except (ssl.SSLError, OSError):
            pass

    server = threading.Thread(target=serve)
    server.start()
    try:
        with client.wrap_socket(ours, server_hostname="127.0.0.1") as tls:
            tls.sendall(b"x")
            outcome.append(True)
    except ssl.SSLError:  # not trusted, or the server could not complete it
        outcome.append(False)
    finally:
        theirs.close()
        server.join(timeout=10)
    return outcome[0]


@pytest.fixture
def files(tmp_path: Path) -> Files:
    return Files(tmp_path)


def test_a_rotation_reaches_new_https_connections(files: Files) -> None:
    first, second = trustme.CA(), trustme.CA()
    files.install(first)
    clock = ManualClock()
    listeners = security(files, clock)
    served = listeners.ssl_context("http")
    assert served is not None
    assert (handshake(served, first), handshake(served, second)) == (True, False)

    files.install(second)
    clock.advance(RELOAD_SECONDS)
    listeners.refresh()
    assert (handshake(served, first), handshake(served, second)) == (False, True)


def test_a_half_written_set_after_a_good_one_leaves_https_serving(
    files: Files, caplog: pytest.LogCaptureFixture
) -> None:
    """gRPC reloads the files at a handshake, HTTPS at a tick: between the two a rotation
    can be half written. HTTPS keeps a certificate that works; loading into its live
    context would have left it the new certificate without a key, failing every handshake."""
    first, second, third = trustme.CA(), trustme.CA(), trustme.CA()
    files.install(first)
    clock = ManualClock()
    listeners = security(files, clock)
    served = listeners.ssl_context("http")
    assert served is not None

    files.install(second)
    clock.advance(RELOAD_SECONDS)
    assert listeners._certificates is not None
    listeners._certificates.refresh()  # what gRPC's fetcher does at its next handshake
    files.install(third, key=False)  # a new certificate, the old key
    clock.advance(RELOAD_SECONDS)
    with caplog.at_level(logging.ERROR, logger="toolwatch"):
        listeners.refresh()
    assert [handshake(served, ca) for ca in (first, second, third)] == [True, False, False]
    assert any("for HTTPS" in record.getMessage() for record in caplog.records)

    files.install(third)
    clock.advance(RELOAD_SECONDS)
    listeners.refresh()
    assert [handshake(served, ca) for ca in (first, second, third)] == [False, False, True]
