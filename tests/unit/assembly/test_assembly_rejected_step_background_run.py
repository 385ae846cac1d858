"""A span rejected at ingest, or a step dropped for a limit, no longer cuts a run left running
in the background in two (review of 7097a45, review-stall5; the "wait" rule).

The run: a request's span (the root) ended and came first; the steps of the run it left
running come in export batches 5 s apart (the OpenTelemetry SDKs' batch processors), each
naming the run's agent span, still running, as its local parent; the agent span comes last.

Was (7097a45, and before): any such loss set ``_Trace.parent_lost``, and the root anchored
the run at its next quiet ``completion_wait`` (2 s, between two export batches: nearly
always): the run was judged as its first batch, and every span after it dropped ``late``,
the calls the run made after never judged.

Now:

* a span dropped for a limit (``span_too_large``, ``buffer_full``, past the cap's enclosing
  spans) is known: it came, so a span that names it as its parent waits for it no more
  (``_Trace.dropped_ids``), and the others wait as before: the run waits for its agent span,
  unless the agent span was the one dropped. The held spans that name it are looked for once
  per drop (O(spans)); spans that come later are checked against ``dropped_ids`` when the
  trace is (``_Trace._awaits_local``), not per span taken;
* a span rejected at ingest is not known (its trace id is all ``DecodedBatch`` keeps): it
  counts as an arrival of its trace, and the root anchors the run only once the trace has been
  quiet ``completion_wait + lost_parent_wait`` (``TraceBuffer._check``'s lost-parent branch),
  as for a parent lost in export: a live run's batch processor exports within that wait. A
  rejected agent span costs that wait, no more: the run is judged ``span_limit`` then.
"""

from __future__ import annotations

from assembly_support import SECOND, RecordingMetrics, agent, span, tool
from stall_support import run_apart
from wait_support import LIMITS, RUN, judge_timed

from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.assembly.completed import CompletedTrace
from toolwatch.assembly.limits import LOST_PARENT_WAIT_NS
from toolwatch.model import ManualClock, SpanRecord, SpanRole

_ROOT = span(9, None, SpanRole.OTHER, 0, 3, trace_id=RUN, size_bytes=10)
_AGENT = agent(2, 9, "refund-bot", 1, 60, trace_id=RUN, size_bytes=10)
#: A step too large for the buffer (``max_buffered_bytes`` 1000).
_LARGE = tool(20, 2, "lookup_order", 4, 7, trace_id=RUN, size_bytes=2000, parent_local=True)
#: A batch is a request: its spans, ``None`` for one ingest rejected.
_Batch = list[SpanRecord | None]


def _step(n: int) -> SpanRecord:
    """A step of the background run: under its agent span 2 (local, still running), ended
    after the request's span."""
    return tool(n, 2, "lookup_order", 4, 7, trace_id=RUN, size_bytes=10, parent_local=True)


def _judge(
    batches: list[_Batch], gaps: tuple[int, ...] = ()
) -> tuple[list[tuple[str | None, int, int]], int]:
    """The root, then ``batches`` 5 s apart (or ``gaps`` seconds, batch by batch; a batch
    with a span ingest rejected flags its run first, as ``Engine.admit`` does), polled on
    time; then 300 s more. The traces judged (reason, spans, when: seconds since the root
    came) and the spans dropped ``late``."""
    timed = [(batch, gaps[at] if at < len(gaps) else 5) for at, batch in enumerate(batches)]
    return judge_timed([([_ROOT], 0), *timed])


def _background_run(
    rejected: bool, too_large: bool = False
) -> tuple[list[tuple[str | None, int]], int]:
    """Three steps, then the agent span: the first batch with a step ingest rejected if
    ``rejected``, and one more step dropped ``span_too_large`` if ``too_large``."""
    first: _Batch = [*([None] if rejected else []), _step(10), *([_LARGE] if too_large else [])]
    judged, late = _judge([first, [_step(11)], [_step(12)], [_AGENT]])
    return [(reason, n) for reason, n, _ in judged], late


def test_control_a_background_run_waits_for_its_agent_span() -> None:
    """No span rejected (held): one trace, whole, complete; none ``late``."""
    assert _background_run(rejected=False) == ([(None, 5)], 0)


def test_a_background_run_with_a_rejected_step_waits_for_its_agent_span() -> None:
    """Scenario: as the control, a step of the first batch rejected at ingest.
    Was (7097a45, and before): judged 2 s after the first batch (2 spans), the other steps
    and the agent span dropped ``late``.
    Now: one trace, every span taken in it, flagged ``span_limit``; none ``late``."""
    assert _background_run(rejected=True) == ([("span_limit", 5)], 0)


