"""The records assembly builds from a trace's spans and the evaluators stand on: a
``ToolTrace`` (one agent run) of ``ToolCall``s, and ``Verified`` (what a verification call
of an earlier run verified, for the conversation scope).

Part of the project's records with ``toolwatch.model`` (the clocks, the enums and the span
records ingest builds, which these are built from) and ``model_evaluation`` (what a run is
judged against and what the judging gives). Ids are lower-case hex strings here, times
integer nanoseconds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toolwatch.model import CallStatus

__all__ = ["ToolCall", "ToolTrace", "Verified"]


@dataclass(frozen=True, slots=True)
class Verified:
    """What a successful verification call of an earlier run verified (the conversation
    scope, ``references.conversations``): its normalized tool, the values of its bound fields
    (as ``evaluation.entities.entity_key`` compares them; ``None``: arguments not recorded, so
    any value) and when it ended (span clock, ns)."""

    tool: str
    values: tuple[tuple[str, str | None], ...]
    at_ns: int


@dataclass(slots=True, init=False)
class ToolCall:
    """One tool call of an agent run. Built once by the timeline; never mutated.

    ``arguments`` is the parsed JSON value (usually an object). When the raw text could not be
    parsed it is kept as the raw string and ``arguments_error`` says why; ``None`` means the
    producer recorded no arguments. ``span_id`` is ``None`` for a call seen only in an LLM's
    output: a hosted tool (``hosted``: the convention says the provider ran it), a producer
    that emits no tool spans, or a call that was requested and never run.

    ``handoff``: the call handed the conversation to another agent (OpenAI Agents SDK
    ``transfer_to_<agent>``): a handoff span is its execution (``span_id``), or, where the
    instrumentation records the model's request in no structured field (the contrib
    openai-agents instrumentation), the call itself, named ``transfer_to_<agent>`` as the
    SDK names it, so every instrumentation shows the call. Google ADK's ``transfer_to_agent``
    (the agent in its ``agent_name`` argument) is a tool ADK runs: its tool span is the call,
    status included.

    ``rerun``: the call ran again, under its call id (or, a span without one or arguments,
    by tool name: ``assembly.by_name``), the request an earlier call of the run ran
    (``assembly.calls``: a framework's or an SDK's retry, a wrapper's span beside the
    tool's); it holds that request's arguments and call id. An attempt of one request, not
    the model asking again: ``loops`` counts no repeat or retry of the agent in it, and the
    checks of calls one by one give the request one finding (``evaluation.attempts``).

    ``service``: the ``service.name`` of the process that wrote the call's tool span, else, for
    a call never run (no span), of the model call that asked for it; ``None`` where that span
    names none, and in dumps written before calls carried it. It is the call's producer, whose
    instrumentation decides whether arguments are recorded (``evaluation.entities.producer``),
    which the agent's name is not: two services' agents may share one (Strands' default
    ``Strands Agents``), and a nested run that writes no agent span of its own is its
    caller's agent.

    Like ``SpanRecord``, its constructor is written out and it is not ``frozen``: compiled,
    it executes a twentieth of the instructions of the frozen dataclass's constructor, which
    stays interpreted and sets each field through ``object.__setattr__`` (23,000 of them per
    call, a fifth of the timeline: ``make bench-instructions``).
    """

    tool_name: str
    raw_name: str
    arguments: Any
    arguments_error: str | None
    call_id: str | None
    parent_call_id: str | None
    sequence_index: int
    parallel_group: int | None
    status: CallStatus
    error_type: str | None
    agent: str | None
    span_id: str | None
    start_ns: int | None
    end_ns: int | None
    result: Any
    hosted: bool
    handoff: bool
    rerun: bool
    service: str | None

    def __init__(  # noqa: PLR0917 - the fields, in the order a dataclass would take them
        self,
        tool_name: str,
        raw_name: str,
        arguments: Any,
        arguments_error: str | None,
        call_id: str | None,
        parent_call_id: str | None,
        sequence_index: int,
        parallel_group: int | None,
        status: CallStatus,
        error_type: str | None,
        agent: str | None,
        span_id: str | None,
        start_ns: int | None,
        end_ns: int | None,
        result: Any = None,
        hosted: bool = False,
        handoff: bool = False,
        rerun: bool = False,
        service: str | None = None,
    ) -> None:
        self.tool_name = tool_name
        self.raw_name = raw_name
        self.arguments = arguments
        self.arguments_error = arguments_error
        self.call_id = call_id
        self.parent_call_id = parent_call_id
        self.sequence_index = sequence_index
        self.parallel_group = parallel_group
        self.status = status
        self.error_type = error_type
        self.agent = agent
        self.span_id = span_id
        self.start_ns = start_ns
        self.end_ns = end_ns
        self.result = result
        self.hosted = hosted
        self.handoff = handoff
        self.rerun = rerun
        self.service = service


@dataclass(frozen=True, slots=True, init=False)
class ToolTrace:
    """One agent run: what the evaluators stand on.

    ``complete`` is false when the run was evaluated before it finished;
    ``incomplete_reason`` then says why (``timed_out``, ``evicted``, ``span_limit``,
    ``shutdown``, ``missing_spans``).

    ``agents`` names every agent that ran in the run, each once: the run's own ``agent``
    first, then, by start time, the agents it used as tools or handed over to (an agent
    that made no call is listed too, so a rule for it still applies).

    ``reference_keys`` are the configured attributes (a golden case id, a shadow pair key)
    that are the run's own: on its spans (and their resources), or on the spans above its
    agent that are above no other run. ``shared_keys`` are those of the spans above its
    agent and another run too (a request's span above a title agent and the canary's
    agent): no span says whose they are, so only a golden case that names its agent takes
    its id from there.

    Frozen, and its constructor written out: the one ``dataclass`` generates for a frozen
    class stays interpreted and took 27,000 instructions a run (a tenth of them compiled,
    ``make bench-instructions``). The fields are set with ``object.__setattr__``, as that
    one sets them; everywhere else an assignment raises ``FrozenInstanceError``.
    """

    trace_id: str
    run_span_id: str | None
    service: str | None
    agent: str | None
    model: str | None
    calls: tuple[ToolCall, ...]
    final_text: str | None
    refusal: bool
    refusal_reason: str | None
    error_count: int
    complete: bool
    incomplete_reason: str | None
    start_ns: int
    end_ns: int
    span_count: int
    conversation_id: str | None = None
    reference_keys: Mapping[str, str] = dataclasses.field(default_factory=dict)
    agents: tuple[str, ...] = ()
    shared_keys: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __init__(  # noqa: PLR0917 - the fields, in the order a dataclass would take them
        self,
        trace_id: str,
        run_span_id: str | None,
        service: str | None,
        agent: str | None,
        model: str | None,
        calls: tuple[ToolCall, ...],
        final_text: str | None,
        refusal: bool,
        refusal_reason: str | None,
        error_count: int,
        complete: bool,
        incomplete_reason: str | None,
        start_ns: int,
        end_ns: int,
        span_count: int,
        conversation_id: str | None = None,
        reference_keys: Mapping[str, str] | None = None,
        agents: tuple[str, ...] = (),
        shared_keys: Mapping[str, str] | None = None,
    ) -> None:
        object.__setattr__(self, "trace_id", trace_id)
        object.__setattr__(self, "run_span_id", run_span_id)
        object.__setattr__(self, "service", service)
        object.__setattr__(self, "agent", agent)
        object.__setattr__(self, "model", model)
        object.__setattr__(self, "calls", calls)
        object.__setattr__(self, "final_text", final_text)
        object.__setattr__(self, "refusal", refusal)
        object.__setattr__(self, "refusal_reason", refusal_reason)
        object.__setattr__(self, "error_count", error_count)
        object.__setattr__(self, "complete", complete)
        object.__setattr__(self, "incomplete_reason", incomplete_reason)
        object.__setattr__(self, "start_ns", start_ns)
        object.__setattr__(self, "end_ns", end_ns)
        object.__setattr__(self, "span_count", span_count)
        object.__setattr__(self, "conversation_id", conversation_id)
        object.__setattr__(self, "reference_keys", {} if reference_keys is None else reference_keys)
        object.__setattr__(self, "agents", agents)
        object.__setattr__(self, "shared_keys", {} if shared_keys is None else shared_keys)

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(c.tool_name for c in self.calls)
