"""The tool-call-id evidence for ``missing_spans`` (``assembly.missing``,
``conventions.history``), as its review (review-idev) found it wanting: the half of a run a
rollout left must not page a false MISSING_VERIFICATION_STEP, and a whole run must not be
silenced. Each test says what was (``Was:``) and what is (``Now:``)."""

from __future__ import annotations

import json
from typing import Any

from tests.unit.assembly.assembly_support import (
    MS,
    agent,
    ask,
    build,
    llm,
    only,
    safety,
    span,
    tool,
)
from toolwatch.conventions.history import read_history
from toolwatch.model import Category, SpanRecord, SpanRole

MISSING = Category.MISSING_VERIFICATION_STEP
USER = {"role": "user", "parts": [{"type": "text", "content": "Refund my order A-1."}]}


def _genai(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The SpanRecord fields ingest reads from a ``gen_ai.input.messages`` history."""
    turns, ids = read_history({"gen_ai.input.messages": json.dumps(messages)}, None)
    return {"prior_turns": turns, "prior_call_ids": ids}


def _lookup(call_id: str, order: str) -> dict[str, Any]:
    return {
        "type": "tool_call",
        "id": call_id,
        "name": "lookup_order",
        "arguments": {"order_id": order},
    }


def _answer(call_id: str) -> dict[str, Any]:
    return {"type": "tool_call_response", "id": call_id, "response": "found"}


# --- 1. A batch of calls at once, some of whose spans were lost ---------------------------


def test_a_split_losing_the_first_calls_of_a_batch_of_ten_lookups_is_not_read_as_whole() -> None:
    """The first model call asks for ten lookups at once (orders A-1 .. A-10, ids c1..c10).
    A rollout sends that model span and the first two lookups' spans (they ended first, in
    the batch the old replica exported) elsewhere; the other eight lookups, the refund of
    A-1 and the rest come here. The refund call's history names c1..c10, but only the last
    8 (c10..c3) are kept, all known here: the half reads as whole, and its refund of A-1,
    whose lookup went to the other replica, pages a false MISSING_VERIFICATION_STEP (the
    page the setting exists to stop). Was: that. Now: up to 32 ids are kept
    (``MAX_CALL_IDS``): c1 and c2 are named and known nowhere in the half, ``missing_spans``;
    a window naming more names none (the count decides)."""
    pairs = [(f"c{i}", f"A-{i}") for i in range(1, 11)]  # (call id, order)
    ids = [i for i, _ in pairs]
    batch = {"role": "assistant", "parts": [_lookup(i, o) for i, o in pairs]}
    answers = {"role": "tool", "parts": [_answer(i) for i in ids]}
    refund_history = _genai([USER, batch, answers])
    assert refund_history == {"prior_turns": 1, "prior_call_ids": tuple(reversed(ids))}
    batch33 = {"role": "assistant", "parts": [_lookup(f"c{i}", "A-1") for i in range(33)]}
    assert _genai([USER, batch33, answers]) == {"prior_turns": 1, "prior_call_ids": ()}
    whole = [
        agent(1, None, "support", 0, 100),
        llm(2, 1, 1, 10, *[ask("lookup_order", i, {"order_id": o}, k)
                           for k, (i, o) in enumerate(pairs)], prior_turns=0),
        *[tool(10 + k, 1, "lookup_order", 11, 12 + k, call_id=i, arguments={"order_id": o})
          for k, (i, o) in enumerate(pairs)],
        llm(30, 1, 31, 40, ask("issue_refund", "c11", {"order_id": "A-1"}), **refund_history),
        tool(31, 1, "issue_refund", 41, 45, call_id="c11", arguments={"order_id": "A-1"}),
    ]  # fmt: skip
    assert only(whole).complete  # control: the whole run is whole and verified
    assert safety(only(whole)) == []
    # Lost: the model call (ended at 10) and the two lookups that ended first (12, 13).
    staying = [s for s in whole if s.end_ns > 13 * MS]
    assert {s.span_id[-1] for s in whole} - {s.span_id[-1] for s in staying} == {2, 10, 11}
    half = only(staying)
    assert (half.complete, half.incomplete_reason) == (False, "missing_spans")
    assert MISSING not in safety(half)


# --- 2. OpenInference: a message's calls after its first --------------------------------------


def _openinference_history() -> dict[str, Any]:
    """An OpenInference model span's history: the user, the model asking for two lookups at
    once (c1: A-2, c2: A-1), their two tool messages."""
    attrs: dict[str, Any] = {
        "llm.output_messages.0.message.role": "assistant",
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.1.message.role": "assistant",
        "llm.input_messages.1.message.tool_calls.0.tool_call.id": "c1",
        "llm.input_messages.1.message.tool_calls.1.tool_call.id": "c2",
        "llm.input_messages.2.message.role": "tool",
        "llm.input_messages.3.message.role": "tool",
    }
    turns, ids = read_history(attrs, None)
    return {"prior_turns": turns, "prior_call_ids": ids}


def _two_lookups_then_refund(history: dict[str, Any]) -> list[SpanRecord]:
    return [
        agent(1, None, "support", 0, 100),
        llm(2, 1, 1, 10, ask("lookup_order", "c1", {"order_id": "A-2"}, 0),
            ask("lookup_order", "c2", {"order_id": "A-1"}, 1), prior_turns=0),
        tool(3, 1, "lookup_order", 11, 25, call_id="c1", arguments={"order_id": "A-2"}),
        tool(4, 1, "lookup_order", 11, 14, call_id="c2", arguments={"order_id": "A-1"}),
        llm(5, 1, 26, 35, ask("issue_refund", "c3", {"order_id": "A-1"}), **history),
        tool(6, 1, "issue_refund", 36, 40, call_id="c3", arguments={"order_id": "A-1"}),
    ]  # fmt: skip


def test_an_openinference_split_losing_a_parallel_calls_second_lookup_is_not_read_as_whole() -> (
    None
):
    """Same split, two producers. The model asked for two lookups at once; the rollout sent
    the model span and the A-1 lookup (c2, ended first) elsewhere, the slower A-2 lookup (c1)
    stayed. Under GenAI the history names c2 and c1: c2 is known nowhere, ``missing_spans``,
    no page. Under OpenInference only ``tool_calls.0`` is read: the history names c1 alone,
    known here, and the half reads as whole: its refund of A-1 pages a false
    MISSING_VERIFICATION_STEP. Was: that. Now: a message with a second call's id
    (``INDEXED_MORE_KEYS``) names no id compared: the count decides, as GenAI's ids do."""
    genai = _genai(
        [
            USER,
            {"role": "assistant", "parts": [_lookup("c1", "A-2"), _lookup("c2", "A-1")]},
            {"role": "tool", "parts": [_answer("c1"), _answer("c2")]},
        ]
    )
    openinference = _openinference_history()
    assert genai == {"prior_turns": 1, "prior_call_ids": ("c2", "c1")}
    assert openinference["prior_turns"] == 1
    lost = {2, 4}
    genai_half = only([s for s in _two_lookups_then_refund(genai) if s.span_id[-1] not in lost])
    assert genai_half.incomplete_reason == "missing_spans"
    oi_half = only(
        [s for s in _two_lookups_then_refund(openinference) if s.span_id[-1] not in lost]
    )
    assert (oi_half.complete, oi_half.incomplete_reason) == (False, "missing_spans")
    assert MISSING not in safety(oi_half)


