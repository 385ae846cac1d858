"""Who sends what toolwatch refuses is in its log, through real servers (port 0).

The on-call audit sent spans with bad trace ids, filled the buffer until exports were refused
(503 + Retry-After) and could find neither in toolwatch's log: the counters said how many,
not who. Each refusal now logs a warning naming the listener, the peer's address, the reason
and what its client was answered, at most one per reason a minute on the server's injected
clock, the next saying how many were left out."""

from __future__ import annotations

import json
import logging
import re
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from tests.certificates import client_certificate
from tests.integration.conftest import RunningServer, StartServer
from tests.integration.pki_support import NAMED_CN, Pki
from tests.integration.security_support import answers_to, client_names, tls
from toolwatch.ingest.otlp_grpc import SERVICE_NAME

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_RUN = ROOT / "examples" / "unverified-refund.otlp.json"
TRACE_ID = "ab14a7e84c14f9efb4c7e3bdc92f5886"
TOKEN = "s3cret-token-never-logged"


def post(server: RunningServer, body: str, token: str | None = None) -> int:
    request = urllib.request.Request(
        f"http://{server.address('http')}/v1/traces",
        data=body.encode(),
        headers={"Content-Type": "application/json"},
    )
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return error.code


def told(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "toolwatch.senders"]


def test_rejected_spans_name_their_sender_once_a_minute(
    start_server: Callable[..., RunningServer], caplog: pytest.LogCaptureFixture
) -> None:
    server = start_server()
    bad = EXAMPLE_RUN.read_text(encoding="utf-8").replace(TRACE_ID, "not-a-trace-id")
    with caplog.at_level(logging.WARNING, "toolwatch.senders"):
        assert [post(server, bad) for _ in range(3)] == [200, 200, 200]
        assert len(told(caplog)) == 1  # the two after it within the minute: counted
        server.clock.advance(60)
        assert post(server, bad) == 200
    first, second = told(caplog)
    assert re.fullmatch(
        r"4 spans rejected \(invalid_trace_id\) on http from 127\.0\.0\.1:\d+: '4 spans"
        r" rejected; resourceSpans\[0\]\.scopeSpans\[0\]\.spans\[0\]: traceId .*'",
        first,
    ), first
    assert second.endswith("; 2 more since the last line of this reason (8 spans), not logged")
    assert server.sample("toolwatch_spans_rejected_total", {"reason": "invalid_trace_id"}) == 16


def test_a_refused_export_names_its_sender(
    start_server: Callable[..., RunningServer], caplog: pytest.LogCaptureFixture
) -> None:
    """A full buffer answers 503 + Retry-After; the line says which exporter is refused."""
    server = start_server(
        assembly__max_buffered_spans="6",
        assembly__max_spans_per_trace="3",
        assembly__overflow="backpressure",
    )
    # The run without its root span (rootless.py of the audit): held until its max age.
    run = json.loads(EXAMPLE_RUN.read_text(encoding="utf-8"))
    scope = run["resourceSpans"][0]["scopeSpans"][0]
    scope["spans"] = [span for span in scope["spans"] if span.get("parentSpanId")]
    assert len(scope["spans"]) == 3
    answers = []
    with caplog.at_level(logging.WARNING, "toolwatch.senders"):
        for n in range(3):
            answers.append(post(server, json.dumps(run).replace(TRACE_ID, f"{n + 1:032x}")))
    assert answers == [200, 200, 503]  # the buffer holds two such runs
    [line] = told(caplog)
    assert re.fullmatch(
        r"request refused \(overloaded\) on http from 127\.0\.0\.1:\d+: 'toolwatch is at"
        r" capacity; retry after the Retry-After delay'",
        line,
    ), line


def test_an_undecodable_grpc_export_names_its_peer(
    start_server: Callable[..., RunningServer], caplog: pytest.LogCaptureFixture
) -> None:
    server = start_server()
    with (
        caplog.at_level(logging.WARNING, "toolwatch.senders"),
        grpc.insecure_channel(server.address("grpc")) as channel,
    ):
        export = channel.unary_unary(f"/{SERVICE_NAME}/Export")
        with pytest.raises(grpc.RpcError) as refused:
            export(b"\xff\xff\xff", timeout=10)
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    [line] = told(caplog)
    assert re.fullmatch(
        r"request refused \(invalid_request\) on grpc from ipv4:127\.0\.0\.1:\d+: \"body .+\"", line
    ), line
    assert str(refused.value.details()) in line


