"""Span builders, a recording metrics double, and the refund policy runs are judged by, for the
assembly tests."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from toolwatch.assembly.completed import CompletedTrace
from toolwatch.assembly.timeline import build_tool_traces
from toolwatch.conventions import handoff_fields
from toolwatch.conventions.history import read_history
from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.policy_settings import PolicySettings
from toolwatch.evaluation.safety import Safety
from toolwatch.evaluation.settings import SafetySettings
from toolwatch.metrics import NoopMetrics
from toolwatch.model import Category, RequestedCall, SpanRecord, SpanRole
from toolwatch.model_traces import ToolTrace
from toolwatch.names import NameNormalizer

MS = 1_000_000
SECOND = 1_000_000_000
TRACE = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")
OTHER_TRACE = bytes.fromhex("4bf92f3577b34da6a3ce929d0e0e4736")
NORMALIZE = NameNormalizer({"refund": "issue_refund"})
#: The policy the assembly tests judge runs by: a refund needs an earlier lookup of its order.
REFUND_POLICY_FIELDS: dict[str, Any] = {
    "dangerous_tools": ["issue_refund"],
    "verification_tools": ["lookup_order"],
    "bindings": {"issue_refund.order_id": "lookup_order.order_id"},
}
REFUND_POLICY = PolicySettings.model_validate(REFUND_POLICY_FIELDS)
#: ``REFUND_POLICY``, and one refund a run at most (a ``call_count`` invariant).
ONE_REFUND_POLICY = PolicySettings.model_validate(
    {
        **REFUND_POLICY_FIELDS,
        "invariants": [{"kind": "call_count", "tool": "issue_refund", "max": 1}],
    }
)


def safety(trace: ToolTrace, reference: Reference | None = None) -> list[Category]:
    """The categories ``safety`` finds in ``trace`` under ``REFUND_POLICY``."""
    found = Safety(SafetySettings(), REFUND_POLICY)(trace, reference or Reference()).findings
    return [f.category for f in found]


def sid(n: int) -> bytes:
    """Span id ``n`` as 8 bytes."""
    return n.to_bytes(8, "big")


def hexid(n: int) -> str:
    return sid(n).hex()


def span(
    n: int,
    parent: int | None,
    role: SpanRole,
    start_ms: int,
    end_ms: int,
    trace_id: bytes = TRACE,
    **fields: Any,
) -> SpanRecord:
    """A span with id ``n`` under span ``parent``; times in milliseconds."""
    fields.setdefault("name", role.name.lower())
    fields.setdefault("service", "refund-agent")
    return SpanRecord(
        trace_id=trace_id,
        span_id=sid(n),
        parent_span_id=sid(parent) if parent is not None else None,
        kind=1,
        start_ns=start_ms * MS,
        end_ns=end_ms * MS,
        status_code=fields.pop("status_code", 0),
        role=role,
        **fields,
    )


def agent(
    n: int, parent: int | None, name: str, start_ms: int, end_ms: int, **kw: Any
) -> SpanRecord:
    return span(n, parent, SpanRole.AGENT, start_ms, end_ms, agent_name=name, **kw)


_ERROR = 2  # OTLP Status.code ERROR


def tool(
    n: int, parent: int | None, name: str, start_ms: int, end_ms: int, **kw: Any
) -> SpanRecord:
    return span(n, parent, SpanRole.TOOL, start_ms, end_ms, tool_name=name, **kw)


def on_orders(
    n: int, order: str, start_ms: int, end_ms: int, *, failed: bool = False
) -> SpanRecord:
    """Span ``n``: a lookup of ``order`` by the tool host ``orders`` (another service than the
    model's), a child of the agent span 1, without call id, its arguments recorded (OpenAI
    Agents' tool spans); ``failed``: it timed out."""
    return tool(
        n,
        1,
        "lookup_order",
        start_ms,
        end_ms,
        service="orders",
        arguments=f'{{"order_id": "{order}"}}',
        status_code=_ERROR if failed else 0,
        error_type="Timeout" if failed else None,
    )


def handoff(
    n: int, parent: int | None, name: str, start_ms: int, end_ms: int, **attrs: Any
) -> SpanRecord:
    """A handoff span named ``name`` with ``attrs`` as recognition reads it (``tool_name``:
    the agent it names as handed to, ``""`` for none)."""
    fields = handoff_fields(name, attrs)
    return span(n, parent, SpanRole.OTHER, start_ms, end_ms, name=name, **fields)


def llm(
    n: int, parent: int | None, start_ms: int, end_ms: int, *calls: RequestedCall, **kw: Any
) -> SpanRecord:
    kw.setdefault("model", "gpt-4o")
    return span(n, parent, SpanRole.LLM, start_ms, end_ms, output_tool_calls=calls, **kw)


#: The finding the missing-spans tests are about.
MISSING = Category.MISSING_VERIFICATION_STEP
#: A user's message in a GenAI history (``genai_history``).
USER = {"role": "user", "parts": [{"type": "text", "content": "Refund my order A-1."}]}


def genai_history(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The SpanRecord fields ingest reads from a ``gen_ai.input.messages`` history
    (``llm(..., **genai_history(messages))``)."""
    turns, ids = read_history({"gen_ai.input.messages": json.dumps(messages)}, None)
    return {"prior_turns": turns, "prior_call_ids": ids}


def answer_part(call_id: str) -> dict[str, Any]:
    """A GenAI history's part carrying a tool's answer to ``call_id``."""
    return {"type": "tool_call_response", "id": call_id, "response": "ok"}


def ask(
    name: str, call_id: str | None, arguments: Any, index: int = 0, *, hosted: bool = False
) -> RequestedCall:
    return RequestedCall(name, call_id, arguments, index, hosted)


class RecordingMetrics(NoopMetrics):
    """Keeps what the buffer reports, for the conservation law."""

    def __init__(self) -> None:
        self.dropped: Counter[str] = Counter()
        self.evicted: Counter[str] = Counter()
        self.built = 0
        self.remembered_evicted = 0

    def spans_dropped(self, n: int, reason: str) -> None:
        self.dropped[reason] += n

    def spans_built(self, n: int) -> None:
        self.built += n

    def trace_evicted(self, reason: str) -> None:
        self.evicted[reason] += 1

    def remembered_traces_evicted(self, n: int) -> None:
        self.remembered_evicted += n


def build(
    spans: Sequence[SpanRecord], complete: bool = True, reason: str | None = None
) -> list[ToolTrace]:
    """The ToolTraces of ``spans`` as one completed trace, input histories read for spans
    that never came (``assembly.missing_spans_from_history``, as the gateway sets it)."""
    trace = CompletedTrace(TRACE, tuple(spans), complete, reason, 0, 0)
    return build_tool_traces(trace, NORMALIZE, from_history=True)


def only(spans: Sequence[SpanRecord]) -> ToolTrace:
    """The one ToolTrace of ``spans``."""
    (trace,) = build(spans)
    return trace
