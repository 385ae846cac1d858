"""Review of 4bd55ec (review-stall4): ``flag_rejected`` comes too late for a trace the same
request evicted.

``Engine.admit`` (and ``replay_assembly``, "as the server does") calls ``buffer.add`` first
and ``buffer.flag_rejected`` after. A request's own traces are never evicted to make room
for it (``_Victims``' ``own``), but ``own`` is the trace ids of its *accepted* spans: a trace
only a rejected span of the request belongs to is not among them. When that trace's run has
ended (its root came, its quiet period not over yet), the ``add`` evicts it "judged as it
came", complete; ``flag_rejected`` then finds it emitted (remembered) and leaves it alone: the
run is judged whole without the span ingest rejected, what ``flag_rejected``'s docstring says
it is for ("the run would be judged whole without a call ... that reads as drift"). The same
request with room to spare flags it (``span_limit``).

Suggested fix: flag the rejected traces before the ``add`` (a trace not buffered yet is
remembered in ``_limited`` and flagged as it arrives), or count them among ``own``.
"""

from __future__ import annotations

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


def _engine(limits: AssemblyLimits) -> tuple[Engine, KeptToolTraces]:
    settings = EvaluationSettings.model_validate({"policy": REFUND_POLICY_FIELDS})
    kept = KeptToolTraces()
    parts = EngineParts(
        limits=limits,
        evaluation=EvaluationPipeline(settings),
        normalize=settings.policy.normalizer(),
        findings=InMemoryFindingSink(),
        tooltraces=kept,
    )
    return Engine(parts, ManualClock(), PrometheusMetrics(CollectorRegistry())), kept


def _run(trace_id: bytes) -> tuple[SpanRecord, ...]:
    return (
        agent(1, None, "refund-bot", 0, 100, trace_id=trace_id),
        tool(2, 1, "issue_refund", 10, 20, trace_id=trace_id, arguments='{"order_id": "A1"}'),
    )


def _judged(max_traces: int) -> dict[str, bool]:
    """The first run (ended), then a request with the second run and a span of the first run
    that ingest rejected; drained."""
    engine, kept = _engine(AssemblyLimits(max_traces=max_traces, overflow="evict_oldest"))
    first = _run(_FIRST)
    assert engine.offer(DecodedBatch(first, len(first), {}, None), "grpc") is Admission.ACCEPTED
    second = _run(_SECOND)
    batch = DecodedBatch(
        second, len(second) + 1, {"invalid_parent_span_id": 1}, None, rejected_traces=(_FIRST,)
    )
    assert engine.admit(batch, "grpc").admission is Admission.ACCEPTED
    engine.drain()
    return {trace.trace_id: trace.complete for trace in kept.traces}


def test_with_room_the_rejected_span_flags_its_run() -> None:
    """The control (held): room for both runs; the first is judged incomplete."""
    assert _judged(max_traces=2) == {_FIRST.hex(): False, _SECOND.hex(): True}


def test_a_run_evicted_by_the_request_that_brought_its_rejected_span_is_flagged() -> None:
    """Room for one run: the request evicts the first run (ended: judged as it came).
    Expected: incomplete, as with room. Was (4bd55ec, and before): judged complete."""
    assert _judged(max_traces=1) == {_FIRST.hex(): False, _SECOND.hex(): True}
