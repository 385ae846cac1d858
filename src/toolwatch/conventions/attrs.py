"""Shared vocabulary and helpers of the convention recognizers.

Ingest hands the recognizers plain Python values: a span's filtered attributes as a
``dict[str, Any]`` (AnyValue already converted: str, int, float, bool, list, dict) and,
only when the span has events, a loader of its relevant events. Nothing here touches
protobuf. The helpers decode JSON-in-a-string values, un-flatten indexed keys
(``prefix.<i>.rest``), clean call ids and collect a model's output (tool calls, text, finish
reasons, refusal) from whichever encoding carried it (CONVENTIONS.md §0 and §6 step 1).

The attributes are typed a dict, not any ``Mapping``: compiled (``toolwatch.compiled``), a
dict's ``get`` is a direct call and a ``Mapping``'s a method lookup, about three times the
instructions, and recognition reads several keys of every span.

What one framework writes, wherever a convention meets it (the OpenAI Agents SDK's handoffs,
LangChain's ``ToolMessage``, MCP's failed results, LangGraph's and CrewAI's answers), is read
by its sibling ``conventions.frameworks``, with these helpers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeAlias, TypedDict

from toolwatch.jsontext import loads
from toolwatch.model import RequestedCall, SpanRole

__all__ = [
    "REFUSAL_REASONS",
    "AgentSpec",
    "Attributes",
    "Convention",
    "EventSource",
    "OutputBuilder",
    "OutputSummary",
    "Recognition",
    "RoleFields",
    "SpanEvent",
    "ToolSpec",
    "clean_id",
    "finish_reason_list",
    "first",
    "first_str",
    "group_indexed",
    "merge_summaries",
    "parse_json",
    "plain_text",
    "span_name_as_is",
]


Attributes: TypeAlias = dict[str, Any]


#: Finish reasons that mean the model refused or a filter blocked the output: OpenAI and
#: GenAI semconv ``content_filter``, Vercel ``content-filter``, Gemini ``safety``, Strands'
#: stop reason ``content_filtered`` (strands-agents 1.62, both convention modes).
REFUSAL_REASONS: Final = frozenset(
    {
        "content_filter",  # OpenAI, Azure
        "content-filter",  # Vercel AI SDK
        "content_filtered",  # Bedrock, Strands
        "guardrail_intervened",  # Bedrock guardrails, Strands
        "refusal",  # Anthropic
        # Gemini's blocked candidates, lower-cased as google-genai's instrumentation and ADK
        # write them (the AI SDK maps each to content-filter).
        "safety",
        "blocklist",
        "prohibited_content",
        "spii",
        "recitation",
        "image_safety",
        "image_prohibited_content",
        "image_recitation",
    }
)


# Call ids some producers send when there is none (ADK sends "<not specified>").
_NO_ID: Final = frozenset({"", "<not specified>"})


@dataclass(frozen=True, slots=True)
class SpanEvent:
    """A span event reduced to its name and its converted (filtered) attributes."""

    name: str
    attributes: Attributes


#: Loads a span's relevant events on demand (ingest decodes them only when a recognizer
#: asks). ``None`` stands for a span without events.
EventSource: TypeAlias = Callable[[], Sequence[SpanEvent]] | None


class RoleFields(TypedDict, total=False):
    """The role-specific ``SpanRecord`` fields a recognizer extracted."""

    tool_name: str | None
    call_id: str | None
    arguments: Any
    result: Any
    error_type: str | None
    finish_reasons: tuple[str, ...]
    output_tool_calls: tuple[RequestedCall, ...]
    output_text: str | None
    refusal: str | None
    agent_name: str | None
    model: str | None
    conversation_id: str | None
    handoff_to: str | None


# ``Recognition`` and ``OutputSummary`` are built once per span and per model output: their
# constructors are written out so that compiled (``toolwatch.compiled``) they are native, as
# ``SpanRecord``'s is; a named tuple's constructor stays interpreted. Never mutated.


@dataclass(slots=True, init=False)
class Recognition:
    """What a span is (role), which convention said so, and the role's fields."""

    role: SpanRole
    convention: str
    fields: RoleFields

    def __init__(self, role: SpanRole, convention: str, fields: RoleFields) -> None:
        self.role = role
        self.convention = convention
        self.fields = fields

    def __iter__(self) -> Iterator[Any]:
        """``role, convention, fields = recognize(...)``."""
        return iter((self.role, self.convention, self.fields))


