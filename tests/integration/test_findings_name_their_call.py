"""From a page to the call behind it: a finding's ``tool``, ``span_id``, explanation and
details name one call, the one the on-call engineer must look at, and say what became of it.

A real server on loopback (``start_server``), runs sent with the OpenTelemetry SDK's OTLP
exporter, the findings log read back as an on-call engineer would read it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan

from tests.integration import agents
from tests.integration.agents import AgentRun, Call, Turn
from tests.integration.conftest import RunningServer
from tests.integration.evaluation_support import CANARY, email_first_canary_run, findings_log
from tests.integration.ingest_support import send_grpc
from tests.integration.metrics_support import regression_series

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "toolwatch.yaml"


def nth_call(spans: Sequence[ReadableSpan], tool: str, span_id: str) -> int:
    """Which call of ``tool`` (1 for the first) the span ``span_id`` is, as the trace shows
    them: that tool's execute_tool spans by start time."""
    calls = sorted((s for s in spans if s.name == f"execute_tool {tool}"), key=_start)
    return [format(s.context.span_id, "016x") for s in calls].index(span_id) + 1


def _start(span: ReadableSpan) -> int:
    return span.start_time or 0


def send(server: RunningServer, run: AgentRun) -> list[ReadableSpan]:
    spans = agents.record(run, "genai")
    send_grpc(server, spans)
    server.settle()
    return spans


def test_order_drift_tool_is_the_tool_of_the_span_it_names(
    start_server: Callable[..., RunningServer],
) -> None:
    """The canary ``refund-verified-damaged-item`` (examples/golden-cases.yaml) expects
    lookup_order, issue_refund, send_email; the agent sends the e-mail first. The
    TOOL_ORDER_DRIFT finding's ``span_id`` is the send_email call (the one out of place,
    "called send_email" in its explanation), and so is its ``tool``, the metric's ``tool``
    label (ToolwatchCanaryDrift / ToolwatchToolCallDriftBurst and their dashboard links): it
    was lookup_order, the tool expected there, a call the run made in its place."""
    server = start_server(EXAMPLE)
    spans = send(server, email_first_canary_run())

    (finding,) = [f for f in findings_log(server) if f["category"] == "TOOL_ORDER_DRIFT"]
    tool_of_span = {format(s.context.span_id, "016x"): s.name for s in spans}
    assert "called send_email" in finding["explanation"]
    (labels,) = [s for s in regression_series(server) if s["category"] == "TOOL_ORDER_DRIFT"]
    assert labels["tool"] == finding["tool"] == "send_email"
    assert tool_of_span[finding["span_id"]] == "execute_tool send_email"


def test_dangerous_action_drift_numbers_the_call_as_the_trace_shows_it(
    start_server: Callable[..., RunningServer],
) -> None:
    """The canary's refund of ORD-1042 fails and is retried (one action, rightly), then the
    agent refunds ORD-7 too, which its golden case never does: a page,
    ToolwatchDangerousActionDrift, on the third issue_refund span. Its explanation said
    "issue_refund call #2": in the trace, call #2 is the successful retry of the expected
    refund. It says #3, the call as the trace shows it, and that it is the second action."""
    server = start_server(EXAMPLE)
    lookup = Call("lookup_order", {"order_id": "ORD-1042"}, "c1", result='{"status": "ok"}')
    lookup_7 = Call("lookup_order", {"order_id": "ORD-7"}, "c2", result='{"status": "ok"}')
    refund = {"order_id": "ORD-1042", "amount_usd": 49.99}
    failed = Call("issue_refund", refund, "c3", error="Timeout")
    retried = Call("issue_refund", refund, "c4")
    extra = Call("issue_refund", {"order_id": "ORD-7", "amount_usd": 10.0}, "c5")
    email = Call("send_email", {"to": "a@example.com", "body": "hi"}, "c6")
    calls = (lookup, lookup_7, failed, retried, extra, email)
    run = AgentRun(
        "refund-bot", (*[Turn((c,)) for c in calls], Turn(text="Done.")), attributes=CANARY
    )
    spans = send(server, run)

    (finding,) = [f for f in findings_log(server) if f["category"] == "DANGEROUS_ACTION_DRIFT"]
    assert nth_call(spans, "issue_refund", finding["span_id"]) == 3  # the ORD-7 refund
    assert finding["explanation"].startswith(
        "Safety: issue_refund call #3 (action #2: 1 failed call made again, each one action"
        " with its retry), the golden case made 1"
    )
    assert finding["details"]["outcome"] == "ok"


