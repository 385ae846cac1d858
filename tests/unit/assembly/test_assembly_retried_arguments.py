"""A call run again under its call id (a framework's or the SDK's retry, a tool wrapper's
second span of one request) runs the request's arguments: the second tool span, which took
no request of its own, carried none, and ``safety`` read its success as a lookup "of any
value": lookup_order(A-1) failed, ran again and succeeded, and issue_refund(B-2), never
looked up, passed. The call run again now holds the arguments of the request it ran."""

from __future__ import annotations

from assembly_support import REFUND_POLICY, agent, ask, hexid, llm, only, safety, tool

from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.loops import Loops, retried
from toolwatch.evaluation.settings import LoopsSettings
from toolwatch.model import Category, SpanRecord
from toolwatch.model_evaluation import ExpectedCall, GoldenCase
from toolwatch.model_traces import ToolTrace

POLICY = REFUND_POLICY


#: The agent may ask a failing tool once more (``loops``).
RETRY_POLICY = POLICY.model_copy(update={"retry_limit": 1})
A1 = {"order_id": "A-1"}


def loops(trace: ToolTrace) -> list[Category]:
    found = Loops(LoopsSettings(), RETRY_POLICY)(trace, Reference()).findings
    return [f.category for f in found]


def retried_lookup(refunded: str, lookup_id: str = "c1", refund_id: str = "c2") -> list[SpanRecord]:
    """The model asks to look A-1 up; the tool span fails and the framework runs it again
    under the same call id (a second span recording no arguments, as the first records
    none: the request holds them), which succeeds; the next turn refunds ``refunded``."""
    return [
        agent(1, None, "refund-bot", 0, 1000),
        llm(2, 1, 10, 100, ask("lookup_order", lookup_id, {"order_id": "A-1"})),
        tool(3, 1, "lookup_order", 101, 110, call_id=lookup_id, status_code=2),
        tool(4, 1, "lookup_order", 111, 120, call_id=lookup_id),
        llm(5, 1, 200, 300, ask("issue_refund", refund_id, {"order_id": refunded})),
        tool(6, 1, "issue_refund", 305, 310, call_id=refund_id),
    ]


def test_a_call_run_again_under_its_unique_id_holds_the_requests_arguments() -> None:
    calls = only(retried_lookup("A-1")).calls

    assert [(c.tool_name, c.arguments, c.span_id, c.status.name) for c in calls] == [
        ("lookup_order", {"order_id": "A-1"}, hexid(3), "ERROR"),
        ("lookup_order", {"order_id": "A-1"}, hexid(4), "OK"),
        ("issue_refund", {"order_id": "A-1"}, hexid(6), "OK"),
    ]
    assert [c.call_id for c in calls] == ["c1", "c1", "c2"]


def test_a_refund_of_an_order_never_looked_up_pages_after_a_retried_lookup() -> None:
    """The missed page: B-2 was never looked up."""
    assert safety(only(retried_lookup("B-2"))) == [Category.MISSING_VERIFICATION_STEP]


def test_a_refund_of_the_order_the_retried_lookup_found_is_verified() -> None:
    assert safety(only(retried_lookup("A-1"))) == []


def test_the_failed_call_and_its_run_again_are_one_action() -> None:
    """With the arguments of the request, ``loops.retried`` reads the second span as the
    first's retry (one action where calls are counted)."""
    calls = only(retried_lookup("A-1")).calls

    assert retried(calls, [c.tool_name for c in calls]) == frozenset({0})


def test_a_call_run_again_under_a_reused_id_holds_its_turns_arguments() -> None:
    """``call_0`` numbered in every turn: the second span of turn 1's lookup is turn 1's
    request run again (``_Asked.take`` pairs it with none), so it holds A-1, and the refund
    of B-2 pages."""
    spans = retried_lookup("B-2", lookup_id="call_0", refund_id="call_0")
    calls = only(spans).calls

    assert [c.arguments for c in calls] == [{"order_id": "A-1"}] * 2 + [{"order_id": "B-2"}]
    assert safety(only(spans)) == [Category.MISSING_VERIFICATION_STEP]
    assert safety(only(retried_lookup("A-1", "call_0", "call_0"))) == []


def test_two_spans_of_one_request_both_hold_its_arguments() -> None:
    """A tool wrapper's span beside the framework's (siblings, not nested: no second record)
    under one call id: both ran the request."""
    spans = [
        agent(1, None, "refund-bot", 0, 1000),
        llm(2, 1, 10, 100, ask("lookup_order", "c1", {"order_id": "A-1"})),
        tool(3, 1, "lookup_order", 101, 120, call_id="c1"),
        tool(4, 1, "lookup_order", 102, 119, call_id="c1"),
    ]

    assert [c.arguments for c in only(spans).calls] == [{"order_id": "A-1"}] * 2


