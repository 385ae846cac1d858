"""Agent runs written as the OpenTelemetry SDK would export them, in each convention.

A scenario is described once (agent, model turns, tool executions) and rendered by an
emitter per convention (OpenTelemetry GenAI, OpenInference, OpenLLMetry), so the same
expected ToolTrace can be asserted across conventions. Spans are real SDK spans; tests send
them with the SDK's real OTLP exporters.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

MS = 1_000_000
BASE_NS = 1_767_000_000_000_000_000


@dataclass(frozen=True)
class Call:
    """A tool call the model requests; ``executed`` False means no tool span (hosted tool)."""

    name: str
    arguments: dict[str, Any]
    call_id: str | None
    result: str = "ok"
    error: str | None = None
    executed: bool = True
    nested: AgentRun | None = None  # agent-as-tool: the tool runs this agent


@dataclass(frozen=True)
class Turn:
    """One model call; its requested calls run in parallel when ``parallel``."""

    calls: tuple[Call, ...] = ()
    text: str | None = None
    finish_reason: str = "stop"
    parallel: bool = False


@dataclass(frozen=True)
class AgentRun:
    agent: str
    turns: tuple[Turn, ...]
    model: str = "gpt-4o"
    attributes: dict[str, str] = field(default_factory=dict)


class Recorder:
    """A tracer whose spans are kept in memory, with explicit timestamps."""

    def __init__(self, service: str = "refund-agent") -> None:
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = provider.get_tracer("toolwatch-tests")
        self.now = BASE_NS

    def tick(self, ms: int = 10) -> int:
        self.now += ms * MS
        return self.now

    def start(
        self, name: str, attrs: dict[str, Any], kind: SpanKind, parent: trace.Span | None
    ) -> trace.Span:
        context = trace.set_span_in_context(parent) if parent is not None else None
        return self.tracer.start_span(
            name, context=context, kind=kind, attributes=attrs, start_time=self.tick()
        )

    def end(self, span: trace.Span, error: str | None = None) -> None:
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
            span.add_event("exception", {"exception.type": error, "exception.message": "boom"})
        span.end(end_time=self.tick())

    def spans(self) -> tuple[ReadableSpan, ...]:
        return tuple(self.exporter.get_finished_spans())


Emitter = Callable[[Recorder, AgentRun, trace.Span | None], None]


def _run(rec: Recorder, run: AgentRun, parent: trace.Span | None, style: _Style) -> None:
    agent = rec.start(*style.agent(run), parent=parent)
    for turn in run.turns:
        llm = rec.start(*style.llm(run, turn), parent=agent)
        rec.end(llm)
        executed = [c for c in turn.calls if c.executed]
        if turn.parallel:
            spans = [rec.start(*style.tool(run, c), parent=agent) for c in executed]
            for call, span in zip(executed, spans, strict=True):
                _finish_tool(rec, span, call, style)
        else:
            for call in executed:
                _finish_tool(rec, rec.start(*style.tool(run, call), parent=agent), call, style)
    rec.end(agent)


def _finish_tool(rec: Recorder, span: trace.Span, call: Call, style: _Style) -> None:
    if call.nested is not None:
        _run(rec, call.nested, span, style)
    rec.end(span, call.error)


class _Style:
    """Attribute shapes of one convention. Each method returns (name, attributes, kind)."""

    def agent(self, run: AgentRun) -> tuple[str, dict[str, Any], SpanKind]:
        raise NotImplementedError

    def llm(self, run: AgentRun, turn: Turn) -> tuple[str, dict[str, Any], SpanKind]:
        raise NotImplementedError

    def tool(self, run: AgentRun, call: Call) -> tuple[str, dict[str, Any], SpanKind]:
        raise NotImplementedError


class GenAI(_Style):
    """OpenTelemetry GenAI semantic conventions v1.38+ (content on span attributes)."""

    def agent(self, run: AgentRun) -> tuple[str, dict[str, Any], SpanKind]:
        attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": run.agent}
        return f"invoke_agent {run.agent}", attrs | run.attributes, SpanKind.INTERNAL

    def llm(self, run: AgentRun, turn: Turn) -> tuple[str, dict[str, Any], SpanKind]:
        parts: list[dict[str, Any]] = [
            {"type": "tool_call", "id": c.call_id, "name": c.name, "arguments": c.arguments}
            for c in turn.calls
        ]
        if turn.text is not None:
            parts.append({"type": "text", "content": turn.text})
        reason = "tool_call" if turn.calls else turn.finish_reason
        output = [{"role": "assistant", "parts": parts, "finish_reason": reason}]
        attrs = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": run.model,
            "gen_ai.provider.name": "openai",
            "gen_ai.response.finish_reasons": ["tool_calls" if turn.calls else reason],
            "gen_ai.input.messages": json.dumps(_input_messages(run, turn)),
            "gen_ai.output.messages": json.dumps(output),
        }
        return f"chat {run.model}", attrs | run.attributes, SpanKind.CLIENT

    def tool(self, run: AgentRun, call: Call) -> tuple[str, dict[str, Any], SpanKind]:
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.type": "function",
            "gen_ai.tool.call.arguments": json.dumps(call.arguments),
            "gen_ai.tool.call.result": call.result,
        }
        if call.call_id is not None:
            attrs["gen_ai.tool.call.id"] = call.call_id
        if call.error is not None:
            attrs["error.type"] = call.error
        return f"execute_tool {call.name}", attrs | run.attributes, SpanKind.INTERNAL


def _input_messages(run: AgentRun, turn: Turn) -> list[dict[str, Any]]:
    """What a model call of ``run`` is sent, as the GenAI instrumentations record it
    (``tests/fixtures/otlp/openai_client__otel_contrib__refund.json``): the user's request,
    then each earlier turn's output and its tools' responses."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "parts": [{"type": "text", "content": f"A request to {run.agent}."}]}
    ]
    for earlier in run.turns:
        if earlier is turn:
            break
        parts: list[dict[str, Any]] = [
            {"type": "tool_call", "id": c.call_id, "name": c.name, "arguments": c.arguments}
            for c in earlier.calls
        ]
        if earlier.text is not None:
            parts.append({"type": "text", "content": earlier.text})
        messages.append({"role": "assistant", "parts": parts})
        messages += [
            {
                "role": "tool",
                "parts": [{"type": "tool_call_response", "id": c.call_id, "response": c.result}],
            }
            for c in earlier.calls
        ]
    return messages


