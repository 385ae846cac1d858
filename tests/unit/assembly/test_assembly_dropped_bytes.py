"""What a trace keeps of its spans dropped for a limit (``_Trace.came``, ``_Trace.drops``:
what the anchor walk reads of them, and what they waited for) is counted in its bytes, against
``max_buffered_bytes``, and takes only the room the spans taken leave: past it, a dropped span
is not known (``parent_lost``), as past ``DROPPED_IDS``. The charges (``assembly.dropped``:
``DROPPED_SPANS_BYTES``, ``_LIST_BYTES``, ``_LINK_BYTES``, ``_PARENT_BYTES``, ``_wait_bytes``)
are at least what CPython holds for them."""

from __future__ import annotations

import dataclasses
import sys

from assembly_support import SECOND, RecordingMetrics, span, tool
from wait_support import LIMITS, RUN

from toolwatch.assembly.anchoring import _Trace
from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.assembly.dropped import DROPPED_IDS
from toolwatch.model import ManualClock, SpanRecord, SpanRole

_LIMITS = dataclasses.replace(LIMITS, max_buffered_bytes=10_000)
_TOO_LARGE = 20_000
# The DroppedSpans a trace's first drop makes (48 bytes; 56 compiled, its vtable pointer).
_OWN = 56
# One wait of a span of "refund-agent": 152 + 49 + 12.
_WAIT = 213
# The list of a trace's first drop that may be a parent (its links): 120.
_LISTS = 120
# Each such drop with a parent: its link (152, its span id in it) and its parent id (48); a
# root: 152. An agent span's link also keeps its end (48) and service ("refund-agent": 61).
# 8 bytes more a link since review-wait6 defect 6 (a ``Link`` of 7 fields: an LLM span's
# ``requests_tools``); the figures in the Was/Now docstrings below are those before it.
_DROP = 200
_ROOT_DROP = 152
_AGENT_MORE = 48 + 61


def _root(size: int = 10) -> SpanRecord:
    return span(9, None, SpanRole.OTHER, 0, 3, trace_id=RUN, size_bytes=size)


def _step(n: int, parent: int = 2, size: int = _TOO_LARGE) -> SpanRecord:
    return tool(n, parent, "lookup", 4, 7, trace_id=RUN, size_bytes=size, parent_local=True)


def _held(drops: list[SpanRecord]) -> tuple[int, TraceBuffer]:
    """A root held (10 bytes), then ``drops`` one request each: the bytes buffered."""
    buffer = TraceBuffer(_LIMITS, ManualClock(), RecordingMetrics())
    buffer.add([_root()])
    for dropped in drops:
        buffer.add([dropped])
    return buffer.buffered_bytes, buffer


def test_the_bytes_counted_after_n_drops_under_one_parent() -> None:
    """Steps dropped too large, each waiting for the run's agent span (2): the
    ``DroppedSpans`` (56), a list of links (120) and 192 a step; one wait (a list, 120, and
    213 for the one entry of parent 2 and "refund-agent"). 16 links at most: the 17th is not
    counted, nor kept (``parent_lost``).

    Was: a list of ids beside the links: two lists (240) and 184 a step, on the ``_Trace``.
    Now: the links alone (a link holds its id, and an agent span's end and service: 16 bytes
    more a link): one list (120) and 192 a step, and the object
    that holds them and the waits (56)."""
    counted = {n: _held([_step(100 + k) for k in range(n)])[0] for n in (1, 2, 16, 17)}
    assert counted == {
        1: 10 + _OWN + _LISTS + _DROP + 120 + _WAIT,
        2: 10 + _OWN + _LISTS + 2 * _DROP + 120 + _WAIT,
        16: 10 + _OWN + _LISTS + 16 * _DROP + 120 + _WAIT,
        17: 10 + _OWN + _LISTS + 16 * _DROP + 120 + _WAIT,
    }
    assert _held([_step(100 + k) for k in range(17)])[1]._traces[RUN].parent_lost


