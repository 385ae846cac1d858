"""Resuming the findings stream: ``toolwatch tail --reconnect`` across a connection that
drops with findings in flight, and across a server restart, through real gRPC servers on
loopback (a TCP proxy in between plays the network that drops the connection)."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import itertools
import json
import re
import signal
import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import NamedTuple

import grpc
import pytest

from tests.integration.cli_support import tail_process
from tests.integration.stream_resume_support import (
    Lines,
    Waits,
    end_tail,
    in_thread,
    proxied,
    until,
)
from tests.integration.stream_support import Harness, make_finding, make_trace, serve, subscribe
from toolwatch._proto.toolwatch.v1 import findings_pb2, findings_pb2_grpc
from toolwatch.metrics import NoopMetrics
from toolwatch.sinks.findings import Redaction
from toolwatch.sinks.stream.broker import FindingsBroker
from toolwatch.sinks.stream.protocol import stream_server_options
from toolwatch.sinks.stream.service import add_findings_service
from toolwatch.tail import run_tail
from toolwatch.tail_exits import EXIT_INTERRUPTED


def tail_in_thread(
    target: str, out: Lines, err: io.StringIO, waits: Waits, keepalive: float = 30
) -> asyncio.Task[int]:
    """``toolwatch tail --reconnect`` in a thread, waiting with ``waits``."""
    return asyncio.create_task(
        asyncio.to_thread(
            run_tail, target, out=out, err=err, reconnect=True, sleep=waits, keepalive=keepalive
        )
    )


async def findings_server_at(target: str) -> tuple[FindingsBroker, grpc.aio.Server]:
    """A bare findings-stream server started on ``target`` (a server restarted where tail
    looks for it); the caller stops it."""
    broker = FindingsBroker(NoopMetrics())
    server = grpc.aio.server()
    add_findings_service(server, broker)
    assert server.add_insecure_port(target) == int(target.rpartition(":")[2])
    await server.start()
    return broker, server


async def tail_printing(
    broker: FindingsBroker,
    target: str,
    out: Lines,
    err: io.StringIO,
    waits: Waits,
    first: str,
    keepalive: float = 30,
) -> asyncio.Task[int]:
    """``tail_in_thread`` once it has subscribed, and printed a finding ``first`` published
    then."""
    tail = tail_in_thread(target, out, err, waits, keepalive)
    await asyncio.wait_for(broker.wait_for_subscribers(1), timeout=10)
    broker.publish(make_trace(), [make_finding(explanation=first)])
    assert await asyncio.to_thread(out.wait_for, 1)
    return tail


def explanations(out: str) -> list[str]:
    return [line.rpartition(" — ")[2] for line in out.splitlines()]


def test_findings_a_dropped_connection_lost_in_flight_are_sent_again_on_reconnect() -> None:
    """The server counts what it cannot write; what it has written and the network then
    lost, only the client knows of. tail resumes after the last finding it printed, so the
    findings held in the proxy when the connection was cut come again, with the ones
    published while it was away, none twice."""
    out, err, waits = Lines(), io.StringIO(), Waits()

    async def scenario() -> tuple[int, str]:
        async with serve() as h, proxied(h) as proxy:
            target = f"127.0.0.1:{proxy.port}"
            tail = await tail_printing(h.broker, target, out, err, waits, "f1")
            proxy.hold()
            (subscription,) = h.broker.subscriptions
            h.broker.publish(make_trace(), [make_finding(explanation=f"f{i}") for i in (2, 3)])
            await until(lambda: subscription.queued == 0 and proxy.held_bytes > 0)
            proxy.cut()
            await in_thread(waits.waiting)  # tail saw the connection go
            h.broker.publish(make_trace(), [make_finding(explanation="f4")])
            waits.go()
            assert await asyncio.to_thread(out.wait_for, 4)
            h.broker.publish(make_trace(), [make_finding(explanation="f5")])
            assert await asyncio.to_thread(out.wait_for, 5)
            return await end_tail(h.broker, waits, tail), target

    code, target = asyncio.run(scenario())
    assert code == EXIT_INTERRUPTED
    assert explanations(out.getvalue()) == ["f1", "f2", "f3", "f4", "f5"]
    lost, resumed, ended = err.getvalue().splitlines()
    assert lost.startswith(f"toolwatch tail: lost the connection to {target}: UNAVAILABLE")
    assert lost.endswith("; reconnecting")
    assert resumed == (f"toolwatch tail: reconnected to {target}, resuming where it left off")
    assert (
        ended == f"toolwatch tail: {target} ended the stream (server shutting down); reconnecting"
    )
    assert waits.waited == [0.5, 0.5]  # the wait starts again once reconnected


def test_a_connection_gone_silent_is_found_by_keepalive_on_both_ends() -> None:
    """A connection can go silent without a reset (a NAT or proxy that forgot it): the
    server's writes succeed and tail, which only reads, would wait forever. tail's keepalive
    ping goes unanswered, it drops the connection and resumes on a new one, and the finding
    the silent connection swallowed comes again. The server's own ping ends the silent
    subscription, which would otherwise hold a subscriber slot for hours. (Pings every
    second here, as ``stream_server_options(1)`` allows; every 30 s in ``toolwatch tail``.
    Without keepalive tail never prints f2, nor does the server let the subscription go.)"""
    out, err, waits = Lines(), io.StringIO(), Waits()

    async def scenario() -> tuple[int, str, int]:
        async with serve(options=stream_server_options(1)) as h, proxied(h) as proxy:
            target = f"127.0.0.1:{proxy.port}"
            tail = await tail_printing(h.broker, target, out, err, waits, "f1", keepalive=1)
            proxy.silence()
            (silent,) = h.broker.subscriptions
            h.broker.publish(make_trace(), [make_finding(explanation="f2")])
            await until(lambda: silent.queued == 0)  # written into the silent connection
            await in_thread(waits.waiting)  # tail found it silent
            waits.go()
            assert await asyncio.to_thread(out.wait_for, 2), (out.getvalue(), err.getvalue())
            h.broker.publish(make_trace(), [make_finding(explanation="f3")])
            assert await asyncio.to_thread(out.wait_for, 3)
            await until(lambda: silent not in h.broker.subscriptions)  # the server's ping
            assert h.broker.subscriber_count == 1
            return await end_tail(h.broker, waits, tail), target, proxy.connections

    code, target, connections = asyncio.run(scenario())
    assert code == EXIT_INTERRUPTED
    assert explanations(out.getvalue()) == ["f1", "f2", "f3"]
    assert connections == 2
    lost, resumed, _ended = err.getvalue().splitlines()
    assert lost.startswith(f"toolwatch tail: lost the connection to {target}: UNAVAILABLE")
    assert resumed == f"toolwatch tail: reconnected to {target}, resuming where it left off"
    assert waits.waited == [0.5, 0.5]


def test_an_idle_stream_with_keepalive_stays_connected() -> None:
    """Both ends ping an idle stream (every second here, as in the test above), and neither
    takes the other's pings for abuse: after six seconds without a finding, the
    subscription is the same one, and tail prints its next finding."""
    out, err, waits = Lines(), io.StringIO(), Waits()

    async def scenario() -> tuple[int, str]:
        async with serve(options=stream_server_options(1)) as h:
            tail = tail_in_thread(h.target, out, err, waits, keepalive=1)
            await asyncio.wait_for(h.broker.wait_for_subscribers(1), timeout=10)
            (subscription,) = h.broker.subscriptions
            # Real time, for gRPC's timers: by default gRPC takes a client's third ping
            # within five minutes of the last, with no data between, for abuse, and ends the
            # connection (about 4.5 s after subscribing here).
            await asyncio.sleep(6)
            assert h.broker.subscriptions == (subscription,)
            h.broker.publish(make_trace(), [make_finding(explanation="f1")])
            assert await asyncio.to_thread(out.wait_for, 1)
            return await end_tail(h.broker, waits, tail), h.target

    code, target = asyncio.run(scenario())
    assert code == EXIT_INTERRUPTED
    assert explanations(out.getvalue()) == ["f1"]
    # Never lost before the server ended the stream.
    assert err.getvalue() == (
        f"toolwatch tail: {target} ended the stream (server shutting down); reconnecting\n"
    )


def test_tail_follows_a_restarted_server_and_gets_what_it_published_before_reconnect() -> None:
    out, err, waits = Lines(), io.StringIO(), Waits()

    async def scenario() -> tuple[int, str]:
        async with serve() as first:
            target = first.target
            tail = tail_in_thread(target, out, err, waits)
            await asyncio.wait_for(first.broker.wait_for_subscribers(1), timeout=10)
            first.broker.publish(make_trace(), [make_finding(explanation="f1")])
            first.broker.close()  # a clean shutdown: the stream ends after f1
            await in_thread(waits.waiting)
        waits.go()  # tail finds no server, and waits again
        await in_thread(waits.waiting)
        broker, server = await findings_server_at(target)
        try:
            broker.publish(make_trace(), [make_finding(explanation="f2")])  # before tail is back
            waits.go()
            await asyncio.wait_for(broker.wait_for_subscribers(1), timeout=10)
            broker.publish(make_trace(), [make_finding(explanation="f3")])
            assert await asyncio.to_thread(out.wait_for, 3), (out.getvalue(), err.getvalue())
            broker.close()
            await in_thread(waits.waiting)
            waits.end()
            return await asyncio.wait_for(tail, timeout=10), target
        finally:
            await server.stop(None)

    code, target = asyncio.run(scenario())
    assert code == EXIT_INTERRUPTED
    assert explanations(out.getvalue()) == ["f1", "f2", "f3"]
    # The outage is told once: not the attempt that found no server, nor its hint about TLS.
    ended, resumed, ended_again = err.getvalue().splitlines()
    assert (
        ended
        == ended_again
        == (f"toolwatch tail: {target} ended the stream (server shutting down); reconnecting")
    )
    # The first server ended its stream cleanly: nothing of it is missing.
    assert resumed == (
        f"toolwatch tail: reconnected to {target}, a stream new to tail (the server restarted,"
        " or another one answers): what it holds is sent"
    )
    assert waits.waited == [0.5, 1, 0.5]


def test_an_outage_is_told_once_and_the_waits_grow_to_the_longest() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    attempts: list[float] = []

    def sleep(seconds: float) -> None:
        attempts.append(seconds)
        if len(attempts) == 7:
            raise KeyboardInterrupt

    err = io.StringIO()
    code = run_tail(f"127.0.0.1:{port}", err=err, reconnect=True, sleep=sleep)
    assert code == EXIT_INTERRUPTED
    assert attempts == [0.5, 1, 2, 4, 8, 10, 10]
    (said,) = err.getvalue().splitlines()
    assert said.startswith(f"toolwatch tail: cannot reach the findings stream at 127.0.0.1:{port}")
    assert said.endswith("; reconnecting")


def test_a_usage_error_ends_tail_even_when_it_reconnects() -> None:
    async def scenario() -> tuple[int, str]:
        async with serve() as h:
            err = io.StringIO()
            code = await asyncio.to_thread(
                run_tail, h.target, err=err, min_severity="urgent", reconnect=True
            )
            return code, err.getvalue()

    code, err = asyncio.run(scenario())
    assert code == 2
    assert "unknown severity 'urgent'" in err


def test_the_initial_metadata_says_where_a_subscriber_starts_and_how_a_resume_went() -> None:
    async def scenario() -> None:
        async with serve() as h, grpc.aio.insecure_channel(h.target) as channel:
            h.broker.publish(make_trace(), [make_finding(explanation=f"f{i}") for i in (1, 2)])
            fresh = subscribe(channel)
            metadata = dict(await fresh.initial_metadata())
            (subscription,) = h.broker.subscriptions
            assert metadata == {
                "toolwatch-subscribed": "1",
                "toolwatch-stream-id": h.broker.stream_id,
                "toolwatch-stream-sequence": "2",
                "toolwatch-resume-token": subscription.token,
            }
            assert re.fullmatch("[0-9a-f]{32}", subscription.token)
            fresh.cancel()
            stub = findings_pb2_grpc.FindingsServiceStub(channel)  # type: ignore[no-untyped-call]
            cursor = findings_pb2.StreamCursor(stream_id=h.broker.stream_id, after=1)
            request = findings_pb2.SubscribeRequest(resume=[cursor])
            resumed = stub.Subscribe(request)
            metadata = dict(await resumed.initial_metadata())
            assert (metadata["toolwatch-resume"], metadata["toolwatch-resume-lost"]) == (
                "same",
                "0",
            )
            # A resume without a token (a client older than tokens) gets a new one.
            assert metadata["toolwatch-resume-token"] not in ("", subscription.token)
            message = await resumed.read()
            assert (message.explanation, message.sequence) == ("f2", 2)
            resumed.cancel()
            for request, reason in [
                (
                    findings_pb2.SubscribeRequest(resume=[{"after": 1}]),
                    "resume[0] has no stream_id",
                ),
                (
                    findings_pb2.SubscribeRequest(
                        resume=[{"stream_id": h.broker.stream_id, "after": 3}]
                    ),
                    f"resume cursor 3 is past the last finding of stream {h.broker.stream_id} (2)",
                ),
            ]:
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await stub.Subscribe(request).read()
                assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert (refused.value.details() or "").startswith(reason)

    asyncio.run(scenario())


def test_a_client_that_resumes_after_a_reload_is_sent_what_the_whole_tool_name_shows() -> None:
    """Two tools named alike for longer than the 128 characters sent of a name: after a
    reload that shows a field of one, a client that resumes is sent that tool's value and
    not its twin's (the reload decided on the name as sent, and hid both)."""
    refund = "billing__" + "x" * 200 + "__issue_refund"
    twin = "billing__" + "x" * 200 + "__cancel_order"

    async def scenario() -> list[tuple[str, str, str]]:
        async with serve(redaction=Redaction(show_values=True)) as h:
            findings = [
                dataclasses.replace(make_finding(explanation=tool[-12:]), tool=tool)
                for tool in (refund, twin)
            ]
            h.broker.publish(make_trace(), findings)
            h.broker.redact_with(Redaction(show_fields=frozenset({f"{refund}.amount"})))
            async with grpc.aio.insecure_channel(h.target) as channel:
                stub = findings_pb2_grpc.FindingsServiceStub(channel)  # type: ignore[no-untyped-call]
                cursor = findings_pb2.StreamCursor(stream_id=h.broker.stream_id, after=0)
                call = stub.Subscribe(findings_pb2.SubscribeRequest(resume=[cursor]))
                sent = [await call.read() for _ in findings]
                call.cancel()
        return [(m.explanation, m.tool[-1], m.details["fields"]) for m in sent]

    assert asyncio.run(scenario()) == [
        ("issue_refund", "…", '{"order_id":"[redacted]","amount":120}'),
        ("cancel_order", "…", '{"order_id":"[redacted]","amount":"[redacted]"}'),
    ]


