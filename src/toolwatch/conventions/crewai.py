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

Delegation. In a hierarchical crew (and for any agent with ``allow_delegation``) an agent
runs a coworker through CrewAI's delegation tools, ``Delegate work to coworker`` and ``Ask
question to coworker`` (``delegate_work_to_coworker`` and ``ask_question_to_coworker`` to the
model): the tool calls the coworker's ``Agent.execute_task``, an agent used as a tool, whose
role its ``coworker`` argument names (CrewAI matches it with whitespace collapsed, quotes
removed, case folded). Neither instrumentation writes it as one: OpenInference, which
wraps ``Task._execute_core``, writes no span for the coworker at all (its tool spans sit
right under the delegation's ``<tool>.run``), and OpenLLMetry, which writes no tool spans,
hangs the coworker's ``<role>.agent`` right under the delegating agent's. So the delegation
names the agent (``coworker``), and ``same_role`` matches it to an agent span
(``assembly.delegations``).
"""

from __future__ import annotations

import re
from typing import Final

from toolwatch.conventions.attrs import AgentSpec, Attributes, Convention, ToolSpec, span_name_as_is
from toolwatch.conventions.frameworks import crew_answer
from toolwatch.model import SpanRole

__all__ = [
    "CONVENTION",
    "CREW_KEY",
    "CREW_NAME",
    "DELEGATION_TOOLS",
    "KEYS",
    "NAME",
    "classify_crew",
    "coworker",
    "role_key",
    "same_role",
]

CREW_KEY: Final = "crew_key"  # OpenInference: on the kickoff span and its task spans
CREW_NAME: Final = "crewai.crew.name"  # OpenLLMetry: on the crew's workflow span
_CREW_RESULT: Final = "crewai.crew.result"
_NODE_ID: Final = "graph.node.id"  # OpenInference: a task's agent, by its role
_KICKOFF: Final = ".kickoff"
_OPENINFERENCE_KIND: Final = "openinference.span.kind"
KEYS: Final = frozenset({CREW_KEY, CREW_NAME, _CREW_RESULT, _NODE_ID})
#: The crew's span name OpenInference writes for a crew left with CrewAI's default name
#: (``crew``): ``Crew_<the crew's id>``, a new uuid for every crew built.
_UNNAMED_CREW: Final = re.compile(
    r"Crew_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
)
_DEFAULT_NAME: Final = "crew"

NAME: Final = "crewai"  # ``SpanRecord.convention`` of CrewAI's spans; a crew's is never a workflow

#: CrewAI's delegation tools (``DelegateWorkTool``, ``AskQuestionTool``): their names as
#: their tool spans record them, and as the model is given them (``sanitize_tool_name``).
DELEGATION_TOOLS: Final = frozenset(
    {
        "Delegate work to coworker",
        "Ask question to coworker",
        "delegate_work_to_coworker",
        "ask_question_to_coworker",
    }
)
#: The argument naming the coworker; CrewAI also takes ``co_worker`` (``_get_coworker``).
_COWORKER_KEYS: Final = ("coworker", "co_worker")


def _crew_from_span(name: str) -> str | None:
    if not name.endswith(_KICKOFF):
        return None
    crew = name[: -len(_KICKOFF)]
    return _DEFAULT_NAME if _UNNAMED_CREW.fullmatch(crew) else crew or None


_NO_TOOL: Final = ToolSpec((), (), (), (), name_from_span=lambda name: None)
CONVENTION: Final = Convention(
    name=NAME,
    tool=_NO_TOOL,
    agent=AgentSpec(
        name=(CREW_NAME,),
        output=("output.value", _CREW_RESULT),
        name_from_span=_crew_from_span,
        unwrap_output=crew_answer,
    ),
)
#: OpenInference's span of a task's agent: named by its role, its output the TaskOutput.
_TASK_AGENT: Final = Convention(
    name=NAME,
    tool=_NO_TOOL,
    agent=AgentSpec(
        name=("agent.name", _NODE_ID),
        output=("output.value",),
        name_from_span=span_name_as_is,
        unwrap_output=crew_answer,
    ),
)


def classify_crew(name: str, attrs: Attributes) -> tuple[SpanRole, Convention] | None:
    """A crew's own span: OpenLLMetry's (``crewai.crew.name``), or OpenInference's kickoff
    (CHAIN, ``crew_key``): an agent run; OpenInference's span of a task's agent (AGENT,
    ``crew_key``): an agent named by its role. Any other span of a crew: not decided here."""
    if CREW_NAME in attrs:
        return SpanRole.AGENT, CONVENTION
    kind = attrs.get(_OPENINFERENCE_KIND)
    if not isinstance(kind, str):
        return None
    kind = kind.upper()
    if kind == "CHAIN" and name.endswith(_KICKOFF):
        return SpanRole.AGENT, CONVENTION
    if kind == "AGENT":
        return SpanRole.AGENT, _TASK_AGENT
    return None


def coworker(arguments: object) -> str | None:
    """The coworker a delegation's parsed ``arguments`` name, cleaned as CrewAI reads it
    (``BaseAgentTool.sanitize_agent_name``): double quotes removed, whitespace collapsed and
    trimmed, the case kept (``'"Refund   Agent"'`` is ``Refund Agent``); ``None`` when they
    name none."""
    if not isinstance(arguments, dict):
        return None
    for key in _COWORKER_KEYS:
        value = arguments.get(key)
        if isinstance(value, str):
            cleaned = " ".join(value.replace('"', "").split())
            if cleaned:
                return cleaned
    return None


def same_role(named: str, role: str) -> bool:
    """Whether a delegation naming ``named`` runs the agent of ``role``: compared as CrewAI
    does (``role_key``)."""
    return role_key(named) == role_key(role)


def role_key(name: str) -> str:
    """``name`` as CrewAI compares a coworker with an agent's role
    (``BaseAgentTool.sanitize_agent_name``: whitespace collapsed, double quotes removed, case
    folded). Linear in ``name``: callers matching many names compute each key once."""
    return " ".join(name.split()).replace('"', "").casefold()
