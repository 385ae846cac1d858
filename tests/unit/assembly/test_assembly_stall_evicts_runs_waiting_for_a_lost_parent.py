"""Was (found by review, fixed): the 5 s default evicts runs that would be judged complete at 7 s.

``_refusal_can_end`` and docs/configuration.md promise "At least completion_wait_seconds, so
that ended runs are judged before any is evicted". But an ended run whose root has come and
one of whose spans names a local parent that never came (lost in export: exactly what senders
do to batches under backpressure) is judged complete only ``completion_wait +
lost_parent_wait`` after its last span: 2 + 5 = 7 s by default, and longer with
``local_parent_wait_seconds`` or a raised ``lost_parent_wait_seconds`` (30 s for a sender
exporting every 30 s, as the docs advise). ``max_refusal_seconds`` (5 s then, validated only
against ``completion_wait_seconds``) evicts it first: judged ``evicted``, policy only.

Fixed by the victim choice (``victims._Victims``): an eviction takes a run that has
ended, judged as it came, before one in flight; the default limit was kept at 5 s, under the SDKs'
10 s export timeout, rather than following the longest wait an ended run may be held for
(review-wait6 defect 5 raised it to 7 s, both default waits: a run left running in the
background waits them; a raised ``lost_parent_wait_seconds`` raises it too).
"""

from __future__ import annotations

from assembly_support import SECOND, TRACE, agent, llm, span, tool
from stall_support import in_flight, make, offer, tick, verdicts

from toolwatch.assembly.completed import CompletedTrace
from toolwatch.assembly.limits import MAX_REFUSAL_NS, AssemblyLimits
from toolwatch.model import SpanRecord, SpanRole


def _lost_model_call_run() -> list[SpanRecord]:
    """tests/unit/assembly/test_assembly_buffer.py's run whose model call span was lost in
    export: judged complete after completion_wait + lost_parent_wait."""
    return [
        span(9, None, SpanRole.OTHER, 0, 900, name="POST /support"),
        agent(1, 9, "refund-bot", 1, 890, parent_local=True),
        span(3, 2, SpanRole.OTHER, 12, 95, name="POST", parent_local=True),
        tool(5, 1, "issue_refund", 205, 260, call_id="c", parent_local=True),
        llm(4, 1, 100, 200, parent_local=True),
    ]


def _verdict_at_seven_seconds(limits: AssemblyLimits) -> str | None:
    buffer, clock, _ = make(limits)
    out: list[CompletedTrace] = []
    assert offer(buffer, _lost_model_call_run(), out)  # the run is over: root and all came
    assert offer(buffer, in_flight(2), out)  # another run, in flight
    assert not offer(buffer, in_flight(3), out)  # refused: the buffer holds max_traces
    for _ in range(int(MAX_REFUSAL_NS / SECOND)):
        tick(buffer, clock, 1, out)
        offer(buffer, in_flight(3), out)  # the sender retries every second
    tick(buffer, clock, 2, out)  # 7 s: the lost parent's wait is over
    return verdicts(out).get(TRACE, "absent")


def test_control_without_the_limit_the_run_is_judged_complete_at_seven_seconds() -> None:
    """Control: the run is over, and is judged so once its lost parent's wait passed."""
    limits = AssemblyLimits(completion_wait_ns=2 * SECOND, max_traces=2, max_refusal_ns=0)
    assert _verdict_at_seven_seconds(limits) is None


def test_an_ended_run_waiting_for_a_lost_parent_is_not_evicted_before_its_wait() -> None:
    """Was: with the default limit the same run was evicted at 5 s (``evicted``). Now: an
    eviction takes a run that has ended first, judged as it came."""
    limits = AssemblyLimits(completion_wait_ns=2 * SECOND, max_traces=2)
    assert _verdict_at_seven_seconds(limits) is None
