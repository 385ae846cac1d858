"""Review of the "wait" rule (merge 9ce1a29, review-wait): what it got wrong, each now fixed.

The run, as in ``tests/unit/assembly/test_assembly_rejected_step_background_run.py``: a
request's span (the root, 9) ended and came first; the run it left running in the background
sends its steps in export batches 5 s apart, each under the run's agent span (2, local, still
running); the agent span comes last.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from assembly_support import SECOND, RecordingMetrics, agent, span
from stall_support import run_apart, tid
from wait_support import LIMITS, ROOT, RUN, TWO_EVICTING, judge_timed, run_step

from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.model import ManualClock, SpanRecord, SpanRole

_AGENT = agent(2, 9, "refund-bot", 1, 60, trace_id=RUN, size_bytes=10, parent_local=True)
_Batch = list[SpanRecord | None]


def _judge(
    batches: list[_Batch], first: list[SpanRecord] | None = None, limits: AssemblyLimits = LIMITS
) -> tuple[list[tuple[str | None, int, int]], int]:
    """``first`` (the root by default), then ``batches`` 5 s apart (``None``: a span ingest
    rejected), polled every 0.2 s; then 300 s more. The traces judged (reason, spans, seconds
    since the first batch) and the spans dropped ``late``."""
    opening: list[SpanRecord | None] = [ROOT] if first is None else list(first)
    return judge_timed([(opening, 0), *((batch, 5) for batch in batches)], limits)


def test_a_rejected_step_alone_in_its_batch_does_not_cut_the_run() -> None:
    """Was: the wait rule holds only while a held span waits for a local parent. The
    root came, then a batch whose only step ingest rejected (a slow step exported alone, or a
    whole batch of steps rejected): the trace holds the root alone, nothing awaits, and
    ``anchored()`` (which no longer reads ``parent_lost``) lets the root anchor the run at the
    next quiet ``completion_wait`` (2 s): the root is judged alone (not an agent run, so its
    id is not remembered) and the rest of the run makes a second trace that waits for the
    agent span's local parent, the root, until ``max_trace_age`` (``timed_out``, 305 s).
    docs/configuration.md says such a trace waits ``lost_parent_wait`` more "whatever its
    spans wait for". Expected: one trace, ``span_limit``, the 4 spans taken."""
    judged, late = _judge([[None], [run_step(11)], [run_step(12)], [_AGENT]])
    assert ([(r, n) for r, n, _ in judged], late) == ([("span_limit", 4)], 0)


def test_a_step_too_large_alone_in_its_batch_does_not_cut_the_run() -> None:
    """Was: a step dropped ``span_too_large`` that is the only span of its batch (a slow
    step: a reasoning model's call, exported alone) is remembered in ``dropped_ids`` as a
    parent no span waits for, but what *it* waited for (its own parent, the agent span, local
    and running) is forgotten: the held spans are the root alone, nothing awaits a local
    parent, and the root anchors the run at the next quiet ``completion_wait``: cut in two,
    the rest ``late``. A rejected step in its place (control above) is waited for: a span
    whose identity is known is treated worse than one that is not.
    Now: as the control, one trace, ``span_limit``, nothing late."""
    judged, late = _judge([[run_step(20, size=2000)], [run_step(11)], [run_step(12)], [_AGENT]])
    assert ([(r, n) for r, n, _ in judged], late) == ([("span_limit", 4)], 0)


def test_a_step_too_large_whose_children_came_with_it_does_not_cut_the_run() -> None:
    """Was, same cause: a step (a model call, 20, under the agent span) dropped too large
    with the HTTP call it made (21, naming it) in its batch. 21 waits for 20 no more
    (``dropped_ids``), and nothing waits for the agent span 2 that 20 named: cut at the next
    quiet ``completion_wait``, the steps after it and the agent span ``late``.
    Now: one trace, ``span_limit``, nothing late."""
    call = span(21, 20, SpanRole.OTHER, 5, 6, trace_id=RUN, size_bytes=10, parent_local=True)
    judged, late = _judge([[call, run_step(20, size=2000)], [run_step(11)], [_AGENT]])
    assert ([(r, n) for r, n, _ in judged], late) == ([("span_limit", 4)], 0)


