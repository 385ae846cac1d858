"""The OTLP receivers' size limits (before and after decompression, gzip and deflate bombs)
and encodings (gzip, deflate, several gzip members, what the SDK's exporters send), through
real clients and a real server."""

from __future__ import annotations

import gzip
import json
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable

import grpc
import pytest
from google.rpc import code_pb2
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpExporter,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace.export import SpanExportResult

from bench import json_memory
from tests.integration import agents
from tests.integration.conftest import StartServer, until
from tests.integration.otlp_support import (
    JSON,
    MIB,
    PROTOBUF,
    QUIET,
    REFUND_CALLS,
    HttpAnswer,
    bad_data,
    error_status,
    export_grpc,
    ok_response,
    peak_rss_growth_kib,
    post,
    refund_request,
    sent_calls,
    spans_in,
    to_otlp_json,
    trace_hex,
)


def test_grpc_message_over_the_limit_is_resource_exhausted(start_server: StartServer) -> None:
    """gRPC refuses it before the handler reads it, with no RetryInfo: a Collector drops the
    batch (the Python SDK retries it, in vain, until its export timeout). The handler sees a
    cancelled call, counted ``aborted`` (as a client's own cancellation is), which
    ToolwatchExportsAborted watches (test_deploy_artifacts)."""
    server = start_server(ingest__max_request_bytes=2048)
    request = refund_request()
    assert request.ByteSize() > 2048

    with pytest.raises(grpc.RpcError) as raised:
        export_grpc(server, request)
    assert raised.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert server.sample("toolwatch_spans_received_total", {"transport": "grpc"}) == 0
    aborted = {"transport": "grpc", "outcome": "aborted"}
    requests = "toolwatch_export_request_duration_seconds_count"
    assert until(lambda: server.sample(requests, aborted) == 1)


def test_grpc_limit_applies_after_decompression(start_server: StartServer) -> None:
    server = start_server(ingest__max_request_bytes=64 * 1024)
    request = refund_request()
    span = next(spans_in(request))
    span.name = "x" * (256 * 1024)  # compresses to a few hundred bytes
    assert len(gzip.compress(request.SerializeToString())) < 64 * 1024

    with pytest.raises(grpc.RpcError) as raised:
        export_grpc(server, request, grpc.Compression.Gzip)
    assert raised.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED


def test_http_body_over_the_limit_is_413(start_server: StartServer) -> None:
    server = start_server(ingest__max_request_bytes=MIB)
    answer = post(server, b"\x00" * (MIB + 4096))
    assert answer.status == 413
    assert "exceeds 1048576 bytes" in error_status(answer).message
    assert error_status(answer).code == code_pb2.RESOURCE_EXHAUSTED
    assert server.sample("toolwatch_spans_received_total", {"transport": "http"}) == 0


def test_otlp_json_dense_in_values_is_read_unless_the_largest_body_could_not_hold_them(
    start_server: StartServer,
) -> None:
    """A body may hold one comma (a JSON value after an object's or array's first) per 40
    bytes of the largest body (ingest.max_request_bytes), commas in strings included: a small
    dense body is valid and read; one past the bound is a limit (413), not bad data."""
    request = refund_request()
    document = to_otlp_json(request)
    span = document["resourceSpans"][0]["scopeSpans"][0]["spans"][2]
    result = json.dumps([[i, i] for i in range(1_100)])  # a tool result of 2,199 commas
    span["attributes"].append({"key": "tool.result", "value": {"stringValue": result}})
    body = json.dumps(document).encode()
    server = start_server(ingest__max_request_bytes=MIB, **QUIET)
    assert ok_response(post(server, body, JSON)) == ExportTraceServiceResponse()
    tight = start_server(ingest__max_request_bytes=40 * 2_200, **QUIET)  # 2,200 at most
    answer = post(tight, body, JSON)
    assert answer.status == 413
    status = error_status(answer)
    assert status.code == code_pb2.RESOURCE_EXHAUSTED
    assert status.message == (
        f"body holds up to {body.count(b',')} JSON values after the first of an object or"
        " array (commas), more than the 2200 a body may (one per 40 bytes of the largest body:"
        " decoded, each holds up to 270 bytes): send protobuf or smaller batches"
    )


def test_an_otlp_json_body_may_be_as_large_as_the_limit(start_server: StartServer) -> None:
    """Decoded a piece at a time, a JSON body of any size up to ingest.max_request_bytes fits
    what the memory formula budgets for the request being decoded: that is its cap, as
    protobuf's (it was a quarter of it)."""
    request = refund_request()
    body = json.dumps(to_otlp_json(request)).encode()
    server = start_server(ingest__max_request_bytes=len(body), **QUIET)
    assert ok_response(post(server, body, JSON)) == ExportTraceServiceResponse()
    assert server.sample("toolwatch_spans_received_total", {"transport": "http"}) == 6
    smaller = start_server(ingest__max_request_bytes=len(body) - 1, **QUIET)
    answer = post(smaller, body, JSON)
    assert answer.status == 413
    assert error_status(answer).message.endswith(f"exceeds {len(body) - 1} bytes")


