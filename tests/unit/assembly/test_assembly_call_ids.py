"""A call id used again (ADK's ``"<not specified>"``, models that number each turn's calls
from ``call_0``): which request each tool span ran (CONVENTIONS §6.3)."""

from __future__ import annotations

from assembly_support import REFUND_POLICY, agent, ask, build, hexid, llm, only, safety, span, tool

from toolwatch.model import Category, SpanRecord, SpanRole
from toolwatch.model_traces import ToolTrace

POLICY = REFUND_POLICY


def shared_id_parallel_lookups() -> list[SpanRecord]:
    """One model output asks for two lookups under one call id, their tool spans recording
    no arguments (the requests hold them): A-1's lookup runs first and fails, B-2's second
    and succeeds. The next turn refunds A-1."""
    return [
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
        tool(4, 1, "lookup_order", 111, 120, call_id="x"),
        llm(5, 1, 200, 300, ask("issue_refund", "r", {"order_id": "A-1"})),
        tool(6, 1, "issue_refund", 305, 310, call_id="r"),
    ]


def test_calls_of_one_output_that_share_an_id_pair_in_emission_order() -> None:
    """The requests of one output were asked at one instant: its tool spans, in start
    order, take them in the order the model emitted them (taking "the last asked for
    before the span started" gave the first span the second request)."""
    calls = [c for c in only(shared_id_parallel_lookups()).calls if c.tool_name == "lookup_order"]

    assert [(c.arguments, c.span_id, c.status.name) for c in calls] == [
        ({"order_id": "A-1"}, hexid(3), "ERROR"),
        ({"order_id": "B-2"}, hexid(4), "OK"),
    ]


def test_a_refund_after_its_lookup_failed_still_pages_when_the_output_shared_an_id() -> None:
    """A-1's only lookup failed: the refund of A-1 is not verified (read crosswise, B-2's
    success was A-1's and the page was lost)."""
    (trace,) = build(shared_id_parallel_lookups())

    assert safety(trace) == [Category.MISSING_VERIFICATION_STEP]


def test_a_tool_a_streamed_output_started_pairs_with_its_own_turn() -> None:
    """A streamed output (the Vercel AI SDK's ``streamText``) starts a tool before its model
    call's span ends: the span is the turn's whose model call had *started*, not that of an
    earlier turn whose lookup never ran."""
    spans = [
        agent(1, None, "refund-bot", 0, 1000),
        llm(2, 1, 200, 300, ask("lookup_order", "call_0", {"order_id": "A-9"})),
        llm(3, 1, 400, 500, ask("lookup_order", "call_0", {"order_id": "A-1"})),
        tool(4, 1, "lookup_order", 482, 490, call_id="call_0"),
    ]

    assert [(c.arguments, c.span_id) for c in only(spans).calls] == [
        ({"order_id": "A-9"}, None),
        ({"order_id": "A-1"}, hexid(4)),
    ]


def test_a_retried_call_takes_no_request_of_a_turn_asked_after_it_ran() -> None:
    """Turn 1's lookup of A-1 fails and runs again (a second span of ``call_0``); turn 2
    looks B-2 up under ``call_0`` too, turn 3 refunds C-3. The retry is turn 1's (a call
    run again, as a second span of a unique id is: turn 1's request run again, whose
    arguments it holds), never turn 2's request, asked after it ended; so B-2's run is turn
    2's, and the refund's the refund's, not a lookup of C-3. C-3 was never looked up: read
    as a lookup of no recorded arguments (of any value), the retry hid the page."""
    spans = [
        agent(1, None, "refund-bot", 0, 1000),
        llm(2, 1, 10, 100, ask("lookup_order", "call_0", {"order_id": "A-1"})),
        tool(3, 1, "lookup_order", 101, 110, call_id="call_0", status_code=2),
        tool(4, 1, "lookup_order", 111, 120, call_id="call_0"),
        llm(5, 1, 300, 400, ask("lookup_order", "call_0", {"order_id": "B-2"})),
        tool(6, 1, "lookup_order", 405, 410, call_id="call_0"),
        llm(7, 1, 500, 600, ask("issue_refund", "call_0", {"order_id": "C-3"})),
        tool(8, 1, "issue_refund", 605, 610, call_id="call_0"),
    ]

    assert [(c.tool_name, c.arguments, c.span_id) for c in only(spans).calls] == [
        ("lookup_order", {"order_id": "A-1"}, hexid(3)),
        ("lookup_order", {"order_id": "A-1"}, hexid(4)),
        ("lookup_order", {"order_id": "B-2"}, hexid(6)),
        ("issue_refund", {"order_id": "C-3"}, hexid(8)),
    ]
    assert safety(only(spans)) == [Category.MISSING_VERIFICATION_STEP]


