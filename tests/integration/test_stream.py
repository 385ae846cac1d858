"""The findings stream and ``toolwatch tail`` through a real grpc.aio server on port 0."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import socket
import sys
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc
import pytest
from aiohttp import web

from tests.integration.conftest import RunningServer, errors_logged
from tests.integration.stream_support import (
    DROPPED,
    TRACE_ID,
    WALL_NS,
    Harness,
    make_finding,
    make_trace,
    serve,
    subscribe,
)
from toolwatch._proto.toolwatch.v1 import findings_pb2, findings_pb2_grpc
from toolwatch.model import Category, Severity
from toolwatch.sinks.findings import Redaction
from toolwatch.sinks.stream.messages import finding_message
from toolwatch.tail import run_tail


def test_a_filtered_subscriber_receives_only_matching_findings() -> None:
    async def scenario() -> None:
        async with serve() as h, grpc.aio.insecure_channel(h.target) as channel:
            call = subscribe(channel, ["dangerous_action_drift"], "high", ["refund-bot"])
            await call.initial_metadata()
            assert h.broker.subscriber_count == 1
            h.broker.publish(
                make_trace(),
                [
                    make_finding(explanation="first"),
                    make_finding(Category.TOOL_ORDER_DRIFT, explanation="other category"),
                    make_finding(severity=Severity.MEDIUM, explanation="too low"),
                    make_finding(severity=Severity.HIGH, explanation="second"),
                ],
            )
            h.broker.publish(make_trace(agent="triage"), [make_finding(explanation="other agent")])
            h.broker.close()
            received = [message async for message in call]
            assert [m.explanation for m in received] == ["first", "second"]
            assert await call.code() == grpc.StatusCode.OK
            first = received[0]
            assert (first.category, first.severity, first.agent) == (
                "DANGEROUS_ACTION_DRIFT",
                "critical",
                "refund-bot",
            )
            assert (first.trace_id, first.service, first.time_unix_nano) == (
                TRACE_ID,
                "support",
                WALL_NS,
            )
            assert first.HasField("score") and first.score == 0.0
            assert dict(first.details) == {
                "calls": "2",
                "fields": '{"order_id":"[redacted]","amount":"[redacted]"}',
            }

    asyncio.run(scenario())


def test_details_shown_by_configuration_are_rendered_as_text() -> None:
    async def scenario() -> None:
        redaction = Redaction(show_fields=frozenset({"issue_refund.amount"}))
        async with serve(redaction=redaction) as h, grpc.aio.insecure_channel(h.target) as channel:
            call = subscribe(channel)
            await call.initial_metadata()
            h.broker.publish(make_trace(), [make_finding()])
            h.broker.close()
            [message] = [m async for m in call]
            assert dict(message.details) == {
                "calls": "2",
                "fields": '{"order_id":"[redacted]","amount":120}',
            }

    asyncio.run(scenario())


def test_a_slow_subscriber_loses_findings_without_slowing_publish() -> None:
    async def scenario() -> None:
        async with serve(queue_size=1) as h, grpc.aio.insecure_channel(h.target) as channel:
            slow = subscribe(channel)  # never read until the end
            await slow.initial_metadata()
            findings = [make_finding(explanation=f"finding {i}") for i in range(1000)]
            for _ in range(5):
                # publish is a plain function: it cannot wait for a subscriber.
                assert h.broker.publish(make_trace(), findings) is None
            assert h.registry.get_sample_value(DROPPED) == 5 * 1000 - 1
            h.broker.close()
            assert [m.explanation async for m in slow] == ["finding 0"]
            assert await slow.code() == grpc.StatusCode.OK

    asyncio.run(scenario())


def test_closing_the_broker_ends_every_stream_and_refuses_new_ones() -> None:
    async def scenario() -> None:
        async with serve() as h, grpc.aio.insecure_channel(h.target) as channel:
            calls = [subscribe(channel), subscribe(channel, ["TOOL_ORDER_DRIFT"])]
            for call in calls:
                await call.initial_metadata()
            h.broker.close()
            for call in calls:
                assert [m async for m in call] == []
                assert await call.code() == grpc.StatusCode.OK
            late = subscribe(channel)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await late.read()
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            assert h.broker.subscriber_count == 0

    asyncio.run(scenario())


def test_a_client_that_goes_away_is_unsubscribed() -> None:
    async def scenario() -> None:
        async with serve() as h, grpc.aio.insecure_channel(h.target) as channel:
            call = subscribe(channel)
            await call.initial_metadata()
            assert h.broker.subscriber_count == 1
            call.cancel()
            await asyncio.wait_for(h.broker.wait_for_subscribers(0), timeout=10)
            assert h.broker.subscriber_count == 0

    asyncio.run(scenario())


_READING_CLIENT = """
import sys, grpc
from toolwatch._proto.toolwatch.v1 import findings_pb2, findings_pb2_grpc
channel = grpc.insecure_channel(sys.argv[1])
stream = findings_pb2_grpc.FindingsServiceStub(channel).Subscribe(findings_pb2.SubscribeRequest())
next(stream)
print("read one", flush=True)
for _ in stream:  # reads on until it is killed
    pass
