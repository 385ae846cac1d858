"""The project's records: the vocabulary every stage after ingest speaks.

Protobuf types stop at ``toolwatch.ingest``; from there on spans, calls, traces and
findings are these frozen, slotted dataclasses. Times are integer nanoseconds (Unix epoch,
as OTLP sends them); span and trace ids are ``bytes`` on the hot path (``SpanRecord``) and
lower-case hex strings once a ToolTrace is built.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

__all__ = [
    "DETAIL_ERRORS",
    "DETAIL_FIELDS",
    "MISSING_SPANS",
    "CallStatus",
    "Category",
    "Clock",
    "EvalResult",
    "ExpectedCall",
    "Finding",
    "GoldenCase",
    "ManualClock",
    "ReferenceKind",
    "RequestedCall",
    "Severity",
    "SpanRecord",
    "SpanRole",
    "ToolCall",
    "ToolTrace",
    "Traffic",
    "Verified",
    "monotonic_clock",
]

#: A clock returns "now" in integer nanoseconds. Assembly measures quiet periods and ages
#: with it; tests inject a ``ManualClock`` instead of sleeping.
Clock: TypeAlias = Callable[[], int]


def monotonic_clock() -> int:
    """The production clock: ``time.monotonic_ns``."""
    return time.monotonic_ns()


class ManualClock:
    """A clock that only moves when told to. Not thread-safe; drive it from one thread."""

    __slots__ = ("now_ns",)

    def __init__(self, start_ns: int = 1_000_000_000) -> None:
        self.now_ns = start_ns

    def __call__(self) -> int:
        return self.now_ns

    def advance(self, seconds: float) -> int:
        """Move forward by ``seconds`` and return the new time in nanoseconds."""
        self.now_ns += int(seconds * 1e9)
        return self.now_ns


#: The ``incomplete_reason`` of a run whose model spans' input shows earlier model calls of
#: it whose spans the trace does not hold (``assembly.missing``): sent to another replica by a
#: rollout or scale step, or lost before toolwatch.
MISSING_SPANS: Final = "missing_spans"


class SpanRole(enum.IntEnum):
    """What a span is to toolwatch, whatever convention it was written in."""

    OTHER = 0
    AGENT = 1  # an agent invocation (invoke_agent, OpenInference AGENT, traceloop agent, ...)
    TOOL = 2  # a tool execution
    LLM = 3  # a model call whose output may request tool calls
    WRAPPER = 4  # a span that groups tool spans but is not one (pydantic-ai "running tools")
    # A guardrail check (OpenInference GUARDRAIL, the contrib openai-agents guardrail_check,
    # Logfire's "Guardrail ..."): an agent it runs checks the run, it does not speak for it.
    GUARDRAIL = 5


class CallStatus(enum.StrEnum):
    OK = "ok"
    ERROR = "error"


class Category(enum.StrEnum):
    """Regression categories. These names are the alert API: never rename one."""

    TOOL_SELECTION_DRIFT = "TOOL_SELECTION_DRIFT"
    ARGUMENT_VALUE_DRIFT = "ARGUMENT_VALUE_DRIFT"
    TOOL_TRACE_STRUCTURE_DRIFT = "TOOL_TRACE_STRUCTURE_DRIFT"
    TOOL_ORDER_DRIFT = "TOOL_ORDER_DRIFT"
    DANGEROUS_ACTION_DRIFT = "DANGEROUS_ACTION_DRIFT"
    MISSING_VERIFICATION_STEP = "MISSING_VERIFICATION_STEP"
    UNNECESSARY_TOOL_CALL = "UNNECESSARY_TOOL_CALL"
    REFUSAL_REGRESSION = "REFUSAL_REGRESSION"
    INVARIANT_VIOLATION = "INVARIANT_VIOLATION"


class Severity(enum.StrEnum):
    """Ordered severities; compare with ``rank``."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]

    def at_least(self, floor: Severity) -> Severity:
        """This severity raised to ``floor`` if it is below it."""
        return self if self.rank >= floor.rank else floor


