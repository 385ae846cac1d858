"""How bound values are read from a call's arguments and compared: what names one entity
(an order, an account) for ``safety``'s bindings, the conversation memory, and ``loops``'
retries of a dangerous call (``retried``: a failed refund made again for the same order)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeAlias

from toolwatch.jsontext import decimal_text
from toolwatch.model_traces import ToolCall

__all__ = [
    "RecordingKey",
    "entity_key",
    "lookup",
    "producer",
    "recording_key",
    "recording_tools",
    "unrecorded",
]


def lookup(arguments: Any, path: str) -> Any:
    """The value at dotted ``path`` in nested argument objects, or ``None`` if absent. A
    part in decimal digits indexes an array (``items.0.order_id``: the first item's
    ``order_id``), as findings name such fields."""
    if "." not in path:  # the usual field: no list of parts
        return _item(arguments, path)
    value = arguments
    for part in path.split("."):
        value = _item(value, part)
        if value is None:
            return None
    return value


def _item(value: Any, key: str) -> Any:
    """``value[key]`` if ``value`` is a mapping holding ``key``, or an array with an item at
    the index ``key`` writes in decimal digits (no sign, no leading zero), else ``None``."""
    if type(value) is dict:  # what JSON gives: no (interpreted) ABC check, 1,000 instructions
        return value.get(key)
    if isinstance(value, Mapping) and key in value:
        return value[key]
    if isinstance(value, list | tuple) and _is_index(key) and int(key) < len(value):
        return value[int(key)]
    return None


def _is_index(key: str) -> bool:
    """Whether ``key`` is an array index in decimal digits: ``0``, ``12``; not ``01``, ``-1``."""
    return key.isascii() and key.isdigit() and (key == "0" or key[0] != "0")


def entity_key(value: Any) -> str | None:
    """How a bound value is compared: as trimmed text, a number as its decimal text
    (``jsontext.decimal_text``: ``12.0`` and ``"12"`` are ``12``), so that values equal as
    JSON values, or a number and its text, name one entity. Objects and arrays as JSON
    text whose members are keyed so, at any depth (``{"id": 12.0}`` is ``{"id": "12"}``),
    key order ignored, array order kept. ``None`` for an absent value, and for blank text:
    a refund of order ``""`` names no order, which no lookup of ``"  "`` verifies."""
    if value is None:
        return None
    if isinstance(value, str):  # the usual id: no need of the (interpreted) ABC check below
        return value.strip() or None
    text = decimal_text(value)  # the other usual id, an int (a bool is none: None)
    if text is not None:
        return text
    if isinstance(value, Mapping | list | tuple):
        return _container_key(value)
    return str(value).strip() or None  # a boolean "True", as in a container


#: Containers nested deeper are keyed as their plain JSON text (``_container_key``): a
#: compiled function calling itself has no recursion check of its own.
_MAX_DEPTH: Final = 32


class _TooDeepError(Exception):
    """A bound value nested past ``_MAX_DEPTH``."""


#: ``json.dumps(value, sort_keys=True, default=str)``, without building an encoder per call.
_SORTED_JSON: Final = json.JSONEncoder(sort_keys=True, default=str)


def _container_key(value: Any) -> str:
    """``entity_key`` of an object or array."""
    try:
        keyed = _keyed(value, 0)
    except _TooDeepError:
        return _SORTED_JSON.encode(value)
    return _SORTED_JSON.encode(keyed)


def _keyed(value: Any, depth: int) -> Any:
    """``value`` with every member that is no object or array replaced by its
    ``entity_key`` (``null`` kept, blank text kept blank: a member's absence is not
    blankness). Exact types first: what parsers make, without the ABC checks."""
    kind = type(value)
    if kind is str:
        text: str = value
        return text.strip()
    if value is None:
        return None
    number = decimal_text(value)
    if number is not None:
        return number
    if kind is dict:
        mapping: dict[Any, Any] = value
        return {key: _keyed(item, _deeper(depth)) for key, item in mapping.items()}
    if kind is list:
        items: list[Any] = value
        return [_keyed(item, _deeper(depth)) for item in items]
    if kind is not bool and isinstance(value, Mapping):
        return {key: _keyed(item, _deeper(depth)) for key, item in value.items()}
    if kind is not bool and isinstance(value, list | tuple):
        return [_keyed(item, _deeper(depth)) for item in value]
    return str(value).strip()  # a boolean "True", as at the top


def _deeper(depth: int) -> int:
    """The depth of a container's members; raises ``_TooDeepError`` past ``_MAX_DEPTH``."""
    if depth >= _MAX_DEPTH:
        raise _TooDeepError
    return depth + 1


def unrecorded(call: ToolCall) -> bool:
    """Whether the producer recorded no arguments for ``call`` (``None``, and not because
    what it recorded could not be read)."""
    return call.arguments is None and call.arguments_error is None


#: What ``recording_tools`` holds and ``recording_key`` builds: a producer (``producer``) and
#: a normalized tool name.
RecordingKey: TypeAlias = tuple[str | None, str | None, str]


#: The service name the OpenTelemetry SDKs report when none is set (``unknown_service``, or
#: ``unknown_service:<process executable>``).
_DEFAULT_SERVICE: Final = "unknown_service"


def producer(call: ToolCall) -> tuple[str | None, str | None]:
    """Who wrote ``call``, as far as whether its arguments are recorded goes: ``(service,
    None)``, the process whose instrumentation wrote its span (``ToolCall.service``: a GenAI
    instrumentation's content capture is that process's setting, for all its agents alike).
    A call that names no service (a dump written before calls carried it, a span without
    ``service.name``) is told by its agent instead, ``(None, agent)``: the best it says.

    Not the agent where the service is known: agents of two services may share a name
    (Strands' default ``Strands Agents``), a nested run that writes no agent span is its
    caller's agent, and runs without agent spans are all agent ``None``; so one service's
    recorded lookup made another's, recording none, read as lost. Nor the agent beside the
    service: another agent of a service that records a tool's arguments, whose call of it
    carries none, lost its own as any call of that process does, and keyed apart it would
    verify any value. The SDKs' default name (``unknown_service``, ``unknown_service:python``:
    ``OTEL_SERVICE_NAME`` not set) names no process: two such processes would read as one,
    so such a call is told by its agent too."""
    service = call.service
    if service is not None and not service.startswith(_DEFAULT_SERVICE):
        return service, None
    return None, call.agent


def recording_key(call: ToolCall, tool: str) -> RecordingKey:
    """``call``'s producer and ``tool`` (its normalized name), as ``recording_tools`` holds
    them."""
    service, agent = producer(call)
    return service, agent, tool


def recording_tools(calls: Sequence[ToolCall], tools: Sequence[str]) -> frozenset[RecordingKey]:
    """The producers' tools (``recording_key(calls[i], tools[i])``, ``tools[i]`` being
    ``calls[i]``'s normalized name) some call of which, in the run, carries arguments, read or
    not: that producer records their arguments, so a call of one that carries none lost its
    own (a call run again, its request not paired), and may not be read as one of a producer
    that records none (which may have been of any value).

    By producer, not by tool alone: a run can mix instrumentations (an agent used as a tool
    on another service, its GenAI content capture off), and one that records a tool's
    arguments says nothing of another that records none. The producer is the service that
    wrote the call (``producer``: its tool span's, or for a call never run the asking model
    call's), else its agent."""
    return frozenset(
        recording_key(call, tools[i]) for i, call in enumerate(calls) if not unrecorded(call)
    )
