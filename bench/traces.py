"""Realistic agent traces for the benchmark, pre-encoded as OTLP export requests.

A run is a refund-support agent answering one customer, as an OpenTelemetry GenAI (v1.37+,
content capture on) instrumentation records it: an ``invoke_agent`` root span; per step a
``chat`` span whose ``gen_ai.output.messages`` carries the model's ``tool_call`` parts
(sometimes two, run in parallel); one ``execute_tool`` span per call with JSON arguments and
result; a final ``chat`` span with the answer. Runs make 1 to 8 tool calls. A configurable
fraction of runs issues a refund without looking the order up first, so the policy
(``issue_refund`` needs an earlier ``lookup_order`` of the same order) raises a
``MISSING_VERIFICATION_STEP`` finding for them.

Requests are serialized once, as templates: ``RequestTemplate.render`` only splices fresh
trace ids into the bytes, so a client sends unique traces without any protobuf work.
A trace id encodes who sent it (``trace_id`` / ``parse_trace_id``) so findings can be
matched back to the request that carried the run.
"""

from __future__ import annotations

import json
import random
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span

__all__ = [
    "AGENT",
    "RequestTemplate",
    "build_templates",
    "parse_trace_id",
    "trace_id",
]

AGENT = "refund-bot"
_MODEL = "gpt-4o"
_KIND_INTERNAL, _KIND_CLIENT = 1, 3
_MAGIC = 0x7477  # "tw": the first two bytes of every benchmark trace id
_ID_FORMAT = ">HHQI"  # magic, client, request sequence, run index: 16 bytes
_OTHER_TOOLS = ("search_kb", "get_customer", "check_shipping", "send_email", "list_orders")


def trace_id(client: int, sequence: int, run: int) -> bytes:
    """The trace id of run ``run`` of request ``sequence`` sent by ``client``."""
    return struct.pack(_ID_FORMAT, _MAGIC, client, sequence, run)


def parse_trace_id(hex_id: str) -> tuple[int, int, int] | None:
    """``(client, sequence, run)`` of a benchmark trace id in hex, ``None`` for others."""
    try:
        magic, client, sequence, run = struct.unpack(_ID_FORMAT, bytes.fromhex(hex_id))
    except (ValueError, struct.error):
        return None
    return (client, sequence, run) if magic == _MAGIC else None


@dataclass(frozen=True, slots=True)
class RequestTemplate:
    """A serialized ``ExportTraceServiceRequest`` and where its trace ids are.

    ``slots`` holds ``(offset, run)`` for every trace-id occurrence in ``body``: the 16
    bytes at ``offset`` are run ``run``'s id. ``unverified`` lists the runs that must raise
    a missing-verification finding.
    """

    body: bytes
    slots: tuple[tuple[int, int], ...]
    spans: int
    runs: int
    unverified: tuple[int, ...]

    def render(self, trace_ids: Sequence[bytes]) -> bytes:
        """The request with run ``i``'s spans carrying ``trace_ids[i]`` (16 bytes each)."""
        out = bytearray(self.body)
        for offset, run in self.slots:
            out[offset : offset + 16] = trace_ids[run]
        return bytes(out)


# --- attributes ---------------------------------------------------------------------------


def _any(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, list):
        out = AnyValue()
        out.array_value.values.extend(_any(item) for item in value)
        return out
    return AnyValue(string_value=str(value))


def _attrs(values: dict[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=key, value=_any(value)) for key, value in values.items()]


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


# --- one run ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Call:
    tool: str
    arguments: dict[str, Any]
    result: dict[str, Any]
    failed: bool = False


def _other_call(rng: random.Random, customer: str) -> _Call:
    tool = rng.choice(_OTHER_TOOLS)
    by_tool: dict[str, dict[str, Any]] = {
        "search_kb": {"query": rng.choice(("refund policy", "late delivery", "damaged item"))},
        "get_customer": {"customer_id": customer},
        "check_shipping": {"tracking": f"1Z{rng.randrange(10**8):08d}"},
        "send_email": {"to": f"{customer}@example.com", "subject": "About your order"},
        "list_orders": {"customer_id": customer, "limit": 5},
    }
    arguments = by_tool[tool]
    return _Call(tool, arguments, {"ok": True, "items": rng.randrange(1, 6)})