class OpenInference(_Style):
    """OpenInference: span kinds as attributes, flattened LLM output messages, tool args in
    ``input.value``, tool spans without a call id (as the OpenAI Agents exporter sends)."""

    def agent(self, run: AgentRun) -> tuple[str, dict[str, Any], SpanKind]:
        attrs = {"openinference.span.kind": "AGENT", "agent.name": run.agent}
        return run.agent, attrs | run.attributes, SpanKind.INTERNAL

    def llm(self, run: AgentRun, turn: Turn) -> tuple[str, dict[str, Any], SpanKind]:
        prefix = "llm.output_messages.0.message"
        attrs: dict[str, Any] = {
            "openinference.span.kind": "LLM",
            "llm.model_name": run.model,
            f"{prefix}.role": "assistant",
        }
        for j, c in enumerate(turn.calls):
            call = f"{prefix}.tool_calls.{j}.tool_call"
            attrs[f"{call}.function.name"] = c.name
            attrs[f"{call}.function.arguments"] = json.dumps(c.arguments)
            if c.call_id is not None:
                attrs[f"{call}.id"] = c.call_id
        if turn.text is not None:
            attrs[f"{prefix}.content"] = turn.text
        if turn.finish_reason == "content_filter":
            attrs["llm.finish_reason"] = "content_filter"
        return "response", attrs | run.attributes, SpanKind.INTERNAL

    def tool(self, run: AgentRun, call: Call) -> tuple[str, dict[str, Any], SpanKind]:
        attrs = {
            "openinference.span.kind": "TOOL",
            "tool.name": call.name,
            "input.value": json.dumps(call.arguments),
            "input.mime_type": "application/json",
            "output.value": call.result,
        }
        return call.name, attrs | run.attributes, SpanKind.INTERNAL


class OpenLLMetry(_Style):
    """OpenLLMetry/Traceloop: ``traceloop.span.kind``, decorator entity input, legacy
    flattened ``gen_ai.completion`` tool calls on the LLM span."""

    def agent(self, run: AgentRun) -> tuple[str, dict[str, Any], SpanKind]:
        attrs = {
            "traceloop.span.kind": "agent",
            "traceloop.entity.name": run.agent,
            "gen_ai.agent.name": run.agent,
        }
        return f"{run.agent}.agent", attrs | run.attributes, SpanKind.INTERNAL

    def llm(self, run: AgentRun, turn: Turn) -> tuple[str, dict[str, Any], SpanKind]:
        attrs: dict[str, Any] = {
            "llm.request.type": "chat",
            "gen_ai.system": "openai",
            "gen_ai.request.model": run.model,
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.finish_reason": "tool_calls" if turn.calls else turn.finish_reason,
        }
        for j, c in enumerate(turn.calls):
            attrs[f"gen_ai.completion.0.tool_calls.{j}.name"] = c.name
            attrs[f"gen_ai.completion.0.tool_calls.{j}.arguments"] = json.dumps(c.arguments)
            if c.call_id is not None:
                attrs[f"gen_ai.completion.0.tool_calls.{j}.id"] = c.call_id
        if turn.text is not None:
            attrs["gen_ai.completion.0.content"] = turn.text
        return "openai.chat", attrs | run.attributes, SpanKind.CLIENT

    def tool(self, run: AgentRun, call: Call) -> tuple[str, dict[str, Any], SpanKind]:
        attrs = {
            "traceloop.span.kind": "tool",
            "traceloop.entity.name": call.name,
            "traceloop.entity.input": json.dumps({"args": [], "kwargs": call.arguments}),
            "traceloop.entity.output": json.dumps(call.result),
        }
        return f"{call.name}.tool", attrs | run.attributes, SpanKind.INTERNAL


