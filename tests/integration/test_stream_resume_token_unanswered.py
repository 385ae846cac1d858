"""Was (review of fa0d073, each subscription a new token; a resume claims the departed
subscriber of the token it sends): a resume whose answer never reaches the client moves what
was held for it under a token the client never learns, so the client's next try, with the
only token it has, claims nothing, and those findings are counted lost at shutdown though
that next try was sent every one of them: 3 counted, the client lost none.
Now: a resumed subscription keeps the token it claimed (a token names a client across its
reconnections, not one call), so what the unanswered resume leaves held is under T1 again,
and the next try with T1 claims it: 0. A fresh subscription, or a resume whose token names
nothing here, still gets a new one.

A resume is a subscription like any other: the server pops the departed record of the token
it sends (T1), gives the new subscription a new token (T2) and sends it in the initial
metadata. When the connection drops after the server subscribed but before the client read
those headers (a flaky network, the case resuming exists for), the new subscription ends at
once and what it had still to replay is kept for a resume under T2. ``toolwatch tail`` keeps
a token only from headers it got (``_Cursor.subscribed``), so it tries again with T1, which
now names nothing. Before tokens the guess (``_guess``: the earliest record of its filter)
took the second record back; a token that stayed the client's across its resumes (the
resumed subscription keeping T1), or a record that remembers the token it was claimed by,
would too.

Shown through a real gRPC server and a TCP proxy that holds back what the server sends, then
resets the connection (tests/integration/test_stream_resume.py): a client subscribes (T1,
cursor 0) and reads nothing; f1..f3 are published (70 KB each: none is written whole into
the 64 KiB window) and the client goes away: f1..f3 are held for T1. It resumes after 0 with
T1 through the proxy, which holds back the server's answer, and the connection is reset: the
call fails (UNAVAILABLE) with no headers. It resumes again with T1: told nothing lost, it
reads f1, f2, f3. The server shuts down.
What the client lost: nothing. Counted in toolwatch_stream_dropped_findings_total: 3 (the
first resume's f1..f3, kept under T2). Should be: 0.
"""

from __future__ import annotations

import asyncio

import grpc

from tests.integration.stream_resume_support import named, proxied, request_after, subscribed, until
from tests.integration.stream_support import DROPPED, NO_BDP, findings, make_trace, serve
from toolwatch._proto.toolwatch.v1 import findings_pb2_grpc


def test_a_resume_whose_answer_was_lost_can_be_tried_again_with_the_same_token() -> None:
    async def scenario() -> tuple[
        float | None, grpc.StatusCode, list[str], tuple[str, str], list[str], float | None
    ]:
        async with serve(replay_size=10) as h, proxied(h) as proxy:
            stream_id = h.broker.stream_id
            async with grpc.aio.insecure_channel(h.target, options=NO_BDP) as channel:
                stub = findings_pb2_grpc.FindingsServiceStub(channel)  # type: ignore[no-untyped-call]
                first, token, after = await subscribed(stub)
                (subscription,) = h.broker.subscriptions
                h.broker.publish(make_trace(), findings(1, 3))
                await until(lambda: subscription.queued == 2)  # f1 being written, f2, f3 queued
                first.cancel()
                await asyncio.wait_for(h.broker.wait_for_subscribers(0), timeout=10)
                at_leave = h.registry.get_sample_value(DROPPED)  # f1..f3 held for T1

                proxy_target = f"127.0.0.1:{proxy.port}"
                async with grpc.aio.insecure_channel(proxy_target, options=NO_BDP) as lossy:
                    await asyncio.wait_for(lossy.channel_ready(), timeout=10)
                    proxy.hold()  # the server's answer to what follows never gets through
                    lossy_stub = findings_pb2_grpc.FindingsServiceStub(lossy)  # type: ignore[no-untyped-call]
                    unanswered = lossy_stub.Subscribe(request_after(stream_id, after, token))
                    await asyncio.wait_for(h.broker.wait_for_subscribers(1), timeout=10)
                    proxy.cut()  # the connection drops before the client read the headers
                    await asyncio.wait_for(h.broker.wait_for_subscribers(0), timeout=10)
                    code = await unanswered.code()
                    got = list(dict(await unanswered.initial_metadata() or ()))

                again = stub.Subscribe(request_after(stream_id, after, token))
                resumed = dict(await again.initial_metadata())
                told = (resumed["toolwatch-resume"], resumed["toolwatch-resume-lost"])
                read = [named(await again.read()) for _ in range(3)]
                h.broker.close()
                assert await again.read() == grpc.aio.EOF
        return at_leave, code, got, told, read, h.registry.get_sample_value(DROPPED)

    at_leave, code, got, told, read, at_shutdown = asyncio.run(scenario())
    assert (at_leave, code, got) == (0, grpc.StatusCode.UNAVAILABLE, [])  # no token learnt
    assert told == ("same", "0")
    assert read == ["f1", "f2", "f3"]  # the client was sent all it was owed
    assert at_shutdown == 0  # was 3: kept under the token of the unanswered resume
