"""Guardrails AI (``guardrails-ai``): a guard around the application's own model call.

A Guardrails AI ``Guard`` calls the application's LLM callable itself and validates what it
answers, so the model call under its spans is the run's own step, its answer the run's, not
a check of the run (as a call under an OpenAI Agents SDK guardrail is). Only the validators
check. Observed with guardrails-ai 0.11.0 and 0.5.0 (``tools/capture/capture_guardrails.py``,
``docs/observed-conventions.md``):

- Guardrails' own tracing (0.5.1 and later) writes ``guard`` > ``step`` > ``call`` > the
  client's model span, each with ``guardrails.version`` and ``openinference.span.kind``
  ``GUARDRAIL``, and a ``<validator>.validate`` span per validator (GUARDRAIL, no
  ``guardrails.version``). A span with ``guardrails.version`` is a guard, a step or a call:
  a plain span here, so a model call below it is no guardrail's. A streaming guard's
  ``call`` has no ``guardrails.version`` (0.11.0 writes its attributes only for a call
  that is no stream), only the kind, and neither has its ``stream_guard_span``
  (``async_stream_span`` when async): the timeline reads a GUARDRAIL span of those names
  right below the guard's ``step`` as part of the guard (``assembly.timeline``).
- ``openinference-instrumentation-guardrails`` (guardrails-ai 0.4.5 to 0.5.0) writes
  ``Runner.step`` (GUARDRAIL) around Guardrails' own ``step`` > ``call`` spans, which carry
  no kind, and the validator spans carry none either: ``Runner.step`` is a plain span here,
  and a span with ``on_fail_descriptor`` (a validator's) is a guardrail.
"""

from __future__ import annotations

from typing import Final

from toolwatch.conventions.attrs import AgentSpec, Attributes, Convention, ToolSpec
from toolwatch.model import SpanRole

__all__ = [
    "CONVENTION",
    "KEYS",
    "NAME",
    "RUNNER_STEPS",
    "VALIDATOR",
    "VERSION",
    "classify_guard",
]

VERSION: Final = "guardrails.version"
VALIDATOR: Final = "on_fail_descriptor"
KEYS: Final = frozenset({VERSION, VALIDATOR})
#: The span openinference-instrumentation-guardrails names after the runner's class.
RUNNER_STEPS: Final = frozenset({"Runner.step", "StreamRunner.step"})

NAME: Final = "guardrails_ai"  # ``SpanRecord.convention`` of the spans recognized here
CONVENTION: Final = Convention(
    name=NAME,
    tool=ToolSpec((), (), (), (), name_from_span=lambda name: None),
    agent=AgentSpec((), (), name_from_span=lambda name: None),
)


def classify_guard(name: str, attrs: Attributes) -> tuple[SpanRole, Convention] | None:
    """A guard, step or call span of Guardrails' own tracing (``guardrails.version``):
    plain; a validator's span (``on_fail_descriptor``) of either tracing: a guardrail."""
    if VERSION in attrs:
        return SpanRole.OTHER, CONVENTION
    if VALIDATOR in attrs:
        return SpanRole.GUARDRAIL, CONVENTION
    return None
