"""Property tests: arrival order, batching and duplication never change a ToolTrace, and
the buffer's span accounting always balances (DESIGN §4, STYLE 15)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from itertools import pairwise

from assembly_strategies import span_trees, transfer_trees
from assembly_support import RecordingMetrics, agent, llm, span, tool
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from toolwatch.assembly.buffer import TraceBuffer, runs_an_agent
from toolwatch.assembly.completed import CompletedTrace
from toolwatch.assembly.limits import ENCLOSING_SPANS, LOST_PARENT_WAIT_NS, AssemblyLimits
from toolwatch.assembly.timeline import build_tool_traces
from toolwatch.assembly.tree import _in_time_order
from toolwatch.model import ManualClock, SpanRecord, SpanRole
from toolwatch.model_traces import ToolTrace
from toolwatch.names import NameNormalizer

NORMALIZE = NameNormalizer({"issue_refund": "refund"})
TRACE_ID = b"\x01" * 16
WAIT = 2_000_000_000


def canonical(spans: Sequence[SpanRecord]) -> list[ToolTrace]:
    return build_tool_traces(CompletedTrace(TRACE_ID, tuple(spans), True, None, 0, 0), NORMALIZE)


@st.composite
def shuffled_with_duplicates(draw: st.DrawFn, spans: Sequence[SpanRecord]) -> list[SpanRecord]:
    dups = draw(st.lists(st.sampled_from(list(spans)), max_size=len(spans)))
    return draw(st.permutations([*spans, *dups]))


@st.composite
def batches(draw: st.DrawFn, spans: Sequence[SpanRecord]) -> list[list[SpanRecord]]:
    cuts = sorted(draw(st.lists(st.integers(0, len(spans)), max_size=4)))
    bounds = [0, *cuts, len(spans)]
    return [list(spans[a:b]) for a, b in pairwise(bounds) if b > a]


@settings(max_examples=300, deadline=None)
@given(data=st.data(), spans=span_trees(), drop_root=st.booleans())
def test_timeline_ignores_span_order_and_duplicates(
    data: st.DataObject, spans: tuple[SpanRecord, ...], drop_root: bool
) -> None:
    kept = spans[1:] if drop_root and len(spans) > 1 else spans
    arrived = data.draw(shuffled_with_duplicates(kept))

    assert canonical(arrived) == canonical(kept)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), spans=transfer_trees())
def test_runs_joined_at_transfers_ignore_span_order_and_duplicates(
    data: st.DataObject, spans: tuple[SpanRecord, ...]
) -> None:
    """Sibling agents handing over by Google ADK's transfers, the OpenAI Agents SDK's and
    another producer's ``transfer_to_agent``: the same runs, joined the same way, whatever
    the spans' order and repeats."""
    arrived = data.draw(shuffled_with_duplicates(spans))

    assert canonical(arrived) == canonical(spans)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), spans=span_trees(max_spans=48))
def test_spans_are_taken_by_start_then_span_id_whatever_their_arrival(
    data: st.DataObject, spans: tuple[SpanRecord, ...]
) -> None:
    # The strategy's starts collide often: ties of two and of more are both exercised; and
    # traces of both sizes: sorted by insertion (up to 32 spans) and by ``list.sort``.
    arrived = data.draw(st.permutations(spans))
    expected = sorted(spans, key=lambda s: (s.start_ns, s.span_id))

    ordered = _in_time_order(list(arrived))

    assert [s.span_id for s in ordered] == [s.span_id for s in expected]


