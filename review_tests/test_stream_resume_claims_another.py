"""Review of 0c0c70f: what a resumed client stuck in its replay had still to send is now held
for it as a departed subscriber (``_Departed``), counted at shutdown unless it resumes; but a
resume claims the departed subscriber whose held findings start closest after its cursor
(``FindingsBroker._resumes``), and with two clients of one filter that is often the other
one. Then the findings held for the client that resumed are counted lost at shutdown though
it was sent them, and those held for the other, which never came back, are never counted.

Two ``toolwatch tail`` users on one server, both unfiltered. B resumed from the stream's start
(its replay: f1, f2), read them, and stopped reading; A subscribed fresh (its cursor: 2) and
read nothing. f3, f4 are published; B's connection drops: f3, f4 are held for it (B's
``_Departed``: 3..4). f5..f9 are published (``replay_size`` 4: f3..f5 let go); A's connection
drops: f3..f5 are counted as it leaves, f6..f9 held for it (A's: 6..9). A resumes after 2: it
is told of f3..f5 lost and sent f6..f9, which it reads. B never comes back; the server shuts
down.

What each lost: A f3, f4, f5 (counted as it left); B f3, f4 (held for it, never resumed:
counted at shutdown). 5.
What is counted: 7. A's resume claimed B's departed record (3..4 start closer after A's cursor
2 than A's own 6..9), so at shutdown A's record is counted (f6..f9, which A read) and B's
f3, f4 are not.

The same wrong claim happens with a fresh B whose *queue* held f3, f4 (before this commit
too): ``_resumes`` guesses which departed subscriber resumes from sequences alone. This
commit adds a replay's rest to what it guesses among. (Findings are 70 KB, larger than the
64 KiB HTTP/2 window the clients keep, so none is written whole to a client that does not
read, as in tests/integration/test_stream_replay_losses.py.)
"""

from __future__ import annotations

import asyncio

import grpc

from tests.integration.test_stream import DROPPED, make_trace, serve
from tests.integration.test_stream_replay_losses import NO_BDP, findings
from toolwatch._proto.toolwatch.v1 import findings_pb2, findings_pb2_grpc


def request_after(stream_id: str, after: int) -> findings_pb2.SubscribeRequest:
    cursor = findings_pb2.StreamCursor(stream_id=stream_id, after=after)
    return findings_pb2.SubscribeRequest(resume=[cursor])


def named(message: findings_pb2.Finding) -> str:
    return message.explanation.split()[0]


def test_a_resume_claims_the_findings_held_for_another_client() -> None:
    async def scenario() -> tuple[list[str], float | None, str, list[str], float | None]:
        async with serve(replay_size=4) as h:
            h.broker.publish(make_trace(), findings(1, 2))
            stream_id = h.broker.stream_id
            a_channel = grpc.aio.insecure_channel(h.target, options=NO_BDP)
            b_channel = grpc.aio.insecure_channel(h.target, options=NO_BDP)
            async with a_channel, b_channel:
                b_stub = findings_pb2_grpc.FindingsServiceStub(b_channel)  # type: ignore[no-untyped-call]
                a_stub = findings_pb2_grpc.FindingsServiceStub(a_channel)  # type: ignore[no-untyped-call]
                b = b_stub.Subscribe(request_after(stream_id, 0))
                b_read = [named(await b.read()), named(await b.read())]
                a = a_stub.Subscribe(findings_pb2.SubscribeRequest())
                a_metadata = dict(await a.initial_metadata())
                assert a_metadata["toolwatch-stream-sequence"] == "2"  # A's cursor
                h.broker.publish(make_trace(), findings(3, 4))
                b.cancel()
                await asyncio.wait_for(h.broker.wait_for_subscribers(1), timeout=10)
                h.broker.publish(make_trace(), findings(5, 9))
                a.cancel()
                await asyncio.wait_for(h.broker.wait_for_subscribers(0), timeout=10)
                at_leave = h.registry.get_sample_value(DROPPED)
                again = a_stub.Subscribe(request_after(stream_id, 2))
                lost = dict(await again.initial_metadata())["toolwatch-resume-lost"]
                a_read = [named(await again.read()) for _ in range(4)]
                h.broker.close()
                assert await again.read() == grpc.aio.EOF
        return b_read, at_leave, lost, a_read, h.registry.get_sample_value(DROPPED)

    b_read, at_leave, lost, a_read, at_shutdown = asyncio.run(scenario())
    assert (b_read, at_leave, lost, a_read) == (
        ["f1", "f2"],
        3,  # A's f3, f4, f5, let go before it left
        "3",
        ["f6", "f7", "f8", "f9"],  # A read all that was held for it
    )
    # B's f3, f4, held for it, never resumed. Actual: 7 (A's f6..f9, which A read).
    assert at_shutdown == 5