def test_the_bytes_counted_after_n_drops_under_as_many_parents() -> None:
    """One wait an entry a parent: 16 steps under 16 parents, 16 waits (3,591 + 15 x 213).

    Was: 3,527 + 15 x 213 (a list of ids beside the links). Now: the links alone (192 a
    step, not 184, and one list), and the ``DroppedSpans`` (56)."""
    counted, _ = _held([_step(100 + k, parent=200 + k) for k in range(DROPPED_IDS)])
    assert counted == 10 + _OWN + _LISTS + 16 * _DROP + 120 + 16 * _WAIT


def test_a_retry_of_a_dropped_span_is_not_counted_twice() -> None:
    """The same step dropped three times (OTLP retries): counted once.

    Was: 10 + 240 + 184 + 120 + 213 (ids beside links). Now: 10 + 56 + 120 + 192 + 120 +
    213."""
    assert _held([_step(100)] * 3)[0] == 10 + _OWN + _LISTS + _DROP + 120 + _WAIT


def test_the_bytes_of_spans_dropped_before_the_trace_is_held_are_counted_when_it_is() -> None:
    """Root and a step dropped before any span is held: nothing counted (not held); then a
    step held (10 bytes): the two replayed, counted (the ``DroppedSpans``, 56; the list of
    links, 120; root: 144, no parent id; step: 192 and its wait); once judged, nothing is
    buffered.

    Was: 10 + 240 + 136 + 184 + 120 + 213 (ids beside links). Now: 10 + 56 + 120 + 144 +
    192 + 120 + 213."""
    clock = ManualClock()
    buffer = TraceBuffer(_LIMITS, clock, RecordingMetrics())
    buffer.add([_root(size=_TOO_LARGE), _step(100)])
    assert buffer.buffered_bytes == 0
    buffer.add([_step(10, size=10)])
    assert buffer.buffered_bytes == 10 + _OWN + _LISTS + _ROOT_DROP + _DROP + 120 + _WAIT
    clock.now_ns += 400 * SECOND
    assert [t.incomplete_reason for t in buffer.poll()] == ["timed_out"]
    assert buffer.buffered_bytes == 0


def test_an_agent_span_dropped_is_counted_with_its_end_and_service() -> None:
    """An agent span dropped too large (its parent remote: no wait) under a held root: the
    ``DroppedSpans`` (56), the list (120), its link (192) and, what ``_agent_anchors`` reads
    of it, its end (48) and service (61).

    Was: not kept in its link (an agent span dropped anchored nothing): 10 + 240 + 184.
    Now: 10 + 56 + 120 + 192 + 48 + 61."""
    dropped = span(2, 9, SpanRole.AGENT, 1, 5, trace_id=RUN, size_bytes=_TOO_LARGE)
    assert _held([dropped])[0] == 10 + _OWN + _LISTS + _DROP + _AGENT_MORE


