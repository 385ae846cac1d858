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
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeAlias, TypedDict

from toolwatch.jsontext import loads
from toolwatch.model import RequestedCall, SpanRole

__all__ = [
    "HANDOFF_SPAN_PREFIXES",
    "HANDOFF_SPAN_SUFFIX",
    "HANDOFF_TARGET_KEYS",
    "NAMED_HANDOFF_PREFIX",
    "REFUSAL_REASONS",
    "TRANSFER_TOOL_PREFIX",
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
    "agent_in_tool_style",
    "clean_id",
    "content_text",
    "crew_answer",
    "finish_reason_list",
    "first",
    "first_str",
    "group_indexed",
    "is_handoff_span",
    "is_transfer",
    "langgraph_answer",
    "mcp_tool_error",
    "merge_summaries",
    "parse_json",
    "plain_text",
    "span_name_as_is",
    "tool_message",
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


#: The OpenAI Agents SDK's handoff spans, as each exporter names them: OpenInference
#: ``handoff to <agent>``, the contrib instrumentation ``agent_handoff …``, Logfire
#: ``Handoff: {from_agent} → {to_agent}``, OpenLLMetry ``<agent> → <agent>.handoff``.
NAMED_HANDOFF_PREFIX: Final = "handoff to "  # OpenInference's, followed by the agent's name
HANDOFF_SPAN_PREFIXES: Final = (NAMED_HANDOFF_PREFIX, "agent_handoff", "Handoff: ")
HANDOFF_SPAN_SUFFIX: Final = ".handoff"
#: Where a handoff span names the agent handed to, besides OpenInference's span name: the
#: contrib instrumentation, Logfire. (OpenLLMetry's does not know it when it starts.)
HANDOFF_TARGET_KEYS: Final = ("gen_ai.handoff.to_agent", "to_agent")


def is_handoff_span(name: str) -> bool:
    return name.startswith(HANDOFF_SPAN_PREFIXES) or name.endswith(HANDOFF_SPAN_SUFFIX)


#: The tool the OpenAI Agents SDK's model calls to hand off: ``transfer_to_<agent>``, the
#: agent's name written as ``agent_in_tool_style`` does.
TRANSFER_TOOL_PREFIX: Final = "transfer_to_"
_NOT_IN_TOOL_NAMES: Final = re.compile(r"[^a-zA-Z0-9_]")


def is_transfer(name: str) -> bool:
    """Whether ``name`` is a handoff tool's, ``transfer_to_…`` in any case."""
    return name[: len(TRANSFER_TOOL_PREFIX)].lower() == TRANSFER_TOOL_PREFIX


def agent_in_tool_style(name: str) -> str:
    """An agent's name as the SDK writes it in its handoff tool's name: characters other
    than ASCII letters, digits and ``_`` replaced by ``_``, then lower case."""
    return _NOT_IN_TOOL_NAMES.sub("_", name).lower()


#: In the text of every LangChain ``ToolMessage`` result, and in few other results.
_TOOL_CALL_ID: Final = '"tool_call_id"'


def tool_message(result: Any) -> tuple[str | None, str | None]:
    """The call id and error of a tool result that is a LangChain ``ToolMessage``, as
    OpenInference (``{"type": "tool", "data": {...}}``), LangSmith (``{"output": {...}}``) or
    OpenLLMetry (``{"output": {"lc": 1, ..., "kwargs": {...}}}``) record it: a tool run by
    LangGraph's ToolNode carries the model's call id there, not on its span, and a tool error
    it handled (``handle_tool_error``) only there, as ``status: "error"`` (error type
    ``error``). ``(None, None)`` for any other result."""
    if isinstance(result, str):
        if _TOOL_CALL_ID not in result:
            return None, None
        result = parse_json(result)
    for _ in range(3):  # the envelopes above, outermost first
        if not isinstance(result, dict):
            return None, None
        if "tool_call_id" in result:
            break
        inner = result.get("output")
        if inner is None:
            inner = result.get("kwargs") if result.get("lc") else result.get("data")
        result = inner
    if not isinstance(result, dict) or result.get("type") != "tool":
        return None, None
    call_id = result.get("tool_call_id")
    error = "error" if result.get("status") == "error" else None
    return (call_id if isinstance(call_id, str) else None), error


#: In the text of an MCP ``CallToolResult`` that reports a failure, and in few other results.
_IS_ERROR: Final = '"isError"'
#: How the MCP Python SDK's FastMCP server words a tool that raised, the text of its
#: ``isError`` result: ``Error executing tool charge_card: card declined``.
_FASTMCP_ERROR: Final = "Error executing tool "
#: What may stand before a server's tool name in the name the client gave the tool.
_NAMESPACE_ENDS: Final = frozenset("_.:/-")


def mcp_tool_error(result: Any, tool_name: str) -> str | None:
    """``"tool_error"`` when the result of a call of ``tool_name`` reports an MCP server's
    failure, else ``None``. MCP servers report a failed tool as a result the model reads
    rather than a protocol error, and an agent's span for the call ends OK; the MCP semantic
    conventions ask instrumentations to set ``error.type`` to ``tool_error`` then, which not
    all do. The result is the ``CallToolResult`` (``isError: true`` beside its ``content``
    list), or, where the client keeps only its content (the OpenAI Agents SDK hands the
    model the text alone), a text FastMCP wrote for a failure of this very tool
    (``_FASTMCP_ERROR``): as it is, as a text content item, or as the first of a list."""
    if not isinstance(result, str):
        return _reported_failure(result)
    if _IS_ERROR in result:
        return _reported_failure(parse_json(result))
    if _FASTMCP_ERROR not in result:
        return None
    if result.startswith(_FASTMCP_ERROR):
        return "tool_error" if _names_tool(result, tool_name) else None
    content = parse_json(result)
    if isinstance(content, list) and content:
        content = content[0]
    if not isinstance(content, dict) or content.get("type") != "text":
        return None
    text = content.get("text")
    if not isinstance(text, str) or not text.startswith(_FASTMCP_ERROR):
        return None
    return "tool_error" if _names_tool(text, tool_name) else None


def _reported_failure(result: Any) -> str | None:
    """``"tool_error"`` for an MCP ``CallToolResult`` with ``isError: true``."""
    if not isinstance(result, dict) or result.get("isError") is not True:
        return None
    return "tool_error" if isinstance(result.get("content"), list) else None


def _names_tool(text: str, tool_name: str) -> bool:
    """Whether a FastMCP failure ``text`` is of ``tool_name``: the server's name for the tool
    is the client's, or ends it after a namespace (``billing__charge_card``)."""
    named = text[len(_FASTMCP_ERROR) :].partition(":")[0]
    if named == tool_name:
        return True
    cut = len(tool_name) - len(named)
    return cut > 0 and tool_name.endswith(named) and tool_name[cut - 1] in _NAMESPACE_ENDS


def langgraph_answer(value: Any) -> Any:
    """The last AI message's text of a LangGraph state (``{"messages": [...]}``), ``None``
    when it has none (a refusal, a run cut short); any other output value as it is. A
    message is LangChain's ``message_to_dict`` form (``{"type": "ai", "data": {...}}``,
    OpenInference) or its flat dump (``{"type": "ai", "content": ...}``, LangSmith)."""
    if not (isinstance(value, str) and value.startswith('{"messages"')):
        return value
    state = parse_json(value)
    messages = state.get("messages") if isinstance(state, dict) else None
    if not isinstance(messages, list):
        return value
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("type") == "ai":
            data = message.get("data")
            return content_text((data if isinstance(data, dict) else message).get("content"))
    return None


def crew_answer(value: Any) -> Any:
    """The answer of a CrewAI ``CrewOutput`` or ``TaskOutput`` as OpenInference writes them
    (JSON: ``raw`` the answer beside ``tasks_output`` or the task's ``description``); any
    other output value as it is. Asked of CrewAI's own spans alone."""
    if not (isinstance(value, str) and value.startswith("{") and '"raw"' in value):
        return value
    output = parse_json(value)
    if not isinstance(output, dict) or not ("tasks_output" in output or "description" in output):
        return value
    raw = output.get("raw")
    return raw if isinstance(raw, str) else value


def content_text(content: Any) -> str | None:
    """LangChain message content: a string, or a list of parts (``{"type": "text"}``)."""
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        content = "\n".join(t for t in texts if isinstance(t, str) and t)
    return content if isinstance(content, str) and content else None


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