def _unchanged(value: Any) -> Any:
    return value


def span_name_as_is(name: str) -> str | None:
    """``ToolSpec`` / ``AgentSpec.name_from_span`` for producers that name a tool's or an
    agent's span after it (OpenInference's openai-agents, LangSmith's runs)."""
    return name or None


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """Where a convention keeps a tool span's fields: attribute keys in priority order, how
    to read the tool name from the span name, how to unwrap a framework's argument envelope
    (e.g. traceloop's ``{"args": [], "kwargs": {...}}``) and, when no key holds the arguments
    whole, how to assemble them from per-argument attributes (``None``: not recorded)."""

    name: tuple[str, ...]
    call_id: tuple[str, ...]
    arguments: tuple[str, ...]
    result: tuple[str, ...]
    name_from_span: Callable[[str], str | None]
    unwrap_arguments: Callable[[Any], Any] = _unchanged
    assemble_arguments: Callable[[Attributes], Any] | None = None
    #: Keys of a status whose value ``error`` means the call failed though the span's
    #: status is not ERROR (Strands' ``gen_ai.tool.status``).
    status: tuple[str, ...] = ()
    #: What a framework's result envelope says: ``(call id, error type)``, each ``None`` when
    #: it says nothing (``tool_message``: LangChain's ``ToolMessage``).
    read_result: Callable[[Any], tuple[str | None, str | None]] | None = None


@dataclass(frozen=True, slots=True)
class AgentSpec:
    """Where a convention keeps an agent span's name and final output, and how to unwrap a
    framework's output envelope (e.g. LangGraph's whole ``{"messages": [...]}`` state)."""

    name: tuple[str, ...]
    output: tuple[str, ...]
    name_from_span: Callable[[str], str | None]
    unwrap_output: Callable[[Any], Any] = _unchanged


@dataclass(frozen=True, slots=True)
class Convention:
    """A recognizer's label (``SpanRecord.convention``) and its field locations."""

    name: str
    tool: ToolSpec
    agent: AgentSpec


@dataclass(slots=True, init=False)
class OutputSummary:
    """A model output as one encoding carried it; calls in the model's emission order."""

    tool_calls: tuple[RequestedCall, ...]
    texts: tuple[str, ...]
    finish_reasons: tuple[str, ...]
    refusal: str | None

    def __init__(
        self,
        tool_calls: tuple[RequestedCall, ...] = (),
        texts: tuple[str, ...] = (),
        finish_reasons: tuple[str, ...] = (),
        refusal: str | None = None,
    ) -> None:
        self.tool_calls = tool_calls
        self.texts = texts
        self.finish_reasons = finish_reasons
        self.refusal = refusal


class OutputBuilder:
    """Accumulates one output encoding into an ``OutputSummary``. Not thread-safe."""

    __slots__ = ("_calls", "_reasons", "_refusal", "_texts")

    def __init__(self) -> None:
        self._calls: list[RequestedCall] = []
        self._texts: list[str] = []
        self._reasons: list[str] = []
        self._refusal: str | None = None

    def call(self, name: Any, call_id: Any, arguments: Any, *, hosted: bool = False) -> None:
        """Add the next requested tool call; its index is its position so far. ``hosted``:
        the provider runs it (no tool span will come)."""
        label = name if isinstance(name, str) else ""
        position = len(self._calls)
        self._calls.append(RequestedCall(label, clean_id(call_id), arguments, position, hosted))

    def text(self, value: Any) -> None:
        if isinstance(value, str) and value:
            self._texts.append(value)

    def finish(self, reason: Any) -> None:
        if isinstance(reason, str) and reason and reason not in self._reasons:
            self._reasons.append(reason)

    def refuse(self, value: Any) -> None:
        if self._refusal is None and isinstance(value, str) and value:
            self._refusal = value

    def build(self) -> OutputSummary | None:
        """The summary, or ``None`` when nothing was added."""
        if not (self._calls or self._texts or self._reasons or self._refusal):
            return None
        return OutputSummary(
            tuple(self._calls), tuple(self._texts), tuple(self._reasons), self._refusal
        )


