"""The tool-call-id evidence for ``missing_spans`` (``assembly.missing``,
``conventions.history``), as three reviews (review-idev, review2, review3) found it wanting:
the half of a run a rollout left must not page a false MISSING_VERIFICATION_STEP, and a whole
run must not be silenced. Each section's comment says what the review found; each test what
was (``Was:``) and what is (``Now:``), or, marked xfail, what is not handled."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.assembly.assembly_support import (
    MISSING,
    MS,
    USER,
    agent,
    answer_part,
    ask,
    build,
    genai_history,
    llm,
    only,
    safety,
    span,
    tool,
)
from toolwatch.assembly.missing import TraceIds
from toolwatch.conventions.history import MAX_CALL_IDS, read_history
from toolwatch.model import SpanRecord, SpanRole


# ==============================================================================================
# The tool-call-id evidence for ``missing_spans`` (``assembly.missing``,
# ``conventions.history``), as its review (review-idev) found it wanting: the half of a run a
# rollout left must not page a false MISSING_VERIFICATION_STEP, and a whole run must not be
# silenced. Each test says what was (``Was:``) and what is (``Now:``).
def _lookup(call_id: str, order: str) -> dict[str, Any]:
    return {
        "type": "tool_call",
        "id": call_id,
        "name": "lookup_order",
        "arguments": {"order_id": order},
    }


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
    answers = {"role": "tool", "parts": [answer_part(i) for i in ids]}
    refund_history = genai_history([USER, batch, answers])
    assert refund_history == {"prior_turns": 1, "prior_call_ids": tuple(reversed(ids))}
    batch33 = {"role": "assistant", "parts": [_lookup(f"c{i}", "A-1") for i in range(33)]}
    assert genai_history([USER, batch33, answers]) == {"prior_turns": 1, "prior_call_ids": ()}
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
    genai = genai_history(
        [
            USER,
            {"role": "assistant", "parts": [_lookup("c1", "A-2"), _lookup("c2", "A-1")]},
            {"role": "tool", "parts": [answer_part("c1"), answer_part("c2")]},
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
    looked = {"role": "tool", "parts": [answer_part("c1")]}
    said = {"role": "assistant", "parts": [{"type": "text", "content": "A-9 is shipped."}]}
    first_history = genai_history([USER, lookup, looked])
    second_history = genai_history([USER, lookup, looked, said])
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
    answer = {"role": "tool", "parts": [answer_part("lookup_order")]}
    at_second = genai_history([USER, first, answer])
    at_refund = genai_history([USER, first, answer, second, answer])
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


# ==============================================================================================
# review2: the 16-id cap keeps a message's ids whole, "nearest first, while they fit", and
# *breaks* at a message that does not fit once nearer ids are kept (``_ids_in``). A lost batch
# behind one nearer call whose span survived is then never compared.
def _call_of(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_call", "id": call_id, "name": name, "arguments": arguments}


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
        "parts": [_call_of(f"c{i}", "lookup_order", {"order_id": f"A-{i}"}) for i in range(1, 17)],
    }
    answers = {"role": "tool", "parts": [answer_part(f"c{i}") for i in range(1, 17)]}
    slow = {"role": "assistant", "parts": [_call_of("p1", "fetch_policy", {})]}
    policy = {"role": "tool", "parts": [answer_part("p1")]}
    refund_history = genai_history([USER, batch, answers, slow, policy])
    kept = ("p1", *(f"c{i}" for i in range(16, 0, -1)))  # 17 ids: under MAX_CALL_IDS
    assert refund_history == {"prior_turns": 2, "prior_call_ids": kept}
    whole = [
        agent(1, None, "support", 0, 6000),
        llm(2, 1, 1, 10, *[ask("lookup_order", f"c{i}", {"order_id": f"A-{i}"}, i - 1)
                           for i in range(1, 17)], prior_turns=0),
        *[tool(10 + i, 1, "lookup_order", 11, 20 + i, call_id=f"c{i}",
               arguments={"order_id": f"A-{i}"}) for i in range(1, 17)],
        llm(40, 1, 40, 55, ask("fetch_policy", "p1", {}),
            **genai_history([USER, batch, answers])),
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


# ==============================================================================================
# review3 of 393c7a4: a call the history records *without* an id is dropped from the window's
# ids (``_ids_in``: "non-empty strings only") while the other ids of the window are kept.
#
# 393c7a4 made a window whose calls were not all read give ``()`` (an OpenInference message of
# more than four calls: "a message with calls not read"), since "those not kept may be the lost
# ones, behind kept ones the trace holds". A call recorded with no id is the same: its call
# cannot be looked for, yet the window's other ids still decide. GenAI's ``tool_call`` part has
# a nullable ``id`` (Gemini's ``functionCall.id`` is set only "where the API set one", the
# module docstring says), so a run whose model calls are served by two providers (a fallback
# model: Gemini, then OpenAI) names some calls and not others. A split whose lost call is the
# unnamed one, behind a named call whose span survived, reads whole.
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
    history = genai_history(messages)
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


# ==============================================================================================
# review2: an OpenInference message with a second call anywhere in the window makes every id
# of the history not comparable (``history._indexed_ids`` gives ``None``, ``_ids_in`` answers
# ``()``), however near the other messages and however well they are known.
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


# ==============================================================================================
# review3 of 393c7a4: a window naming more than ``MAX_CALL_IDS`` (32) ids gives ``()`` and
# the count alone decides (``conventions.history._ids_in``).
#
# ``assembly.missing`` says: "A model call no instrumentation recorded, whose tools' spans
# (with their call ids) are in the trace, is then no lost span". That holds up to the 32nd
# tool call of a user turn only: from the model call whose window names a 33rd id on, the
# count alone decides, finds the unrecorded call, and the *whole* run is judged
# ``missing_spans``: its true absence findings silenced. Neither the module docstring,
# docs/configuration.md (``missing_spans_from_history``) nor docs/security.md says that a long
# run is so silenced; they say ids that cannot tell calls apart ("more than 32") are judged by
# the count, which reads as a rare, hostile shape, not as every run past 32 calls.
USER_B1 = {"role": "user", "parts": [{"type": "text", "content": "Check my orders, refund B-1."}]}


def _lookup_turn(k: int) -> list[dict[str, Any]]:
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
    history = [USER_B1, *_lookup_turn(0)]
    spans.append(tool(2, 1, "lookup_order", 5, 9, call_id="c0", arguments={"order_id": "A-0"}))
    for k in range(1, lookups):
        t = 10 * k
        lookup = ask("lookup_order", f"c{k}", {"order_id": f"A-{k}"})
        spans.append(llm(10 + 2 * k, 1, t, t + 5, lookup, **genai_history(history)))
        spans.append(tool(11 + 2 * k, 1, "lookup_order", t + 6, t + 9, call_id=f"c{k}",
                          arguments={"order_id": f"A-{k}"}))  # fmt: skip
        history += _lookup_turn(k)
    t = 10 * lookups
    refund = ask("issue_refund", "r1", {"order_id": "B-1"})
    spans.append(llm(9000, 1, t, t + 5, refund, **genai_history(history)))
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


# ==============================================================================================
# review2: what held up (these pass): the checks that the fixes' rules answer as they should
# where the brief asked to look.
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
                **genai_history(history),
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
    refund = genai_history(history)
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
    at_second = genai_history([USER, *_turn("lookup_order", "lookup_order", "A-1")])
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
    history = genai_history([USER, *_turn("c1", "lookup_order", "A-1")])
    spans = [
        agent(1, None, "support", 0, 100),
        llm(2, 1, 1, 20, ask("lookup_order", "c1", {"order_id": "A-1"}), prior_turns=0),
        tool(3, 1, "lookup_order", 12, 15, call_id="c1", arguments={"order_id": "A-1"}),
        llm(4, 1, 21, 30, ask("issue_refund", "c2", {"order_id": "A-1"}), **history),
        tool(5, 1, "issue_refund", 31, 40, call_id="c2", arguments={"order_id": "A-1"}),
    ]
    assert (only(spans).complete, safety(only(spans))) == (True, [])


# ==============================================================================================
# review2: ids looked up in the whole trace, among spans started before the history's span
# (dd985a3), on the spans' raw clocks. Now: before it *ended* (``TraceIds.knows``), and a span
# whose output asks again under an id its history names leaves the count to decide.
def _call(call_id: str, name: str, order: str) -> dict[str, Any]:
    return {"type": "tool_call", "id": call_id, "name": name, "arguments": {"order_id": order}}


@pytest.mark.xfail(
    strict=True,
    reason="not handled: ids that repeat across runs (Strands' Ollama provider) let another"
    " run's call vouch for a lost one; documented in docs/observed-conventions.md",
)
def test_a_split_run_whose_lost_id_another_run_of_the_trace_reused_pages_falsely() -> None:
    """Strands' Ollama provider names each call after its tool (``toolUseId`` =
    ``lookup_order``; the fix's own test 4). Two agents of one swarm run side by side in one
    trace, each a run: ``triage`` looks A-9 up (a slow lookup, 11-5000 ms), ``refunds`` looks
    A-1 up (13-20 ms), then refunds A-1. A rollout at 25 ms sends the spans ended by then
    elsewhere: both first model calls and refunds' lookup of A-1. ``refunds``' refund span
    shows one turn, the half holds no model span before it, and its history names
    ``lookup_order`` once (no repeat: ``_ids_in`` keeps it). Looked up in the whole trace,
    ``lookup_order`` is known: triage's surviving lookup started at 11 ms, before 21 ms.
    The half reads as whole, and its refund of A-1 pages a false MISSING_VERIFICATION_STEP.
    Before dd985a3 (looked up in the run only) it was ``missing_spans``. Expected: an id
    another run of the trace carries is no evidence this run's call was recorded, where the
    producer's ids are not unique (the repeat rule sees one history only)."""
    first = {"role": "assistant", "parts": [_call("lookup_order", "lookup_order", "A-1")]}
    answer = {"role": "tool", "parts": [answer_part("lookup_order")]}
    refund_history = genai_history([USER, first, answer])
    assert refund_history == {"prior_turns": 1, "prior_call_ids": ("lookup_order",)}
    a9, a1 = {"order_id": "A-9"}, {"order_id": "A-1"}
    whole = [
        span(1, None, SpanRole.OTHER, 0, 7000, name="invoke_swarm"),
        agent(2, 1, "triage", 0, 6000),
        llm(3, 2, 1, 10, ask("lookup_order", "lookup_order", a9), prior_turns=0),
        tool(4, 2, "lookup_order", 11, 5000, call_id="lookup_order", arguments=a9),
        agent(10, 1, "refunds", 2, 6000),
        llm(11, 10, 3, 12, ask("lookup_order", "lookup_order", a1), prior_turns=0),
        tool(12, 10, "lookup_order", 13, 20, call_id="lookup_order", arguments=a1),
        llm(13, 10, 21, 30, ask("issue_refund", "issue_refund", a1), **refund_history),
        tool(14, 10, "issue_refund", 31, 40, call_id="issue_refund", arguments=a1),
    ]
    runs = {t.agent: t for t in build(whole)}
    assert safety(runs["refunds"]) == []  # control: whole, verified
    half = [s for s in whole if s.end_ns > 25 * MS]
    assert {int.from_bytes(s.span_id, "big") for s in half} == {1, 2, 4, 10, 13, 14}
    refunds = {t.agent: t for t in build(half)}["refunds"]
    assert (refunds.complete, refunds.incomplete_reason) == (False, "missing_spans")
    assert MISSING not in safety(refunds)


