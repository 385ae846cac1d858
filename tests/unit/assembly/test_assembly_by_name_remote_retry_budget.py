"""Review of 074ce3a, ``by_name._asked_beside(..., later)``: for an id-less span another
service wrote that recorded arguments, every waiting request of the tool, of any later model
call, is read up to ``_MAX_ARGUMENT_MATCHES``; reaching it now answers "a request it may be
the execution of waits" although none of those read asked for its arguments. Before, the
scan stopped at the first request of a later model call (``return False``)."""

from __future__ import annotations

from assembly_support import REFUND_POLICY, agent, ask, hexid, llm, on_orders, only

from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.loops import Loops
from toolwatch.evaluation.settings import LoopsSettings
from toolwatch.model_traces import ToolTrace

TURNS = 40  # a long support run: one lookup a turn after the first


def long_run(turns: int = TURNS, timeouts: int = 1) -> ToolTrace:
    """Turn 1 (10-100 ms) asks lookup A-1 (call_1); ``orders`` times out (105-200 ms) and its
    framework retries it at once, A-1 recorded (each 100 ms after the last), until it
    succeeds after ``timeouts`` timeouts. Turns 2..``turns`` (each at ``k`` s) ask one
    lookup each of another order (``call_k``, ``O-k``), each run by ``orders`` 5 ms after its
    turn ends."""
    spans = [
        agent(1, None, "support_agent", 0, (turns + 2) * 1000, service="desk"),
        llm(2, 1, 10, 100, ask("lookup_order", "call_1", {"order_id": "A-1"}), service="desk"),
    ]
    n = 3
    for attempt in range(timeouts + 1):
        start = 105 + 100 * attempt
        spans.append(on_orders(n, "A-1", start, start + 90, failed=attempt < timeouts))
        n += 1
    for k in range(2, turns + 1):
        start = k * 1000
        order = {"order_id": f"O-{k}"}
        spans.append(
            llm(n, 1, start, start + 100, ask("lookup_order", f"call_{k}", order), service="desk")
        )
        spans.append(on_orders(n + 1, f"O-{k}", start + 105, start + 200))
        n += 2
    spans.append(llm(n, 1, (turns + 1) * 1000, (turns + 1) * 1000 + 100, service="desk"))
    return only(spans)


def test_a_remote_framework_retry_stays_a_rerun_in_a_run_of_many_later_lookups() -> None:
    """Scenario: ``long_run``: the framework's retry (span 4) of turn 1's timed-out lookup on
    the tool host, in a run whose later turns ask 39 more lookups of other orders (none of
    A-1).
    Was: ``_asked_beside`` with ``later`` reads the 33 waiting requests of turns 2..34, none
    asking for A-1, and at the 33rd answers True: span 4 is no rerun and takes call_2 (turn
    2's request, O-2); every later span then takes the next turn's request (span 6, O-2's
    execution, takes call_3, ...), the last span none: every call id of the run is one off,
    and span 4 reads as the agent's own retry of A-1 (a retry for ``retry_limit``).
    Now: span 4 ran call_1 again (``rerun``), each turn's span its own turn's request, as
    with 32 or fewer later lookups, or before 074ce3a.
    Regression of 074ce3a (the ``later`` branch never stops at a later model call, so the
    budget, meant for one output's parallel requests, counts the whole run's)."""
    trace = long_run()
    calls = trace.calls
    assert [(c.span_id, c.call_id, c.rerun) for c in calls[:4]] == [
        (hexid(3), "call_1", False),
        (hexid(4), "call_1", True),
        (hexid(6), "call_2", False),
        (hexid(8), "call_3", False),
    ]
    assert all(c.call_id is not None for c in calls)


def test_32_later_lookups_keep_the_retry_a_rerun() -> None:
    """Control (passes): ``long_run`` with 32 later lookups (turns 2..33): span 4 runs call_1
    again, as it should; one more later turn changes that (above)."""
    calls = long_run(turns=33).calls
    assert [(c.call_id, c.rerun) for c in calls[:3]] == [
        ("call_1", False),
        ("call_1", True),
        ("call_2", False),
    ]


def test_the_frameworks_retries_on_a_long_run_are_no_retry_limit_page() -> None:
    """Scenario: ``long_run`` with two timeouts: the tool host's framework retries turn 1's
    lookup twice (spans 4 and 5, A-1 recorded; the second succeeds), under ``retry_limit``
    1; the model asked once and never again.
    Was: span 4 takes call_2 and span 5 call_3 (``_asked_beside``'s budget, above), both no
    rerun and each an identical call after a failed one: two retries of the agent, beyond
    the limit, UNNECESSARY_TOOL_CALL on span 5 ("an agent hammering a failing tool").
    Now: no finding (the attempts of one request are one action; the agent never retried),
    as with fewer later lookups, or before 074ce3a.
    Regression of 074ce3a."""
    policy = REFUND_POLICY.model_copy(update={"retry_limit": 1})
    found = Loops(LoopsSettings(), policy)(long_run(timeouts=2), Reference()).findings
    assert [(f.category, f.span_id) for f in found] == []
