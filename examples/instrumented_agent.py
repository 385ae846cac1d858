"""One run of a hand-written refund agent, instrumented as toolwatch needs it.

The agent loop is the one a team writes without a framework: ask the model, run the tools it
asked for, hand it their results, until it answers. Its model is scripted here (no API key,
no network but the export), so the run is always the same: look order A-1001 up, refund it,
answer. Each step is one span of the OpenTelemetry GenAI semantic conventions; what toolwatch
reads from each, and what a missing one costs: docs/instrumenting.md.

    python examples/instrumented_agent.py                # a lookup, then the refund
    python examples/instrumented_agent.py --skip-lookup  # the refund alone: toolwatch pages
    python examples/instrumented_agent.py --no-content   # no arguments, results or messages
    python examples/instrumented_agent.py --case-id refund-verified-damaged-item
    python examples/instrumented_agent.py --conversation-id conv-7  # a turn of conv-7

Needs opentelemetry-sdk and opentelemetry-exporter-otlp-proto-grpc. Sends over OTLP/gRPC to
OTEL_EXPORTER_OTLP_ENDPOINT, http://127.0.0.1:4317 (``make serve``) when it is not set, and
prints the id of the trace it sent.
"""

from __future__ import annotations

import argparse
import json
import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, StatusCode, Tracer

SERVICE = "refund-agent"
AGENT = "refund-bot"
MODEL = "gpt-4o"
QUESTION = "Please refund order A-1001: it arrived broken."
DEFAULT_ENDPOINT = "http://127.0.0.1:4317"
MAX_TURNS = 10


@dataclass(frozen=True)
class ToolRequest:
    """A call the model asked for: the model's id for it, the tool and its arguments."""

    call_id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Reply:
    """One answer of the model: tools to call, or the final text."""

    tool_calls: tuple[ToolRequest, ...] = ()
    text: str | None = None

    @property
    def finish_reason(self) -> str:
        return "tool_call" if self.tool_calls else "stop"


Model = Callable[[list[dict[str, Any]]], Reply]


def scripted_model(skip_lookup: bool) -> Model:
    """Stands for the model's API: each call returns the next scripted reply."""
    replies = [
        Reply((ToolRequest("call_1", "lookup_order", {"order_id": "A-1001"}),)),
        Reply((ToolRequest("call_2", "issue_refund", {"order_id": "A-1001", "amount_usd": 25.0}),)),
        Reply(text="Order A-1001 is refunded: $25.00."),
    ]
    if skip_lookup:
        del replies[0]
    script = iter(replies)
    return lambda messages: next(script)


def lookup_order(order_id: str) -> dict[str, Any]:
    return {"order_id": order_id, "status": "delivered", "total_usd": 25.0}


def issue_refund(order_id: str, amount_usd: float) -> dict[str, Any]:
    return {"order_id": order_id, "refunded_usd": amount_usd}


TOOLS: dict[str, Callable[..., dict[str, Any]]] = {
    "lookup_order": lookup_order,
    "issue_refund": issue_refund,
}


@dataclass(frozen=True)
class Agent:
    """The agent loop, each step in a span. ``content``: record arguments, results and the
    model's output messages (the GenAI conventions' opt-in content)."""

    tracer: Tracer
    model: Model
    content: bool = True

    def run(self, question: str, conversation_id: str, case_id: str | None) -> tuple[str, str]:
        """One run: an ``invoke_agent`` span, the trace's root, around every model and tool
        span of it. Returns the trace's id (hex) and the final answer."""
        attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": AGENT,
            "gen_ai.conversation.id": conversation_id,
        }
        if case_id is not None:
            attributes["toolwatch.case_id"] = case_id  # a canary of this golden case
        # The ``with`` ends the span however the run ends, an exception included: an agent
        # span never ended is never exported, and the run loses its agent.
        with self.tracer.start_as_current_span(
            f"invoke_agent {AGENT}", kind=SpanKind.INTERNAL, attributes=attributes
        ) as span:
            trace_id = format(span.get_span_context().trace_id, "032x")
            messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
            for _ in range(MAX_TURNS):
                reply = self.ask_model(messages)
                if not reply.tool_calls:
                    return trace_id, reply.text or ""
                for request in reply.tool_calls:
                    result = self.call_tool(request)
                    messages.append({"role": "tool", "id": request.call_id, "content": result})
            return trace_id, "(no answer)"

    def ask_model(self, messages: list[dict[str, Any]]) -> Reply:
        """One model call: a ``chat`` span whose output holds each requested call, with its
        id, in the order the model asked."""
        with self.tracer.start_as_current_span(
            f"chat {MODEL}",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",  # the convention's; toolwatch reads none
                "gen_ai.request.model": MODEL,
            },
        ) as span:
            reply = self.model(messages)
            span.set_attribute("gen_ai.response.finish_reasons", [reply.finish_reason])
            if self.content:
                span.set_attribute("gen_ai.output.messages", json.dumps([output_message(reply)]))
        return reply

    def call_tool(self, request: ToolRequest) -> str:
        """One tool execution: an ``execute_tool`` span carrying the model's call id; a tool
        that raises ends it ERROR, and the model is told."""
        with self.tracer.start_as_current_span(
            f"execute_tool {request.name}",
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": request.name,
                "gen_ai.tool.call.id": request.call_id,
            },
        ) as span:
            if self.content:
                span.set_attribute("gen_ai.tool.call.arguments", json.dumps(request.arguments))
            try:
                result = json.dumps(TOOLS[request.name](**request.arguments))
            except Exception as error:  # the model is told, and may try again
                span.set_status(StatusCode.ERROR, str(error))
                span.set_attribute("error.type", type(error).__qualname__)
                return json.dumps({"error": str(error)})
            if self.content:
                span.set_attribute("gen_ai.tool.call.result", result)
            return result


def output_message(reply: Reply) -> dict[str, Any]:
    """``reply`` as one of ``gen_ai.output.messages``: its tool-call parts, then its text."""
    parts: list[dict[str, Any]] = [
        {"type": "tool_call", "id": c.call_id, "name": c.name, "arguments": c.arguments}
        for c in reply.tool_calls
    ]
    if reply.text is not None:
        parts.append({"type": "text", "content": reply.text})
    return {"role": "assistant", "parts": parts, "finish_reason": reply.finish_reason}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-lookup", action="store_true", help="refund without a lookup")
    parser.add_argument("--no-content", action="store_true", help="record no content")
    parser.add_argument("--case-id", help="the golden case this run is a canary of")
    parser.add_argument(
        "--conversation-id",
        help="the conversation this run is a turn of (default: a new one, this run's own)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", DEFAULT_ENDPOINT)
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    tracer = provider.get_tracer("refund-agent")
    agent = Agent(tracer, scripted_model(args.skip_lookup), content=not args.no_content)
    # One id per conversation, never a constant: with verification_scope: conversation, runs
    # that share an id verify each other's refunds.
    conversation_id = args.conversation_id or f"conv-{uuid.uuid4()}"
    try:
        trace_id, answer = agent.run(QUESTION, conversation_id, args.case_id)
    finally:
        provider.shutdown()  # exports the spans still batched before the process ends
    print(f"sent trace {trace_id} to {endpoint}: {answer}")


if __name__ == "__main__":
    main()