def test_a_json_batch_of_agent_spans_beyond_the_old_quarter_is_accepted_whole(
    start_server: StartServer,
) -> None:
    """The OpenTelemetry JavaScript SDK exports OTLP/JSON, up to 512 spans a batch, and agent
    spans carry prompts, messages and tool results of 10-40 KB: an 8 MiB batch (the recorded
    captures' spans, each grown so) was answered 413 past 5 MiB, a quarter of the default
    cap, and lost (OTLP clients do not retry a 413). With the default configuration every
    span is now received, and every one built into its run."""
    body = json_memory.agent(8 * MIB)
    runs = json.loads(body)["resourceSpans"]
    spans = sum(len(scope["spans"]) for run in runs for scope in run["scopeSpans"])
    assert len(body) > 8 * MIB and spans > 250
    server = start_server(**QUIET)

    assert ok_response(post(server, body, JSON)) == ExportTraceServiceResponse()
    assert server.sample("toolwatch_spans_received_total", {"transport": "http"}) == spans
    server.settle()
    assert server.sample("toolwatch_spans_built_total") == spans


@pytest.mark.parametrize("builder", ["empty_resources", "strings", "keys"])
def test_a_json_body_dense_in_values_is_still_refused_at_that_size(
    start_server: StartServer, builder: str
) -> None:
    """The same 8 MiB, of empty objects, short strings or keys where toolwatch reads none,
    would decode to 15 to 25 times its size: refused unparsed, 413."""
    body = json_memory.BUILDERS[builder](8 * MIB)
    server = start_server(**QUIET)

    answer = post(server, body, JSON)

    assert answer.status == 413
    status = error_status(answer)
    assert status.code == code_pb2.RESOURCE_EXHAUSTED
    assert status.message.startswith(f"body holds up to {body.count(b',')} JSON values ")
    assert "more than the 524288 a body may" in status.message
    assert server.sample("toolwatch_spans_received_total", {"transport": "http"}) == 0


