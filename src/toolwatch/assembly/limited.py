"""The traces a limit or ingest cut before any span of theirs was held (``LimitedTraces``),
and what is kept of the spans dropped: each trace is flagged incomplete when its first span
is held, and those spans replayed as dropped then (``HeldTraces._store``,
``_Trace.came``). A span dropped before its trace is held came, as one dropped after it: a
root anchors the trace, a parent is waited for no more, what the span waited for still is.

Bounded, in two ways:

- ``max_traces`` trace ids, the oldest forgotten first (its trace, when it comes, is not
  flagged);
- ``DROPPED_IDS`` spans a trace, and ``max_traces`` spans in all. When that budget is full,
  the spans kept of the oldest traces that keep any (not the trace of the span to keep) are
  forgotten, each such trace id kept marked ``lost`` (a span of it not known). A trace whose
  every span was dropped is never held: kept whole until newer traces pushed it out, it held
  the budget, and the newest drops, those of the traces about to come, were not known. A
  trace that keeps no span (one whose span ingest rejected) frees nothing, and is left as it
  is.

A span dropped past ``DROPPED_IDS`` in its trace (or where its trace alone fills the budget),
like one rejected at ingest (its trace id is all the decoder hands on), is not known: the
trace is ``parent_lost``. A retry of a span kept changes nothing.

Each span kept holds about 260 bytes (``DroppedSpan``: its tuple, two ids, its end; its
service is shared with its request's other spans; its role and flags are constants), each
trace id about 180: 4.3 MB at the default ``max_traces`` (10,000), measured with
``tracemalloc`` before the tuple's seventh item (8 bytes a span). Not counted in
``max_buffered_bytes``: no trace held holds them, and evicting one could not free them. Once
its trace is held, what a span kept holds is counted in the trace's bytes (``_Trace.came``).

Compiled, as ``assembly.held_traces`` is. Not thread-safe: call every method from one event
loop.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final, TypeAlias

from toolwatch.assembly.dropped import DROPPED_IDS, DroppedSpan

__all__ = ["Limited", "LimitedTraces"]

#: What is remembered of a trace not held: whether a span of it is not known (``lost``),
#: and the spans dropped that are kept.
Limited: TypeAlias = tuple[bool, tuple[DroppedSpan, ...]]

_NOTHING: Final[Limited] = (False, ())


class LimitedTraces:
    """The trace ids not held yet whose span a limit dropped or ingest rejected (module
    docstring)."""

    def __init__(self, max_traces: int) -> None:
        self._max = max_traces
        # Trace id -> what is remembered of it, in the order they were first flagged.
        self._traces: OrderedDict[bytes, Limited] = OrderedDict()
        self._spans = 0  # the spans kept, in all
        # The trace ids that keep a span, in the order they first kept one (``_forget_for``).
        self._holding: OrderedDict[bytes, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._traces)

    @property
    def spans(self) -> int:
        """How many dropped spans are kept, in all (at most ``max_traces``)."""
        return self._spans

    def flag(self, trace_id: bytes, span: DroppedSpan | None) -> None:
        """A span of ``trace_id``, not held, was dropped for a limit (``span``: what is
        kept of it), or rejected at ingest (``None``)."""
        traces = self._traces
        was = traces.get(trace_id)
        if was is None and len(traces) >= self._max:  # the oldest forgotten: room for this one
            oldest, (_, gone) = traces.popitem(last=False)
            self._spans -= len(gone)
            self._holding.pop(oldest, None)
        lost, kept = _NOTHING if was is None else was
        if span is None:
            lost = True
        elif not any(k[0] == span[0] for k in kept):  # a retry of one kept: known already
            if len(kept) < DROPPED_IDS:
                self._forget_for(trace_id)
            if len(kept) >= DROPPED_IDS or self._spans >= self._max:
                lost = True
            else:
                kept += (span,)
                self._spans += 1
                self._holding[trace_id] = None
        traces[trace_id] = (lost, kept)

    def _forget_for(self, trace_id: bytes) -> None:
        """Room in the span budget for a span of ``trace_id``: the spans kept of the oldest
        traces but its own forgotten, their ids kept marked ``lost`` (each once: O(1)
        amortized); an entry that keeps no span frees none, and is left as it is."""
        traces, holding = self._traces, self._holding
        while self._spans >= self._max:
            oldest = next((t for t in holding if t != trace_id), None)
            if oldest is None:
                return  # the trace alone fills the budget
            del holding[oldest]
            self._spans -= len(traces[oldest][1])
            traces[oldest] = (True, ())

    def take(self, trace_id: bytes) -> Limited | None:
        """What is remembered of ``trace_id``, forgotten here (its first span is held), or
        ``None``: nothing was."""
        if not self._traces:
            return None
        limited = self._traces.pop(trace_id, None)
        if limited is not None:
            self._spans -= len(limited[1])
            self._holding.pop(trace_id, None)
        return limited
