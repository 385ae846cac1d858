"""An agent run a request starts in the background: the request's span, the trace's root,
ends (and is exported) first, and the run's spans follow batch by batch.

A web handler that answers at once and runs the agent in a task of its own (``asyncio``'s
``create_task``, a worker thread) keeps the request's trace context: the agent's spans are
children of the server span, which ended when the response went out. The root is there
first, so the trace read as anchored, and the first quiet ``completion_wait`` between two of
the agent's export batches (a model call of a few seconds) had it evaluated as an agent run
of the calls exported so far, judged complete; the rest of the run, an unverified refund in
it, came late and was dropped: no page. The spans of the run say their parent, the agent
span still running, is local (SpanFlags): the trace waits for it.

Real SDK spans, real OTLP/gRPC exporter, real server on port 0; time injected."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

from tests.integration import agents
from tests.integration.agents import STYLES, AgentRun, Recorder, Turn
from tests.integration.conftest import RunningServer
from tests.integration.evaluation_support import MINIMAL_POLICY, findings_log
from tests.integration.ingest_support import send_grpc

DROPPED = "toolwatch_spans_dropped_total"


def run_in_the_background() -> list[tuple[ReadableSpan, ...]]:
    """``POST /support`` answers 202 and its span ends; refund-bot then searches its
    knowledge base, thinks, and refunds an order it never looked up
    (MISSING_VERIFICATION_STEP). Returns what the service's batch processor exports, batch
    by batch: the request's span and the first turn, then the rest."""
    style = STYLES["genai"]
    search = agents.Call("search_kb", {"query": "refund policy"}, "call_1")
    run = AgentRun("refund-bot", (Turn((search,)), Turn((agents.REFUND,)), Turn(text="Done.")))
    rec = Recorder("refund-agent")
    server = rec.start("POST /support", {"http.request.method": "POST"}, SpanKind.SERVER, None)
    root = rec.start(*style.agent(run), parent=server)
    rec.end(server)  # 202 Accepted: the run goes on
    batches: list[tuple[ReadableSpan, ...]] = []
    for turn in run.turns:
        rec.tick(4_000)  # the model thinks
        rec.end(rec.start(*style.llm(run, turn), parent=root))
        for call in turn.calls:
            rec.end(rec.start(*style.tool(run, call), parent=root))
        if turn is run.turns[0]:
            batches.append(rec.spans())
    rec.end(root)
    batches.append(rec.spans()[len(batches[0]) :])
    return batches


def test_a_run_whose_request_span_ended_first_is_evaluated_whole(
    start_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    """One run, whole, its unverified refund paged; nothing late.
    Was: judged 2 s after its last batch.
    Now: 7 s after (``completion_wait + lost_parent_wait``): a run left running in the
    background, its spans of the root's service ended after the root."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(MINIMAL_POLICY)
    server = start_server(config)

    for batch in run_in_the_background():
        send_grpc(server, batch)
        server.settle()  # quiet for longer than completion_wait: the next export is 5 s away
    # Not at that last settle: its spans ran on after the root (``_Trace.ran_on``).
    assert server.tooltraces() == []
    server.settle(ran_on=True)

    late = server.sample(DROPPED, {"reason": "late"}, missing_ok=True)
    assert late == 0
    (run,) = server.tooltraces()
    assert (run["agent"], run["complete"]) == ("refund-bot", True)
    assert [c["tool_name"] for c in run["calls"]] == ["search_kb", "issue_refund"]
    assert [f["category"] for f in findings_log(server)] == ["MISSING_VERIFICATION_STEP"]