"""


def test_a_subscriber_killed_mid_stream_ends_it_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Killed while findings are being written to it: a write fails (grpc-aio logged that as
    a servicer error with a traceback when the findings were yielded) or the call is
    cancelled; either way the stream ends without an error and the subscription goes."""

    async def scenario() -> None:
        async with serve() as h:
            client = await asyncio.create_subprocess_exec(
                sys.executable, "-c", _READING_CLIENT, h.target, stdout=asyncio.subprocess.PIPE
            )
            assert client.stdout is not None
            await asyncio.wait_for(h.broker.wait_for_subscribers(1), timeout=30)
            h.broker.publish(make_trace(), [make_finding()])
            assert await asyncio.wait_for(client.stdout.readline(), timeout=30) == b"read one\n"
            big = make_finding(explanation="x" * 20_000)
            h.broker.publish(make_trace(), [big] * 100)
            client.kill()
            while h.broker.subscriber_count:  # keep writing until the server sees it gone
                h.broker.publish(make_trace(), [big] * 10)
                await asyncio.sleep(0)
            await client.wait()

    with caplog.at_level(logging.DEBUG):
        asyncio.run(scenario())
    assert errors_logged(caplog) == []


@pytest.mark.parametrize(
    ("request_fields", "message"),
    [
        ({"categories": ["NOT_A_CATEGORY"]}, "unknown category 'NOT_A_CATEGORY'"),
        ({"min_severity": "apocalyptic"}, "unknown severity 'apocalyptic'"),
    ],
)
def test_an_unknown_filter_value_is_invalid_argument(
    request_fields: dict[str, object], message: str
) -> None:
    async def scenario() -> None:
        async with serve() as h, grpc.aio.insecure_channel(h.target) as channel:
            stub = findings_pb2_grpc.FindingsServiceStub(channel)
            call = stub.Subscribe(findings_pb2.SubscribeRequest(**request_fields))
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await call.read()
            assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert message in (error.value.details() or "")
            assert h.broker.subscriber_count == 0

    asyncio.run(scenario())


@dataclass
class TailRun:
    code: int
    out: str
    err: str


async def tail_while(
    h: Harness, act: Callable[[Harness], Awaitable[None]], **options: object
) -> TailRun:
    """Runs ``toolwatch tail`` against ``h`` in a thread, does ``act`` once it has subscribed,
    and returns what tail printed."""
    out = options.pop("out", None) or io.StringIO()
    err = io.StringIO()
    tail = asyncio.create_task(asyncio.to_thread(run_tail, h.target, out=out, err=err, **options))
    await asyncio.wait_for(h.broker.wait_for_subscribers(1), timeout=10)
    await act(h)
    code = await asyncio.wait_for(tail, timeout=10)
    return TailRun(code, out.getvalue(), err.getvalue())


async def publish_and_close(h: Harness) -> None:
    h.broker.publish(
        make_trace(),
        [make_finding(), make_finding(Category.TOOL_ORDER_DRIFT, Severity.LOW, "filtered out")],
    )
    h.broker.close()


def test_tail_prints_one_readable_line_per_finding() -> None:
    async def scenario() -> TailRun:
        async with serve() as h:
            return await tail_while(h, publish_and_close, min_severity="high")

    result = asyncio.run(scenario())
    assert result.code == 0
    assert result.out == (
        "2026-11-29T20:31:02Z CRITICAL DANGEROUS_ACTION_DRIFT agent=refund-bot tool=issue_refund "
        f"trace={TRACE_ID} span=b7ad6b7169203331 — issue_refund was called without an earlier"
        " lookup_order\n"
    )
    assert "ended the stream" in result.err


def test_tail_colours_by_severity_when_asked() -> None:
    async def scenario() -> TailRun:
        async with serve() as h:
            return await tail_while(h, publish_and_close, min_severity="high", color=True)

    result = asyncio.run(scenario())
    assert "\x1b[1;31mCRITICAL DANGEROUS_ACTION_DRIFT\x1b[0m agent=refund-bot" in result.out


