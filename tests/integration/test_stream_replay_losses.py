"""What a resumed subscriber loses while its replay is behind: counted in
``toolwatch_stream_dropped_findings_total`` when it leaves and at shutdown, as a fresh
subscriber's queue is, and told by ``toolwatch tail`` as the replay's
(``output.stream_replay_size``), not the queue's.

A subscriber that resumes (``toolwatch tail --reconnect`` after a dropped connection, or a
run started with ``--cursor-file``) is sent the held findings after its cursor by a
``_Replay`` that reads them from the broker as it goes; every finding published for it
meanwhile joins the replay (``Subscription.offer``), not its queue, so what bounds it is
``output.stream_replay_size``, whatever ``output.stream_queue_size`` is. A client that stops
reading mid-replay (a stalled terminal, ``kill -STOP``, a pager) is never read past: what it
had still to replay is counted when it leaves or when the server shuts down
(``FindingsBroker.unsubscribe``, ``_Replay.rest``).

What the server has written into the client's HTTP/2 window is beyond its count
(docs/output-formats.md). The stuck-client tests make that exactly nothing: each finding here is
larger than the 64 KiB window the client keeps (``grpc.http2.bdp_probe: 0``, as tail sets), so
no finding is ever wholly written, and what the client lost is every finding after its cursor.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from tests.integration.conftest import RunningServer
from tests.integration.stream_support import (
    DROPPED,
    NO_BDP,
    findings,
    make_finding,
    make_trace,
    serve,
)
from toolwatch._proto.toolwatch.v1 import findings_pb2, findings_pb2_grpc
from toolwatch.model import Category, Severity
from toolwatch.sinks.stream.broker import FindingsBroker
from toolwatch.tail import run_tail


def resume_from_start(stream_id: str) -> findings_pb2.SubscribeRequest:
    cursor = findings_pb2.StreamCursor(stream_id=stream_id, after=0)
    return findings_pb2.SubscribeRequest(resume=[cursor])


def test_what_a_client_stuck_in_its_replay_lost_is_counted_when_it_leaves() -> None:
    """A client resumes from the stream's start (200 held, ``replay_size`` 200) and reads
    nothing; 1,000 more findings are published, so the broker lets go of f1..f1000 before
    its replay read them; then the client goes away. f1..f1000 are lost to it and no longer
    held: counted as it leaves. f1001..f1200, held for it, are lost when the server shuts
    down without its having resumed: counted then.
    Was: 1 and 1 (only f1, the finding being written when it left): ``unsubscribe`` dropped
    the replay uncounted and remembered none of it as held for the client.
    Now: 1,000 as it leaves and 1,200 at the shutdown."""

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
    the last scrape. ``fresh``: the client subscribed before they were published (queued),
    the control. ``resumed``: it resumed from the stream's start after they were published
    (replayed).
    Was (``resumed``): 1, the finding being written when the grace ended.
    Now: 200, as for ``fresh``."""
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


def test_findings_let_go_before_a_replay_read_them_are_told_as_the_replay_s(
    tmp_path: Path,
) -> None:
    """tail starts with a cursor file at the start of the stream (200 held, ``replay_size``
    200, ``queue_size`` 5,000) and, as it begins its replay, a burst of 2,000 findings is
    published: the server lets go of most of them before the replay reads them. The queue
    held none of them.
    Was: "the server's queue for this subscriber was full (output.stream_queue_size)", the
    setting that changes nothing here (tail told every ``missed_before`` as the queue's).
    Now: the server says how many of ``missed_before`` its replay lost
    (``Finding.missed_from_replay``), and tail names ``output.stream_replay_size``; its first
    line says it connected, resuming where the last run left off (it said "reconnected")."""
    cursor_file = tmp_path / "tail.cursor"
    out, err = io.StringIO(), io.StringIO()

    async def scenario() -> tuple[int, int, str]:
        async with serve(replay_size=200, queue_size=5_000) as h:
            burst = [make_finding(explanation=f"f{i}") for i in range(1, 2_201)]
            h.broker.publish(make_trace(), burst[:200])
            cursor_file.write_text(json.dumps({"streams": {h.broker.stream_id: 0}}))
            tail = asyncio.create_task(
                asyncio.to_thread(run_tail, h.target, out=out, err=err, cursor_file=cursor_file)
            )
            await asyncio.wait_for(h.broker.wait_for_subscribers(1), timeout=10)
            h.broker.publish(make_trace(), burst[200:])  # one step: the replay reads none
            h.broker.close()
            code = await asyncio.wait_for(tail, timeout=30)
            return code, int(h.registry.get_sample_value(DROPPED) or 0), h.target

    code, dropped, target = asyncio.run(scenario())
    assert code == 0
    assert dropped >= 1_800  # f201..f2000 at least: let go before the replay read them
    assert out.getvalue().count("\n") == 2_200 - dropped
    told = err.getvalue().splitlines()
    assert told[0] == (
        f"toolwatch tail: connected to {target}, resuming where the last run left off"
        " (--cursor-file)"
    )
    (missed,) = [line for line in told if "missed" in line]
    assert missed == (
        f"toolwatch tail: {dropped} findings missed before the next: the server let go of"
        " them before this resumed subscription's replay read them (output.stream_replay_size)"
    )


