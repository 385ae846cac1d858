"""The records a run's calls are built from, shared by the modules that build them
(``assembly.calls``): ``CallSite`` (where a span sits in its run), ``_Request`` (a call a
model span requested), ``_Draft`` (a call being built); the parsing of arguments; and the
small helpers the join, the clocks and the ordering share.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, TypeVar

from toolwatch.conventions.frameworks import TRANSFER_TOOL_PREFIX, agent_in_tool_style
from toolwatch.jsontext import loads
from toolwatch.model import RequestedCall, SpanRecord

__all__ = ["CallSite", "append_to", "decode_json", "parse_arguments"]

K = TypeVar("K")
V = TypeVar("V")

_MAX_DECODE_DEPTH: Final = 8  # JSON nested in JSON strings; deeper than this is not arguments
_DECORATOR_KEYS: Final = frozenset({"args", "kwargs", "sanitize_inputs_outputs"})

_NO_IDS: Final[frozenset[bytes]] = frozenset()
_OTLP_STATUS_ERROR: Final = 2  # OTLP Status.code ERROR


# The records below are built one per span or call of every trace: their constructors are
# written out, so that compiled (``toolwatch.compiled``) they are native. A named tuple's or
# a frozen dataclass's constructor stays interpreted Python; it cost several times the
# instructions (``make bench-instructions``). Never mutated after construction.


@dataclass(slots=True, init=False)
class CallSite:
    """Where a span sits in its run's tree, as the timeline computed it.

    ``agent``: nearest AGENT strict ancestor. ``tool``: nearest TOOL strict ancestor inside
    the same run (agent-as-tool). ``parent``: parent span id after skipping WRAPPER spans
    (``None`` for a span without parent). ``run``: the span id of the AGENT span whose run
    the span belongs to (``None`` outside every agent).
    """

    agent: SpanRecord | None
    tool: SpanRecord | None
    parent: bytes | None
    run: bytes | None

    def __init__(
        self,
        agent: SpanRecord | None,
        tool: SpanRecord | None,
        parent: bytes | None,
        run: bytes | None,
    ) -> None:
        self.agent = agent
        self.tool = tool
        self.parent = parent
        self.run = run


@dataclass(slots=True, init=False)
class _Request:
    llm: SpanRecord
    call: RequestedCall
    name: str  # normalized
    position: int  # emission order within the run
    parsed: tuple[Any] | None  # its arguments parsed, once asked (``arguments``)

    def __init__(self, llm: SpanRecord, call: RequestedCall, name: str, position: int) -> None:
        self.llm = llm
        self.call = call
        self.name = name
        self.position = position
        self.parsed = None

    def arguments(self) -> Any:
        """The requested arguments parsed, once: an execution without an id compares them
        with up to ``_MAX_ARGUMENT_MATCHES`` requests', and each with as many executions."""
        parsed = self.parsed
        if parsed is None:
            parsed = self.parsed = (parse_arguments(self.call.arguments)[0],)
        return parsed[0]


@dataclass(slots=True, init=False)
class _Draft:
    """One call being built: an execution, a request, or both (never neither). ``handoff``:
    the execution is a handoff span. ``moved``: the time it is ordered by, when its span's
    is not (``_requested_windows``); ``None``: its ``start_ns``. ``again``: of a span that
    ran a request another span took (``_join_by_id``: a retry under its id; ``_join_by_name``:
    a retry or a wrapper's span without id or arguments), that request, whose arguments it
    ran; the call is no request's."""

    span: SpanRecord | None
    request: _Request | None
    handoff: bool
    moved: int | None
    again: _Request | None

    def __init__(
        self, span: SpanRecord | None, request: _Request | None, handoff: bool = False
    ) -> None:
        self.span = span
        self.request = request
        self.handoff = handoff
        self.moved = None
        self.again = None

    @property
    def origin(self) -> SpanRecord:
        """The span the call is placed by: its tool span, else the requesting LLM span."""
        if self.span is not None:
            return self.span
        assert self.request is not None
        return self.request.llm

    @property
    def raw_name(self) -> str:
        """The tool span's name, else the request's (a handoff span's too), else, for a
        handoff span alone, the SDK's transfer tool's for the agent it names."""
        if self.span is not None and not self.handoff:
            return _raw_name(self.span)
        if self.request is not None:
            return self.request.call.name
        assert self.span is not None and self.span.tool_name is not None
        return TRANSFER_TOOL_PREFIX + agent_in_tool_style(self.span.tool_name)

    @property
    def start_ns(self) -> int:
        """A request-only call starts when the model asked for it (its LLM span ended)."""
        return self.span.start_ns if self.span is not None else self.origin.end_ns

    @property
    def at(self) -> int:
        """The time the call is ordered by: its start, unless ``moved``."""
        moved = self.moved
        return moved if moved is not None else self.start_ns


def decode_json(value: Any) -> tuple[Any, bool]:
    """Decode ``value`` while it is a string holding JSON (double encoding, CONVENTIONS §0).

    Returns the value and whether the *first* decode failed (the raw value was a string
    that is not JSON). A string reached by decoding that is not JSON is a legitimate value.
    JSON nested deeper than the parser's recursion limit counts as not JSON.
    """
    for depth in range(_MAX_DECODE_DEPTH):
        if not isinstance(value, str):
            return value, False
        try:
            value = loads(value)
        except (ValueError, RecursionError):  # RecursionError: "[[[[..." from a hostile span
            return value, depth == 0
    return value, False


def parse_arguments(value: Any) -> tuple[Any, str | None]:
    """Parsed tool arguments and a short parse-error reason (``None`` if fine).

    ``None`` and blank strings mean "not recorded". A decorator-shaped input
    ``{"args": [], "kwargs": {...}}`` (OpenLLMetry, smolagents) becomes its kwargs.
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        return None, None
    decoded, failed = decode_json(value)
    if failed:
        return value, "arguments are not valid JSON"
    return _unwrap_decorator(decoded), None


def _unwrap_decorator(value: Any) -> Any:
    if (
        isinstance(value, dict)
        and "kwargs" in value
        and value.keys() <= _DECORATOR_KEYS
        and value.get("args") in (None, [])
        and isinstance(value["kwargs"], dict)
    ):
        return value["kwargs"]
    return value


#: How far above a model span another that asked is looked for (plain spans between).
_MAX_HOPS: Final = 8


def _ended(span: SpanRecord) -> tuple[int, int, bytes]:
    return span.end_ns, span.start_ns, span.span_id


def _scope(site: CallSite) -> bytes | None:
    return site.agent.span_id if site.agent is not None else None


def _failed(span: SpanRecord) -> bool:
    """Whether the tool span says its attempt failed: status ERROR, or an ``error.type``."""
    return span.status_code == _OTLP_STATUS_ERROR or bool(span.error_type)


def _raw_name(span: SpanRecord) -> str:
    return span.tool_name if span.tool_name is not None else span.name


def append_to(lists: dict[K, list[V]], key: K, value: V) -> None:
    """``lists[key].append(value)``, creating the list: what a ``defaultdict(list)`` does,
    without calling its factory through the interpreter on every new key."""
    values = lists.get(key)
    if values is None:
        lists[key] = [value]
    else:
        values.append(value)


def _interval(span: SpanRecord | None) -> tuple[int, int]:
    assert span is not None
    return span.start_ns, max(span.start_ns, span.end_ns)
