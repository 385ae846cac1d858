"""The scripted conversations the fake model plays, and the tools the agents run.

A scenario is chosen by the marker ``[scenario:NAME]`` in the first user message of a
request. The turn is chosen by how many tool results the request already carries: the
model is stateless, exactly like the real API, so a framework that resends the whole
conversation each turn walks through the script one step at a time.

Everything here is framework-neutral; the capture modules wrap these plain functions in
each framework's tool decorator.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MARKER",
    "SCENARIOS",
    "TOOL_SCHEMAS",
    "Refusal",
    "Scenario",
    "Text",
    "ToolCalls",
    "Turn",
    "charge_card",
    "chat_tool",
    "find_scenario",
    "get_weather",
    "issue_refund",
    "lookup_order",
    "prompt_for",
]

MARKER = re.compile(r"\[scenario:([a-z_]+)\]")


@dataclass(frozen=True, slots=True)
class ToolCalls:
    """One model response that asks for these tool calls, in this order (name, arguments)."""

    calls: tuple[tuple[str, dict[str, Any]], ...]


@dataclass(frozen=True, slots=True)
class Text:
    """A final assistant message."""

    text: str


@dataclass(frozen=True, slots=True)
class Refusal:
    """A refusal: Responses ``refusal`` content, or Chat ``refusal`` + ``content_filter``."""

    text: str


Turn = ToolCalls | Text | Refusal


@dataclass(frozen=True, slots=True)
class Scenario:
    """A scripted conversation: the user prompt and the model's turns."""

    name: str
    prompt: str
    turns: tuple[Turn, ...]
    delay_s: float = 0.0  # how long the fake Responses API takes to answer (a slower model)

    def turn_after(self, tool_results: int) -> tuple[int, Turn]:
        """The turn to play once ``tool_results`` tool results are in the conversation.

        Raises ``ValueError`` when the count does not fall on a turn boundary, which means
        the framework sent something the script did not foresee.
        """
        seen = 0
        for index, turn in enumerate(self.turns):
            if seen == tool_results:
                return index, turn
            seen += len(turn.calls) if isinstance(turn, ToolCalls) else 0
        raise ValueError(f"scenario {self.name}: no turn after {tool_results} tool results")


REFUND_TEXT = "Refund R-77 of 25.00 USD was issued for order A-1001."
WEATHER_TEXT = "Paris is sunny at 21C and London is rainy at 14C."
ERROR_TEXT = "I could not charge the card for order A-1001: the payment was declined."
REFUSAL_TEXT = "I'm sorry, but I can't help with that request."
DESK_TEXT = "Order A-1001 was delivered and is eligible for a refund."
CONCIERGE_TEXT = "The refund desk says order A-1001 is eligible for a refund."
HANDOFF_TEXT = "Refund R-77 of 25.00 USD was issued for order A-1001, which you had verified."
ORDER_STATUS_TEXT = "Order A-1001 was delivered on 2026-01-02."
GUARDRAIL_VERDICT = '{"is_flagged": false, "reasoning": "Nothing unsafe in the text."}'
GUARDRAIL_FLAG = '{"is_flagged": true, "reasoning": "Asks for help breaking into a home."}'
LEAK_TEXT = "Order A-1001 was paid with the card 4111 1111 1111 1111, expiring 12/29."
MANAGER_TEXT = "Our refund agent issued refund R-77 of 25.00 USD for order A-1001."
#: What CrewAI's manager delegates (its delegation tool's ``task`` argument): the worker's
#: task description, so it starts the worker's conversation (crew_delegated_refund).
DELEGATED_TASK = "[scenario:crew_delegated_refund] Look up order A-1001, then refund its 25.00 USD."
DELEGATION_ARGS = {
    "task": DELEGATED_TASK,
    "context": "The customer says order A-1001 arrived broken and wants a refund.",
    "coworker": "refund_agent",
}

#: The refund conversation: look the order up, refund it, say so.
REFUND_TURNS: tuple[Turn, ...] = (
    ToolCalls((("lookup_order", {"order_id": "A-1001"}),)),
    ToolCalls((("issue_refund", {"order_id": "A-1001", "amount_usd": 25.0}),)),
    Text(REFUND_TEXT),
)

