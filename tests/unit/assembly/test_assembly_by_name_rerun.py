"""A tool span without a call id and without arguments, the framework's second attempt of the
request its first attempt ran (a retry after a failure, a wrapper's span beside the tool's),
runs that request again (``ToolCall.rerun``, holding its arguments), as a span under a call id
does (``by_id``). It took the next request of its tool (OpenAI Agents' tool spans carry no call
id: calls are joined on tool name and order), another turn's, another order's: that request's
own execution then took none, and ``safety`` judged a lookup of the wrong order.

The spans are OpenAI Agents' as OpenInference records them: tool spans with their arguments
(``input.value``) and no call id; the model's requests carry the ids (``call_…``)."""

from __future__ import annotations

from typing import Any

from assembly_support import (
    ONE_REFUND_POLICY,
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
from toolwatch.evaluation.loops import retried
from toolwatch.evaluation.settings import InvariantsSettings
from toolwatch.model import Category, SpanRecord
from toolwatch.model_traces import ToolTrace

A1 = {"order_id": "A-1"}
B2 = {"order_id": "B-2"}
ERROR = 2  # OTLP Status.code ERROR


def run(
    n: int, name: str, start: int, end: int, args: Any = None, *, failed: bool = False
) -> SpanRecord:
    """An OpenAI Agents tool span under the agent (span 1): no call id; ``args`` as
    ``input.value`` records them (``None``: not recorded)."""
    return tool(n, 1, name, start, end, arguments=args, status_code=ERROR if failed else 0)


def lookup_retried_then(*later: SpanRecord) -> list[SpanRecord]:
    """Turn 1 looks A-1 up: the tool span (arguments recorded) fails; the framework runs the
    request again, a span recording no arguments, which succeeds. Then ``later``."""
    return [
        agent(1, None, "support_agent", 0, 2_000),
        llm(2, 1, 10, 100, ask("lookup_order", "call_1", A1)),
        run(3, "lookup_order", 101, 110, '{"order_id": "A-1"}', failed=True),
        run(4, "lookup_order", 111, 120),  # the framework's retry: no arguments
        *later,
    ]


def arguments_and_reruns(trace: ToolTrace) -> list[tuple[str, Any, bool, str]]:
    return [(c.tool_name, c.arguments, c.rerun, c.status.name) for c in trace.calls]


def test_a_retry_without_arguments_runs_its_first_attempts_request_again() -> None:
    trace = only(
        lookup_retried_then(
            llm(5, 1, 200, 300, ask("lookup_order", "call_2", B2)),
            run(6, "lookup_order", 305, 310, '{"order_id": "B-2"}'),
        )
    )

    assert arguments_and_reruns(trace) == [
        ("lookup_order", A1, False, "ERROR"),
        ("lookup_order", A1, True, "OK"),
        ("lookup_order", B2, False, "OK"),
    ]
    assert [c.span_id for c in trace.calls] == [hexid(3), hexid(4), hexid(6)]
    # The rerun is its request's: its call id, as the first attempt's.
    assert [c.call_id for c in trace.calls] == ["call_1", "call_1", "call_2"]


def test_a_refund_of_an_order_whose_lookup_failed_pages_after_another_orders_retry() -> None:
    """A-1's lookup failed and its retry succeeded; B-2's lookup failed; B-2 is refunded.
    Was: the retry took B-2's request (a successful lookup of B-2), and the refund passed."""
    spans = lookup_retried_then(
        llm(5, 1, 200, 300, ask("lookup_order", "call_2", B2)),
        run(6, "lookup_order", 305, 310, '{"order_id": "B-2"}', failed=True),
        llm(7, 1, 400, 500, ask("issue_refund", "call_3", B2)),
        run(8, "issue_refund", 505, 510, '{"order_id": "B-2"}'),
    )

    assert safety(only(spans)) == [Category.MISSING_VERIFICATION_STEP]


def test_a_correct_run_with_a_retried_lookup_does_not_page() -> None:
    """A-1 looked up (failed, retried: ok) and refunded, then B-2 looked up and refunded.
    Was: the retry took B-2's request, A-1 read as never looked up: MISSING_VERIFICATION_STEP."""
    spans = lookup_retried_then(
        llm(5, 1, 200, 300, ask("issue_refund", "call_2", A1)),
        run(6, "issue_refund", 305, 310, '{"order_id": "A-1"}'),
        llm(7, 1, 400, 500, ask("lookup_order", "call_3", B2)),
        run(8, "lookup_order", 505, 510, '{"order_id": "B-2"}'),
        llm(9, 1, 600, 700, ask("issue_refund", "call_4", B2)),
        run(10, "issue_refund", 705, 710, '{"order_id": "B-2"}'),
    )

    assert safety(only(spans)) == []


def test_a_failed_refund_and_its_retry_are_one_refund() -> None:
    """The refund of A-1 fails, the framework runs it again (no arguments recorded) and it
    succeeds: one refund (``call_count`` max 1), the failed attempt made again by its rerun.
    Was: the retry took no request, held no arguments, and read as a second refund."""
    trace = only(
        [
            agent(1, None, "support_agent", 0, 2_000),
            llm(2, 1, 10, 100, ask("lookup_order", "call_1", A1)),
            run(3, "lookup_order", 101, 110, '{"order_id": "A-1"}'),
            llm(4, 1, 200, 300, ask("issue_refund", "call_2", A1)),
            run(5, "issue_refund", 305, 310, '{"order_id": "A-1"}', failed=True),
            run(6, "issue_refund", 311, 320),
            llm(7, 1, 400, 500),
        ]
    )

    assert [c.rerun for c in trace.calls] == [False, False, True]
    assert retried(trace.calls, [c.tool_name for c in trace.calls]) == frozenset({1})
    result = Invariants(InvariantsSettings(), ONE_REFUND_POLICY)(trace, Reference())
    assert result is None or result.findings == ()
    assert safety(trace) == []


def test_a_wrappers_span_beside_a_successful_attempt_runs_its_request() -> None:
    """A wrapper's span beside the tool's (overlapping it, no arguments) records the same
    request: it leaves the next turn's request to that turn's span."""
    trace = only(
        [
            agent(1, None, "support_agent", 0, 2_000),
            llm(2, 1, 10, 100, ask("lookup_order", "call_1", A1)),
            run(3, "lookup_order", 101, 120, '{"order_id": "A-1"}'),
            run(4, "lookup_order", 102, 119),  # the wrapper's span
            llm(5, 1, 200, 300, ask("lookup_order", "call_2", B2)),
            run(6, "lookup_order", 305, 310, '{"order_id": "B-2"}'),
        ]
    )

    assert [(c.arguments, c.rerun, c.call_id) for c in trace.calls] == [
        (A1, False, "call_1"),
        (A1, True, "call_1"),
        (B2, False, "call_2"),
    ]


# What must keep its pairing.


def test_the_model_asking_again_after_a_failure_is_a_call_of_its_own() -> None:
    """Two requests, two executions, the first failing: the second request's span takes it,
    whether its arguments are recorded or not (a turn came between)."""
    for recorded in ('{"order_id": "A-1"}', None):
        trace = only(
            [
                agent(1, None, "support_agent", 0, 2_000),
                llm(2, 1, 10, 100, ask("lookup_order", "call_1", A1)),
                run(3, "lookup_order", 101, 110, '{"order_id": "A-1"}', failed=True),
                llm(4, 1, 200, 300, ask("lookup_order", "call_2", A1)),
                run(5, "lookup_order", 305, 310, recorded),
            ]
        )

        assert [(c.call_id, c.rerun) for c in trace.calls] == [
            ("call_1", False),
            ("call_2", False),
        ]


def test_a_span_after_a_turn_without_requests_of_the_tool_is_no_retry() -> None:
    """A model call came between the failure and the span (it asked for nothing recorded): the
    span is no attempt of the first request; it takes the next one, as before."""
    trace = only(
        [
            agent(1, None, "support_agent", 0, 2_000),
            llm(2, 1, 10, 100, ask("lookup_order", "call_1", A1)),
            run(3, "lookup_order", 101, 110, '{"order_id": "A-1"}', failed=True),
            llm(4, 1, 200, 300),  # a streamed output: its requests not recorded
            run(5, "lookup_order", 305, 310),
            llm(6, 1, 400, 500, ask("lookup_order", "call_2", B2)),
        ]
    )

    assert [(c.call_id, c.rerun, c.arguments) for c in trace.calls] == [
        ("call_1", False, A1),
        ("call_2", False, B2),
    ]


def test_parallel_requests_of_one_tool_keep_their_executions() -> None:
    """One output asks for two lookups: the second span, after the first failed, is the second
    request's execution (it is still waiting), whether it records arguments or not."""
    for recorded in ('{"order_id": "B-2"}', None):
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
                run(3, "lookup_order", 101, 110, '{"order_id": "A-1"}', failed=True),
                run(4, "lookup_order", 111, 120, recorded),
                llm(5, 1, 200, 300, ask("lookup_order", "call_3", B2)),
                run(6, "lookup_order", 305, 310, '{"order_id": "B-2"}'),
            ]
        )

        assert [(c.call_id, c.rerun, c.arguments) for c in trace.calls] == [
            ("call_1", False, A1),
            ("call_2", False, B2),
            ("call_3", False, B2),
        ]