@settings(max_examples=200, deadline=None)
@given(data=st.data(), spans=span_trees())
def test_any_arrival_through_the_buffer_gives_the_same_tooltraces(
    data: st.DataObject, spans: tuple[SpanRecord, ...]
) -> None:
    """Any order, batching and duplication of a trace's spans, each batch within the wait:
    one trace, complete, the same ToolTraces, judged when the spans alone say.
    Was: always at the first quiet ``WAIT``.
    Now: so is a run whose spans all ended by its root's end; one with a span of the root's
    service that ended after it (a run left running in the background) is judged quiet
    ``WAIT + LOST_PARENT_WAIT_NS``, whatever the order its spans came in."""
    clock = ManualClock()
    metrics = RecordingMetrics()
    buffer = TraceBuffer(AssemblyLimits(completion_wait_ns=WAIT), clock, metrics)
    arrived = data.draw(shuffled_with_duplicates(spans))
    parts = data.draw(batches(arrived))
    # A batch of duplicates only is no sign of life (it does not restart the quiet period),
    # so the time between batches adds up to less than the wait.
    for batch in parts:
        assert buffer.add(batch) == []
        assert buffer.poll() == []
        clock.now_ns += data.draw(st.integers(0, (WAIT - 1) // len(parts)))
    clock.now_ns += WAIT
    root = spans[0]
    if any(s.end_ns > root.end_ns and s.service == root.service for s in spans):
        assert buffer.poll() == []
        clock.now_ns += LOST_PARENT_WAIT_NS

    (done,) = buffer.poll()
    assert (done.complete, len(done.spans)) == (True, len(spans))
    assert done.by_id == {s.span_id: s for s in done.spans}  # the timeline reads it
    assert build_tool_traces(done, NORMALIZE) == canonical(spans)
    built, unbuilt = (len(spans), 0) if runs_an_agent(spans) else (0, len(spans))
    assert (metrics.built, metrics.dropped) == (
        built,
        Counter({"duplicate": len(arrived) - len(spans), "not_an_agent_run": unbuilt}) - Counter(),
    )


@settings(max_examples=200, deadline=None)
@given(spans=span_trees(max_spans=16))
# A tool span below a guardrail's own model call, inside a call of its tool: the model
# between keeps it a call of its own (it was taken for a second record of the outer call).
@example(
    spans=(
        agent(1, None, "refund-bot", 0, 0),
        tool(2, 1, "web_search", 0, 0),
        span(3, 2, SpanRole.GUARDRAIL, 0, 0),
        llm(4, 3, 0, 0),
        tool(5, 4, "web_search", 0, 0),
    )
)
def test_every_tool_span_is_exactly_one_call_and_groups_are_consistent(
    spans: tuple[SpanRecord, ...],
) -> None:
    traces = canonical(spans)

    call_spans = [c.span_id for t in traces for c in t.calls if c.span_id is not None]
    tool_spans = [s.span_id.hex() for s in spans if s.role is SpanRole.TOOL]
    assert len(call_spans) == len(set(call_spans))  # no span is two calls
    assert set(call_spans) <= set(tool_spans)
    # A tool span that is no call is a second record of a call: inside a call's span of its
    # own tool, no agent or model between, nor another tool but records of the same
    # (``records._second_records``).
    by_id = {s.span_id.hex(): s for s in spans}
    missing = set(tool_spans) - set(call_spans)
    for record in missing:
        name, above = by_id[record].tool_name, by_id[record].parent_span_id
        while above is not None and (
            by_id[above.hex()].role not in (SpanRole.TOOL, SpanRole.AGENT, SpanRole.LLM)
            or (above.hex() in missing and by_id[above.hex()].tool_name == name)
        ):
            above = by_id[above.hex()].parent_span_id
        outer = by_id[above.hex()] if above is not None else None
        assert outer is not None and outer.role is SpanRole.TOOL
        assert (outer.span_id.hex() in call_spans, outer.tool_name) == (True, name)
    for trace in traces:
        assert [c.sequence_index for c in trace.calls] == list(range(len(trace.calls)))
        # A nested call names a call of its trace: by its call id, or its span id.
        named = {c.call_id or c.span_id for c in trace.calls}
        assert {c.parent_call_id for c in trace.calls} - {None} <= named
        members = Counter(c.parallel_group for c in trace.calls if c.parallel_group is not None)
        assert all(n >= 2 for n in members.values())
        assert all(trace.calls[g].parallel_group == g for g in members)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), spans=span_trees(), flags_said=st.booleans())
def test_a_run_below_a_caller_is_never_ready_before_its_top_span_arrived(
    data: st.DataObject, spans: tuple[SpanRecord, ...], flags_said: bool
) -> None:
    """Below a remote caller, the run's top span (span 1) ends last. Any part of the run
    without it must wait: with the SDKs' flags (each span's parent said local, the top's
    remote), whatever arrived; without flags (older SDKs), as long as no AGENT span came
    (an agent span under a parent said nothing of anchors, as a remote one does)."""
    below = [dataclasses.replace(s, parent_local=flags_said) for s in spans[1:]]
    picked = data.draw(st.sets(st.integers(0, len(below) - 1))) if below else set()
    arrived = [below[i] for i in sorted(picked)]
    assume(flags_said or all(s.role is not SpanRole.AGENT for s in arrived))
    clock = ManualClock()
    buffer = TraceBuffer(AssemblyLimits(completion_wait_ns=WAIT), clock, RecordingMetrics())
    buffer.add(arrived)
    clock.now_ns += WAIT

    assert buffer.poll() == []