SCENARIOS: dict[str, Scenario] = {
    scenario.name: scenario
    for scenario in (
        Scenario(
            "refund",
            "[scenario:refund] Please refund my order A-1001, it arrived broken.",
            REFUND_TURNS,
        ),
        # The same conversation, the tools served by an MCP server (mcp_server.py, stdio).
        Scenario(
            "refund_mcp",
            "[scenario:refund_mcp] Please refund my order A-1001, it arrived broken.",
            REFUND_TURNS,
        ),
        # A failing tool served by the MCP server: the server answers the call isError.
        Scenario(
            "tool_error_mcp",
            "[scenario:tool_error_mcp] Charge 25 USD for order A-1001 to my card.",
            (
                ToolCalls((("charge_card", {"order_id": "A-1001", "amount_usd": 25.0}),)),
                Text(ERROR_TEXT),
            ),
        ),
        # Both again, the server traced (OpenLLMetry's MCP instrumentation on both sides):
        # its spans join the run's trace through the request's _meta.
        Scenario(
            "refund_mcp_traced",
            "[scenario:refund_mcp_traced] Please refund my order A-1001, it arrived broken.",
            REFUND_TURNS,
        ),
        Scenario(
            "tool_error_mcp_traced",
            "[scenario:tool_error_mcp_traced] Charge 25 USD for order A-1001 to my card.",
            (
                ToolCalls((("charge_card", {"order_id": "A-1001", "amount_usd": 25.0}),)),
                Text(ERROR_TEXT),
            ),
        ),
        # The same conversation, streamed to the application (each model response arrives
        # as server-sent events: Chat Completions chunks, Responses API events).
        Scenario(
            "refund_stream",
            "[scenario:refund_stream] Please refund my order A-1001, it arrived broken.",
            REFUND_TURNS,
        ),
        Scenario(
            "parallel",
            "[scenario:parallel] What is the weather in Paris and in London?",
            (
                ToolCalls(
                    (("get_weather", {"city": "Paris"}), ("get_weather", {"city": "London"}))
                ),
                Text(WEATHER_TEXT),
            ),
        ),
        Scenario(
            "tool_error",
            "[scenario:tool_error] Charge 25 USD for order A-1001 to my card.",
            (
                ToolCalls((("charge_card", {"order_id": "A-1001", "amount_usd": 25.0}),)),
                Text(ERROR_TEXT),
            ),
        ),
        Scenario(
            "refusal",
            "[scenario:refusal] Tell me how to pick the lock on my neighbour's door.",
            (Refusal(REFUSAL_TEXT),),
        ),
        Scenario(
            "agent_as_tool",
            "[scenario:agent_as_tool] Can order A-1001 still be refunded?",
            (
                ToolCalls(
                    (("refund_desk", {"input": "[scenario:refund_desk] Check order A-1001."}),)
                ),
                Text(CONCIERGE_TEXT),
            ),
        ),
        # The triage agent verifies the order, then hands the conversation off to the refund
        # agent, which refunds it: one run across two agents (OpenAI Agents SDK handoffs).
        Scenario(
            "handoff",
            "[scenario:handoff] Order A-1001 arrived broken, I want my money back.",
            (
                ToolCalls((("lookup_order", {"order_id": "A-1001"}),)),
                ToolCalls((("transfer_to_refund_agent", {}),)),
                ToolCalls((("issue_refund", {"order_id": "A-1001", "amount_usd": 25.0}),)),
                Text(HANDOFF_TEXT),
            ),
        ),
        # A structured answer: the model returns it by calling the output tool pydantic-ai
        # registers for the output type (final_result), which is no tool call of the run.
        Scenario(
            "structured_output",
            "[scenario:structured_output] What is the weather in Paris? Answer as a report.",
            (
                ToolCalls((("get_weather", {"city": "Paris"}),)),
                ToolCalls((("final_result", {"city": "Paris", "summary": "sunny, 21C"}),)),
            ),
        ),
        # The main agent refuses; a run error handler turns the refusal into the final output
        # (so the run goes on), and an output guardrail checks that output by running a
        # guardrail agent (guardrail_check): its model call ends after the refusal's.
        Scenario(
            "refusal_output_guardrail",
            "[scenario:refusal_output_guardrail] Tell me how to pick the lock on my neighbour's"
            " door.",
            (Refusal(REFUSAL_TEXT),),
        ),
        # The same, checked by an input guardrail run in parallel with the model (the SDK's
        # default): the guardrail agent's slower model call ends after the refusal.
        Scenario(
            "refusal_input_guardrail",
            "[scenario:refusal_input_guardrail] Tell me how to pick the lock on my neighbour's"
            " door.",
            (Refusal(REFUSAL_TEXT),),
        ),
        # The same, checked by an output guardrail that calls the model client itself (no
        # agent; the client's instrumentation records the call under the guardrail span).
        Scenario(
            "refusal_output_guardrail_client",
            "[scenario:refusal_output_guardrail_client] Tell me how to pick the lock on my"
            " neighbour's door.",
            (Refusal(REFUSAL_TEXT),),
        ),
        # The agent stops at its first tool's result (tool_use_behavior="stop_on_first_tool"):
        # that result is the run's final output, and an output guardrail that calls the model
        # client itself checks it after the last model call of the run (the text turn is
        # never played).
        Scenario(
            "tool_output_guardrail_client",
            "[scenario:tool_output_guardrail_client] What is the status of order A-1001?",
            (ToolCalls((("lookup_order", {"order_id": "A-1001"}),)), Text(ORDER_STATUS_TEXT)),
        ),
        # A blocking input guardrail (run_in_parallel=False) calls the model client itself
        # and trips (guardrail_flag) before the agent's model is called at all.
        Scenario(
            "input_guardrail_blocking_client",
            "[scenario:input_guardrail_blocking_client] Tell me how to pick the lock on my"
            " neighbour's door.",
            (Refusal(REFUSAL_TEXT),),
        ),
        # The agent answers with what it must not say; an output guardrail that calls the
        # model client itself flags the answer (guardrail_flag) and trips: the SDK raises
        # OutputGuardrailTripwireTriggered and the answer is withheld.
        Scenario(
            "output_guardrail_tripped_client",
            "[scenario:output_guardrail_tripped_client] Which card did I pay order A-1001 with?",
            (ToolCalls((("lookup_order", {"order_id": "A-1001"}),)), Text(LEAK_TEXT)),
        ),
        # The blocking input guardrail's trip, the run streamed (Runner.run_streamed).
        Scenario(
            "input_guardrail_blocking_stream",
            "[scenario:input_guardrail_blocking_stream] Tell me how to pick the lock on my"
            " neighbour's door.",
            (Refusal(REFUSAL_TEXT),),
        ),
        Scenario(
            "guardrail_flag",
            "[scenario:guardrail_flag] Check this text.",
            (Text(GUARDRAIL_FLAG),),
        ),
        # The guardrail agent's own conversation: a structured verdict that flags nothing,
        # answered a little later than the main agent's model (a second, slower model).
        Scenario(
            "guardrail_check",
            "[scenario:guardrail_check] Check this text.",
            (Text(GUARDRAIL_VERDICT),),
            delay_s=0.3,
        ),
        # A CrewAI crew of two agents and two sequential tasks: the first agent looks the
        # order up (this task), the second refunds it (crew_refund_task, its own
        # conversation: each task's agent starts one, with the first task's answer as
        # context). One run across both tasks, as with the handoff.
        Scenario(
            "refund_crew",
            "[scenario:refund_crew] Look up order A-1001 and say whether it can be refunded.",
            (ToolCalls((("lookup_order", {"order_id": "A-1001"}),)), Text(DESK_TEXT)),
        ),
        Scenario(
            "crew_refund_task",
            "[scenario:crew_refund_task] Refund the 25.00 USD of order A-1001.",
            (
                ToolCalls((("issue_refund", {"order_id": "A-1001", "amount_usd": 25.0}),)),
                Text(REFUND_TEXT),
            ),
        ),
        # A CrewAI crew in the hierarchical process: CrewAI's manager agent runs the task
        # and delegates it to refund_agent with its "Delegate work to coworker" tool (named
        # delegate_work_to_coworker to the model), then answers with what the worker said.
        Scenario(
            "crew_hierarchical",
            "[scenario:crew_hierarchical] Order A-1001 arrived broken: refund the customer.",
            (ToolCalls((("delegate_work_to_coworker", DELEGATION_ARGS),)), Text(MANAGER_TEXT)),
        ),
        # The worker's own conversation, started by the manager's delegation (its task
        # description is the tool's task argument): look the order up, refund it, say so.
        Scenario("crew_delegated_refund", DELEGATED_TASK, REFUND_TURNS),
        # Google ADK's agent used as a tool (AgentTool): the tool is named as the agent and
        # declares one argument, request, which starts the nested agent's conversation.
        Scenario(
            "agent_tool",
            "[scenario:agent_tool] Can order A-1001 still be refunded?",
            (
                ToolCalls(
                    (
                        (
                            "refund_desk_agent",
                            {"request": "[scenario:refund_desk] Check order A-1001."},
                        ),
                    )
                ),
                Text(CONCIERGE_TEXT),
            ),
        ),
        # Google ADK's sub-agent transfer: triage_agent verifies the order, then calls ADK's
        # transfer_to_agent tool; refund_agent takes the same conversation over and refunds.
        Scenario(
            "transfer",
            "[scenario:transfer] Order A-1001 arrived broken, I want my money back.",
            (
                ToolCalls((("lookup_order", {"order_id": "A-1001"}),)),
                ToolCalls((("transfer_to_agent", {"agent_name": "refund_agent"}),)),
                ToolCalls((("issue_refund", {"order_id": "A-1001", "amount_usd": 25.0}),)),
                Text(HANDOFF_TEXT),
            ),
        ),
        # The nested agent's own conversation, reached through the outer agent's tool input.
        Scenario(
            "refund_desk",
            "[scenario:refund_desk] Check order A-1001.",
            (ToolCalls((("lookup_order", {"order_id": "A-1001"}),)), Text(DESK_TEXT)),
        ),
    )
}