GATEWAY_BEHIND = 50  # ms the LLM gateway's clock is behind the agent host's


def test_a_whole_run_whose_known_call_ran_on_a_skewed_host_is_silenced() -> None:
    """The documented whole run the ids exist to tell from a split (``assembly.missing``: "A
    model call no instrumentation recorded, whose tools' spans (with their call ids) are in
    the trace, is then no lost span"). The model calls go through an LLM gateway, which
    records them (service ``gateway``, its clock 50 ms behind the agent host's); the first
    call (a planner on another client) is recorded by nothing. It asked for a lookup of A-9
    (c1), run by the agent at 100-105 ms, its span carrying c1; the next model call starts
    at 107 ms (57 ms on the gateway's clock), lasts 800 ms (a model call's usual time; review2's
    test made it 43 ms) and refunds A-1: a true MISSING_VERIFICATION_STEP.

    Count: one turn, no model span before: evidence. Ids: c1, known only by the tool span,
    which starts at 100 ms on the agent's clock, after the model span's 57 ms: "known nowhere
    before" it, so the run is ``missing_spans`` and the true page is silenced. Before
    dd985a3 (known anywhere in the run) it was whole and paged. The timeline's clocks
    (``clocks``) move hosts' spans into their requests' windows; ``_first_known`` reads the
    raw ``start_ns``. Was (dd985a3): silenced. Now: a span known before the history's span
    *ended* counts, so a skew shorter than the model call is read through: whole, paged."""
    plan = {"role": "assistant", "parts": [_call("c1", "lookup_order", "A-9")]}
    history = genai_history([USER, plan, {"role": "tool", "parts": [answer_part("c1")]}])
    assert history == {"prior_turns": 1, "prior_call_ids": ("c1",)}
    behind = GATEWAY_BEHIND
    spans = [
        agent(1, None, "support", 0, 300),
        tool(2, 1, "lookup_order", 100, 105, call_id="c1", arguments={"order_id": "A-9"}),
        llm(3, 1, 107 - behind, 907 - behind, ask("issue_refund", "c2", {"order_id": "A-1"}),
            service="gateway", **history),
        tool(4, 1, "issue_refund", 910, 920, call_id="c2", arguments={"order_id": "A-1"}),
    ]  # fmt: skip
    run = only(spans)
    assert (run.complete, run.incomplete_reason) == (True, None)
    assert safety(run) == [MISSING]