# --- 3. An id known in another run of the same trace -------------------------------------------


def test_a_whole_second_run_given_the_first_runs_history_is_not_silenced() -> None:
    """Two runs in one trace (an OpenAI Agents ``with trace()`` around two ``Runner.run``
    calls, the second given ``result.to_input_list()`` of the first with no new user
    message: a reviewer, a follow-up step). The second run's first model span shows the first
    run's lookup turn after the last user message: the count rule's evidence (the second
    run holds no model span before it). Its id, c1, is the first run's: its model span asked
    for it and its tool span ran it, both in this trace. The ids could tell this whole trace
    from a split, but are looked up in the run only: the second run is judged
    ``missing_spans`` and its true MISSING_VERIFICATION_STEP (a refund of A-1, never looked
    up: the first run looked up A-9) is silenced. Expected: an id this trace holds a span of
    is known, the second run judged whole and paged. Was: silenced. Now: ids are looked for
    in the whole trace (before the span)."""
    lookup = {"role": "assistant", "parts": [_lookup("c1", "A-9")]}
    looked = {"role": "tool", "parts": [_answer("c1")]}
    said = {"role": "assistant", "parts": [{"type": "text", "content": "A-9 is shipped."}]}
    first_history = _genai([USER, lookup, looked])
    second_history = _genai([USER, lookup, looked, said])
    assert second_history == {"prior_turns": 1, "prior_call_ids": ("c1",)}
    spans = [
        span(1, None, SpanRole.OTHER, 0, 200, name="Agent workflow"),
        agent(2, 1, "triage", 1, 50),
        llm(3, 2, 2, 10, ask("lookup_order", "c1", {"order_id": "A-9"}), prior_turns=0),
        tool(4, 2, "lookup_order", 11, 20, call_id="c1", arguments={"order_id": "A-9"}),
        llm(5, 2, 21, 30, output_text="A-9 is shipped.", **first_history),
        agent(10, 1, "support", 60, 150),
        llm(11, 10, 61, 70, ask("issue_refund", "c2", {"order_id": "A-1"}), **second_history),
        tool(12, 10, "issue_refund", 71, 80, call_id="c2", arguments={"order_id": "A-1"}),
    ]
    runs = {t.agent: t for t in build(spans)}
    assert set(runs) == {"triage", "support"}
    assert runs["triage"].complete
    support = runs["support"]
    assert (support.complete, support.incomplete_reason) == (True, None)
    assert safety(support) == [MISSING]


