"""Which trace an eviction takes (``_Victims``): the buffer's choice when it must make room.

An eviction comes under ``overflow: evict_oldest``, or under ``backpressure`` once the buffer
has refused requests for ``max_refusal_ns`` (stalled, ``assembly.refusals``), for a request it
takes that does not fit (``TraceBuffer.admit``). It takes, of the ``VICTIM_SCAN`` (16) oldest
runs, one whose end has come first (``_ended``: its anchor, or its root beside its agent span,
no span of it rejected at ingest, none of the root's service ended after it; judged as it came,
only its quiet period cut short), else the oldest in flight (judged ``evicted``), never a run
the request itself goes on with or starts.
A request that can never fit evicts nothing (``TraceBuffer``'s concern, not this module's).

Not thread-safe: the buffer's event loop calls it. Compiled, as ``assembly.buffer`` is.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

from toolwatch.assembly.anchoring import _Trace

__all__ = ["VICTIM_BATCH", "VICTIM_SCAN"]
#: How many of the oldest traces an eviction looks through for a run that has ended
#: (``_Victims``), before it takes the oldest: runs end in about the order they
#: began, so one that ended is near the front if any is.
VICTIM_SCAN: Final = 16
#: How many of the oldest traces an ``add`` reads at a time for what it may evict
#: (``_Victims``).
VICTIM_BATCH: Final = 64


def _root_ended(trace: _Trace) -> bool:
    """Whether ``trace``'s root came and nothing held says its run goes on after it: no span
    of the root's service ended after the root (``ran_on``: a run left running in the
    background, whose next batch or agent span may be to come; a span that ended before the
    root and waits for a parent lost it in export), and no span of it is not known
    (``parent_lost``: rejected at ingest, or dropped where the trace could not keep its id;
    it may be a step of such a run, or its agent span), which ``_Trace.anchored`` asks of a
    root too. What an eviction (``_ended``) and a drain (``buffer._over``) take for a run
    over, its quiet period cut short; either makes it one in flight until its trace is quiet
    ``completion_wait_ns + lost_parent_wait_ns`` and ``TraceBuffer._check`` judges it (judged
    as it came, a run left running would be judged as its first part, its rest ``late``)."""
    return trace.root_seen and not trace.parent_lost and not trace.ran_on()


def _ended(trace: _Trace) -> bool:
    """Whether ``trace``'s run has ended by what the buffer holds, though it may not have
    been quiet for ``completion_wait_ns`` yet: what an eviction judges as it came, not cut
    short (only a straggler could still come, and be late). Its anchor came; or its root,
    with an agent span (held, or dropped for a limit: it came), nothing held saying its run
    goes on (``_root_ended``: no span of the root's service ended after the root, none
    rejected). Not a root alone: a request's span, ended, whose run goes on in the
    background has that shape until the run's agent span comes. Remembered on the trace
    until its next span or rejection (``_Trace.ended_verdict``): an eviction asks it of the
    same oldest traces again and again, and asking may cost O(spans)."""
    verdict = trace.ended_verdict
    if verdict is None:
        # Neither root nor agent span: in flight. A trace of model calls alone may be
        # anchored by what encloses them, but that costs a walk of all its spans, and such
        # traces (no agent framework) are few: they are evicted as in flight.
        agents = bool(trace.agents) or (trace.drops is not None and bool(trace.drops.agents()))
        verdict = (trace.root_seen or agents) and (
            trace.anchored() or (agents and _root_ended(trace))
        )
        trace.ended_verdict = verdict
    return verdict


class _Victims:
    """The traces one ``add`` may evict, oldest first, none of the request's own (``own``:
    one it goes on with would be judged without what it brings, one it started would lose
    the rest of what it brings as late). ``take`` gives, of the ``VICTIM_SCAN`` oldest, one
    whose run has ended (``_ended``: judged as it came, only its quiet period cut short),
    else the oldest. They are read off the buffer ``VICTIM_BATCH`` at a time (the first time
    ``VICTIM_SCAN``: most adds evict one): the request's
    own traces, which may be the oldest thousands, are walked past once a batch, not once an
    eviction. Only what ``take`` gave leaves the buffer meanwhile (``add`` is one call)."""

    __slots__ = ("_batch", "_exhausted", "_own", "_pending", "_traces")

    def __init__(self, traces: OrderedDict[bytes, _Trace], own: set[bytes]) -> None:
        self._traces = traces
        self._own = own
        self._pending: list[_Trace] = []
        self._exhausted = False
        self._batch = VICTIM_SCAN  # most adds evict one trace: read no more at first

    def take(self) -> _Trace | None:
        if len(self._pending) < VICTIM_SCAN and not self._exhausted:
            self._read()
        pending = self._pending
        for at in range(min(VICTIM_SCAN, len(pending))):
            if _ended(pending[at]):
                return pending.pop(at)
        return pending.pop(0) if pending else None

    def _read(self) -> None:
        """The oldest traces not the request's (those pending among them: they are the
        oldest), from the buffer's start: ``VICTIM_SCAN`` the first time, then
        ``VICTIM_BATCH``."""
        own, pending, batch = self._own, [], self._batch
        self._batch = VICTIM_BATCH
        for trace in self._traces.values():
            if trace.trace_id not in own:
                pending.append(trace)
                if len(pending) == batch:
                    self._pending = pending
                    return
        self._pending = pending
        self._exhausted = True
