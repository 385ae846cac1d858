"""The Content-Encodings an OpenTelemetry Collector's ``otlphttp`` exporter sends (confighttp
``compression``: gzip, zstd, zlib, deflate, snappy, lz4), against a real server: real
protobuf and OTLP/JSON bodies posted with urllib (the OpenTelemetry Python exporter
compresses only gzip and deflate, tested in test_otlp_sizes_and_encodings.py), the runs
evaluated, bad streams and bombs refused by name, counted, and the server serving on.
"""

from __future__ import annotations

import json
import socket
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from google.rpc import code_pb2
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from tests.compressed import zstd_rle_frame
from tests.integration import agents
from tests.integration.conftest import RunningServer, StartServer
from tests.integration.evaluation_support import MINIMAL_POLICY
from tests.integration.otlp_support import (
    JSON,
    MIB,
    PROTOBUF,
    QUIET,
    REFUND_CALLS,
    REQUESTS_COUNTED,
    HttpAnswer,
    bad_data,
    error_status,
    ok_response,
    peak_rss_growth_kib,
    post,
    refund_request,
    sent_calls,
    to_otlp_json,
    trace_hex,
)

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

_Param = zstd.CompressionParameter
#: What the Collector's zstd encoder (klauspost/compress) writes: a checksum, no content
#: size when it streams, an 8 MiB window at most.
COLLECTOR_ZSTD = {_Param.checksum_flag: 1, _Param.content_size_flag: 0}


def zstd_as_the_collector(body: bytes) -> bytes:
    return zstd.compress(body, options=COLLECTOR_ZSTD)


def requests_counted(server: RunningServer, outcome: str) -> float:
    labels = {"transport": "http", "outcome": outcome}
    return server.sample(REQUESTS_COUNTED, labels, missing_ok=True)


def assert_still_serving(server: RunningServer) -> None:
    request = refund_request()
    answer = post(server, zstd_as_the_collector(request.SerializeToString()), encoding="zstd")
    assert not ok_response(answer).HasField("partial_success")


# --- accepted -------------------------------------------------------------------------------


@pytest.mark.parametrize("content_type", [PROTOBUF, JSON])
@pytest.mark.parametrize(
    ("encoding", "compress"), [("zstd", zstd_as_the_collector), ("zlib", zlib.compress)]
)
def test_the_collectors_zstd_and_zlib_requests_are_evaluated(
    start_server: StartServer,
    encoding: str,
    compress: Callable[[bytes], bytes],
    content_type: str,
) -> None:
    server = start_server(**QUIET)
    request = refund_request()
    body = request.SerializeToString()
    if content_type == JSON:
        body = json.dumps(to_otlp_json(request)).encode()

    answer = post(server, compress(body), content_type, encoding=encoding)

    assert not ok_response(answer).HasField("partial_success")
    assert answer.content_type == content_type
    assert server.sample("toolwatch_spans_received_total", {"transport": "http"}) == 6
    server.settle()
    assert sent_calls(server) == [(trace_hex(request), REFUND_CALLS, True)]
    built = {"agent": "refund-bot", "outcome": "complete", "reference": "none"}
    assert server.sample("toolwatch_tool_traces_total", built) == 1
    assert requests_counted(server, "ok") == 1


def test_an_unverified_refund_sent_zstd_raises_its_finding(
    start_server: StartServer, tmp_path: Path
) -> None:
    config = tmp_path / "toolwatch.yaml"
    config.write_text(MINIMAL_POLICY)
    server = start_server(config)
    spans = agents.record(agents.unverified_refund_run(), "genai")
    body = encode_spans(spans).SerializeToString()

    assert post(server, zstd_as_the_collector(body), encoding="zstd").status == 200
    server.settle()

    (finding,) = server.findings.findings
    assert (finding.category, finding.tool) == ("MISSING_VERIFICATION_STEP", "issue_refund")
    assert finding.trace_id == format(spans[0].context.trace_id, "032x")
    labels = {"category": "MISSING_VERIFICATION_STEP", "evaluator": "safety"}
    labels |= {"severity": "high", "agent": "refund-bot", "tool": "issue_refund"}
    assert server.sample("toolwatch_regressions_total", labels) == 1


def test_a_zstd_body_of_several_frames_holds_every_run(start_server: StartServer) -> None:
    # RFC 8878 §3: frames follow one another, skippable ones carrying nothing; two
    # serialized requests one after the other are one request with both runs.
    server = start_server(**QUIET)
    first, second = refund_request(), refund_request()
    skippable = b"\x50\x2a\x4d\x18" + (2).to_bytes(4, "little") + b"hi"
    body = b"".join(
        [
            skippable,
            zstd.compress(first.SerializeToString()),
            zstd.compress(second.SerializeToString()),
        ]
    )

    assert not ok_response(post(server, body, encoding="zstd")).HasField("partial_success")
    server.settle()
    expected = [(trace_hex(r), REFUND_CALLS, True) for r in (first, second)]
    assert sorted(sent_calls(server)) == sorted(expected)


# --- refused ----------------------------------------------------------------------------------


def _checked_zstd(body: bytes) -> bytes:
    return zstd.compress(body, options={_Param.checksum_flag: 1})