def test_tail_json_prints_the_findings_log_object() -> None:
    async def scenario() -> TailRun:
        async with serve() as h:
            return await tail_while(h, publish_and_close, as_json=True, agents=["refund-bot"])

    result = asyncio.run(scenario())
    lines = [json.loads(line) for line in result.out.splitlines()]
    assert [line["explanation"] for line in lines] == [
        "issue_refund was called without an earlier lookup_order",
        "filtered out",
    ]
    assert lines[0] == {
        "category": "DANGEROUS_ACTION_DRIFT",
        "severity": "critical",
        "evaluator": "safety",
        "reference": "policy",
        "case_id": None,
        "source_trace_id": None,
        "pair_key": None,
        "score": 0.0,
        "tool": "issue_refund",
        "field": None,
        "agent": "refund-bot",
        "explanation": "issue_refund was called without an earlier lookup_order",
        "trace_id": TRACE_ID,
        "span_id": "b7ad6b7169203331",
        "service": "support",
        "traffic": "live",
        "incomplete_reason": None,
        "timestamp": "2026-11-29T20:31:02.123Z",
        "details": {"calls": "2", "fields": '{"order_id":"[redacted]","amount":"[redacted]"}'},
        "stream": lines[0]["stream"],
        "sequence": 1,
    }
    assert (lines[1]["stream"], lines[1]["sequence"]) == (lines[0]["stream"], 2)
    assert len(lines[0]["stream"]) == 16


class SignallingOut(io.StringIO):
    """An output that tells another thread when tail has printed something."""

    def __init__(self) -> None:
        super().__init__()
        self.written = threading.Event()

    def write(self, text: str) -> int:
        count = super().write(text)
        self.written.set()
        return count


def test_tail_reports_a_server_that_goes_away() -> None:
    out = SignallingOut()

    async def stop_server(h: Harness) -> None:
        h.broker.publish(make_trace(), [make_finding()])
        assert await asyncio.to_thread(out.written.wait, 10)  # tail is connected and reading
        await h.server.stop(None)

    async def scenario() -> TailRun:
        async with serve() as h:
            return await tail_while(h, stop_server, out=out)

    result = asyncio.run(scenario())
    assert result.code == 1
    assert result.out.count("\n") == 1
    assert "lost the connection to 127.0.0.1:" in result.err


def test_tail_reports_an_unreachable_server() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out, err = io.StringIO(), io.StringIO()
    code = run_tail(f"127.0.0.1:{port}", out=out, err=err)
    assert code == 1
    assert out.getvalue() == ""
    said = err.getvalue()
    assert f"cannot reach the findings stream at 127.0.0.1:{port}" in said
    # Nothing listens: the hint is about where serve is, not about TLS.
    assert said.endswith(
        "(nothing listens there: is serve running, and --target its listen.stream address?)\n"
    )


def test_a_subscriber_beyond_the_cap_is_refused_and_tail_says_why() -> None:
    async def scenario() -> tuple[grpc.StatusCode, str, int, str]:
        async with serve(max_subscribers=1) as h, grpc.aio.insecure_channel(h.target) as channel:
            first = subscribe(channel)
            await first.initial_metadata()
            second = subscribe(channel)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await asyncio.wait_for(second.read(), timeout=10)
            out, err = io.StringIO(), io.StringIO()
            code = await asyncio.to_thread(run_tail, h.target, out=out, err=err)
            assert h.broker.subscriber_count == 1  # the first is still served
            first.cancel()
            return refused.value.code(), refused.value.details() or "", code, err.getvalue()

    status, details, code, err = asyncio.run(scenario())
    assert status == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert details.startswith("the findings stream already has 1 subscribers")
    assert code == 1
    assert err.startswith("toolwatch tail: 127.0.0.1:")
    assert "refused the subscription: the findings stream already has 1 subscribers" in err


def test_tail_reports_a_rejected_filter_as_a_usage_error() -> None:
    async def scenario() -> tuple[int, str]:
        async with serve() as h:
            out, err = io.StringIO(), io.StringIO()
            code = await asyncio.to_thread(
                run_tail, h.target, categories=["NOPE"], out=out, err=err
            )
            return code, err.getvalue()

    code, err = asyncio.run(scenario())
    assert code == 2
    assert "unknown category 'NOPE'" in err


