"""The project's records: the vocabulary every stage after ingest speaks.

Protobuf types stop at ``toolwatch.ingest``; from there on spans, calls, traces and
findings are these frozen, slotted dataclasses. Times are integer nanoseconds (Unix epoch,
as OTLP sends them); span and trace ids are ``bytes`` on the hot path (``SpanRecord``) and
lower-case hex strings once a ToolTrace is built.

This module holds the clocks, the enums every stage names (``SpanRole``, ``CallStatus``,
``Category``, ``Severity``, ``ReferenceKind``, ``Traffic``) and the records ingest builds
(``SpanRecord``, ``RequestedCall``). Its siblings hold the rest: ``model_traces`` what
assembly builds from the spans (``ToolTrace``, ``ToolCall``, ``Verified``), and
``model_evaluation`` what a run is judged against and what the judging gives
(``GoldenCase``, ``ExpectedCall``, ``Finding``, ``EvalResult``).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

__all__ = [
    "MISSING_SPANS",
    "CallStatus",
    "Category",
    "Clock",
    "ManualClock",
    "ReferenceKind",
    "RequestedCall",
    "Severity",
    "SpanRecord",
    "SpanRole",
    "Traffic",
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