def _plan(rng: random.Random, unverified: bool) -> list[_Call]:
    """The calls of one run: 1-8; a refund run issues ``issue_refund`` (after a matching
    ``lookup_order`` unless ``unverified``)."""
    customer = f"cust-{rng.randrange(10**6):06d}"
    order = f"A{rng.randrange(10**7):07d}"
    count = rng.randint(1, 8)
    calls = [_other_call(rng, customer) for _ in range(count)]
    refund = _Call(
        "issue_refund",
        {"order_id": order, "amount_usd": round(rng.uniform(5, 300), 2)},
        {"refund_id": f"rf-{rng.randrange(10**6)}", "status": "issued"},
    )
    lookup = _Call("lookup_order", {"order_id": order}, {"status": "delivered", "total": 120.5})
    if unverified:
        calls[-1] = refund
    elif count >= 2 and rng.random() < 0.5:
        calls[0], calls[-1] = lookup, refund
    if rng.random() < 0.03:
        failed = rng.randrange(len(calls))
        calls[failed] = _Call(calls[failed].tool, calls[failed].arguments, {}, failed=True)
    return calls


def _steps(rng: random.Random, calls: list[_Call]) -> list[list[_Call]]:
    """Calls grouped by the model turn that requested them (two at once now and then)."""
    steps: list[list[_Call]] = []
    i = 0
    while i < len(calls):
        width = 2 if i + 1 < len(calls) and rng.random() < 0.2 else 1
        steps.append(calls[i : i + width])
        i += width
    return steps


class _RunWriter:
    """Appends one run's spans to a scope, with a placeholder trace id."""

    def __init__(
        self, spans: Any, placeholder: bytes, start_ns: int, run: int, history: bool = False
    ) -> None:
        self._spans = spans
        self._trace_id = placeholder
        self._now = start_ns
        self._next_id = run << 16
        self._conversation = f"conv-{run:06d}"
        # What each model call is sent (gen_ai.input.messages): the user's message alone, or
        # with ``history``, then the run's turns so far, as the GenAI instrumentations record
        # it with content capture on (toolwatch reads it: conventions.history).
        self._history: list[dict[str, Any]] = [
            {"role": "user", "parts": [{"type": "text", "content": "Where is my refund?"}]}
        ]
        self._keeps_history = history

    def _span_id(self) -> bytes:
        self._next_id += 1
        return struct.pack(">Q", self._next_id | 1 << 63)

    def _add(
        self, name: str, kind: int, parent: bytes, start: int, end: int, **attrs: Any
    ) -> bytes:
        span_id = self._span_id()
        span = Span(
            trace_id=self._trace_id,
            span_id=span_id,
            parent_span_id=parent,
            name=name,
            kind=kind,  # type: ignore[arg-type]
            start_time_unix_nano=start,
            end_time_unix_nano=end,
        )
        span.attributes.extend(_attrs(attrs))
        self._spans.append(span)
        return span_id

    def run(self, rng: random.Random, calls: list[_Call]) -> None:
        agent_start = self._now
        agent_id = self._span_id()  # the root is appended last, as an SDK exports it
        steps = _steps(rng, calls)
        for step in steps:
            self._step(agent_id, step)
        answer = "I have taken care of your request."
        self._chat(agent_id, "stop", [{"type": "text", "content": answer}], ["stop"])
        self._root(agent_id, agent_start)

    def _chat(self, parent: bytes, finish: str, parts: list[Any], reasons: list[str]) -> None:
        start, self._now = self._now, self._now + 700_000_000
        messages = [{"role": "assistant", "parts": parts, "finish_reason": finish}]
        sent = _compact(self._history)
        if self._keeps_history:
            self._history.append({"role": "assistant", "parts": parts})
        self._add(
            f"chat {_MODEL}",
            _KIND_CLIENT,
            parent,
            start,
            self._now,
            **{
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": _MODEL,
                "gen_ai.response.model": "gpt-4o-2024-08-06",
                "gen_ai.response.id": f"chatcmpl-{_token(start)}",
                "gen_ai.usage.input_tokens": 812,
                "gen_ai.usage.output_tokens": 41,
                "gen_ai.response.finish_reasons": reasons,
                "gen_ai.conversation.id": self._conversation,
                "server.address": "api.openai.com",
                "server.port": 443,
                "gen_ai.input.messages": sent,
                "gen_ai.output.messages": _compact(messages),
            },
        )

    def _step(self, agent_id: bytes, step: list[_Call]) -> None:
        # Unique, as a model's call ids are (they never repeat across runs or requests).
        ids = [
            f"call_{_token(self._next_id * 8 + i)}{_token(self._now + i)}" for i in range(len(step))
        ]
        parts = [
            {"type": "tool_call", "id": cid, "name": c.tool, "arguments": c.arguments}
            for cid, c in zip(ids, step, strict=True)
        ]
        self._chat(agent_id, "tool_call", parts, ["tool_calls"])
        start = self._now
        for cid, call in zip(ids, step, strict=True):  # parallel calls overlap in time
            self._tool(agent_id, cid, call, start)
        if self._keeps_history:
            answers = [
                {"type": "tool_call_response", "id": cid, "response": {} if c.failed else c.result}
                for cid, c in zip(ids, step, strict=True)
            ]
            self._history.append({"role": "tool", "parts": answers})
        self._now = start + 150_000_000

    def _tool(self, parent: bytes, call_id: str, call: _Call, start: int) -> None:
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.tool,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function",
            "gen_ai.tool.description": f"The {call.tool} tool of the support backend.",
            "gen_ai.tool.call.arguments": _compact(call.arguments),
        }
        if call.failed:
            attrs["error.type"] = "TimeoutError"
        else:
            attrs["gen_ai.tool.call.result"] = _compact(call.result)
        self._add(
            f"execute_tool {call.tool}", _KIND_INTERNAL, parent, start, start + 120_000_000, **attrs
        )
        if call.failed:
            self._spans[-1].status.code = 2

    def _root(self, agent_id: bytes, start: int) -> None:
        span = Span(
            trace_id=self._trace_id,
            span_id=agent_id,
            name=f"invoke_agent {AGENT}",
            kind=_KIND_INTERNAL,  # type: ignore[arg-type]
            start_time_unix_nano=start,
            end_time_unix_nano=self._now,
        )
        span.attributes.extend(
            _attrs(
                {
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.provider.name": "openai",
                    "gen_ai.agent.name": AGENT,
                    "gen_ai.agent.id": "asst_5j66UpCpwteGg4YSxUnt7lPY",
                    "gen_ai.request.model": _MODEL,
                    "gen_ai.conversation.id": self._conversation,
                }
            )
        )
        self._spans.append(span)


