"""Calls of a run recorded twice: a model call two instrumentations record, a tool span inside
another of the same tool (MCP client and server), retries and chains of records, an orphaned
server record."""

from __future__ import annotations

from typing import Any

import pytest
from assembly_support import MS, agent, ask, build, hexid, llm, only, span, tool

from toolwatch.assembly import requested as requested_calls
from toolwatch.assembly.records import _own_record
from toolwatch.model import CallStatus, SpanRecord, SpanRole
from toolwatch.model_traces import ToolTrace


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
