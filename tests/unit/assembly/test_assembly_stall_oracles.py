"""What held in the review of 4bd55ec (review-stall4): properties that pass.

* ``has_room`` against an oracle that is not ``_takes``: a deep copy of the buffer with the
  span and trace bounds lifted and its bytes zeroed takes what ``add`` takes with room to
  spare; the request fits now, or can never fit, exactly when ``has_room`` (``backpressure``,
  never stalled) says yes. Traffic: spans of 4 traces with random parents (roots; parents
  that are span ids of another trace; parent cycles), sizes too large for the buffer,
  duplicates within a request, chains of up to 70 spans each enclosing the one before
  (``ENCLOSING_SPANS`` exhausted at a cap of 1), clock steps past ``max_trace_age`` (late
  spans mixed with new ones of the same trace id). Ran 1,500 examples at 8 spans / 1,000
  bytes (twice) and 800 at 150 / 3,000 (every outcome seen: fits, refused, can never fit).
* ``_Victims`` against the choice it replaced (``_victim`` of 3a1bfda, kept here as the
  oracle): under ``evict_oldest``, requests of up to 40 spans of 120 traces, 5 to 90 traces
  of room: the same traces evicted, with the same verdicts, in the same order; the same
  polls and drain. Ran 600 examples.

Pure Python only: a compiled buffer can neither be deep-copied nor subclassed.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
from assembly_support import SECOND, RecordingMetrics, span
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stall_support import tid

from toolwatch.assembly import buffer as buffer_module
from toolwatch.assembly.anchoring import _Trace
from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.assembly.completed import CompletedTrace
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.assembly.victims import VICTIM_SCAN, _ended, _Victims
from toolwatch.model import ManualClock, SpanRecord, SpanRole

pytestmark = pytest.mark.skipif(
    not buffer_module.__file__.endswith(".py"), reason="deep copies and a subclass of the buffer"
)

_ROLES = (SpanRole.OTHER, SpanRole.AGENT, SpanRole.TOOL, SpanRole.LLM)
_SETTINGS = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)


_Drawn = tuple[int, int, int | None, int, int, bool]


def _mk(drawn: _Drawn) -> SpanRecord:
    """Span ``n`` of trace ``t`` under ``parent``: its size, role and parent flag drawn."""
    t, n, parent, size, role, local = drawn
    return span(n, parent, _ROLES[role], 0, 5, trace_id=tid(t), size_bytes=size, parent_local=local)


def _chain(t: int, start: int, length: int) -> list[SpanRecord]:
    """Spans each the parent of the one before: each encloses what the trace holds."""
    first = 100 + start
    return [_mk((t, first + i, first + i + 1, 10, 0, False)) for i in range(length)]


_SPAN = st.tuples(
    st.integers(1, 4),
    st.integers(1, 10),
    st.one_of(st.none(), st.integers(1, 12)),
    st.sampled_from([10, 10, 100, 5000]),
    st.integers(0, 3),
    st.booleans(),
)
_REQUEST = st.one_of(
    st.lists(_SPAN, max_size=6).map(lambda spans: [_mk(s) for s in spans]),
    st.tuples(st.integers(1, 4), st.integers(1, 80), st.integers(1, 70)).map(lambda c: _chain(*c)),
)
_OPS = st.lists(
    st.tuples(_REQUEST, st.sampled_from([0, SECOND, 3 * SECOND, 70 * SECOND]), st.booleans()),
    max_size=25,
)


def _oracle(buffer: TraceBuffer, spans: list[SpanRecord]) -> tuple[bool, bool]:
    """(fits now, can never fit), by what ``add`` takes on a copy with room unbounded."""
    lim = buffer._limits
    room = copy.deepcopy(buffer)
    room._limits = dataclasses.replace(lim, max_traces=10**9, max_buffered_spans=10**9)
    room._bytes = 0
    traces, held = len(room._traces), room._spans
    room.add(spans)
    # The bytes of the spans taken: not what a trace keeps of a span dropped (``_Trace.came``),
    # which takes only room they leave.
    size = sum(s.size_bytes for t in room._traces.values() for s in t.spans.values()) - sum(
        s.size_bytes for t in buffer._traces.values() for s in t.spans.values()
    )
    n, new = room._spans - held, len(room._traces) - traces
    never = n > lim.max_buffered_spans or size > lim.max_buffered_bytes or new > lim.max_traces
    fits = (
        buffer._spans + n <= lim.max_buffered_spans
        and buffer._bytes + size <= lim.max_buffered_bytes
        and len(buffer._traces) + new <= lim.max_traces
    )
    return fits, never


@_SETTINGS
@given(ops=_OPS, cap=st.sampled_from([1, 2, 3]), spans_bound=st.sampled_from([8, 150]))
def test_has_room_says_what_add_would_take(
    ops: list[tuple[list[SpanRecord], int, bool]], cap: int, spans_bound: int
) -> None:
    limits = AssemblyLimits(
        completion_wait_ns=2 * SECOND,
        max_trace_age_ns=60 * SECOND,
        max_traces=3,
        max_buffered_spans=spans_bound,
        max_buffered_bytes=1000 if spans_bound == 8 else 3000,
        max_spans_per_trace=cap,
        late_span_window_ns=10_000 * SECOND,
        max_refusal_ns=0,
    )
    clock = ManualClock()
    buffer = TraceBuffer(limits, clock, RecordingMetrics())
    for spans, step, tick in ops:
        fits, never = _oracle(buffer, spans)
        if buffer.admit(spans, sum(s.size_bytes for s in spans)) is not None:
            assert fits or never
        else:
            assert not (fits or never)
        clock.now_ns += step
        if tick:
            buffer.poll()


class _Before(TraceBuffer):
    """The buffer with 3a1bfda's victim choice: of the 16 oldest not the request's, the
    first whose run ended, else the oldest, walked from the buffer's start each eviction."""

    def _make_room(
        self, span: SpanRecord, victims: _Victims | None, now: int, evicted: list[CompletedTrace]
    ) -> bool:
        trace = self._traces.get(span.trace_id)
        while (bound := self._exceeded(trace is None, span.size_bytes)) is not None:
            victim = self._victim(victims._own) if victims is not None else None
            if victim is None:
                self._flag_limited(span.trace_id, trace, span)
                return False
            self._metrics.trace_evicted(bound)
            evicted.append(self._emit(victim, now, None if _ended(victim) else "evicted"))
        return True

    def _victim(self, own: set[bytes]) -> _Trace | None:
        first: _Trace | None = None
        scanned = 0
        for trace in self._traces.values():
            if trace.trace_id in own:
                continue
            if _ended(trace):
                return trace
            if first is None:
                first = trace
            scanned += 1
            if scanned >= VICTIM_SCAN:
                break
        return first