def test_the_server_takes_its_subscriber_cap_from_the_configuration(
    start_server: Callable[..., RunningServer],
) -> None:
    server = start_server(output__stream_max_subscribers=1)

    async def scenario() -> grpc.StatusCode:
        async with grpc.aio.insecure_channel(server.address("stream")) as channel:
            first = subscribe(channel)
            await first.initial_metadata()
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await asyncio.wait_for(subscribe(channel).read(), timeout=10)
            first.cancel()
            return refused.value.code()

    assert asyncio.run(scenario()) == grpc.StatusCode.RESOURCE_EXHAUSTED


class CountingOut(io.StringIO):
    """An output another thread can wait on until tail has printed ``n`` lines."""

    def __init__(self) -> None:
        super().__init__()
        self._printed = threading.Condition()

    def write(self, text: str) -> int:
        with self._printed:
            count = super().write(text)
            self._printed.notify_all()
        return count

    def wait_for_lines(self, n: int, timeout: float = 10) -> bool:
        with self._printed:
            return self._printed.wait_for(lambda: self.getvalue().count("\n") >= n, timeout)


def test_a_subscriber_is_told_each_finding_it_missed_once_and_the_others_are_not() -> None:
    def told(message: findings_pb2.Finding) -> tuple[int, int]:
        return message.missed_before, message.missed_after

    async def scenario() -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        async with serve(queue_size=2) as h, grpc.aio.insecure_channel(h.target) as channel:
            burst = subscribe(channel, missed_after=True)
            orders = subscribe(channel, ["TOOL_ORDER_DRIFT"])
            await burst.initial_metadata()
            await orders.initial_metadata()
            findings = [make_finding(explanation=f"finding {i}") for i in range(10)]
            h.broker.publish(make_trace(), findings)  # two queued, eight lost to `burst`
            seen = [told(await burst.read()) for _ in range(2)]
            later = make_finding(Category.TOOL_ORDER_DRIFT, Severity.LOW, "after the burst")
            h.broker.publish(make_trace(), [later])
            seen.append(told(await burst.read()))
            h.broker.publish(make_trace(), findings[:5])  # two queued, three lost
            seen += [told(await burst.read()) for _ in range(2)]
            other = [told(await orders.read())]
            assert h.registry.get_sample_value(DROPPED) == 11
            return seen, other

    seen, other = asyncio.run(scenario())
    assert seen == [(0, 0), (0, 8), (0, 0), (0, 0), (0, 3)]
    assert other == [(0, 0)]  # the message shared with `orders` was not changed for `burst`


def test_tail_says_how_many_findings_it_missed() -> None:
    out = CountingOut()

    async def burst_then_one(h: Harness) -> None:
        h.broker.publish(make_trace(), [make_finding(explanation=f"f{i}") for i in range(10)])
        assert await asyncio.to_thread(out.wait_for_lines, 2)  # the two queued ones
        h.broker.publish(make_trace(), [make_finding(explanation="after")])
        assert await asyncio.to_thread(out.wait_for_lines, 3)
        h.broker.close()

    async def scenario() -> TailRun:
        async with serve(queue_size=2) as h:
            return await tail_while(h, burst_then_one, out=out)

    result = asyncio.run(scenario())
    assert result.code == 0
    assert result.out.count("\n") == 3
    assert result.err.startswith(
        "toolwatch tail: 8 findings missed since the last one printed: the server's queue for"
        " this subscriber was full (output.stream_queue_size)\n"
    )


class StalledOut(io.StringIO):
    """An output whose writes wait until ``resume``: a tail that stops reading the stream."""

    def __init__(self) -> None:
        super().__init__()
        self._resumed = threading.Event()

    def write(self, text: str) -> int:
        self._resumed.wait()
        return super().write(text)

    def resume(self) -> None:
        self._resumed.set()


