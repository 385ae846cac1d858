"""The findings stream's gRPC service: ``FindingsStreamServicer``, ``toolwatch.v1.FindingsService``
over a ``FindingsBroker``.

``FindingsStreamServicer`` is the thin grpc.aio adapter: it validates the request, subscribes,
writes queued findings and unsubscribes when the client goes away. A write that fails ends
the stream quietly: it fails only once the call is over (the client went away with a write
pending, as a stuck subscriber does), and grpc-aio would log a yielded message's failure as a
servicer error with a traceback. ``FindingsBroker.close``
ends every stream cleanly (status OK) once the findings already queued are delivered, losses
no finding has told in its trailing metadata (``Subscription.untold``); the app's
``server.stop(grace)`` bounds how long that may take. A stream whose token is taken out
(asked before each write, and at ``recheck`` when the tokens change) is ended
UNAUTHENTICATED and counted; what it had queued is withheld, not counted lost. When a
reload takes a CA out of the client CA file, ``reconnect_all`` ends every open stream
UNAVAILABLE (``CLIENT_CAS_CHANGED``), not counted as a refusal, as if its client had left:
what it had not been sent is held for its resume. Its client connects again through a new
TLS handshake, which trusts the client CAs served then (the app closes every connection of
the stream listener, so that no call is made on one handshaken before:
``toolwatch.stream_listener``): no certificate is judged here.

Threading: everything here runs on the event loop that runs the grpc.aio server.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from toolwatch._proto.toolwatch.v1 import findings_pb2, findings_pb2_grpc
from toolwatch.sinks.stream.broker import FindingsBroker, SubscribersFullError
from toolwatch.sinks.stream.filters import StreamFilter
from toolwatch.sinks.stream.protocol import (
    CLIENT_CAS_CHANGED,
    MISSED_AFTER_KEY,
    MISSED_FROM_REPLAY_KEY,
    RESUME_KEY,
    RESUME_LOST_KEY,
    RESUME_TOKEN_KEY,
    SHUTTING_DOWN,
    STREAM_ID_KEY,
    STREAM_SEQUENCE_KEY,
    SUBSCRIBED_METADATA,
    SUPERSEDED,
)
from toolwatch.sinks.stream.resumes import Resume
from toolwatch.sinks.stream.subscription import Subscription

__all__ = ["FindingsStreamServicer", "add_findings_service"]

log = logging.getLogger(__name__)


#: From a call's metadata, what is asked before each write to it (``None``: nothing):
#: ``ListenerSecurity.still_accepted`` for the stream listener.
Authorize = Callable[[Any], Callable[[], bool] | None]


class FindingsStreamServicer(findings_pb2_grpc.FindingsServiceServicer):
    """grpc.aio servicer of ``FindingsService`` over a ``FindingsBroker``."""

    def __init__(
        self,
        broker: FindingsBroker,
        authorize: Authorize | None = None,
        refused: Callable[[], None] = lambda: None,
    ) -> None:
        self._broker = broker
        self._authorize = authorize
        self._refused = refused
        self._checked: dict[Subscription, Callable[[], bool]] = {}  # open, with a token

    def recheck(self) -> None:
        """End the open streams whose token is no longer accepted (the tokens changed): one
        that no finding passes would otherwise never be asked. Each is revoked, then
        answered UNAUTHENTICATED and counted by its ``Subscribe``."""
        for subscription, allowed in list(self._checked.items()):
            if not allowed():
                subscription.revoke()

    def reconnect_all(self) -> int:
        """End every open stream UNAVAILABLE (``CLIENT_CAS_CHANGED``), for its client to
        connect again: a reload took a CA out of the client CA file, and a stream's
        connection was accepted by its TLS handshake against the CAs served then. Not a
        refusal (nothing counted): what a stream was not sent is held for its resume, and its
        client's next handshake, with the CAs served now, decides whether it gets back in
        (the app closes every connection of the stream listener for that:
        ``toolwatch.stream_listener``). Logs how many were ended, when any was, and returns
        it. Call it on the server's event loop."""
        if self._broker.closed:  # shutting down: each stream ends OK once drained
            return 0
        ended = [s for s in self._broker.subscriptions if not (s.revoked or s.interrupted)]
        for subscription in ended:
            subscription.interrupt()
        if ended:
            log.info(
                "a CA was taken out of the client CA file: ended %d findings stream(s)"
                " UNAVAILABLE, for their clients to connect again through a new TLS handshake",
                len(ended),
            )
        return len(ended)

    def add_to(self, server: grpc.aio.Server) -> None:
        """Registers ``FindingsService`` on ``server`` (before it starts), served by this
        servicer: one servicer serves each server the stream listener starts."""
        # The generated gRPC module carries no annotations.
        findings_pb2_grpc.add_FindingsServiceServicer_to_server(self, server)  # type: ignore[no-untyped-call]

    async def Subscribe(  # noqa: N802 (the gRPC method name)
        self, request: findings_pb2.SubscribeRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        """Validates ``request`` and subscribes it, or aborts the call (INVALID_ARGUMENT,
        UNAVAILABLE while shutting down, RESOURCE_EXHAUSTED); then sends the headers and the
        findings (``_stream``), and ends the call as the subscription ended (``_end``)."""
        broker = self._broker
        try:
            stream_filter, resume = self._requested(request)
        except ValueError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            return
        if broker.closed:
            await context.abort(grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN)
            return
        start = broker.sequence  # before any await: what this subscription starts after
        try:
            subscription = broker.subscribe(stream_filter, resume)
        except SubscribersFullError as e:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(e))
            return
        metadata = self._subscribed_metadata(subscription, start)
        allowed = self._watch_token(subscription, context)  # before any await: see its docstring
        accepted = await self._stream(subscription, metadata, allowed, context)
        await self._end(subscription, accepted, context)

    def _requested(
        self, request: findings_pb2.SubscribeRequest
    ) -> tuple[StreamFilter, Resume | None]:
        """The filter and the resume ``request`` asks for; raises ``ValueError`` for one that
        is not valid, or a resume the broker cannot take (``FindingsBroker.check_resume``)."""
        stream_filter = StreamFilter.from_request(request)
        resume = Resume.from_request(request)
        if resume is not None:
            self._broker.check_resume(resume)
        return stream_filter, resume

    def _subscribed_metadata(
        self, subscription: Subscription, start: int
    ) -> tuple[tuple[str, str], ...]:
        """The headers that tell the client it is subscribed: the stream, the sequence
        ``subscription`` starts after, its resume token and, when it resumed, how."""
        metadata: tuple[tuple[str, str], ...] = (
            *SUBSCRIBED_METADATA,
            (STREAM_ID_KEY, self._broker.stream_id),
            (STREAM_SEQUENCE_KEY, str(start)),
            (RESUME_TOKEN_KEY, subscription.token),
        )
        if (resumed := subscription.resumed) is not None:
            metadata += ((RESUME_KEY, resumed.stream), (RESUME_LOST_KEY, str(resumed.lost)))
        return metadata

    def _watch_token(
        self, subscription: Subscription, context: grpc.aio.ServicerContext[Any, Any]
    ) -> Callable[[], bool] | None:
        """Registers what ``authorize`` gives to ask before each write to ``subscription``
        (``None``: nothing), asked at each ``recheck`` too, and returns it; ``subscription``
        is revoked at once when it says no already. The caller must call it before any
        await: a reload's ``recheck`` in between would not see the subscription."""
        authorize = self._authorize
        allowed = authorize(context.invocation_metadata()) if authorize is not None else None
        if allowed is not None:  # before any await: a recheck from now on sees it
            self._checked[subscription] = allowed
            if not allowed():  # a reload since the call's headers were checked
                subscription.revoke()
        return allowed

    async def _stream(
        self,
        subscription: Subscription,
        metadata: tuple[tuple[str, str], ...],
        allowed: Callable[[], bool] | None,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> bool:
        """Sends the headers ``metadata``, then ``subscription``'s findings (``deliver``),
        which unsubscribes it; also when the headers fail. ``False`` when ``allowed`` said
        no. No longer rechecked (``recheck``) once over."""
        broker = self._broker
        try:
            try:
                # Headers now, so the client knows it is subscribed before any finding arrives.
                await context.send_initial_metadata(metadata)
            except BaseException:
                broker.unsubscribe(subscription)
                raise
            return await deliver(broker, subscription, context.write, allowed)
        finally:
            self._checked.pop(subscription, None)

    async def _end(
        self,
        subscription: Subscription,
        accepted: bool,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> None:
        """Ends the call as ``subscription`` ended: UNAUTHENTICATED, counted, when its token
        was taken out (not ``accepted``); ABORTED when another client resumed it
        (``SUPERSEDED``); UNAVAILABLE when interrupted (``CLIENT_CAS_CHANGED``); else OK, with
        the losses no finding told in its trailing metadata."""
        if not accepted:
            self._refused()
            await context.abort(grpc.StatusCode.UNAUTHENTICATED)
        if subscription.superseded:  # what it was owed is the resume's
            await context.abort(grpc.StatusCode.ABORTED, SUPERSEDED)
        if subscription.interrupted:  # its unsent findings are held for its resume
            await context.abort(grpc.StatusCode.UNAVAILABLE, CLIENT_CAS_CHANGED)
        missed, from_replay = subscription.untold
        if missed:  # lost after the last finding sent: told as the stream ends
            context.set_trailing_metadata(
                ((MISSED_AFTER_KEY, str(missed)), (MISSED_FROM_REPLAY_KEY, str(from_replay)))
            )


async def deliver(
    broker: FindingsBroker,
    subscription: Subscription,
    write: Callable[[findings_pb2.Finding], Awaitable[None]],
    allowed: Callable[[], bool] | None = None,
) -> bool:
    """Writes ``subscription``'s findings with ``write`` until it is closed and drained, a
    write fails, the call is cancelled (the client went away) or ``allowed`` says no (its
    token was taken out: asked before each write and when it ends); then unsubscribes it,
    with the finding not written and those still queued. ``False`` when ``allowed`` said
    no."""
    unsent: findings_pb2.Finding | None = None
    accepted = True
    try:
        while (unsent := await subscription.next()) is not None:
            if allowed is not None and not allowed():
                accepted = False
                break
            await write(unsent)
            unsent = None
        else:  # closed (the server's shutdown, a supersede), revoked (its token) or interrupted
            accepted = not subscription.revoked
    except Exception as error:  # grpc-aio's ExecuteBatchError is not public
        log.debug("findings stream ended by a failed write: %r", error)
        accepted = not subscription.revoked  # revoked while it wrote: withheld, not lost
    finally:  # also on cancellation, a BaseException
        broker.unsubscribe(subscription, unsent=unsent, withheld=not accepted)
    return accepted


def add_findings_service(
    server: grpc.aio.Server,
    broker: FindingsBroker,
    authorize: Authorize | None = None,
    refused: Callable[[], None] = lambda: None,
) -> FindingsStreamServicer:
    """Registers ``FindingsService`` on ``server`` (before it starts), served by ``broker``;
    ``authorize`` gives, from a call's metadata, whether its token is still accepted (asked
    before each write and at ``recheck``); ``refused`` counts a stream ended for it."""
    servicer = FindingsStreamServicer(broker, authorize, refused)
    servicer.add_to(server)
    return servicer