def test_an_unauthenticated_export_names_its_sender_never_its_token(
    start_server: Callable[..., RunningServer],
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("the-accepted-token\n", encoding="utf-8")
    server = start_server(security__auth__bearer_token_file=str(tokens))
    run = EXAMPLE_RUN.read_text(encoding="utf-8")
    with caplog.at_level(logging.WARNING, "toolwatch.senders"):
        assert post(server, run, token=TOKEN) == 401
        server.clock.advance(60)
        assert post(server, run) == 401
    wrong, none = told(caplog)
    assert re.fullmatch(
        r"request refused \(unauthenticated\) on http from 127\.0\.0\.1:\d+:"
        r" 'a bearer token that is not accepted'",
        wrong,
    ), wrong
    assert none.endswith(": 'no bearer token'")
    assert TOKEN not in caplog.text


def test_a_client_certificate_name_cannot_forge_a_log_line(
    start_server: StartServer,
    pki: Pki,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Was: the example was escaped but a client certificate's names were written raw, so a
    certificate the shared client CA signed for another service, refused for its names, with
    a line break in its common name wrote a second line a log pipeline read as a record of
    its own. Now: the names are escaped as the example is."""
    server = start_server(**tls(pki, mutual=True, **client_names(NAMED_CN)))
    forged = "evil\nERROR toolwatch.app: forged record"
    cert, key = client_certificate(pki.clients, [forged])
    with caplog.at_level(logging.WARNING, "toolwatch.senders"):
        answers_to(server, pki, tmp_path, cert, key)
    grpc_line, http_line = told(caplog)  # a line per listener
    assert grpc_line.startswith("request refused (permission_denied) on grpc from ipv4:127.0.0.1:")
    assert http_line.startswith("request refused (permission_denied) on http from 127.0.0.1:")
    for line in (grpc_line, http_line):
        assert line.endswith(
            " (client certificate evil\\nERROR toolwatch.app: forged record):"
            " 'a client certificate that names no client of tls.client_names'"
        )


# Real network time: the read timeout runs on the loop's clock, so each stall waits 0.2 s.
SLOW = {"ingest__max_concurrent_requests": 1, "ingest__read_timeout_seconds": 0.2}


def stall_http(server: RunningServer) -> str:
    """Send a request's head and 10 of its 100 body bytes, then nothing: its answer's status
    line, sent once the read timeout has passed (the rest is sent after it)."""
    host, _, port = server.address("http").rpartition(":")
    with socket.create_connection((host, int(port)), timeout=10) as client:
        head = f"POST /v1/traces HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        client.sendall(f"{head}Content-Length: 100\r\n\r\n".encode() + b"{" * 10)
        answer = client.recv(65536)
        client.sendall(b"}" * 90)  # the rest, late: aiohttp discards it, then closes
        while client.recv(65536):
            pass
    return answer.decode("latin-1").partition("\r\n")[0]


def test_a_slow_http_sender_is_named_once_a_minute(
    start_server: Callable[..., RunningServer], caplog: pytest.LogCaptureFixture
) -> None:
    """Was: a body that stalled past ingest.read_timeout_seconds was answered 503 and
    counted (outcome ``timeout``), and its sender was in no log line."""
    server = start_server(**SLOW)
    with caplog.at_level(logging.WARNING, "toolwatch.senders"):
        assert [stall_http(server) for _ in range(2)] == ["HTTP/1.1 503 Service Unavailable"] * 2
        assert len(told(caplog)) == 1  # the second within the minute: counted
        server.clock.advance(60)
        assert stall_http(server) == "HTTP/1.1 503 Service Unavailable"
    first, second = told(caplog)
    assert re.fullmatch(
        r"request refused \(slow_request\) on http from 127\.0\.0\.1:\d+: 'the request body"
        r" was not received within 0\.2 s; retry'",
        first,
    ), first
    assert second.endswith("; 1 more since the last line of this reason, not logged")
    labels = {"transport": "http", "outcome": "timeout"}
    assert server.sample("toolwatch_export_request_duration_seconds_count", labels) == 3


def test_a_slow_grpc_sender_is_named(
    start_server: Callable[..., RunningServer], caplog: pytest.LogCaptureFixture
) -> None:
    """A call that opens and sends no request message holds its slot until the read timeout."""
    server = start_server(**SLOW)
    go = threading.Event()

    def nothing_yet() -> Iterator[bytes]:
        go.wait(30)  # released once the server has ended the call
        yield from ()

    with (
        caplog.at_level(logging.WARNING, "toolwatch.senders"),
        grpc.insecure_channel(server.address("grpc")) as channel,
    ):
        export = channel.stream_unary(f"/{SERVICE_NAME}/Export")
        call = export.future(nothing_yet(), timeout=30)
        error = call.exception(timeout=10)  # the server ends it at its read timeout
        go.set()
    assert isinstance(error, grpc.RpcError)
    assert error.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    [line] = told(caplog)
    assert re.fullmatch(
        r"request refused \(slow_request\) on grpc from ipv4:127\.0\.0\.1:\d+:"
        r" 'the request was not received within 0\.2 s'",
        line,
    ), line
