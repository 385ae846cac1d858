"""A run with a span rejected at ingest is a run in flight to an eviction and to a drain until
its trace is quiet ``completion_wait + lost_parent_wait`` (``victims._root_ended``), as it is
to ``poll``: the rejected span may be a step of a run the request left in the background, and
no span held says which run it was of.

The run: a request's span (the root, 9, ended at 3 ms) and a triage agent under it (3, ended
at 2 ms, before the root): a synchronous request by what the buffer holds; with a span of it
rejected, maybe one that handed off to a run left running in the background.
"""

from __future__ import annotations

import dataclasses

import pytest
from assembly_support import REFUND_POLICY_FIELDS, SECOND, agent, span, tool
from prometheus_client import CollectorRegistry
from stall_support import LIMITS, end_of, in_flight, make, offer, tick, tid, verdicts

from tests.kept_support import KeptToolTraces
from toolwatch.assembly.completed import CompletedTrace
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.engine import Admission, Engine, EngineParts
from toolwatch.evaluation.pipeline import EvaluationPipeline
from toolwatch.evaluation.settings import EvaluationSettings
from toolwatch.ingest.decode_types import DecodedBatch
from toolwatch.model import ManualClock, SpanRecord, SpanRole
from toolwatch.sinks.findings import InMemoryFindingSink
from toolwatch.sinks.prometheus import PrometheusMetrics

_EVICT = dataclasses.replace(LIMITS, max_traces=3, overflow="evict_oldest")


def _request(n: int) -> list[SpanRecord]:
    """Run ``n``: the request's span (root 9) and the triage agent it ran (3), both ended."""
    return [
        span(9, None, SpanRole.OTHER, 0, 3, name="POST /chat", trace_id=tid(n), size_bytes=10),
        agent(3, 9, "triage", 1, 2, trace_id=tid(n), size_bytes=10, parent_local=True),
    ]


@pytest.mark.parametrize(
    ("rejected", "taken"),
    [
        (False, [(tid(2), None), (tid(3), None), (tid(1), "evicted")]),
        (True, [(tid(3), None), (tid(1), "evicted"), (tid(2), "evicted")]),
    ],
    ids=["nothing-rejected", "a-span-rejected"],
)
def test_an_eviction_passes_over_a_run_with_a_rejected_span_for_a_newer_run_that_ended(
    rejected: bool, taken: list[tuple[bytes, str | None]]
) -> None:
    """Run 1 in flight (the oldest), run 2 the request above, run 3 ended (the newest); three
    requests of a run each (4, 5, 6) evict one run each, in order.
    Nothing rejected: run 2 has ended (its root, its agent, nothing waits): taken first as it
    came (complete), then run 3 (ended), then run 1, in flight (``evicted``).
    A span of run 2 rejected: Was: taken first all the same, as it came (``span_limit``).
    Now: in flight, passed over for run 3, which ended (complete); then run 1, the oldest in
    flight, then run 2 (both ``evicted``)."""
    buffer, _, _ = make(_EVICT)
    out: list[CompletedTrace] = []
    assert offer(buffer, in_flight(1), out)
    assert offer(buffer, _request(2), out)
    if rejected:
        buffer.flag_rejected([tid(2)])
    assert offer(buffer, end_of(3), out)
    for n in (4, 5, 6):
        assert offer(buffer, in_flight(n), out)
    assert [(t.trace_id, t.incomplete_reason) for t in out] == taken


def test_a_run_with_a_rejected_span_is_ended_to_an_eviction_once_quiet_the_lost_parents_wait() -> (
    None
):
    """Run 2 (a span of it rejected) quiet 7 s (``completion_wait + lost_parent_wait``):
    ``poll`` judges it over (``span_limit``). Quiet 6 s, an eviction: Was: it took run 2 as
    ended (``span_limit``), run 1 left in flight. Now: run 2 is in flight, and the eviction
    takes run 1, the oldest (``evicted``). The rejection makes the run one in flight for the
    lost parent's wait, no longer."""
    limits = dataclasses.replace(_EVICT, max_traces=2, max_trace_age_ns=600 * SECOND)
    buffer, clock, _ = make(limits)
    out: list[CompletedTrace] = []
    assert offer(buffer, in_flight(1), out)
    assert offer(buffer, _request(2), out)
    buffer.flag_rejected([tid(2)])
    tick(buffer, clock, 6, out)
    assert verdicts(out) == {}
    assert offer(buffer, in_flight(3), out)  # evicts run 1, passing over run 2
    assert verdicts(out) == {tid(1): "evicted"}
    tick(buffer, clock, 1, out)
    assert verdicts(out) == {tid(1): "evicted", tid(2): "span_limit"}


def _engine() -> tuple[Engine, KeptToolTraces, InMemoryFindingSink, CollectorRegistry]:
    settings = EvaluationSettings.model_validate({"policy": REFUND_POLICY_FIELDS})
    kept, findings, registry = KeptToolTraces(), InMemoryFindingSink(), CollectorRegistry()
    parts = EngineParts(
        limits=AssemblyLimits(completion_wait_ns=2 * SECOND, max_trace_age_ns=300 * SECOND),
        evaluation=EvaluationPipeline(settings),
        normalize=settings.policy.normalizer(),
        findings=findings,
        tooltraces=kept,
    )
    return Engine(parts, ManualClock(), PrometheusMetrics(registry)), kept, findings, registry


def test_a_synchronous_run_with_a_rejected_span_drained_is_shutdown_and_the_span_counted() -> None:
    """A synchronous run (its agent span the root, a refund with no lookup in it) in one
    request with a span ingest rejected, drained at once (before 7 s).
    Was: ``span_limit`` (its root taken for its end). Now: ``shutdown`` (judged early: the
    rejected span may be of a run left in the background), its outcome counted so; the
    rejection is counted all the same in ``toolwatch_spans_rejected_total{reason}``, and
    what the run did is judged (its unverified refund pages, saying ``shutdown``)."""
    engine, kept, findings, registry = _engine()
    run = (
        agent(1, None, "refund-bot", 0, 100, trace_id=tid(8)),
        tool(2, 1, "issue_refund", 10, 20, trace_id=tid(8), arguments='{"order_id": "A1"}'),
    )
    batch = DecodedBatch(run, 3, {"invalid_parent_span_id": 1}, None, rejected_traces=(tid(8),))
    assert engine.admit(batch, "grpc").admission is Admission.ACCEPTED
    engine.drain()
    assert [(t.complete, t.incomplete_reason) for t in kept.traces] == [(False, "shutdown")]
    rejected = {"reason": "invalid_parent_span_id"}
    assert registry.get_sample_value("toolwatch_spans_rejected_total", rejected) == 1.0
    outcome = {"agent": "refund-bot", "outcome": "shutdown", "reference": "none"}
    assert registry.get_sample_value("toolwatch_tool_traces_total", outcome | {"traffic": "live"})
    assert [(str(f.category), "(shutdown:" in f.explanation) for f in findings.findings] == [
        ("MISSING_VERIFICATION_STEP", True)
    ]
