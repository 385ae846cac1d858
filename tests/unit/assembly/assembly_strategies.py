"""Hypothesis strategies for span trees of agent runs.

A tree is drawn span by span: each new span hangs under one drawn earlier, so the result is
always a tree rooted at span 1. Roles, names, call ids and times come from small pools so
that joins by id and by name, parallel overlaps, equal start times, nested agents,
wrappers and refusals all show up often.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from toolwatch.model import RequestedCall, SpanRecord, SpanRole

TOOL_NAMES = ("lookup_order", "Issue_Refund", "get_weather", "web_search")
CALL_IDS = ("call_1", "call_2", "call_3", None, None)
AGENT_NAMES = ("refund-bot", "billing-bot", None)
ROLES = (SpanRole.TOOL, SpanRole.TOOL, SpanRole.LLM, SpanRole.LLM, SpanRole.AGENT,
         SpanRole.WRAPPER, SpanRole.OTHER, SpanRole.GUARDRAIL)  # fmt: skip

json_values = st.sampled_from(["A-1001", "Paris", 3, 25.0, True, None, [1, 2], {"k": "v"}])


@st.composite
def raw_arguments(draw: st.DrawFn) -> Any:
    """Arguments as producers send them: decoded, JSON, double-encoded, broken, missing."""
    value = draw(
        st.dictionaries(st.sampled_from(["order_id", "city", "q"]), json_values, max_size=2)
    )
    shape = draw(st.sampled_from(["none", "decoded", "json", "double", "decorator", "broken"]))
    if shape == "none":
        return None
    if shape == "decoded":
        return value
    if shape == "json":
        return json.dumps(value)
    if shape == "double":
        return json.dumps(json.dumps(value))
    if shape == "decorator":
        return json.dumps({"args": [], "kwargs": value})
    return "{broken " + json.dumps(value)


@st.composite
def requested_calls(draw: st.DrawFn) -> tuple[RequestedCall, ...]:
    n = draw(st.integers(0, 3))
    return tuple(
        RequestedCall(
            name=draw(st.sampled_from(TOOL_NAMES)),
            call_id=draw(st.sampled_from(CALL_IDS)),
            arguments=draw(raw_arguments()),
            position=i,
        )
        for i in range(n)
    )


@st.composite
def role_fields(draw: st.DrawFn, role: SpanRole) -> dict[str, Any]:
    """The role-specific fields of one span."""
    if role is SpanRole.TOOL:
        return {
            "tool_name": draw(st.sampled_from(TOOL_NAMES)),
            "call_id": draw(st.sampled_from(CALL_IDS)),
            "arguments": draw(raw_arguments()),
            "result": draw(st.sampled_from([None, "ok", '{"status": "delivered"}', "84"])),
            "status_code": draw(st.sampled_from([0, 0, 1, 2])),
            "error_type": draw(st.sampled_from([None, None, "OrderNotFound"])),
            "agent_name": draw(st.sampled_from(AGENT_NAMES)),
        }
    if role is SpanRole.LLM:
        return {
            "output_tool_calls": draw(requested_calls()),
            "output_text": draw(st.sampled_from([None, "Done.", "Refunded."])),
            "finish_reasons": draw(st.sampled_from([(), ("stop",), ("content_filter",)])),
            "refusal": draw(st.sampled_from([None, None, "I can't"])),
            "model": draw(st.sampled_from([None, "gpt-4o", "claude"])),
        }
    if role is SpanRole.AGENT:
        return {
            "agent_name": draw(st.sampled_from(AGENT_NAMES)),
            "output_text": draw(st.sampled_from([None, "Final."])),
            "conversation_id": draw(st.sampled_from([None, "conv-1"])),
        }
    return {}


@st.composite
def span_trees(
    draw: st.DrawFn, trace_id: bytes = b"\x01" * 16, max_spans: int = 12
) -> tuple[SpanRecord, ...]:
    """One trace's spans: a tree rooted at span id 1 (an AGENT or OTHER span)."""
    n = draw(st.integers(1, max_spans))
    spans: list[SpanRecord] = []
    for i in range(n):
        parent = spans[draw(st.integers(0, i - 1))] if i else None
        role = draw(st.sampled_from(ROLES if i else (SpanRole.AGENT, SpanRole.OTHER)))
        start = (parent.start_ns if parent else 0) + draw(st.integers(0, 6))
        fields = draw(role_fields(role))
        spans.append(
            SpanRecord(
                trace_id=trace_id,
                span_id=(i + 1).to_bytes(8, "big"),
                parent_span_id=parent.span_id if parent else None,
                name=f"span {i + 1}",
                kind=1,
                start_ns=start,
                end_ns=start + draw(st.integers(0, 8)),
                status_code=fields.pop("status_code", 0),
                service=draw(st.sampled_from(["svc-a", "svc-b", None])),
                role=role,
                reference_keys=draw(
                    st.lists(
                        st.tuples(st.sampled_from(["case", "pair"]), st.sampled_from(["1", "2"])),
                        max_size=2,
                    ).map(tuple)
                ),
                size_bytes=draw(st.integers(1, 50)),
                **fields,
            )
        )
    return tuple(spans)


