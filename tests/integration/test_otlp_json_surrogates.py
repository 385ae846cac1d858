"""Review: OTLP/JSON bodies whose object keys or enum strings hold an escaped lone surrogate
(``"\\ud800"``: valid JSON syntax, RFC 8259 §7) crash the decoder with ``SystemError`` from
protobuf's upb descriptor maps; the receiver answers ``500 text/plain`` and logs an ERROR
with a traceback.

opentelemetry-proto docs/specification.md:
- JSON Protobuf Encoding: "OTLP/JSON receivers MUST ignore message fields with unknown names
  and MUST unmarshal the message as if the unknown field was not present in the payload."
- Failures: "The response body for all HTTP 4xx and HTTP 5xx responses MUST be a
  Protobuf-encoded Status message that describes the problem."
- Retryable Response Codes: 500 is not among 429/502/503/504, so the client drops the batch.
"""

from __future__ import annotations

import json
import logging

import pytest

from tests.integration.conftest import StartServer, errors_logged
from tests.integration.otlp_support import (
    JSON,
    QUIET,
    error_status,
    ok_response,
    post,
    refund_request,
    to_otlp_json,
)

LONE = "\ud800"  # json.dumps writes it as the escape \ud800: plain ASCII on the wire


def _document(where: str) -> bytes:
    document = to_otlp_json(refund_request())
    span = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    if where == "unknown top-level key":
        document["future" + LONE] = 1
    elif where == "unknown span key":
        span["future" + LONE] = "x"
    elif where == "span kind":
        span["kind"] = LONE
    elif where == "status code":
        span["status"] = {"code": LONE}
    body = json.dumps(document).encode()
    assert body.isascii() and b"\\ud800" in body
    return body


@pytest.mark.parametrize("where", ["unknown top-level key", "unknown span key"])
def test_an_unknown_json_key_is_ignored_whatever_its_name(
    start_server: StartServer, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An unknown field MUST be ignored: the request is a full success."""
    server = start_server(**QUIET)
    with caplog.at_level(logging.ERROR):
        answer = post(server, _document(where), JSON)
    assert answer.status == 200, (answer.status, answer.content_type, answer.body[:200])
    assert not ok_response(answer).HasField("partial_success")
    assert errors_logged(caplog) == []


@pytest.mark.parametrize("where", ["span kind", "status code"])
def test_a_bad_enum_string_is_a_client_error_with_a_status_not_a_500(
    start_server: StartServer, where: str
) -> None:
    """Whatever the server makes of it (the span rejected, or the enum read as unknown),
    it is the client's data: never a 500, and any error body is a google.rpc.Status."""
    server = start_server(**QUIET)
    answer = post(server, _document(where), JSON)
    assert answer.status in (200, 400), (answer.status, answer.content_type, answer.body[:200])
    if answer.status == 400:
        error_status(answer)  # a google.rpc.Status in the request's encoding
    else:
        ok_response(answer)
