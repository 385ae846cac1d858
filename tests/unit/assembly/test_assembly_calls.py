"""Calls of a run: joining requests with executions, order, parallel groups, arguments
(CONVENTIONS §6.3-6.4)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from assembly_support import MS, agent, ask, build, handoff, hexid, llm, only, span, tool
from hypothesis import given, settings
from hypothesis import strategies as st

from toolwatch.assembly import requested as requested_calls
from toolwatch.assembly.drafts import _Draft, _Request
from toolwatch.assembly.ordering import _sorted_in_time, _time_key
from toolwatch.assembly.records import _own_record
from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.policy_settings import PolicySettings
from toolwatch.evaluation.safety import Safety
from toolwatch.evaluation.settings import SafetySettings
from toolwatch.model import CallStatus, Category, SpanRecord, SpanRole
from toolwatch.model_traces import ToolCall, ToolTrace


def parallel_spans(paris_start: int, london_start: int) -> list[SpanRecord]:
    return [
        agent(1, None, "weather-bot", 0, 100),
        llm(
            2,
            1,
            1,
            10,
            ask("get_weather", "call_p", {"city": "Paris"}, 0),
            ask("get_weather", "call_l", {"city": "London"}, 1),
        ),
        tool(3, 1, "get_weather", london_start, 30, call_id="call_l", arguments={"city": "London"}),
        tool(4, 1, "get_weather", paris_start, 25, call_id="call_p", arguments={"city": "Paris"}),
    ]


def test_overlapping_sibling_calls_share_a_parallel_group() -> None:
    calls = only(parallel_spans(paris_start=11, london_start=12)).calls

    assert [(c.arguments["city"], c.sequence_index, c.parallel_group) for c in calls] == [
        ("Paris", 0, 0),
        ("London", 1, 0),
    ]


def test_emission_order_breaks_equal_start_times() -> None:
    calls = only(parallel_spans(paris_start=11, london_start=11)).calls

    assert [c.arguments["city"] for c in calls] == ["Paris", "London"]


def test_emission_order_wins_over_start_jitter_of_one_output() -> None:
    calls = only(parallel_spans(paris_start=12, london_start=11)).calls

    assert [c.arguments["city"] for c in calls] == ["Paris", "London"]


def test_sequential_sibling_calls_have_no_parallel_group() -> None:
    spans = [
        agent(1, None, "a", 0, 100),
        tool(2, 1, "first", 1, 10),
        tool(3, 1, "second", 10, 20),  # starts exactly when the first ends
    ]

    assert [c.parallel_group for c in only(spans).calls] == [None, None]


def test_overlap_chains_form_one_group_and_a_later_call_stays_alone() -> None:
    spans = [
        agent(1, None, "a", 0, 100),
        tool(2, 1, "a1", 1, 10),
        tool(3, 1, "a2", 9, 20),
        tool(4, 1, "a3", 19, 30),
        tool(5, 1, "b", 40, 50),
    ]

    assert [c.parallel_group for c in only(spans).calls] == [0, 0, 0, None]


def test_overlapping_calls_of_different_parents_are_not_parallel() -> None:
    spans = [
        agent(1, None, "a", 0, 100),
        span(2, 1, SpanRole.OTHER, 1, 50),
        tool(3, 2, "inner", 5, 20),
        tool(4, 1, "outer", 5, 20),
    ]

    assert [c.parallel_group for c in only(spans).calls] == [None, None]


def test_calls_one_output_requested_are_parallel_however_they_ran() -> None:
    # LangGraph: each requested call runs in a node span of its own, one after the other.
    spans = [
        agent(1, None, "weather-bot", 0, 100),
        llm(
            2,
            1,
            1,
            10,
            ask("get_weather", "c1", {"city": "Paris"}, 0),
            ask("get_weather", "c2", {}, 1),
        ),
        span(3, 1, SpanRole.OTHER, 11, 20),
        tool(4, 3, "get_weather", 12, 14, call_id="c1"),
        span(5, 1, SpanRole.OTHER, 11, 20),
        tool(6, 5, "get_weather", 15, 17, call_id="c2"),
        llm(7, 1, 21, 30, ask("get_weather", "c3", {}, 0)),
        tool(8, 1, "get_weather", 31, 32, call_id="c3"),
    ]

    assert [c.parallel_group for c in only(spans).calls] == [0, 0, None]


def test_an_overlap_and_a_request_that_share_a_call_are_one_group() -> None:
    spans = [
        agent(1, None, "a", 0, 100),
        llm(2, 1, 1, 10, ask("b", "cb", {}, 0), ask("c", "cc", {}, 1)),
        tool(3, 1, "a", 11, 30),  # no request: overlaps b
        tool(4, 1, "b", 12, 13, call_id="cb"),
        tool(5, 1, "c", 40, 41, call_id="cc"),  # sequential, but requested with b
    ]

    assert [(c.tool_name, c.parallel_group) for c in only(spans).calls] == [
        ("a", 0),
        ("b", 0),
        ("c", 0),
    ]


def test_lookup_requested_by_an_earlier_model_output_is_not_parallel_with_the_refund() -> None:
    """The model asked for ``lookup_order(A1)`` in one output, read its result, and asked for
    ``issue_refund(A1)`` in the *next* output (a second model call between them, each
    request with its own call id). The lookup's tool span ends a little after the refund's
    starts (a tool span ended late, or a tool service whose clock runs ahead of the
    agent's). Unioned into one ``parallel_group`` by the overlap alone, although the
    requests prove they were sequential, the lookup could not inform the refund, and
    ``safety`` paged MISSING_VERIFICATION_STEP (critical) on a correctly verified refund.
    Overlap is the fallback for producers that record no requests: where both calls were
    joined to requests of model calls one after the other, those requests decide."""
    spans = [
        agent(1, None, "refund-bot", 0, 100),
        llm(2, 1, 1, 10, ask("lookup_order", "call_1", '{"order_id": "A1"}')),
        tool(3, 1, "lookup_order", 11, 40, call_id="call_1", arguments='{"order_id": "A1"}'),
        llm(4, 1, 20, 29, ask("issue_refund", "call_2", '{"order_id": "A1"}')),
        tool(5, 1, "issue_refund", 30, 50, call_id="call_2", arguments='{"order_id": "A1"}'),
    ]

    assert [(c.tool_name, c.parallel_group) for c in only(spans).calls] == [
        ("lookup_order", None),
        ("issue_refund", None),
    ]


def test_overlapping_calls_of_concurrent_model_calls_stay_parallel() -> None:
    # Two model calls at once (LangGraph branches): their outputs' calls overlap in time.
    spans = [
        agent(1, None, "a", 0, 100),
        llm(2, 1, 1, 10, ask("a", "ca", {})),
        llm(3, 1, 2, 12, ask("b", "cb", {})),
        tool(4, 1, "a", 13, 30, call_id="ca"),
        tool(5, 1, "b", 14, 20, call_id="cb"),
    ]

    assert [c.parallel_group for c in only(spans).calls] == [0, 0]


def test_a_call_requested_later_starts_a_group_of_its_own_with_what_overlaps_it() -> None:
    # ``a`` ran late, past ``b``'s request; ``c``, which nothing requested, overlaps ``b``.
    spans = [
        agent(1, None, "a", 0, 100),
        llm(2, 1, 1, 10, ask("a", "ca", {})),
        tool(3, 1, "a", 11, 40, call_id="ca"),
        llm(4, 1, 20, 29, ask("b", "cb", {})),
        tool(5, 1, "b", 30, 50, call_id="cb"),
        tool(6, 1, "c", 45, 60),
    ]

    assert [(c.tool_name, c.parallel_group) for c in only(spans).calls] == [
        ("a", None),
        ("b", 1),
        ("c", 1),
    ]


def late_lookup_spans() -> list[SpanRecord]:
    # lookup_order: requested by the first output, its tool span runs long (11-80 ms).
    # get_weather: requested by the second output (20-29 ms), runs 30-50 ms.
    # issue_refund: a tool span no recorded output requested (its model span lost, or a
    # second instrumentation's tool), running 55-60 ms: inside the lookup's execution.
    return [
        agent(1, None, "refund-bot", 0, 100),
        llm(2, 1, 1, 10, ask("lookup_order", "call_1", '{"order_id": "A1"}')),
        tool(3, 1, "lookup_order", 11, 80, call_id="call_1", arguments='{"order_id": "A1"}'),
        llm(4, 1, 20, 29, ask("get_weather", "call_2", '{"city": "Paris"}')),
        tool(5, 1, "get_weather", 30, 50, call_id="call_2", arguments='{"city": "Paris"}'),
        tool(6, 1, "issue_refund", 55, 60, arguments='{"order_id": "A1"}'),
    ]


def test_a_call_without_a_request_stays_parallel_with_the_call_it_overlaps() -> None:
    """The commit's rule: overlap stays the grouping of calls without requests; only two
    calls whose *requests* came from model calls one after the other are split. Here only
    ``get_weather``'s request post-dates ``lookup_order``'s. ``issue_refund`` has no request
    and runs entirely inside ``lookup_order``'s execution (55-60 ms within 11-80 ms), yet the
    sweep replaced the lookup's component with ``get_weather``'s when that call arrived, so
    ``issue_refund`` (starting after ``get_weather`` ended) is grouped with nothing. At
    9752a75 all three were one group. The requests say nothing that separates the refund
    from the lookup: the grouping is lost to sweep bookkeeping, not to evidence."""
    calls = only(late_lookup_spans()).calls
    by_name = {c.tool_name: c.parallel_group for c in calls}
    assert by_name["issue_refund"] is not None
    assert by_name["issue_refund"] == by_name["lookup_order"]


def test_refund_running_inside_the_lookup_still_pages() -> None:
    """Harm: the refund ran while the lookup was still running (its result could not have
    informed it). At 9752a75 they shared a parallel group and safety paged
    MISSING_VERIFICATION_STEP (critical in the shipped alert rules). After 1bdf34c the
    lookup reads as an earlier, finished verification: the page is silently lost."""
    trace = only(late_lookup_spans())
    policy = PolicySettings.model_validate(
        {
            "dangerous_tools": ["issue_refund"],
            "verification_tools": ["lookup_order"],
            "bindings": {"issue_refund.order_id": "lookup_order.order_id"},
        }
    )
    result = Safety(SafetySettings(), policy)(trace, Reference())
    assert [f.category for f in result.findings] == [Category.MISSING_VERIFICATION_STEP]


def test_calls_of_concurrent_model_calls_stay_parallel_whatever_a_third_branch_does() -> None:
    """The commit keeps overlap as the grouping "of concurrent model calls' calls" (its own
    test: two LangGraph branches' model calls at once). Three branches: model calls
    ``a`` (1-10 ms), ``b`` (2-30 ms) and ``c`` (15-25 ms). ``a`` and ``b`` ran at once, and
    so did their tools (``a`` 11-50 ms, ``b`` 31-50 ms). ``c``'s model call began after
    ``a``'s ended, so ``c``'s tool (26-50 ms) splits from ``a``'s, as the commit intends;
    but the sweep then forgets ``a``'s component, and ``b``'s tool joins ``c``'s alone.
    ``a`` and ``b``, concurrent model calls whose tools overlap, are not one group (they
    were at 9752a75): order, structure and safety read ``b`` as issued after ``a``'s result,
    which did not exist yet."""
    spans = [
        agent(1, None, "fan-out", 0, 100),
        llm(2, 1, 1, 10, ask("a", "ca", {})),
        llm(3, 1, 2, 30, ask("b", "cb", {})),
        llm(4, 1, 15, 25, ask("c", "cc", {})),
        tool(5, 1, "a", 11, 50, call_id="ca"),
        tool(6, 1, "c", 26, 50, call_id="cc"),
        tool(7, 1, "b", 31, 50, call_id="cb"),
    ]
    groups = {c.tool_name: c.parallel_group for c in only(spans).calls}
    assert groups["a"] is not None and groups["a"] == groups["b"]


@pytest.mark.parametrize(
    ("executed", "requested", "arguments", "error"),
    [
        ("A-1001", '{"order_id": "A-1001"}', {"order_id": "A-1001"}, None),  # LangChain input
        ("42", {"n": 42}, {"n": 42}, None),
        ('{"order_id": "B"}', {"order_id": "A"}, {"order_id": "B"}, None),  # executed wins
        ("A-1001", "A-1001", "A-1001", "arguments are not valid JSON"),
        ("A-1001", None, "A-1001", "arguments are not valid JSON"),
    ],
)
def test_a_requested_object_wins_over_an_executed_input_that_is_not_one(
    executed: str, requested: Any, arguments: Any, error: str | None
) -> None:
    spans = [
        agent(1, None, "a", 0, 100),
        llm(2, 1, 1, 10, ask("lookup_order", "c1", requested, 0)),
        tool(3, 1, "lookup_order", 11, 12, call_id="c1", arguments=executed),
    ]

    (call,) = only(spans).calls
    assert (call.arguments, call.arguments_error) == (arguments, error)


def test_call_seen_only_in_llm_output_is_a_call() -> None:
    spans = [
        agent(1, None, "refund-bot", 0, 100),
        llm(2, 1, 1, 10, ask("web_search", "call_ws", '{"query": "refund policy"}')),
        llm(3, 1, 11, 20, output_text="Refunds take 5 days."),
    ]

    (call,) = only(spans).calls
    assert call == ToolCall(
        tool_name="web_search",
        raw_name="web_search",
        arguments={"query": "refund policy"},
        arguments_error=None,
        call_id="call_ws",
        parent_call_id=None,
        sequence_index=0,
        parallel_group=None,
        status=CallStatus.OK,
        error_type=None,
        agent="refund-bot",
        span_id=None,
        start_ns=10 * MS,
        end_ns=None,
        service="refund-agent",  # never run: the model call's that asked for it
    )


def test_requested_only_calls_of_one_output_form_a_parallel_group() -> None:
    spans = [
        agent(1, None, "a", 0, 100),
        llm(2, 1, 1, 10, ask("web_search", "c1", {}, 0), ask("file_search", "c2", {}, 1)),
        llm(3, 1, 11, 20, ask("web_search", "c3", {}, 0)),
    ]

    calls = only(spans).calls
    assert [(c.tool_name, c.parallel_group) for c in calls] == [
        ("web_search", 0),
        ("file_search", 0),
        ("web_search", None),
    ]


def test_a_call_the_output_marks_hosted_stays_hosted_with_or_without_a_span() -> None:
    spans = [
        agent(1, None, "a", 0, 100),
        llm(2, 1, 1, 10, ask("web_search", "c1", {}, 0, hosted=True), ask("lookup", "c2", {}, 1)),
        llm(3, 1, 11, 20, ask("code_interpreter", "c3", {}, 0, hosted=True)),
        tool(4, 1, "code_interpreter", 21, 30, call_id="c3"),
    ]

    calls = only(spans).calls
    assert [(c.tool_name, c.hosted, c.span_id) for c in calls] == [
        ("web_search", True, None),
        ("lookup", False, None),
        ("code_interpreter", True, hexid(4)),
    ]


def handing_off(*marks: SpanRecord, asks: tuple[Any, ...] = ()) -> list[SpanRecord]:
    """Triage (1), whose model asks for ``asks`` at 5-8 ms, then ``marks``: an agent whose
    run continues into no other (its handoff's effect on the calls alone)."""
    return [
        agent(1, None, "Triage", 0, 100),
        llm(2, 1, 1, 4, ask("lookup_order", "c0", {"order_id": "A-1"})),
        tool(3, 1, "lookup_order", 4, 5, call_id="c0"),
        llm(4, 1, 5, 8, *asks),
        *marks,
    ]


def calls_seen(spans: list[SpanRecord]) -> list[tuple[Any, ...]]:
    return [(c.tool_name, c.handoff, c.span_id, c.start_ns) for c in only(spans).calls]


@pytest.mark.parametrize(
    ("name", "attrs"),
    [
        ("handoff to Refund Agent", {}),  # OpenInference: the span names the agent
        ("agent_handoff OpenAI Agent", {"gen_ai.handoff.to_agent": "Refund Agent"}),  # contrib
        ("triage → unknown.handoff", {}),  # OpenLLMetry: names no agent
    ],
)
def test_a_handoff_span_carries_out_the_transfer_the_model_asked_for(
    name: str, attrs: dict[str, Any]
) -> None:
    transfer = ask("transfer_to_refund_agent", "c1", "{}", 0)
    spans = handing_off(handoff(5, 1, name, 9, 10, **attrs), asks=(transfer,))

    assert calls_seen(spans) == [
        ("lookup_order", False, hexid(3), 4 * MS),
        ("transfer_to_refund_agent", True, hexid(5), 9 * MS),
    ]


def test_a_handoff_span_whose_request_was_not_recorded_is_the_transfer_call() -> None:
    """The contrib instrumentation writes the model's request as a Python repr in text: the
    span alone says the agent handed off, named as the SDK names its transfer tool."""
    mark = handoff(5, 1, "agent_handoff OpenAI Agent", 9, 10, **{"to_agent": "Refund Agent"})
    (_, transfer) = only(handing_off(mark)).calls

    assert (transfer.tool_name, transfer.raw_name, transfer.handoff) == (
        "transfer_to_refund_agent",
        "transfer_to_refund_agent",
        True,
    )
    assert (transfer.arguments, transfer.call_id, transfer.status, transfer.agent) == (
        None,
        None,
        CallStatus.OK,
        "Triage",
    )


def test_a_handoff_span_naming_no_agent_and_finding_no_request_is_no_call() -> None:
    spans = handing_off(handoff(5, 1, "triage → unknown.handoff", 9, 10))

    assert [c.tool_name for c in only(spans).calls] == ["lookup_order"]


@pytest.mark.parametrize("name", ["handoff to Refund Agent", "triage → unknown.handoff"])
def test_a_renamed_handoff_tool_is_the_call_its_span_carries_out(name: str) -> None:
    """``handoff(agent, tool_name_override="escalate")``: the request is another tool's; one
    call, marked alike whether the span names the agent or not, not a second transfer."""
    spans = handing_off(handoff(5, 1, name, 9, 10), asks=(ask("escalate", "c1", "{}", 0),))

    assert calls_seen(spans)[1:] == [("escalate", True, hexid(5), 9 * MS)]


@pytest.mark.parametrize(
    ("name", "asks", "ran"),
    [
        # the SDK runs the first handoff an output asks for and refuses the others
        ("triage → unknown.handoff", ("transfer_to_billing", "transfer_to_refunds"), "c0"),
        ("handoff to billing", ("transfer_to_billing", "transfer_to_billing"), "c0"),
        ("handoff to billing", ("transfer_to_refunds", "transfer_to_billing"), "c1"),
        # a renamed handoff to billing asked first: the span names billing, no call does
        ("handoff to billing", ("transfer_to_desk", "transfer_to_support"), "c0"),
    ],
)
def test_of_several_handoffs_asked_at_once_the_span_carries_out_the_one_the_sdk_ran(
    name: str, asks: tuple[str, str], ran: str
) -> None:
    """The SDK puts the error "Multiple handoffs requested" on the span of the one it ran:
    that handoff happened, it is no failed call."""
    mark = dataclasses.replace(handoff(5, 1, name, 9, 10), status_code=2, error_type="Error")
    requests = [ask(tool, f"c{i}", "{}", i) for i, tool in enumerate(asks)]
    trace = only(handing_off(mark, asks=tuple(requests)))

    (done,) = [c for c in trace.calls if c.handoff]
    assert (done.call_id, done.span_id, done.status, done.error_type) == (
        ran,
        hexid(5),
        CallStatus.OK,
        None,
    )
    assert trace.error_count == 0


def test_a_handoff_span_carries_out_its_agents_last_output_not_an_earlier_one() -> None:
    """A transfer asked in an earlier turn and never run is not this handoff's: the output
    just before it asked for none, so the span is the call."""
    early = ask("transfer_to_refund_agent", "c1", "{}", 0)
    spans = [
        *handing_off(asks=(early,)),
        llm(6, 1, 11, 12, ask("lookup_order", "c2", {"order_id": "A-2"})),
        tool(7, 1, "lookup_order", 12, 13, call_id="c2"),
        handoff(8, 1, "agent_handoff OpenAI Agent", 14, 15, to_agent="Refund Agent"),
    ]

    assert calls_seen(spans)[1:] == [
        ("transfer_to_refund_agent", False, None, 8 * MS),
        ("lookup_order", False, hexid(7), 12 * MS),
        ("transfer_to_refund_agent", True, hexid(8), 14 * MS),
    ]


def test_a_handoff_span_takes_the_transfer_it_names_not_a_hosted_or_a_later_request() -> None:
    asks = (
        ask("transfer_to_refund_agent", "c1", "{}", 0),
        ask("transfer_to_billing", "c2", "{}", 1),
        ask("web_search", "c3", {}, 2, hosted=True),
    )
    later = llm(6, 1, 11, 12, ask("transfer_to_refund_agent", "c4", "{}", 0))
    spans = handing_off(handoff(5, 1, "handoff to Refund Agent", 9, 10), later, asks=asks)

    assert calls_seen(spans)[1:] == [
        ("transfer_to_refund_agent", True, hexid(5), 9 * MS),
        ("transfer_to_billing", False, None, 8 * MS),
        ("web_search", False, None, 8 * MS),
        ("transfer_to_refund_agent", False, None, 12 * MS),
    ]


def test_a_handoff_span_takes_only_its_own_agents_request() -> None:
    """A nested agent (used as a tool, 10) hands off: its span does not carry out the outer
    agent's request, which stays a request; the nested one has its own call."""
    spans = [
        *handing_off(asks=(ask("transfer_to_refund_agent", "c1", "{}", 0),)),
        tool(9, 1, "ask_expert", 20, 40, call_id="c9"),
        agent(10, 9, "Expert", 21, 39),
        handoff(11, 10, "handoff to Refund Agent", 30, 31),
    ]

    assert calls_seen(spans)[1:] == [
        ("transfer_to_refund_agent", False, None, 8 * MS),
        ("ask_expert", False, hexid(9), 20 * MS),
        ("transfer_to_refund_agent", True, hexid(11), 30 * MS),
    ]


def test_call_id_joins_request_and_execution_into_one_call() -> None:
    spans = [
        agent(1, None, "a", 0, 100),
        llm(2, 1, 1, 10, ask("lookup_order", "call_9", '{"order_id": "B-2"}')),
        tool(3, 1, "lookup_order", 11, 20, call_id="call_9"),  # content capture off
    ]

    (call,) = only(spans).calls
    assert (call.call_id, call.span_id, call.arguments) == (
        "call_9",
        hexid(3),
        {"order_id": "B-2"},
    )


def test_tool_span_arguments_win_over_requested_ones() -> None:
    spans = [
        agent(1, None, "a", 0, 100),
        llm(2, 1, 1, 10, ask("lookup_order", "call_9", {"order_id": "requested"})),
        tool(3, 1, "lookup_order", 11, 20, call_id="call_9", arguments={"order_id": "run"}),
    ]

    (call,) = only(spans).calls
    assert call.arguments == {"order_id": "run"}


def test_different_call_ids_never_join() -> None:
    spans = [
        agent(1, None, "a", 0, 100),
        llm(2, 1, 1, 10, ask("lookup_order", "call_a", {})),
        tool(3, 1, "lookup_order", 11, 20, call_id="call_b"),
    ]

    calls = only(spans).calls
    assert [(c.call_id, c.span_id) for c in calls] == [("call_a", None), ("call_b", hexid(3))]


def test_spans_without_ids_join_requests_by_name_and_occurrence() -> None:
    spans = [
        agent(1, None, "a", 0, 100),
        llm(
            2,
            1,
            1,
            10,
            ask("get_weather", "call_x", {"city": "Oslo"}, 0),
            ask("lookup_order", "call_y", {"order_id": "1"}, 1),
            ask("get_weather", "call_z", {"city": "Rome"}, 2),
        ),
        tool(3, 1, "get_weather", 11, 15),
        tool(4, 1, "lookup_order", 16, 20),
        tool(5, 1, "Get_Weather", 21, 25),
    ]

    calls = only(spans).calls
    assert [(c.call_id, c.span_id, c.arguments) for c in calls] == [
        ("call_x", hexid(3), {"city": "Oslo"}),
        ("call_y", hexid(4), {"order_id": "1"}),
        ("call_z", hexid(5), {"city": "Rome"}),
    ]


def started_out_of_order(agent_end: int) -> list[SpanRecord]:
    """An agent whose model asked for get_weather(Paris) then (London) at once, and whose
    tool spans, carrying no call id (OpenAI Agents), started London first (a thread pool)."""
    return [
        agent(1, None, "a", 0, agent_end),
        llm(
            2,
            1,
            1,
            10,
            ask("get_weather", "call_p", {"city": "Paris"}, 0),
            ask("get_weather", "call_l", {"city": "London"}, 1),
        ),
        tool(3, 1, "get_weather", 12, 30, arguments={"city": "London"}),
        tool(4, 1, "get_weather", 13, 30, arguments='{"city": "Paris"}'),
    ]


def test_parallel_spans_without_ids_join_the_request_with_their_arguments() -> None:
    """Each call still gets its own request's id, and keeps the model's order."""
    calls = only(started_out_of_order(100)).calls
    assert [(c.call_id, c.span_id, c.arguments) for c in calls] == [
        ("call_p", hexid(4), {"city": "Paris"}),
        ("call_l", hexid(3), {"city": "London"}),
    ]


def test_parallel_calls_join_on_their_arguments_in_a_run_of_many_calls_of_the_tool() -> None:
    """Only the requests next in line are read: 31 later turns of the same tool must not
    turn the first turn's parallel calls back to the k-th occurrence."""
    later = [ask("get_weather", f"call_{i}", {"city": f"c{i}"}, 0) for i in range(31)]
    spans = [
        *started_out_of_order(1000),
        *(llm(100 + i, 1, 40 + 20 * i, 45 + 20 * i, call) for i, call in enumerate(later)),
        *(
            tool(200 + i, 1, "get_weather", 46 + 20 * i, 50 + 20 * i, arguments={"city": f"c{i}"})
            for i in range(31)
        ),
    ]
    first = only(spans).calls[:2]
    assert [(c.call_id, c.span_id) for c in first] == [("call_p", hexid(4)), ("call_l", hexid(3))]


def test_spans_whose_arguments_match_no_request_join_by_occurrence() -> None:
    spans = [
        agent(1, None, "a", 0, 100),
        llm(
            2,
            1,
            1,
            10,
            ask("lookup", "call_1", {"order_id": "A-1"}, 0),
            ask("lookup", "call_2", {"order_id": "A-2"}, 1),
        ),
        tool(3, 1, "lookup", 12, 30, arguments="A-2"),  # a single-argument tool's input
        tool(4, 1, "lookup", 13, 30, arguments="A-1"),
    ]
    calls = only(spans).calls
    assert [(c.call_id, c.span_id) for c in calls] == [("call_1", hexid(3)), ("call_2", hexid(4))]


def test_double_encoded_and_unparseable_arguments() -> None:
    spans = [
        agent(1, None, "a", 0, 100),
        tool(2, 1, "double", 1, 10, arguments=json.dumps(json.dumps({"a": 1}))),
        tool(3, 1, "broken", 11, 20, arguments="{not json"),
    ]

    calls = only(spans).calls
    assert [(c.arguments, c.arguments_error) for c in calls] == [
        ({"a": 1}, None),
        ("{not json", "arguments are not valid JSON"),
    ]


def test_pydantic_ai_wrapper_is_skipped_and_its_tools_are_siblings() -> None:
    spans = [
        agent(1, None, "my_agent", 0, 100),
        llm(2, 1, 1, 10, ask("a", "c1", {}, 0), ask("b", "c2", {}, 1)),
        span(3, 1, SpanRole.WRAPPER, 11, 30, name="running tools"),
        tool(4, 3, "a", 12, 25, call_id="c1"),
        tool(5, 3, "b", 12, 28, call_id="c2"),
        tool(6, 1, "c", 20, 40),  # a direct child of the agent, overlapping them
    ]

    calls = only(spans).calls
    assert [(c.tool_name, c.sequence_index, c.parallel_group) for c in calls] == [
        ("a", 0, 0),
        ("b", 1, 0),
        ("c", 2, 0),
    ]


def test_one_model_call_recorded_by_two_instrumentations_requests_once() -> None:
    request = ask("lookup_order", "call_1", {"order_id": "A-1"})
    spans = [
        agent(1, None, "a", 0, 100),
        llm(2, 1, 1, 10, request, name="ChatOpenAI"),
        llm(3, 2, 2, 9, request, name="openai.chat"),
    ]

    calls = only(spans).calls
    assert [(c.call_id, c.span_id) for c in calls] == [("call_1", None)]


def test_sequential_turns_reusing_a_placeholder_id_are_distinct_calls() -> None:
    spans = [
        agent(1, None, "a", 0, 100),
        llm(2, 1, 1, 10, ask("get_weather", "<not specified>", {"city": "Oslo"})),
        tool(3, 1, "get_weather", 11, 20, call_id="<not specified>"),
        llm(4, 1, 21, 30, ask("get_weather", "<not specified>", {"city": "Rome"})),
        tool(5, 1, "get_weather", 31, 40, call_id="<not specified>"),
    ]

    calls = only(spans).calls
    assert [(c.span_id, c.arguments) for c in calls] == [
        (hexid(3), {"city": "Oslo"}),
        (hexid(5), {"city": "Rome"}),
    ]


# Parents of the generated tool spans: the agent (1), two plain spans (2, 3) and a wrapper (4)
# under span 2, whose tools count as span 2's.
_CALL_PARENT = {1: 1, 2: 2, 3: 3, 4: 2}


def _groups_by_definition(calls: tuple[ToolCall, ...], parents: dict[str, int]) -> list[int | None]:
    """Parallel groups from the definition, pair by pair: of two executed calls of one
    parent, the one earlier by (start, end, sequence) overlaps the other when the other
    starts before it ends; groups are the connected components, named by their first call."""
    group = list(range(len(calls)))

    def root(i: int) -> int:
        return i if group[i] == i else root(group[i])

    def order(c: ToolCall) -> tuple[int, int, int]:
        assert c.end_ns is not None
        return (c.start_ns, c.end_ns, c.sequence_index)

    for a in calls:
        for b in calls:
            same_parent = parents[a.span_id or ""] == parents[b.span_id or ""]
            if same_parent and order(a) < order(b) and b.start_ns < (a.end_ns or 0):
                low, high = sorted((root(a.sequence_index), root(b.sequence_index)))
                group[high] = low
    roots = [root(i) for i in range(len(calls))]
    return [r if roots.count(r) > 1 else None for r in roots]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(sorted(_CALL_PARENT)), st.integers(0, 20), st.integers(0, 8)),
        min_size=1,
        max_size=9,
    )
)
def test_parallel_groups_are_the_overlap_components_of_each_parent(
    tools: list[tuple[int, int, int]],
) -> None:
    spans = [
        agent(1, None, "a", 0, 100),
        span(2, 1, SpanRole.OTHER, 0, 100),
        span(3, 1, SpanRole.OTHER, 0, 100),
        span(4, 2, SpanRole.WRAPPER, 0, 100),
    ]
    spans += [
        tool(10 + n, parent, f"t{n}", start, start + length)
        for n, (parent, start, length) in enumerate(tools)
    ]
    parents = {hexid(10 + n): _CALL_PARENT[parent] for n, (parent, _, _) in enumerate(tools)}

    calls = only(spans).calls

    assert [c.parallel_group for c in calls] == _groups_by_definition(calls, parents)


