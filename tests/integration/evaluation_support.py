"""What end-to-end evaluation tests share: the examples' minimal policy, the findings log read
back, and the runs (an unverified refund, a canary's half, the canary's run out of order, runs
by reference) they send."""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan

from tests.integration import agents
from tests.integration.agents import AgentRun, Call, Turn
from tests.integration.conftest import RunningServer

MINIMAL_POLICY = """\
policy:
  dangerous_tools: [issue_refund]
  verification_tools: [lookup_order]
"""
#: The examples' golden case the canary runs name (examples/golden-cases.yaml).
CANARY = {"toolwatch.case_id": "refund-verified-damaged-item"}


def findings_log(server: RunningServer) -> list[dict[str, Any]]:
    path = Path(server.app.config.output.findings or "")
    return [json.loads(line) for line in path.read_text().splitlines()]


def otlp_json_line(spans: Sequence[ReadableSpan]) -> str:
    """One ExportTraceServiceRequest as the Collector's file exporter writes it: OTLP/JSON
    with hex ids."""
    data = json_format.MessageToDict(encode_spans(spans))
    for resource in data["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = _base64_to_hex(span[key])
    return json.dumps(data)


def _base64_to_hex(value: str) -> str:
    return base64.b64decode(value).hex()


def key(finding: dict[str, Any]) -> tuple[Any, ...]:
    return (
        finding["category"],
        finding["evaluator"],
        finding["tool"],
        finding["trace_id"],
        finding["span_id"],
    )


def runs_by_reference(server: RunningServer) -> dict[str, float]:
    """``toolwatch_tool_traces_total`` of refund-bot's complete runs, by ``reference``, a
    shadow target's (``traffic="shadow"``) as ``source@shadow`` or ``none@shadow``."""
    found = {}
    for reference in ("expected", "source", "none"):
        for traffic in ("live", "shadow"):
            labels = {"agent": "refund-bot", "outcome": "complete", "reference": reference}
            value = server.sample(
                "toolwatch_tool_traces_total", labels | {"traffic": traffic}, missing_ok=True
            )
            if value:
                found[reference if traffic == "live" else f"{reference}@shadow"] = value
    return found


def canary_half(role: str, run: agents.AgentRun | None = None) -> tuple[ReadableSpan, ...]:
    """A canary request's run that the candidate serves too: it carries a golden case id and
    a pair key. Without ``run``, the refund run its case expects."""
    attributes = {
        "toolwatch.case_id": "refund-canary",
        "toolwatch.shadow.pair_id": "req-1",
        "toolwatch.shadow.role": role,
    }
    run = dataclasses.replace(run or agents.refund_run(), attributes=attributes)
    return agents.record(run, "genai")


def unverified_refund_dump(tmp_path: Path, runs: int) -> Path:
    """``runs`` ToolTrace lines (as ``--dump-tooltraces`` writes them), each an unverified
    refund: one MISSING_VERIFICATION_STEP finding per run."""
    call = {
        "tool_name": "issue_refund", "raw_name": "issue_refund",
        "arguments": {"order_id": "A-1001", "amount_usd": 25.0}, "arguments_error": None,
        "call_id": "call_2", "parent_call_id": None, "sequence_index": 0,
        "parallel_group": None, "status": "ok", "error_type": None, "agent": "refund-bot",
        "span_id": "67d3cf736c84a795", "start_ns": 1767000000040000000,
        "end_ns": 1767000000050000000, "result": "ok", "hosted": False, "handoff": False,
    }  # fmt: skip
    run = {
        "format": "toolwatch.tooltrace/v1", "trace_id": "", "run_span_id": "8ac1c32968d53856",
        "service": "refund-agent", "agent": "refund-bot", "model": "gpt-4o",
        "conversation_id": None, "calls": [call], "final_text": "Refunded.", "refusal": False,
        "refusal_reason": None, "error_count": 0, "complete": True, "incomplete_reason": None,
        "start_ns": 1767000000010000000, "end_ns": 1767000000080000000, "span_count": 4,
        "reference_keys": {}, "shared_keys": {}, "agents": ["refund-bot"],
    }  # fmt: skip
    path = tmp_path / f"dump-{runs}.jsonl"
    with path.open("w") as out:
        for i in range(runs):
            run["trace_id"] = f"{i + 1:032x}"
            out.write(json.dumps(run) + "\n")
    return path


def email_first_canary_run() -> AgentRun:
    """The canary's run (lookup_order, issue_refund, send_email expected) with the e-mail
    sent first: the same tools, in another order."""
    email = Call("send_email", {"to": "a@example.com", "body": "hi"}, "c3")
    lookup = Call("lookup_order", {"order_id": "ORD-1042"}, "c1", result='{"status": "ok"}')
    refund = Call("issue_refund", {"order_id": "ORD-1042", "amount_usd": 49.99}, "c2")
    return AgentRun(
        "refund-bot",
        (Turn((email,)), Turn((lookup,)), Turn((refund,)), Turn(text="Done.")),
        attributes=CANARY,
    )
