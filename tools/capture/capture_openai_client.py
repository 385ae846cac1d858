"""Capture an instrumented ``openai`` client driving a hand-rolled tool loop (no agent SDK).

``python -m tools.capture.capture_openai_client INSTRUMENTATION [SCENARIO...]`` with
INSTRUMENTATION one of:

* ``openinference`` -- ``openinference-instrumentation-openai`` (flattened
  ``llm.output_messages.*.tool_calls.*`` attributes);
* ``openllmetry`` -- Traceloop's ``opentelemetry-instrumentation-openai``;
* ``otel_contrib`` -- ``opentelemetry-instrumentation-openai-v2`` with
  ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`` and
  ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only`` (without them the content
  goes to log events, which a trace receiver never sees).

This is the "legacy" shape: the loop is the application's own code, so the only spans are
the instrumented chat calls under one plain application span (``support_agent``, no GenAI
attributes) that keeps the scenario in one trace. Tools run without spans; a tool failure
is only visible as the error text the loop sends back in the next request's tool message.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from functools import partial
from typing import Any

from openai import OpenAI
from opentelemetry import trace

from tools.capture import scripts
from tools.capture.cli import CaptureRun, main
from tools.capture.fake_model import FakeModelServer
from tools.capture.otlp import Capture, configure_logfire

__all__ = ["SCENARIOS", "instrument"]

SCENARIOS = ("refund", "refund_stream", "parallel", "tool_error", "refusal")
INSTRUCTIONS = "You are a helpful customer-support agent. Use the tools."
MAX_TURNS = 5


def instrument(name: str, capture: Capture) -> CaptureRun:
    """Instrument the ``openai`` package with ``name`` against the capture's provider.

    Imported here, not at the top: only the chosen instrumentor may patch ``openai``, and the
    contrib one is importable only from the overlay this process was started with.
    """
    if name == "logfire":
        _instrument_logfire(capture)
        return run_scenario
    trace.set_tracer_provider(capture.provider)
    instrumentor: Any
    if name == "openinference":
        from openinference.instrumentation import openai as openinference  # noqa: PLC0415

        instrumentor = openinference.OpenAIInstrumentor()
    elif name == "openllmetry":
        from opentelemetry.instrumentation import openai as openllmetry  # noqa: PLC0415

        instrumentor = openllmetry.OpenAIInstrumentor()
    else:
        os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "span_only"
        # Only in the overlay (requirements-otel-contrib.txt), invisible to a plain type check.
        from opentelemetry.instrumentation import openai_v2  # type: ignore[attr-defined]  # noqa: PLC0415

        instrumentor = openai_v2.OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=capture.provider)
    return run_scenario


def _instrument_logfire(capture: Capture) -> None:
    configure_logfire(capture, "capture-openai_client").instrument_openai()
    # The application span comes from Logfire's provider too, as in an app that uses it.
    capture.provider = trace.get_tracer_provider()  # type: ignore[assignment]


async def run_scenario(capture: Capture, server: FakeModelServer, scenario: str) -> None:
    """Run the loop: call the model, run requested tools, repeat until it stops asking."""
    client = OpenAI(base_url=server.base_url, api_key="sk-fake", max_retries=0, timeout=10)
    # Plain dicts, as hand-rolled loops send them; the client accepts them at run time.
    tools: list[Any] = [scripts.chat_tool(name) for name in scripts.TOOL_SCHEMAS]
    messages: list[Any] = [
        {"role": "system", "content": INSTRUCTIONS},
        {"role": "user", "content": scripts.prompt_for(scenario)},
    ]
    tracer = capture.provider.get_tracer("toolwatch.capture.app")
    ask = _streamed if scenario.endswith("_stream") else _answered
    with tracer.start_as_current_span("support_agent"), client:
        for _ in range(MAX_TURNS):
            message, finish_reason = ask(client, messages, tools)
            messages.append(message)
            if not message.get("tool_calls"):
                print(
                    f"  {scenario}: finish={finish_reason} content={message.get('content')!r}"
                    f" refusal={message.get('refusal')!r}",
                    flush=True,
                )
                return
            messages.extend(_run_tool(call) for call in message["tool_calls"])


def _answered(
    client: OpenAI, messages: list[Any], tools: list[Any]
) -> tuple[dict[str, Any], str | None]:
    """The model's message (as the loop sends it back) and finish reason."""
    response = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=tools)
    choice = response.choices[0]
    return choice.message.model_dump(exclude_none=True), choice.finish_reason


def _streamed(
    client: OpenAI, messages: list[Any], tools: list[Any]
) -> tuple[dict[str, Any], str | None]:
    """The same, streamed (``stream=True``), put together from its chunks as a loop that
    shows the answer while it is written does: text and refusal deltas joined, each tool
    call's id and name from its first chunk and its arguments from the fragments after."""
    stream = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=messages,
        tools=tools,
        stream=True,
        stream_options={"include_usage": True},
    )
    text: list[str] = []
    refusal: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish_reason = None
    for chunk in stream:
        for choice in chunk.choices:
            delta = choice.delta
            text.append(delta.content or "")
            refusal.append(delta.refusal or "")
            for part in delta.tool_calls or ():
                call = calls.setdefault(
                    part.index,
                    {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                )
                call["id"] = part.id or call["id"]
                if part.function is not None:
                    call["function"]["name"] += part.function.name or ""
                    call["function"]["arguments"] += part.function.arguments or ""
            finish_reason = choice.finish_reason or finish_reason
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if any(refusal):
        message["refusal"] = "".join(refusal)
    if calls:
        message["tool_calls"] = [calls[index] for index in sorted(calls)]
    return message, finish_reason


def _run_tool(call: dict[str, Any]) -> dict[str, Any]:
    function: Callable[..., Any] = getattr(scripts, call["function"]["name"])
    try:
        output = function(**json.loads(call["function"]["arguments"]))
    except scripts.CardDeclinedError as error:
        output = f"Error: {error}"
    content = output if isinstance(output, str) else json.dumps(output)
    return {"role": "tool", "tool_call_id": call["id"], "content": content}


if __name__ == "__main__":
    main(
        "openai_client",
        {
            name: partial(instrument, name)
            for name in ("openinference", "openllmetry", "otel_contrib", "logfire")
        },
        SCENARIOS,
    )