def test_a_span_of_a_tool_a_reused_id_never_asked_for_takes_no_other_tools_request() -> None:
    """Under an id used again, a tool span whose tool no request of the id names (a tool the
    framework ran itself) is a call of its own: the refund asked for and never run stays a
    call never run, not the search's arguments (taking the earliest of the id, whatever its
    tool, made it a search of order A-1 and lost the refund)."""
    spans = [
        agent(1, None, "refund-bot", 0, 1000),
        llm(2, 1, 10, 100, ask("lookup_order", "call_0", {"order_id": "A-1"})),
        tool(3, 1, "lookup_order", 105, 110, call_id="call_0"),
        llm(4, 1, 200, 300, ask("issue_refund", "call_0", {"order_id": "A-1"})),
        tool(5, 1, "search_kb", 305, 310, call_id="call_0"),
    ]

    assert [(c.tool_name, c.arguments, c.span_id) for c in only(spans).calls] == [
        ("lookup_order", {"order_id": "A-1"}, hexid(3)),
        ("issue_refund", {"order_id": "A-1"}, None),
        ("search_kb", None, hexid(5)),
    ]


def parallel_agents_as_tools() -> list[SpanRecord]:
    """One output asks two agents-as-tools at once (ids r1, r2); each nested agent's model,
    numbering its calls from call_0, asks lookup_order under call_0. A's model call runs
    110-200, B's 210-300 (not overlapping). A's lookup (of A-1, fails) starts at 250 (a
    before-tool callback, an approval, a semaphore), after B's model call *started*; B's
    lookup (of B-2, succeeds) at 301. The tool spans record no arguments."""
    return [
        agent(1, None, "support", 0, 1000),
        llm(
            2,
            1,
            10,
            100,
            ask("research", "r1", {"q": "A-1"}, 0),
            ask("research", "r2", {"q": "B-2"}, 1),
        ),
        tool(3, 1, "research", 101, 400, call_id="r1"),
        tool(4, 1, "research", 101, 400, call_id="r2"),
        agent(5, 3, "researcher", 102, 399),
        agent(6, 4, "researcher", 102, 399),
        llm(7, 5, 110, 200, ask("lookup_order", "call_0", {"order_id": "A-1"})),
        llm(8, 6, 210, 300, ask("lookup_order", "call_0", {"order_id": "B-2"})),
        tool(9, 5, "lookup_order", 250, 260, call_id="call_0", status_code=2),
        tool(10, 6, "lookup_order", 301, 310, call_id="call_0"),
    ]


def test_parallel_nested_agents_reusing_call_0_pair_each_span_with_its_own_agents_request() -> None:
    """Each nested agent's lookup span takes its own agent's request under call_0, though
    A's lookup started after B's model call started. Keyed by id and tool alone, span 9 took
    B-2's request (the last output started before it) and span 10 none: A-1's request read as
    never run, A-1's failed lookup as B-2's, and B-2's success had no arguments."""
    calls = [c for c in only(parallel_agents_as_tools()).calls if c.tool_name == "lookup_order"]

    assert sorted((c.span_id or "", str(c.arguments), c.status.name) for c in calls) == [
        (hexid(9), str({"order_id": "A-1"}), "ERROR"),
        (hexid(10), str({"order_id": "B-2"}), "OK"),
    ]