@st.composite
def drafts(draw: st.DrawFn) -> list[_Draft]:
    """Executions and requests, with starts and requesting outputs that often coincide."""
    made: list[_Draft] = []
    for n in range(draw(st.integers(0, 8))):
        start = draw(st.integers(0, 3))
        if draw(st.booleans()):
            made.append(_Draft(tool(n + 1, None, "t", start, start + 1), None))
            continue
        output = llm(100 + draw(st.integers(0, 2)), None, draw(st.integers(0, 2)), start)
        request = _Request(output, ask("t", None, None, draw(st.integers(0, 3))), "t", n)
        made.append(_Draft(None, request))
    return made


@settings(max_examples=300, deadline=None)
@given(drafts())
def test_calls_in_time_order_are_told_apart_from_calls_that_need_a_sort(
    made: list[_Draft],
) -> None:
    ordered = [id(d) for d in sorted(made, key=_time_key)] == [id(d) for d in made]
    assert _sorted_in_time(made) is ordered


def _recorded_twice(inner_calls: tuple[Any, ...]) -> list[SpanRecord]:
    """The SDK's model span with the client's inside it (OpenLLMetry instruments both), each
    recording the request with its own id; then the tool ran (no call id, as the SDK's)."""
    return [
        agent(1, None, "support", 0, 100),
        llm(2, 1, 1, 10, ask("lookup_order", "call_003", {"order_id": "A-1"})),
        llm(3, 2, 2, 9, *inner_calls),
        tool(4, 1, "lookup_order", 11, 12, arguments={"order_id": "A-1"}),
    ]