def test_a_tail_that_stops_reading_holds_one_window_and_every_loss_is_counted_and_told() -> None:
    """gRPC clients grow their receive window to megabytes (BDP probing) unless told not to:
    a stalled tail would then hold thousands of findings the server cannot count if the
    connection drops. tail keeps HTTP/2's 64 KiB, so the server's queue fills instead.
    Real time: a batch still queued after 1 s is taken as gRPC taking no more. A slow machine
    only stops earlier, with fewer findings written: every assertion still holds."""
    out = StalledOut()
    findings = [make_finding(explanation=f"f{i} " + "x" * 1000) for i in range(2_300)]
    size = finding_message(make_trace(), findings[0], Redaction(), WALL_NS).ByteSize()
    seen: dict[str, int] = {}

    async def stall(h: Harness) -> None:
        (subscription,) = h.broker.subscriptions
        loop = asyncio.get_running_loop()
        published = 0
        while published < 2_000:  # batches until gRPC takes no more: the queue stops draining
            h.broker.publish(make_trace(), findings[published : published + 20])
            published += 20
            deadline = loop.time() + 1.0
            while subscription.queued and loop.time() < deadline:
                await asyncio.sleep(0.005)
            if subscription.queued:
                break
        seen["written"] = published - subscription.queued
        h.broker.publish(make_trace(), findings[published : published + 300])
        seen["published"] = published + 300
        seen["dropped"] = subscription.dropped
        out.resume()
        h.broker.close()

    async def scenario() -> TailRun:
        async with serve(queue_size=100) as h:
            run = await tail_while(h, stall, out=out)
            seen["counted"] = int(h.registry.get_sample_value(DROPPED) or 0)
            return run

    result = asyncio.run(scenario())
    assert result.code == 0
    assert seen["written"] * size <= 2 * 65_536  # a window or two (about 80), not thousands
    assert seen["dropped"] >= 300 - 100
    assert seen["counted"] == seen["dropped"]
    assert result.out.count("\n") == seen["published"] - seen["dropped"]
    assert f"toolwatch tail: {seen['dropped']} findings missed since the last one printed" in (
        result.err
    )


def test_tail_explains_a_target_that_is_no_findings_stream_or_has_no_port() -> None:
    async def scenario() -> tuple[int, str]:
        server = grpc.aio.server()  # a gRPC server without the findings service
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            err = io.StringIO()
            code = await asyncio.to_thread(run_tail, f"127.0.0.1:{port}", err=err)
            return code, err.getvalue()
        finally:
            await server.stop(None)

    code, err = asyncio.run(scenario())
    assert code == 2
    assert "serves no findings stream: point --target at the server's listen.stream" in err
    code, err = asyncio.run(_tail_an_http_server())
    assert code == 2
    assert "answers HTTP/1.x, not gRPC, so it serves no findings stream" in err
    for greeting in (b"SSH-2.0-OpenSSH_9.2\r\n", b"220 mail.example.com ESMTP\r\n"):
        code, err = asyncio.run(_tail_a_server_that_says(greeting))
        assert code == 2
        assert "answers, but not in HTTP/2, so it is no gRPC server and serves no" in err
        assert "TLS" not in err  # the hint for a server that closes the connection
    err_stream = io.StringIO()
    assert run_tail("localhost", err=err_stream) == 2
    assert err_stream.getvalue() == (
        "toolwatch tail: --target 'localhost' is not HOST:PORT (listen.stream)\n"
    )


async def _tail_a_server_that_says(greeting: bytes) -> tuple[int, str]:
    """tail pointed at a server that answers any connection with ``greeting``, then closes
    it: an SSH or a mail server."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(24)  # the HTTP/2 preface
        writer.write(greeting)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        err = io.StringIO()
        code = await asyncio.to_thread(run_tail, f"127.0.0.1:{port}", err=err)
        return code, err.getvalue()
    finally:
        server.close()
        await server.wait_closed()


async def _tail_an_http_server() -> tuple[int, str]:
    """tail pointed at an HTTP/1.1 server, as the OTLP/HTTP receiver's aiohttp one."""
    runner = web.AppRunner(web.Application())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        err = io.StringIO()
        code = await asyncio.to_thread(run_tail, f"127.0.0.1:{port}", err=err)
        return code, err.getvalue()
    finally:
        await runner.cleanup()


def test_a_stream_whose_token_went_before_it_subscribed_is_ended_at_once() -> None:
    """The token was accepted when the call's headers came, and taken out (a reload) before
    the request arrived: no recheck saw the stream then, and one that no finding passes
    would never be asked again. It is asked as it subscribes."""
    refusals: list[None] = []

    async def scenario() -> tuple[grpc.StatusCode, int]:
        revoked = lambda _metadata: lambda: False  # noqa: E731
        async with (
            serve(authorize=revoked, refused=lambda: refusals.append(None)) as h,
            grpc.aio.insecure_channel(h.target) as channel,
        ):
            call = subscribe(channel, agents=["nobody"])
            with pytest.raises(grpc.aio.AioRpcError) as ended:
                await asyncio.wait_for(call.read(), timeout=10)
            await asyncio.wait_for(h.broker.wait_for_subscribers(0), timeout=10)
            return ended.value.code(), h.broker.subscriber_count

    assert asyncio.run(scenario()) == (grpc.StatusCode.UNAUTHENTICATED, 0)
    assert len(refusals) == 1