def test_findings_published_while_away_and_since_let_go_are_told() -> None:
    out, err, waits = Lines(), io.StringIO(), Waits()

    async def scenario() -> tuple[int, str]:
        async with serve(replay_size=3) as h, proxied(h) as proxy:
            h.broker.publish(make_trace(), [make_finding(explanation="f1")])  # before tail
            target = f"127.0.0.1:{proxy.port}"
            tail = await tail_printing(h.broker, target, out, err, waits, "f2")
            proxy.cut()
            await in_thread(waits.waiting)
            # While tail is away: f3-f7, of which the server then holds f5-f7.
            h.broker.publish(make_trace(), [make_finding(explanation=f"f{i}") for i in range(3, 8)])
            waits.go()
            assert await asyncio.to_thread(out.wait_for, 4)
            return await end_tail(h.broker, waits, tail), target

    code, target = asyncio.run(scenario())
    assert code == EXIT_INTERRUPTED
    assert explanations(out.getvalue()) == ["f2", "f5", "f6", "f7"]
    resumed = err.getvalue().splitlines()[1]
    assert resumed == (
        f"toolwatch tail: reconnected to {target}, resuming where it left off; up to 2 findings"
        " that pass the filter were published since and are no longer held by the server"
        " (output.stream_replay_size): missed (its findings log has them)"
    )