def _token(seed: int) -> str:
    """A stable pseudo-random token (response ids differ between spans)."""
    return f"{(seed * 2654435761) % 2**40:010x}"


# --- requests -----------------------------------------------------------------------------

_RESOURCE = {
    "service.name": "support-agent",
    "service.version": "2.14.0",
    "service.instance.id": "support-agent-7d9f8b6c4-x2k8q",
    "deployment.environment.name": "production",
    "host.name": "ip-10-0-12-34",
    "process.pid": 7,
    "process.runtime.name": "cpython",
    "telemetry.sdk.name": "opentelemetry",
    "telemetry.sdk.language": "python",
    "telemetry.sdk.version": "1.38.0",
}


def _placeholder(rng: random.Random, run: int) -> bytes:
    return rng.randbytes(12) + struct.pack(">I", run)


def _template(
    rng: random.Random, runs: int, unverified: Sequence[bool], orphan: bool, history: bool
) -> RequestTemplate:
    request = ExportTraceServiceRequest()
    resource_spans: ResourceSpans = request.resource_spans.add()
    resource_spans.resource.attributes.extend(_attrs(_RESOURCE))
    scope = resource_spans.scope_spans.add()
    scope.scope.name = "opentelemetry.instrumentation.openai_agents"
    scope.scope.version = "0.1.0"
    placeholders = [_placeholder(rng, run) for run in range(runs)]
    start = time.time_ns()
    for run in range(runs):
        writer = _RunWriter(scope.spans, placeholders[run], start, run, history)
        writer.run(rng, _plan(rng, unverified[run]))
    if orphan:  # drop the roots: these runs never complete
        kept = [s for s in scope.spans if s.parent_span_id]
        del scope.spans[:]
        scope.spans.extend(kept)
    return _cut(request.SerializeToString(), placeholders, len(scope.spans), unverified)


def _cut(
    body: bytes, placeholders: Sequence[bytes], spans: int, unverified: Sequence[bool]
) -> RequestTemplate:
    slots = sorted(
        (offset, run)
        for run, marker in enumerate(placeholders)
        for offset in _occurrences(body, marker)
    )
    if len(slots) != spans:
        raise RuntimeError(f"found {len(slots)} trace ids in a request of {spans} spans")
    flagged = tuple(run for run, flag in enumerate(unverified) if flag)
    return RequestTemplate(body, tuple(slots), spans, len(placeholders), flagged)


def _occurrences(body: bytes, marker: bytes) -> list[int]:
    offsets, at = [], body.find(marker)
    while at >= 0:
        offsets.append(at)
        at = body.find(marker, at + 16)
    return offsets


def build_templates(
    count: int,
    runs_per_request: int,
    unverified_fraction: float,
    seed: int = 7,
    *,
    orphan: bool = False,
    history: bool = False,
) -> list[RequestTemplate]:
    """``count`` different requests of ``runs_per_request`` runs each, deterministic for a
    seed (every client process builds the same pool). ``orphan`` leaves every root out, so
    the runs never complete (memory measurement); ``history`` has each model call carry the
    run's turns before it in its input, not the user's message alone."""
    rng = random.Random(seed)
    templates = []
    for _ in range(count):
        flags = [rng.random() < unverified_fraction for _ in range(runs_per_request)]
        templates.append(_template(rng, runs_per_request, flags, orphan, history))
    return templates
