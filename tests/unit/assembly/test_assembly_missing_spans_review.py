"""The ``missing_spans`` evidence (``assembly.missing``, ``conventions.history``) against the
shapes an adversarial review built: what it must not do to a whole run, and the limits that
keep ``assembly.missing_spans_from_history`` off by default.

Histories are read by the real ``conventions.history.read_history`` from the message JSON a
producer records; the runs are built by the real timeline and judged by the real safety
evaluator under the assembly tests' refund policy (a refund needs an earlier lookup of its
order)."""

from __future__ import annotations

import json
from typing import Any

from tests.unit.assembly.assembly_support import (
    MS,
    NORMALIZE,
    TRACE,
    agent,
    ask,
    build,
    llm,
    only,
    safety,
    span,
    tool,
)
from toolwatch.app_reload import _kept_settings
from toolwatch.assembly.completed import CompletedTrace
from toolwatch.assembly.timeline import build_tool_traces
from toolwatch.config import Config
from toolwatch.conventions.history import INDEXED_ROLE_KEYS, UNREAD, read_history
from toolwatch.model import Category, SpanRecord, SpanRole
from toolwatch.replay_assembly import OfflineAssembler

MISSING = Category.MISSING_VERIFICATION_STEP


def paged_with_the_setting_off(spans: list[SpanRecord]) -> dict[str | None, list[Category]]:
    """Each run's safety findings with ``assembly.missing_spans_from_history: false``: the
    control, that the run is built right and the policy pages it."""
    trace = CompletedTrace(TRACE, tuple(spans), True, None, 0, 0)
    return {t.agent: safety(t) for t in build_tool_traces(trace, NORMALIZE, from_history=False)}


def turns(messages: list[dict[str, Any]]) -> int:
    """What a span whose ``gen_ai.input.messages`` holds ``messages`` says came before it."""
    return read_history({"gen_ai.input.messages": json.dumps(messages)}, None)[0]