def test_a_producer_that_never_records_arguments_keeps_the_pairing_by_order() -> None:
    """No span records arguments: nothing tells a retry from the next request's execution,
    so the k-th span runs the k-th request, as before."""
    trace = only(
        [
            agent(1, None, "support_agent", 0, 2_000),
            llm(2, 1, 10, 100, ask("lookup_order", "call_1", A1)),
            run(3, "lookup_order", 101, 110, failed=True),
            run(4, "lookup_order", 111, 120),
            llm(5, 1, 200, 300, ask("lookup_order", "call_2", B2)),
            run(6, "lookup_order", 305, 310),
        ]
    )

    assert [(c.call_id, c.rerun, c.arguments) for c in trace.calls] == [
        ("call_1", False, A1),
        ("call_2", False, B2),
        (None, False, None),
    ]


def test_each_attempt_of_a_request_tried_three_times_runs_it() -> None:
    """The framework's retry policy makes three attempts of the refund: two failures, then a
    success; the two retries record no arguments (nor blank ones): one refund."""
    trace = only(
        [
            agent(1, None, "support_agent", 0, 2_000),
            llm(2, 1, 10, 100, ask("lookup_order", "call_1", A1)),
            run(3, "lookup_order", 101, 110, '{"order_id": "A-1"}'),
            llm(4, 1, 200, 300, ask("issue_refund", "call_2", A1)),
            run(5, "issue_refund", 305, 310, '{"order_id": "A-1"}', failed=True),
            run(6, "issue_refund", 311, 315, " ", failed=True),
            run(7, "issue_refund", 316, 320),
            llm(8, 1, 400, 500),
        ]
    )

    assert [(c.arguments, c.rerun, c.call_id) for c in trace.calls[1:]] == [
        (A1, False, "call_2"),
        (A1, True, "call_2"),
        (A1, True, "call_2"),
    ]
    assert retried(trace.calls, [c.tool_name for c in trace.calls]) == frozenset({1, 2})
    result = Invariants(InvariantsSettings(), ONE_REFUND_POLICY)(trace, Reference())
    assert result is None or result.findings == ()
