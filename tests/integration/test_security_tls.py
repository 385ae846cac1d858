"""TLS and mutual TLS on every listener, through real clients, and certificates rotated,
expiring and dated in metrics, with certificates made at run time (trustme)."""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import re
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import trustme
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace.export import SpanExportResult
from prometheus_client.parser import text_string_to_metric_families

from tests.certificates import install_certificate, not_after, not_before
from tests.integration.conftest import RunningServer, StartServer
from tests.integration.otlp_support import refund_spans
from tests.integration.pki_support import TOKEN, Pki, write_leaf
from tests.integration.security_support import (
    AUTH_FAILURES,
    CERTIFICATE_EXPIRY,
    CERTIFICATE_NOT_BEFORE,
    DAY,
    RELOAD_FAILURES,
    ROOT,
    assert_one_refund_trace,
    auth,
    client_context,
    grpc_credentials,
    http_get,
    post_traces,
    raw_export,
    send_grpc,
    send_http,
    serving_certificate,
    tls,
)


def test_otlp_grpc_over_tls_builds_the_tooltrace(start_server: StartServer, pki: Pki) -> None:
    server = start_server(**tls(pki))
    assert send_grpc(server, refund_spans(), grpc_credentials(pki)) is SpanExportResult.SUCCESS
    assert_one_refund_trace(server)


def test_plaintext_to_a_tls_grpc_port_fails(start_server: StartServer, pki: Pki) -> None:
    server = start_server(**tls(pki))
    assert raw_export(server) == grpc.StatusCode.UNAVAILABLE
    assert server.sample("toolwatch_spans_received_total", {"transport": "grpc"}) == 0


def test_otlp_http_over_tls_builds_the_tooltrace(start_server: StartServer, pki: Pki) -> None:
    server = start_server(**tls(pki))
    assert send_http(server, refund_spans(), pki) is SpanExportResult.SUCCESS
    assert_one_refund_trace(server)


@pytest.mark.parametrize("secure", [True, False], ids=["tls", "plaintext"])
@pytest.mark.parametrize("listener", ["grpc", "http", "metrics", "stream"])
def test_a_handshake_that_never_finishes_is_closed_at_the_idle_timeout(
    start_server: StartServer, pki: Pki, listener: str, secure: bool
) -> None:
    """A client that opens connections and never finishes the handshake (no ClientHello; on
    gRPC, no HTTP/2 preface) must not hold them for asyncio's 60 s or gRPC's 120: closed at
    ingest.idle_timeout_seconds. Real time is the point: 0.5 s."""
    server = start_server(**(tls(pki) if secure else {}), ingest__idle_timeout_seconds=0.5)
    host, port = server.address(listener).rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as client:
        client.sendall(b"\x16\x03\x01" if secure else b"")  # a TLS record's start, or nothing
        with contextlib.suppress(ConnectionResetError):  # aborted rather than closed: as good
            while client.recv(100):  # gRPC sends its HTTP/2 settings first
                pass  # closed by the server, before the 10 s timeout


def test_mutual_tls_grpc_needs_a_certificate_signed_by_the_client_ca(
    start_server: StartServer, pki: Pki
) -> None:
    server = start_server(**tls(pki, mutual=True))
    assert raw_export(server, grpc_credentials(pki)) == grpc.StatusCode.UNAVAILABLE
    assert raw_export(server, grpc_credentials(pki, "rogue")) == grpc.StatusCode.UNAVAILABLE
    result = send_grpc(server, refund_spans(), grpc_credentials(pki, "client"))
    assert result is SpanExportResult.SUCCESS
    assert_one_refund_trace(server)


def test_mutual_tls_http_needs_a_client_certificate(start_server: StartServer, pki: Pki) -> None:
    server = start_server(**tls(pki, mutual=True))
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        post_traces(server, client_context(pki), token=None)
    assert post_traces(server, client_context(pki, client=True), token=None).status == 200
    assert send_http(server, refund_spans(), pki, client=True) is SpanExportResult.SUCCESS
    assert_one_refund_trace(server)


