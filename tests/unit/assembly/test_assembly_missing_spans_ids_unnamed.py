"""review3 of 393c7a4: a call the history records *without* an id is dropped from the window's
ids (``_ids_in``: "non-empty strings only") while the other ids of the window are kept.

393c7a4 made a window whose calls were not all read give ``()`` (an OpenInference message of
more than four calls: "a message with calls not read"), since "those not kept may be the lost
ones, behind kept ones the trace holds". A call recorded with no id is the same: its call
cannot be looked for, yet the window's other ids still decide. GenAI's ``tool_call`` part has
a nullable ``id`` (Gemini's ``functionCall.id`` is set only "where the API set one", the
module docstring says), so a run whose model calls are served by two providers (a fallback
model: Gemini, then OpenAI) names some calls and not others. A split whose lost call is the
unnamed one, behind a named call whose span survived, reads whole."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.assembly.assembly_support import MS, agent, ask, llm, only, safety, tool
from toolwatch.conventions.history import read_history
from toolwatch.model import Category

MISSING = Category.MISSING_VERIFICATION_STEP
USER = {"role": "user", "parts": [{"type": "text", "content": "Refund my order A-1."}]}


def _genai(messages: list[dict[str, Any]]) -> dict[str, Any]:
    turns, ids = read_history({"gen_ai.input.messages": json.dumps(messages)}, None)
    return {"prior_turns": turns, "prior_call_ids": ids}


@pytest.mark.parametrize("lookup_id", ["c1", None], ids=["named", "unnamed"])
def test_a_split_whose_lost_lookup_the_history_names_without_an_id_is_missing_spans(
    lookup_id: str | None,
) -> None:
    """Turn 1 (Gemini, the fallback: no id) looks A-1 up; turn 2 (OpenAI) asks for a slow
    ``fetch_policy`` (``p1``, 60-5060 ms); turn 3 refunds A-1. A rollout at 100 ms sends the
    spans ended by then elsewhere: turns 1 and 2's model spans and the lookup. The refund
    span's history shows 2 turns, the half holds no model span before it: the count says
    spans were lost. Named (``c1``, control): ids ``(p1, c1)``, ``c1`` unknown:
    ``missing_spans``. Unnamed: ids ``(p1,)``, ``p1`` known (the surviving slow span): the
    half reads whole and its refund of A-1 pages a false MISSING_VERIFICATION_STEP.
    Was (393c7a4): the false page. Now: a window holding a call whose id is not read names
    none (the count decides),
    as an OpenInference message of more than four calls does."""
    lookup = {"type": "tool_call", "id": lookup_id, "name": "lookup_order",
              "arguments": {"order_id": "A-1"}}  # fmt: skip
    messages = [
        USER,
        {"role": "assistant", "parts": [lookup]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": lookup_id}]},
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "p1", "name": "fetch_policy",
                                         "arguments": {}}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "p1"}]},
    ]  # fmt: skip
    history = _genai(messages)
    assert history["prior_turns"] == 2
    half = [
        agent(1, None, "support", 0, 6000),
        tool(41, 1, "fetch_policy", 60, 5060, call_id="p1", arguments={}),
        llm(50, 1, 5061, 5070, ask("issue_refund", "r1", {"order_id": "A-1"}), **history),
        tool(51, 1, "issue_refund", 5071, 5080, call_id="r1", arguments={"order_id": "A-1"}),
    ]
    assert all(s.end_ns > 100 * MS for s in half)  # what the rollout left here
    run = only(half)
    assert (run.complete, run.incomplete_reason) == (False, "missing_spans")
    assert MISSING not in safety(run)