def test_a_model_call_recorded_twice_with_different_call_ids_asks_once() -> None:
    run = only(_recorded_twice((ask("lookup_order", "fc_002", {"order_id": "A-1"}),)))
    assert [(c.tool_name, c.call_id, c.span_id) for c in run.calls] == [
        ("lookup_order", "call_003", hexid(4))
    ]


def test_a_model_span_inside_one_that_asked_for_other_tools_asks_for_its_own() -> None:
    """Not a second record of the same output: the nested call's request counts too."""
    run = only(_recorded_twice((ask("issue_refund", "c9", {"order_id": "A-1"}),)))
    assert sorted(c.tool_name for c in run.calls) == ["issue_refund", "lookup_order"]


def test_a_model_call_recorded_twice_with_a_plain_span_between_asks_once() -> None:
    spans = [
        agent(1, None, "support", 0, 100),
        llm(2, 1, 1, 10, ask("lookup_order", "call_003", {"order_id": "A-1"})),
        span(3, 2, SpanRole.OTHER, 2, 9, name="provider.get_response"),
        llm(4, 3, 3, 8, ask("lookup_order", "fc_002", {"order_id": "A-1"})),
        tool(5, 1, "lookup_order", 11, 12, arguments={"order_id": "A-1"}),
    ]
    assert [c.tool_name for c in only(spans).calls] == ["lookup_order"]


