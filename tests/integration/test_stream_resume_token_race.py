"""Was (review of fa0d073, a resume claims its own held findings by its token): a resume that
comes before the server has seen the client's last connection go claims nothing, and what
that connection's subscription leaves held when it ends is counted lost at shutdown, though
the resume was sent every one of them: 3 counted, the client lost none.
Now: the broker knows its open subscriptions by token, and a resume with the token of one
still open supersedes it (``FindingsBroker._supersede``): that one is ended, what it owed is
the resume's (sent by its replay, or counted once as the resume is told of it), and when its
connection is seen gone it holds and counts nothing: 0.

This is a common path, not a corner: a connection gone silent (a NAT or proxy that forgot
it) is found by ``toolwatch tail`` within 40 s and by the server within 70 s, so tail's
resume usually comes first. docs/output-formats.md states the miscount as a limitation, but the
token now names the old subscription while it is still open (``Subscription.token``), so the
broker could tell that the resume is that subscription's client: what the old one leaves when it
ends is the new one's replay (sent, or counted by it), not a departed subscriber's to count
again at shutdown.

Shown through a real gRPC server and a TCP proxy that silences the connection (both ways, no
reset), as in tests/integration/test_stream_resume.py: a client subscribes through the proxy
(its token T, cursor 0) and reads nothing; f1..f3 are published (70 KB each, more than the
64 KiB window, so none is written whole: f1 is being written, f2, f3 queued); the connection
goes silent. The client resumes on a new connection after 0 with T: it is told nothing lost
(``toolwatch-resume-lost`` 0) and reads f1, f2, f3. Then the server finds the old connection
gone (here: the proxy resets it, as the server's unanswered ping would end it): its f1..f3
are still held, so they are kept for a resume under T, which nobody will send again (the
client now holds the resumed subscription's token). The server shuts down.
What the client lost: nothing. Counted in toolwatch_stream_dropped_findings_total: 3.
Should be: 0.
"""

from __future__ import annotations

import asyncio

import grpc

from tests.integration.stream_resume_support import named, proxied, request_after, subscribed, until
from tests.integration.stream_support import DROPPED, NO_BDP, findings, make_trace, serve
from toolwatch._proto.toolwatch.v1 import findings_pb2_grpc


def test_a_resume_before_the_old_connection_is_seen_gone_is_not_counted_lost() -> None:
    async def scenario() -> tuple[tuple[str, str], list[str], float | None, float | None]:
        async with serve(replay_size=10) as h, proxied(h) as proxy:
            stream_id = h.broker.stream_id
            proxy_target = f"127.0.0.1:{proxy.port}"
            async with grpc.aio.insecure_channel(proxy_target, options=NO_BDP) as old_channel:
                old_stub = findings_pb2_grpc.FindingsServiceStub(old_channel)  # type: ignore[no-untyped-call]
                _old, token, after = await subscribed(old_stub)  # held: the call stays open
                (first,) = h.broker.subscriptions
                h.broker.publish(make_trace(), findings(1, 3))
                await until(lambda: first.queued == 2)  # f1 being written, f2, f3 queued
                proxy.silence()  # a NAT forgot the connection: no reset reaches either end
                async with grpc.aio.insecure_channel(h.target, options=NO_BDP) as channel:
                    stub = findings_pb2_grpc.FindingsServiceStub(channel)  # type: ignore[no-untyped-call]
                    again = stub.Subscribe(request_after(stream_id, after, token))
                    resumed = dict(await again.initial_metadata())
                    told = (resumed["toolwatch-resume"], resumed["toolwatch-resume-lost"])
                    read = [named(await again.read()) for _ in range(3)]
                    proxy.cut()  # the server finds the old connection gone (its ping)
                    await asyncio.wait_for(h.broker.wait_for_subscribers(1), timeout=10)
                    at_leave = h.registry.get_sample_value(DROPPED)
                    h.broker.close()
                    assert await again.read() == grpc.aio.EOF
        return told, read, at_leave, h.registry.get_sample_value(DROPPED)

    told, read, at_leave, at_shutdown = asyncio.run(scenario())
    assert told == ("same", "0")
    assert read == ["f1", "f2", "f3"]  # the client was sent all it was owed
    assert at_leave == 0
    assert at_shutdown == 0  # was 3: the old subscription's f1..f3, kept under its token