def test_after_a_crash_tail_says_where_the_lost_findings_are() -> None:
    """A server that went away without ending its stream (killed) may have published findings
    tail never got; its successor cannot send them."""
    out, err, waits = Lines(), io.StringIO(), Waits()

    async def scenario() -> str:
        async with serve() as first:
            target = first.target
            tail = await tail_printing(first.broker, target, out, err, waits, "f1")
            await first.server.stop(None)  # the connection is lost, the stream never ended
            await in_thread(waits.waiting)
        broker, server = await findings_server_at(target)
        try:
            waits.go()
            await asyncio.wait_for(broker.wait_for_subscribers(1), timeout=10)
            broker.close()
            await in_thread(waits.waiting)
            waits.end()
            assert await asyncio.wait_for(tail, timeout=10) == EXIT_INTERRUPTED
            return target
        finally:
            await server.stop(None)

    target = asyncio.run(scenario())
    lost, resumed, _ended = err.getvalue().splitlines()
    assert lost.startswith(f"toolwatch tail: lost the connection to {target}: ")
    assert resumed == (
        f"toolwatch tail: reconnected to {target}, a stream new to tail (the server restarted, or"
        " another one answers): what it holds is sent; findings the previous one published"
        " after the last one printed, if any, are in its findings log"
    )