def test_a_background_run_with_a_step_too_large_waits_for_its_agent_span() -> None:
    """Scenario: as the control, a step of the first batch dropped ``span_too_large`` (no span
    names it as its parent, as the agent span it waits for).
    Was (7097a45, and before): cut 2 s after the first batch, as with a rejected step.
    Now: one trace, every span taken in it, flagged ``span_limit``; none ``late``."""
    assert _background_run(rejected=False, too_large=True) == ([("span_limit", 5)], 0)


def test_a_step_too_large_that_a_held_span_names_is_no_parent_waited_for() -> None:
    """Scenario: the step dropped too large is the parent of a span held (its HTTP call,
    which ended first and came in the same batch, before it).
    Expected: the call waits for the dropped step no more, and the other steps still wait
    for the agent span: one trace, whole but the step, ``span_limit``; none ``late``.
    Was: judged 2 s after the agent span came (12 s).
    Now: 7 s after (17 s): a run left running in the background (``_Trace.ran_on``)."""
    call = span(21, 20, SpanRole.OTHER, 5, 6, trace_id=RUN, size_bytes=10, parent_local=True)
    batches: list[_Batch] = [[call, _step(10), _LARGE], [_step(11)], [_AGENT]]
    assert _judge(batches) == ([("span_limit", 5, 17)], 0)


def test_a_span_naming_a_step_dropped_before_it_came_waits_for_it_no_more() -> None:
    """Scenario: the step dropped too large comes before its HTTP call, which comes in the next
    batch (not how one batch processor orders spans, but a Collector's may).
    Expected: as when the call came first: the dropped step is remembered (``dropped_ids``),
    and the call does not hold the run, whose agent span came, to ``max_trace_age``
    (without it: a step ended after the root waiting for its local parent, the run's agent
    span come or not, ``timed_out``).
    Was: judged 2 s after the agent span came (12 s).
    Now: 7 s after (17 s): a run left running in the background (``_Trace.ran_on``)."""
    call = span(21, 20, SpanRole.OTHER, 5, 6, trace_id=RUN, size_bytes=10, parent_local=True)
    batches: list[_Batch] = [[_step(10), _LARGE], [call], [_AGENT]]
    assert _judge(batches) == ([("span_limit", 4, 17)], 0)


def test_an_agent_span_dropped_too_large_lets_the_root_anchor_the_run() -> None:
    """Scenario: the agent span itself is too large (every step names it).
    Expected: the steps wait for it no more: the root anchors the run, judged ``span_limit``;
    none ``late``.
    Was: quiet ``completion_wait`` already (its last step came 5 s before): at once (10 s).
    Now: its steps ended after the root (``_Trace.ran_on``): once quiet ``completion_wait +
    lost_parent_wait``, 7 s after its last step (12 s)."""
    large_agent = agent(2, 9, "refund-bot", 1, 60, trace_id=RUN, size_bytes=2000)
    batches: list[_Batch] = [[_step(10)], [_step(11)], [large_agent]]
    assert _judge(batches) == ([("span_limit", 3, 12)], 0)


def test_a_rejected_agent_span_costs_the_lost_parents_wait_and_no_more() -> None:
    """Scenario: the last request holds only the agent span, and ingest rejects it.
    Expected: the run is judged ``span_limit``, with the spans it holds, once quiet
    ``completion_wait + lost_parent_wait`` (7 s) after the rejection: not held to
    ``max_trace_age`` (300 s, ``timed_out``)."""
    batches: list[_Batch] = [[_step(10)], [_step(11)], [None]]  # rejected at 10 s
    wait = 2 + LOST_PARENT_WAIT_NS // SECOND
    assert _judge(batches) == ([("span_limit", 3, 10 + wait)], 0)


def test_a_rejection_restarts_the_quiet_period_of_a_run_that_waited() -> None:
    """Scenario: a slow step (10 s, a reasoning model's call): the run, quiet past
    ``completion_wait + lost_parent_wait``, waits for its agent span; then that step comes,
    alone in its request, and ingest rejects it; the run goes on.
    Expected: the rejection is an arrival of the run: its root does not anchor it at once
    (quiet for 10 s already), the run waits for its agent span; none ``late``. Judged 7 s
    after the agent span (Was: 2 s, when any agent span held excused the rejection; no span
    held says which run a rejected span was of: review-wait3)."""
    batches: list[_Batch] = [[_step(10)], [None], [_step(12)], [_AGENT]]  # 0, 10, 15, 20 s
    assert _judge(batches, gaps=(10,)) == ([("span_limit", 4, 27)], 0)


