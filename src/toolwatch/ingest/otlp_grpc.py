"""OTLP/gRPC receiver: ``opentelemetry.proto.collector.trace.v1.TraceService/Export``.

A thin adapter: it takes the request as raw bytes (so a malformed body gets a clear
INVALID_ARGUMENT from our decoder instead of gRPC's generic deserialization failure), decodes
it once, hands the batch to the consumer and answers per the OTLP specification:

- success, with ``partial_success.rejected_spans`` and a message when spans were invalid;
- INVALID_ARGUMENT for a body that cannot be decoded, with a ``google.rpc.BadRequest`` naming
  the field and the reason in ``grpc-status-details-bin`` (OTLP: not-retryable errors use
  InvalidArgument "and MAY supply ... BadRequest");
- UNAVAILABLE with ``google.rpc.RetryInfo`` when the consumer is at capacity, or when every
  request slot is taken (``toolwatch.ingest.slots``: checked before the body is read, so a
  burst cannot pile up bodies in memory). RetryInfo is
  sent both in ``grpc-status-details-bin`` (a ``google.rpc.Status``, the standard rich-error
  form) and as ``google.rpc.retryinfo-bin``, the trailer the OpenTelemetry Python exporter
  reads. OTLP: "the server SHOULD respond with UNAVAILABLE ... and MAY supply RetryInfo";
- DEADLINE_EXCEEDED (retryable) when a call has not sent its whole request within the request
  slots' read timeout: its slot goes back to the other clients;
- UNAVAILABLE with RetryInfo too when the server shuts down while the request decodes, the
  grace over: none of its spans was taken (counted ``aborted``);
- each refusal (an invalid request, an overload, a request too slow, rejected spans) is told
  to a ``toolwatch.senders.SenderLog``, which logs who sent it, a line per reason at most so
  often;
- nothing, for a call the client cancelled before its request arrived (its own deadline, or
  it went away): the request is counted ``aborted``, not ``invalid``, and none of its spans
  was taken, so a retry delivers them once.

A request is decoded in the decoding turn shared with the OTLP/HTTP receiver
(``toolwatch.ingest.decode_thread``): one at a time, a large one (``off_loop_bytes``) in the
decode thread while the event loop serves the rest. A call cancelled while its request
decodes is counted ``aborted`` at once; its slot is given back when the thread is done with
the body.

The method is served as client-streaming on the wire, which a unary client cannot tell
apart: a unary handler is handed its request only once gRPC has read all of it, too late to
refuse it unread. A second request message on the call is INVALID_ARGUMENT, never ignored.
Lifecycle (start, stop, health) belongs to the app.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from toolwatch.assembly.buffer import REPORTED_DROPS
from toolwatch.engine import Admission, Receipt
from toolwatch.ingest.decode_requests import decode_protobuf
from toolwatch.ingest.decode_thread import DecodeAbandonedError, DecodeThread
from toolwatch.ingest.decode_types import DecodedBatch, DecodeError, DecodeOptions
from toolwatch.ingest.slots import RequestSlots
from toolwatch.metrics import PipelineMetrics
from toolwatch.senders import SenderLog, SenderOf, grpc_sender

__all__ = [
    "SERVICE_NAME",
    "SpanConsumer",
    "bad_request_status",
    "export_response",
    "tell_rejected",
    "trace_service_handler",
]

SERVICE_NAME = "opentelemetry.proto.collector.trace.v1.TraceService"

#: Takes a decoded request and the transport name, says whether it was admitted (and what
#: of it a limit refused).
SpanConsumer = Callable[[DecodedBatch, str], Receipt]

_TRANSPORT = "grpc"
_OVERLOAD_MESSAGE = "toolwatch is at capacity; retry after the RetryInfo delay"
_SHUTDOWN_MESSAGE = "toolwatch is shutting down; retry after the RetryInfo delay"


def _overload_trailers(retry_after_seconds: float, message: str) -> tuple[tuple[str, bytes], ...]:
    seconds = int(retry_after_seconds)
    delay = duration_pb2.Duration(seconds=seconds, nanos=int((retry_after_seconds - seconds) * 1e9))
    retry = error_details_pb2.RetryInfo(retry_delay=delay)
    detail = any_pb2.Any()
    detail.Pack(retry)
    status = status_pb2.Status(code=code_pb2.UNAVAILABLE, message=message, details=[detail])
    return (
        (_STATUS_DETAILS, status.SerializeToString()),
        ("google.rpc.retryinfo-bin", retry.SerializeToString()),
    )


_STATUS_DETAILS = "grpc-status-details-bin"


def bad_request_status(error: DecodeError) -> status_pb2.Status:
    """The ``google.rpc.Status`` of a request that cannot be decoded: INVALID_ARGUMENT, with a
    ``BadRequest`` detail whose one field violation names the field at fault and why. The
    OTLP/HTTP receiver sends the same in its 400 bodies ("Status.details ... SHOULD contain
    a BadRequest that describes the bad data")."""
    violation = error_details_pb2.BadRequest.FieldViolation(
        field=error.field, description=str(error)
    )
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.BadRequest(field_violations=[violation]))
    return status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message=str(error), details=[detail])


