"""Whose held findings a resume claims: what a subscriber leaves undelivered and still held is
kept for it as a departed subscriber (``_Departed``), counted lost at shutdown unless it
resumes; each subscription's token (initial metadata ``toolwatch-resume-token``), sent back
in ``StreamCursor.token``, says which one a resume is.

Was: a resume claimed the departed subscriber whose held findings start closest after its
cursor (``FindingsBroker._resumes``), and with two clients of one filter that was often the
other one. Then the findings held for the client that resumed were counted lost at shutdown
though it was sent them, and those held for the other, which never came back, were never
counted.
Now: a resume with a token claims the departed subscriber of that token and no other; one
whose token names none claims nothing; one without a token (a client older than tokens) is
still guessed.

Two clients on one server, both unfiltered. B resumed from the stream's start (its replay:
f1, f2), read them, and stopped reading; A subscribed fresh (its cursor: 2) and read nothing.
f3, f4 are published; B's connection drops: f3, f4 are held for it (B's ``_Departed``:
3..4). f5..f9 are published (``replay_size`` 4: f3..f5 let go); A's connection drops: f3..f5
are counted as it leaves, f6..f9 held for it (A's: 6..9). A resumes after 2: it is told of
f3..f5 lost and sent f6..f9, which it reads. B never comes back; the server shuts down.
What each lost: A f3, f4, f5 (counted as it left); B f3, f4 (held for it, never resumed:
counted at shutdown). 5. (Findings are 70 KB, larger than the 64 KiB HTTP/2 window the
clients keep, so none is written whole to a client that does not read, as in
tests/integration/test_stream_replay_losses.py.)
"""

from __future__ import annotations

import asyncio
import io
import json
import secrets
import threading
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.integration.stream_resume_support import Lines, Waits, end_tail, in_thread, proxied
from tests.integration.stream_support import (
    DROPPED,
    NO_BDP,
    findings,
    make_finding,
    make_trace,
    serve,
)
from toolwatch._proto.toolwatch.v1 import findings_pb2, findings_pb2_grpc
from toolwatch.model_evaluation import Finding
from toolwatch.sinks.stream.protocol import SUPERSEDED
from toolwatch.tail import run_tail
from toolwatch.tail_exits import EXIT_INTERRUPTED


def request_after(stream_id: str, after: int, token: str = "") -> findings_pb2.SubscribeRequest:
    cursor = findings_pb2.StreamCursor(stream_id=stream_id, after=after, token=token)
    return findings_pb2.SubscribeRequest(resume=[cursor])


def named(message: findings_pb2.Finding) -> str:
    return message.explanation.split()[0]


@pytest.mark.parametrize(
    ("resumes_as", "at_shutdown"),
    [
        # Its own: A's f3..f5 as it left, B's f3, f4 at shutdown.
        ("its own token", 5),
        # A token of no subscription here (forgotten, another server's): nothing claimed, A's
        # f6..f9 counted at shutdown as well, though A read them.
        ("an unknown token", 9),
        # No token, a client older than tokens: guessed, and the guess is B's (3..4 start
        # closer after A's cursor than A's 6..9): B's f3, f4, let go by then, counted as A
        # claims them, A's f6..f9 at shutdown. Was: 7 (B's f3, f4 never counted).
        ("no token", 9),
    ],
)
def test_a_resume_claims_the_findings_held_for_the_subscription_whose_token_it_sends(
    resumes_as: str, at_shutdown: int
) -> None:
    """Was (a resume of A with its token, then none): 7, A's f6..f9 counted at shutdown
    and B's f3, f4 never. Now: 5."""

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
                token = {
                    "its own token": a_metadata["toolwatch-resume-token"],
                    "an unknown token": secrets.token_hex(16),
                    "no token": "",
                }[resumes_as]
                h.broker.publish(make_trace(), findings(3, 4))
                b.cancel()
                await asyncio.wait_for(h.broker.wait_for_subscribers(1), timeout=10)
                h.broker.publish(make_trace(), findings(5, 9))
                a.cancel()
                await asyncio.wait_for(h.broker.wait_for_subscribers(0), timeout=10)
                at_leave = h.registry.get_sample_value(DROPPED)
                again = a_stub.Subscribe(request_after(stream_id, 2, token))
                lost = dict(await again.initial_metadata())["toolwatch-resume-lost"]
                a_read = [named(await again.read()) for _ in range(4)]
                h.broker.close()
                assert await again.read() == grpc.aio.EOF
        return b_read, at_leave, lost, a_read, h.registry.get_sample_value(DROPPED)

    b_read, at_leave, lost, a_read, counted = asyncio.run(scenario())
    assert (b_read, at_leave, lost, a_read) == (
        ["f1", "f2"],
        3,  # A's f3, f4, f5, let go before it left
        "3",  # told to A as it resumes, whatever it claims
        ["f6", "f7", "f8", "f9"],  # A read all that was held for it
    )
    assert counted == at_shutdown


class StalledLines(Lines):
    """tail's output, whose first write waits until ``go``: a tail that stops reading the
    stream as it prints its first finding."""

    def __init__(self) -> None:
        super().__init__()
        self.writing = threading.Event()
        self._go = threading.Event()

    def write(self, text: str) -> int:
        self.writing.set()
        assert self._go.wait(10)
        return super().write(text)

    def go(self) -> None:
        self._go.set()


def _larger(first: int, last: int) -> list[Finding]:
    """Findings of 300 KB: far past tail's 64 KiB receive window and what gRPC grants past it
    for a message being read, so one is never written whole to a tail that stopped reading.
    (With ``findings``' 70 KB, the credit left after a finding read let the next one through
    now and then: counted written, then lost with the connection, 1 run in 5.)"""
    return [make_finding(explanation=f"f{i} " + "x" * 300_000) for i in range(first, last + 1)]


