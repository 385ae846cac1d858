"""What the timeline tests share: a refund run's spans."""

from __future__ import annotations

import dataclasses
import json

from assembly_support import agent, ask, llm, tool

from toolwatch.model import SpanRecord


def refund_spans() -> list[SpanRecord]:
    lookup = '{"order_id": "A-1001"}'
    refund = {"order_id": "A-1001", "amount_usd": 25.0}
    root = agent(1, None, "refund-bot", 0, 100, conversation_id="conv-7")
    return [
        dataclasses.replace(root, reference_keys=(("case_id", "refund-1"),)),
        llm(2, 1, 1, 10, ask("lookup_order", "call_1", lookup), finish_reasons=("tool_calls",)),
        tool(3, 1, "lookup_order", 11, 20, call_id="call_1", arguments=lookup, result='"{}"'),
        llm(4, 1, 21, 30, ask("Issue_Refund", "call_2", refund)),
        dataclasses.replace(
            tool(5, 1, "Issue_Refund", 31, 40, call_id="call_2", arguments=json.dumps(refund)),
            result="ok",
            reference_keys=(("case_id", "other"), ("pair", "p-1")),
        ),
        llm(6, 1, 41, 50, output_text="Your refund of $25 is on its way."),
    ]


def nested_spans() -> list[SpanRecord]:
    question = {"question": "status of A-1001"}
    return [
        agent(1, None, "support-bot", 0, 100),
        llm(2, 1, 1, 5, ask("ask_billing", "call_outer", question)),
        tool(3, 1, "ask_billing", 6, 60, call_id="call_outer", arguments=question),
        agent(4, 3, "billing-bot", 7, 59),
        llm(5, 4, 8, 10, ask("lookup_order", "call_1", {"order_id": "A-1001"})),
        tool(6, 4, "lookup_order", 11, 20, call_id="call_1"),
        llm(7, 4, 21, 30, output_text="Order delivered."),
        llm(8, 1, 61, 70, output_text="It was delivered."),
    ]
