"""A trace whose model spans' input shows earlier model calls it does not hold is judged
incomplete, ``missing_spans`` (``toolwatch.assembly.missing``), and the absence rules leave it
out: the half of a run a rollout left on one replica raises no false
``MISSING_VERIFICATION_STEP``."""

from __future__ import annotations

from tests.unit.assembly.assembly_support import (
    MS,
    NORMALIZE,
    TRACE,
    agent,
    ask,
    build,
    llm,
    only,
    safety,
    tool,
)
from toolwatch.assembly.completed import CompletedTrace
from toolwatch.assembly.timeline import build_tool_traces
from toolwatch.config.stages import AssemblySettings
from toolwatch.conventions.history import cut_id
from toolwatch.model import Category, SpanRecord, SpanRole


def refund_run() -> list[SpanRecord]:
    """A whole run: the model asks for the lookup (no earlier call), then the refund (one),
    then answers (two)."""
    return [
        agent(1, None, "support", 0, 100),
        llm(2, 1, 1, 10, ask("lookup_order", "c1", {"order_id": "A-1"}), prior_turns=0),
        tool(3, 1, "lookup_order", 11, 20, call_id="c1", arguments={"order_id": "A-1"}),
        llm(4, 1, 21, 30, ask("issue_refund", "c2", {"order_id": "A-1"}), prior_turns=1),
        tool(5, 1, "issue_refund", 31, 40, call_id="c2", arguments={"order_id": "A-1"}),
        llm(6, 1, 41, 50, prior_turns=2, output_text="Refunded."),
    ]


def test_a_whole_run_is_complete() -> None:
    trace = only(refund_run())
    assert (trace.complete, trace.incomplete_reason) == (True, None)
    assert safety(trace) == []


def test_the_half_a_rollout_left_is_judged_missing_spans_and_raises_no_absence_finding() -> None:
    staying = [s for s in refund_run() if s.end_ns > 20_000_000]  # the lookup went elsewhere
    trace = only(staying)
    assert (trace.complete, trace.incomplete_reason) == (False, "missing_spans")
    assert [c.tool_name for c in trace.calls] == ["issue_refund"]
    assert Category.MISSING_VERIFICATION_STEP not in safety(trace)


def test_with_the_setting_off_the_half_is_judged_as_it_came() -> None:
    """``assembly.missing_spans_from_history: false``, for a producer whose histories hold
    messages from the model no model call made: the half a rollout left is judged complete,
    and its unverified refund raised, as before the evidence was read."""
    staying = [s for s in refund_run() if s.end_ns > 20_000_000]
    trace = CompletedTrace(TRACE, tuple(staying), True, None, 0, 0)
    (judged,) = build_tool_traces(trace, NORMALIZE, from_history=False)
    assert (judged.complete, judged.incomplete_reason) == (True, None)
    assert safety(judged) == [Category.MISSING_VERIFICATION_STEP]


def test_the_setting_is_off_by_default_and_reaches_the_limits_serve_and_replay_build_with() -> None:
    """Off by default: a model call no instrumentation recorded, or a message the app writes
    as the model's, would read as spans that never came and silence the run's absence
    findings; the gateway layout, whose rollouts split runs, turns it on."""
    assert AssemblySettings().limits().missing_spans_from_history is False
    on = AssemblySettings(missing_spans_from_history=True)
    assert on.limits().missing_spans_from_history is True


def test_a_run_that_skipped_the_lookup_is_complete_and_still_raises_it() -> None:
    skipped = [
        agent(1, None, "support", 0, 100),
        llm(2, 1, 1, 10, ask("issue_refund", "c2", {"order_id": "A-1"}), prior_turns=0),
        tool(5, 1, "issue_refund", 11, 20, call_id="c2", arguments={"order_id": "A-1"}),
        llm(6, 1, 21, 30, prior_turns=1, output_text="Refunded."),
    ]
    trace = only(skipped)
    assert (trace.complete, trace.incomplete_reason) == (True, None)
    assert safety(trace) == [Category.MISSING_VERIFICATION_STEP]


def test_an_unread_history_and_more_spans_than_turns_are_no_evidence() -> None:
    staying = [s for s in refund_run() if s.end_ns > 20_000_000]
    unread = [llm(s.span_id[-1], 1, s.start_ns // 1_000_000, s.end_ns // 1_000_000,
                  *s.output_tool_calls, prior_turns=-1) if s.role.name == "LLM" else s
              for s in staying]  # fmt: skip
    assert only(unread).complete
    # Two instrumentations recording each call: more model spans than turns.
    doubled = [*refund_run(), llm(7, 2, 2, 9, prior_turns=0), llm(8, 4, 22, 29, prior_turns=1)]
    assert only(doubled).complete


def test_a_span_the_history_counts_need_only_have_started_before_the_call() -> None:
    """Was: a model span counted only if it ended by the later call's start, so the spans of
    an LLM gateway whose clock runs 4 ms behind (the earlier call seen ending after the
    next one starts) read as a call that never came, and silenced the run's absence
    findings (review). Now: one that started before it counts; one started at the same
    time or later does not."""
    overlapping = [
        agent(1, None, "support", 0, 100),
        llm(2, 1, 1, 25, prior_turns=0),
        llm(4, 1, 21, 30, prior_turns=1, output_text="Refunded."),
    ]
    assert only(overlapping).incomplete_reason is None
    later = [
        agent(1, None, "support", 0, 100),
        llm(2, 1, 21, 25, prior_turns=0),
        llm(4, 1, 21, 30, prior_turns=1, output_text="Refunded."),
    ]
    assert only(later).incomplete_reason == "missing_spans"