#: Agents that hand over to each other; written as the names their transfers give them.
TRANSFER_AGENTS = ("triage_agent", "refund_agent", "Billing Agent")
#: Gaps between one agent's end and the next one's start: at once, or past the 10 ms an
#: unnamed handoff waits for (``assembly.runs._UNNAMED_HANDOFF_GAP_NS``).
_GAPS_NS = (0, 0, 1, 20_000_000)


@st.composite
def transfer_fields(draw: st.DrawFn, role: SpanRole) -> dict[str, Any]:
    """A transfer as recognition reads it, on a TOOL span or a model span asking for it:
    Google ADK's ``transfer_to_agent`` (``handoff_to``: its ``agent_name`` argument, ``""``
    when not recorded), the OpenAI Agents SDK's ``transfer_to_<agent>``, or another
    producer's ``transfer_to_agent`` (no ``handoff_to``: the SDK's, to an agent "agent")."""
    target = draw(st.sampled_from(TRANSFER_AGENTS))
    kind = draw(st.sampled_from(["adk", "adk", "adk_unnamed", "sdk", "other"]))
    fields: dict[str, Any] = {}
    if kind == "adk":
        name, arguments, fields["handoff_to"] = "transfer_to_agent", {"agent_name": target}, target
    elif kind == "adk_unnamed":
        name, arguments, fields["handoff_to"] = "transfer_to_agent", None, ""
    elif kind == "sdk":
        name, arguments = "transfer_to_" + target.lower().replace(" ", "_"), {}
    else:
        name, arguments = "transfer_to_agent", None
    if role is SpanRole.LLM:
        fields["output_tool_calls"] = (RequestedCall(name, None, arguments, 0),)
        return fields
    fields["tool_name"] = name
    fields["arguments"] = json.dumps(arguments) if arguments is not None else None
    fields["call_id"] = draw(st.sampled_from(CALL_IDS))
    return fields


@st.composite
def transfer_trees(
    draw: st.DrawFn, trace_id: bytes = b"\x01" * 16, max_agents: int = 4
) -> tuple[SpanRecord, ...]:
    """One trace of sibling agents under a workflow span (id 1, as Google ADK's
    ``invoke_workflow``), one after the other, each with up to three spans below it: tool
    and model spans as ``span_trees`` draws them, and transfers (``transfer_fields``) as a
    tool span, a model span asking for one, or both."""
    spans: list[SpanRecord] = []
    end = 0

    def add(parent: int | None, role: SpanRole, start: int, stop: int, **fields: Any) -> int:
        n = len(spans) + 1
        spans.append(
            SpanRecord(
                trace_id=trace_id,
                span_id=n.to_bytes(8, "big"),
                parent_span_id=parent.to_bytes(8, "big") if parent is not None else None,
                name=f"span {n}",
                kind=1,
                start_ns=start,
                end_ns=stop,
                status_code=fields.pop("status_code", 0),
                service="svc-a",
                role=role,
                size_bytes=10,
                **fields,
            )
        )
        return n

    root = add(None, SpanRole.OTHER, 0, 0)
    for _ in range(draw(st.integers(1, max_agents))):
        start = end + draw(st.sampled_from(_GAPS_NS))
        end = start + draw(st.integers(1, 12))
        fields = {"agent_name": draw(st.sampled_from(TRANSFER_AGENTS))}
        agent = add(root, SpanRole.AGENT, start, end, **fields)
        for _ in range(draw(st.integers(0, 3))):
            role = draw(st.sampled_from([SpanRole.TOOL, SpanRole.LLM]))
            at = draw(st.integers(start, end))
            stop = draw(st.integers(at, end))
            if draw(st.booleans()):
                add(agent, role, at, stop, **draw(transfer_fields(role)))
            else:
                add(agent, role, at, stop, **draw(role_fields(role)))
    top = spans[0]
    spans[0] = SpanRecord(
        top.trace_id, top.span_id, None, top.name, 1, 0, end, 0, "svc-a", SpanRole.OTHER,
        size_bytes=10,
    )  # fmt: skip
    return tuple(spans)
