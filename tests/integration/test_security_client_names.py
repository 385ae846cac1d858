"""Mutual TLS's client names (``security.tls.client_names``): a certificate the client CA
signed for another client is refused before its token is read, on every listener."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from google.rpc import code_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.certificates import alt_names, client_certificate, with_edi_party_name
from tests.integration.conftest import StartServer
from tests.integration.otlp_support import refund_spans
from tests.integration.pki_support import NAMED_CN, NAMED_DNS, NAMED_EMAIL, NAMED_SPIFFE, TOKEN, Pki
from tests.integration.security_support import (
    AUTH_FAILURES,
    POLICY,
    answers_to,
    assert_one_refund_trace,
    auth,
    bearer,
    client_context,
    client_names,
    grpc_credentials,
    health_check,
    health_watch,
    http_get,
    missing_verification,
    post_traces,
    raw_export,
    send_grpc,
    send_http,
    tail_during,
    tail_refused,
    tls,
    unverified_refund,
)
from toolwatch.tail_access import StreamAccess
from toolwatch.tail_exits import EXIT_USAGE


def test_tail_on_mutual_tls_needs_a_client_certificate(start_server: StartServer, pki: Pki) -> None:
    server = start_server(**tls(pki, mutual=True))
    without = tail_refused(server, StreamAccess(ca_file=pki.ca))
    assert without.code == 1

    access = StreamAccess(ca_file=pki.ca, cert_file=pki.client_cert, key_file=pki.client_key)
    run = tail_during(server, lambda: None, access)
    assert (run.code, run.out) == (0, "")
    assert "ended the stream" in run.err


@pytest.mark.parametrize(
    "name",
    [NAMED_CN, NAMED_DNS, NAMED_SPIFFE, NAMED_EMAIL],
    ids=["common-name", "dns", "spiffe-uri", "email"],
)
def test_client_names_admit_a_certificate_by_any_of_its_names(
    start_server: StartServer, pki: Pki, name: str
) -> None:
    server = start_server(**tls(pki, mutual=True, **client_names("someone.else", name)))
    assert send_grpc(server, refund_spans(), grpc_credentials(pki, "named")) is (
        SpanExportResult.SUCCESS
    )
    assert send_http(server, refund_spans(), pki, client="named") is SpanExportResult.SUCCESS
    assert server.settle() == 2
    assert server.sample(AUTH_FAILURES, {"listener": "grpc"}) == 0
    assert server.sample(AUTH_FAILURES, {"listener": "http"}) == 0


def test_a_certificate_the_ca_signed_for_another_client_is_denied_and_counted(
    start_server: StartServer, pki: Pki
) -> None:
    """A CA shared with other services signs their certificates too: one that names no
    accepted client is answered PERMISSION_DENIED / 403 with no detail, counted, and none of
    its spans are taken. Its IP address is no name (the named certificate has 10.1.2.3)."""
    server = start_server(**tls(pki, mutual=True, **client_names(NAMED_SPIFFE)))
    other = grpc_credentials(pki, "client")  # agent.example, signed by the client CA
    target = server.address("grpc")

    assert raw_export(server, other) == grpc.StatusCode.PERMISSION_DENIED
    assert send_grpc(server, refund_spans(), other) is SpanExportResult.FAILURE
    with pytest.raises(grpc.RpcError) as denied:
        health_check(target, other)
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert health_watch(target, other) == grpc.StatusCode.PERMISSION_DENIED
    answer = post_traces(server, client_context(pki, client=True), token=None)
    denied_status = status_pb2.Status.FromString(answer.body)
    assert (answer.status, denied_status.code, denied_status.message) == (
        403,
        code_pb2.PERMISSION_DENIED,
        "",
    )
    assert send_http(server, refund_spans(), pki, client=True) is SpanExportResult.FAILURE
    assert server.sample(AUTH_FAILURES, {"listener": "grpc"}) == 4
    assert server.sample(AUTH_FAILURES, {"listener": "http"}) == 2
    assert server.settle() == 0

    named = grpc_credentials(pki, "named")
    assert health_check(target, named) == health_pb2.HealthCheckResponse.SERVING
    assert health_watch(target, named) == health_pb2.HealthCheckResponse.SERVING
    assert send_grpc(server, refund_spans(), named) is SpanExportResult.SUCCESS
    assert_one_refund_trace(server)


def test_client_names_on_metrics_leave_probes_open(start_server: StartServer, pki: Pki) -> None:
    server = start_server(**tls(pki, mutual=True, **client_names(NAMED_DNS)))
    base = f"https://{server.address('metrics')}"
    anonymous, other, named = (
        client_context(pki),
        client_context(pki, client=True),
        client_context(pki, client="named"),
    )
    probes = [
        http_get(f"{base}{path}", who).status
        for path in ("/healthz", "/readyz")
        for who in (anonymous, other, named)
    ]
    assert probes == [200] * 6
    assert http_get(f"{base}/metrics", anonymous).status == 403  # no certificate
    refused = http_get(f"{base}/metrics", other)
    assert (refused.status, refused.body) == (403, b"")
    assert server.sample(AUTH_FAILURES, {"listener": "metrics"}) == 2
    assert http_get(f"{base}/metrics", named).status == 200


def test_tail_with_a_certificate_naming_another_client_is_told_so(
    start_server: StartServer, pki: Pki
) -> None:
    server = start_server(**tls(pki, mutual=True, **client_names(NAMED_CN)), **POLICY)
    other = StreamAccess(ca_file=pki.ca, cert_file=pki.client_cert, key_file=pki.client_key)
    refused = tail_refused(server, other)
    assert refused.code == EXIT_USAGE  # not retried: another certificate is needed
    assert "does not accept this client certificate (PERMISSION_DENIED)" in refused.err
    assert server.sample(AUTH_FAILURES, {"listener": "stream"}) == 1

    named = StreamAccess(ca_file=pki.ca, cert_file=pki.named_cert, key_file=pki.named_key)
    act = unverified_refund(server, grpc_credentials(pki, "named"))
    run = tail_during(server, act, named, as_json=True)
    assert run.code == 0
    [finding] = missing_verification(run.out)
    assert finding["tool"] == "issue_refund"


@pytest.mark.parametrize(
    ("common_names", "alternative"),
    [
        ([f"{NAMED_CN}\x00.evil.example"], []),
        (["evil"], [f"dns:{NAMED_DNS}\x00.evil.example"]),
        (["evil"], [f"uri:{NAMED_SPIFFE}\x00/evil"]),
        (["evil"], [f"email:{NAMED_EMAIL}\x00.evil.example"]),
    ],
    ids=["common-name", "dns", "uri", "email"],
)
def test_a_name_cut_short_by_a_nul_byte_is_no_accepted_name(
    start_server: StartServer,
    pki: Pki,
    tmp_path: Path,
    common_names: list[str],
    alternative: list[str],
) -> None:
    """gRPC's auth properties end a name at a NUL byte: a certificate the shared CA signed
    for ``otel-collector\0.evil.example`` read there as ``otel-collector``. The names are read
    from the certificate, alike on every listener."""
    names = client_names(NAMED_CN, NAMED_DNS, NAMED_SPIFFE, NAMED_EMAIL)
    server = start_server(**tls(pki, mutual=True, **names))
    cert, key = client_certificate(pki.clients, common_names, alt_names(*alternative))
    assert answers_to(server, pki, tmp_path, cert, key) == (grpc.StatusCode.PERMISSION_DENIED, 403)
    assert server.sample(AUTH_FAILURES, {"listener": "grpc"}) == 1
    assert server.sample(AUTH_FAILURES, {"listener": "http"}) == 1


def test_a_certificate_whose_names_cannot_all_be_read_names_no_client(
    start_server: StartServer, pki: Pki, tmp_path: Path
) -> None:
    """OpenSSL verifies a certificate with an ediPartyName beside the accepted DNS name;
    ``cryptography`` cannot read that name: refused and counted, not a failed call."""
    server = start_server(**tls(pki, mutual=True, **client_names(NAMED_DNS)))
    cert, key = client_certificate(pki.clients, [NAMED_CN], with_edi_party_name(NAMED_DNS))
    assert answers_to(server, pki, tmp_path, cert, key) == (grpc.StatusCode.PERMISSION_DENIED, 403)
    assert server.sample(AUTH_FAILURES, {"listener": "grpc"}) == 1
    assert server.sample(AUTH_FAILURES, {"listener": "http"}) == 1


@pytest.mark.parametrize("order", ["accepted-first", "accepted-second"])
def test_every_common_name_of_a_certificate_is_read_on_every_listener(
    start_server: StartServer, pki: Pki, tmp_path: Path, order: str
) -> None:
    cns = [NAMED_CN, "someone-else"] if order == "accepted-first" else ["someone-else", NAMED_CN]
    server = start_server(**tls(pki, mutual=True, **client_names(NAMED_CN)))
    cert, key = client_certificate(pki.clients, cns)
    assert answers_to(server, pki, tmp_path, cert, key) == (grpc.StatusCode.OK, 200)


def test_a_certificate_naming_another_client_is_refused_before_its_token_is_read(
    start_server: StartServer, pki: Pki
) -> None:
    """Checked in the other order, a client of the shared CA could tell a good token (then
    PERMISSION_DENIED) from a bad one (UNAUTHENTICATED). Each refusal is counted once."""
    server = start_server(
        **tls(pki, mutual=True, **client_names(NAMED_DNS)), **auth(pki.token_file)
    )
    other, named = grpc_credentials(pki, "client"), grpc_credentials(pki, "named")
    for token in (None, "wrong", TOKEN):
        metadata = bearer(token) if token else ()
        assert raw_export(server, other, metadata) == grpc.StatusCode.PERMISSION_DENIED
        answer = post_traces(server, client_context(pki, client=True), token=token)
        assert (answer.status, status_pb2.Status.FromString(answer.body).code) == (
            403,
            code_pb2.PERMISSION_DENIED,
        )
    assert server.sample(AUTH_FAILURES, {"listener": "grpc"}) == 3
    assert server.sample(AUTH_FAILURES, {"listener": "http"}) == 3
    assert raw_export(server, named) == grpc.StatusCode.UNAUTHENTICATED
    assert raw_export(server, named, bearer(TOKEN)) == grpc.StatusCode.OK
    assert server.sample(AUTH_FAILURES, {"listener": "grpc"}) == 4

    # Nor through a method no service serves, which a good token reaches and a bad one not.
    with grpc.secure_channel(server.address("grpc"), other) as channel:
        for token in ("wrong", TOKEN):
            with pytest.raises(grpc.RpcError) as refused:
                channel.unary_unary("/no.Such/Method")(b"", metadata=bearer(token), timeout=10)
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert server.sample(AUTH_FAILURES, {"listener": "grpc"}) == 6

    tail = StreamAccess(
        ca_file=pki.ca,
        cert_file=pki.client_cert,
        key_file=pki.client_key,
        bearer_token_file=pki.token_file,
    )
    refused = tail_refused(server, tail)
    assert "does not accept this client certificate (PERMISSION_DENIED)" in refused.err


def test_a_large_request_from_a_certificate_naming_another_client_is_refused_unread(
    start_server: StartServer, pki: Pki
) -> None:
    """Over the listener's message limit, a read request would be RESOURCE_EXHAUSTED, and
    reading it is what the check must spare: the health check takes one request message."""
    server = start_server(**tls(pki, mutual=True, **client_names(NAMED_DNS)))
    other = grpc_credentials(pki, "client")
    with grpc.secure_channel(server.address("grpc"), other) as channel:
        check = health_pb2_grpc.HealthStub(channel).Check
        large = health_pb2.HealthCheckRequest(service="x" * (30 << 20))
        with pytest.raises(grpc.RpcError) as refused:
            check(large, timeout=30)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert server.sample(AUTH_FAILURES, {"listener": "grpc"}) == 1
