"""CrewAI: a crew's kickoff is one run, the agents that work its tasks are inside it.

A crew runs its tasks in turn, each by its agent, each task handed the answers of those
before it: one request, one unit of work, as an OpenAI Agents SDK handoff chain is. A refund
the second task's agent issues is verified by the first task's lookup. The instrumentations
write the crew as a span above one agent span per task, which with no work of its own would
read as a workflow (``assembly.timeline``) and leave each task's agent a run of its own: the
lookup in one run, the refund unverified in the next. So the crew's span is the run, named
by the crew. Observed with crewai 1.15 (``tools/capture/capture_crewai.py``,
``docs/observed-conventions.md``):

- OpenInference (``openinference-instrumentation-crewai``): ``<crew>.kickoff`` (CHAIN, with
  ``crew_key``; ``output.value`` the ``CrewOutput`` JSON, its ``raw`` the last task's answer)
  above ``<role>.<task>._execute_core`` (AGENT, no ``agent.name``: ``graph.node.id`` is the
  role; ``output.value`` the ``TaskOutput`` JSON) above ``<tool>.run`` (TOOL). No model
  spans.
- OpenLLMetry (``opentelemetry-instrumentation-crewai``): ``crewai.workflow`` (``invoke_agent``,
  ``crewai.crew.name``, ``crewai.crew.result``) above ``<task>.task`` above ``<role>.agent``
  (``gen_ai.agent.name``); the model calls are the OpenAI instrumentation's, no tool spans.
"""

from __future__ import annotations

from typing import Final

from toolwatch.conventions.attrs import (
    AgentSpec,
    Attributes,
    Convention,
    ToolSpec,
    crew_answer,
)
from toolwatch.model import SpanRole

__all__ = ["CONVENTION", "CREW_KEY", "CREW_NAME", "KEYS", "NAME", "classify_crew"]

CREW_KEY: Final = "crew_key"  # OpenInference: on the kickoff span and its task spans
CREW_NAME: Final = "crewai.crew.name"  # OpenLLMetry: on the crew's workflow span
_CREW_RESULT: Final = "crewai.crew.result"
_KICKOFF: Final = ".kickoff"
_OPENINFERENCE_KIND: Final = "openinference.span.kind"
KEYS: Final = frozenset({CREW_KEY, CREW_NAME, _CREW_RESULT})

NAME: Final = "crewai"  # ``SpanRecord.convention`` of a crew's span: a run, never a workflow


def _crew_from_span(name: str) -> str | None:
    return name[: -len(_KICKOFF)] or None if name.endswith(_KICKOFF) else None


CONVENTION: Final = Convention(
    name=NAME,
    tool=ToolSpec((), (), (), (), name_from_span=lambda name: None),
    agent=AgentSpec(
        name=(CREW_NAME,),
        output=("output.value", _CREW_RESULT),
        name_from_span=_crew_from_span,
        unwrap_output=crew_answer,
    ),
)


def classify_crew(name: str, attrs: Attributes) -> tuple[SpanRole, Convention] | None:
    """A crew's own span: OpenLLMetry's (``crewai.crew.name``), or OpenInference's kickoff
    (CHAIN, ``crew_key``; its task spans carry ``crew_key`` too, and are agents of their own
    kind): an agent run."""
    if CREW_NAME in attrs:
        return SpanRole.AGENT, CONVENTION
    kind = attrs.get(_OPENINFERENCE_KIND)
    if isinstance(kind, str) and kind.upper() == "CHAIN" and name.endswith(_KICKOFF):
        return SpanRole.AGENT, CONVENTION
    return None