def test_mutual_tls_metrics_lets_probes_in_without_a_client_certificate(
    start_server: StartServer, pki: Pki
) -> None:
    """Kubelet's HTTPS probes send no client certificate: on the metrics listener the
    handshake succeeds without one, and only /healthz and /readyz answer."""
    server = start_server(**tls(pki, mutual=True))
    base = f"https://{server.address('metrics')}"
    anonymous, agent = client_context(pki), client_context(pki, client=True)
    assert [http_get(f"{base}{path}", anonymous).status for path in ("/healthz", "/readyz")] == [
        200,
        200,
    ]
    refused = http_get(f"{base}/metrics", anonymous)
    assert (refused.status, refused.body) == (403, b"")
    assert server.sample(AUTH_FAILURES, {"listener": "metrics"}) == 1

    scraped = http_get(f"{base}/metrics", agent)
    assert scraped.status == 200
    assert b"toolwatch_build_info" in scraped.body
    rogue = client_context(pki)
    rogue.load_cert_chain(pki.rogue_cert, pki.rogue_key)
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        http_get(f"{base}/healthz", rogue)  # a certificate the client CA did not sign
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        post_traces(server, anonymous, token=None)  # OTLP/HTTP still requires one


def test_metrics_over_tls_and_token_while_probes_stay_open(
    start_server: StartServer, pki: Pki
) -> None:
    listeners = ["grpc", "http", "metrics", "stream"]
    server = start_server(**tls(pki), **auth(pki.token_file, security__auth__listeners=listeners))
    base, context = f"https://{server.address('metrics')}", client_context(pki)

    refused = http_get(f"{base}/metrics", context)
    assert (refused.status, refused.headers["WWW-Authenticate"], refused.body) == (
        401,
        'Bearer realm="toolwatch"',
        b"",
    )
    scraped = http_get(f"{base}/metrics", context, TOKEN)
    assert scraped.status == 200
    assert b'toolwatch_auth_failures_total{listener="metrics"} 1.0' in scraped.body
    assert http_get(f"{base}/healthz", context).body == b"ok\n"
    assert http_get(f"{base}/readyz", context).body == b"ready\n"
    with pytest.raises((urllib.error.URLError, ConnectionError)):  # plaintext to a TLS port
        http_get(f"http://{server.address('metrics')}/healthz", None)


def _image_health_check(address: str) -> subprocess.CompletedProcess[str]:
    """The Dockerfile's HEALTHCHECK command, run as the image runs it, against ``address``
    instead of its port 9464 (which may be taken here)."""
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    healthcheck = text.partition("\nHEALTHCHECK ")[2]
    command = json.loads(re.findall(r"^\s*CMD (\[.*\])$", healthcheck, re.MULTILINE)[0])
    assert command[0] == "python" and any("127.0.0.1:9464" in arg for arg in command), command
    args = [arg.replace("127.0.0.1:9464", address) for arg in command[1:]]
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=30, check=False
    )


@pytest.mark.parametrize("security", ["none", "tls", "mutual tls"])
def test_the_image_health_check_passes_with_and_without_tls_on_metrics(
    start_server: StartServer, pki: Pki, caplog: pytest.LogCaptureFixture, security: str
) -> None:
    """--tls-cert puts TLS on the metrics listener too: a check asking plain HTTP left a
    correctly configured container unhealthy. With a client CA, probes need no certificate."""
    overrides = tls(pki, mutual=security == "mutual tls") if security != "none" else {}
    server = start_server(**overrides)
    assert server.app.config.security.uses_tls("metrics") is (security != "none")
    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        done = _image_health_check(server.address("metrics"))
    assert done.returncode == 0, done.stderr
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO] == []