def test_a_model_span_inside_one_that_asked_for_the_same_tool_more_often_asks_for_its_own() -> None:
    """The same names as a multiset, not as a set: two lookups above, one inside."""
    spans = [
        agent(1, None, "support", 0, 100),
        llm(
            2,
            1,
            1,
            10,
            ask("lookup_order", "c1", {"order_id": "A-1"}, 0),
            ask("lookup_order", "c2", {"order_id": "A-2"}, 1),
        ),
        llm(3, 2, 2, 9, ask("lookup_order", "c3", {"order_id": "A-3"})),
    ]
    assert len(only(spans).calls) == 3


def test_looking_for_a_second_record_costs_what_the_spans_hold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A model span asking for 1,000 calls with 2,000 one-call model spans inside it: the
    names are not sorted again for every child (a hostile run was 9x slower)."""
    examined = 0
    names = requested_calls._names

    def counting(llm_span: SpanRecord, known: dict[bytes, list[str]]) -> list[str]:
        nonlocal examined
        examined += len(llm_span.output_tool_calls)
        return names(llm_span, known)

    monkeypatch.setattr(requested_calls, "_names", counting)
    parent = llm(2, 1, 1, 9_000, *[ask(f"t{i:04d}", f"c{i}", {}, i) for i in range(1_000)])
    children = [llm(10 + j, 2, 2, 8_000, ask("t0000", f"x{j}", {})) for j in range(2_000)]
    run = only([agent(1, None, "a", 0, 10_000), parent, *children])
    assert len(run.calls) == 3_000
    assert examined <= 2 * (len(parent.output_tool_calls) + len(children))


def _mcp_recorded(between: list[SpanRecord], inner_name: str = "lookup_order") -> ToolTrace:
    """The framework's function span for an MCP tool with the MCP client's tool span inside
    (OpenLLMetry's MCP instrumentation; real capture: ``openai_agents__openllmetry__refund_mcp``),
    ``between`` them spans 4 to 5 under the outer, the inner under the last of them."""
    inner_parent = between[-1].span_id[-1] if between else 3
    return only(
        [
            agent(1, None, "support", 0, 100),
            llm(2, 1, 1, 10, ask("lookup_order", "c1", {"order_id": "A-1"})),
            tool(3, 1, "lookup_order", 11, 40, call_id="c1", arguments={"order_id": "A-1"}),
            *between,
            tool(9, inner_parent, inner_name, 13, 38, arguments={"order_id": "A-1"}),
        ]
    )


@pytest.mark.parametrize("plain_between", [False, True])
def test_a_tool_span_inside_another_of_the_same_tool_is_one_call(plain_between: bool) -> None:
    between = [span(4, 3, SpanRole.OTHER, 12, 39, name="tools/call")] if plain_between else []
    run = _mcp_recorded(between)
    assert [(c.tool_name, c.call_id, c.span_id) for c in run.calls] == [
        ("lookup_order", "c1", hexid(3))
    ]


def test_a_tool_that_calls_the_same_tool_through_a_model_makes_two_calls() -> None:
    between = [llm(4, 3, 12, 39, ask("lookup_order", "c2", {"order_id": "A-1"}))]
    assert [c.tool_name for c in _mcp_recorded(between).calls] == ["lookup_order"] * 2


def test_a_tool_that_calls_the_same_tool_through_a_guardrails_model_makes_two_calls() -> None:
    """The guardrail's own model call is left out of the run's requests, but it is a model
    between the two tool spans all the same: the inner one is no second record."""
    between = [span(4, 3, SpanRole.GUARDRAIL, 12, 39, name="check"), llm(5, 4, 13, 38)]
    run = _mcp_recorded(between)
    assert [(c.tool_name, c.span_id, c.parent_call_id) for c in run.calls] == [
        ("lookup_order", hexid(3), None),
        ("lookup_order", hexid(9), "c1"),
    ]


def test_a_tool_inside_another_tool_of_another_name_is_a_call_of_its_own() -> None:
    assert [c.tool_name for c in _mcp_recorded([], "fetch_invoice").calls] == [
        "lookup_order",
        "fetch_invoice",
    ]


def test_an_agent_used_as_a_tool_that_calls_a_tool_of_its_name_makes_that_call() -> None:
    between = [agent(4, 3, "lookup_order_agent", 12, 39)]
    names = [c.tool_name for c in _mcp_recorded(between).calls]
    assert names == ["lookup_order", "lookup_order"]


def charged(own: SpanRecord, records: list[SpanRecord]) -> list[tuple[str, CallStatus, Any]]:
    """The calls of a run asking for charge_card once: ``own`` the call's span (id 3), with
    ``records`` inside it; name, status and error type each."""
    run = only(
        [
            agent(1, None, "support", 0, 100),
            llm(2, 1, 1, 10, ask("charge_card", "c1", {"order_id": "A-1"})),
            own,
            *records,
        ]
    )
    assert run.error_count == sum(c.status is CallStatus.ERROR for c in run.calls)
    return [(c.tool_name, c.status, c.error_type) for c in run.calls]


@pytest.mark.parametrize("depth", [1, 2])
def test_a_call_whose_second_record_failed_failed(depth: int) -> None:
    """The OpenAI Agents SDK ends an MCP tool's function span OK when the server answered
    isError; OpenLLMetry's MCP client span inside it says the call failed (real capture:
    ``openai_agents__openllmetry__tool_error_mcp``). Two records deep too."""
    failed: dict[str, Any] = {"status_code": 2, "error_type": "tool_error"}
    # depth 2: the client's record, and the instrumented server's inside it (both failed)
    inner = [
        tool(4, 3, "charge_card", 12, 39, **failed),
        tool(5, 4, "charge_card", 13, 38, **failed),
    ]
    assert charged(tool(3, 1, "charge_card", 11, 40, call_id="c1"), inner[:depth]) == [
        ("charge_card", CallStatus.ERROR, "tool_error")
    ]


def _attempts(outcomes: list[bool]) -> ToolTrace:
    """An MCP call the SDK retried (``max_retry_attempts``): one function span, one client
    span per attempt inside it, ``outcomes`` saying which failed; then a refund."""
    attempts = [
        tool(
            4 + n,
            3,
            "lookup_order",
            12 + 10 * n,
            20 + 10 * n,
            **({"status_code": 2, "error_type": "McpError"} if failed else {}),
        )
        for n, failed in enumerate(outcomes)
    ]
    return only(
        [
            agent(1, None, "support", 0, 100),
            llm(2, 1, 1, 10, ask("lookup_order", "c1", {"order_id": "A-1"})),
            tool(3, 1, "lookup_order", 11, 60, call_id="c1"),
            *attempts,
        ]
    )


@pytest.mark.parametrize(
    ("outcomes", "status", "error_type"),
    [
        ([True, False], CallStatus.OK, None),  # failed, then retried and answered
        ([False, True], CallStatus.ERROR, "McpError"),
        ([True, True], CallStatus.ERROR, "McpError"),
    ],
)
def test_a_retried_call_ended_as_its_last_attempt(
    outcomes: list[bool], status: CallStatus, error_type: str | None
) -> None:
    (call,) = _attempts(outcomes).calls
    assert (call.status, call.error_type) == (status, error_type)


def test_a_call_that_failed_on_its_own_record_failed_whatever_its_second_records_say() -> None:
    own = tool(3, 1, "charge_card", 11, 40, call_id="c1", status_code=2)
    second = tool(4, 3, "charge_card", 12, 39, error_type="tool_error", status_code=2)
    assert charged(own, [second]) == [("charge_card", CallStatus.ERROR, "tool_error")]


def test_tool_spans_of_the_same_tool_with_other_call_ids_are_two_calls() -> None:
    """A tool that runs an agent of the same name whose spans sit beside its work (OpenLLMetry
    under LangGraph): the inner span joins another request of the model's."""
    run = only(
        [
            agent(1, None, "support", 0, 100),
            llm(2, 1, 1, 10, ask("delegate", "c1", {"task": "a"})),
            tool(3, 1, "delegate", 11, 60, call_id="c1"),
            span(4, 3, SpanRole.OTHER, 12, 59, name="graph step"),
            tool(5, 4, "delegate", 13, 58, call_id="c2"),
        ]
    )
    assert [(c.tool_name, c.call_id) for c in run.calls] == [("delegate", "c1"), ("delegate", "c2")]