@pytest.mark.parametrize(
    ("encoding", "body", "said"),
    [
        (
            "zstd",
            _checked_zstd(b"x" * 1000)[:-9],
            "body is not valid zstd: the stream is truncated",
        ),
        (
            "zstd",
            _checked_zstd(b"x" * 1000)[:-1] + b"\x00",
            "body is not valid zstd: Unable to decompress Zstandard data: Restored data doesn't "
            "match checksum",
        ),
        (
            "zstd",
            zstd.compress(b"x") + b"\x00\x01garbage",
            "body is not valid zstd (frame 2): Unable to decompress Zstandard data: Unknown frame "
            "descriptor",
        ),
        (
            "zstd",
            zstd_rle_frame(1, window_log=27),
            "body is not valid zstd: a frame's window is over 8388608 bytes, RFC 9659's limit",
        ),
        ("zstd", b"", "body is not valid zstd: it is empty"),
        ("zlib", zlib.compress(b"x" * 100)[:-6], "body is not valid zlib: the stream is truncated"),
    ],
)
def test_a_broken_stream_is_400_naming_coding_and_reason_and_counted(
    start_server: StartServer, encoding: str, body: bytes, said: str
) -> None:
    server = start_server(**QUIET)

    answer = post(server, body, encoding=encoding)

    assert answer.status == 400
    status = error_status(answer)
    assert status.message == said
    assert bad_data(status) == [("body", said)]
    assert requests_counted(server, "invalid") == 1
    assert server.sample("toolwatch_spans_received_total", {"transport": "http"}) == 0
    assert_still_serving(server)


def test_a_zstd_bomb_is_413_without_inflating_it(start_server: StartServer) -> None:
    server = start_server(ingest__max_request_bytes=MIB, **QUIET)
    bomb = zstd_rle_frame(16_384)  # 64 KiB that decompress to 2 GiB
    assert len(bomb) < 65 * 1024  # passes the cap before decompression
    # The probe sees 64 MB decompressed in this process (the server runs in it)...
    inflate = zstd.ZstdDecompressor().decompress
    assert peak_rss_growth_kib(lambda: inflate(bomb, 64 * MIB)) > 60 * 1024

    answers: list[HttpAnswer] = []
    grown_kib = peak_rss_growth_kib(lambda: answers.append(post(server, bomb, encoding="zstd")))

    (answer,) = answers
    assert answer.status == 413
    status = error_status(answer)
    assert (status.code, status.message) == (
        code_pb2.RESOURCE_EXHAUSTED,
        "decompressed body exceeds 1048576 bytes",
    )
    # ...and, while the server refuses it, the cap and a chunk, and the decoder's window
    # (8 MiB at most, RFC 9659): never the 2 GiB.
    assert grown_kib < 20 * 1024
    assert requests_counted(server, "refused") == 1
    assert_still_serving(server)


@pytest.mark.parametrize("encoding", ["snappy", "x-snappy-framed", "lz4"])
def test_the_collectors_other_codings_are_415_naming_those_accepted(
    start_server: StartServer, encoding: str
) -> None:
    server = start_server(**QUIET)

    answer = post(server, refund_request().SerializeToString(), encoding=encoding)

    assert answer.status == 415
    status = error_status(answer)
    assert (status.code, status.message) == (
        code_pb2.INVALID_ARGUMENT,
        f"content encoding {encoding!r} is not one of gzip, deflate, zlib, zstd, identity",
    )
    assert answer.headers["Accept-Encoding"] == "gzip, deflate, zlib, zstd, identity"
    assert requests_counted(server, "refused") == 1


def status_line_before_the_body(server: RunningServer, encoding: str) -> bytes:
    """The first line the server answers a POST whose head says a body of 1 MiB, of which
    only the first KiB is sent: a client that sends its head, then its body slowly."""
    host, _, port = server.address("http").rpartition(":")
    head = (
        f"POST /v1/traces HTTP/1.1\r\nHost: {host}\r\nContent-Type: {PROTOBUF}\r\n"
        f"Content-Encoding: {encoding}\r\nContent-Length: {MIB}\r\n\r\n"
    ).encode()
    with socket.create_connection((host, int(port)), timeout=5) as client:
        client.sendall(head + bytes(1024))
        try:
            return client.recv(4096).split(b"\r\n", 1)[0]
        except TimeoutError:
            return b"(no answer within 5 s)"


@pytest.mark.parametrize("encoding", ["snappy", "lz4"])
def test_an_unaccepted_coding_is_415_before_the_body_is_read(
    start_server: StartServer, encoding: str
) -> None:
    """A Collector left at ``compression: snappy`` is told at once, as the docs say, and
    as for a content type not accepted. Was: without ``Expect: 100-continue`` the whole
    body was read first (up to 20 MiB, holding a request slot): a slow body was answered 503
    at the read timeout, never 415. Now: 415 as soon as the head is read, counted."""
    server = start_server(ingest__read_timeout_seconds=20)

    status = status_line_before_the_body(server, encoding)

    assert status == b"HTTP/1.1 415 Unsupported Media Type"
    assert requests_counted(server, "refused") == 1  # counted before the answer is sent