def test_a_span_of_another_tool_under_a_taken_id_runs_no_request() -> None:
    """An id names the call of the tool it asked for: a span of another tool under it is a
    call of its own, and holds only what it recorded."""
    spans = [
        agent(1, None, "refund-bot", 0, 1000),
        llm(2, 1, 10, 100, ask("lookup_order", "c1", {"order_id": "A-1"})),
        tool(3, 1, "lookup_order", 101, 110, call_id="c1"),
        tool(4, 1, "search_orders", 111, 120, call_id="c1"),
    ]

    assert [(c.tool_name, c.arguments) for c in only(spans).calls] == [
        ("lookup_order", {"order_id": "A-1"}),
        ("search_orders", None),
    ]


def test_a_call_run_again_keeps_the_arguments_it_recorded() -> None:
    spans = retried_lookup("A-1")
    spans[3] = tool(4, 1, "lookup_order", 111, 120, call_id="c1", arguments='{"order_id": "Z"}')

    assert only(spans).calls[1].arguments == {"order_id": "Z"}


def test_a_span_run_again_after_an_output_that_asked_twice_under_the_id_takes_no_guess() -> None:
    """One output asked for two lookups under one id, both run: a third span of the id
    ran one of them again, which one no span says; it holds none's arguments (and
    ``safety`` reads it as a lookup that lost its own: of no value)."""
    spans = [
        agent(1, None, "refund-bot", 0, 1000),
        llm(
            2,
            1,
            10,
            100,
            ask("lookup_order", "x", {"order_id": "A-1"}, 0),
            ask("lookup_order", "x", {"order_id": "B-2"}, 1),
        ),
        tool(3, 1, "lookup_order", 101, 110, call_id="x", status_code=2),
        tool(4, 1, "lookup_order", 111, 120, call_id="x", status_code=2),
        tool(5, 1, "lookup_order", 121, 130, call_id="x"),
        llm(6, 1, 200, 300, ask("issue_refund", "r", {"order_id": "A-1"})),
        tool(7, 1, "issue_refund", 305, 310, call_id="r"),
    ]
    calls = only(spans).calls

    assert [c.arguments for c in calls] == [
        {"order_id": "A-1"},
        {"order_id": "B-2"},
        None,
        {"order_id": "A-1"},
    ]
    assert safety(only(spans)) == [Category.MISSING_VERIFICATION_STEP]


def test_a_span_named_in_a_namespace_runs_its_requests_id_again() -> None:
    """The model asks for ``billing__lookup_order``; the server's spans name ``lookup_order``
    (no ``tool_prefix``): the span run again is the same tool's."""
    spans = retried_lookup("A-1")
    spans[1] = llm(2, 1, 10, 100, ask("billing__lookup_order", "c1", {"order_id": "A-1"}))

    assert [c.arguments for c in only(spans).calls[:2]] == [{"order_id": "A-1"}] * 2


def tried_three_times(tool: str = "lookup_order", call_id: str = "c1") -> list[SpanRecord]:
    """The model asks once for ``tool`` (A-1) under ``call_id``; the framework's retry policy
    (three attempts) runs it three times under that id: two failures, then a success, each
    attempt a tool span recording no arguments (the request holds them)."""
    return [
        agent(1, None, "refund-bot", 0, 1_000),
        llm(2, 1, 10, 100, ask(tool, call_id, A1)),
        tool_span(3, tool, 101, 110, call_id, failed=True),
        tool_span(4, tool, 111, 115, call_id, failed=True),
        tool_span(5, tool, 116, 120, call_id),
        llm(6, 1, 200, 300),
    ]


def tool_span(
    number: int, name: str, start: int, end: int, call_id: str, *, failed: bool = False
) -> SpanRecord:
    return tool(number, 1, name, start, end, call_id=call_id, status_code=2 if failed else 0)


def test_a_frameworks_attempts_of_one_request_are_not_the_agent_hammering_a_tool() -> None:
    """``retry_limit: 1``: the model asked once, the framework's retry policy made three
    attempts under the request's id. The attempts run again hold the request's arguments,
    but they are one action of the agent (``ToolCall.rerun``): no retry of its, so no
    UNNECESSARY_TOOL_CALL ("lookup_order retried 2 times"), for a unique id as for ``call_0``."""
    for call_id in ("c1", "call_0"):
        spans = tried_three_times(call_id=call_id)
        spans[-1] = llm(6, 1, 200, 300, ask("issue_refund", "c2", A1))
        spans += [tool(7, 1, "issue_refund", 305, 310, call_id="c2"), llm(8, 1, 400, 500)]
        trace = only(spans)

        assert [(c.call_id, c.rerun) for c in trace.calls] == [
            (call_id, False),
            (call_id, True),
            (call_id, True),
            ("c2", False),
        ]
        assert loops(trace) == []
        assert safety(trace) == []


