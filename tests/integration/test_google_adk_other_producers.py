"""Google ADK's readings (``conventions.google_adk``) do not fire on other producers' spans.

Each test posts a trace no ADK tracer wrote (no ``gcp.vertex.agent.*`` attribute, no
``TransferToAgentTool``), hand-written as OTLP/JSON, to a real server on port 0 and reads the
ToolTraces it dumps.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.integration.conftest import RunningServer
from tests.integration.ingest_support import post_json

_TRACE = "5b8efff798038103d269b633813fc60c"
_T0 = 1_796_000_000_000_000_000
_MS = 1_000_000


def _value(v: Any) -> dict[str, Any]:
    if isinstance(v, int):
        return {"intValue": str(v)}
    return {"stringValue": v if isinstance(v, str) else json.dumps(v)}


def _span(
    n: int, parent: int | None, name: str, start_ms: float, end_ms: float, **attrs: Any
) -> dict[str, Any]:
    """Span ``n`` under span ``parent``; attribute keys with ``__`` written as ``.``."""
    out: dict[str, Any] = {
        "traceId": _TRACE,
        "spanId": f"{n:016x}",
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(_T0 + int(start_ms * _MS)),
        "endTimeUnixNano": str(_T0 + int(end_ms * _MS)),
        "attributes": [{"key": k.replace("__", "."), "value": _value(v)} for k, v in attrs.items()],
    }
    if parent is not None:
        out["parentSpanId"] = f"{parent:016x}"
    return out


def _send(server: RunningServer, spans: list[dict[str, Any]], scope: str) -> None:
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "app"}}]}
    request = {
        "resourceSpans": [
            {"resource": resource, "scopeSpans": [{"scope": {"name": scope}, "spans": spans}]}
        ]
    }
    status, answer = post_json(server, json.dumps(request).encode())
    assert status == 200, answer
    assert int(answer.get("partialSuccess", {}).get("rejectedSpans", 0)) == 0, answer


#: A structured answer (an OpenAI Agents SDK ``output_type``): a cited article. It has a
#: top-level ``author`` and, deeper down, an ``invocation_id``, but it is no ADK ``Event``
#: (no ``actions``, ``id`` or ``timestamp`` at its top level).
_ARTICLE = json.dumps(
    {
        "title": "Refund policy for damaged goods",
        "author": "support-team",
        "summary": "Damaged orders are refunded in full after a lookup.",
        "sources": [{"tool": "lookup_order", "invocation_id": "inv-7"}],
    }
)


def test_an_openinference_agents_json_answer_that_is_no_adk_event_is_kept(
    start_server: Callable[..., RunningServer],
) -> None:
    """An OpenInference openai-agents agent answers with a JSON article that has an author
    and cites an invocation id: it stays the run's answer.
    Was: any ``output.value`` starting with ``{`` and holding ``"invocation_id"`` and
    ``"author"`` anywhere was read as an ADK Event and its (absent) content text taken:
    final_text null, as if the run gave no answer. Now: an Event is told by its top-level
    keys (``invocation_id``, ``author``, ``actions``, ``id``, ``timestamp``)."""
    server = start_server()
    agent = _span(
        1,
        None,
        "Writer",
        0,
        100,
        openinference__span__kind="AGENT",
        agent__name="writer",
        output__value=_ARTICLE,
        output__mime_type="application/json",
    )
    lookup = _span(
        2,
        1,
        "lookup_order",
        10,
        20,
        openinference__span__kind="TOOL",
        tool__name="lookup_order",
        input__value='{"order_id": "A-1"}',
        output__value='{"status": "delivered"}',
    )
    _send(server, [agent, lookup], scope="openinference.instrumentation.openai_agents")
    server.settle()

    (trace,) = server.tooltraces()
    assert trace["final_text"] == _ARTICLE


def _genai_agent(n: int, name: str, start_ms: float, end_ms: float) -> dict[str, Any]:
    return _span(
        n,
        1,
        f"invoke_agent {name}",
        start_ms,
        end_ms,
        gen_ai__operation__name="invoke_agent",
        gen_ai__agent__name=name,
    )


def _genai_tool(n: int, parent: int, name: str, start_ms: float, end_ms: float) -> dict[str, Any]:
    """A GenAI tool span with content capture off (the contrib instrumentations' default):
    no arguments, no result."""
    return _span(
        n,
        parent,
        f"execute_tool {name}",
        start_ms,
        end_ms,
        gen_ai__operation__name="execute_tool",
        gen_ai__tool__name=name,
        gen_ai__tool__call__id=f"call_{n}",
    )


def test_another_producers_transfer_to_agent_without_arguments_joins_no_sibling(
    start_server: Callable[..., RunningServer],
) -> None:
    """A GenAI-instrumented pipeline runs intake_agent, which calls its own
    ``transfer_to_agent`` tool (content capture off: no arguments), then billing_agent, a
    sibling started right after. Two runs: intake's lookups must not verify billing's
    refunds, and the tool is no handoff.
    Was: any ``transfer_to_agent`` without arguments was read as ADK's transfer naming no
    one, which joins the sibling started within 10 ms: one run of both agents (and the call
    was marked ``handoff``). Now: ADK's reading is decided at recognition on ADK's spans
    (``gen_ai.tool.type`` ``TransferToAgentTool``, its event id) and carried on the record;
    this one is the OpenAI Agents SDK's tool for an agent named "agent", as on main."""
    server = start_server()
    spans = [
        _span(1, None, "pipeline", 0, 200),
        _genai_agent(2, "intake_agent", 1, 60),
        _genai_tool(3, 2, "lookup_order", 10, 15),
        _genai_tool(4, 2, "transfer_to_agent", 20, 25),
        _genai_agent(5, "billing_agent", 60.5, 150),
        _genai_tool(6, 5, "issue_refund", 70, 80),
    ]
    _send(server, spans, scope="opentelemetry.instrumentation.genai")
    server.settle()

    traces = sorted(server.tooltraces(), key=lambda t: t["start_ns"])
    assert [t["agents"] for t in traces] == [["intake_agent"], ["billing_agent"]]
    assert [(c["tool_name"], c["handoff"]) for c in traces[0]["calls"]] == [
        ("lookup_order", False),
        ("transfer_to_agent", False),
    ]