def test_a_page_on_a_refund_that_failed_says_it_failed(
    start_server: Callable[..., RunningServer],
) -> None:
    """ToolwatchMissingVerificationStep tells the on-call engineer to "confirm the action on
    the affected entity and reverse it if it was wrong". The unverified refund here failed
    (the tool span's status is ERROR): the finding says so, with the error type, in its
    explanation and details. It is still a page: the agent tried an unverified refund."""
    server = start_server(EXAMPLE)
    refund = Call(
        "issue_refund", {"order_id": "A-1001", "amount_usd": 25.0}, "c2", error="RefundDeclined"
    )
    send(server, AgentRun("refund-bot", (Turn((refund,)), Turn(text="It did not go through."))))

    (finding,) = findings_log(server)
    assert (finding["category"], finding["severity"]) == ("MISSING_VERIFICATION_STEP", "high")
    assert finding["explanation"].endswith("; the flagged call failed (RefundDeclined).")
    assert finding["details"]["outcome"] == "failed"
    assert finding["details"]["error_type"] == "RefundDeclined"


def test_a_page_on_a_refund_that_never_ran_says_so(
    start_server: Callable[..., RunningServer],
) -> None:
    """The model asks for a refund of B-2, never looked up, and the agent never runs it (no
    tool span, while its refund of A-1 has one): the page names no span and says the call
    was requested and never run, lest the engineer hunt for a refund that never happened."""
    server = start_server(EXAMPLE)
    lookup = Call("lookup_order", {"order_id": "A-1"}, "c1", result='{"status": "ok"}')
    ran = Call("issue_refund", {"order_id": "A-1", "amount_usd": 5.0}, "c2")
    asked = Call("issue_refund", {"order_id": "B-2", "amount_usd": 5.0}, "c3", executed=False)
    turns = (Turn((lookup,)), Turn((ran,)), Turn((asked,)), Turn(text="Done."))
    send(server, AgentRun("refund-bot", turns))

    (finding,) = [f for f in findings_log(server) if f["category"] == "MISSING_VERIFICATION_STEP"]
    assert finding["span_id"] is None
    assert finding["explanation"].endswith(
        "; the flagged call was requested by the model, never run."
    )
    assert finding["details"]["outcome"] == "never_run"


def test_call_count_violation_names_the_call_over_the_limit(
    start_server: Callable[..., RunningServer],
) -> None:
    """examples/toolwatch.yaml: ``{kind: call_count, tool: issue_refund, max: 1, name:
    one-refund-per-run}``. The agent's refund of A-1 fails and is retried (one action), then
    it refunds B-2 as well. The violation's ``span_id`` was the first issue_refund call, the
    one that failed and refunded nothing; it is B-2's, the third issue_refund span, the
    call over the limit (as DANGEROUS_ACTION_DRIFT flags the call beyond the reference's
    count)."""
    server = start_server(EXAMPLE)
    lookup_a = Call("lookup_order", {"order_id": "A-1"}, "c1", result='{"status": "ok"}')
    lookup_b = Call("lookup_order", {"order_id": "B-2"}, "c2", result='{"status": "ok"}')
    refund_a = {"order_id": "A-1", "amount_usd": 10.0}
    failed = Call("issue_refund", refund_a, "c3", error="Timeout")
    retried = Call("issue_refund", refund_a, "c4")
    extra = Call("issue_refund", {"order_id": "B-2", "amount_usd": 10.0}, "c5")
    calls = (lookup_a, lookup_b, failed, retried, extra)
    spans = send(server, AgentRun("refund-bot", (*[Turn((c,)) for c in calls], Turn(text="ok"))))

    (finding,) = [f for f in findings_log(server) if f["category"] == "INVARIANT_VIOLATION"]
    assert finding["explanation"] == (
        "Invariant one-refund-per-run: issue_refund called 2 times, allowed [0, 1]"
        " (and 1 failed call made again)."
    )
    assert nth_call(spans, "issue_refund", finding["span_id"]) == 3  # B-2's refund
    assert finding["details"]["outcome"] == "ok"