def test_the_image_health_check_fails_where_nothing_listens() -> None:
    with socket.socket() as bound:  # bound, not listening: connections are refused
        bound.bind(("127.0.0.1", 0))
        done = _image_health_check(f"127.0.0.1:{bound.getsockname()[1]}")
    assert done.returncode == 1
    assert "ConnectionRefusedError" in done.stderr


def _trusted_by(server: RunningServer, ca: trustme.CA) -> tuple[bool, bool]:
    """Whether a new gRPC connection and a new HTTPS connection trusting only ``ca`` get a
    certificate it signed."""
    pem = ca.cert_pem.bytes()
    # A fresh connection every time: no subchannel shared with an earlier channel.
    options = [("grpc.use_local_subchannel_pool", 1)]
    with grpc.secure_channel(
        server.address("grpc"), grpc.ssl_channel_credentials(pem), options
    ) as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)  # type: ignore[no-untyped-call]
        try:
            stub.Export(trace_service_pb2.ExportTraceServiceRequest(), timeout=10)
            grpc_ok = True
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.UNAVAILABLE  # the handshake failed
            grpc_ok = False
    context = ssl.create_default_context(cadata=pem.decode())
    try:
        https_ok = http_get(f"https://{server.address('metrics')}/healthz", context).status == 200
    except urllib.error.URLError as error:
        assert isinstance(error.reason, ssl.SSLCertVerificationError)
        https_ok = False
    return grpc_ok, https_ok