STYLES: dict[str, _Style] = {
    "genai": GenAI(),
    "openinference": OpenInference(),
    "openllmetry": OpenLLMetry(),
}


def record(
    run: AgentRun, style: str, service: str = "refund-agent", start_ns: int = BASE_NS
) -> tuple[ReadableSpan, ...]:
    """The finished SDK spans of ``run`` written in ``style``, the first starting just after
    ``start_ns``."""
    rec = Recorder(service)
    rec.now = start_ns
    _run(rec, run, None, STYLES[style])
    return rec.spans()


def behind_a_gateway(
    run: AgentRun, style: str
) -> tuple[tuple[ReadableSpan, ...], tuple[ReadableSpan, ...]]:
    """One trace of two services, each as its own SDK exports it: a gateway's spans (its
    server span, its client call to the agent service) and the agent service's spans of
    ``run`` below that call, whose parent is remote to them (propagated ``traceparent``)."""
    gateway = Recorder("gateway")
    method = {"http.request.method": "POST"}
    server = gateway.start("POST /support", method, SpanKind.SERVER, None)
    client = gateway.start("POST", method, SpanKind.CLIENT, server)
    called = client.get_span_context()
    caller = trace.NonRecordingSpan(
        trace.SpanContext(called.trace_id, called.span_id, True, called.trace_flags)
    )
    service = Recorder()
    service.now = gateway.now
    _run(service, run, caller, STYLES[style])
    gateway.now = service.now
    gateway.end(client)
    gateway.end(server)
    return gateway.spans(), service.spans()


# -- scenarios used across the integration tests ------------------------------------------

LOOKUP = Call("lookup_order", {"order_id": "A-1001"}, "call_1", result='{"status": "delivered"}')
REFUND = Call("issue_refund", {"order_id": "A-1001", "amount_usd": 25.0}, "call_2")


def refund_run(attributes: dict[str, str] | None = None) -> AgentRun:
    """lookup_order, then issue_refund, then an answer."""
    return AgentRun(
        "refund-bot",
        (Turn((LOOKUP,)), Turn((REFUND,)), Turn(text="Your refund of $25 is on its way.")),
        attributes=attributes or {},
    )


def unverified_refund_run(attributes: dict[str, str] | None = None) -> AgentRun:
    """issue_refund with no lookup first: a MISSING_VERIFICATION_STEP."""
    return AgentRun(
        "refund-bot",
        (Turn((REFUND,)), Turn(text="Refunded.")),
        attributes=attributes or {},
    )


def parallel_run() -> AgentRun:
    paris = Call("get_weather", {"city": "Paris"}, "call_p")
    london = Call("get_weather", {"city": "London"}, "call_l")
    return AgentRun(
        "weather-bot", (Turn((paris, london), parallel=True), Turn(text="Rain in both."))
    )


def nested_run() -> AgentRun:
    inner = AgentRun("billing-bot", (Turn((LOOKUP,)), Turn(text="Order delivered.")))
    ask = Call("ask_billing", {"question": "status of A-1001"}, "call_outer", nested=inner)
    return AgentRun("support-bot", (Turn((ask,)), Turn(text="It was delivered.")))


def failed_run() -> AgentRun:
    broken = Call("lookup_order", {"order_id": "A-404"}, "call_f", error="OrderNotFound")
    return AgentRun("refund-bot", (Turn((broken,)), Turn(text="I could not find that order.")))


def refusal_run() -> AgentRun:
    return AgentRun(
        "refund-bot", (Turn(text="I can't help with that.", finish_reason="content_filter"),)
    )


def llm_only_run() -> AgentRun:
    search = Call("web_search", {"query": "refund policy"}, "call_ws", executed=False)
    return AgentRun("refund-bot", (Turn((search,)), Turn(text="Refunds take 5 days.")))


def request(
    runs: Sequence[AgentRun], attributes: dict[str, str], style: str = "genai"
) -> tuple[ReadableSpan, ...]:
    """One HTTP request's trace: its server span, carrying ``attributes`` (a canary's case
    id), with ``runs`` below it one after the other (a title agent beside the one asked)."""
    rec = Recorder()
    root = rec.start(
        "POST /chat", {"http.request.method": "POST", **attributes}, SpanKind.SERVER, None
    )
    for run in runs:
        _run(rec, run, root, STYLES[style])
    rec.end(root)
    return rec.spans()


def http_request_spans(service: str = "checkout") -> tuple[ReadableSpan, ...]:
    """A trace that is no agent run: an HTTP request and its database query, as a
    Collector forwarding every trace sends it."""
    rec = Recorder(service)
    root = rec.start("GET /orders", {"http.request.method": "GET"}, SpanKind.SERVER, None)
    query = rec.start("SELECT orders", {"db.system": "postgresql"}, SpanKind.CLIENT, root)
    rec.end(query)
    rec.end(root)
    return rec.spans()


def spans_of(*runs: Sequence[ReadableSpan]) -> list[ReadableSpan]:
    return [span for run in runs for span in run]
