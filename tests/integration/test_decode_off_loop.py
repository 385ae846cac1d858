"""A large request body decodes in the decode thread (``toolwatch.ingest.decode_thread``)
while the event loop serves: through a real server and real HTTP and gRPC clients.

The decoder a receiver calls is wrapped in a ``Gate`` that holds the decode mid-way until
the test opens it, so what the server does meanwhile is seen in order, never timed: a
decode on the event loop would hold everything else, and the test's clients would give up
(their timeouts are hang guards only: ``GUARD_SECONDS``).
"""

from __future__ import annotations

import asyncio
import gc
import gzip
import json
import threading
import tracemalloc
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest
from google.rpc import code_pb2
from grpc_health.v1 import health_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.integration.conftest import RunningServer, StartServer, until
from tests.integration.otlp_support import (
    EXPORT_METHOD,
    JSON,
    QUIET,
    REQUESTS_COUNTED,
    HttpAnswer,
    error_status,
    export_grpc,
    grpc_channel,
    health_status,
    in_flight,
    ok_response,
    post,
    refund_request,
    spans_in,
    to_otlp_json,
    trace_hex,
)
from toolwatch.ingest import otlp_grpc, otlp_http
from toolwatch.ingest.decode_requests import scanner
from toolwatch.ingest.decode_thread import OFF_LOOP_BYTES, off_loop_bytes
from toolwatch.ingest.decode_types import DecodedBatch, DecodeOptions

#: The size from which the server decodes a protobuf body in the thread (the scanner's).
THREAD_BYTES = off_loop_bytes(scanner(DecodeOptions()).compiled)

#: How long a client or the test waits before it fails instead of hanging. Never what a
#: test decides by: the server answers at once, or (decoding on its event loop) not at all
#: until the gate opens.
GUARD_SECONDS = 10
DECODE_THREAD = "toolwatch-decode"
MB = 1_000_000


class Gate:
    """Wraps a decoder: records the thread each call runs on, and holds each call until
    ``opened`` is set (``started`` once one is held)."""

    def __init__(self, decoder: Callable[..., Any]) -> None:
        self._decoder = decoder
        self.started = threading.Event()
        self.opened = threading.Event()
        self.threads: list[str] = []

    def __call__(self, *args: Any) -> Any:
        self.threads.append(threading.current_thread().name)
        self.started.set()
        self.opened.wait(3 * GUARD_SECONDS)
        return self._decoder(*args)


