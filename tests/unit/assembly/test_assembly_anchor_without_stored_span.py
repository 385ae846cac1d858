"""Was (found by review, fixed): what anchors a trace without a span stored reschedules
nothing, so a trace whose checks found no anchor is held to ``max_trace_age`` (300 s by
default) though it is anchored now.

``_check`` leaves a trace without an anchor scheduled at ``max_trace_age`` (a background run
once its lost parent's wait passed: ``lost_parent_waited``; any unrooted trace once
``completion_wait`` passed). Two things anchor it later without ``add`` (which would
reschedule it):

* a root dropped (``span_too_large``; past the 64 enclosing spans; ``buffer_full``):
  ``_Trace.dropped`` sets ``root_seen`` and ``_flag_limited`` ``span_limited``, so
  ``anchored()`` holds ("a root dropped all the same still anchors its trace");
* a span of a rooted trace rejected at ingest (``flag_rejected``): ``span_limited`` makes its
  root anchor it ("may have lost that parent: its root anchors it").

Nothing is pushed on the heap: the run waits the whole ``max_trace_age`` in the buffer (room
a full buffer needs), judged minutes late; the background run is then judged ``timed_out``
(``cause`` wins), which ``required`` and ``call_count`` minimums skip, where the same flag
before its check gives ``span_limit``.

Suggested fix: where ``span_limited`` or ``root_seen`` is set outside ``add``, clear
``anchor_missing``/``lost_parent_waited`` and ``_schedule`` the trace (due at once, or at
``last_ns + completion_wait``), as ``add`` would.
"""

from __future__ import annotations

from assembly_support import agent, span, tool
from stall_support import LIMITS, make, offer, tick, tid, verdicts

from toolwatch.assembly.completed import CompletedTrace
from toolwatch.model import SpanRole


def test_a_trace_anchored_by_a_dropped_root_is_judged_after_the_wait() -> None:
    buffer, clock, metrics = make(LIMITS)  # completion_wait 2 s, max_trace_age 300 s
    out: list[CompletedTrace] = []
    # The agent span came, under a workflow span its flags say is local: it waits for it.
    handed = [agent(2, 7, "refund-bot", 0, 5, trace_id=tid(1), size_bytes=10, parent_local=True)]
    assert offer(buffer, handed, out)
    tick(buffer, clock, 3, out)  # checked: no anchor yet, next looked at at max_trace_age
    assert out == []
    root = span(7, None, SpanRole.OTHER, 0, 6, trace_id=tid(1), size_bytes=2**30)
    assert offer(buffer, [root], out)  # too large: dropped, anchors the trace all the same
    assert metrics.dropped == {"span_too_large": 1}

    tick(buffer, clock, 10, out)

    # Was: held until 300 s, then judged.
    assert verdicts(out) == {tid(1): "span_limit"}


def test_a_background_run_whose_span_was_rejected_is_judged_after_the_wait() -> None:
    buffer, clock, _ = make(LIMITS)
    out: list[CompletedTrace] = []
    background = [  # a request's span, ended, and a step of the run it left running
        span(9, None, SpanRole.OTHER, 0, 100, name="POST /chat", trace_id=tid(1), size_bytes=10),
        tool(3, 1, "lookup_order", 150, 200, trace_id=tid(1), size_bytes=10, parent_local=True),
    ]
    assert offer(buffer, background, out)
    tick(buffer, clock, 2, out)
    tick(buffer, clock, 6, out)  # the lost parent's wait passed: it waits for its agent span
    assert out == []
    buffer.flag_rejected([tid(1)])  # rejected at ingest: its root anchors it once quiet 7 s

    tick(buffer, clock, 10, out)

    # Was: held until 300 s, then judged ``timed_out``.
    assert verdicts(out) == {tid(1): "span_limit"}