# -- conservation ---------------------------------------------------------------------------

limits_strategy = st.builds(
    AssemblyLimits,
    completion_wait_ns=st.integers(1, 5),
    max_trace_age_ns=st.integers(1, 30),
    late_span_window_ns=st.integers(0, 40),
    max_traces=st.integers(1, 4),
    max_spans_per_trace=st.integers(1, 8),
    max_buffered_spans=st.integers(1, 16),
    max_buffered_bytes=st.integers(1, 300),
    max_remembered_traces=st.integers(0, 3),
    overflow=st.sampled_from(["backpressure", "evict_oldest"]),
)

#: (operation, number, picks): add picks (span indexes, repeats allowed) of trace ``number``,
#: poll, drain, or advance the clock by ``number`` ns.
Operation = tuple[str, int, list[int]]
operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 4), st.lists(st.integers(0, 11), max_size=8)),
        st.tuples(st.sampled_from(["poll", "drain"]), st.just(0), st.just([])),
        st.tuples(st.just("advance"), st.integers(0, 20), st.just([])),
    ),
    max_size=30,
)


def _pool_trace(n: int, root: SpanRole | None, second: SpanRole) -> tuple[SpanRecord, ...]:
    """Trace ``n``: span 1 (``root``, or absent with a remote parent), span 2 (``second``)
    under it, then ten tool spans under span 2, of growing sizes."""
    trace_id = bytes([n + 1]) * 16

    def make(i: int, parent: int | None, role: SpanRole) -> SpanRecord:
        parent_id = parent.to_bytes(8, "big") if parent is not None else None
        return SpanRecord(
            trace_id, i.to_bytes(8, "big"), parent_id, f"s{i}", 1, i, i + 1, 0, None, role,
            size_bytes=10 * i,
        )  # fmt: skip

    head = [make(1, None, root)] if root is not None else []
    return (*head, make(2, 1, second), *(make(i, 2, SpanRole.TOOL) for i in range(3, 13)))


#: Ready by root, ready by an outermost agent, never ready (no anchor, twice: a remote
#: parent above OTHER or TOOL spans), ready by root.
POOL = [
    _pool_trace(0, SpanRole.AGENT, SpanRole.LLM),
    _pool_trace(1, None, SpanRole.AGENT),
    _pool_trace(2, None, SpanRole.OTHER),
    _pool_trace(3, None, SpanRole.TOOL),
    _pool_trace(4, SpanRole.OTHER, SpanRole.WRAPPER),
]


@settings(max_examples=300, deadline=None)
@given(limits=limits_strategy, ops=operations)
def test_span_accounting_balances_under_any_operations(
    limits: AssemblyLimits, ops: list[Operation]
) -> None:
    clock = ManualClock(start_ns=0)
    metrics = RecordingMetrics()
    buffer = TraceBuffer(limits, clock, metrics)
    received = 0
    emitted: list[CompletedTrace] = []
    for name, number, picks in ops:
        if name == "add":
            batch = [POOL[number][i % len(POOL[number])] for i in picks]
            received += len(batch)
            emitted += buffer.add(batch)
        elif name == "poll":
            emitted += buffer.poll()
        elif name == "drain":
            emitted += buffer.drain()
        else:
            clock.now_ns += number
        assert received == metrics.built + metrics.dropped.total() + buffer.buffered_spans
        assert buffer.buffered_traces <= limits.max_traces
        assert buffer.buffered_spans <= limits.max_buffered_spans
        assert buffer.buffered_bytes <= limits.max_buffered_bytes
        assert buffer.remembered_traces <= limits.max_remembered_traces
    # Traces with no agent, model or tool span are counted dropped when emitted, not built.
    agent_runs = [t for t in emitted if runs_an_agent(t.spans)]
    assert metrics.built == sum(len(t.spans) for t in agent_runs)
    assert metrics.dropped["not_an_agent_run"] == sum(len(t.spans) for t in emitted) - (
        metrics.built
    )
    assert all(len({s.span_id for s in t.spans}) == len(t.spans) for t in emitted)
    # Past the cap, a trace took only spans that enclose what it held (its spans are in
    # arrival order), and at most ENCLOSING_SPANS of them.
    for trace in emitted:
        assert len(trace.spans) <= limits.max_spans_per_trace + ENCLOSING_SPANS
        parents = {s.parent_span_id for s in trace.spans}
        past = trace.spans[limits.max_spans_per_trace :]
        assert all(s.parent_span_id is None or s.span_id in parents for s in past)