# --- 4. Ids that repeat: Strands' Ollama provider names each call by its tool ---------------


def test_a_split_whose_lost_lookup_shares_its_id_with_a_later_one_is_not_read_as_whole() -> None:
    """Strands' ``OllamaModel`` (Ollama returns no call ids) sets each call's ``toolUseId``
    to the tool's name (``format_chunk``: ``{"toolUse": {"name": tool_name, "toolUseId":
    tool_name}}``), and its spans carry it as the call id: every lookup is
    ``lookup_order``. The rollout sends the first model call and its lookup of A-1
    elsewhere; here the model looks A-2 up and refunds A-1. The refund-asking span's history
    names ``lookup_order`` twice, known here by the A-2 lookup: the half reads as whole,
    and the refund of A-1 pages a false MISSING_VERIFICATION_STEP. Was: that. Now: an id is
    known only by a span started before the history's (the A-2 lookup came after), and ids
    that repeat in a history are not compared (the count decides)."""
    first = {"role": "assistant", "parts": [_lookup("lookup_order", "A-1")]}
    second = {"role": "assistant", "parts": [_lookup("lookup_order", "A-2")]}
    answer = {"role": "tool", "parts": [_answer("lookup_order")]}
    at_second = _genai([USER, first, answer])
    at_refund = _genai([USER, first, answer, second, answer])
    assert at_refund == {"prior_turns": 2, "prior_call_ids": ()}  # repeated: not compared
    assert at_second == {"prior_turns": 1, "prior_call_ids": ("lookup_order",)}
    whole = [
        agent(1, None, "support", 0, 100),
        llm(2, 1, 1, 10, ask("lookup_order", "lookup_order", {"order_id": "A-1"}), prior_turns=0),
        tool(3, 1, "lookup_order", 11, 20, call_id="lookup_order", arguments={"order_id": "A-1"}),
        llm(4, 1, 21, 30, ask("lookup_order", "lookup_order", {"order_id": "A-2"}), **at_second),
        tool(5, 1, "lookup_order", 31, 40, call_id="lookup_order", arguments={"order_id": "A-2"}),
        llm(6, 1, 41, 50, ask("issue_refund", "issue_refund", {"order_id": "A-1"}), **at_refund),
        tool(7, 1, "issue_refund", 51, 60, call_id="issue_refund", arguments={"order_id": "A-1"}),
    ]  # fmt: skip
    assert safety(only(whole)) == []  # control: whole, the refund's lookup is there
    half = only([s for s in whole if s.end_ns > 20 * MS])
    assert (half.complete, half.incomplete_reason) == (False, "missing_spans")
    assert MISSING not in safety(half)