def _gzip_of_zeros(size: int) -> bytes:
    """Gzip of ``size`` zero bytes, built a chunk at a time: the test never holds it whole."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = bytes(MIB)
    parts = [compressor.compress(chunk) for _ in range(size // MIB)]
    return b"".join([*parts, compressor.flush()])


def test_gzip_bomb_is_413_without_inflating_it(start_server: StartServer) -> None:
    server = start_server(ingest__max_request_bytes=MIB)
    bomb = _gzip_of_zeros(50 * MIB)
    assert len(bomb) < MIB  # passes the cap before decompression
    # The probe sees a 50 MB inflation in this process (the server runs in it)...
    assert peak_rss_growth_kib(lambda: zlib.decompress(bomb, 16 + zlib.MAX_WBITS)) > 45 * 1024

    answers: list[HttpAnswer] = []
    grown_kib = peak_rss_growth_kib(lambda: answers.append(post(server, bomb, encoding="gzip")))

    (answer,) = answers
    assert answer.status == 413
    assert "decompressed body exceeds 1048576 bytes" in error_status(answer).message
    assert grown_kib < 20 * 1024  # ...and none while the server refuses the bomb


def test_grpc_gzip_request_is_accepted(start_server: StartServer) -> None:
    server = start_server(**QUIET)
    request = refund_request()
    response = export_grpc(server, request, grpc.Compression.Gzip)
    assert not response.HasField("partial_success")
    server.settle()
    assert sent_calls(server) == [(trace_hex(request), REFUND_CALLS, True)]


@pytest.mark.parametrize("content_type", [PROTOBUF, JSON])
def test_http_gzip_request_is_accepted(start_server: StartServer, content_type: str) -> None:
    server = start_server(**QUIET)
    request = refund_request()
    body = request.SerializeToString()
    if content_type == JSON:
        body = json.dumps(to_otlp_json(request)).encode()
    answer = post(server, gzip.compress(body), content_type, encoding="gzip")
    assert not ok_response(answer).HasField("partial_success")
    assert answer.content_type == content_type
    server.settle()
    assert sent_calls(server) == [(trace_hex(request), REFUND_CALLS, True)]


@pytest.mark.parametrize("compression", list(Compression))
def test_the_sdks_http_exporter_delivers_with_every_compression(
    start_server: StartServer, compression: Compression
) -> None:
    server = start_server(**QUIET)
    spans = agents.record(agents.refund_run(), "genai")
    endpoint = f"http://{server.address('http')}/v1/traces"
    exporter = HttpExporter(endpoint=endpoint, timeout=10, compression=compression)
    try:
        assert exporter.export(spans) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    server.settle()
    assert [calls for _, calls, _ in sent_calls(server)] == [REFUND_CALLS]


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [
        ("deflate", zlib.compress),  # RFC 1950, what RFC 9110 calls deflate
        ("deflate", lambda data: zlib.compress(data, wbits=-zlib.MAX_WBITS)),  # bare RFC 1951
        ("x-gzip", gzip.compress),
        ("GZip", gzip.compress),
    ],
)
def test_http_deflate_and_gzip_aliases_are_accepted(
    start_server: StartServer, encoding: str, compress: Callable[[bytes], bytes]
) -> None:
    server = start_server(**QUIET)
    request = refund_request()
    answer = post(server, compress(request.SerializeToString()), encoding=encoding)
    assert not ok_response(answer).HasField("partial_success")
    server.settle()
    assert sent_calls(server) == [(trace_hex(request), REFUND_CALLS, True)]


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (zlib.compress(b"x" * 100)[:-6], "body is not valid deflate: the stream is truncated"),
        (zlib.compress(b"") + b"more", "body is not valid deflate: data after the stream"),
        (b"\x78\x9c\xff\xff", "body is not valid deflate: Error -3"),
    ],
)
def test_a_bad_deflate_body_is_400(start_server: StartServer, body: bytes, said: str) -> None:
    server = start_server()
    answer = post(server, body, encoding="deflate")
    assert answer.status == 400
    assert error_status(answer).message.startswith(said)


def test_a_deflate_bomb_is_413(start_server: StartServer) -> None:
    server = start_server(ingest__max_request_bytes=MIB)
    answer = post(server, zlib.compress(bytes(50 * MIB)), encoding="deflate")
    assert answer.status == 413
    assert error_status(answer).message == "decompressed body exceeds 1048576 bytes"


@pytest.mark.parametrize(
    ("method", "path", "status", "code", "allow"),
    [
        ("GET", "/v1/traces", 405, code_pb2.UNIMPLEMENTED, "POST"),
        ("POST", "/v1/metrics", 404, code_pb2.NOT_FOUND, None),
    ],
)
def test_other_paths_and_methods_are_answered_with_a_status(
    start_server: StartServer, method: str, path: str, status: int, code: int, allow: str | None
) -> None:
    server = start_server()
    url = f"http://{server.address('http')}{path}"
    request = urllib.request.Request(url, data=b"" if method == "POST" else None, method=method)
    request.add_header("Content-Type", PROTOBUF)
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, timeout=10)
    with raised.value as error:
        answer = HttpAnswer(error.code, error.headers, error.read())
    assert (answer.status, answer.content_type) == (status, PROTOBUF)
    assert answer.headers["Allow"] == allow
    body = error_status(answer)
    assert body.code == code
    assert body.message == (
        f"{method} {path}: {raised.value.reason}; OTLP traces are sent as POST /v1/traces"
    )


def test_http_gzip_body_of_several_members_is_read_to_the_end(start_server: StartServer) -> None:
    # RFC 1952: members follow one another; two serialized requests one after the other are
    # one request with both runs (protobuf merges repeated fields).
    server = start_server(**QUIET)
    first, second = refund_request(), refund_request()
    body = gzip.compress(first.SerializeToString()) + gzip.compress(second.SerializeToString())
    answer = post(server, body, encoding="gzip")
    assert not ok_response(answer).HasField("partial_success")
    server.settle()
    expected = [(trace_hex(r), REFUND_CALLS, True) for r in (first, second)]
    assert sorted(sent_calls(server)) == sorted(expected)
    assert server.sample("toolwatch_spans_received_total", {"transport": "http"}) == 12


@pytest.mark.parametrize(
    ("tail", "status", "said"),
    [
        (b"\x00\x01garbage", 400, "body is not valid gzip (member 2): "),
        (gzip.compress(bytes(600_000)), 413, "decompressed body exceeds 1048576 bytes"),
    ],
)
def test_http_gzip_members_after_the_first_are_checked_too(
    start_server: StartServer, tail: bytes, status: int, said: str
) -> None:
    server = start_server(ingest__max_request_bytes=MIB)
    head = gzip.compress(bytes(600_000)) if status == 413 else gzip.compress(b"")
    answer = post(server, head + tail, encoding="gzip")
    assert answer.status == status
    assert said in error_status(answer).message
    assert server.sample("toolwatch_spans_received_total", {"transport": "http"}) == 0


@pytest.mark.parametrize(
    ("content_type", "encoding", "status", "said"),
    [
        (
            PROTOBUF,
            "br",
            415,
            "content encoding 'br' is not one of gzip, deflate, zlib, zstd, identity",
        ),
        ("text/plain", None, 415, "content type 'text/plain' is not"),
        ("", None, 415, "no content type: send application/x-protobuf or application/json"),
        (PROTOBUF, "gzip", 400, "body is not valid gzip"),
    ],
)
def test_unusable_http_body_is_refused(
    start_server: StartServer, content_type: str, encoding: str | None, status: int, said: str
) -> None:
    server = start_server()
    answer = post(server, refund_request().SerializeToString(), content_type, encoding)
    assert answer.status == status
    body = error_status(answer)
    assert said in body.message
    if status == 400:
        assert bad_data(body) == [("body", body.message)]
    else:
        assert (body.code, body.details) == (code_pb2.INVALID_ARGUMENT, [])
    # RFC 7694 §3: a 415 for the request's content coding says which codings are accepted.
    accepted = answer.headers.get("Accept-Encoding")
    assert accepted == ("gzip, deflate, zlib, zstd, identity" if encoding == "br" else None)
    assert server.sample("toolwatch_spans_received_total", {"transport": "http"}) == 0