def test_the_wait_starts_again_after_a_subscription_that_lasted() -> None:
    """A quiet subscription of an hour that drops is followed by the first wait, not by what
    the attempts before it had grown to."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        target = f"127.0.0.1:{probe.getsockname()[1]}"
    out, err, waits = Lines(), Lines(), Waits()
    hours = itertools.count(step=3600.0)  # each look at the clock is an hour later

    async def scenario() -> int:
        tail = asyncio.create_task(
            asyncio.to_thread(
                run_tail,
                target,
                out=out,
                err=err,
                reconnect=True,
                sleep=waits,
                clock=lambda: next(hours),
            )
        )
        await in_thread(waits.waiting)  # no server yet: the wait grows
        waits.go()
        await in_thread(waits.waiting)
        broker, server = await findings_server_at(target)
        waits.go()
        await asyncio.wait_for(broker.wait_for_subscribers(1), timeout=10)
        # tail has the answer's headers ("reconnected to"): its subscription began.
        assert await asyncio.to_thread(err.wait_for, 2)
        await server.stop(None)  # the connection is lost; nothing was delivered
        await in_thread(waits.waiting)
        waits.end()
        return await asyncio.wait_for(tail, timeout=10)

    assert asyncio.run(scenario()) == EXIT_INTERRUPTED
    assert waits.waited == [0.5, 1, 0.5]


def test_a_cursor_file_lets_the_next_run_resume_where_the_last_left_off(tmp_path: Path) -> None:
    """A consumer that restarts tail (a bot, a shell loop) gets what was published while
    no tail ran, while the server holds it."""
    cursor_file = tmp_path / "tail.cursor"
    first_out, second_out, err = Lines(), Lines(), io.StringIO()

    async def scenario() -> tuple[int, int, str, str]:
        async with serve() as h, proxied(h) as proxy:
            target = f"127.0.0.1:{proxy.port}"
            options = {"err": err, "cursor_file": cursor_file}
            first = asyncio.create_task(
                asyncio.to_thread(run_tail, target, out=first_out, **options)
            )
            await asyncio.wait_for(h.broker.wait_for_subscribers(1), timeout=10)
            h.broker.publish(make_trace(), [make_finding(explanation="f1")])
            assert await asyncio.to_thread(first_out.wait_for, 1)
            proxy.cut()  # without --reconnect, tail ends (exit 1)
            first_code = await asyncio.wait_for(first, timeout=10)
            h.broker.publish(make_trace(), [make_finding(explanation=f"f{i}") for i in (2, 3)])
            second = asyncio.create_task(
                asyncio.to_thread(run_tail, target, out=second_out, **options)
            )
            assert await asyncio.to_thread(second_out.wait_for, 2)
            (subscription,) = h.broker.subscriptions
            h.broker.close()
            second_code = await asyncio.wait_for(second, timeout=10)
            return first_code, second_code, h.broker.stream_id, subscription.token

    first_code, second_code, stream_id, token = asyncio.run(scenario())
    assert (first_code, second_code) == (1, 0)
    assert explanations(first_out.getvalue()) == ["f1"]
    assert explanations(second_out.getvalue()) == ["f2", "f3"]
    # And the token of the second run's subscription, which a third run resumes as.
    assert json.loads(cursor_file.read_text()) == {
        "streams": {stream_id: 3},
        "tokens": {stream_id: token},
    }


class BurstTail(NamedTuple):
    """``toolwatch tail --json --cursor-file`` run as a command, after a burst it printed."""

    process: subprocess.Popen[str]
    lines: list[str]


@asynccontextmanager
async def tail_after_a_burst(h: Harness, cursor_file: Path) -> AsyncIterator[BurstTail]:
    """Starts tail as a process on ``h``'s stream, publishes a burst of 50 findings and reads
    the 50 lines tail prints; kills tail on the way out."""
    tail = tail_process("--json", "--target", h.target, "--cursor-file", str(cursor_file))
    try:
        assert tail.stdout is not None
        await asyncio.wait_for(h.broker.wait_for_subscribers(1), timeout=30)
        burst = [make_finding(explanation=f"f{i}") for i in range(1, 51)]
        h.broker.publish(make_trace(), burst)
        yield BurstTail(tail, [await asyncio.to_thread(tail.stdout.readline) for _ in burst])
    finally:
        tail.kill()


def test_sigterm_ends_tail_with_its_cursor_file_up_to_the_last_finding_printed(
    tmp_path: Path,
) -> None:
    """A service manager stops tail with SIGTERM: it ends as on Ctrl-C, keeping the cursor
    of the last finding printed (a burst's last ones may not be in the file yet: it is
    rewritten at most ten times a second), and exits 143, as a shell reports that signal.
    The signal may come between printing the last finding and keeping its cursor: that one
    alone would be printed again."""
    cursor_file = tmp_path / "tail.cursor"

    async def scenario() -> tuple[int, list[str], str, str]:
        async with serve() as h, tail_after_a_burst(h, cursor_file) as tail:
            tail.process.send_signal(signal.SIGTERM)
            rest, err = await asyncio.to_thread(tail.process.communicate, timeout=30)
            code = tail.process.returncode
            return code, tail.lines + rest.splitlines(), err, h.broker.stream_id

    code, lines, err, stream_id = asyncio.run(scenario())
    assert (code, err) == (128 + signal.SIGTERM, "")
    assert [json.loads(line)["sequence"] for line in lines] == list(range(1, 51))
    (kept,) = json.loads(cursor_file.read_text())["streams"].items()
    assert kept in ((stream_id, 50), (stream_id, 49))


def test_a_burst_s_last_findings_reach_the_cursor_file_while_tail_waits_for_more(
    tmp_path: Path,
) -> None:
    """The file is rewritten at most ten times a second; the last findings of a burst are
    written by the timer a tenth of a second later, while tail waits for the next finding:
    a tail then killed outright (SIGKILL) prints none of them again."""
    cursor_file = tmp_path / "tail.cursor"

    def kept() -> dict[str, int]:
        with suppress(OSError, ValueError):
            streams: dict[str, int] = json.loads(cursor_file.read_text())["streams"]
            return streams
        return {}

    async def scenario() -> tuple[int, dict[str, int], str]:
        async with serve() as h, tail_after_a_burst(h, cursor_file) as tail:
            await until(lambda: kept() == {h.broker.stream_id: 50})
            tail.process.kill()
            code = await asyncio.to_thread(tail.process.wait, 30)
            return code, kept(), h.broker.stream_id

    code, streams, stream_id = asyncio.run(scenario())
    assert code == -signal.SIGKILL
    assert streams == {stream_id: 50}


def test_cursor_file_that_cannot_be_written_mid_run_is_no_traceback(tmp_path: Path) -> None:
    """User-visible harm: ``tail --reconnect --cursor-file FILE`` (docs/commands.md's bot that
    "loses nothing") dies with a Python traceback and exit 1 the first time the cursor file
    cannot be rewritten after it started: a full disk (ENOSPC), a volume remounted
    read-only, a permission change. ``_Cursor._save`` raises ``OSError`` out of
    ``_Cursor.handled`` / ``flush`` and nothing in ``run_tail`` or ``cli.main`` catches it;
    the finding being handled is printed, the stream is dropped, and a supervisor sees
    exit 1 ("could not reach its server"). docs/commands.md says ``--reconnect`` ends only on
    Ctrl-C or a usage error. Correct: tell it once on stderr (naming the file and the
    reason) and keep following the stream (retrying the rewrite), or end with a clear
    one-line message and a documented exit code; never a traceback. Here the rewrite fails
    because the file's directory was moved away, so its copy cannot be made beside it, which
    gives the same ``OSError`` path as ENOSPC (before its copies had names of their own, a
    directory took the copy's name)."""
    directory = tmp_path / "cursors"
    directory.mkdir()
    cursor_file = directory / "cursor.json"

    def kept() -> str:
        with suppress(OSError):
            return cursor_file.read_text()
        return ""

    async def scenario() -> tuple[int, list[str], str, str]:
        async with serve() as h:
            tail = tail_process(
                "--reconnect", "--target", h.target, "--cursor-file", str(cursor_file)
            )
            try:
                assert tail.stdout is not None and tail.stderr is not None
                # Subscribed: the cursor file was rewritten with the stream's id.
                await until(lambda: h.broker.stream_id in kept())
                directory.rename(tmp_path / "away")  # the next rewrite fails, as on ENOSPC
                h.broker.publish(make_trace(), [make_finding(explanation="f1")])
                lines = [await asyncio.to_thread(tail.stdout.readline)]
                told = await asyncio.to_thread(tail.stderr.readline)
                h.broker.publish(make_trace(), [make_finding(explanation="f2")])
                lines.append(await asyncio.to_thread(tail.stdout.readline))
                tail.send_signal(signal.SIGTERM)  # still following: it ends as on Ctrl-C
                rest, err = await asyncio.to_thread(tail.communicate, timeout=30)
            finally:
                tail.kill()
            return tail.returncode, lines + rest.splitlines(), told, err

    code, lines, told, err = asyncio.run(scenario())
    copy = re.escape(f"{cursor_file}.") + r"[^/]+\.partial"
    # Or the directory, when it went between the subscription's rewrite renaming its copy
    # over the file (which the test waits for) and syncing the directory (which it cannot).
    named = f"(?:{copy}|{re.escape(str(directory))})"
    assert re.fullmatch(
        re.escape(f"toolwatch tail: --cursor-file {cursor_file}: cannot rewrite it (No such file")
        + re.escape(" or directory: ")
        + named
        + re.escape(
            "); following the stream all the same and trying again: until it is rewritten, a"
            " run started now resumes from where it last was\n"
        ),
        told,
    ), told
    assert (code, err) == (128 + signal.SIGTERM, "")  # told once; no traceback
    assert explanations("".join(lines)) == ["f1", "f2"]


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        '{"streams": {"s": "x"}}',
        '{"streams": {"s": -1}}',
        "not json",
        '{"streams": []}',
        # What a SubscribeRequest cannot carry: protobuf raised ValueError as tail built it,
        # outside every handler (a traceback, exit 1; a crash loop under a service manager),
        # and the server refused an empty stream id (INVALID_ARGUMENT), not naming the file.
        '{"streams": {"0123456789abcdef": 18446744073709551616}}',
        '{"streams": {"0123456789abcdef": 1e30}}',
        '{"streams": {"0123456789abcdef": 3.0}}',
        '{"streams": {"0123456789abcdef": true}}',
        '{"streams": {"0123456789abcdef": "3"}}',
        '{"streams": {"": 3}}',
        '{"streams": {"0123456789abcdef": 3}, "tokens": {"0123456789abcdef": 7}}',
        '{"streams": {"0123456789abcdef": 3}, "tokens": ["0123456789abcdef"]}',
    ],
)
def test_a_file_that_is_no_cursor_file_is_a_usage_error(tmp_path: Path, text: str) -> None:
    cursor_file = tmp_path / "tail.cursor"
    cursor_file.write_text(text)
    err = io.StringIO()
    assert run_tail("127.0.0.1:9", err=err, cursor_file=cursor_file) == 2
    assert err.getvalue() == (
        f"toolwatch tail: --cursor-file {cursor_file}: not a tail cursor file (expected"
        ' {"streams": {"<stream id>": <sequence>}}, each sequence an integer from 0 to'
        ' 2**64-1, and optionally "tokens": {"<stream id>": "<token>"})\n'
    )
    assert cursor_file.read_text() == text  # left as it was
