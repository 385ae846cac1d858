"""Decode cost per span, run by hand (not a test):

    .venv/bin/python tests/unit/ingest/time_decode.py

Builds a request of typical agent spans (tool, chat with a tool call, agent, plain HTTP;
10-20 attributes each) and prints microseconds per span for ``decode_request`` and for
``decode_protobuf`` (protobuf parse included): the best of 15 runs, in CPU time because the
machine may be shared.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from ingest_support import event, request, span

from toolwatch.ingest.decode_requests import decode_protobuf, decode_request
from toolwatch.ingest.decode_types import DecodeOptions

_COMMON = {
    "gen_ai.system": "openai",
    "gen_ai.agent.name": "support",
    "gen_ai.conversation.id": "conv-1234",
    "logfire.span_type": "span",
    "logfire.json_schema": '{"type":"object","properties":{"gen_ai.tool.call.arguments":{}}}',
    "code.filepath": "agent.py",
    "code.lineno": 42,
    "thread.id": 1,
    "case.id": "case-7",
}


def _tool(i: int) -> object:
    return span(
        "execute_tool lookup_order",
        {
            **_COMMON,
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "lookup_order",
            "gen_ai.tool.call.id": f"call_{i}",
            "gen_ai.tool.type": "function",
            "gen_ai.tool.call.arguments": json.dumps({"order_id": f"A{i}", "verbose": True}),
            "gen_ai.tool.call.result": json.dumps({"status": "shipped", "eta": "2 days"}),
            "logfire.msg": "running tool: lookup_order",
        },
    )


def _chat(i: int) -> object:
    output = [
        {
            "role": "assistant",
            "parts": [
                {
                    "type": "tool_call",
                    "id": f"call_{i}",
                    "name": "lookup_order",
                    "arguments": {"order_id": f"A{i}"},
                },
            ],
            "finish_reason": "tool_call",
        }
    ]
    return span(
        "chat gpt-4o",
        {
            **_COMMON,
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.response.model": "gpt-4o-2024-08-06",
            "gen_ai.response.id": "chatcmpl-123",
            "gen_ai.usage.input_tokens": 812,
            "gen_ai.usage.output_tokens": 25,
            "gen_ai.response.finish_reasons": ["tool_calls"],
            "gen_ai.output.messages": json.dumps(output),
        },
        kind=3,
    )


def _agent() -> object:
    return span(
        "invoke_agent support",
        {**_COMMON, "gen_ai.operation.name": "invoke_agent", "final_result": "Your order ships."},
        events=[event("gen_ai.user.message", {"content": "where is my order"})],
    )


def _http() -> object:
    return span(
        "GET /orders",
        {
            "http.request.method": "GET",
            "url.full": "https://orders.internal/orders/A1",
            "http.response.status_code": 200,
            "server.address": "orders.internal",
            "server.port": 443,
            "network.protocol.version": "1.1",
            "user_agent.original": "httpx/0.27",
            "url.scheme": "https",
            "http.route": "/orders/{id}",
            "case.id": "case-7",
        },
        kind=3,
    )


def main() -> None:
    spans = []
    for i in range(250):
        spans += [_tool(i), _chat(i), _agent(), _http()]
    req = request(*spans, resource={"service.name": "support-agent", "deployment.env": "prod"})
    body = req.SerializeToString()
    options = DecodeOptions(reference_keys=frozenset({"case.id"}))
    for label, run in (
        ("decode_request", lambda: decode_request(req, options)),
        ("decode_protobuf", lambda: decode_protobuf(body, options)),
    ):
        best = min(_seconds(run) for _ in range(15))  # the least disturbed run
        print(f"{label}: {best / len(spans) * 1e6:.2f} us/span")
    reference = min(_seconds(_reference_loop) for _ in range(15))
    print(f"reference loop (16-key dict filter): {reference * 1e3:.2f} us")


def _reference_loop() -> None:
    """A fixed pure-Python workload, to compare this machine's speed with another's."""
    keys = frozenset({"k1", "k5"})
    for _ in range(1000):
        {key: value for key, value in _REFERENCE.items() if key in keys}


_REFERENCE = {f"k{i}": i for i in range(16)}


def _seconds(run: Callable[[], object]) -> float:
    began = time.process_time()
    run()
    return time.process_time() - began


if __name__ == "__main__":
    main()
