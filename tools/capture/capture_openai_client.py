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

SCENARIOS = ("refund", "parallel", "tool_error", "refusal")
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
    with tracer.start_as_current_span("support_agent"), client:
        for _ in range(MAX_TURNS):
            response = client.chat.completions.create(
                model="gpt-4o-mini", messages=messages, tools=tools
            )
            message = response.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                print(
                    f"  {scenario}: finish={response.choices[0].finish_reason} "
                    f"content={message.content!r} refusal={message.refusal!r}",
                    flush=True,
                )
                return
            messages.extend(_run_tool(call) for call in message.tool_calls)


def _run_tool(call: Any) -> dict[str, Any]:
    function: Callable[..., Any] = getattr(scripts, call.function.name)
    try:
        output = function(**json.loads(call.function.arguments))
    except scripts.CardDeclinedError as error:
        output = f"Error: {error}"
    content = output if isinstance(output, str) else json.dumps(output)
    return {"role": "tool", "tool_call_id": call.id, "content": content}


if __name__ == "__main__":
    main(
        "openai_client",
        {
            name: partial(instrument, name)
            for name in ("openinference", "openllmetry", "otel_contrib", "logfire")
        },
        SCENARIOS,
    )
