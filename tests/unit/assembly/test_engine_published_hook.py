"""``EngineParts.published`` (called at the end of ``Engine._process``) that raises costs the
engine nothing (review of 2e11f06). Was: it ended ``admit``, ``tick`` and ``drain`` there:
``drain`` no longer closed the sinks (the findings streams not ended) nor drained the shadow
joiner, and ``admit`` skipped ``flag_rejected`` (a run missing a span ingest rejected was
judged complete) and answered the receiver with an error for a request whose spans it took.
Now: it is logged, and the engine goes on. (The app's ``Outputs.write_queued`` does not
raise; the hook is public.)

A real engine, evaluation and findings sink; ``published`` raises as a hook that failed."""

from __future__ import annotations

import logging

import pytest
from assembly_support import REFUND_POLICY_FIELDS, agent, tool
from prometheus_client import CollectorRegistry

from tests.kept_support import KeptToolTraces
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.engine import Admission, Engine, EngineParts
from toolwatch.evaluation.pipeline import EvaluationPipeline
from toolwatch.evaluation.settings import EvaluationSettings
from toolwatch.ingest.decode_types import DecodedBatch
from toolwatch.model import ManualClock, SpanRecord
from toolwatch.sinks.findings import InMemoryFindingSink
from toolwatch.sinks.prometheus import PrometheusMetrics

_FIRST = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")
_SECOND = bytes.fromhex("4bf92f3577b34da6a3ce929d0e0e4736")


def _failing_hook() -> None:
    raise RuntimeError("the hook failed")


def _engine(limits: AssemblyLimits) -> tuple[Engine, InMemoryFindingSink, KeptToolTraces]:
    settings = EvaluationSettings.model_validate({"policy": REFUND_POLICY_FIELDS})
    findings, kept = InMemoryFindingSink(), KeptToolTraces()
    parts = EngineParts(
        limits=limits,
        evaluation=EvaluationPipeline(settings),
        normalize=settings.policy.normalizer(),
        findings=findings,
        tooltraces=kept,
        published=_failing_hook,
    )
    return Engine(parts, ManualClock(), PrometheusMetrics(CollectorRegistry())), findings, kept


def _run(trace_id: bytes) -> tuple[SpanRecord, ...]:
    return (
        agent(1, None, "refund-bot", 0, 100, trace_id=trace_id),
        tool(2, 1, "issue_refund", 10, 20, trace_id=trace_id, arguments='{"order_id": "A1"}'),
    )


def test_the_drain_closes_the_sinks_though_published_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Scenario: one run buffered; the shutdown drains it; ``published`` raises.
    Was: ``drain`` raised out of ``_process`` before it closed the findings sink.
    Now: the run is judged and the sinks closed, as a sink failing at close does not stop
    the rest of the drain."""
    engine, findings, kept = _engine(AssemblyLimits())
    spans = _run(_FIRST)
    assert engine.offer(DecodedBatch(spans, len(spans), {}, None), "grpc") is Admission.ACCEPTED
    with caplog.at_level(logging.ERROR, logger="toolwatch.engine"):
        engine.drain()
    assert "telling the outputs what was published failed" in caplog.text
    assert [trace.trace_id for trace in kept.traces] == [_FIRST.hex()]
    assert findings.closed, "the drain stopped at the hook: the findings sinks were not closed"


def test_an_admission_that_evicts_still_flags_its_rejected_traces_though_published_raised() -> None:
    """Scenario: room for one trace, ``evict_oldest``; a request for a second trace, one of
    whose spans ingest rejected, evicts the first; ``published`` raises.
    Was: ``admit`` raised before ``flag_rejected``: the receiver answered with an error for
    spans the buffer took, and the second run was judged complete at the drain.
    Now: the request is accepted and the second trace flagged incomplete."""
    engine, _findings, kept = _engine(AssemblyLimits(max_traces=1, overflow="evict_oldest"))
    first = _run(_FIRST)
    assert engine.offer(DecodedBatch(first, len(first), {}, None), "grpc") is Admission.ACCEPTED
    second = _run(_SECOND)
    batch = DecodedBatch(
        second,
        len(second) + 1,
        {"invalid_parent_span_id": 1},
        None,
        rejected_traces=(_SECOND,),
    )
    receipt = engine.admit(batch, "grpc")
    assert receipt.admission is Admission.ACCEPTED
    engine.drain()
    completeness = {trace.trace_id: trace.complete for trace in kept.traces}
    # The first run had ended when evicted (its root came): judged as it came, complete.
    assert completeness == {_FIRST.hex(): True, _SECOND.hex(): False}, completeness
