"""Review of the findings stream: what a resumed subscriber loses while its replay is stuck
is never counted in ``toolwatch_stream_dropped_findings_total``.

A subscriber that resumes (``toolwatch tail --reconnect`` after a dropped connection, or a
run started with ``--cursor-file``) is sent the held findings after its cursor by a
``_Replay`` that reads them from the broker as it goes. While it replays, every finding
published for it only extends the replay (``Subscription.offer``: "the broker holds this
one too, and the replay reads it there") and is never queued, so its queue's bound and
counting do not apply. The replay counts what the broker let go only when it reads past it
(``_Replay.take``). A client that stops reading mid-replay (a stalled terminal, ``kill
-STOP``, a pager, the same stuck client the queue's counting is for) is never read past:

- when its connection is lost, ``FindingsBroker.unsubscribe`` counts its queue (empty) and
  the finding being written; the replay's range is dropped (``discard``: ``_replay = None``)
  uncounted, and the part still held is not remembered as held for it (no ``_Departed``),
  so the shutdown does not count it either;
- at shutdown (``App.stop``), the same: the subscription still replaying when the grace
  ends loses everything after the finding being written, uncounted.

README, Findings stream: "Every loss is counted in toolwatch_stream_dropped_findings_total";
it "counts, per subscription, the findings dropped from its full queue, those let go before
its replay read them, and those queued when its client left that are no longer held then";
"Those held for a client that left and has not resumed when the server shuts down are
counted then"; "at shutdown, what a subscriber has not taken within a second of the drain
is counted and logged lost". A fresh subscription stuck the same way has each of these
counted; a resumed one, exactly the subscriber an outage leaves behind, has none, so
ToolwatchFindingsStreamDropping never fires for it.

What the server has written into the client's HTTP/2 window is beyond its count (README).
These tests make that exactly nothing: each finding here is larger than the 64 KiB window
the client keeps (``grpc.http2.bdp_probe: 0``, as tail sets), so no finding is ever wholly
written, and what the client lost is every finding after its cursor. (With findings of
ordinary size the window holds a couple of hundred; the rest are lost the same way.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc
import pytest

from tests.integration.conftest import RunningServer
from tests.integration.test_stream import DROPPED, make_finding, make_trace, serve
from toolwatch._proto.toolwatch.v1 import findings_pb2, findings_pb2_grpc
from toolwatch.model import Finding

#: A finding larger than HTTP/2's 64 KiB window: the server can never write one whole into
#: a client that does not read.
BIG = 70_000
#: tail's receive window: HTTP/2's 64 KiB (``toolwatch.tail._channel_options``).
NO_BDP = (("grpc.http2.bdp_probe", 0),)


def findings(first: int, last: int) -> list[Finding]:
    return [make_finding(explanation=f"f{i} " + "x" * BIG) for i in range(first, last + 1)]


def resume_from_start(stream_id: str) -> findings_pb2.SubscribeRequest:
    cursor = findings_pb2.StreamCursor(stream_id=stream_id, after=0)
    return findings_pb2.SubscribeRequest(resume=[cursor])


def test_what_a_client_stuck_in_its_replay_lost_is_counted_when_it_leaves() -> None:
    """A client resumes from the stream's start (200 held, ``replay_size`` 200) and reads
    nothing; 1,000 more findings are published, so the broker lets go of f1..f1000 before
    its replay read them; then the client goes away. f1..f1000 are lost to it and no longer
    held: counted as it leaves. f1001..f1200, held for it, are lost when the server shuts
    down without its having resumed: counted then.
    Today: 1 and 1 (only f1, the finding being written when it left)."""

    async def scenario() -> tuple[float | None, float | None]:
        async with serve(replay_size=200) as h:
            h.broker.publish(make_trace(), findings(1, 200))
            async with grpc.aio.insecure_channel(h.target, options=NO_BDP) as channel:
                stub = findings_pb2_grpc.FindingsServiceStub(channel)  # type: ignore[no-untyped-call]
                call = stub.Subscribe(resume_from_start(h.broker.stream_id))
                metadata = dict(await call.initial_metadata())
                assert (metadata["toolwatch-resume"], metadata["toolwatch-resume-lost"]) == (
                    "same",
                    "0",
                )
                h.broker.publish(make_trace(), findings(201, 1200))
                assert h.registry.get_sample_value(DROPPED) == 0  # nothing lost yet: held
                call.cancel()
                await asyncio.wait_for(h.broker.wait_for_subscribers(0), timeout=10)
                at_leave = h.registry.get_sample_value(DROPPED)
        # ``serve`` closed the broker: the server shut down, the client never resumed.
        return at_leave, h.registry.get_sample_value(DROPPED)

    assert asyncio.run(scenario()) == (1000, 1200)


@pytest.mark.parametrize("resumed", [False, True], ids=["fresh", "resumed"])
def test_what_a_stuck_subscriber_has_not_taken_at_shutdown_is_counted(
    start_server: Callable[..., RunningServer], resumed: bool
) -> None:
    """A real toolwatch publishes 200 findings for a client that reads nothing, then shuts
    down (SIGTERM: ``App.stop``). The client has taken none of the 200 within the second the
    drain gives it, and the restarted server holds none of them: all 200 are counted before
    the last scrape. ``fresh``: the client subscribed before they were published (queued):
    200, as documented. ``resumed``: it resumed from the stream's start after they were
    published (replayed).
    Today (``resumed``): 1, the finding being written when the grace ended."""
    server = start_server(output__stream_replay_size="200")
    broker = server.app.broker

    def publish() -> None:
        broker.publish(make_trace(), findings(1, 200))

    request = findings_pb2.SubscribeRequest()
    if resumed:
        server.call(publish)
        request = resume_from_start(server.call(lambda: broker.stream_id))
    with grpc.insecure_channel(server.address("stream"), options=NO_BDP) as channel:
        stub = findings_pb2_grpc.FindingsServiceStub(channel)  # type: ignore[no-untyped-call]
        call = stub.Subscribe(request)
        metadata = dict(call.initial_metadata())
        assert metadata["toolwatch-subscribed"] == "1"
        if not resumed:
            server.call(publish)
        server.stop()
        call.cancel()
    assert server.sample("toolwatch_stream_dropped_findings_total") == 200
