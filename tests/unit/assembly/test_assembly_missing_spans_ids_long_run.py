"""review3 of 393c7a4: a window naming more than ``MAX_CALL_IDS`` (32) ids gives ``()`` and
the count alone decides (``conventions.history._ids_in``).

``assembly.missing`` says: "A model call no instrumentation recorded, whose tools' spans
(with their call ids) are in the trace, is then no lost span". That holds up to the 32nd
tool call of a user turn only: from the model call whose window names a 33rd id on, the
count alone decides, finds the unrecorded call, and the *whole* run is judged
``missing_spans``: its true absence findings silenced. Neither the module docstring,
docs/configuration.md (``missing_spans_from_history``) nor docs/security.md says that a long
run is so silenced; they say ids that cannot tell calls apart ("more than 32") are judged by
the count, which reads as a rare, hostile shape, not as every run past 32 calls."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.assembly.assembly_support import agent, ask, llm, only, safety, tool
from toolwatch.conventions.history import MAX_CALL_IDS, read_history
from toolwatch.model import Category, SpanRecord

MISSING = Category.MISSING_VERIFICATION_STEP
USER = {"role": "user", "parts": [{"type": "text", "content": "Check my orders, refund B-1."}]}


def _genai(messages: list[dict[str, Any]]) -> dict[str, Any]:
    turns, ids = read_history({"gen_ai.input.messages": json.dumps(messages)}, None)
    return {"prior_turns": turns, "prior_call_ids": ids}


def _turn(k: int) -> list[dict[str, Any]]:
    """Model turn ``k``: one lookup of order ``A-k`` under ``c<k>``, and its answer."""
    call = {"type": "tool_call", "id": f"c{k}", "name": "lookup_order",
            "arguments": {"order_id": f"A-{k}"}}  # fmt: skip
    answer = {"type": "tool_call_response", "id": f"c{k}", "response": "ok"}
    return [{"role": "assistant", "parts": [call]}, {"role": "tool", "parts": [answer]}]


def _whole_run(lookups: int) -> list[SpanRecord]:
    """A whole run of ``lookups`` + 1 model calls, the first made by a client no
    instrumentation wraps (a router on a raw HTTP client: no span), each asking one lookup
    (``c0`` .. ``c<lookups-1>``), every lookup's tool span recorded with its call id; then a
    refund of B-1, never looked up: a true MISSING_VERIFICATION_STEP."""
    spans = [agent(1, None, "support", 0, 100_000)]
    history = [USER, *_turn(0)]
    spans.append(tool(2, 1, "lookup_order", 5, 9, call_id="c0", arguments={"order_id": "A-0"}))
    for k in range(1, lookups):
        t = 10 * k
        lookup = ask("lookup_order", f"c{k}", {"order_id": f"A-{k}"})
        spans.append(llm(10 + 2 * k, 1, t, t + 5, lookup, **_genai(history)))
        spans.append(tool(11 + 2 * k, 1, "lookup_order", t + 6, t + 9, call_id=f"c{k}",
                          arguments={"order_id": f"A-{k}"}))  # fmt: skip
        history += _turn(k)
    t = 10 * lookups
    refund = ask("issue_refund", "r1", {"order_id": "B-1"})
    spans.append(llm(9000, 1, t, t + 5, refund, **_genai(history)))
    spans.append(tool(9001, 1, "issue_refund", t + 6, t + 9, call_id="r1",
                      arguments={"order_id": "B-1"}))  # fmt: skip
    return spans


def test_a_whole_run_of_thirty_two_lookups_with_an_unrecorded_first_call_pages() -> None:
    """Control: 32 ids in the refund's window, every one carried by a tool span: whole."""
    run = only(_whole_run(MAX_CALL_IDS))
    assert (run.complete, run.incomplete_reason) == (True, None)
    assert safety(run) == [MISSING]


@pytest.mark.parametrize("lookups", [MAX_CALL_IDS + 1, 100])
@pytest.mark.xfail(
    strict=True,
    reason="not handled: past MAX_CALL_IDS (32) ids since the user's message the count alone"
    " decides, and a whole run with an unrecorded model call is silenced; documented in"
    " docs/security.md and docs/configuration.md",
)
def test_a_whole_run_past_thirty_two_lookups_with_an_unrecorded_first_call_still_pages(
    lookups: int,
) -> None:
    """The same run with one more lookup (or 100: an agent paging through a customer's
    orders). Every id the refund's history names is carried by a tool span of the trace
    that started before it, so no call of the turn was lost; the count alone (33 turns, 32
    model spans) reads the unrecorded router call as a lost span. Expected, as the module
    docstring promises: whole, the refund of B-1 paged. Now: ``missing_spans``, silenced."""
    run = only(_whole_run(lookups))
    assert (run.complete, run.incomplete_reason) == (True, None)
    assert safety(run) == [MISSING]
