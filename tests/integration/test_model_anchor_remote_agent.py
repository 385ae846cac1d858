"""A trace of no AGENT span is anchored by the span enclosing a tool loop's model calls when
that span's parent is remote (anchoring.py ``_Trace.anchored``). But "no AGENT span *yet*" is not
"no AGENT span": when the remote caller is itself an agent run (an agent whose tool is a
service that calls a model: a summarizer on a plain client), the called service's part of the
trace ends first and, exported by its own batch processor, often arrives first. Its model call
requested no tool, so it does not anchor the trace: anchored, the caller's agent run, which
ends last, was dropped as ``late`` and never evaluated.

Real SDK spans, real OTLP/gRPC exporter, real server on port 0; time injected."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

from tests.integration import agents
from tests.integration.agents import STYLES, AgentRun, Call, Recorder, Turn
from tests.integration.conftest import RunningServer
from tests.integration.evaluation_support import MINIMAL_POLICY, findings_log
from tests.integration.ingest_support import send_grpc

DROPPED = "toolwatch_spans_dropped_total"


def agent_calling_a_remote_model_service() -> tuple[
    tuple[ReadableSpan, ...], tuple[ReadableSpan, ...]
]:
    """refund-bot (service A) calls its ``summarize_ticket`` tool, served by another service
    (B) that makes one model call through a plain client (no AGENT span), then issues a
    refund without a lookup (MISSING_VERIFICATION_STEP). Returns (A's spans, B's spans)."""
    style = STYLES["genai"]
    summarize = Call("summarize_ticket", {"ticket": "T-1"}, "call_1", result="broken item")
    refund = agents.REFUND
    run = AgentRun(
        "refund-bot",
        (Turn((summarize,)), Turn((refund,)), Turn(text="Refunded.")),
    )
    a = Recorder("refund-agent")
    root = a.start(*style.agent(run), parent=None)
    first = a.start(*style.llm(run, run.turns[0]), parent=root)
    a.end(first)
    tool_span = a.start(*style.tool(run, summarize), parent=root)
    # Service B: its server span's parent is A's tool span, propagated (remote).
    called = tool_span.get_span_context()
    caller = trace.NonRecordingSpan(
        trace.SpanContext(called.trace_id, called.span_id, True, called.trace_flags)
    )
    b = Recorder("summarizer")
    b.now = a.now
    server_span = b.start(
        "POST /summarize", {"http.request.method": "POST"}, SpanKind.SERVER, caller
    )
    b_run = AgentRun("summarizer", (Turn(text="Customer reports a broken item."),))
    model = b.start(*style.llm(b_run, b_run.turns[0]), parent=server_span)
    b.end(model)
    b.end(server_span)
    a.now = b.now
    a.end(tool_span)
    second = a.start(*style.llm(run, run.turns[1]), parent=root)
    a.end(second)
    a.end(a.start(*style.tool(run, refund), parent=root))
    third = a.start(*style.llm(run, run.turns[2]), parent=root)
    a.end(third)
    a.end(root)
    return a.spans(), b.spans()


def test_a_remote_model_service_part_arriving_first_does_not_cut_off_the_calling_agent_run(
    start_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    config = tmp_path / "toolwatch.yaml"
    config.write_text(MINIMAL_POLICY)
    server = start_server(config)
    caller_spans, service_spans = agent_calling_a_remote_model_service()

    # Each service exports through its own batch processor: the called service's part, which
    # ended first, arrives first; the agent's part (its AGENT span ends last) comes after a
    # quiet longer than completion_wait (the next model turn, the next export tick).
    send_grpc(server, service_spans)
    server.settle()
    send_grpc(server, caller_spans)
    server.settle()

    ran = [(t["agent"], t["complete"]) for t in server.tooltraces()]
    late = server.sample(DROPPED, {"reason": "late"}, missing_ok=True)
    assert [f["category"] for f in findings_log(server)] == ["MISSING_VERIFICATION_STEP"], (
        f"runs evaluated: {ran}; spans dropped late: {late:g}"
    )
    assert late == 0
    assert [agent for agent, _ in ran] == ["refund-bot"]