def test_a_call_nested_under_a_second_record_is_nested_in_its_call() -> None:
    """An MCP server instrumented too: the client's and the server's records inside the
    function span, and an agent the tool runs inside those: its calls are the tool call's."""
    run = only(
        [
            agent(1, None, "support", 0, 100),
            llm(2, 1, 1, 10, ask("ask_expert", "c1", {"q": "A-1"})),
            tool(3, 1, "ask_expert", 11, 60, call_id="c1"),
            tool(4, 3, "ask_expert", 12, 59),  # the MCP client's
            span(5, 4, SpanRole.OTHER, 13, 58, name="mcp.server"),
            tool(6, 5, "ask_expert", 14, 57),  # the MCP server's
            agent(7, 6, "expert", 15, 56),
            llm(8, 7, 16, 20, ask("lookup_order", "e1", {"order_id": "A-1"})),
            tool(9, 7, "lookup_order", 21, 22, call_id="e1"),
        ]
    )
    assert [(c.tool_name, c.call_id, c.parent_call_id) for c in run.calls] == [
        ("ask_expert", "c1", None),
        ("lookup_order", "e1", "c1"),
    ]


@pytest.mark.parametrize("depth", [3, 12])
@pytest.mark.parametrize("ids", ["outer-first", "inner-first"])
def test_a_chain_of_records_is_one_call_ended_as_its_last_record_whatever_the_order(
    depth: int, ids: str
) -> None:
    """Records of one call nested ``depth`` deep (past the 8 hops a model span is looked for
    in), all started at once, their span ids sorting outer first or inner first; the one
    ending last (a server's clock ahead) failed."""
    ends_last = 1 if ids == "outer-first" else depth - 1
    records = []
    for n in range(depth):
        own, parent = (10 + n, 9 + n) if ids == "outer-first" else (60 - n, 61 - n)
        if n == 0:
            parent = 3
        failed: dict[str, Any] = (
            {"status_code": 2, "error_type": "tool_error"} if n == ends_last else {}
        )
        records.append(tool(own, parent, "charge_card", 12, 80 if n == ends_last else 39, **failed))
    assert charged(tool(3, 1, "charge_card", 11, 90, call_id="c1"), records) == [
        ("charge_card", CallStatus.ERROR, "tool_error")
    ]


