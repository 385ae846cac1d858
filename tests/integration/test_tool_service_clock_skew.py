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
from tests.integration.test_evaluation_e2e import MINIMAL_POLICY, findings_log
from tests.integration.test_ingest_to_tooltrace import send_grpc

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