def first(attrs: Attributes, keys: tuple[str, ...]) -> Any:
    """The value of the first of ``keys`` present with a non-``None`` value."""
    for key in keys:
        value = attrs.get(key)
        if value is not None:
            return value
    return None


def first_str(attrs: Attributes, keys: tuple[str, ...]) -> str | None:
    """The first of ``keys`` holding a non-empty string (numbers are rendered)."""
    for key in keys:
        value = attrs.get(key)
        if isinstance(value, str):
            if value:
                return value
        elif isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
    return None


def clean_id(value: Any) -> str | None:
    """A call id, or ``None`` when absent, empty or a placeholder like ``<not specified>``."""
    if isinstance(value, str):
        return None if value.strip() in _NO_ID else value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def parse_json(value: Any) -> Any:
    """``value`` decoded once if it is a JSON string; structured values pass through.

    Returns ``None`` for strings that are not JSON. Deeply nested JSON (a hostile or broken
    producer) is treated as not JSON instead of raising ``RecursionError``.
    """
    if not isinstance(value, str):
        return value
    try:
        return loads(value)
    except (ValueError, RecursionError):
        return None


def plain_text(value: Any) -> str | None:
    """An output value as text: strings as they are (a JSON string literal is unquoted, as
    traceloop records a returned ``str``), other JSON values rendered as JSON."""
    if isinstance(value, str):
        if value.startswith('"'):
            decoded = parse_json(value)
            if isinstance(decoded, str):
                return decoded
        return value or None
    if value is None:
        return None
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (ValueError, RecursionError):
        return None


def finish_reason_list(value: Any) -> tuple[str, ...]:
    """Finish reasons from an array, a JSON-array string, a comma-joined string (LangSmith
    sends ``"stop,tool_calls"``) or one in brackets without quotes (Java and .NET tracers
    join theirs as ``"[content_filter]"``)."""
    if isinstance(value, str):
        if not value.startswith("["):
            return _comma_joined(value)
        parsed = parse_json(value)
        if parsed is None and value.endswith("]"):
            return _comma_joined(value[1:-1])
        value = parsed
    if isinstance(value, list):
        return tuple(item for item in value if isinstance(item, str) and item)
    return ()


def _comma_joined(text: str) -> tuple[str, ...]:
    return tuple(part.strip().strip("\"'") for part in text.split(",") if part.strip())


def group_indexed(attrs: Attributes, prefix: str) -> dict[int, dict[str, Any]]:
    """Un-flatten ``prefix<i>.<rest> = v`` keys into ``{i: {rest: v}}``.

    Indices are integers, so callers iterating ``sorted(...)`` get 9 before 10. Keys whose
    index segment is not a number are ignored.
    """
    groups: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        if not key.startswith(prefix):
            continue
        index, _, rest = key[len(prefix) :].partition(".")
        if index.isascii() and index.isdigit() and rest:
            groups.setdefault(int(index), {})[rest] = value
    return groups


def merge_summaries(summaries: Iterable[OutputSummary | None]) -> OutputSummary | None:
    """Combine encodings of the same output: calls and text from the first encoding that
    has them (producers in transition emit both, and the calls must not count twice),
    finish reasons from all of them, the first refusal."""
    found = [summary for summary in summaries if summary is not None]
    if len(found) <= 1:
        return found[0] if found else None
    reasons: dict[str, None] = {}
    for summary in found:
        reasons.update(dict.fromkeys(summary.finish_reasons))
    return OutputSummary(
        next((s.tool_calls for s in found if s.tool_calls), ()),
        next((s.texts for s in found if s.texts), ()),
        tuple(reasons),
        next((s.refusal for s in found if s.refusal), None),
    )
