"""Review: the metrics listener under mutual TLS answers a request without a client
certificate ``401`` with no ``WWW-Authenticate`` header.

RFC 9110 section 15.5.2: "The server generating a 401 response MUST send a WWW-Authenticate
header field containing at least one challenge applicable to the target resource." A missing
client certificate has no HTTP challenge: either the answer carries one that applies (the
``Bearer`` challenge, when the listener also takes tokens) or it is not a 401 (403: the
server understood the request and refuses it). Only the status is checked here, not which
of the two the fix picks."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.test_security import (
    AUTH_FAILURES,
    TOKEN,
    Pki,
    Start,
    auth,
    client_context,
    http_get,
    tls,
)


@pytest.mark.parametrize(
    "tokens",
    [False, True],
    ids=["metrics without tokens", "metrics with tokens"],
)
def test_a_request_without_a_client_certificate_is_not_a_401_without_a_challenge(
    start_server: Start, pki: Pki, tokens: bool
) -> None:
    more: dict[str, Any] = (
        auth(pki.token_file, security__auth__listeners=["grpc", "http", "metrics", "stream"])
        if tokens
        else {}
    )
    server = start_server(**tls(pki, mutual=True), **more)
    answer = http_get(f"https://{server.address('metrics')}/metrics", client_context(pki), TOKEN)
    assert answer.status in (401, 403)
    assert answer.body == b""
    assert server.sample(AUTH_FAILURES, {"listener": "metrics"}) == 1
    if answer.status == 401:
        assert "WWW-Authenticate" in answer.headers, answer.headers