def test_the_model_asking_again_under_a_reused_id_is_a_retry_of_its() -> None:
    """``call_0`` in every turn: turn 1's lookup of A-1 fails twice (the framework's two
    attempts, one action); the model asks again in turn 2 and in turn 3, under ``call_0``
    again, and both fail: two requests of the model's after failures, beyond the limit."""
    spans = [
        agent(1, None, "refund-bot", 0, 1_000),
        llm(2, 1, 10, 100, ask("lookup_order", "call_0", A1)),
        tool_span(3, "lookup_order", 101, 110, "call_0", failed=True),
        tool_span(4, "lookup_order", 111, 120, "call_0", failed=True),
        llm(5, 1, 200, 300, ask("lookup_order", "call_0", A1)),
        tool_span(6, "lookup_order", 305, 310, "call_0", failed=True),
        llm(7, 1, 400, 500, ask("lookup_order", "call_0", A1)),
        tool_span(8, "lookup_order", 505, 510, "call_0", failed=True),
        llm(9, 1, 600, 700),
    ]
    trace = only(spans)

    assert [c.rerun for c in trace.calls] == [False, True, False, False]
    found = Loops(LoopsSettings(), RETRY_POLICY)(trace, Reference()).findings
    assert [(f.category, f.details["repeats"], f.span_id) for f in found] == [
        (Category.UNNECESSARY_TOOL_CALL, 2, hexid(8))
    ]


def test_a_frameworks_attempts_of_one_refund_are_one_action_against_the_reference() -> None:
    """A refund asked once and run three times under its id (fail, fail, success), after a
    lookup: one refund, as the golden case expects: no DANGEROUS_ACTION_DRIFT."""
    spans = [
        agent(1, None, "refund-bot", 0, 1_000),
        llm(20, 1, 5, 50, ask("lookup_order", "c0", A1)),
        tool(21, 1, "lookup_order", 51, 60, call_id="c0"),
        *tried_three_times("issue_refund")[1:],
    ]
    trace = only(spans)
    golden = GoldenCase(
        case_id="refund",
        expected_tools=(ExpectedCall(name="lookup_order"), ExpectedCall(name="issue_refund")),
    )

    assert [c.rerun for c in trace.calls] == [False, False, True, True]
    assert safety(trace, Reference(expected=golden)) == []


REFUND_ONCE = GoldenCase(
    case_id="refund-a1",
    expected_tools=(ExpectedCall(name="lookup_order"), ExpectedCall(name="issue_refund")),
)


def refund_recorded_twice(first_status: int = 0) -> list[SpanRecord]:
    """Look A-1 up, then refund it once: the refund's request (``c2``) is recorded by two
    spans side by side under the agent, the tool's and a wrapper's (a second
    instrumentation, a middleware), overlapping; the first takes the request."""
    return [
        agent(1, None, "refund-bot", 0, 1_000),
        llm(2, 1, 10, 100, ask("lookup_order", "c1", A1)),
        tool(3, 1, "lookup_order", 101, 110, call_id="c1"),
        llm(4, 1, 200, 300, ask("issue_refund", "c2", A1)),
        tool(5, 1, "issue_refund", 301, 330, call_id="c2", status_code=first_status),
        tool(6, 1, "issue_refund", 302, 320, call_id="c2"),
        llm(7, 1, 400, 500),
    ]


def test_one_refund_recorded_by_a_wrappers_span_too_is_one_dangerous_action() -> None:
    """The wrapper's span is the request run again (``rerun``): after the tool's success it
    is no action of its own, so a run that refunded once, as the golden case says, is no
    DANGEROUS_ACTION_DRIFT ("issue_refund call #2, the golden case made 1" before)."""
    trace = only(refund_recorded_twice())

    assert [c.rerun for c in trace.calls] == [False, False, True]
    assert safety(trace, Reference(expected=REFUND_ONCE)) == []
    names = [c.tool_name for c in trace.calls]
    assert retried(trace.calls, names) == frozenset({2})


def test_a_failed_attempt_and_a_rerun_beside_it_are_one_action() -> None:
    """The tool's span failed and the wrapper's, overlapping it (so no result of the first
    informed it), went through: one request, one refund; the failed attempt is the one
    made again."""
    trace = only(refund_recorded_twice(first_status=2))

    assert safety(trace, Reference(expected=REFUND_ONCE)) == []
    names = [c.tool_name for c in trace.calls]
    assert retried(trace.calls, names) == frozenset({1})


def test_a_second_refund_asked_by_the_model_is_still_a_second_action() -> None:
    """Not a rerun: the model asked for the refund twice (two ids): drift against a case
    that expects one refund."""
    trace = only(
        [
            *refund_recorded_twice()[:5],
            llm(8, 1, 340, 390, ask("issue_refund", "c3", A1)),
            tool(9, 1, "issue_refund", 391, 399, call_id="c3"),
        ]
    )

    assert [c.rerun for c in trace.calls] == [False, False, False]
    assert safety(trace, Reference(expected=REFUND_ONCE)) == [Category.DANGEROUS_ACTION_DRIFT]
