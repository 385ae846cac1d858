"""A tool span without a call id that records the same arguments as the request its tool's
last span ran, after that attempt failed (a framework's retry) or beside it (a wrapper's span
and the tool's, whichever started first), runs that request again (``ToolCall.rerun``), as a
span recording none does since ad87e61. It took the next request of its tool when one was
waiting (another turn's, another order's), or the one asking for its arguments when two or
more were: that request's own execution was then left without one, a tool host's retry was
moved into a later turn's window, and a wrapper's span read as a second refund.

The spans are OpenAI Agents' as OpenInference records them: tool spans with their arguments
(``input.value``) and no call id; the model's requests carry the ids (``call_…``)."""

from __future__ import annotations

from typing import Any

from assembly_support import (
    ONE_REFUND_POLICY,
    REFUND_POLICY,
    agent,
    ask,
    hexid,
    llm,
    only,
    safety,
    tool,
)

from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.invariants import Invariants
from toolwatch.evaluation.loops import Loops, retried
from toolwatch.evaluation.settings import InvariantsSettings, LoopsSettings
from toolwatch.model import Category, SpanRecord
from toolwatch.model_traces import ToolTrace

A1 = {"order_id": "A-1"}
B2 = {"order_id": "B-2"}
A1_JSON = '{"order_id": "A-1"}'
B2_JSON = '{"order_id": "B-2"}'
ERROR = 2  # OTLP Status.code ERROR


def run(
    n: int, name: str, start: int, end: int, args: Any = A1_JSON, *, failed: bool = False, **kw: Any
) -> SpanRecord:
    """An OpenAI Agents tool span under the agent (span 1): no call id; ``args`` as
    ``input.value`` records them."""
    return tool(n, 1, name, start, end, arguments=args, status_code=ERROR if failed else 0, **kw)


def calls_of(trace: ToolTrace) -> list[tuple[int, Any, str | None, bool, str]]:
    """Each call's span (its number), arguments, call id, ``rerun`` and status."""
    return [
        (
            int(c.span_id, 16) if c.span_id is not None else 0,
            c.arguments,
            c.call_id,
            c.rerun,
            c.status.name,
        )
        for c in trace.calls
    ]


def hammering(limit: int) -> list[tuple[Category, str | None]]:
    """``loops`` under ``retry_limit`` ``limit`` on a run that looks A-1 up in three turns,
    every attempt failing; the framework runs the first turn's request again at once (a span
    recording the arguments too)."""
    trace = only(
        [
            agent(1, None, "support_agent", 0, 2_000),
            llm(2, 1, 10, 100, ask("lookup_order", "call_1", A1)),
            run(3, "lookup_order", 101, 110, failed=True),
            run(4, "lookup_order", 111, 120, failed=True),  # the framework's retry
            llm(5, 1, 200, 300, ask("lookup_order", "call_2", A1)),
            run(6, "lookup_order", 305, 310, failed=True),
            llm(7, 1, 400, 500, ask("lookup_order", "call_3", A1)),
            run(8, "lookup_order", 505, 510, failed=True),
            llm(9, 1, 600, 700),
        ]
    )
    assert [(c.call_id, c.rerun) for c in trace.calls] == [
        ("call_1", False),
        ("call_1", True),
        ("call_2", False),
        ("call_3", False),
    ]
    policy = REFUND_POLICY.model_copy(update={"retry_limit": limit})
    found = Loops(LoopsSettings(), policy)(trace, Reference()).findings
    return [(f.category, f.span_id) for f in found]


def test_a_retry_recording_its_arguments_runs_its_request_again_not_the_next_turns() -> None:
    """Scenario: turn 1 looks A-1 up; the tool span fails and the framework runs the request
    again, a span recording A-1 too, which succeeds; turn 2 looks B-2 up.
    Was: with one lookup request waiting, the retry took B-2's (call_2 on a lookup of A-1),
    and B-2's own span took none (no call id).
    Should: the retry is call_1's rerun; B-2's span runs call_2."""
    trace = only(
        [
            agent(1, None, "support_agent", 0, 2_000),
            llm(2, 1, 10, 100, ask("lookup_order", "call_1", A1)),
            run(3, "lookup_order", 101, 110, failed=True),
            run(4, "lookup_order", 111, 120),
            llm(5, 1, 200, 300, ask("lookup_order", "call_2", B2)),
            run(6, "lookup_order", 305, 310, B2_JSON),
        ]
    )

    assert calls_of(trace) == [
        (3, A1, "call_1", False, "ERROR"),
        (4, A1, "call_1", True, "OK"),
        (6, B2, "call_2", False, "OK"),
    ]