def gated(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> Gate:
    gate = Gate(getattr(module, name))
    monkeypatch.setattr(module, name, gate)
    return gate


def runs_of_size(size: int) -> ExportTraceServiceRequest:
    """Refund runs (six spans each) in one request of at least ``size`` bytes, as protobuf
    and as OTLP/JSON alike (JSON's is the larger)."""
    request = ExportTraceServiceRequest()
    while request.ByteSize() < size:
        request.resource_spans.extend(refund_request().resource_spans)
    return request


def span_count(request: ExportTraceServiceRequest) -> int:
    return sum(1 for _ in spans_in(request))


def get(server: RunningServer, path: str) -> tuple[int, str]:
    """A GET on the metrics listener (``/healthz``, ``/readyz``, ``/metrics``)."""
    url = f"http://{server.address('metrics')}{path}"
    try:
        with urllib.request.urlopen(url, timeout=GUARD_SECONDS) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read().decode()


def on_loop(server: RunningServer, coroutine: Any) -> Any:
    """Runs ``coroutine`` on the server's event loop; its result."""
    return asyncio.run_coroutine_threadsafe(coroutine, server.loop).result(GUARD_SECONDS)


async def ticked(server: RunningServer) -> int:
    return server.app.engine.tick()


async def _thread_name() -> str:
    return threading.current_thread().name


def loop_thread(server: RunningServer) -> str:
    """The name of the thread that runs the server's event loop."""
    name: str = on_loop(server, _thread_name())
    return name


def received(server: RunningServer, transport: str) -> float:
    labels = {"transport": transport}
    return server.sample("toolwatch_spans_received_total", labels, missing_ok=True)


def counted(server: RunningServer, transport: str, outcome: str) -> float:
    labels = {"transport": transport, "outcome": outcome}
    return server.sample(REQUESTS_COUNTED, labels, missing_ok=True)


def test_the_event_loop_serves_while_a_large_json_body_decodes(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = start_server(**QUIET)
    gate = gated(monkeypatch, otlp_http, "decode_otlp_json")
    request = runs_of_size(OFF_LOOP_BYTES)
    body = json.dumps(to_otlp_json(request)).encode()

    with ThreadPoolExecutor(1) as client:
        answer = client.submit(post, server, body, JSON)
        try:
            assert gate.started.wait(GUARD_SECONDS)
            # The decode is held mid-way: liveness, metrics, the gRPC health service and an
            # engine tick are all served meanwhile.
            health = get(server, "/healthz")
            _, metrics = get(server, "/metrics")
            probe = health_status(server)
            tick = on_loop(server, ticked(server))
            still_held = not answer.done()
        finally:
            gate.opened.set()
        ok = ok_response(answer.result(GUARD_SECONDS))

    assert health == (200, "ok\n")
    assert "toolwatch_requests_in_flight 1.0" in metrics  # the request holds its slot
    assert (probe, tick, still_held) == (health_pb2.HealthCheckResponse.SERVING, 0, True)
    assert ok == ExportTraceServiceResponse()
    assert gate.threads == [DECODE_THREAD]
    assert received(server, "http") == span_count(request)
    assert in_flight(server) == 0


def length_delimited(field: int, payload: bytes) -> bytes:
    """A protobuf field of wire type 2 (bytes, string, message)."""
    out = bytearray([field << 3 | 2])
    size = len(payload)
    while True:
        byte, size = size & 0x7F, size >> 7
        out.append(byte | (0x80 if size else 0))
        if not size:
            return bytes(out) + payload


def test_a_small_protobuf_body_is_decoded_on_the_event_loop(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = start_server(**QUIET)
    gate = gated(monkeypatch, otlp_http, "decode_protobuf")
    gate.opened.set()
    body = refund_request().SerializeToString()
    assert len(body) < OFF_LOOP_BYTES

    assert ok_response(post(server, body)) == ExportTraceServiceResponse()
    assert gate.threads == [loop_thread(server)]


def test_a_json_body_however_small_is_decoded_in_the_thread(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = start_server(**QUIET)
    gate = gated(monkeypatch, otlp_http, "decode_otlp_json")
    gate.opened.set()
    # 1,300 empty spans: 34 ms of json_format in pure Python (21,646 under 64 KiB: 0.6-3 s)
    body = b'{"resourceSpans":[{"scopeSpans":[{"spans":[' + b",".join([b"{}"] * 1_300) + b"]}]}]}"
    assert len(body) < OFF_LOOP_BYTES

    answer = post(server, body, JSON)

    assert answer.status == 200  # partial success: every span rejected
    assert gate.threads == [DECODE_THREAD]


def test_a_protobuf_body_of_empty_spans_at_the_threshold_is_decoded_in_the_thread(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = start_server(**QUIET)
    gate = gated(monkeypatch, otlp_grpc, "decode_protobuf")
    gate.opened.set()
    # 2 bytes a span, the densest (32,500 under 64 KiB took 0.35 s on the loop in pure Python)
    spans = length_delimited(2, b"") * (THREAD_BYTES // 2)
    body = length_delimited(1, length_delimited(2, spans))

    with grpc_channel(server) as channel:
        channel.unary_unary(EXPORT_METHOD)(body, timeout=GUARD_SECONDS)

    assert gate.threads == [DECODE_THREAD]


def test_a_decode_still_running_when_the_shutdown_grace_ends_is_given_up_and_counted(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = start_server(**QUIET)
    gate = gated(monkeypatch, otlp_http, "decode_otlp_json")
    body = json.dumps(to_otlp_json(runs_of_size(OFF_LOOP_BYTES))).encode()

    with ThreadPoolExecutor(1) as client:
        answer = client.submit(post, server, body, JSON)
        try:
            assert gate.started.wait(GUARD_SECONDS)
            on_loop(server, server.app.stop(grace=0.2))  # returns with the decode held
            stopped_while_held = not gate.opened.is_set()
        finally:
            gate.opened.set()
        refused = answer.result(GUARD_SECONDS)

    assert stopped_while_held
    # Retryable, as at capacity: none of its spans was taken, none is lost.
    assert (refused.status, refused.headers["Retry-After"]) == (503, "1")
    assert error_status(refused).code == code_pb2.UNAVAILABLE
    assert "shutting down" in error_status(refused).message
    assert counted(server, "http", "aborted") == 1
    assert received(server, "http") == 0


def test_a_grpc_decode_still_running_when_the_shutdown_grace_ends_is_counted_aborted(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = start_server(**QUIET)
    gate = gated(monkeypatch, otlp_grpc, "decode_protobuf")
    large = runs_of_size(THREAD_BYTES).SerializeToString()

    with grpc_channel(server) as channel:
        call = channel.unary_unary(EXPORT_METHOD).future(large, timeout=GUARD_SECONDS)
        try:
            assert gate.started.wait(GUARD_SECONDS)
            on_loop(server, server.app.stop(grace=0.2))  # returns with the decode held
            stopped_while_held = not gate.opened.is_set()
        finally:
            gate.opened.set()
        with pytest.raises(grpc.RpcError) as ended:
            call.result(GUARD_SECONDS)

    assert stopped_while_held
    # Told to retry, or (when gRPC's own cancel at the grace comes first) cut off: either
    # way none of its spans was taken, and the request is counted.
    assert ended.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
    assert counted(server, "grpc", "aborted") == 1
    assert received(server, "grpc") == 0


def test_a_shutdown_waits_within_its_grace_for_a_body_decoding_and_drains_its_spans(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = start_server(**QUIET)
    gate = gated(monkeypatch, otlp_http, "decode_otlp_json")
    request = refund_request()
    body = gzip.compress(json.dumps(to_otlp_json(request)).encode())  # compressed: the thread

    with ThreadPoolExecutor(2) as client:
        answer = client.submit(post, server, body, JSON, "gzip")
        try:
            assert gate.started.wait(GUARD_SECONDS)
            stopping = client.submit(on_loop, server, server.app.stop(grace=3 * GUARD_SECONDS))
            assert until(lambda: get(server, "/readyz")[0] == 503)  # the shutdown has begun
            waited = not stopping.done()
        finally:
            gate.opened.set()
        ok = ok_response(answer.result(GUARD_SECONDS))
        stopping.result(GUARD_SECONDS)

    assert waited
    assert ok == ExportTraceServiceResponse()
    assert gate.threads == [DECODE_THREAD]
    assert received(server, "http") == 6
    assert [t["trace_id"] for t in server.tooltraces()] == [trace_hex(request)]  # drained


def test_a_grpc_call_cancelled_mid_decode_keeps_its_slot_until_the_thread_lets_go(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = start_server(ingest__max_concurrent_requests=1, **QUIET)
    gate = gated(monkeypatch, otlp_grpc, "decode_protobuf")
    large = runs_of_size(THREAD_BYTES).SerializeToString()

    with grpc_channel(server) as channel:
        export = channel.unary_unary(EXPORT_METHOD)
        call = export.future(large, timeout=GUARD_SECONDS)
        try:
            assert gate.started.wait(GUARD_SECONDS)
            call.cancel()
            assert until(lambda: counted(server, "grpc", "aborted") == 1)
            slot_held = in_flight(server)  # the thread still decodes the body
            with pytest.raises(grpc.RpcError) as refused:
                export_grpc(server, refund_request())
        finally:
            gate.opened.set()

    assert (slot_held, refused.value.code()) == (1, grpc.StatusCode.UNAVAILABLE)
    assert until(lambda: in_flight(server) == 0)
    assert export_grpc(server, refund_request()) == ExportTraceServiceResponse()
    assert received(server, "grpc") == 6  # the cancelled call's spans were not taken
    assert gate.threads == [DECODE_THREAD, loop_thread(server)]  # then a small one


def answered_small_and_large(server: RunningServer, body: bytes) -> tuple[HttpAnswer, HttpAnswer]:
    """``body``, then padded (JSON allows whitespace after the value) to be large."""
    small = post(server, body, JSON)
    large = post(server, body + b" " * OFF_LOOP_BYTES, JSON)
    return small, large


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"[1]", 400),  # DecodeError: not an object
        (b"\xff{}", 400),  # DecodeError: not UTF-8
        (b"[" + b"0," * 10_000 + b"0]", 413),  # DecodeLimitError: over 6,553 values
    ],
)
def test_a_json_body_refused_in_the_thread_is_answered_with_its_reason(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch, body: bytes, status: int
) -> None:
    server = start_server(ingest__max_request_bytes=256 * 1024, **QUIET)
    gate = gated(monkeypatch, otlp_http, "decode_otlp_json")
    gate.opened.set()

    small, large = answered_small_and_large(server, body)

    assert (small.status, large.status) == (status, status)
    assert error_status(large) == error_status(small)
    assert gate.threads == [DECODE_THREAD, DECODE_THREAD]
    assert counted(server, "http", "invalid" if status == 400 else "refused") == 2


def test_a_decoder_bug_in_the_thread_is_answered_500_as_on_the_loop(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_args: Any) -> Any:
        raise RuntimeError("a decoder bug")

    server = start_server(**QUIET)
    monkeypatch.setattr(otlp_http, "decode_protobuf", broken)
    small = refund_request().SerializeToString()  # on the loop
    large = runs_of_size(THREAD_BYTES).SerializeToString()  # in the thread

    on_loop, in_thread = post(server, small), post(server, large)

    assert (on_loop.status, in_thread.status) == (500, 500)  # aiohttp's own answer and log
    assert (in_thread.content_type, in_thread.body) == (on_loop.content_type, on_loop.body)
    assert ok_response(post(server, json.dumps(to_otlp_json(refund_request())).encode(), JSON))


def held_after(send: Callable[[], None], times: int, bound: int) -> int:
    """The bytes ``times`` more requests leave allocated after a first one (which may leave
    what the server keeps once: not counted), once under ``bound`` or at the hang guard: the
    thread may let go of a failed decode's frames only after its answer went out."""
    tracemalloc.start()
    try:
        send()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(times):
            send()
        until(lambda: tracemalloc.get_traced_memory()[0] - before < bound)
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_a_large_json_body_refused_in_the_thread_is_not_kept_after_its_answer(
    start_server: StartServer, no_automatic_gc: None
) -> None:
    server = start_server(**QUIET)
    inflated = b'{"resourceSpans": "' + b"x" * (8 * MB) + b'"}'  # not a list: 400
    body = gzip.compress(inflated)  # compressed: decoded in the thread

    def send() -> None:
        assert post(server, body, JSON, "gzip").status == 400

    held = held_after(send, 3, 8 * MB)

    assert held < 8 * MB, f"{held / MB:.0f} MB still held after three 400 answers"


def test_a_large_grpc_body_refused_in_the_thread_is_not_kept_after_its_answer(
    start_server: StartServer, no_automatic_gc: None
) -> None:
    server = start_server(**QUIET)
    body = b"\x0a\xff\xff\xff\x0f" + b"\x00" * (4 * MB)  # a length past the end: unsalvageable

    with grpc_channel(server) as channel:
        export = channel.unary_unary(EXPORT_METHOD)

        def send() -> None:
            with pytest.raises(grpc.RpcError) as refused:
                export(body, timeout=GUARD_SECONDS)
            assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT

        held = held_after(send, 3, 4 * MB)

    assert held < 4 * MB, f"{held / MB:.0f} MB still held after three INVALID_ARGUMENT answers"


def test_a_grpc_call_cancelled_mid_decode_does_not_keep_its_decoded_batch(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch, no_automatic_gc: None
) -> None:
    server = start_server(**QUIET)
    gate = gated(monkeypatch, otlp_grpc, "decode_protobuf")
    large = runs_of_size(THREAD_BYTES).SerializeToString()

    def batches_kept() -> list[DecodedBatch]:
        return [o for o in gc.get_objects() if type(o) is DecodedBatch]

    with grpc_channel(server) as channel:
        for _ in range(3):  # a client whose deadline is shorter than the decode, retrying
            gate.started.clear()
            gate.opened.clear()
            call = channel.unary_unary(EXPORT_METHOD).future(large, timeout=GUARD_SECONDS)
            try:
                assert gate.started.wait(GUARD_SECONDS)
                call.cancel()
            finally:
                gate.opened.set()
            assert until(lambda: in_flight(server) == 0)  # the thread let go of the body

    # Until the thread, done, waits for the next decode: what it names then, it keeps.
    assert until(lambda: not batches_kept()), f"{len(batches_kept())} batches kept"
