"""Calls of a run: joining requests with executions (call ids, names and occurrence,
arguments), arguments as recorded (CONVENTIONS §6.3-6.4)."""

from __future__ import annotations

import json

from assembly_support import agent, ask, hexid, llm, only, span, tool

from toolwatch.model import SpanRecord, SpanRole


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