def test_a_refund_after_a_nested_agents_failed_lookup_pages_when_agents_reuse_call_0() -> None:
    """The same run, then the outer agent refunds A-1, whose only lookup failed: the refund is
    not verified (MISSING_VERIFICATION_STEP), as it paged before 75507cf. Mispaired, A-1's
    lookup read as never run and B-2's success, its arguments lost, verified any value."""
    spans = [
        *parallel_agents_as_tools(),
        llm(11, 1, 500, 600, ask("issue_refund", "r3", {"order_id": "A-1"})),
        tool(12, 1, "issue_refund", 605, 610, call_id="r3"),
    ]

    assert safety(only(spans)) == [Category.MISSING_VERIFICATION_STEP]


def namespaced_run(first_id: str, second_id: str) -> list[SpanRecord]:
    """The model sees an MCP server's tools in a namespace (``billing__lookup_order``); the
    tool spans name the server's own tool (``lookup_order``). No tool_prefix configured."""
    return [
        agent(1, None, "refund-bot", 0, 1000),
        llm(2, 1, 10, 100, ask("billing__lookup_order", first_id, {"order_id": "A-1"})),
        tool(3, 1, "lookup_order", 105, 110, call_id=first_id),
        llm(4, 1, 200, 300, ask("billing__lookup_order", second_id, {"order_id": "B-2"})),
        tool(5, 1, "lookup_order", 305, 310, call_id=second_id),
    ]


def test_a_reused_id_pairs_a_span_named_but_for_the_namespace_as_a_unique_id_does() -> None:
    """With unique ids the two spans pair with their requests (two calls); with call_0 each
    turn too. Paired on the normalized name alone, each span was a call of its own with no
    arguments and each request a call never run (four calls): the same run read differently
    by id style."""
    unique = [(c.span_id, c.arguments) for c in only(namespaced_run("c1", "c2")).calls]
    assert unique == [(hexid(3), {"order_id": "A-1"}), (hexid(5), {"order_id": "B-2"})]

    reused = [(c.span_id, c.arguments) for c in only(namespaced_run("call_0", "call_0")).calls]
    assert reused == unique


def test_a_reused_id_pairs_no_span_whose_name_two_namespaced_requests_share() -> None:
    """Under call_0, an output asks for ``billing__lookup_order`` and ``crm__lookup_order``
    and a span names ``lookup_order``: either could be its request, so it takes neither (a
    call of its own) rather than a guess."""
    spans = [
        agent(1, None, "refund-bot", 0, 1000),
        llm(
            2,
            1,
            10,
            100,
            ask("billing__lookup_order", "call_0", {"order_id": "A-1"}, 0),
            ask("crm__lookup_order", "call_0", {"order_id": "A-1"}, 1),
        ),
        tool(3, 1, "lookup_order", 105, 110, call_id="call_0"),
        llm(4, 1, 200, 300, ask("issue_refund", "call_0", {"order_id": "A-1"})),
    ]

    assert sorted((c.tool_name, c.span_id or "") for c in only(spans).calls) == [
        ("billing__lookup_order", ""),
        ("crm__lookup_order", ""),
        ("issue_refund", ""),
        ("lookup_order", hexid(3)),
    ]


def test_overlapping_model_calls_of_two_agents_that_reuse_call_0_keep_both_requests() -> None:
    """The parallel agents' model calls overlap (A's 110-200, B's 111-300), each asking
    lookup_order under call_0 for another order: two model calls, not one recorded twice
    (its two records are one agent's). Taken for a second record, B's request was dropped
    and B-2's lookup left without arguments (its success then verified any value)."""
    spans = parallel_agents_as_tools()
    spans[7] = llm(8, 6, 111, 300, ask("lookup_order", "call_0", {"order_id": "B-2"}))
    calls = [c for c in only(spans).calls if c.tool_name == "lookup_order"]

    assert sorted(str(c.arguments) for c in calls) == [
        str({"order_id": "A-1"}),
        str({"order_id": "B-2"}),
    ]