def test_a_drop_whose_memory_has_no_room_is_not_known() -> None:
    """In a buffer of 100 bytes holding 20, a root dropped too large has no room for what its
    trace would keep of it (328): not counted, it is not known (``parent_lost``): the root
    anchors the trace once quiet the lost parent's wait (7 s), not at 2 s."""
    clock = ManualClock()
    buffer = TraceBuffer(
        dataclasses.replace(LIMITS, max_buffered_bytes=100), clock, RecordingMetrics()
    )
    buffer.add([tool(10, 9, "lookup", 1, 2, trace_id=RUN, size_bytes=20)])
    buffer.add([_root(size=101)])
    assert buffer.buffered_bytes == 20
    began, out = clock.now_ns, list[tuple[str | None, int]]()
    for _ in range(400 * 5):
        clock.now_ns += SECOND // 5
        out.extend((t.incomplete_reason, (clock.now_ns - began) // SECOND) for t in buffer.poll())
    assert out == [("span_limit", 7)]


def test_a_drop_takes_no_room_the_rest_of_its_request_needs() -> None:
    """A buffer of 1,000 bytes holding 10; a request of a step too large, then 990 bytes of
    spans: ``admit`` takes it, and all its spans are held: what the trace would keep of the
    dropped step is not (no room left after them), and it is not known."""
    buffer = TraceBuffer(
        dataclasses.replace(LIMITS, max_buffered_bytes=1000), ManualClock(), RecordingMetrics()
    )
    buffer.add([_root()])
    request = [_step(100, size=2000), *(_step(10 + k, size=99) for k in range(10))]
    refused: dict[str, int] = {}
    assert buffer.admit(request, sum(s.size_bytes for s in request), refused) == []
    assert refused == {"span_too_large": 1}
    assert (buffer.buffered_spans, buffer.buffered_bytes) == (11, 1000)
    assert buffer._traces[RUN].parent_lost


def test_the_charges_cover_what_cpython_holds() -> None:
    """For 1 to 16 drops, each under a parent of its own (a wait each), the bytes counted
    are at least ``sys.getsizeof`` of the ``DroppedSpans``, its lists, links, ids, tuples,
    ends and service names held."""
    for n in range(1, DROPPED_IDS + 1):
        trace = _Trace(RUN, 0)
        for k in range(n):
            dropped = _step(100 + k, parent=200 + k)
            # Distinct objects, as decoded spans hold.
            dropped = dataclasses.replace(
                dropped,
                service="refund-" + "agent" * (k % 2 + 1),
                end_ns=1_765_000_000 * SECOND + k,
                role=SpanRole.AGENT if k % 3 == 0 else SpanRole.TOOL,  # its end, service kept
            )
            trace.dropped(dropped, True, 10**9)
        assert trace.drops is not None
        links, waits = trace.drops.links or [], trace.drops.waits or []
        held = sys.getsizeof(trace.drops) + sys.getsizeof(links) + sys.getsizeof(waits)
        held += sum(
            sys.getsizeof(link) + sys.getsizeof(link.span_id) + sys.getsizeof(link.parent_span_id)
            for link in links
        )
        held += sum(  # an agent span's end and service, distinct objects
            sys.getsizeof(link.end_ns) + sys.getsizeof(link.service)
            for link in links
            if link.role is SpanRole.AGENT
        )
        held += sum(
            sum(sys.getsizeof(part) for part in wait) + sys.getsizeof(wait) for wait in waits
        )
        assert held <= trace.size_bytes, (n, held, trace.size_bytes)


def _over_the_cap(parents: list[int]) -> tuple[int, TraceBuffer]:
    """A root held fills a cap of one span; then a step dropped over it under each of
    ``parents``, one request each: the bytes buffered."""
    buffer = TraceBuffer(
        dataclasses.replace(_LIMITS, max_spans_per_trace=1), ManualClock(), RecordingMetrics()
    )
    buffer.add([_root()])
    for k, parent in enumerate(parents):
        buffer.add([_step(100 + k, parent=parent, size=10)])
    return buffer.buffered_bytes, buffer


def test_a_step_dropped_over_the_cap_is_counted_its_wait_alone() -> None:
    """Steps dropped over the cap (no parent: no link) keep what they waited for: the
    ``DroppedSpans`` (56), a list (120) and 213 for the entry of parent 2; a second step
    under 2 adds nothing, one under another parent 213. 16 waits at most: past them, a step
    is not known (``parent_lost``), and not counted."""
    counted = {n: _over_the_cap([2] + [200 + k for k in range(n - 1)])[0] for n in (1, 2, 16, 17)}
    assert counted == {
        1: 10 + _OWN + 120 + _WAIT,
        2: 10 + _OWN + 120 + 2 * _WAIT,
        16: 10 + _OWN + 120 + 16 * _WAIT,
        17: 10 + _OWN + 120 + 16 * _WAIT,
    }
    assert _over_the_cap([2, 2, 2])[0] == 10 + _OWN + 120 + _WAIT
    sixteen, seventeen = (_over_the_cap(list(range(200, 200 + n)))[1] for n in (16, 17))
    assert (sixteen._traces[RUN].parent_lost, seventeen._traces[RUN].parent_lost) == (
        False,
        True,
    )
    trace = sixteen._traces[RUN]
    assert trace.drops is not None and trace.drops.links is None