_SEVERITY_RANK: Final = {
    Severity.LOW: 0,
    Severity.MEDIUM: 1,
    Severity.HIGH: 2,
    Severity.CRITICAL: 3,
}


class ReferenceKind(enum.StrEnum):
    """What a finding was judged against."""

    EXPECTED = "expected"  # a golden case
    SOURCE = "source"  # the shadow twin (source model) of a pair
    POLICY = "policy"  # the always-on policy or a hand-written invariant


class Traffic(enum.StrEnum):
    """Whose run a metric counts. ``shadow``: a shadow target's, the candidate model's copy of
    a live request (its actions are not production's, and its regressions page no one:
    they tell whether to promote it). ``live``: every other run, shadow sources and golden
    canaries included."""

    LIVE = "live"
    SHADOW = "shadow"


@dataclass(slots=True, init=False)
class RequestedCall:
    """A tool call as a model requested it in an LLM span's output. Never mutated.

    ``arguments`` is what the span carried: an already-decoded JSON value, a JSON string
    (possibly double-encoded), or ``None`` when content capture was off. ``position`` is the
    model's emission order within the span (the order of tool-call parts). ``hosted`` marks a
    call the convention says the provider runs itself (GenAI ``server_tool_call``): it
    leaves no tool span.

    One is built per requested call of every model output at ingest, so its constructor is
    written out and compiled (``toolwatch.compiled``), as ``SpanRecord``'s is: a named
    tuple's stays interpreted (with ``Recognition``, ``OutputSummary`` and ``ToolEvents``
    made the same way, 2,500 instructions a construction, ``make bench-instructions``).
    """

    name: str
    call_id: str | None
    arguments: Any
    position: int
    hosted: bool

    def __init__(
        self, name: str, call_id: str | None, arguments: Any, position: int, hosted: bool = False
    ) -> None:
        self.name = name
        self.call_id = call_id
        self.arguments = arguments
        self.position = position
        self.hosted = hosted