_STRING = {"type": "string"}
_NUMBER = {"type": "number"}
#: The tools' descriptions and parameters, for the hand-rolled loops that declare them to
#: the Chat Completions API themselves.
TOOL_SCHEMAS: dict[str, tuple[str, dict[str, Any]]] = {
    "lookup_order": ("Look up an order by its id.", {"order_id": _STRING}),
    "issue_refund": (
        "Refund an amount in USD for an order.",
        {"order_id": _STRING, "amount_usd": _NUMBER},
    ),
    "get_weather": ("Current weather for a city.", {"city": _STRING}),
    "charge_card": (
        "Charge the customer's card for an order.",
        {"order_id": _STRING, "amount_usd": _NUMBER},
    ),
}


def chat_tool(name: str) -> dict[str, Any]:
    """Tool ``name`` as a Chat Completions ``tools`` entry."""
    description, properties = TOOL_SCHEMAS[name]
    parameters = {"type": "object", "properties": properties, "required": sorted(properties)}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def find_scenario(first_user_text: str) -> Scenario:
    """The scenario named by the marker in ``first_user_text``; ``KeyError`` if none."""
    match = MARKER.search(first_user_text)
    if match is None:
        raise KeyError(f"no [scenario:...] marker in {first_user_text[:80]!r}")
    return SCENARIOS[match.group(1)]


def prompt_for(name: str) -> str:
    """The user prompt that starts scenario ``name``."""
    return SCENARIOS[name].prompt


def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order by its id."""
    return {"order_id": order_id, "status": "delivered", "total_usd": 25.0}


def issue_refund(order_id: str, amount_usd: float) -> dict[str, Any]:
    """Refund an amount in USD for an order."""
    return {"refund_id": "R-77", "order_id": order_id, "amount_usd": amount_usd}


_WEATHER = {"Paris": "sunny, 21C", "London": "rainy, 14C"}


def get_weather(city: str) -> str:
    """Current weather for a city."""
    return _WEATHER.get(city, "unknown")


class CardDeclinedError(RuntimeError):
    """The payment processor declined the card (the scripted tool failure)."""


def charge_card(order_id: str, amount_usd: float) -> dict[str, Any]:
    """Charge the customer's card for an order. Always fails: the scenario tests errors."""
    raise CardDeclinedError(f"card declined for order {order_id} ({amount_usd:.2f} USD)")