TOOL_HOST_BEHIND = 15  # ms the tool host's clock is behind the model spans'


def test_a_split_whose_later_same_named_call_ran_on_a_host_behind_pages_falsely() -> None:
    """The other direction of the same raw clocks. Ids named after their tool (Strands'
    Ollama). Turn 1 looks A-1 up (lost to the rollout, with its lookup); turn 2 (21-30 ms)
    asks at once for a lookup of A-2 and the refund of A-1, both run by a tool host whose
    clock is 15 ms behind: the A-2 lookup, run at 31 ms, is recorded at 16 ms. Turn 2's
    history names ``lookup_order`` once; the A-2 lookup, a later call under that id, reads
    as started before the span (16 < 21), so the id is known, the half whole, and its refund
    of A-1 pages a false MISSING_VERIFICATION_STEP. Without the skew it is ``missing_spans``
    (the fix's "a later call under the same id is another call"). Was (dd985a3): the false
    page. Now: the span's own output asks again under the id its history names
    (``lookup_order``), so its ids tell nothing and the count decides: ``missing_spans``
    whatever the tool host's clock."""
    asked = {"role": "assistant", "parts": [_call("lookup_order", "lookup_order", "A-1")]}
    history = genai_history([USER, asked, {"role": "tool", "parts": [answer_part("lookup_order")]}])
    a1, a2 = {"order_id": "A-1"}, {"order_id": "A-2"}

    def half(behind: int) -> list[Any]:
        return [
            agent(1, None, "support", 0, 100),
            llm(4, 1, 21, 30, ask("lookup_order", "lookup_order", a2, 0),
                ask("issue_refund", "issue_refund", a1, 1), **history),
            tool(5, 1, "lookup_order", 31 - behind, 40 - behind, call_id="lookup_order",
                 arguments=a2, service="orders"),
            tool(6, 1, "issue_refund", 41 - behind, 50 - behind, call_id="issue_refund",
                 arguments=a1, service="orders"),
        ]  # fmt: skip

    assert only(half(0)).incomplete_reason == "missing_spans"  # control: no skew
    skewed = only(half(TOOL_HOST_BEHIND))
    assert (skewed.complete, skewed.incomplete_reason) == (False, "missing_spans")
    assert MISSING not in safety(skewed)


