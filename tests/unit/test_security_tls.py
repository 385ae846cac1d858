"""HTTPS certificate reloads: real TLS handshakes (OpenSSL over a socket pair) against the
context the HTTP listeners serve, with the files rotated on an injected clock."""

from __future__ import annotations

import base64
import datetime
import logging
import os
import socket
import ssl
import threading
from pathlib import Path

import pytest
import trustme
from prometheus_client import CollectorRegistry

from tests.certificates import ca_certificate
from toolwatch.config import SecuritySettings, TlsSettings
from toolwatch.model import ManualClock
from toolwatch.security import ListenerSecurity
from toolwatch.senders import SenderLog
from toolwatch.sinks.prometheus import PrometheusMetrics

RELOAD_SECONDS = 30.0


class Files:
    """The served certificate and key, replaced as a rotation does (written beside, then
    renamed over them)."""

    def __init__(self, tmp_path: Path) -> None:
        self.cert, self.key = tmp_path / "tls.crt", tmp_path / "tls.key"

    def install(
        self,
        ca: trustme.CA,
        *,
        key: bool = True,
        not_before: datetime.datetime | None = None,
        not_after: datetime.datetime | None = None,
    ) -> None:
        issued = ca.issue_cert("127.0.0.1", not_before=not_before, not_after=not_after)
        staged = self.cert.with_suffix(".new")
        for pem in issued.cert_chain_pems:
            pem.write_to_path(str(staged), append=True)
        os.replace(staged, self.cert)
        if key:
            staged = self.key.with_suffix(".new")
            issued.private_key_pem.write_to_path(str(staged))
            os.replace(staged, self.key)


def security(
    files: Files,
    clock: ManualClock,
    client_ca: Path | None = None,
    registry: CollectorRegistry | None = None,
    wall: ManualClock | None = None,
) -> ListenerSecurity:
    tls = TlsSettings(
        cert_file=files.cert,
        key_file=files.key,
        client_ca_file=client_ca,
        reload_seconds=RELOAD_SECONDS,
    )
    metrics = PrometheusMetrics(registry or CollectorRegistry())
    if wall is None:
        return ListenerSecurity(SecuritySettings(tls=tls), clock, metrics, senders=SenderLog(clock))
    return ListenerSecurity(
        SecuritySettings(tls=tls), clock, metrics, wall, senders=SenderLog(clock)
    )