@dataclass(slots=True, init=False)
class SpanRecord:
    """One span reduced to what toolwatch needs. Constructed once at ingest; never mutated.

    One is built per received span, so its constructor is written out: compiled
    (``toolwatch.compiled``) it takes a tenth of the 1.7 µs of the one ``dataclass`` would
    generate, which stays interpreted. Not ``frozen`` for the same reason (a frozen
    25-field dataclass took 4.9 µs).

    Role-specific fields are ``None`` (or empty) when the role does not carry them.
    ``arguments`` and ``result`` keep the value as it arrived (decoded JSON value or raw
    string); the timeline parses them. ``reference_keys`` holds the configured attributes
    (golden case id, shadow pair key and role, ...) found on this span or its resource.
    """

    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes | None
    name: str
    kind: int
    start_ns: int
    end_ns: int
    status_code: int  # OTLP: 0 unset, 1 ok, 2 error
    service: str | None
    role: SpanRole
    convention: str  # which convention recognized it: genai, openinference, ...
    tool_name: str | None
    call_id: str | None
    arguments: Any
    result: Any
    error_type: str | None
    finish_reasons: tuple[str, ...]
    output_tool_calls: tuple[RequestedCall, ...]
    output_text: str | None
    refusal: str | None  # refusal text or reason seen in the output
    agent_name: str | None
    model: str | None
    conversation_id: str | None
    # The agent the span hands the conversation to, as recognition read it where a producer's
    # reading is its own (Google ADK's ``transfer_to_agent``: its tool span, and the model span
    # asking for it, ``conventions.google_adk``); "" when it names no one. None elsewhere:
    # OpenAI Agents SDK ``transfer_to_<agent>`` calls and handoff spans are read by name.
    handoff_to: str | None
    reference_keys: tuple[tuple[str, str], ...]
    size_bytes: int  # approximate payload size, for the buffer's byte bound
    # The span's flags say its parent is not remote: that span is on its way from the same
    # process (it ends after its children, so it is exported after them). False when unsaid.
    parent_local: bool
    # A model span's input history: the model calls of its run before it, as the messages
    # from the model after the last user message show them (``conventions.history``); -1
    # when the input is not readable or not recorded, and for every other role.
    prior_turns: int
    # The ids of the tool calls those earlier model calls issued, as the same history names
    # them: at most ``conventions.history.MAX_CALL_IDS``, nearest the span first, each cut
    # to ``MAX_ID_CHARS``; () when it names none or is not read.
    prior_call_ids: tuple[str, ...]

    def __init__(  # noqa: PLR0917 - the fields, in the order a dataclass would take them
        self,
        trace_id: bytes,
        span_id: bytes,
        parent_span_id: bytes | None,
        name: str,
        kind: int,
        start_ns: int,
        end_ns: int,
        status_code: int,
        service: str | None,
        role: SpanRole,
        convention: str = "",
        tool_name: str | None = None,
        call_id: str | None = None,
        arguments: Any = None,
        result: Any = None,
        error_type: str | None = None,
        finish_reasons: tuple[str, ...] = (),
        output_tool_calls: tuple[RequestedCall, ...] = (),
        output_text: str | None = None,
        refusal: str | None = None,
        agent_name: str | None = None,
        model: str | None = None,
        conversation_id: str | None = None,
        handoff_to: str | None = None,
        reference_keys: tuple[tuple[str, str], ...] = (),
        size_bytes: int = 0,
        parent_local: bool = False,
        prior_turns: int = -1,
        prior_call_ids: tuple[str, ...] = (),
    ) -> None:
        self.trace_id = trace_id
        self.span_id = span_id
        self.parent_span_id = parent_span_id
        self.name = name
        self.kind = kind
        self.start_ns = start_ns
        self.end_ns = end_ns
        self.status_code = status_code
        self.service = service
        self.role = role
        self.convention = convention
        self.tool_name = tool_name
        self.call_id = call_id
        self.arguments = arguments
        self.result = result
        self.error_type = error_type
        self.finish_reasons = finish_reasons
        self.output_tool_calls = output_tool_calls
        self.output_text = output_text
        self.refusal = refusal
        self.agent_name = agent_name
        self.model = model
        self.conversation_id = conversation_id
        self.handoff_to = handoff_to
        self.reference_keys = reference_keys
        self.size_bytes = size_bytes
        self.parent_local = parent_local
        self.prior_turns = prior_turns
        self.prior_call_ids = prior_call_ids


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


#: The ``Finding.details`` key of argument values by field path (see ``Finding``).
DETAIL_FIELDS: Final = "fields"
#: The ``Finding.details`` key of messages that may quote argument values (see ``Finding``).
DETAIL_ERRORS: Final = "errors"