def _said(out: list[CompletedTrace]) -> list[tuple[bytes, str | None, int]]:
    return [(t.trace_id, t.incomplete_reason, len(t.spans)) for t in out]


@_SETTINGS
@given(
    ops=st.lists(
        st.tuples(
            st.lists(
                st.tuples(
                    st.integers(1, 120),
                    st.integers(1, 6),
                    st.one_of(st.none(), st.integers(1, 6)),
                    st.sampled_from([10, 10, 100]),
                    st.integers(0, 3),
                    st.booleans(),
                ),
                max_size=40,
            ),
            st.sampled_from([0, SECOND, 3 * SECOND]),
            st.booleans(),
        ),
        max_size=30,
    ),
    room=st.sampled_from([5, 20, 90]),
)
def test_victims_evict_as_the_choice_they_replaced(
    ops: list[tuple[list[_Drawn], int, bool]], room: int
) -> None:
    limits = AssemblyLimits(
        completion_wait_ns=2 * SECOND,
        max_trace_age_ns=60 * SECOND,
        max_traces=room,
        max_buffered_spans=150,
        max_buffered_bytes=5000,
        max_spans_per_trace=4,
        late_span_window_ns=10_000 * SECOND,
        overflow="evict_oldest",
    )
    now, before_clock = ManualClock(), ManualClock()
    buffer = TraceBuffer(limits, now, RecordingMetrics())
    before = _Before(limits, before_clock, RecordingMetrics())
    for request, step, tick in ops:
        spans = [_mk(s) for s in request]
        assert _said(buffer.add(spans)) == _said(before.add(spans))
        now.now_ns += step
        before_clock.now_ns += step
        if tick:
            assert _said(buffer.poll()) == _said(before.poll())
    assert _said(buffer.drain()) == _said(before.drain())