# ==============================================================================================
# review3 of 393c7a4. Was: ``assembly.missing._NEVER`` (``1 << 63``) stood for "no second
# carrier" in ``TraceIds``, compared with the history's span's ``end_ns``. OTLP times are
# ``fixed64`` and ingest keeps any end at or after the start (``decode``: only an end before
# the start is clamped), so an end past 2**63 ns (a producer's broken clock) reaches the
# comparison and the span's own record counts as another span's. Negligible in practice (a
# model span that carries, as its own ``call_id``, an id its history names); shown for the
# sentinel's contract: "a start no span reaches". Now: no second carrier is ``None``.
FAR_MS = (1 << 63) // MS + 1  # an end (ms) past the sentinel, within fixed64


def test_a_span_that_alone_carries_an_id_does_not_know_it_whatever_its_end() -> None:
    """Control: ended at 20 ms, the span alone carries ``x``: unknown. Expected the same
    with its end past 2**63 ns (was: ``_NEVER < end_ns``, read as known)."""
    near = llm(10, 1, 10, 20, call_id="x", prior_turns=1, prior_call_ids=("x",))
    assert not TraceIds([near]).knows("x", near)
    far = llm(11, 1, 10, FAR_MS, call_id="x", prior_turns=1, prior_call_ids=("x",))
    assert 1 << 63 < far.end_ns < 1 << 64
    assert not TraceIds([far]).knows("x", far)
