"""What the OTLP receiver tests share: a refund run's spans, its request and its OTLP/JSON form,
clients that post or export it over HTTP and gRPC, what they were answered, and the server's
clock moved on while its runs stay in flight (``later``)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from email.message import Message
from typing import Any

import grpc
from google.protobuf import json_format
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.trace import ReadableSpan

from tests.integration import agents
from tests.integration.conftest import RunningServer, until

EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
TRACE_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
MIB = 2**20
REFUND_CALLS = ["lookup_order", "issue_refund"]
# The harness's background ticker must not race ``settle``: engine ticks only when told.
QUIET = {"assembly__tick_seconds": 10}


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    headers: Message
    body: bytes

    @property
    def content_type(self) -> str:
        """The header exactly, parameters included: OTLP asks for the request's own."""
        return str(self.headers["Content-Type"])


def post(
    server: RunningServer, body: bytes, content_type: str = PROTOBUF, encoding: str | None = None
) -> HttpAnswer:
    headers = {"Content-Type": content_type}
    if encoding is not None:
        headers["Content-Encoding"] = encoding
    url = f"http://{server.address('http')}/v1/traces"
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return HttpAnswer(response.status, response.headers, response.read())
    except urllib.error.HTTPError as error:
        with error:
            return HttpAnswer(error.code, error.headers, error.read())


def error_status(answer: HttpAnswer) -> status_pb2.Status:
    """OTLP/HTTP "Failures": every 4xx/5xx body is a ``google.rpc.Status``."""
    if answer.content_type == JSON:
        return json_format.Parse(answer.body, status_pb2.Status())
    assert answer.content_type == PROTOBUF
    return status_pb2.Status.FromString(answer.body)


def bad_data(status: status_pb2.Status) -> list[tuple[str, str]]:
    """OTLP "Bad Data": INVALID_ARGUMENT, and a BadRequest in ``Status.details`` describing
    the bad data; its ``(field, description)`` violations."""
    assert status.code == code_pb2.INVALID_ARGUMENT
    (detail,) = status.details
    bad_request = error_details_pb2.BadRequest()
    assert detail.Unpack(bad_request)
    return [(v.field, v.description) for v in bad_request.field_violations]


def ok_response(answer: HttpAnswer) -> ExportTraceServiceResponse:
    """The 200 body, decoded per its Content-Type, which must be the request's."""
    assert answer.status == 200, answer
    if answer.content_type == JSON:
        return json_format.Parse(answer.body, ExportTraceServiceResponse())
    assert answer.content_type == PROTOBUF
    return ExportTraceServiceResponse.FromString(answer.body)


def grpc_channel(
    server: RunningServer, compression: grpc.Compression | None = None
) -> grpc.Channel:
    return grpc.insecure_channel(server.address("grpc"), compression=compression)


def export_grpc(
    server: RunningServer,
    request: ExportTraceServiceRequest | bytes,
    compression: grpc.Compression | None = None,
) -> ExportTraceServiceResponse:
    """One unary Export; raw ``bytes`` are sent as they are (for malformed bodies)."""
    body = request if isinstance(request, bytes) else request.SerializeToString()
    with grpc_channel(server, compression) as channel:
        export = channel.unary_unary(
            EXPORT_METHOD, response_deserializer=ExportTraceServiceResponse.FromString
        )
        response: ExportTraceServiceResponse = export(body, timeout=10)
        return response


def refund_request() -> ExportTraceServiceRequest:
    """A fresh (new ids) six-span refund run as the SDK's OTLP encoder writes it."""
    return encode_spans(agents.record(agents.refund_run(), "genai"))


def refund_spans() -> tuple[ReadableSpan, ...]:
    """A fresh refund run's six spans, as the SDK records them (not yet encoded)."""
    return agents.record(agents.refund_run(), "genai")


def spans_in(request: ExportTraceServiceRequest) -> Iterator[Span]:
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            yield from scope_spans.spans


def trace_hex(request: ExportTraceServiceRequest) -> str:
    return next(spans_in(request)).trace_id.hex()


def with_bad_spans(request: ExportTraceServiceRequest) -> ExportTraceServiceRequest:
    """``request`` plus four spans whose ids break trace.proto's rules, appended in order:
    short trace id, short span id, all-zero trace id, all-zero span id."""
    mixed = ExportTraceServiceRequest()
    mixed.CopyFrom(request)
    scope = mixed.resource_spans[0].scope_spans[0]
    template = scope.spans[0]
    for field, value in (
        ("trace_id", b"\x01" * 15),
        ("span_id", b"\x02" * 4),
        ("trace_id", bytes(16)),
        ("span_id", bytes(8)),
    ):
        bad = scope.spans.add()
        bad.CopyFrom(template)
        setattr(bad, field, value)
    return mixed