def test_what_a_replay_lost_after_its_last_finding_is_told_as_the_stream_ends(
    tmp_path: Path,
) -> None:
    """tail, following only high and critical findings, starts with a cursor file at the
    start of the stream: 200 critical findings held (``replay_size`` 200). As its replay
    begins, 200 low findings are published and the server shuts down: the criticals its
    replay had not read are let go, and no finding that passes its filter comes after them
    to tell the loss in ``missed_before``.
    Was: counted (``toolwatch_stream_dropped_findings_total``), never told: tail printed
    what it got and "ended the stream".
    Now: the server tells it in the trailing metadata of the stream's end
    (``toolwatch-missed-after``, ``toolwatch-missed-from-replay``) and tail prints it, naming
    ``output.stream_replay_size``."""
    cursor_file = tmp_path / "tail.cursor"
    out, err = io.StringIO(), io.StringIO()

    async def scenario() -> tuple[int, int, str]:
        async with serve(replay_size=200) as h:
            h.broker.publish(make_trace(), [make_finding(explanation=f"f{i}") for i in range(200)])
            cursor_file.write_text(json.dumps({"streams": {h.broker.stream_id: 0}}))
            options = {"out": out, "err": err, "cursor_file": cursor_file}
            tail = asyncio.create_task(
                asyncio.to_thread(run_tail, h.target, min_severity="high", **options)
            )
            await asyncio.wait_for(h.broker.wait_for_subscribers(1), timeout=10)
            low = make_finding(Category.TOOL_ORDER_DRIFT, Severity.LOW, "filtered out")
            h.broker.publish(make_trace(), [low] * 200)  # one step: the replay reads none
            h.broker.close()
            code = await asyncio.wait_for(tail, timeout=30)
            return code, int(h.registry.get_sample_value(DROPPED) or 0), h.target

    code, dropped, target = asyncio.run(scenario())
    assert code == 0
    assert dropped >= 150  # most: the replay reads few, if any, before the lows come
    assert out.getvalue().count("\n") == 200 - dropped
    when = "since the last one printed" if dropped < 200 else "before this run printed any"
    assert err.getvalue().splitlines() == [
        f"toolwatch tail: connected to {target}, resuming where the last run left off"
        " (--cursor-file)",
        f"toolwatch tail: {dropped} findings missed {when}: the server let go of them before"
        " this resumed subscription's replay read them (output.stream_replay_size)",
        f"toolwatch tail: {target} ended the stream (server shutting down)",
    ]


def test_losses_told_as_the_stream_ends_before_tail_printed_any_are_told_so(
    tmp_path: Path,
) -> None:
    """tail (no ``--reconnect``), following high and critical findings, starts with a cursor
    file at the start of the stream: 3 critical findings held (``replay_size`` 3). Right
    after it subscribes, before its replay reads any, 3 low findings are published (by the
    server's token check, ``authorize``, which runs then), so the criticals are let go
    unread; the server shuts down. tail printed nothing.
    Was: "3 findings missed since the last one printed". Now: "... before this run printed
    any"."""
    cursor_file = tmp_path / "tail.cursor"
    out, err = io.StringIO(), io.StringIO()
    low = make_finding(Category.TOOL_ORDER_DRIFT, Severity.LOW, "filtered out")
    servers: list[FindingsBroker] = []

    def publish_lows(_metadata: object) -> None:
        servers[0].publish(make_trace(), [low] * 3)  # on the loop, before the first write

    async def scenario() -> tuple[int, float | None, str]:
        async with serve(replay_size=3, authorize=publish_lows) as h:
            servers.append(h.broker)
            h.broker.publish(make_trace(), [make_finding(explanation=f"f{i}") for i in (1, 2, 3)])
            cursor_file.write_text(json.dumps({"streams": {h.broker.stream_id: 0}}))
            tail = asyncio.create_task(
                asyncio.to_thread(
                    run_tail,
                    h.target,
                    min_severity="high",
                    out=out,
                    err=err,
                    cursor_file=cursor_file,
                )
            )
            await asyncio.wait_for(h.broker.wait_for_subscribers(1), timeout=10)
            h.broker.close()
            code = await asyncio.wait_for(tail, timeout=30)
            return code, h.registry.get_sample_value(DROPPED), h.target

    code, dropped, target = asyncio.run(scenario())
    assert (code, dropped, out.getvalue()) == (0, 3, "")
    assert err.getvalue().splitlines() == [
        f"toolwatch tail: connected to {target}, resuming where the last run left off"
        " (--cursor-file)",
        "toolwatch tail: 3 findings missed before this run printed any: the server let go of"
        " them before this resumed subscription's replay read them (output.stream_replay_size)",
        f"toolwatch tail: {target} ended the stream (server shutting down)",
    ]