def reading(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``SpanRecord`` fields ingest reads from such a span's history: the turns and the
    tool-call ids they issued."""
    count, ids = read_history({"gen_ai.input.messages": json.dumps(messages)}, None)
    return {"prior_turns": count, "prior_call_ids": ids}


def call(name: str, call_id: str, order: str) -> dict[str, Any]:
    return {"type": "tool_call", "id": call_id, "name": name, "arguments": {"order_id": order}}


def result(call_id: str, text: str) -> dict[str, Any]:
    return {"type": "tool_call_response", "id": call_id, "response": text}


SYSTEM = {"role": "system", "parts": [{"type": "text", "content": "You are a support agent."}]}
USER = {"role": "user", "parts": [{"type": "text", "content": "Refund my order A-1."}]}


# --- 1. A whole run whose history holds a model message no model call made -------------------


def _customer_then_refund(
    first: dict[str, Any], last: dict[str, Any], *, customer_call: str | None = "c0"
) -> list[SpanRecord]:
    """A run whose customer record is fetched (``get_customer``, its span carrying
    ``customer_call`` as call id) before any recorded model call, whose first recorded model
    call (its history ``first``) refunds A-1, never looked up, and whose last (``last``)
    answers: a true MISSING_VERIFICATION_STEP, whatever came before the fetch."""
    return [
        agent(1, None, "support", 0, 100),
        tool(3, 1, "get_customer", 2, 5, call_id=customer_call, arguments={"order_id": "A-1"}),
        llm(4, 1, 6, 15, ask("issue_refund", "c2", {"order_id": "A-1"}), **first),
        tool(5, 1, "issue_refund", 16, 20, call_id="c2", arguments={"order_id": "A-1"}),
        llm(6, 1, 21, 30, **last, output_text="Refunded."),
    ]


def test_with_the_setting_on_a_tool_call_the_app_inserts_and_runs_leaves_the_run_paged() -> None:
    """LangGraph's SQL-agent pattern (a graph node appends ``AIMessage(tool_calls=[...])``
    without calling the model, then a ToolNode runs it): here the app always fetches the
    customer first. The model then refunds without any lookup: a true
    MISSING_VERIFICATION_STEP. Every span of the run is here.

    Was (review): the first real model call's history shows one model turn (the inserted
    one) and no model span started before it, so with the setting on the whole run was
    judged ``missing_spans`` and the page silenced. Now: that history names the inserted
    call's id, ``c0``, and the run knows it (the ToolNode's span ran it): no span is
    lacking, the run is complete and paged."""
    inserted = {"role": "assistant", "parts": [call("get_customer", "c0", "A-1")]}
    customer = {"role": "tool", "parts": [result("c0", "customer 7")]}
    refund = {"role": "assistant", "parts": [call("issue_refund", "c2", "A-1")]}
    refunded = {"role": "tool", "parts": [result("c2", "ok")]}
    first = reading([SYSTEM, USER, inserted, customer])
    last = reading([SYSTEM, USER, inserted, customer, refund, refunded])
    assert (first, last) == (  # the history is read as designed
        {"prior_turns": 1, "prior_call_ids": ("c0",)},
        {"prior_turns": 2, "prior_call_ids": ("c2", "c0")},
    )
    spans = _customer_then_refund(first, last)
    assert paged_with_the_setting_off(spans) == {"support": [MISSING]}
    trace = only(spans)
    assert (trace.complete, trace.incomplete_reason) == (True, None)
    assert safety(trace) == [MISSING]


def test_with_the_setting_on_a_tool_call_the_app_inserts_and_no_span_runs_silences_the_run() -> (
    None
):
    """A known limit, why ``assembly.missing_spans_from_history`` is off by default (on in
    the gateway layout, docs/security.md): the inserted call's tool ran with no span that
    names its id (a tool the producer does not instrument, or a tool span without call id:
    the OpenAI Agents SDK's function spans), so ``c0`` is known nowhere and reads as a lost
    model call's. Judged ``missing_spans``, page silenced."""
    inserted = {"role": "assistant", "parts": [call("get_customer", "c0", "A-1")]}
    customer = {"role": "tool", "parts": [result("c0", "customer 7")]}
    first = reading([SYSTEM, USER, inserted, customer])
    last = {"prior_turns": 2, "prior_call_ids": ("c2", "c0")}
    spans = _customer_then_refund(first, last, customer_call=None)  # no call id
    assert paged_with_the_setting_off(spans) == {"support": [MISSING]}
    trace = only(spans)
    assert (trace.complete, trace.incomplete_reason) == (False, "missing_spans")
    assert safety(trace) == []


def test_with_the_setting_on_a_model_call_no_instrumentation_recorded_silences_the_run() -> None:
    """A run whose planner call goes through a client no instrumentation wraps (another
    provider's SDK): its answer is in the next call's history, no span of it exists anywhere.
    The model then refunds an order it never looked up. A known limit, as above: the plan is
    text, so the history names no tool-call id and the count alone decides: with the
    setting on, judged ``missing_spans``, page silenced, although no span was lost."""
    plan = {"role": "assistant", "parts": [{"type": "text", "content": "Plan: refund A-1."}]}
    nudge = {"role": "user", "parts": [{"type": "text", "content": "Refund my order A-1."}]}
    first = turns(
        [
            SYSTEM,
            nudge,
            plan,
            {"role": "developer", "parts": [{"type": "text", "content": "Execute the plan."}]},
        ]
    )
    assert first == 1
    spans = [
        agent(1, None, "support", 0, 100),
        llm(4, 1, 6, 15, ask("issue_refund", "c2", {"order_id": "A-1"}), prior_turns=first),
        tool(5, 1, "issue_refund", 16, 20, call_id="c2", arguments={"order_id": "A-1"}),
        llm(6, 1, 21, 30, prior_turns=first + 1, output_text="Refunded."),
    ]
    assert paged_with_the_setting_off(spans) == {"support": [MISSING]}
    trace = only(spans)
    assert (trace.complete, trace.incomplete_reason) == (False, "missing_spans")
    assert safety(trace) == []


def test_with_the_setting_on_an_unrecorded_model_call_whose_tools_ran_leaves_the_run_paged() -> (
    None
):
    """The planner call goes through an unwrapped client and asks for the customer's
    record; the tool runs under the agent's instrumentation (a span with its call id). The
    model then refunds an order it never looked up: a true MISSING_VERIFICATION_STEP.

    Was (review): the next call's history shows one model turn, the run holds no model span
    before it: judged ``missing_spans``, page silenced. Now: the history names the
    unrecorded call's request, ``c0``, and the run knows it from the tool's span: complete,
    paged."""
    planned = {"role": "assistant", "parts": [call("get_customer", "c0", "A-1")]}
    customer = {"role": "tool", "parts": [result("c0", "customer 7")]}
    first = reading([SYSTEM, USER, planned, customer])
    assert first == {"prior_turns": 1, "prior_call_ids": ("c0",)}
    refund = {"role": "assistant", "parts": [call("issue_refund", "c2", "A-1")]}
    last = reading([SYSTEM, USER, planned, customer, refund, result("c2", "ok")])
    spans = _customer_then_refund(first, last)  # the planner's model call: no span anywhere
    assert paged_with_the_setting_off(spans) == {"support": [MISSING]}
    trace = only(spans)
    assert (trace.complete, trace.incomplete_reason) == (True, None)
    assert safety(trace) == [MISSING]


def test_with_the_setting_on_a_run_resumed_in_a_new_trace_is_silenced() -> None:
    """A known limit: a run resumed in a new trace (a LangGraph checkpoint, a human's
    approval) carries its earlier turns in its history, their calls' ids known only to the
    first trace: judged ``missing_spans`` in the second, its page silenced."""
    lookup = {"role": "assistant", "parts": [call("lookup_order", "c1", "A-9")]}
    looked = {"role": "tool", "parts": [result("c1", "order A-9")]}
    resumed = reading([SYSTEM, USER, lookup, looked])
    spans = [
        agent(1, None, "support", 0, 100),
        llm(4, 1, 6, 15, ask("issue_refund", "c2", {"order_id": "A-1"}), **resumed),
        tool(5, 1, "issue_refund", 16, 20, call_id="c2", arguments={"order_id": "A-1"}),
        llm(6, 1, 21, 30, prior_turns=2, prior_call_ids=("c2", "c1"), output_text="Done."),
    ]
    assert paged_with_the_setting_off(spans) == {"support": [MISSING]}
    trace = only(spans)
    assert (trace.complete, trace.incomplete_reason) == (False, "missing_spans")
    assert safety(trace) == []


# --- 2. Model spans recorded on two clocks -------------------------------------------------


def _skewed(record: SpanRecord, ahead_ms: float) -> SpanRecord:
    record.start_ns += int(ahead_ms * MS)
    record.end_ns += int(ahead_ms * MS)
    return record


def test_model_spans_of_two_gateway_replicas_a_few_ms_apart_are_no_evidence() -> None:
    """The model spans are recorded by an LLM gateway (Envoy AI Gateway writes OpenInference
    ``llm.input_messages``), two replicas on two nodes, gateway-b's clock 4 ms ahead of
    gateway-a's; ``desk`` runs the agent and its tools. The run is whole: the lookup was of
    order A-1, the refund of A-2 (a true unbound refund). The tool host gap between one
    model call's end and the next one's start is ~5 ms in the captured fixtures
    (pydantic_ai__native_v5__refund, strands__native_latest__refund).

    Was (review): the first call's span, read on gateway-b's clock, ends after the second call
    (gateway-a) starts, so it is not counted; the run is judged ``missing_spans`` and the
    refund of an order never looked up is not paged (``missing`` compared end times across
    services). Now: a model span counts if it started before the call."""
    spans = [
        agent(1, None, "support", 0, 100, service="desk"),
        _skewed(
            llm(
                2,
                1,
                1,
                8,
                ask("lookup_order", "c1", {"order_id": "A-1"}),
                prior_turns=0,
                service="gateway-b",
            ),
            4,
        ),
        tool(
            3, 1, "lookup_order", 9, 10, call_id="c1", arguments={"order_id": "A-1"}, service="desk"
        ),
        llm(
            4,
            1,
            11,
            20,
            ask("issue_refund", "c2", {"order_id": "A-2"}),
            prior_turns=1,
            service="gateway-a",
        ),
        tool(
            5,
            1,
            "issue_refund",
            21,
            25,
            call_id="c2",
            arguments={"order_id": "A-2"},
            service="desk",
        ),
        _skewed(llm(6, 1, 26, 35, prior_turns=2, output_text="Refunded.", service="gateway-b"), 4),
    ]
    assert paged_with_the_setting_off(spans) == {"support": [MISSING]}
    trace = only(spans)
    assert [c.tool_name for c in trace.calls] == ["lookup_order", "issue_refund"]
    assert (trace.complete, trace.incomplete_reason) == (True, None)
    assert safety(trace) == [MISSING]


# --- 3. One run's evidence silences every other run of the trace ----------------------------


def test_a_whole_run_is_not_judged_missing_spans_for_another_runs_lost_span() -> None:
    """Two runs in one trace (OpenAI Agents' ``with trace("workflow")`` around two
    ``Runner.run`` calls; the teller/auditor shape of test_assembly_runs): the first lost its
    first model span (its history shows it), the second is whole and refunds an order it
    never looked up. The evidence is about the first run's spans (a history is a run's).

    Was (review): ``_judged`` was per trace, so the second, whole run was judged
    ``missing_spans`` too and its true MISSING_VERIFICATION_STEP silenced. Now: per run."""
    spans = [
        span(1, None, SpanRole.AGENT, 0, 200, name="Agent workflow", agent_name="Agent workflow"),
        span(2, 1, SpanRole.OTHER, 1, 199, name="Agent workflow"),
        agent(3, 2, "summarizer", 2, 60),
        # its first model call (ended at ~10) never came
        llm(7, 3, 21, 30, prior_turns=1, output_text="Summary."),
        agent(10, 2, "support", 61, 150),
        llm(11, 10, 62, 70, ask("issue_refund", "c2", {"order_id": "A-1"}), prior_turns=0),
        tool(12, 10, "issue_refund", 71, 80, call_id="c2", arguments={"order_id": "A-1"}),
        llm(13, 10, 81, 90, prior_turns=1, output_text="Refunded."),
    ]
    assert paged_with_the_setting_off(spans)["support"] == [MISSING]
    runs = {t.agent: t for t in build(spans)}
    assert set(runs) == {"summarizer", "support"}
    assert runs["summarizer"].incomplete_reason == "missing_spans"
    support = runs["support"]
    assert (support.complete, support.incomplete_reason) == (True, None)
    assert safety(support) == [MISSING]


# --- 4. OpenInference indexes with a gap ---------------------------------------------------


def test_openinference_roles_with_a_gap_are_unread_as_the_module_says() -> None:
    """history.py's docstring: ``-1`` for "a history that cannot be read whole (... a gap in
    the indexes)". Was (review): ``_indexed`` stopped at the first missing index and counted
    the prefix: when the gap hid the current user message, the model turns of an earlier
    turn of the conversation counted as this run's (here 1). Now: unread."""
    roles = ["system", "user", "assistant", "tool", "assistant", None, "user"]
    attrs: dict[str, Any] = {
        key: role for key, role in zip(INDEXED_ROLE_KEYS, roles, strict=False) if role
    }
    attrs["llm.output_messages.0.message.role"] = "assistant"
    assert read_history(attrs, None)[0] == UNREAD


# --- 7. The setting (holds up) -----------------------------------------------------------


def test_a_reload_names_the_setting_as_taking_a_restart() -> None:
    """Holds: ``assembly`` is restart-only as a whole; the reload's warning names the key."""

    running = Config.model_validate({})
    loaded = Config.model_validate({"assembly": {"missing_spans_from_history": True}})
    kept = {"assembly": running.assembly}
    assert _kept_settings(loaded, kept) == "assembly.missing_spans_from_history"


def test_replay_judges_with_the_setting() -> None:
    """Holds: ``replay``'s assembler takes the limits ``serve`` takes, the setting with them."""

    on = Config.model_validate({"assembly": {"missing_spans_from_history": True}})
    assert OfflineAssembler(on).limits.missing_spans_from_history is True
    default = OfflineAssembler(Config.model_validate({}))
    assert default.limits.missing_spans_from_history is False