@dataclass(frozen=True, slots=True, init=False)
class Finding:
    """One regression, with a stable category and a one-line explanation.

    ``explanation`` never contains argument values; values that help a person (expected vs
    actual) go in ``details``, in one of two keys that sinks redact entry by entry unless
    configured otherwise. ``DETAIL_FIELDS`` maps an argument's field path (``"order_id"``,
    ``"items.0.sku"``; ``""`` for a whole value that is no object) to what the finding says
    of its value; ``DETAIL_ERRORS`` lists ``{"field": path or None, "message": text}`` whose
    messages may quote values. Every other key of ``details`` must hold no argument or result
    value (tool names, counts, span ids, rule labels): sinks show those as they are.

    What it was judged against, by name, so that the reference can be found from the finding
    (set by ``EvaluationPipeline``, which knows it, not by evaluators; ``None`` otherwise):
    ``case_id``, the golden case of a finding against ``expected``; ``source_trace_id`` and
    ``pair_key``, the trace id of the shadow source run and the pair key of a finding against
    ``source``. A finding against the policy names none.

    Frozen, with a written-out constructor, for the reason ``ToolTrace`` gives.
    """

    category: Category
    severity: Severity
    evaluator: str
    reference: ReferenceKind
    score: float | None
    explanation: str
    trace_id: str
    span_id: str | None = None
    tool: str | None = None
    field: str | None = None
    agent: str | None = None
    details: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    case_id: str | None = None
    source_trace_id: str | None = None
    pair_key: str | None = None

    def __init__(  # noqa: PLR0917 - the fields, in the order a dataclass would take them
        self,
        category: Category,
        severity: Severity,
        evaluator: str,
        reference: ReferenceKind,
        score: float | None,
        explanation: str,
        trace_id: str,
        span_id: str | None = None,
        tool: str | None = None,
        field: str | None = None,
        agent: str | None = None,
        details: Mapping[str, Any] | None = None,
        case_id: str | None = None,
        source_trace_id: str | None = None,
        pair_key: str | None = None,
    ) -> None:
        object.__setattr__(self, "category", category)
        object.__setattr__(self, "severity", severity)
        object.__setattr__(self, "evaluator", evaluator)
        object.__setattr__(self, "reference", reference)
        object.__setattr__(self, "score", score)
        object.__setattr__(self, "explanation", explanation)
        object.__setattr__(self, "trace_id", trace_id)
        object.__setattr__(self, "span_id", span_id)
        object.__setattr__(self, "tool", tool)
        object.__setattr__(self, "field", field)
        object.__setattr__(self, "agent", agent)
        object.__setattr__(self, "details", {} if details is None else details)
        object.__setattr__(self, "case_id", case_id)
        object.__setattr__(self, "source_trace_id", source_trace_id)
        object.__setattr__(self, "pair_key", pair_key)


@dataclass(frozen=True, slots=True, init=False)
class EvalResult:
    """What one evaluator says of one ToolTrace: named scores in [0, 1], findings, and a
    one-line explanation. Frozen, with a written-out constructor, for the reason
    ``ToolTrace`` gives (one is built per evaluator and run)."""

    evaluator: str
    scores: Mapping[str, float]
    findings: tuple[Finding, ...]
    explanation: str

    def __init__(
        self,
        evaluator: str,
        scores: Mapping[str, float],
        findings: tuple[Finding, ...],
        explanation: str,
    ) -> None:
        object.__setattr__(self, "evaluator", evaluator)
        object.__setattr__(self, "scores", scores)
        object.__setattr__(self, "findings", findings)
        object.__setattr__(self, "explanation", explanation)


@dataclass(frozen=True, slots=True)
class ExpectedCall:
    """One expected tool call of a golden case. ``arguments`` ``None`` means "any arguments";
    ``match`` names the default argument strategy for this call's fields (``exact``,
    ``subset``, ``numeric``, ``contains``, ``fuzzy``), ``None`` for the configured default;
    ``field_match`` the strategy of single fields, which wins over every other."""

    name: str
    arguments: Mapping[str, Any] | None = None
    match: str | None = None
    field_match: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class GoldenCase:
    """An expected behaviour, matched to live runs by a configured attribute (case id)."""

    case_id: str
    expected_tools: tuple[ExpectedCall, ...] = ()
    expected_no_tools: bool = False
    expected_min_steps: int | None = None
    expected_tool_count: int | None = None
    category: str | None = None
    selection_mode: str | None = None  # overrides the configured tool_selection mode
    expected_refusal: bool | None = None  # must the run refuse? None: not said
    #: The agent whose run does the case's work: runs of no other agent are matched to it
    #: (see ``references.golden.GoldenCaseSet.match``). ``None``: any run carrying the id.
    agent: str | None = None
    #: A run matched to the case is expected at least this often (a scheduled canary's
    #: period with slack); ``None``: not watched. See ``metrics.golden_case_judged``.
    expected_every_seconds: float | None = None

    @property
    def expects_no_calls(self) -> bool:
        """``expected_no_tools``, or an ``expected_tool_count`` of 0 naming no tools: every
        evaluator reads the two alike."""
        return self.expected_no_tools or (self.expected_tool_count == 0 and not self.expected_tools)