def test_a_long_chain_of_records_is_walked_once() -> None:
    """5,000 records of one call nested in each other (hostile), asked innermost first: one
    walk remembers the call's own record for every record on the way, so the chain costs
    what it holds (a first version walked it again for each record: 607 ms)."""
    call = tool(3, 1, "t", 11, 9_500, call_id="c1")
    chain = [tool(4 + n, 3 + n, "t", 12, 9_000 - n) for n in range(5_000)]
    outer_of = {
        record.span_id: above for above, record in zip([call, *chain[:-1]], chain, strict=True)
    }
    own: dict[bytes, SpanRecord] = {}
    assert _own_record(chain[-1].span_id, outer_of, own) is call
    assert len(own) == len(chain) and all(record is call for record in own.values())
    run = only([agent(1, None, "a", 0, 10_000), llm(2, 1, 1, 10, ask("t", "c1", {})), call, *chain])
    assert [(c.call_id, c.span_id) for c in run.calls] == [("c1", hexid(3))]


# --- an instrumented MCP server's record whose parent span never came -----------------------


def _server_record_orphaned_spans(orphan: SpanRecord) -> list[SpanRecord]:
    """The run looks the order up and refunds it; ``orphan`` is a tool span of the MCP
    server's whose parent (``mcp.server``, span 98) came in a later batch, after the trace was
    evaluated (real capture: ``openai_agents__openllmetry__refund_mcp_traced``)."""
    return [
        span(100, None, SpanRole.OTHER, 0, 200, name="Agent Workflow"),
        agent(1, 100, "support", 0, 100),
        llm(2, 1, 1, 10, ask("lookup_order", "c1", {"order_id": "A-1"})),
        tool(3, 1, "lookup_order", 11, 20, arguments={"order_id": "A-1"}),
        llm(4, 1, 21, 30, ask("issue_refund", "c2", {"order_id": "A-1"})),
        tool(5, 1, "issue_refund", 31, 60, arguments={"order_id": "A-1"}),
        tool(6, 5, "issue_refund", 35, 58, arguments={"order_id": "A-1"}),
        orphan,
    ]