def handshake(
    served: ssl.SSLContext, trusting: trustme.CA, identity: trustme.LeafCert | None = None
) -> bool:
    """Whether a client trusting only ``trusting`` (and showing ``identity``) completes a
    handshake with ``served`` and has its byte read (an IP address: the client sends no
    SNI, as with most agents' exporters)."""
    client = ssl.create_default_context(cadata=trusting.cert_pem.bytes().decode())
    if identity is not None:
        identity.configure_cert(client)
    ours, theirs = socket.socketpair()
    outcome: list[bool] = []

    def serve() -> None:
        try:
            with served.wrap_socket(theirs, server_side=True) as tls:
                outcome.append(tls.recv(1) == b"x")
                tls.sendall(b"y")
        except (ssl.SSLError, OSError):
            outcome.append(False)

    server = threading.Thread(target=serve)
    server.start()
    try:
        with client.wrap_socket(ours, server_hostname="127.0.0.1") as tls:
            tls.sendall(b"x")
            tls.recv(1)  # TLS 1.3: a refused client certificate shows only after the handshake
    except (ssl.SSLError, OSError):  # not trusted, or the server refused the client
        outcome.append(False)
    finally:
        server.join(timeout=10)
        theirs.close()
    return all(outcome) and len(outcome) == 1


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
    can be half written. HTTPS takes the set gRPC loaded (made in the same load), not the
    files as they are at the tick; loading those into its live context would have left it
    the new certificate without a key, failing every handshake."""
    first, second, third = trustme.CA(), trustme.CA(), trustme.CA()
    files.install(first)
    clock, registry = ManualClock(), CollectorRegistry()
    listeners = security(files, clock, registry=registry)
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
    assert [handshake(served, ca) for ca in (first, second, third)] == [False, True, False]
    messages = [record.getMessage() for record in caplog.records]
    assert [m.split(":")[0] for m in messages] == ["keeping the previous TLS certificate"]
    failures = {"file": "certificate"}
    assert registry.get_sample_value("toolwatch_security_reload_failures_total", failures) == 1
    for _ in range(3):  # ticks until the next look retry nothing, and count nothing
        listeners.refresh()
    assert registry.get_sample_value("toolwatch_security_reload_failures_total", failures) == 1

    files.install(third)
    clock.advance(RELOAD_SECONDS)
    listeners.refresh()
    assert [handshake(served, ca) for ca in (first, second, third)] == [False, False, True]


DAY = datetime.timedelta(days=1)


def unix_ns(moment: datetime.datetime) -> int:
    return int(moment.timestamp()) * 10**9


def test_a_rotation_to_an_expired_certificate_keeps_the_valid_one(
    files: Files, caplog: pytest.LogCaptureFixture
) -> None:
    """OpenSSL loads an expired certificate, and every client refuses it: a restored backup
    or a renewal job that wrote the old file would have stopped every new connection."""
    first, second = trustme.CA(), trustme.CA()
    files.install(first)
    now = datetime.datetime(2031, 5, 1, 12, tzinfo=datetime.UTC)
    clock, wall, registry = ManualClock(), ManualClock(unix_ns(now)), CollectorRegistry()
    listeners = security(files, clock, registry=registry, wall=wall)
    served = listeners.ssl_context("http")
    assert served is not None

    files.install(second, not_before=now - 30 * DAY, not_after=now - DAY)
    clock.advance(RELOAD_SECONDS)
    with caplog.at_level(logging.INFO, logger="toolwatch"):
        listeners.refresh()

    assert (handshake(served, first), handshake(served, second)) == (True, False)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        (
            "ERROR",
            f"keeping the previous TLS certificate: {files.cert}: the certificate expired at"
            " 2031-04-30 12:00:00 UTC (valid from 2031-04-01 12:00:00 UTC to"
            " 2031-04-30 12:00:00 UTC)",
        )
    ]
    failures = {"file": "certificate"}
    assert registry.get_sample_value("toolwatch_security_reload_failures_total", failures) == 1


def test_a_certificate_not_valid_yet_is_taken_at_the_first_look_once_it_is(
    files: Files, caplog: pytest.LogCaptureFixture
) -> None:
    """Judged by the injected wall clock, two days behind the real one: the handshakes
    (OpenSSL's client, on the real clock) see the second certificate valid."""
    first, second = trustme.CA(), trustme.CA()
    files.install(first)
    real = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    clock, wall, registry = ManualClock(), ManualClock(unix_ns(real - 2 * DAY)), CollectorRegistry()
    listeners = security(files, clock, registry=registry, wall=wall)
    served = listeners.ssl_context("http")
    assert served is not None

    files.install(second, not_before=real - DAY)
    clock.advance(RELOAD_SECONDS)
    with caplog.at_level(logging.ERROR, logger="toolwatch"):
        listeners.refresh()
    assert (handshake(served, first), handshake(served, second)) == (True, False)
    [said] = [record.getMessage() for record in caplog.records]
    assert (
        f"{files.cert}: the certificate is not valid until {real - DAY:%Y-%m-%d %H:%M:%S} UTC"
        in said
    )

    wall.advance(DAY.total_seconds())  # valid now; the files have not changed since
    clock.advance(RELOAD_SECONDS)
    listeners.refresh()
    assert (handshake(served, first), handshake(served, second)) == (False, True)
    failures = {"file": "certificate"}
    assert registry.get_sample_value("toolwatch_security_reload_failures_total", failures) == 1


EXPIRY = "toolwatch_tls_certificate_expiry_timestamp_seconds"
NOT_BEFORE = "toolwatch_tls_certificate_not_before_timestamp_seconds"
FILES = ("certificate", "client_ca")
NOW = datetime.datetime(2031, 5, 1, 12, tzinfo=datetime.UTC)


def reported(registry: CollectorRegistry, file: str) -> tuple[float | None, float | None]:
    """The (notBefore, notAfter) gauges of ``file``, Unix seconds."""
    labels = {"file": file}
    return registry.get_sample_value(NOT_BEFORE, labels), registry.get_sample_value(EXPIRY, labels)


def dates(not_before: datetime.datetime, not_after: datetime.datetime) -> tuple[float, float]:
    return not_before.timestamp(), not_after.timestamp()


def test_the_date_gauges_read_the_served_certificate_and_follow_its_reloads(
    files: Files,
) -> None:
    """Set at start-up, changed only when a new set is taken: not before the look, and not by
    a set refused for its dates (the one still served is valid as before)."""
    ca = trustme.CA()
    files.install(ca, not_before=NOW - 80 * DAY, not_after=NOW + 10 * DAY)
    clock, wall, registry = ManualClock(), ManualClock(unix_ns(NOW)), CollectorRegistry()
    listeners = security(files, clock, registry=registry, wall=wall)
    first = dates(NOW - 80 * DAY, NOW + 10 * DAY)
    assert reported(registry, "certificate") == first
    assert reported(registry, "client_ca") == (None, None)

    files.install(ca, not_before=NOW, not_after=NOW + 90 * DAY)  # renewed
    clock.advance(RELOAD_SECONDS - 1)
    listeners.refresh()  # not looked at yet
    assert reported(registry, "certificate") == first
    clock.advance(1)
    listeners.refresh()
    assert reported(registry, "certificate") == dates(NOW, NOW + 90 * DAY)

    files.install(ca, not_before=NOW - 30 * DAY, not_after=NOW - DAY)  # an old backup
    clock.advance(RELOAD_SECONDS)
    listeners.refresh()
    assert reported(registry, "certificate") == dates(NOW, NOW + 90 * DAY)
    failures = {"file": "certificate"}
    assert registry.get_sample_value("toolwatch_security_reload_failures_total", failures) == 1


def test_a_set_grpc_took_at_a_handshake_is_reported_before_any_tick(files: Files) -> None:
    """gRPC's fetcher reloads the files from its own threads: the gauges follow at once."""
    ca = trustme.CA()
    files.install(ca, not_before=NOW - 80 * DAY, not_after=NOW + 10 * DAY)
    clock, registry = ManualClock(), CollectorRegistry()
    listeners = security(files, clock, registry=registry, wall=ManualClock(unix_ns(NOW)))
    files.install(ca, not_before=NOW - DAY, not_after=NOW + 20 * DAY)
    clock.advance(RELOAD_SECONDS)
    assert listeners._certificates is not None
    assert listeners._certificates.refresh() is True  # what gRPC's fetcher does
    assert reported(registry, "certificate") == dates(NOW - DAY, NOW + 20 * DAY)


def test_the_client_ca_is_reported_by_its_first_ca_to_expire(files: Files, tmp_path: Path) -> None:
    """A CA file may hold the old CA beside the new one: the old one's clients are refused
    when it expires. Its notBefore is that same CA's, not the file's earliest: here the CA to
    expire first was issued last."""
    files.install(trustme.CA())
    client_ca = tmp_path / "client-ca.pem"
    later = ca_certificate("new", NOW + 400 * DAY, not_before=NOW - 300 * DAY)
    sooner = ca_certificate("old", NOW + 5 * DAY, not_before=NOW - 5 * DAY)
    client_ca.write_bytes(later + sooner)
    clock, registry = ManualClock(), CollectorRegistry()
    listeners = security(files, clock, client_ca, registry, ManualClock(unix_ns(NOW)))
    assert {file: reported(registry, file) for file in FILES} == {
        "certificate": (946684800.0, 32503680000.0),  # trustme's: 2000 to 3000
        "client_ca": dates(NOW - 5 * DAY, NOW + 5 * DAY),
    }

    staged = tmp_path / "client-ca.new"
    staged.write_bytes(later)  # the old CA taken out
    os.replace(staged, client_ca)
    clock.advance(RELOAD_SECONDS)
    listeners.refresh()
    assert reported(registry, "client_ca") == dates(NOW - 300 * DAY, NOW + 400 * DAY)


def test_an_expired_ca_beside_a_valid_one_is_not_the_client_cas_expiry(
    files: Files, tmp_path: Path
) -> None:
    """A rotation keeps the old CA beside the new one: once expired it verifies no one, and
    reporting its notAfter paged ToolwatchCertificateExpiresVerySoon until the file changed.
    The first to expire of the CAs valid now is reported."""
    files.install(trustme.CA())
    client_ca = tmp_path / "client-ca.pem"
    old = ca_certificate("old", NOW - DAY, not_before=NOW - 730 * DAY)
    new = ca_certificate("new", NOW + 5 * 365 * DAY, not_before=NOW - 60 * DAY)
    client_ca.write_bytes(old + new)
    registry = CollectorRegistry()
    security(files, ManualClock(), client_ca, registry, ManualClock(unix_ns(NOW)))
    assert reported(registry, "client_ca") == dates(NOW - 60 * DAY, NOW + 5 * 365 * DAY)


def test_an_old_ca_that_expires_while_served_hands_the_report_to_its_successor(
    files: Files, tmp_path: Path
) -> None:
    """The rotation the alert advises: the old CA kept beside the new one until it expires.
    The file does not change when it does, and its past notAfter paged until the file
    changed; the report moves to the new CA at the first look after the old one expired."""
    files.install(trustme.CA())
    client_ca = tmp_path / "client-ca.pem"
    old = ca_certificate("old", NOW + DAY, not_before=NOW - 730 * DAY)
    new = ca_certificate("new", NOW + 5 * 365 * DAY, not_before=NOW - 60 * DAY)
    client_ca.write_bytes(old + new)
    clock, wall, registry = ManualClock(), ManualClock(unix_ns(NOW)), CollectorRegistry()
    listeners = security(files, clock, client_ca, registry, wall)
    assert reported(registry, "client_ca") == dates(NOW - 730 * DAY, NOW + DAY)

    wall.advance(DAY.total_seconds())  # the old CA's last second: still valid
    clock.advance(RELOAD_SECONDS)
    listeners.refresh()
    assert reported(registry, "client_ca") == dates(NOW - 730 * DAY, NOW + DAY)

    wall.advance(1)
    clock.advance(RELOAD_SECONDS)
    listeners.refresh()
    assert reported(registry, "client_ca") == dates(NOW - 60 * DAY, NOW + 5 * 365 * DAY)


def test_a_client_ca_file_of_expired_cas_is_reported_by_the_last_to_expire(
    files: Files, tmp_path: Path
) -> None:
    """None valid: every mTLS client is refused, and the gauge says since when."""
    files.install(trustme.CA())
    client_ca = tmp_path / "client-ca.pem"
    older = ca_certificate("older", NOW - 9 * DAY, not_before=NOW - 730 * DAY)
    old = ca_certificate("old", NOW - DAY, not_before=NOW - 365 * DAY)
    client_ca.write_bytes(old + older)
    registry = CollectorRegistry()
    security(files, ManualClock(), client_ca, registry, ManualClock(unix_ns(NOW)))
    assert reported(registry, "client_ca") == dates(NOW - 365 * DAY, NOW - DAY)


def test_no_dates_are_reported_without_tls() -> None:
    registry = CollectorRegistry()
    clock = ManualClock()
    ListenerSecurity(
        SecuritySettings(), clock, PrometheusMetrics(registry), senders=SenderLog(clock)
    )
    assert [reported(registry, file) for file in FILES] == [(None, None), (None, None)]


def test_a_client_ca_taken_out_is_no_longer_trusted_by_new_connections(
    files: Files, tmp_path: Path
) -> None:
    server_ca, old_clients, new_clients = trustme.CA(), trustme.CA(), trustme.CA()
    files.install(server_ca)
    client_ca = tmp_path / "client-ca.pem"
    old_clients.cert_pem.write_to_path(str(client_ca))
    clock = ManualClock()
    listeners = security(files, clock, client_ca)
    served = listeners.ssl_context("http")
    assert served is not None
    old_agent, new_agent = old_clients.issue_cert("agent"), new_clients.issue_cert("agent")
    assert handshake(served, server_ca, old_agent) is True
    assert handshake(served, server_ca, new_agent) is False
    assert handshake(served, server_ca) is False

    staged = tmp_path / "client-ca.new"
    new_clients.cert_pem.write_to_path(str(staged))
    os.replace(staged, client_ca)
    clock.advance(RELOAD_SECONDS)
    listeners.refresh()
    assert handshake(served, server_ca, old_agent) is False
    assert handshake(served, server_ca, new_agent) is True


def _trusted_block(ca: trustme.CA) -> bytes:
    """``ca`` as a ``TRUSTED CERTIFICATE`` block (OpenSSL's trust settings after the
    certificate, none here)."""
    der = ssl.PEM_cert_to_DER_cert(ca.cert_pem.bytes().decode())
    body = base64.encodebytes(der + b"\x30\x00")
    return b"-----BEGIN TRUSTED CERTIFICATE-----\n" + body + b"-----END TRUSTED CERTIFICATE-----\n"


def test_only_a_reload_that_takes_a_client_ca_out_tells_the_lasting_calls(
    files: Files, tmp_path: Path
) -> None:
    """Was (745c865): a change of the client CAs had each open stream's certificate checked
    by toolwatch, with the CAs as ``SSLContext.get_ca_certs`` lists them (no certificate
    that is no CA, such as a client's own pinned one). Now: nothing is checked; a set whose
    client CA file lacks a block of the last one's, compared by DER, whatever it holds (a CA,
    a pinned client certificate, a ``TRUSTED CERTIFICATE``), is told to the listener's
    callbacks, whose streams end for their clients to handshake again. One added, the same
    ones in another order, or a new served certificate, tells nothing."""
    server_ca, first, second = trustme.CA(), trustme.CA(), trustme.CA()
    files.install(server_ca)
    pinned = first.issue_cert("agent").cert_chain_pems[0].bytes()  # no CA
    client_ca = tmp_path / "client-ca.pem"
    client_ca.write_bytes(first.cert_pem.bytes() + pinned)
    clock, registry = ManualClock(), CollectorRegistry()
    listeners = security(files, clock, client_ca, registry)
    told: list[str] = []
    listeners.on_client_ca_removed("stream", lambda: told.append("stream"))

    def reload(*blocks: bytes) -> list[str]:
        staged = tmp_path / "client-ca.new"
        staged.write_bytes(b"".join(blocks))
        os.replace(staged, client_ca)
        clock.advance(RELOAD_SECONDS)
        listeners.refresh()
        return list(told)

    one, two, trusted = first.cert_pem.bytes(), second.cert_pem.bytes(), _trusted_block(second)
    steps = {
        "a CA added": reload(two, one, pinned),
        "another order": reload(pinned, one, two),
        "a trusted block added": reload(one, pinned, two, trusted),
        "the pinned certificate out": reload(one, two, trusted),
        "the trusted block out": reload(one, two),
    }
    files.install(trustme.CA())
    clock.advance(RELOAD_SECONDS)
    listeners.refresh()
    steps["a new served certificate"] = list(told)
    assert steps == {
        "a CA added": [],
        "another order": [],
        "a trusted block added": [],
        "the pinned certificate out": ["stream"],
        "the trusted block out": ["stream", "stream"],
        "a new served certificate": ["stream", "stream"],
    }
    failures = registry.get_sample_value(
        "toolwatch_security_reload_failures_total", {"file": "certificate"}
    )
    assert failures == 0  # every set was taken


def test_a_client_ca_served_and_taken_out_between_two_refreshes_is_told(
    files: Files, tmp_path: Path
) -> None:
    """gRPC's certificate fetcher reloads the files before a handshake, from its own threads
    (``CertificateFiles.refresh``), so a set can be served and replaced between two of the
    tick's ``refresh``. Was: ``refresh`` compared the set served then with the one it saw
    last: a CA added and taken out in between was never told. Now: the client CAs of every
    set served since are compared, so it is; told once, and not again at a ``refresh`` that
    finds nothing new; one added and still there tells nothing."""
    server_ca, kept, short_lived = trustme.CA(), trustme.CA(), trustme.CA()
    files.install(server_ca)
    client_ca = tmp_path / "client-ca.pem"
    client_ca.write_bytes(kept.cert_pem.bytes())
    clock = ManualClock()
    listeners = security(files, clock, client_ca)
    fetcher = listeners._certificates  # what gRPC's fetcher reloads before a handshake
    assert fetcher is not None
    told: list[str] = []
    listeners.on_client_ca_removed("stream", lambda: told.append("stream"))

    def served_between_ticks(*cas: trustme.CA) -> bool:
        staged = tmp_path / "client-ca.new"
        staged.write_bytes(b"".join(ca.cert_pem.bytes() for ca in cas))
        os.replace(staged, client_ca)
        clock.advance(RELOAD_SECONDS)
        return fetcher.refresh()

    assert served_between_ticks(kept, short_lived) and served_between_ticks(kept)
    listeners.refresh()
    after_the_removal = list(told)
    listeners.refresh()
    assert served_between_ticks(kept, short_lived)
    listeners.refresh()
    assert (after_the_removal, told) == (["stream"], ["stream"])


def test_a_listener_that_takes_no_client_certificate_is_not_told(
    files: Files, tmp_path: Path
) -> None:
    """A stream served in plaintext (or with no client CA at all) was not handshaken against
    a client CA: taking one out ends none of its streams."""
    server_ca, clients = trustme.CA(), trustme.CA()
    files.install(server_ca)
    client_ca = tmp_path / "client-ca.pem"
    client_ca.write_bytes(clients.cert_pem.bytes())
    tls = TlsSettings(
        cert_file=files.cert,
        key_file=files.key,
        client_ca_file=client_ca,
        reload_seconds=RELOAD_SECONDS,
        listeners=("grpc", "http", "metrics"),
    )
    clock, told = ManualClock(), []
    plaintext_stream = ListenerSecurity(
        SecuritySettings(tls=tls),
        clock,
        PrometheusMetrics(CollectorRegistry()),
        senders=SenderLog(clock),
    )
    plaintext_stream.on_client_ca_removed("stream", lambda: told.append("stream"))
    plaintext_stream.on_client_ca_removed("grpc", lambda: told.append("grpc"))
    no_client_ca = security(files, clock)
    no_client_ca.on_client_ca_removed("stream", lambda: told.append("no client CA"))
    staged = tmp_path / "client-ca.new"
    staged.write_bytes(trustme.CA().cert_pem.bytes())
    os.replace(staged, client_ca)
    clock.advance(RELOAD_SECONDS)
    plaintext_stream.refresh()
    no_client_ca.refresh()
    assert told == ["grpc"]


def test_mutual_tls_sessions_are_not_resumed(files: Files, tmp_path: Path) -> None:
    """A resumed session skips the client certificate's check: a client whose CA was taken
    out could resume one made before. So a mutual-TLS listener speaks TLS 1.3 only (TLS 1.2
    also resumes by session id, from a cache no reload reaches) and issues no tickets."""
    server_ca, clients = trustme.CA(), trustme.CA()
    files.install(server_ca)
    client_ca = tmp_path / "client-ca.pem"
    clients.cert_pem.write_to_path(str(client_ca))
    listeners = security(files, ManualClock(), client_ca)
    served = listeners.ssl_context("http")
    assert served is not None
    assert (served.num_tickets, served.minimum_version) == (0, ssl.TLSVersion.TLSv1_3)
    client = ssl.create_default_context(cadata=server_ca.cert_pem.bytes().decode())
    clients.issue_cert("agent").configure_cert(client)
    sessions = [_session_of(served, client, None)]
    sessions.append(_session_of(served, client, sessions[0][0]))
    assert [reused for _, reused in sessions] == [False, False]


def _session_of(
    served: ssl.SSLContext, client: ssl.SSLContext, offered: ssl.SSLSession | None
) -> tuple[ssl.SSLSession | None, bool]:
    """One exchange over a socket pair offering ``offered``: the client's session after it,
    and whether the server resumed the offered one."""
    ours, theirs = socket.socketpair()

    def serve() -> None:
        with served.wrap_socket(theirs, server_side=True) as tls:
            tls.recv(1)
            tls.sendall(b"y")

    server = threading.Thread(target=serve)
    server.start()
    try:
        with client.wrap_socket(ours, server_hostname="127.0.0.1", session=offered) as tls:
            tls.sendall(b"x")
            tls.recv(1)  # TLS 1.3 tickets, if any, arrive with the server's first data
            return tls.session, tls.session_reused
    finally:
        server.join(timeout=10)
        theirs.close()