def test_a_model_span_holding_its_agents_tool_spans_is_not_compared() -> None:
    # OpenInference's Google ADK instrumentation: one LLM span for the agent's whole loop,
    # started with it, carrying the last call's input.
    loop = [
        agent(1, None, "support", 0, 100),
        llm(2, 1, 1, 90, prior_turns=2, output_text="Refunded."),
        tool(3, 2, "lookup_order", 11, 20, call_id="c1"),
        tool(5, 2, "issue_refund", 31, 40, call_id="c2"),
    ]
    assert only(loop).complete


def test_a_trace_judged_unfinished_keeps_its_reason() -> None:
    staying = [s for s in refund_run() if s.end_ns > 20_000_000]
    (trace,) = build(staying, complete=False, reason="timed_out")
    assert trace.incomplete_reason == "timed_out"


# --- The tool-call ids the history names (``SpanRecord.prior_call_ids``) -------------------


def refund_run_with_ids() -> list[SpanRecord]:
    """``refund_run`` with the ids each model span's history names (nearest first)."""
    ids = {2: (), 4: ("c1",), 6: ("c2", "c1")}
    return [
        llm(s.span_id[-1], 1, s.start_ns // MS, s.end_ns // MS, *s.output_tool_calls,
            prior_turns=s.prior_turns, prior_call_ids=ids[s.span_id[-1]],
            output_text=s.output_text)
        if s.role is SpanRole.LLM else s
        for s in refund_run()
    ]  # fmt: skip


def test_the_half_a_rollout_left_names_a_call_it_does_not_know_and_lacks_spans() -> None:
    """The lost half holds the model call that asked for the lookup and the lookup's span:
    ``c1``, named by the refund call's history, is known nowhere in the half."""
    staying = [s for s in refund_run_with_ids() if s.end_ns > 20 * MS]
    trace = only(staying)
    assert (trace.complete, trace.incomplete_reason) == (False, "missing_spans")
    assert Category.MISSING_VERIFICATION_STEP not in safety(trace)


def test_a_lost_model_call_whose_tool_span_stayed_reads_as_an_unrecorded_call() -> None:
    """A limit: a split that sent the first model call to another replica but left its
    lookup's span here (the batch holding it came here) reads as case (a), a model
    call no instrumentation recorded: ``c1`` is known, the run judged whole. Losing the
    lookup's span too, ``c1`` is known nowhere: lacking."""
    whole = refund_run_with_ids()
    without_first_call = [s for s in whole if s.span_id[-1] != 2]
    assert only(without_first_call).complete
    without_lookup_too = [s for s in without_first_call if s.span_id[-1] != 3]
    assert only(without_lookup_too).incomplete_reason == "missing_spans"


def test_a_model_call_no_instrumentation_recorded_whose_tools_ran_leaves_the_run_complete() -> None:
    """Case (a) with the tools' spans: the planner call that asked for the lookup went
    through an unwrapped client (no span of it anywhere), its lookup ran under a tool span
    with its call id, and the refund's lookup was of another order. Every id the histories
    name is known: the run is whole, and its unbound refund is paged."""
    spans = [
        agent(1, None, "support", 0, 100),
        # no span of the model call that asked for c1 (an uninstrumented client)
        tool(3, 1, "lookup_order", 11, 20, call_id="c1", arguments={"order_id": "A-1"}),
        llm(4, 1, 21, 30, ask("issue_refund", "c2", {"order_id": "A-2"}), prior_turns=1,
            prior_call_ids=("c1",)),
        tool(5, 1, "issue_refund", 31, 40, call_id="c2", arguments={"order_id": "A-2"}),
        llm(6, 1, 41, 50, prior_turns=2, prior_call_ids=("c2", "c1"), output_text="Done."),
    ]  # fmt: skip
    trace = only(spans)
    assert (trace.complete, trace.incomplete_reason) == (True, None)
    assert safety(trace) == [Category.MISSING_VERIFICATION_STEP]


def test_an_id_the_run_only_asked_for_is_known() -> None:
    """A request no tool span ran (a tool the producer does not instrument) is known by the
    model span that asked for it."""
    spans = [
        agent(1, None, "support", 0, 100),
        llm(2, 1, 1, 10, ask("lookup_order", "c1", {"order_id": "A-1"}), prior_turns=0),
        llm(4, 1, 21, 30, prior_turns=1, prior_call_ids=("c1",), output_text="Shipped."),
    ]
    assert only(spans).complete


def test_a_long_id_is_compared_cut_as_the_history_keeps_it() -> None:
    long_id = "call_" + "x" * 300
    spans = [
        agent(1, None, "support", 0, 100),
        tool(3, 1, "lookup_order", 11, 20, call_id=long_id, arguments={"order_id": "A-1"}),
        llm(4, 1, 21, 30, prior_turns=1, prior_call_ids=(cut_id(long_id),), output_text="Ok."),
    ]
    assert only(spans).complete
    other = [*spans[:1], spans[2]]  # the tool span with the long id is not in the run
    assert only(other).incomplete_reason == "missing_spans"


def test_ids_are_no_evidence_without_the_count() -> None:
    """An id known nowhere (a run resumed from an earlier trace names its calls) is no
    evidence when the run holds as many model spans as the history shows."""
    spans = [
        agent(1, None, "support", 0, 100),
        llm(2, 1, 1, 10, prior_turns=0),
        llm(4, 1, 21, 30, prior_turns=1, prior_call_ids=("elsewhere",), output_text="Ok."),
    ]
    assert only(spans).complete