def _server_record_orphaned(orphan: SpanRecord) -> list[ToolTrace]:
    return build(_server_record_orphaned_spans(orphan))


@pytest.mark.parametrize("name", ["issue_refund", "refund"])  # "refund" normalizes to it
def test_an_orphaned_server_record_inside_the_call_of_its_tool_is_a_second_record(
    name: str,
) -> None:
    (run,) = _server_record_orphaned(tool(9, 98, name, 40, 45, arguments={"order_id": "A-1"}))
    assert [(c.tool_name, c.span_id, c.status) for c in run.calls] == [
        ("lookup_order", hexid(3), CallStatus.OK),
        ("issue_refund", hexid(5), CallStatus.OK),
    ]
    assert run.span_count == 7  # the orphan is the run's, as a second record with its parent


def test_an_orphaned_server_record_that_failed_is_how_the_call_ended() -> None:
    """As with its parent there: the last second record to end says how the call ended."""
    failed = tool(9, 98, "issue_refund", 40, 59, status_code=2, error_type="tool_error")
    (run,) = _server_record_orphaned(failed)
    assert [(c.tool_name, c.status) for c in run.calls][-1] == ("issue_refund", CallStatus.ERROR)


@pytest.mark.parametrize(
    "orphan",
    [
        tool(9, 98, "issue_refund", 61, 70),  # after the call: not inside it
        tool(9, 98, "issue_refund", 50, 65),  # begins inside it, ends after it
        tool(9, 98, "charge_card", 40, 45),  # another tool inside the call
    ],
)
def test_an_orphaned_tool_span_that_is_no_record_of_a_call_is_still_a_run(
    orphan: SpanRecord,
) -> None:
    """A lost parent must not silence a page: what matches no call of a run by name and time
    is a call outside every agent, the residual run's."""
    runs = {r.agent: [c.tool_name for c in r.calls] for r in _server_record_orphaned(orphan)}
    assert runs == {"support": ["lookup_order", "issue_refund"], None: [orphan.tool_name]}


