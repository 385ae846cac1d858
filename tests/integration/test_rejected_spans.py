"""A run missing a span that ingest rejected is judged incomplete, as one missing a span a
limit dropped is.

The decoder rejects a span with a readable trace id (``invalid_parent_span_id``,
``too_many_attributes``, ``malformed_attributes``, ``malformed_span``) and counts it, but its
trace was not told: the run was built without it and judged complete, so against its golden
case or shadow source too, where the missing call reads as drift (a false page), while the
shipped ``ToolwatchSpansRejected`` alert said those runs were not evaluated at all.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from prometheus_client import CollectorRegistry

from tests.integration import agents
from tests.kept_support import KeptToolTraces
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.engine import Admission, Engine, EngineParts
from toolwatch.evaluation.pipeline import EvaluationPipeline
from toolwatch.evaluation.settings import EvaluationSettings
from toolwatch.ingest.decode_requests import decode_request
from toolwatch.ingest.decode_types import DecodedBatch, DecodeOptions
from toolwatch.metrics import NoopMetrics, PipelineMetrics
from toolwatch.model import ManualClock
from toolwatch.model_traces import ToolTrace
from toolwatch.sinks.findings import InMemoryFindingSink
from toolwatch.sinks.prometheus import PrometheusMetrics

POLICY = {"dangerous_tools": ["issue_refund"], "verification_tools": ["lookup_order"]}


def judge(
    batch: DecodedBatch, policy: dict[str, Any], metrics: PipelineMetrics
) -> tuple[list[ToolTrace], list[tuple[str, str]]]:
    """``batch`` through an engine as ``serve`` builds it, after the completion wait: the
    runs evaluated and their findings' (category, tool)."""
    clock, kept, findings = ManualClock(), KeptToolTraces(), InMemoryFindingSink()
    settings = EvaluationSettings.model_validate({"policy": policy})
    engine = Engine(
        EngineParts(
            limits=AssemblyLimits(),
            evaluation=EvaluationPipeline(settings),
            normalize=settings.policy.normalizer(),
            findings=findings,
            tooltraces=kept,
        ),
        clock,
        metrics,
    )
    assert engine.offer(batch, "grpc") is Admission.ACCEPTED
    # A trace with a span rejected at ingest is judged once quiet completion_wait +
    # lost_parent_wait (the rejected span may be what a background run waits for). Was: 2 s.
    limits = AssemblyLimits()
    clock.advance((limits.completion_wait_ns + limits.lost_parent_wait_ns) / 1e9 + 0.001)
    engine.tick()
    return kept.traces, [(f.category, f.tool or "") for f in findings.findings]


def _outcomes(registry: CollectorRegistry) -> dict[str, float]:
    return {
        sample.labels["outcome"]: sample.value
        for family in registry.collect()
        for sample in family.samples
        if sample.name == "toolwatch_tool_traces_total" and sample.value
    }


def test_a_run_missing_a_span_rejected_at_ingest_is_judged_incomplete() -> None:
    spans = agents.record(agents.refund_run(), "genai")
    request = encode_spans(spans)
    scope = request.resource_spans[0].scope_spans[0]
    (lookup,) = [s for s in scope.spans if s.name == "execute_tool lookup_order"]
    lookup.parent_span_id = b"\x05" * 3  # OTLP: a parent id is empty or 8 bytes
    batch = decode_request(request, DecodeOptions())
    assert dict(batch.rejected) == {"invalid_parent_span_id": 1}

    registry = CollectorRegistry()
    (run,), _found = judge(batch, POLICY, PrometheusMetrics(registry))

    assert run.span_count == len(spans) - 1  # built without the rejected span
    assert (run.complete, run.incomplete_reason) == (False, "span_limit")
    assert _outcomes(registry) == {"span_limit": 1.0}


# A run that ended but lost one span to ingest is judged ``span_limit``, incomplete: compared
# with no reference, but no unfinished run (``evaluation.base.unfinished``). The rules that
# read what a run has not done yet leave out only runs that had not ended: this one still
# pages for the refund of an order it asked to look up but never did, and for the
# ``required`` call it never made.
GUARDED: dict[str, Any] = {
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


def _judged(reject_final_answer: bool) -> tuple[ToolTrace, list[tuple[str, str]]]:
    request = encode_spans(agents.record(RUN, "genai"))
    if reject_final_answer:
        scope = request.resource_spans[0].scope_spans[0]
        answer = [s for s in scope.spans if s.name == "chat gpt-4o"][-1]  # "Refunded."
        answer.parent_span_id = b"\x05" * 3  # invalid: rejected at ingest, no call in it
    batch = decode_request(request, DecodeOptions())
    assert bool(batch.rejected) is reject_final_answer
    (run,), found = judge(batch, GUARDED, NoopMetrics())
    return run, found


def test_the_whole_run_pages_both() -> None:
    run, found = _judged(reject_final_answer=False)
    assert run.complete
    assert ("MISSING_VERIFICATION_STEP", "issue_refund") in found
    assert ("INVARIANT_VIOLATION", "send_receipt") in found


def test_a_finished_run_missing_an_unrelated_rejected_span_still_pages_unverified_refund() -> None:
    run, found = _judged(reject_final_answer=True)
    assert run.incomplete_reason == "span_limit"
    assert [c.tool_name for c in run.calls] == ["lookup_order", "lookup_order", "issue_refund"]
    assert ("MISSING_VERIFICATION_STEP", "issue_refund") in found


def test_a_finished_run_missing_an_unrelated_rejected_span_is_still_judged_by_required() -> None:
    run, found = _judged(reject_final_answer=True)
    assert run.incomplete_reason == "span_limit"
    assert ("INVARIANT_VIOLATION", "send_receipt") in found
