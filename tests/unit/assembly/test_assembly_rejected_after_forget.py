"""Found by review (review-stall5, of 7097a45): ``flag_rejected`` now runs before ``add``, and
so before ``add`` forgets the ids whose late window passed (``RememberedTraces.forget``).

``flag_rejected`` leaves alone a trace whose id is remembered (``trace_id in
self._emitted``: "a trace already emitted ... would have been late"). Before 7097a45 the
engine called it after ``add``, which runs ``self._emitted.forget(now)`` first; now it is
called first, and reads ``_emitted`` as the last ``poll`` (or ``has_room``, only under
``backpressure``) left it. An id whose window passed since then is still there: the
rejected span's trace is taken for an emitted run and left unflagged, and then the same
request's ``add`` forgets the id and buffers the trace's spans as a new run, judged whole
(``complete``) without the span ingest rejected: what ``flag_rejected`` is for ("the run
would be judged whole without a call ... against its golden case or shadow source that
reads as drift").

When: ``overflow: evict_oldest`` in serve (``has_room`` returns before its ``forget``), a
request between the bucket's expiry and the ticker's next ``poll`` (``tick_ns``, 10 ms by
default, per 1.17 s bucket). Replay remembers ids without a window (``2**62``): not there.

Suggested fix: ``flag_rejected`` forgets first, as ``add``, ``poll`` and ``has_room`` do
(``self._emitted.forget(self._clock())``), or asks ``_emitted`` after that ``forget``.
"""

from __future__ import annotations

from assembly_support import REFUND_POLICY_FIELDS, SECOND, RecordingMetrics, agent, tool
from prometheus_client import CollectorRegistry
from stall_support import tid

from tests.kept_support import KeptToolTraces
from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.assembly.completed import CompletedTrace
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.engine import Admission, Engine, EngineParts
from toolwatch.evaluation.pipeline import EvaluationPipeline
from toolwatch.evaluation.settings import EvaluationSettings
from toolwatch.ingest.decode_types import DecodedBatch
from toolwatch.model import ManualClock, SpanRecord
from toolwatch.sinks.findings import InMemoryFindingSink
from toolwatch.sinks.prometheus import PrometheusMetrics

_WINDOW = 256 * SECOND  # a bucket of 1 s
_LIMITS = AssemblyLimits(
    completion_wait_ns=2 * SECOND,
    max_trace_age_ns=300 * SECOND,
    late_span_window_ns=_WINDOW,
    overflow="evict_oldest",
)
_RUN = tid(7)


def _run(first_span: int) -> list[SpanRecord]:
    """A whole run of ``_RUN``: its agent span (the root) and one tool call in it."""
    return [
        tool(first_span + 1, first_span, "lookup_order", 1, 2, trace_id=_RUN),
        agent(first_span, None, "refund-bot", 0, 5, trace_id=_RUN),
    ]


def _second_run(flag_first: bool) -> CompletedTrace:
    """The run judged and emitted; its id's window passes with no poll in between (the
    ticker's next one is due); a request brings a second run of the same trace id with a
    span ingest rejected, ``flag_rejected`` and ``add`` in the order ``flag_first`` says;
    the buffer drained."""
    clock = ManualClock()
    buffer = TraceBuffer(_LIMITS, clock, RecordingMetrics())
    buffer.add(_run(1))
    clock.now_ns += 3 * SECOND
    (first,) = buffer.poll()
    assert first.complete
    clock.now_ns += _WINDOW + 2 * SECOND  # past the window and its bucket: to be forgotten
    assert buffer.has_room(_run(10), 0)  # evict_oldest: always, forgetting nothing
    if flag_first:  # as Engine.admit and OfflineAssembler.add do since 7097a45
        buffer.flag_rejected([_RUN])
        buffer.add(_run(10))
    else:  # as they did before
        buffer.add(_run(10))
        buffer.flag_rejected([_RUN])
    (second,) = buffer.drain()
    return second


def test_control_add_then_flag_flags_the_second_run() -> None:
    """The order before 7097a45 (held): the second run is flagged, and drained as a run in
    flight. Was: ``span_limit`` (a drain took its root for its end). Now: ``shutdown``: a
    rejected span may be a step of a run left running in the background, so a drain takes a
    run with one for over only once quiet ``completion_wait + lost_parent_wait``
    (``victims._root_ended``); unflagged, it would be ``complete``."""
    second = _second_run(flag_first=False)
    assert (len(second.spans), second.incomplete_reason) == (2, "shutdown")


def test_a_rejected_span_of_a_run_whose_id_just_expired_flags_it() -> None:
    """Scenario: as the control, in the engine's order now (``flag_rejected`` first).
    Expected: flagged, as in the control (``shutdown`` at this drain, was ``span_limit``:
    the control says why). Was (7097a45): judged ``complete`` (the stale id made
    ``flag_rejected`` take the run for a late one)."""
    second = _second_run(flag_first=True)
    assert (len(second.spans), second.incomplete_reason) == (2, "shutdown")


def test_through_the_engine_the_second_run_is_judged_incomplete() -> None:
    """The same through ``Engine.admit`` (a real engine, evaluation and Prometheus metrics):
    the first run admitted and judged by a ``tick``; the window passes, no tick between; a
    request with the second run and a span of it ingest rejected; drained.
    Expected: the second run's ToolTrace incomplete. Was (7097a45): complete."""
    engine, kept, clock = _engine()
    first = _run(1)
    assert engine.offer(DecodedBatch(tuple(first), 2, {}, None), "grpc") is Admission.ACCEPTED
    clock.now_ns += 3 * SECOND
    engine.tick()
    clock.now_ns += _WINDOW + 2 * SECOND
    second = tuple(_run(10))
    batch = DecodedBatch(
        second, len(second) + 1, {"invalid_parent_span_id": 1}, None, rejected_traces=(_RUN,)
    )
    assert engine.admit(batch, "grpc").admission is Admission.ACCEPTED
    engine.drain()
    assert [t.complete for t in kept.traces] == [True, False]


def _engine() -> tuple[Engine, KeptToolTraces, ManualClock]:
    settings = EvaluationSettings.model_validate({"policy": REFUND_POLICY_FIELDS})
    kept = KeptToolTraces()
    parts = EngineParts(
        limits=_LIMITS,
        evaluation=EvaluationPipeline(settings),
        normalize=settings.policy.normalizer(),
        findings=InMemoryFindingSink(),
        tooltraces=kept,
    )
    clock = ManualClock()
    return Engine(parts, clock, PrometheusMetrics(CollectorRegistry())), kept, clock
