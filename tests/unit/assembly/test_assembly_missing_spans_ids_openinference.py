"""review2: an OpenInference message with a second call anywhere in the window makes every id
of the history not comparable (``history._indexed_ids`` gives ``None``, ``_ids_in`` answers
``()``), however near the other messages and however well they are known."""

from __future__ import annotations

from typing import Any

from tests.unit.assembly.assembly_support import agent, ask, llm, only, safety, tool
from toolwatch.conventions.history import read_history
from toolwatch.model import Category

MISSING = Category.MISSING_VERIFICATION_STEP


def _openinference(*messages: tuple[str, tuple[str, ...]]) -> dict[str, Any]:
    """The fields ingest reads from an OpenInference history of ``(role, call ids)``."""
    attrs: dict[str, Any] = {"llm.output_messages.0.message.role": "assistant"}
    for i, (role, ids) in enumerate(messages):
        attrs[f"llm.input_messages.{i}.message.role"] = role
        for k, call_id in enumerate(ids):
            attrs[f"llm.input_messages.{i}.message.tool_calls.{k}.tool_call.id"] = call_id
    turns, ids = read_history(attrs, None)
    return {"prior_turns": turns, "prior_call_ids": ids}


def test_a_whole_run_with_one_parallel_turn_far_back_is_silenced() -> None:
    """LangGraph (or the OpenAI client) under OpenInference, Chat Completions messages: turn
    1 asks for two lookups at once (c1: A-9, c2: A-8), recorded; turn 2, a call through a
    client no instrumentation wraps, asks for one more lookup (c3: A-7), its tool span
    recorded with its id; turn 3 refunds A-1, never looked up: a true
    MISSING_VERIFICATION_STEP.

    Turn 3's history shows 2 turns, the run holds 1 model span before it: the count says
    lost. Its nearest id, c3, is known (the lookup's span); so are c1 and c2 (turn 1's
    output and tool spans). Before dd985a3 (each message's first call, the last 8: c3, c1,
    both known) the run was whole and paged. Now turn 1's message has a second call
    (``tool_calls.1``), so the whole history names ``()``: the count alone decides,
    ``missing_spans``, and the true page is silenced, though the message at fault is behind
    a nearer message whose one id is known. Every whole run of these producers that the
    ids were to rescue (an unrecorded call, a run given another's messages) is silenced as
    soon as any earlier turn since the user's message called tools in parallel. Expected:
    whole and paged (reading the message's other ids, ``tool_calls.<k>``, would keep the
    split of test 2 of the ids review caught: its nearest message is the parallel one).
    Was (dd985a3): silenced. Now: a message's first four calls' ids are read."""
    history = _openinference(
        ("user", ()),
        ("assistant", ("c1", "c2")),
        ("tool", ()),
        ("tool", ()),
        ("assistant", ("c3",)),
        ("tool", ()),
    )
    assert history == {"prior_turns": 2, "prior_call_ids": ("c3", "c2", "c1")}
    spans = [
        agent(1, None, "support", 0, 200),
        llm(2, 1, 1, 10, ask("lookup_order", "c1", {"order_id": "A-9"}, 0),
            ask("lookup_order", "c2", {"order_id": "A-8"}, 1), prior_turns=0),
        tool(3, 1, "lookup_order", 11, 15, call_id="c1", arguments={"order_id": "A-9"}),
        tool(4, 1, "lookup_order", 11, 16, call_id="c2", arguments={"order_id": "A-8"}),
        # turn 2 (17-25 ms): not recorded
        tool(5, 1, "lookup_order", 26, 30, call_id="c3", arguments={"order_id": "A-7"}),
        llm(6, 1, 31, 40, ask("issue_refund", "c4", {"order_id": "A-1"}), **history),
        tool(7, 1, "issue_refund", 41, 50, call_id="c4", arguments={"order_id": "A-1"}),
    ]  # fmt: skip
    run = only(spans)
    assert (run.complete, run.incomplete_reason) == (True, None)
    assert safety(run) == [MISSING]