def test_a_retried_lookup_on_a_tool_host_verifies_the_refund_after_it() -> None:
    """Scenario: ``desk`` runs the agent and its model calls, ``orders`` the lookups (no
    client span recorded). A-1's lookup fails and is retried at once (ok, A-1 recorded); turn
    2 refunds A-1; turn 3 looks B-2 up.
    Was: the retry took turn 3's request, so the timeline ordered it no earlier than turn 3
    asked (500 ms), after the refund: MISSING_VERIFICATION_STEP (critical) on a run that
    looked A-1 up before refunding it.
    Should: the retry is call_1's rerun, ordered with its first attempt; no finding."""
    trace = only(
        [
            agent(1, None, "support_agent", 0, 2_000, service="desk"),
            llm(2, 1, 10, 100, ask("lookup_order", "call_1", A1), service="desk"),
            run(3, "lookup_order", 101, 110, failed=True, service="orders"),
            run(4, "lookup_order", 111, 120, service="orders"),
            llm(5, 1, 200, 300, ask("issue_refund", "call_2", A1), service="desk"),
            run(6, "issue_refund", 305, 310, service="desk"),
            llm(7, 1, 400, 500, ask("lookup_order", "call_3", B2), service="desk"),
            run(8, "lookup_order", 505, 510, B2_JSON, service="orders"),
        ]
    )

    assert [c.span_id for c in trace.calls] == [hexid(3), hexid(4), hexid(6), hexid(8)]
    assert [c.call_id for c in trace.calls] == ["call_1", "call_1", "call_2", "call_3"]
    assert safety(trace) == []


def test_a_frameworks_retry_is_no_retry_of_the_agents() -> None:
    """``retry_limit`` 2: the model asked for the failing lookup three times, retrying it
    twice; the framework's own attempt is none of them.
    Was: with two requests of A-1 waiting, the framework's retry took turn 2's (by its
    arguments), turn 2's span turn 3's, and turn 3's span none: three retries,
    UNNECESSARY_TOOL_CALL on an agent within its limit (at 1, on turn 2's span, the
    agent's first retry).
    Should: no finding at 2; at 1, the agent's second retry (turn 3's span) is flagged."""
    assert hammering(2) == []
    assert hammering(1) == [(Category.UNNECESSARY_TOOL_CALL, hexid(8))]


def test_a_retried_refund_leaves_the_next_refund_request_to_its_execution() -> None:
    """Scenario: the refund of A-1 fails and the framework retries it (A-1 recorded, ok); turn
    3 refunds B-2 (looked up).
    Was: the retry took B-2's refund request, B-2's span none.
    Should: the retry is call_2's rerun; two refunds, a ``call_count`` max 1 finding."""
    trace = only(
        [
            agent(1, None, "support_agent", 0, 2_000),
            llm(
                2,
                1,
                10,
                100,
                ask("lookup_order", "call_1", A1, 0),
                ask("lookup_order", "call_0", B2, 1),
            ),
            run(3, "lookup_order", 101, 110),
            run(4, "lookup_order", 111, 120, B2_JSON),
            llm(5, 1, 200, 300, ask("issue_refund", "call_2", A1)),
            run(6, "issue_refund", 305, 310, failed=True),
            run(7, "issue_refund", 311, 320),
            llm(8, 1, 400, 500, ask("issue_refund", "call_3", B2)),
            run(9, "issue_refund", 505, 510, B2_JSON),
            llm(10, 1, 600, 700),
        ]
    )

    assert calls_of(trace)[2:] == [
        (6, A1, "call_2", False, "ERROR"),
        (7, A1, "call_2", True, "OK"),
        (9, B2, "call_3", False, "OK"),
    ]
    assert retried(trace.calls, [c.tool_name for c in trace.calls]) == frozenset({2})
    assert safety(trace) == []
    result = Invariants(InvariantsSettings(), ONE_REFUND_POLICY)(trace, Reference())
    assert result is not None
    assert [(f.category, f.span_id) for f in result.findings] == [
        (Category.INVARIANT_VIOLATION, hexid(9))
    ]