def test_a_rotated_certificate_is_served_to_new_connections_without_a_restart(
    start_server: StartServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first, second, third = trustme.CA(), trustme.CA(), trustme.CA()
    server, cert, key = serving_certificate(start_server, tmp_path, first)
    assert _trusted_by(server, first) == (True, True)
    assert _trusted_by(server, second) == (False, False)

    install_certificate(second, cert, key)
    server.clock.advance(29)  # not looked at yet
    server.call(server.app.tick)
    assert _trusted_by(server, first) == (True, True)

    server.clock.advance(1)
    server.call(server.app.tick)
    assert _trusted_by(server, second) == (True, True)
    assert _trusted_by(server, first) == (False, False)

    # Half a rotation (a new certificate, the old key) does not load: the last good set stays.
    install_certificate(third, cert, key, key=False)
    server.clock.advance(30)
    with caplog.at_level(logging.ERROR, logger="toolwatch"):
        server.call(server.app.tick)
    assert _trusted_by(server, second) == (True, True)
    assert _trusted_by(server, third) == (False, False)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors and all(e.startswith("keeping the previous TLS certificate") for e in errors)


def test_a_rotation_to_an_expired_certificate_keeps_the_valid_one(
    start_server: StartServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """OpenSSL loads an expired certificate (a restored backup, a renewal job that wrote the
    old file): taken, it failed every new OTLP, metrics and stream handshake, while the log
    said "reloaded" and no reload failure was counted. Judged on the real clock."""
    ca = trustme.CA()
    server, cert, key = serving_certificate(start_server, tmp_path, ca)
    now = datetime.datetime.now(datetime.UTC)
    install_certificate(ca, cert, key, not_before=now - 30 * DAY, not_after=now - DAY)
    server.clock.advance(30)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="toolwatch"):
        server.call(server.app.tick)  # the look at the files (gRPC's next handshake looks too)

    assert _trusted_by(server, ca) == (True, True)
    assert server.sample(RELOAD_FAILURES, {"file": "certificate"}) == 1
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert len(said) == 1 and said[0][0] == "ERROR"
    assert said[0][1].startswith(
        f"keeping the previous TLS certificate: {cert}: the certificate expired at"
    )


def _scraped_dates(
    server: RunningServer, ca: trustme.CA, pki: Pki
) -> dict[str, tuple[float | None, float]]:
    """``toolwatch_tls_certificate_{not_before,expiry}_timestamp_seconds`` by file, as
    (notBefore, notAfter), read from a scrape of the real /metrics over mutual TLS (a new
    connection: the certificate served now)."""
    context = ssl.create_default_context(cadata=ca.cert_pem.bytes().decode())
    context.load_cert_chain(pki.client_cert, pki.client_key)
    scraped = http_get(f"https://{server.address('metrics')}/metrics", context)
    assert scraped.status == 200
    families = {f.name: f for f in text_string_to_metric_families(scraped.body.decode())}
    by_file = [
        {sample.labels["file"]: sample.value for sample in families[name].samples}
        for name in (CERTIFICATE_NOT_BEFORE, CERTIFICATE_EXPIRY)
    ]
    return {file: (by_file[0].get(file), at) for file, at in by_file[1].items()}


def _dates(pem: bytes) -> tuple[float, float]:
    return not_before(pem), not_after(pem)


def test_metrics_say_when_the_served_certificate_and_client_ca_are_valid(
    start_server: StartServer, pki: Pki, tmp_path: Path
) -> None:
    """The notBefore and notAfter of the certificate served now, as the real exposition reads,
    at start-up and after a rotation; the client CA's beside them."""
    ca = trustme.CA()
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    install_certificate(ca, cert, key, not_before=now - 30 * DAY, not_after=now + 60 * DAY)
    server = start_server(
        security__tls__cert_file=str(cert),
        security__tls__key_file=str(key),
        security__tls__client_ca_file=str(pki.client_ca),
        security__tls__reload_seconds=30,
    )
    client_ca = _dates(pki.read("client_ca"))
    started = _dates(cert.read_bytes())
    assert started == ((now - 30 * DAY).timestamp(), (now + 60 * DAY).timestamp())
    assert _scraped_dates(server, ca, pki) == {"certificate": started, "client_ca": client_ca}

    install_certificate(ca, cert, key, not_before=now, not_after=now + 90 * DAY)  # renewed
    server.clock.advance(30)
    server.call(server.app.tick)
    renewed = _dates(cert.read_bytes())
    assert renewed == (now.timestamp(), (now + 90 * DAY).timestamp())
    assert _scraped_dates(server, ca, pki) == {"certificate": renewed, "client_ca": client_ca}


def test_plaintext_metrics_have_no_certificate_dates(start_server: StartServer) -> None:
    server = start_server()
    with urllib.request.urlopen(f"http://{server.address('metrics')}/metrics", timeout=10) as r:
        text = r.read().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    declared = [families[name].samples for name in (CERTIFICATE_EXPIRY, CERTIFICATE_NOT_BEFORE)]
    assert declared == [[], []]  # declared, no series


def test_a_certificate_expiring_within_14_days_is_warned_of_at_start_up(
    start_server: StartServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    ends = datetime.datetime.now(datetime.UTC).replace(microsecond=0) + 10 * DAY
    install_certificate(trustme.CA(), cert, key, not_after=ends)
    with caplog.at_level(logging.WARNING, logger="toolwatch"):
        start_server(security__tls__cert_file=str(cert), security__tls__key_file=str(key))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    expected = (
        f"security.tls.cert_file {cert}: the certificate expires at"
        f" {ends:%Y-%m-%d %H:%M:%S} UTC, in 9 days 23 hours"
    )
    assert [w for w in warnings if w.startswith(expected)] == [
        f"{expected}: every client refuses it from then on; renew it (toolwatch takes the"
        " renewed file within tls.reload_seconds, without a restart)"
    ]


def test_a_fresh_day_long_certificate_is_not_warned_of_at_start_up(
    start_server: StartServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A mesh's certificate, for a day: under 14 days from the start, warned of only with less
    than a third of its lifetime left."""
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    hour = datetime.timedelta(hours=1)
    install_certificate(trustme.CA(), cert, key, not_before=now - hour, not_after=now + 23 * hour)
    with caplog.at_level(logging.WARNING, logger="toolwatch"):
        start_server(security__tls__cert_file=str(cert), security__tls__key_file=str(key))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [w for w in warnings if w.startswith("security.tls.cert_file")] == []


def test_a_rotated_client_ca_admits_the_clients_it_signed(
    start_server: StartServer, pki: Pki, tmp_path: Path
) -> None:
    client_ca = tmp_path / "client-ca.pem"
    client_ca.write_bytes(pki.read("client_ca"))
    server = start_server(
        **tls(pki),
        security__tls__client_ca_file=str(client_ca),
        security__tls__reload_seconds=30,
    )
    new_ca = trustme.CA()
    cert, key = tmp_path / "agent.pem", tmp_path / "agent.key"
    write_leaf(new_ca.issue_cert("agent.example"), cert, key)
    agent = grpc.ssl_channel_credentials(pki.read("ca"), key.read_bytes(), cert.read_bytes())
    assert raw_export(server, agent) == grpc.StatusCode.UNAVAILABLE

    staged = tmp_path / "client-ca.new"
    new_ca.cert_pem.write_to_path(str(staged))
    os.replace(staged, client_ca)
    server.clock.advance(30)
    assert raw_export(server, agent) == grpc.StatusCode.OK
    assert raw_export(server, grpc_credentials(pki, "client")) == grpc.StatusCode.UNAVAILABLE


@dataclass
class Scrape:
    version: str | None
    resumed: bool
    reply: bytes
    session: ssl.SSLSession | None


def scrape_once(
    server: RunningServer, context: ssl.SSLContext, session: ssl.SSLSession | None = None
) -> Scrape:
    """One GET /metrics on its own connection, offering ``session`` for resumption."""
    host, _, port = server.address("metrics").rpartition(":")
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host, session=session) as conn,
    ):
        conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: toolwatch\r\nConnection: close\r\n\r\n")
        reply = conn.recv(12)  # TLS 1.3: a refused certificate shows here, after the handshake
        return Scrape(conn.version(), conn.session_reused, reply, conn.session)


def test_a_client_whose_ca_was_taken_out_cannot_resume_its_session(
    start_server: StartServer, pki: Pki, tmp_path: Path
) -> None:
    """A resumed session skips the client certificate's check. TLS 1.2 resumed by session id
    from the cache of the context the listener started with, which a rotation cannot reach:
    with a client CA the HTTPS listeners speak TLS 1.3 only, and issue no tickets."""
    client_ca = tmp_path / "client-ca.pem"
    client_ca.write_bytes(pki.read("client_ca"))
    server = start_server(
        **tls(pki),
        security__tls__client_ca_file=str(client_ca),
        security__tls__reload_seconds=30,
    )
    tls12 = client_context(pki, client=True)
    tls12.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(ssl.SSLError):
        scrape_once(server, tls12)

    agent = client_context(pki, client=True)
    first = scrape_once(server, agent)
    assert (first.version, first.resumed, first.reply) == ("TLSv1.3", False, b"HTTP/1.1 200")
    again = scrape_once(server, agent, first.session)
    assert (again.resumed, again.reply) == (False, b"HTTP/1.1 200")  # a full handshake

    staged = tmp_path / "client-ca.new"
    trustme.CA().cert_pem.write_to_path(str(staged))
    os.replace(staged, client_ca)
    server.clock.advance(30)
    server.call(server.app.tick)  # the reload
    try:  # TLS 1.3: the client has finished its handshake when the server refuses
        refused = scrape_once(server, agent, again.session).reply
    except (ssl.SSLError, ConnectionError) as error:
        refused = str(error).encode()
    assert not refused.startswith(b"HTTP")
    # A CA-less listener still speaks TLS 1.2 to the clients that need it.
    plain = start_server(**tls(pki))
    assert scrape_once(plain, tls12).reply == b"HTTP/1.1 200"
