"""review2: what held up (these pass): the checks that the fixes' rules answer as they should
where the brief asked to look."""

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


def _turn(call_id: str, name: str, order: str) -> list[dict[str, Any]]:
    call = {"type": "tool_call", "id": call_id, "name": name, "arguments": {"order_id": order}}
    answer = {"type": "tool_call_response", "id": call_id, "response": "ok"}
    return [{"role": "assistant", "parts": [call]}, {"role": "tool", "parts": [answer]}]


def test_twenty_sequential_lookups_tell_a_split_from_a_whole_run() -> None:
    """20 single-call turns (c1..c20, A-1..A-20), then a refund of A-1. The refund span's
    history names all 20 (c20..c1, under ``MAX_CALL_IDS``). Whole: known, verified. A
    rollout losing every span ended by 100 ms (turns 1..4): the first kept model span (turn
    5's) names c4..c1, unknown: ``missing_spans``, no page."""
    history: list[dict[str, Any]] = [USER]
    spans = [agent(1, None, "support", 0, 10_000)]
    for i in range(1, 21):
        start = 30 * i
        spans.append(
            llm(
                10 * i,
                1,
                start,
                start + 10,
                ask("lookup_order", f"c{i}", {"order_id": f"A-{i}"}),
                **_genai(history),
            )
        )
        spans.append(
            tool(
                10 * i + 1,
                1,
                "lookup_order",
                start + 11,
                start + 20,
                call_id=f"c{i}",
                arguments={"order_id": f"A-{i}"},
            )
        )
        history += _turn(f"c{i}", "lookup_order", f"A-{i}")
    refund = _genai(history)
    assert refund["prior_call_ids"] == tuple(f"c{i}" for i in range(20, 0, -1))
    spans.append(llm(300, 1, 700, 710, ask("issue_refund", "r", {"order_id": "A-1"}), **refund))
    spans.append(tool(301, 1, "issue_refund", 711, 720, call_id="r",
                      arguments={"order_id": "A-1"}))  # fmt: skip
    assert safety(only(spans)) == []
    half = only([s for s in spans if s.end_ns > 140 * MS])
    assert (half.complete, half.incomplete_reason) == (False, "missing_spans")
    assert MISSING not in safety(half)


def test_a_span_asking_again_under_its_historys_id_is_no_witness_of_it() -> None:
    """Ids named after their tool (Strands' Ollama): the second model span's history names
    ``lookup_order``, and it asks for ``lookup_order`` again. Its own output does not make the
    id known (known only by spans started before it): a split losing turn 1 is
    ``missing_spans``; whole, verified."""
    at_second = _genai([USER, *_turn("lookup_order", "lookup_order", "A-1")])
    whole = [
        agent(1, None, "support", 0, 100),
        llm(2, 1, 1, 10, ask("lookup_order", "lookup_order", {"order_id": "A-1"}), prior_turns=0),
        tool(3, 1, "lookup_order", 11, 20, call_id="lookup_order", arguments={"order_id": "A-1"}),
        llm(4, 1, 21, 30, ask("lookup_order", "lookup_order", {"order_id": "A-2"}),
            ask("issue_refund", "issue_refund", {"order_id": "A-1"}, 1), **at_second),
        tool(5, 1, "lookup_order", 31, 40, call_id="lookup_order", arguments={"order_id": "A-2"}),
        tool(6, 1, "issue_refund", 41, 50, call_id="issue_refund", arguments={"order_id": "A-1"}),
    ]  # fmt: skip
    assert (only(whole).complete, safety(only(whole))) == (True, [])
    half = only([s for s in whole if s.end_ns > 20 * MS])
    assert (half.complete, half.incomplete_reason) == (False, "missing_spans")


def test_a_tool_run_while_its_request_streamed_is_known_to_the_next_model_span() -> None:
    """Streaming (the Vercel AI SDK's ``streamText``): the lookup runs while its model span
    still streams (12-15 ms inside 1-20 ms), the next model call starts at 21 ms. Whole."""
    history = _genai([USER, *_turn("c1", "lookup_order", "A-1")])
    spans = [
        agent(1, None, "support", 0, 100),
        llm(2, 1, 1, 20, ask("lookup_order", "c1", {"order_id": "A-1"}), prior_turns=0),
        tool(3, 1, "lookup_order", 12, 15, call_id="c1", arguments={"order_id": "A-1"}),
        llm(4, 1, 21, 30, ask("issue_refund", "c2", {"order_id": "A-1"}), **history),
        tool(5, 1, "issue_refund", 31, 40, call_id="c2", arguments={"order_id": "A-1"}),
    ]
    assert (only(spans).complete, safety(only(spans))) == (True, [])