def served_on_a_host_behind(
    *, sent_from_a_client_span: bool, first_turn_ran: bool, behind: int = 1_500
) -> list[SpanRecord]:
    """Every turn asks under ``call_0``: lookup A-1, then lookup B-2, then refund B-2. The
    lookups are served by a tool service whose clock is ``behind`` ms behind the agent's
    (ahead when negative), its span below the agent's HTTP client span (on the agent's
    clock), or right below the agent."""
    spans = [
        agent(1, None, "refund-bot", 0, 4_000),
        llm(2, 1, 2_000, 2_100, ask("lookup_order", "call_0", {"order_id": "A-1"})),
        llm(4, 1, 2_200, 2_300, ask("lookup_order", "call_0", {"order_id": "B-2"})),
        llm(7, 1, 2_400, 2_500, ask("issue_refund", "call_0", {"order_id": "B-2"})),
        tool(8, 1, "issue_refund", 2_505, 2_510, call_id="call_0"),
    ]
    served = [(2_305, 5, 6)] if not first_turn_ran else [(2_105, 9, 10), (2_305, 5, 6)]
    for at, client, executed in served:
        parent = 1
        if sent_from_a_client_span:
            spans.append(span(client, 1, SpanRole.OTHER, at, at + 20, name="POST /tools/lookup"))
            parent = client
        start, end = at + 2 - behind, at + 8 - behind
        spans.append(
            tool(executed, parent, "lookup_order", start, end, call_id="call_0", service="tools")
        )
    return spans


def lookups(trace: ToolTrace) -> list[tuple[str | None, object]]:
    return [(c.span_id, c.arguments) for c in trace.calls if c.tool_name == "lookup_order"]


def test_a_reused_id_pairs_a_span_of_a_host_behind_with_the_turn_that_sent_it() -> None:
    """The host's span starts before every request of its tool, so it took the earliest,
    A-1's, a turn that never ran: the lookup of B-2 read as never run, and the refund of B-2
    paged MISSING_VERIFICATION_STEP on a correct run (and a refund of A-1 would have read as
    verified). The client span that sent it, on the agent's clock, says which turn it ran."""
    trace = only(served_on_a_host_behind(sent_from_a_client_span=True, first_turn_ran=False))

    assert lookups(trace) == [(None, {"order_id": "A-1"}), (hexid(6), {"order_id": "B-2"})]
    assert safety(trace) == []


def test_spans_of_a_host_behind_that_served_every_turn_pair_in_turn_order() -> None:
    """Both turns' lookups ran on the host behind: each span with its own turn, by the client
    span that sent it, or, right below the agent, in emission order (its own time is another
    clock's: the first span takes the earliest request not yet taken)."""
    for client in (True, False):
        trace = only(served_on_a_host_behind(sent_from_a_client_span=client, first_turn_ran=True))

        assert lookups(trace) == [
            (hexid(10), {"order_id": "A-1"}),
            (hexid(6), {"order_id": "B-2"}),
        ]
        assert safety(trace) == []


def test_spans_of_a_host_ahead_pair_with_the_turn_whose_client_span_sent_them() -> None:
    """1.5 s ahead, A-1's lookup started after B-2's model call: by its own start it took
    B-2's request, and B-2's span, that output's requests all taken, read as a retry."""
    trace = only(
        served_on_a_host_behind(sent_from_a_client_span=True, first_turn_ran=True, behind=-1_500)
    )

    assert lookups(trace) == [(hexid(10), {"order_id": "A-1"}), (hexid(6), {"order_id": "B-2"})]
    assert safety(trace) == []
