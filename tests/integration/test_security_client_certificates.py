"""Under mutual TLS: what a client refused for its certificate is answered, and what of it
toolwatch counts in ``toolwatch_auth_failures_total`` (and its alert and HELP text say)."""

from __future__ import annotations

import datetime
import ssl
import urllib.error
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import RunningServer, StartServer
from tests.integration.pki_support import TOKEN, Pki
from tests.integration.security_support import (
    AUTH_FAILURES,
    auth,
    client_context,
    grpc_credentials,
    http_get,
    post_traces,
    raw_export,
    tls,
)

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "toolwatch-rules.yaml"
_DAY = datetime.timedelta(days=1)


def _expired_client(pki: Pki) -> tuple[bytes, bytes]:
    """A client certificate the client CA signed, expired yesterday, and its key (PEM)."""
    now = datetime.datetime.now(datetime.UTC)
    issued = pki.clients.issue_cert(
        "agent.example", not_before=now - 30 * _DAY, not_after=now - _DAY
    )
    return issued.cert_chain_pems[0].bytes(), issued.private_key_pem.bytes()


def _help(server: RunningServer, pki: Pki, metric: str) -> str:
    """The HELP text of ``metric`` (its name less ``_total``) as a scrape reads it."""
    scraped = http_get(
        f"https://{server.address('metrics')}/metrics", client_context(pki, client=True)
    )
    assert scraped.status == 200
    families = text_string_to_metric_families(scraped.body.decode())
    [family] = [f for f in families if f.name == metric]
    documentation: str = family.documentation
    return documentation


def test_clients_refused_at_the_handshake_are_not_counted_and_the_help_text_says_so(
    start_server: StartServer, pki: Pki, tmp_path: Path
) -> None:
    """Was: ``toolwatch_auth_failures_total``'s HELP text (and
    ToolwatchExportsUnauthenticated, docs/security.md) said a wrong client certificate was
    counted, while a client refused at the handshake (no certificate, an expired one,
    another CA's) was counted nowhere: an exporter locked out by a client CA rotation went
    unseen behind a counter at 0. Now: the counter is still 0 for them, since OpenSSL and
    gRPC refuse them before toolwatch sees a request (gRPC has no hook on a failed
    handshake), and its HELP text says what it counts and that these are not."""
    server = start_server(**tls(pki, mutual=True))
    expired_cert, expired_key = _expired_client(pki)

    expired = grpc.ssl_channel_credentials(pki.read("ca"), expired_key, expired_cert)
    for credentials in (grpc_credentials(pki), expired, grpc_credentials(pki, "rogue")):
        assert raw_export(server, credentials) == grpc.StatusCode.UNAVAILABLE
    assert raw_export(server, grpc_credentials(pki, "client")) == grpc.StatusCode.OK

    expired_context = client_context(pki)
    expired_context.load_cert_chain(*pki.client_files(tmp_path, expired_cert, expired_key))
    for context in (client_context(pki), expired_context, client_context(pki, "rogue")):
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            post_traces(server, context, token=None)
    assert post_traces(server, client_context(pki, client=True), token=None).status == 200

    for listener in ("grpc", "http"):
        assert server.sample(AUTH_FAILURES, {"listener": listener}) == 0
    documentation = _help(server, pki, AUTH_FAILURES.removesuffix("_total"))
    assert documentation.startswith("Requests refused for their credentials after the TLS")
    assert "Not counted: clients refused in the TLS handshake" in documentation
    assert "wrong bearer token or client certificate" not in documentation


def _alert(name: str) -> dict[str, Any]:
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    [rule] = [r for g in groups for r in g["rules"] if r.get("alert") == name]
    annotations: dict[str, Any] = rule["annotations"]
    return annotations


def test_the_alerts_say_where_a_client_refused_at_the_handshake_shows() -> None:
    """Was: ToolwatchExportsUnauthenticated's summary had it fire for "a client certificate
    it does not accept", which it cannot see at the handshake. Now: its summary names the
    certificates it counts (those whose names are refused), its description what it does
    not count and where that shows, and ToolwatchReceivesNothing names the cause."""
    unauthenticated = _alert("ToolwatchExportsUnauthenticated")
    summary = " ".join(unauthenticated["summary"].split())
    assert summary.endswith("or a client certificate whose names it does not accept.")
    description = " ".join(unauthenticated["description"].split())
    assert "Not counted here, so not this alert: exporters refused in the TLS handshake" in (
        description
    )
    assert "ToolwatchReceivesNothing fires once no span arrives at all" in description
    nothing = " ".join(_alert("ToolwatchReceivesNothing")["description"].split())
    assert "client certificate is refused in the handshake" in nothing


@pytest.mark.parametrize(
    "tokens",
    [False, True],
    ids=["metrics without tokens", "metrics with tokens"],
)
def test_a_scrape_without_a_client_certificate_is_forbidden_not_challenged(
    start_server: StartServer, pki: Pki, tokens: bool
) -> None:
    """Was: the metrics listener under mutual TLS answered a request without a client
    certificate 401 with no ``WWW-Authenticate`` (RFC 9110 §15.5.2 requires a challenge
    on every 401, and none asks for a certificate). Now: 403, empty, counted, whether the
    listener also takes tokens or not (a token does not stand in for the certificate)."""
    more: dict[str, Any] = (
        auth(pki.token_file, security__auth__listeners=["grpc", "http", "metrics", "stream"])
        if tokens
        else {}
    )
    server = start_server(**tls(pki, mutual=True), **more)
    answer = http_get(f"https://{server.address('metrics')}/metrics", client_context(pki), TOKEN)
    assert (answer.status, answer.body) == (403, b"")
    assert "WWW-Authenticate" not in answer.headers
    assert server.sample(AUTH_FAILURES, {"listener": "metrics"}) == 1