def _invalid(message: str) -> bytes:
    status: bytes = bad_request_status(DecodeError(message)).SerializeToString()
    return status


def export_response(
    batch: DecodedBatch, receipt: Receipt
) -> trace_service_pb2.ExportTraceServiceResponse:
    """The answer to an accepted request: OTLP partial success when spans were rejected as
    invalid, or dropped for a limit or as late (``receipt``)."""
    response = trace_service_pb2.ExportTraceServiceResponse()
    refused = receipt.refused
    rejected = sum(batch.rejected.values()) + sum(refused.values())
    if rejected:
        said = [batch.error_message] if batch.error_message else []
        said.extend(_refusal(reason, n) for reason, n in sorted(refused.items()))
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = "; ".join(said)
    return response


def _refusal(reason: str, count: int) -> str:
    spans = f"{count} span{'s' if count != 1 else ''}"
    return f"{spans} dropped ({reason}): {REPORTED_DROPS.get(reason, 'over a limit')}"


class _Export:
    def __init__(
        self,
        consume: SpanConsumer,
        options: DecodeOptions,
        metrics: PipelineMetrics,
        retry_after_seconds: float,
        slots: RequestSlots,
        *,
        decoding: DecodeThread,
        senders: SenderLog,
    ) -> None:
        self._consume = consume
        self._senders = senders
        self._options = options
        self._metrics = metrics
        self._trailers = {
            message: _overload_trailers(retry_after_seconds, message)
            for message in (_OVERLOAD_MESSAGE, _SHUTDOWN_MESSAGE)
        }
        self._slots = slots
        self._decoding = decoding

    async def handle(
        self, _requests: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> bytes:
        started = time.perf_counter()
        sender = grpc_sender(_TRANSPORT, context)
        if not self._slots.take():
            self._metrics.request_handled(_TRANSPORT, "overloaded", time.perf_counter() - started)
            self._senders.refused("overloaded", sender, _OVERLOAD_MESSAGE)
            await self._abort_overloaded(context)  # raises
            return b""
        try:
            outcome, payload = await self._receive(context, sender)
        except asyncio.CancelledError:  # the client cancelled the call: nothing was taken
            self._metrics.request_handled(_TRANSPORT, "aborted", time.perf_counter() - started)
            raise
        counted = "aborted" if outcome == "abandoned" else outcome  # nothing was taken
        self._metrics.request_handled(_TRANSPORT, counted, time.perf_counter() - started)
        if outcome == "invalid":
            status = status_pb2.Status.FromString(payload)
            trailers = ((_STATUS_DETAILS, payload),)
            self._senders.refused("invalid_request", sender, status.message)
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, status.message, trailing_metadata=trailers
            )
        if outcome == "overloaded":
            self._senders.refused("overloaded", sender, _OVERLOAD_MESSAGE)
            await self._abort_overloaded(context)
        if outcome == "abandoned":  # shutdown gave up on its decode: retryable
            await self._abort_overloaded(context, _SHUTDOWN_MESSAGE)
        if outcome == "timeout":
            message = f"the request was not received within {self._slots.read_timeout:g} s"
            self._senders.refused("slow_request", sender, message)
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, message)
        return payload

    async def _abort_overloaded(
        self, context: grpc.aio.ServicerContext, message: str = _OVERLOAD_MESSAGE
    ) -> None:
        trailers = self._trailers[message]
        await context.abort(grpc.StatusCode.UNAVAILABLE, message, trailing_metadata=trailers)

    async def _receive(
        self, context: grpc.aio.ServicerContext, sender: SenderOf
    ) -> tuple[str, bytes]:
        """The one request message, exported; a call with none or two is invalid, one that
        has not sent all of it within the slots' read timeout is cut off ("timeout"). Gives
        back the slot ``handle`` took: here, or through the decoding turn (``_export``)."""
        try:
            body = await self._read(context)
        except BaseException:
            self._slots.give()
            raise
        if isinstance(body, tuple):
            self._slots.give()
            return body
        return await self._export(body, sender)

    async def _read(self, context: grpc.aio.ServicerContext) -> bytes | tuple[str, bytes]:
        """The one request message, or the outcome of a call that did not send one."""
        try:
            async with asyncio.timeout(self._slots.read_timeout):
                body = await context.read()
                extra = grpc.aio.EOF if body is grpc.aio.EOF else await context.read()
        except TimeoutError:
            return "timeout", b""
        if body is grpc.aio.EOF:
            if await _ended_by_client(context):
                return "aborted", b""
            return "invalid", _invalid("the call carried no ExportTraceServiceRequest")
        if extra is not grpc.aio.EOF:
            return "invalid", _invalid("Export is unary: a second request message was sent")
        request: bytes = body  # raw: the method has no deserializer
        return request

    async def _export(self, body: bytes, sender: SenderOf) -> tuple[str, bytes]:
        """Returns (outcome, response bytes or, for "invalid", the error's google.rpc.Status);
        "abandoned" when shutdown gave up on the decode. The body is decoded in the decoding
        turn, which gives the request's slot back. Spans rejected are told to the sender log."""
        decode = functools.partial(decode_protobuf, body, self._options)
        try:
            async with self._decoding.turn(self._slots.give) as turn:
                batch = await turn.decode(decode, len(body))
                receipt = self._consume(batch, _TRANSPORT)
        except DecodeError as exc:
            return "invalid", bad_request_status(exc).SerializeToString()
        except DecodeAbandonedError:
            return "abandoned", b""
        if receipt.admission is Admission.OVERLOADED:
            return "overloaded", b""
        tell_rejected(self._senders, batch, sender)
        return "ok", export_response(batch, receipt).SerializeToString()