def test_a_root_dropped_too_large_as_its_trace_first_span_counts_as_arrived() -> None:
    """Was (older than the merge, now contradicted by docs/configuration.md: "A span dropped
    for a limit ... is known", "a root dropped all the same still counts as arrived"): the
    request's span (the root) of a background run ended first and is too large. Its trace is
    not held yet, so ``_flag_limited`` only remembers the trace id (``_limited``): the root is
    not counted as arrived (``_root``), and the agent span, whose parent is that local root,
    never anchors the run: held to ``max_trace_age`` and judged ``timed_out`` (300 s), where
    the same root dropped once the trace is held lets the run be judged ``completion_wait``
    after the agent span.
    Now: judged ``span_limit`` shortly after the agent span (well before 300 s)."""
    big_root = span(9, None, SpanRole.OTHER, 0, 3, trace_id=RUN, size_bytes=2000)
    judged, late = _judge([[run_step(10)], [run_step(11)], [_AGENT]], first=[big_root])
    assert ([(r, n) for r, n, _ in judged], late) == ([("span_limit", 3)], 0)
    assert judged[0][2] < 20, judged


class _CountingSpans(dict[bytes, SpanRecord]):
    """A trace's spans that count the walks over them (``values()``): what a drop costs."""

    walks = 0

    def values(self):  # type: ignore[override]
        type(self).walks += 1
        return super().values()


def test_copies_of_one_dropped_span_walk_the_trace_once_each() -> None:
    """Was (cost): ``_Trace.dropped`` bounds its O(held spans) walk by ``DROPPED_IDS``
    distinct ids, but a drop of an id it holds already walks again: one request bringing the
    same too-large (or ``buffer_full``) span 1,000 times, to a trace of 4,000 spans, walks
    4,000,000 spans (a duplicate is only recognised against the spans held, and a dropped span
    is not held). Measured pure Python: 1,000 drops of one id 0.14 s, of 1,000 ids 0.005 s;
    a 20 MiB request holds ~100,000 small copies. Expected: a drop of an id already in
    ``dropped_ids`` walks nothing (it changes nothing: a held span naming it arrived since
    has already restarted the trace's checks): at most ``DROPPED_IDS`` walks.
    The fix: ``if span_id in ids: return False`` before the walk."""
    limits = AssemblyLimits(
        completion_wait_ns=2 * SECOND, max_trace_age_ns=300 * SECOND, max_buffered_bytes=100_000
    )
    buffer = TraceBuffer(limits, ManualClock(), RecordingMetrics())
    buffer.add([ROOT, *(run_step(100 + k) for k in range(4000))])
    trace = buffer._traces[RUN]
    trace.spans = _CountingSpans(trace.spans)
    buffer.add([run_step(50_000, parent=9, size=200_000)] * 1000)  # its parent held: walks
    assert _CountingSpans.walks == 1  # the first drop of that id; none for its copies


def test_a_root_dropped_buffer_full_before_its_trace_is_held_counts_as_arrived() -> None:
    """Was, as the root dropped too large first, with the default limits' way to it: a full
    buffer (``max_traces`` 1, another run held; ``add`` under ``backpressure``, as for a
    request let through as one that can never fit) drops a background run's root
    ``buffer_full`` before its trace is held. When room is made (the other run judged), the
    run's steps and agent span come, and wait for the root (the agent span's local parent)
    until ``max_trace_age``: ``timed_out`` at 305 s. Then (the fix): ``span_limit`` once the
    agent span had been quiet ``completion_wait`` (17 s).
    Now: ``span_limit`` once it has been quiet ``completion_wait + lost_parent_wait`` (22 s):
    the run's spans ended after its root, a run left running in the background
    (``_Trace.ran_on``)."""
    other = agent(1, None, "refund-bot", 0, 5, trace_id=tid(7), size_bytes=10)
    limits = AssemblyLimits(
        completion_wait_ns=2 * SECOND, max_trace_age_ns=300 * SECOND, max_traces=1
    )
    judged, late = _judge(
        [[], [run_step(10)], [run_step(11)], [_AGENT]], first=[other, ROOT], limits=limits
    )
    assert (judged, late) == ([(None, 1, 2), ("span_limit", 3, 22)], 0)