def test_calls_nested_in_a_call_another_host_served_move_with_it() -> None:
    """An agent used as a tool, served by a desk service whose clock is 2 s ahead: its
    lookup is timed by the same clock as the desk call, and stays inside it, before the
    refund the outer model asked for next (``_requested_windows``)."""
    ahead = 2_000
    spans = [
        agent(1, None, "concierge", 0, 600),
        llm(2, 1, 1, 100, ask("refund_desk", "call_d", {"input": "A-1"})),
        tool(3, 1, "refund_desk", 105 + ahead, 190 + ahead, call_id="call_d", service="desk"),
        agent(4, 3, "desk_agent", 110 + ahead, 185 + ahead, service="desk"),
        llm(
            5,
            4,
            111 + ahead,
            150 + ahead,
            ask("lookup_order", "call_l", {"order_id": "A-1"}),
            service="desk",
        ),
        tool(6, 4, "lookup_order", 155 + ahead, 160 + ahead, call_id="call_l", service="desk"),
        llm(7, 1, 200, 300, ask("issue_refund", "call_r", {"order_id": "A-1"})),
        tool(8, 1, "issue_refund", 305, 310, call_id="call_r"),
    ]

    calls_ = only(spans).calls
    assert [(c.tool_name, c.parent_call_id) for c in calls_] == [
        ("refund_desk", None),
        ("lookup_order", "call_d"),
        ("issue_refund", None),
    ]
    assert calls_[1].start_ns == (155 + ahead) * MS  # recorded times are kept


def test_a_call_id_each_turn_uses_again_pairs_a_tool_span_with_its_own_tools_request() -> None:
    """A model that numbers each turn's calls from ``call_0``, and a first call that never
    ran: each tool span takes its own tool's request, not the earliest of its id (which made
    the lookup's span the search's call, its request the refund's, and a second refund,
    never run: ``one-refund-per-run`` broken on a run that refunded once)."""
    spans = [
        agent(1, None, "refund-bot", 0, 1000),
        llm(2, 1, 10, 100, ask("search_kb", "call_0", {"q": "refund policy"})),
        llm(3, 1, 200, 300, ask("lookup_order", "call_0", {"order_id": "A-1"})),
        tool(4, 1, "lookup_order", 305, 310, call_id="call_0"),
        llm(5, 1, 400, 500, ask("issue_refund", "call_0", {"order_id": "A-1"})),
        tool(6, 1, "issue_refund", 505, 510, call_id="call_0"),
    ]

    assert [(c.tool_name, c.arguments, c.span_id) for c in only(spans).calls] == [
        ("search_kb", {"q": "refund policy"}, None),
        ("lookup_order", {"order_id": "A-1"}, hexid(4)),
        ("issue_refund", {"order_id": "A-1"}, hexid(6)),
    ]


def test_a_call_id_used_again_pairs_each_run_of_a_tool_with_the_turn_that_asked_for_it() -> None:
    """Two turns ask for the same tool under one id (ADK's ``"<not specified>"``), the
    first turn's call never ran: the span is the second turn's call."""
    spans = [
        agent(1, None, "refund-bot", 0, 1000),
        llm(2, 1, 10, 100, ask("lookup_order", "x", {"order_id": "A-9"})),
        llm(3, 1, 200, 300, ask("lookup_order", "x", {"order_id": "A-1"})),
        tool(4, 1, "lookup_order", 305, 310, call_id="x"),
    ]

    assert [(c.arguments, c.span_id) for c in only(spans).calls] == [
        ({"order_id": "A-9"}, None),
        ({"order_id": "A-1"}, hexid(4)),
    ]