def tell_rejected(senders: SenderLog, batch: DecodedBatch, sender: SenderOf) -> None:
    """Tell ``senders`` of the spans of an admitted ``batch`` rejected as invalid, by reason,
    each with the request's ``partial_success`` message."""
    for reason, count in batch.rejected.items():
        senders.refused(reason, sender, batch.error_message or "", spans=count)


#: How long a call whose reads ended with no message is watched for the client's
#: cancellation before it is judged a call that carried no request.
_CANCEL_WAIT_SECONDS = 0.5


async def _ended_by_client(context: grpc.aio.ServicerContext) -> bool:
    """Whether a call whose reads ended with no message was cancelled by its client. gRPC
    ends a cancelled call's reads as if the client had half-closed, then ends the call (or
    cancels the handler: CancelledError, counted "aborted" by ``_Export.handle``), while a
    client that half-closed with no message waits for the answer: so the call is watched
    until it ends, for at most ``_CANCEL_WAIT_SECONDS``."""
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[None] = loop.create_future()

    def end(_context: object) -> None:
        if not ended.done():
            ended.set_result(None)

    context.add_done_callback(lambda c: loop.call_soon_threadsafe(end, c))
    try:
        await asyncio.wait_for(ended, _CANCEL_WAIT_SECONDS)
    except TimeoutError:
        return bool(context.cancelled())
    return True


def trace_service_handler(
    consume: SpanConsumer,
    options: DecodeOptions,
    metrics: PipelineMetrics,
    retry_after_seconds: float,
    slots: RequestSlots,
    *,
    decoding: DecodeThread,
    senders: SenderLog,
) -> grpc.GenericRpcHandler:
    """The ``TraceService`` handler to add to a ``grpc.aio`` server. Requests and responses
    cross it as bytes; a request is decoded in ``decoding``'s turn (shared with the OTLP/HTTP
    receiver: a large one in its thread), ``consume`` runs on the server's event loop. Each
    call holds one of ``slots`` while it is read, decoded and handled; its refusals are told
    to ``senders``."""
    export = _Export(
        consume, options, metrics, retry_after_seconds, slots, decoding=decoding, senders=senders
    )
    method = grpc.stream_unary_rpc_method_handler(export.handle)
    return grpc.method_handlers_generic_handler(SERVICE_NAME, {"Export": method})
