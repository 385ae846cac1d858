"""A run that ended but lost one span to ingest (rejected as malformed) is judged
``span_limit``, incomplete: it is compared with no reference, but it is no unfinished run
(``evaluation.base.unfinished``). The rules that read what a run has not done yet leave
out only runs that had not ended: this one still pages for the refund of an order it asked
to look up but never did, and for the ``required`` call it never made."""

from __future__ import annotations

from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from tests.integration import agents
from toolwatch.assembly.buffer import AssemblyLimits
from toolwatch.engine import Admission, Engine, EngineParts
from toolwatch.evaluation.pipeline import EvaluationPipeline
from toolwatch.evaluation.settings import EvaluationSettings
from toolwatch.ingest.decode import DecodeOptions, decode_request
from toolwatch.metrics import NoopMetrics
from toolwatch.model import ManualClock, ToolTrace
from toolwatch.sinks.findings import InMemoryFindingSink

POLICY: dict[str, Any] = {
    "dangerous_tools": ["issue_refund"],
    "verification_tools": ["lookup_order"],
    "bindings": {"issue_refund.order_id": "lookup_order.order_id"},
    "invariants": [{"kind": "required", "tool": "send_receipt"}],
}

#: Looks order A up (it ran), asks to look order B up (it never ran: no tool span, while
#: lookup_order's calls have spans), then refunds order B: unverified.
LOOKUP_B = agents.Call("lookup_order", {"order_id": "B-2002"}, "call_b", executed=False)
REFUND_B = agents.Call("issue_refund", {"order_id": "B-2002", "amount_usd": 80.0}, "call_r")
RUN = agents.AgentRun(
    "refund-bot",
    (
        agents.Turn((agents.LOOKUP,)),
        agents.Turn((LOOKUP_B,)),
        agents.Turn((REFUND_B,)),
        agents.Turn(text="Refunded."),
    ),
)


class _Kept:
    def __init__(self) -> None:
        self.traces: list[ToolTrace] = []

    def write(self, trace: ToolTrace) -> None:
        self.traces.append(trace)

    def close(self) -> None:
        pass


def _judge(reject_final_answer: bool) -> tuple[ToolTrace, list[tuple[str, str]]]:
    request = encode_spans(agents.record(RUN, "genai"))
    if reject_final_answer:
        scope = request.resource_spans[0].scope_spans[0]
        answer = [s for s in scope.spans if s.name == "chat gpt-4o"][-1]  # "Refunded."
        answer.parent_span_id = b"\x05" * 3  # invalid: rejected at ingest, no call in it
    batch = decode_request(request, DecodeOptions())
    assert bool(batch.rejected) is reject_final_answer

    clock, kept, findings = ManualClock(), _Kept(), InMemoryFindingSink()
    settings = EvaluationSettings.model_validate({"policy": POLICY})
    engine = Engine(
        EngineParts(
            limits=AssemblyLimits(),
            evaluation=EvaluationPipeline(settings),
            normalize=settings.policy.normalizer(),
            findings=findings,
            tooltraces=kept,
        ),
        clock,
        NoopMetrics(),
    )
    assert engine.offer(batch, "grpc") is Admission.ACCEPTED
    clock.advance(2.001)  # completion_wait: the run's agent span has arrived, it is over
    engine.tick()
    (run,) = kept.traces
    return run, [(f.category, f.tool or "") for f in findings.findings]


def test_the_whole_run_pages_both() -> None:
    run, found = _judge(reject_final_answer=False)
    assert run.complete
    assert ("MISSING_VERIFICATION_STEP", "issue_refund") in found
    assert ("INVARIANT_VIOLATION", "send_receipt") in found


def test_a_finished_run_missing_an_unrelated_rejected_span_still_pages_unverified_refund() -> None:
    run, found = _judge(reject_final_answer=True)
    assert run.incomplete_reason == "span_limit"
    assert [c.tool_name for c in run.calls] == ["lookup_order", "lookup_order", "issue_refund"]
    assert ("MISSING_VERIFICATION_STEP", "issue_refund") in found


def test_a_finished_run_missing_an_unrelated_rejected_span_is_still_judged_by_required() -> None:
    run, found = _judge(reject_final_answer=True)
    assert run.incomplete_reason == "span_limit"
    assert ("INVARIANT_VIOLATION", "send_receipt") in found