def test_a_wrappers_span_started_before_the_tools_is_one_refund() -> None:
    """Scenario: a wrapper's span (no arguments) starts before the refund tool's span, which
    records A-1 and runs within it.
    Was: the wrapper took the request, the tool's span was a call without one: two refunds,
    a ``call_count`` max 1 INVARIANT_VIOLATION on a run that refunded once.
    Should: the tool's span is the request's rerun (beside its first span); one refund."""
    trace = only(
        [
            agent(1, None, "support_agent", 0, 2_000),
            llm(2, 1, 10, 100, ask("lookup_order", "call_1", A1)),
            run(3, "lookup_order", 101, 110),
            llm(4, 1, 200, 300, ask("issue_refund", "call_2", A1)),
            run(5, "issue_refund", 305, 320, None),  # the wrapper's span
            run(6, "issue_refund", 306, 319),
            llm(7, 1, 400, 500),
        ]
    )

    assert calls_of(trace)[1:] == [
        (5, A1, "call_2", False, "OK"),
        (6, A1, "call_2", True, "OK"),
    ]
    result = Invariants(InvariantsSettings(), ONE_REFUND_POLICY)(trace, Reference())
    assert result is None or result.findings == ()
    assert safety(trace) == []


# What must keep its pairing.


def test_the_same_call_asked_twice_in_one_output_runs_twice() -> None:
    """The model asked for the lookup of A-1 twice in one output: the second span, after the
    first failed, is the second request's execution (it waits, with those arguments)."""
    trace = only(
        [
            agent(1, None, "support_agent", 0, 2_000),
            llm(
                2,
                1,
                10,
                100,
                ask("lookup_order", "call_1", A1, 0),
                ask("lookup_order", "call_2", A1, 1),
            ),
            run(3, "lookup_order", 101, 110, failed=True),
            run(4, "lookup_order", 111, 120),
        ]
    )

    assert calls_of(trace) == [
        (3, A1, "call_1", False, "ERROR"),
        (4, A1, "call_2", False, "OK"),
    ]


def test_a_retry_beside_another_request_of_its_output_runs_its_own_request_again() -> None:
    """One output asks for the lookups of A-1 and B-2; A-1's fails and is run again (A-1
    recorded) before B-2's runs: B-2's request waits, but with other arguments, so the span
    that recorded A-1 is no execution of it."""
    trace = only(
        [
            agent(1, None, "support_agent", 0, 2_000),
            llm(
                2,
                1,
                10,
                100,
                ask("lookup_order", "call_1", A1, 0),
                ask("lookup_order", "call_2", B2, 1),
            ),
            run(3, "lookup_order", 101, 110, failed=True),
            run(4, "lookup_order", 111, 120),
            run(5, "lookup_order", 121, 130, B2_JSON),
        ]
    )

    assert calls_of(trace) == [
        (3, A1, "call_1", False, "ERROR"),
        (4, A1, "call_1", True, "OK"),
        (5, B2, "call_2", False, "OK"),
    ]


def test_a_span_of_other_arguments_after_a_failure_is_no_rerun() -> None:
    """After A-1's lookup failed, a span recording B-2 (no model call recorded between: a
    streamed turn's spans lost) is the next request's execution, as before."""
    trace = only(
        [
            agent(1, None, "support_agent", 0, 2_000),
            llm(2, 1, 10, 100, ask("lookup_order", "call_1", A1)),
            run(3, "lookup_order", 101, 110, failed=True),
            run(4, "lookup_order", 111, 120, B2_JSON),
            llm(5, 1, 200, 300, ask("lookup_order", "call_2", B2)),
        ]
    )

    assert calls_of(trace) == [
        (3, A1, "call_1", False, "ERROR"),
        (4, B2, "call_2", False, "OK"),
    ]


def test_another_service_recording_the_arguments_is_no_rerun() -> None:
    """A span of the tool that another service wrote than its failed attempt is no attempt of
    that attempt's framework: it takes the next request, as before."""
    trace = only(
        [
            agent(1, None, "support_agent", 0, 2_000),
            llm(2, 1, 10, 100, ask("lookup_order", "call_1", A1)),
            run(3, "lookup_order", 101, 110, failed=True),
            run(4, "lookup_order", 111, 120, service="orders"),
            llm(5, 1, 200, 300, ask("lookup_order", "call_2", A1)),
        ]
    )

    assert [(c.call_id, c.rerun) for c in trace.calls] == [("call_1", False), ("call_2", False)]


def test_a_successful_attempt_then_the_same_arguments_after_it_is_no_rerun() -> None:
    """A span after a successful attempt ended (no failure, not beside it) is no retry: it
    takes the next request, as before."""
    trace = only(
        [
            agent(1, None, "support_agent", 0, 2_000),
            llm(2, 1, 10, 100, ask("lookup_order", "call_1", A1)),
            run(3, "lookup_order", 101, 110),
            run(4, "lookup_order", 111, 120),
            llm(5, 1, 200, 300, ask("lookup_order", "call_2", A1)),
        ]
    )

    assert [(c.call_id, c.rerun) for c in trace.calls] == [("call_1", False), ("call_2", False)]