def to_otlp_json(request: ExportTraceServiceRequest, times_as_numbers: bool = False) -> Any:
    """OTLP/JSON as the spec writes it: lowerCamelCase keys, integer enums, upper-case hex
    ids (hex is case-insensitive), int64 as strings or, if asked, as numbers."""
    document = json_format.MessageToDict(request, use_integers_for_enums=True)
    for resource_spans in document["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex().upper()
                if times_as_numbers:
                    for key in ("startTimeUnixNano", "endTimeUnixNano"):
                        span[key] = int(span[key])
    return document


def sent_calls(server: RunningServer) -> list[tuple[str, list[str], bool]]:
    """(trace id, tool names, complete) of every ToolTrace dumped so far."""
    return [
        (t["trace_id"], [c["tool_name"] for c in t["calls"]], t["complete"])
        for t in server.tooltraces()
    ]


def peak_rss_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1])


def peak_rss_growth_kib(action: Callable[[], object]) -> int:
    """How far this process's peak RSS rose above its current RSS while ``action`` ran.
    Linux proc(5), /proc/pid/clear_refs: writing 5 resets the peak (VmHWM) to the current RSS.
    """
    with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
        refs.write("5")
    before = peak_rss_kib()
    action()
    return peak_rss_kib() - before


class HeldCall:
    """An Export call (or a call of ``method``, answered with ``response``) open on the wire
    whose request message is not sent until ``release``: the server holds a request slot for
    it meanwhile (``ingest.max_concurrent_requests``)."""

    def __init__(
        self,
        server: RunningServer,
        messages: list[bytes],
        method: str = EXPORT_METHOD,
        response: Callable[[bytes], Any] = ExportTraceServiceResponse.FromString,
    ) -> None:
        self._channel = grpc_channel(server)
        self._go = threading.Event()
        self._messages = messages
        call = self._channel.stream_unary(method, response_deserializer=response)
        self.future = call.future(self._requests(), timeout=30)

    def _requests(self) -> Iterator[bytes]:
        self._go.wait(30)
        yield from self._messages

    def cancel(self) -> None:
        """Abandon the call before sending anything, as a client that gives up does."""
        self.future.cancel()
        self._go.set()
        self._channel.close()

    def release(self) -> Any:
        """Send the messages, end the call; its response, or the error it ended with."""
        self._go.set()
        try:
            return self.future.result(timeout=30)
        except grpc.RpcError as error:
            return error
        finally:
            self._channel.close()


def in_flight(server: RunningServer) -> float:
    return server.sample("toolwatch_requests_in_flight")


def later(server: RunningServer, seconds: float) -> None:
    """On the server's loop: ``seconds`` pass and the checks due are made, as a tick makes
    them: the runs in flight stay."""
    server.clock.advance(seconds)
    assert server.app.engine.tick() == 0


REQUESTS_COUNTED = "toolwatch_export_request_duration_seconds_count"


# Real network time: the read timeout is the loop's clock, so these wait a fraction of a second.
SLOW = {"ingest__max_concurrent_requests": 1, "ingest__read_timeout_seconds": 0.2, **QUIET}


HEADERS = {"Content-Type": PROTOBUF}


def stopping(server: RunningServer, grace: float) -> Future[None]:
    """``App.stop(grace)`` (what SIGTERM runs) begun on the server's loop."""
    return asyncio.run_coroutine_threadsafe(server.app.stop(grace=grace), server.loop)


def ready(server: RunningServer) -> bool:
    """``/readyz`` answers 200: false from the moment a shutdown begins."""
    url = f"http://{server.address('metrics')}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return bool(answer.status == 200)
    except urllib.error.HTTPError as error:
        with error:
            return False


def health_status(server: RunningServer) -> Any:
    with grpc_channel(server) as channel:
        check = health_pb2_grpc.HealthStub(channel).Check
        return check(health_pb2.HealthCheckRequest(), timeout=10).status


@contextlib.contextmanager
def stalled_body(server: RunningServer) -> Iterator[socket.socket]:
    """A connection whose OTLP/HTTP request announced 100,000 bytes and sent 10, in flight."""
    host, _, port = server.address("http").rpartition(":")
    with socket.create_connection((host, int(port)), timeout=10) as client:
        head = f"POST /v1/traces HTTP/1.1\r\nHost: {host}\r\nContent-Type: {PROTOBUF}\r\n"
        client.sendall(f"{head}Content-Length: 100000\r\n\r\n".encode() + b"\x0a" * 10)
        assert until(lambda: in_flight(server) == 1)
        yield client