def test_an_eviction_judges_a_run_whose_only_step_was_dropped_as_in_flight() -> None:
    """Was, the first one's cause in the victim rule (``victims._ended`` reads
    ``anchored()``): under ``evict_oldest`` a background run holding its root, its only step
    dropped too large (the step waited for the running agent span), is evicted by two new
    runs as one whose end has come, judged as it came (``span_limit``, its quiet period cut
    short), where the same run with the step held is judged ``evicted`` (in flight).
    Now: ``evicted``."""
    verdicts = {}
    for step in (run_step(10), run_step(20, size=2000)):
        buffer = TraceBuffer(TWO_EVICTING, ManualClock(), RecordingMetrics())
        buffer.add([ROOT])
        buffer.add([step])
        evicted = buffer.add([agent(1, None, "bot", 0, 5, trace_id=tid(n)) for n in (6, 7)])
        verdicts[step.size_bytes] = [(t.trace_id, t.incomplete_reason) for t in evicted]
    assert verdicts == {10: [(RUN, "evicted")], 2000: [(RUN, "evicted")]}


# What was probed and held (these passed before the fixes too).
def test_rejections_every_few_seconds_keep_a_run_at_most_max_trace_age() -> None:
    """A background run (root, one step waiting for its agent span) whose sender's later steps
    are all rejected, one every 3 s, for ever: each rejection is an arrival (the quiet period
    restarts), so the lost-parent wait never passes, but the trace is judged ``timed_out`` at
    ``max_trace_age`` (300 s), not later, and ``poll`` returns each time."""
    clock = ManualClock()
    buffer = TraceBuffer(LIMITS, clock, RecordingMetrics())
    buffer.add([ROOT, run_step(10)])
    out = []
    for _ in range(200):  # 600 s
        clock.now_ns += 3 * SECOND
        buffer.flag_rejected([RUN])
        out.extend((t.incomplete_reason, clock.now_ns // SECOND) for t in buffer.poll())
    assert [r for r, _ in out] == ["timed_out"]
    assert 300 <= out[0][1] < 303, out  # polled every 3 s
    assert buffer.buffered_traces == 0


def test_more_than_sixteen_dropped_parents_fall_back_to_the_lost_parent_wait() -> None:
    """A background run whose 20 steps each lost their parent (a model call dropped too large,
    named by the held HTTP call under it): past ``DROPPED_IDS`` (16) the trace is
    ``parent_lost``; the calls naming the 17th to 20th still wait, but the lost-parent branch
    judges the run once quiet 2 s + 5 s, ``span_limit``: neither at ``max_trace_age`` nor
    cut before the agent span (which comes 5 s later)."""
    batch = []
    for k in range(20):
        model = run_step(100 + k, size=2000)
        call = span(
            200 + k, 100 + k, SpanRole.OTHER, 5, 6, trace_id=RUN, size_bytes=10, parent_local=True
        )
        batch += [call, model]
    judged, late = _judge([[run_step(10), *batch], [run_step(11)], [_AGENT]])
    assert ([(r, n) for r, n, _ in judged], late) == ([("span_limit", 24)], 0)


def test_poll_returns_for_a_run_whose_spans_are_all_dropped_or_rejected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Run apart with a timeout (compiled code is not interrupted): a trace whose every later
    span is dropped too large or rejected, polled every 0.1 s for 400 s: ``poll`` returns and
    the trace is judged once."""
    script = """
from assembly_support import SECOND, RecordingMetrics
from wait_support import LIMITS, ROOT, RUN, run_step
from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.model import ManualClock
clock = ManualClock(); buffer = TraceBuffer(LIMITS, clock, RecordingMetrics())
buffer.add([ROOT, run_step(10)]); judged = []
for k in range(4000):
    clock.now_ns += SECOND // 10
    if k % 30 == 0:
        buffer.add([run_step(1000 + k, size=2000)]); buffer.flag_rejected([RUN])
    judged += [t.incomplete_reason for t in buffer.poll()]
print(judged)
"""
    here = str(Path(__file__).parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
    assert run_apart(script, timeout=60).strip() == "['timed_out']"
