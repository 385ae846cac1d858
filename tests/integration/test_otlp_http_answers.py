"""OTLP/HTTP answers (opentelemetry-proto ``docs/specification.md``, "OTLP/HTTP Response"):
their Content-Type is the request's, and a body Python's ``json`` will not convert is Bad
Data (400 with a ``google.rpc.Status``), not a server error."""

from __future__ import annotations

import json
import logging

import pytest
from google.protobuf import json_format
from google.rpc import status_pb2

from tests.integration.conftest import StartServer, errors_logged
from tests.integration.otlp_support import (
    JSON,
    PROTOBUF,
    bad_data,
    ok_response,
    post,
    refund_request,
    to_otlp_json,
)

REQUESTS = "toolwatch_export_request_duration_seconds_count"


@pytest.mark.parametrize("where", ["unknown top-level field", "span field"])
def test_otlp_json_with_a_very_long_integer_literal_is_read_not_a_500(
    start_server: StartServer, caplog: pytest.LogCaptureFixture, where: str
) -> None:
    """A JSON integer literal of more than 4,300 digits (CPython's ``int_max_str_digits``)
    makes ``json`` raise a plain ``ValueError``: once a 500 with a traceback per request
    (any client could flood the log), then a 400 for the whole request. OTLP/JSON receivers
    ignore unknown fields, so a long number in one costs nothing; in a span's integer field
    it rejects that span alone (partial success), as any value a field cannot hold."""
    server = start_server()
    digits = "1" * 5000
    if where == "unknown top-level field":
        body = f'{{"resourceSpans": [], "unknownField": {digits}}}'.encode()
    else:
        document = json.dumps(to_otlp_json(refund_request()))
        body = document.replace('"spans": [{', f'"spans": [{{"droppedEventsCount": {digits}, ', 1)
        body = body.encode()

    with caplog.at_level(logging.ERROR):
        answer = post(server, body, JSON)

    assert (answer.status, answer.content_type) == (200, JSON)
    partial = ok_response(answer).partial_success
    if where == "unknown top-level field":
        assert partial.rejected_spans == 0
    else:
        assert partial.rejected_spans == 1
        assert "droppedEventsCount: an integer literal of 5000 digits" in partial.error_message
    assert server.sample(REQUESTS, {"transport": "http", "outcome": "invalid"}) == 0
    assert errors_logged(caplog) == []


@pytest.mark.parametrize(
    "sent", ["application/json; charset=utf-8", "application/json;charset=UTF-8"]
)
def test_the_answer_carries_the_content_type_the_request_sent(
    start_server: StartServer, sent: str
) -> None:
    """OTLP/HTTP Response: "The server MUST use the same Content-Type in the response as it
    received in the request" (the receiver's own comment: "OTLP asks for the request's
    Content-Type exactly"). A JSON request whose Content-Type carries a charset (curl
    scripts, hand-written clients) is answered ``application/json``: a client that reads a
    partial success only when the answer's Content-Type is the one it sent (as the
    Collector does with its own) treats the answer as having none."""
    server = start_server()
    body = json.dumps(to_otlp_json(refund_request())).encode()

    answer = post(server, body, sent)

    assert answer.status == 200
    assert answer.content_type == sent


def test_an_error_answer_carries_the_content_type_the_request_sent(
    start_server: StartServer,
) -> None:
    server = start_server()
    sent = "application/json; charset=utf-8"

    answer = post(server, b"{not json", sent)

    assert answer.status == 400
    assert answer.content_type == sent
    status = json_format.Parse(answer.body, status_pb2.Status())
    assert bad_data(status)


def test_a_protobuf_answer_keeps_the_bare_content_type(start_server: StartServer) -> None:
    server = start_server()
    answer = post(server, refund_request().SerializeToString(), PROTOBUF)
    assert (answer.status, answer.content_type) == (200, PROTOBUF)
