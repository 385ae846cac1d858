"""Review of f23eb21: ``by_name._may_run_again`` now lets an id-less span RECORDING arguments
run again the request of its tool's failed attempt. Whether the model asked again between is
``_ran_again``'s: for a span of another service than the model calls, it reads the span's
start back through its first attempt's offset (that attempt's start less the end of the model
call that asked). That offset holds the time the tool host took to get to the first attempt:
a host running one output's parallel calls one after another (a sequential executor) gives
the last of them an offset of the others' run time, so the agent's own retry of it in the
next turn, read back by as much, seems to start before that turn's model call: it is taken as
the framework's rerun of the first request, and the next turn's request runs nothing."""

from __future__ import annotations

from assembly_support import REFUND_POLICY, agent, ask, hexid, llm, on_orders, only

from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.loops import Loops
from toolwatch.evaluation.settings import LoopsSettings
from toolwatch.model import Category
from toolwatch.model_traces import ToolTrace

A1 = {"order_id": "A-1"}
B2 = {"order_id": "B-2"}
C3 = {"order_id": "C-3"}


def hammered() -> ToolTrace:
    """Turn 1 asks three lookups at once; ``orders`` runs them one after another (105, 505,
    905 ms), C-3's times out. The model asks for C-3 again in turn 2 (1310-1610 ms) and in
    turn 3 (1710-2010 ms); both time out."""
    return only(
        [
            agent(1, None, "support_agent", 0, 3_000, service="desk"),
            llm(
                2,
                1,
                10,
                100,
                ask("lookup_order", "call_1", A1, 0),
                ask("lookup_order", "call_2", B2, 1),
                ask("lookup_order", "call_3", C3, 2),
                service="desk",
            ),
            on_orders(3, "A-1", 105, 500),
            on_orders(4, "B-2", 505, 900),
            on_orders(5, "C-3", 905, 1300, failed=True),
            llm(6, 1, 1310, 1610, ask("lookup_order", "call_4", C3), service="desk"),
            on_orders(7, "C-3", 1615, 1700, failed=True),
            llm(8, 1, 1710, 2010, ask("lookup_order", "call_5", C3), service="desk"),
            on_orders(9, "C-3", 2015, 2100, failed=True),
            llm(10, 1, 2110, 2200, service="desk"),
        ]
    )


def test_the_agents_retry_on_a_sequential_tool_host_runs_its_own_turns_request() -> None:
    """Scenario: as ``hammered``: the model itself asked for C-3 again in turns 2 and 3
    (call_4, call_5), each answered by a span of ``orders`` recording C-3.
    Was: spans 7 and 9 are ``rerun``s of call_3 (turn 1's request): C-3's offset is 805 ms
    (its start less turn 1's end), so 1615 and 2015 ms read as 810 and 1210 ms, before turn
    2's model call (1310 ms); call_4 and call_5 become calls without a span, status OK, though
    both attempts timed out.
    Now: span 7 runs call_4 and span 9 call_5 (errors), no rerun, as before f23eb21.
    Regression of f23eb21 (before it, a span recording arguments never ran a request again;
    ad87e61's offset read is older, for spans recording none)."""
    trace = hammered()
    assert [(c.span_id, c.call_id, c.rerun, c.status.name) for c in trace.calls] == [
        (hexid(3), "call_1", False, "OK"),
        (hexid(4), "call_2", False, "OK"),
        (hexid(5), "call_3", False, "ERROR"),
        (hexid(7), "call_4", False, "ERROR"),
        (hexid(9), "call_5", False, "ERROR"),
    ]


def test_the_retry_limit_page_names_the_span_of_the_agents_retry_beyond_it() -> None:
    """Scenario: ``hammered`` under ``retry_limit`` 1: the agent retried C-3 twice.
    Was: UNNECESSARY_TOOL_CALL on no span (``span_id`` None: call_5, left without its
    execution), so the page links to nothing in the trace.
    Now: the page on span 9, the second retry's span, as before f23eb21.
    Regression of f23eb21."""
    policy = REFUND_POLICY.model_copy(update={"retry_limit": 1})
    found = Loops(LoopsSettings(), policy)(hammered(), Reference()).findings
    assert [(f.category, f.span_id) for f in found] == [(Category.UNNECESSARY_TOOL_CALL, hexid(9))]
