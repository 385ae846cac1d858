"""Capture the ``google-genai`` client's automatic function calling under the OTel-contrib
``opentelemetry-instrumentation-google-genai``, against the fake Gemini API.

``python -m tools.capture.capture_google_genai INSTRUMENTATION [SCENARIO...]`` with
INSTRUMENTATION one of (each in a virtualenv of its own, ``tools/capture/README.md``), both
with ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`` and
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only`` (without them no content
reaches the spans):

* ``otel_contrib`` -- 1.3b0: chat spans carry ``gen_ai.output.messages``, tool spans
  ``gen_ai.tool.call.arguments`` as the JSON object of the call's arguments (util-genai);
* ``otel_contrib_v1_2`` -- 1.2b0, the last release that flattens each argument: its
  ``gen_ai.tool.call.arguments`` is a JSON object of ``code.function.parameters.<name>.type``
  and ``.value`` keys (what 0.4b0-1.0b0 set as span attributes of their own).

There is no agent framework: the client runs the model's function calls itself (AFC) inside
one ``generate_content`` call, under a plain application span (``support_agent``) that keeps
the scenario in one trace.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from typing import Any

from google import genai
from google.genai import types
from opentelemetry import trace

from tools.capture import scripts
from tools.capture.cli import CaptureRun, main
from tools.capture.fake_model import GEMINI_MODEL, FakeModelServer
from tools.capture.otlp import Capture

__all__ = ["SCENARIOS", "instrument"]

SCENARIOS = ("refund", "parallel", "tool_error", "refusal")
INSTRUCTIONS = "You are a helpful customer-support agent. Use the tools."
_TOOLS: tuple[Callable[..., Any], ...] = (
    scripts.lookup_order,
    scripts.issue_refund,
    scripts.get_weather,
    scripts.charge_card,
)


def instrument(name: str, capture: Capture) -> CaptureRun:
    """Instrument ``google-genai`` (``name`` says which release the virtualenv holds)."""
    os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "span_only"
    # Imported after the environment is set; which version runs is the virtualenv's choice.
    from opentelemetry.instrumentation.google_genai import (  # noqa: PLC0415
        GoogleGenAiSdkInstrumentor,
    )

    trace.set_tracer_provider(capture.provider)
    GoogleGenAiSdkInstrumentor().instrument(tracer_provider=capture.provider)
    return run_scenario


async def run_scenario(capture: Capture, server: FakeModelServer, scenario: str) -> None:
    """One ``generate_content`` call; the client runs the requested functions itself."""
    client = genai.Client(
        api_key="fake-key",
        http_options=types.HttpOptions(base_url=server.root_url, api_version="v1beta"),
    )
    config = types.GenerateContentConfig(system_instruction=INSTRUCTIONS, tools=list(_TOOLS))
    tracer = capture.provider.get_tracer("toolwatch.capture.app")
    with tracer.start_as_current_span("support_agent"):
        response = client.models.generate_content(
            model=GEMINI_MODEL, contents=scripts.prompt_for(scenario), config=config
        )
    candidate = response.candidates[0] if response.candidates else None
    finish = candidate.finish_reason if candidate is not None else None
    print(f"  {scenario}: finish={finish} text={response.text!r}", flush=True)


if __name__ == "__main__":
    main(
        "google_genai",
        {name: partial(instrument, name) for name in ("otel_contrib", "otel_contrib_v1_2")},
        SCENARIOS,
    )
