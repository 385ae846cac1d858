"""Google ADK's recognition rules must not fire on other producers' spans.

Each test sends a non-ADK trace (no ``gcp.vertex.agent.*`` attribute, no ADK scope) as
OTLP/JSON to a real server on port 0 and reads the ToolTrace it dumps.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from review_tests.otlp import send, span
from tests.integration.conftest import RunningServer

#: A structured answer (an OpenAI Agents SDK ``output_type``): a cited article. It has a
#: top-level ``author`` and, deeper down, an ``invocation_id``, but it is no ADK ``Event``
#: (no ``content``, ``actions``, ``id`` or ``timestamp`` at its top level).
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
    """``google_adk.event_answer`` takes any ``output.value`` that starts with ``{`` and
    holds the substrings ``"invocation_id"`` and ``"author"`` anywhere for an ADK Event, and
    returns its ``content`` text: ``None`` here. So the OpenInference openai-agents agent's
    structured answer (a JSON article with an author, citing an invocation id) is erased:
    final_text null, the run reads as if it gave no answer (main kept the JSON). It should
    stay the answer: an ADK Event is told by its top-level keys (``author``,
    ``invocation_id``, ``actions``…), not by substrings anywhere in the text."""
    server = start_server()
    send(
        server,
        [
            span(
                1,
                None,
                "Writer",
                0,
                100,
                openinference__span__kind="AGENT",
                agent__name="writer",
                output__value=_ARTICLE,
                output__mime_type="application/json",
            ),
            span(
                2,
                1,
                "lookup_order",
                10,
                20,
                openinference__span__kind="TOOL",
                tool__name="lookup_order",
                input__value='{"order_id": "A-1"}',
                output__value='{"status": "delivered"}',
            ),
        ],
        scope="openinference.instrumentation.openai_agents",
    )
    server.settle()

    (trace,) = server.tooltraces()
    assert trace["final_text"] == _ARTICLE


def _genai_agent(n: int, name: str, start_ms: float, end_ms: float) -> dict[str, object]:
    return span(
        n,
        1,
        f"invoke_agent {name}",
        start_ms,
        end_ms,
        gen_ai__operation__name="invoke_agent",
        gen_ai__agent__name=name,
    )


def _genai_tool(
    n: int, parent: int, name: str, start_ms: float, end_ms: float
) -> dict[str, object]:
    """A GenAI tool span with content capture off (the contrib instrumentations' default):
    no arguments, no result."""
    return span(
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
    """A GenAI-instrumented pipeline (no ADK attribute anywhere) runs intake_agent, which
    calls its own ``transfer_to_agent`` tool (escalate to a human agent), then
    billing_agent, a sibling started right after. Content capture is off, so the tool span
    has no arguments. ``transfer_target`` now reads any ``transfer_to_agent`` without
    arguments as ADK's transfer naming no one, an unnamed handoff that joins whichever
    sibling starts within 10 ms: the two agents' runs become one (intake's lookups would
    verify billing's refunds). Main read the tool name as the SDK's handoff to an agent
    named "agent" and kept the runs apart. The ADK reading should be kept to ADK's spans
    (``gen_ai.tool.type`` TransferToAgentTool, ``gcp.vertex.agent.event_id``)."""
    server = start_server()
    send(
        server,
        [
            span(1, None, "pipeline", 0, 200),
            _genai_agent(2, "intake_agent", 1, 60),
            _genai_tool(3, 2, "lookup_order", 10, 15),
            _genai_tool(4, 2, "transfer_to_agent", 20, 25),
            _genai_agent(5, "billing_agent", 60.5, 150),
            _genai_tool(6, 5, "issue_refund", 70, 80),
        ],
        scope="opentelemetry.instrumentation.genai",
    )
    server.settle()

    traces = sorted(server.tooltraces(), key=lambda t: t["start_ns"])
    assert [t["agents"] for t in traces] == [["intake_agent"], ["billing_agent"]]