def test_a_run_with_a_rejected_step_is_judged_at_a_later_step_slower_than_the_wait() -> None:
    """Scenario: a step of the run is rejected; later a step runs 10 s (nothing of the run
    ends, so nothing is exported meanwhile). What the rule does not handle: the rejected span
    may have been the agent span, and a quiet ``completion_wait + lost_parent_wait`` (7 s)
    reads as the run over. Expected: judged 7 s after the step before the slow one, the slow
    step and the agent span dropped ``late``; set ``lost_parent_wait_seconds`` above the
    slowest step to wait for it (docs/configuration.md)."""
    batches: list[_Batch] = [[None, _step(10)], [_step(11)], [_AGENT]]  # 0, 10, 15 s
    assert _judge(batches, gaps=(10,)) == ([("span_limit", 2, 7)], 2)


def test_a_rejection_before_the_runs_first_span_waits_as_one_after() -> None:
    """Scenario: ingest rejects a span of the run before its root comes (the id remembered
    until its trace comes, ``HeldTraces._limited``); the run is the control's.
    Expected: as a rejection after the root: the run waits for its agent span, judged whole
    ``span_limit``; none ``late``."""
    clock = ManualClock()
    metrics = RecordingMetrics()
    buffer = TraceBuffer(LIMITS, clock, metrics)
    buffer.flag_rejected([RUN])
    out: list[CompletedTrace] = []
    for batch in [[_ROOT, _step(10)], [_step(11)], [_step(12)], [_AGENT]]:
        buffer.add(batch)
        for _ in range(25):
            clock.now_ns += SECOND // 5
            out.extend(buffer.poll())
    clock.now_ns += 2 * SECOND
    out.extend(buffer.poll())
    assert [(t.incomplete_reason, len(t.spans)) for t in out] == [("span_limit", 5)]
    assert metrics.dropped["late"] == 0


def test_a_run_with_a_rejected_step_still_in_flight_at_shutdown_is_judged_shutdown() -> None:
    """Scenario: the buffer drains (SIGTERM) while the run with a rejected step (3 s after
    its first spans) waits for its agent span. Expected: ``shutdown``, as without the
    rejection: which span was rejected is not known, and the run was in flight; its last
    arrival is the rejected span's."""
    clock = ManualClock()
    buffer = TraceBuffer(LIMITS, clock, RecordingMetrics())
    buffer.add([_ROOT, _step(10)])
    clock.now_ns += 3 * SECOND
    buffer.flag_rejected([RUN])
    (drained,) = buffer.drain()
    assert (drained.incomplete_reason, len(drained.spans)) == ("shutdown", 2)
    assert drained.last_arrival_ns == clock.now_ns


_REJECTED_AGENT_SCRIPT = """
from assembly_support import SECOND, TRACE, agent, span, tool
from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.metrics import NoopMetrics
from toolwatch.model import ManualClock, SpanRole

for local_wait in (0, 30 * SECOND):
    clock = ManualClock()
    limits = AssemblyLimits(completion_wait_ns=2 * SECOND, local_parent_wait_ns=local_wait)
    buffer = TraceBuffer(limits, clock, NoopMetrics())
    buffer.add([
        span(9, None, SpanRole.OTHER, 0, 100, name="POST /chat"),  # the request's span, ended
        tool(3, 1, "lookup_order", 150, 200, parent_local=True),  # the background run's step
    ])
    out, judged = [], []
    for seconds in (2, 8, 1):  # waits for the agent span past the lost parent's wait
        clock.now_ns += seconds * SECOND
        out += buffer.poll()
    rejected = clock.now_ns
    buffer.flag_rejected([TRACE])  # the run's agent span, rejected at ingest
    for _ in range(40):
        clock.now_ns += SECOND // 2
        done = buffer.poll()
        out += done
        judged += [clock.now_ns - rejected] * len(done)
    print([t.incomplete_reason for t in out], [when / SECOND for when in judged])
"""


def test_poll_judges_a_run_whose_agent_span_was_rejected_and_returns() -> None:
    """Scenario: a background run waits for its agent span past the lost parent's wait (with
    ``local_parent_wait`` unset and set); then its agent span is rejected.
    Expected: ``poll`` returns (run apart: a hang in ``poll`` is not interrupted compiled),
    and judges the run ``span_limit`` ``completion_wait + lost_parent_wait`` (7 s) after the
    rejection (before ``local_parent_wait``, 30 s, where set)."""
    assert run_apart(_REJECTED_AGENT_SCRIPT, timeout=30) == "\n".join(
        ["['span_limit'] [7.0]", "['span_limit'] [7.0]"]
    )
