"""A tool served by another service whose clock is off: its tool span's times are that host's.

The agent service (refund-bot, GenAI conventions) asks its model for each call and has the
call served by a tool service over HTTP, which writes the ``execute_tool`` span under the
agent's client span (remote parent, propagated ``traceparent``). With that host's clock a
second and a half ahead, the lookup's span starts after the refund the model asked for next;
behind, a refund served by a payments service starts before the lookup the agent ran first.
Ordered by those times the correct run read as a refund with no lookup before it: a
``MISSING_VERIFICATION_STEP`` page. The model's requests, on the agent's clock, say the
order: each call is ordered within the window its request allows.

Real SDK spans of two services, real OTLP/gRPC exporter, real server on port 0; time
injected."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

from tests.integration import agents
from tests.integration.agents import MS, STYLES, AgentRun, Call, Recorder, Turn
from tests.integration.conftest import RunningServer
from tests.integration.evaluation_support import MINIMAL_POLICY, findings_log
from tests.integration.ingest_support import send_grpc

SKEW_MS = 1_500
VERIFIED = AgentRun(
    "refund-bot", (Turn((agents.LOOKUP,)), Turn((agents.REFUND,)), Turn(text="Refunded."))
)
UNVERIFIED = AgentRun(
    "refund-bot", (Turn((agents.REFUND,)), Turn((agents.LOOKUP,)), Turn(text="Refunded."))
)


def with_a_tool_service(
    run: AgentRun, remote: str, skew_ms: int
) -> tuple[tuple[ReadableSpan, ...], tuple[ReadableSpan, ...]]:
    """``run``, each model call taking 400 ms, the calls of tool ``remote`` served by another
    service whose clock is ``skew_ms`` off the agent's, the others run in the agent's
    process. Returns (the agent service's spans, the tool service's spans)."""
    style = STYLES["genai"]
    a, b = Recorder("refund-agent"), Recorder("tool-service")
    root = a.start(*style.agent(run), parent=None)
    for turn in run.turns:
        a.tick(400)  # the model thinks
        a.end(a.start(*style.llm(run, turn), parent=root))
        for call in turn.calls:
            if call.name == remote:
                _served_remotely(a, b, root, (run, call), skew_ms)
            else:
                a.end(a.start(*style.tool(run, call), parent=root))
    a.end(root)
    return a.spans(), b.spans()


def _served_remotely(
    a: Recorder, b: Recorder, root: trace.Span, called: tuple[AgentRun, Call], skew_ms: int
) -> None:
    """The agent's HTTP client span, and below it the tool service's ``execute_tool``."""
    method = {"http.request.method": "POST"}
    client = a.start(f"POST /tools/{called[1].name}", method, SpanKind.CLIENT, root)
    context = client.get_span_context()
    caller = trace.NonRecordingSpan(
        trace.SpanContext(context.trace_id, context.span_id, True, context.trace_flags)
    )
    b.now = a.now + skew_ms * MS  # the tool host's clock
    b.end(b.start(*STYLES["genai"].tool(*called), parent=caller))
    a.now = b.now - skew_ms * MS
    a.end(client)


def evaluate(
    start_server: Callable[..., RunningServer],
    tmp_path: Path,
    run: AgentRun,
    remote: str,
    skew_ms: int,
) -> tuple[RunningServer, tuple[ReadableSpan, ...]]:
    """``run`` sent as its two services export it (the tool service's batch first) and
    evaluated with the minimal policy; the server and the tool service's spans."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(MINIMAL_POLICY)
    server = start_server(config)
    agent_spans, tool_spans = with_a_tool_service(run, remote, skew_ms)
    send_grpc(server, tool_spans)
    send_grpc(server, agent_spans)
    server.settle()
    return server, tool_spans


@pytest.mark.parametrize(
    ("remote", "skew_ms"),
    [("lookup_order", SKEW_MS), ("issue_refund", -SKEW_MS)],
    ids=["lookup-host-ahead", "refund-host-behind"],
)
def test_a_tool_service_with_another_clock_does_not_reorder_a_verified_refund(
    start_server: Callable[..., RunningServer], tmp_path: Path, remote: str, skew_ms: int
) -> None:
    server, tool_spans = evaluate(start_server, tmp_path, VERIFIED, remote, skew_ms)

    (run,) = server.tooltraces()
    assert [(c["tool_name"], c["sequence_index"]) for c in run["calls"]] == [
        ("lookup_order", 0),
        ("issue_refund", 1),
    ]
    (served,) = [c for c in run["calls"] if c["tool_name"] == remote]
    (span,) = tool_spans
    assert served["start_ns"] == span.start_time  # the call keeps the time its span recorded
    assert [f["category"] for f in findings_log(server)] == []


def test_an_unverified_refund_served_by_a_host_behind_still_pages(
    start_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    """Only what the clocks put outside its request's window moves: a refund the model
    asked for before the lookup is unverified, whatever the payments host's clock says."""
    server, _ = evaluate(start_server, tmp_path, UNVERIFIED, "issue_refund", -SKEW_MS)

    assert [f["category"] for f in findings_log(server)] == ["MISSING_VERIFICATION_STEP"]


# -- an agent another host runs under the caller's tool span -------------------------------


def _reused(call: Call) -> Call:
    """``call`` under ``call_0``, as a model that numbers each turn's calls from 0 asks."""
    return Call(call.name, call.arguments, "call_0", call.result, nested=call.nested)


BILLING_REFUNDS = AgentRun(
    "billing-bot",
    (Turn((_reused(agents.LOOKUP),)), Turn((_reused(agents.REFUND),)), Turn(text="Refunded.")),
)
BILLING_LOOKS_UP = AgentRun("billing-bot", (Turn((agents.LOOKUP,)), Turn(text="Delivered.")))


def asks_billing(billing: AgentRun, call_id: str) -> Call:
    return Call("ask_billing", {"question": "A-1001"}, call_id, nested=billing)


def with_an_agent_on_another_host(
    run: AgentRun, skew_ms: int
) -> tuple[tuple[ReadableSpan, ...], tuple[ReadableSpan, ...]]:
    """``run`` by service ``desk``, each model call taking 400 ms; the agent a call runs
    (``Call.nested``) is service ``billing``'s, on a host whose clock is ``skew_ms`` off
    desk's, written below desk's tool span (remote parent, propagated ``traceparent``).
    Returns (desk's spans, billing's spans)."""
    style = STYLES["genai"]
    a, b = Recorder("desk"), Recorder("billing")
    root = a.start(*style.agent(run), parent=None)
    for turn in run.turns:
        a.tick(400)
        a.end(a.start(*style.llm(run, turn), parent=root))
        for call in turn.calls:
            span = a.start(*style.tool(run, call), parent=root)
            if call.nested is not None:
                b.now = a.now + skew_ms * MS  # billing's clock
                _nested_agent(b, call.nested, span)
                a.now = b.now - skew_ms * MS
            a.end(span)
    a.end(root)
    return a.spans(), b.spans()


def _nested_agent(b: Recorder, run: AgentRun, tool: trace.Span) -> None:
    context = tool.get_span_context()
    caller = trace.NonRecordingSpan(
        trace.SpanContext(context.trace_id, context.span_id, True, context.trace_flags)
    )
    style = STYLES["genai"]
    root = b.start(*style.agent(run), parent=caller)
    for turn in run.turns:
        b.tick(100)
        b.end(b.start(*style.llm(run, turn), parent=root))
        for call in turn.calls:
            b.end(b.start(*style.tool(run, call), parent=root))
    b.end(root)


@pytest.mark.parametrize(
    ("run", "skew_ms", "expected"),
    [
        (
            AgentRun(
                "desk-bot",
                (Turn((asks_billing(BILLING_REFUNDS, "call_0"),)), Turn(text="Refunded.")),
            ),
            -SKEW_MS,
            [("ask_billing", None), ("lookup_order", "call_0"), ("issue_refund", "call_0")],
        ),
        (
            AgentRun(
                "desk-bot",
                (
                    Turn((asks_billing(BILLING_LOOKS_UP, "call_b"),)),
                    Turn((agents.REFUND,)),
                    Turn(text="Refunded."),
                ),
            ),
            SKEW_MS,
            [("ask_billing", None), ("lookup_order", "call_b"), ("issue_refund", None)],
        ),
    ],
    ids=["billing-behind-refunds-under-call_0", "billing-ahead-looks-up-desk-refunds"],
)
def test_an_agent_on_a_host_with_another_clock_is_ordered_inside_the_call_that_ran_it(
    start_server: Callable[..., RunningServer],
    tmp_path: Path,
    run: AgentRun,
    skew_ms: int,
    expected: list[tuple[str, str | None]],
) -> None:
    """Billing's clock 1.5 s behind put its agent's lookup and refund before the desk call
    that ran them (the refund then read as nested in the lookup, both ``call_0``); ahead,
    its lookup after the refund desk made next. Either paged MISSING_VERIFICATION_STEP on a
    correct run. Inside the call's span, the nested agent's calls are in the order they
    ran, and keep the times billing recorded."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(MINIMAL_POLICY)
    server = start_server(config)
    desk_spans, billing_spans = with_an_agent_on_another_host(run, skew_ms)
    send_grpc(server, billing_spans)
    send_grpc(server, desk_spans)
    server.settle()

    (traced,) = server.tooltraces()
    assert [(c["tool_name"], c["parent_call_id"]) for c in traced["calls"]] == expected
    lookup = next(c for c in traced["calls"] if c["tool_name"] == "lookup_order")
    (recorded,) = [s for s in billing_spans if s.name == "execute_tool lookup_order"]
    assert lookup["start_ns"] == recorded.start_time
    assert [f["category"] for f in findings_log(server)] == []