def test_tail_keeps_its_token_with_its_cursor_and_resumes_as_its_own_subscription(
    tmp_path: Path,
) -> None:
    """``toolwatch tail --reconnect --cursor-file`` (A) and another client (B) of the same
    filter. A stops reading as it prints f1 (cursor 1); B subscribes, f2, f3 are published
    and B leaves without reading them (B's: 2..3). f4..f9 are published (``replay_size`` 4)
    and A's connection is cut: f2..f5 are counted as it leaves, f6..f9 held for it. A
    resumes after 1, is told of 4 it missed, and prints f6..f9; B never comes back.
    Was: A resumed by its cursor alone, and the guess took B's 2..3 (they start closer after
    1 than A's 6..9): at shutdown A's f6..f9 were counted, B's f2, f3 not (8).
    Now: tail keeps each subscription's token with its cursor (in the file, before printing
    a finding) and sends it back: A's resume claims A's f6..f9, and B's f2, f3 are counted at
    shutdown (6)."""
    out, err, waits = StalledLines(), io.StringIO(), Waits()
    cursor_file = tmp_path / "tail.cursor"

    async def scenario() -> tuple[int, str, float | None, float | None]:
        async with serve(replay_size=4) as h, proxied(h) as proxy:
            target = f"127.0.0.1:{proxy.port}"
            tail = asyncio.create_task(
                asyncio.to_thread(
                    run_tail,
                    target,
                    out=out,
                    err=err,
                    reconnect=True,
                    cursor_file=cursor_file,
                    sleep=waits,
                )
            )
            await asyncio.wait_for(h.broker.wait_for_subscribers(1), timeout=10)
            (a,) = h.broker.subscriptions
            h.broker.publish(make_trace(), _larger(1, 1))
            assert await asyncio.to_thread(out.writing.wait, 10)  # A stuck printing f1
            stream_id = h.broker.stream_id
            assert json.loads(cursor_file.read_text())["tokens"] == {stream_id: a.token}
            async with grpc.aio.insecure_channel(h.target, options=NO_BDP) as channel:
                stub = findings_pb2_grpc.FindingsServiceStub(channel)  # type: ignore[no-untyped-call]
                b = stub.Subscribe(findings_pb2.SubscribeRequest(missed_after=True))  # as tail
                await b.initial_metadata()
                h.broker.publish(make_trace(), _larger(2, 3))
                b.cancel()
                await asyncio.wait_for(h.broker.wait_for_subscribers(1), timeout=10)
            h.broker.publish(make_trace(), _larger(4, 9))
            proxy.cut()
            await asyncio.wait_for(h.broker.wait_for_subscribers(0), timeout=10)
            at_leave = h.registry.get_sample_value(DROPPED)
            out.go()
            await in_thread(waits.waiting)  # tail saw the connection go
            waits.go()
            assert await asyncio.to_thread(out.wait_for, 5)
            (again,) = h.broker.subscriptions
            code = await end_tail(h.broker, waits, tail)
            kept = json.loads(cursor_file.read_text())
            assert kept == {"streams": {stream_id: 9}, "tokens": {stream_id: again.token}}
        return code, target, at_leave, h.registry.get_sample_value(DROPPED)

    code, target, at_leave, at_shutdown = asyncio.run(scenario())
    assert code == EXIT_INTERRUPTED
    printed = [line.rpartition(" — ")[2].split()[0] for line in out.getvalue().splitlines()]
    assert printed == ["f1", "f6", "f7", "f8", "f9"]
    assert err.getvalue().splitlines()[1] == (
        f"toolwatch tail: reconnected to {target}, resuming where it left off; up to 4 findings"
        " that pass the filter were published since and are no longer held by the server"
        " (output.stream_replay_size): missed (its findings log has them)"
    )
    assert (at_leave, at_shutdown) == (4, 6)  # A's f2..f5; then B's f2, f3


def test_a_stream_superseded_while_its_client_still_reads_ends_aborted() -> None:
    """Two clients resuming with one token (a cursor file copied to a second tail): the
    second resume supersedes the first's subscription, still open and read. The first's
    stream ends with nothing lost (it had read all it was sent); the second, which keeps the
    token, gets what comes next. Nothing is counted.
    Was: the first ended OK, as at a shutdown, which its client could not tell from one.
    Now: ABORTED, ``SUPERSEDED``."""

    async def scenario() -> tuple[list[str], bool, tuple[Any, str], list[str], float | None]:
        async with serve(replay_size=10) as h, grpc.aio.insecure_channel(h.target) as channel:
            stub = findings_pb2_grpc.FindingsServiceStub(channel)  # type: ignore[no-untyped-call]
            first = stub.Subscribe(findings_pb2.SubscribeRequest())
            token = dict(await first.initial_metadata())["toolwatch-resume-token"]
            h.broker.publish(make_trace(), [make_finding(explanation="f1")])
            first_read = [named(await first.read())]
            second = stub.Subscribe(request_after(h.broker.stream_id, 1, token))
            kept = dict(await second.initial_metadata())["toolwatch-resume-token"]
            with pytest.raises(grpc.aio.AioRpcError):
                await first.read()
            h.broker.publish(make_trace(), [make_finding(explanation="f2")])
            second_read = [named(await second.read())]
            h.broker.close()
            assert await second.read() == grpc.aio.EOF
            ended = await first.code(), await first.details()
            counted = h.registry.get_sample_value(DROPPED)
            return first_read, kept == token, ended, second_read, counted

    ended = (grpc.StatusCode.ABORTED, SUPERSEDED)
    assert asyncio.run(scenario()) == (["f1"], True, ended, ["f2"], 0)
