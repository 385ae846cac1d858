"""review2: the 16-id cap keeps a message's ids whole, "nearest first, while they fit", and
*breaks* at a message that does not fit once nearer ids are kept (``_ids_in``). A lost batch
behind one nearer call whose span survived is then never compared."""

from __future__ import annotations

import json
from typing import Any

from tests.unit.assembly.assembly_support import MS, agent, ask, llm, only, safety, tool
from toolwatch.conventions.history import read_history
from toolwatch.model import Category

MISSING = Category.MISSING_VERIFICATION_STEP
USER = {"role": "user", "parts": [{"type": "text", "content": "Refund my order A-1."}]}


def _genai(messages: list[dict[str, Any]]) -> dict[str, Any]:
    turns, ids = read_history({"gen_ai.input.messages": json.dumps(messages)}, None)
    return {"prior_turns": turns, "prior_call_ids": ids}


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_call", "id": call_id, "name": name, "arguments": arguments}


def _answer(call_id: str) -> dict[str, Any]:
    return {"type": "tool_call_response", "id": call_id, "response": "ok"}


def test_a_lost_batch_of_sixteen_lookups_behind_a_slow_call_that_survived_pages_falsely() -> None:
    """Turn 1 asks for 16 lookups at once (A-1..A-16, c1..c16); turn 2 asks for one slow
    call, ``fetch_policy`` (p1, 5 s); turn 3 refunds A-1. A rollout at 100 ms sends every
    span that ended by then elsewhere: both model calls and the 16 lookups; the slow
    ``fetch_policy`` span (started at 60 ms, ended at 5060 ms), the refund's model span and
    its tool span, and the agent's, come here.

    The refund span's history shows 2 turns and the half holds no model span before it: the
    count says spans were lost. Its ids: p1 (1 id), then the batch (16) does not fit (17 >
    16) and, nearer ids being kept, the loop breaks: ``prior_call_ids == ("p1",)``. p1 is
    known (the surviving ``fetch_policy`` span started before): the half reads as whole, and
    its refund of A-1, whose lookup went to the other replica, pages a false
    MISSING_VERIFICATION_STEP. Before dd985a3 (8 ids, cut inside a message) the ids were p1
    and c16..c10, unknown here: ``missing_spans``, no page. Was (dd985a3): that false page.
    Now: up to 32 ids are kept, a window naming more names none (the count decides): c1..c16
    are named, unknown here, ``missing_spans``."""
    batch = {
        "role": "assistant",
        "parts": [_call(f"c{i}", "lookup_order", {"order_id": f"A-{i}"}) for i in range(1, 17)],
    }
    answers = {"role": "tool", "parts": [_answer(f"c{i}") for i in range(1, 17)]}
    slow = {"role": "assistant", "parts": [_call("p1", "fetch_policy", {})]}
    policy = {"role": "tool", "parts": [_answer("p1")]}
    refund_history = _genai([USER, batch, answers, slow, policy])
    kept = ("p1", *(f"c{i}" for i in range(16, 0, -1)))  # 17 ids: under MAX_CALL_IDS
    assert refund_history == {"prior_turns": 2, "prior_call_ids": kept}
    whole = [
        agent(1, None, "support", 0, 6000),
        llm(2, 1, 1, 10, *[ask("lookup_order", f"c{i}", {"order_id": f"A-{i}"}, i - 1)
                           for i in range(1, 17)], prior_turns=0),
        *[tool(10 + i, 1, "lookup_order", 11, 20 + i, call_id=f"c{i}",
               arguments={"order_id": f"A-{i}"}) for i in range(1, 17)],
        llm(40, 1, 40, 55, ask("fetch_policy", "p1", {}),
            **_genai([USER, batch, answers])),
        tool(41, 1, "fetch_policy", 60, 5060, call_id="p1", arguments={}),
        llm(50, 1, 5061, 5070, ask("issue_refund", "r1", {"order_id": "A-1"}), **refund_history),
        tool(51, 1, "issue_refund", 5071, 5080, call_id="r1", arguments={"order_id": "A-1"}),
    ]  # fmt: skip
    assert only(whole).complete  # control: whole, verified
    assert safety(only(whole)) == []
    half = [s for s in whole if s.end_ns > 100 * MS]
    assert {int.from_bytes(s.span_id, "big") for s in half} == {1, 41, 50, 51}
    run = only(half)
    assert (run.complete, run.incomplete_reason) == (False, "missing_spans")
    assert MISSING not in safety(run)
