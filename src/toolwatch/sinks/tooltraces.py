"""The ``--dump-tooltraces`` format: one ToolTrace per line, for debugging and replay.

``ToolTraceWriter`` writes it (``toolwatch replay`` reads it back through
``tooltrace_from_dict``, files and errors by line; ``read_tooltraces`` reads plain lines): one
``tooltrace_to_dict`` object per line, as ASCII-only JSON. Every ``ToolTrace`` and ``ToolCall``
field appears under its own name, plus ``"format": "toolwatch.tooltrace/v1"`` (required on
reading: a line of some other JSON, such as the findings log, is named as such); ids are hex
strings, times integer nanoseconds (or ``null``), ``arguments``/``result`` the JSON values
they hold (bytes, which JSON cannot hold, are written as hex strings). ``tooltrace_from_dict``
inverts ``tooltrace_to_dict`` exactly for JSON-valued arguments, and reads the dumps of
earlier versions (without ``agents``, ``shared_keys``, or a call's ``hosted``, ``handoff``,
``rerun`` or ``service``).

Not compiled: it runs once per ToolTrace, and only when a dump is configured or replayed.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

from toolwatch.jsontext import compact_encoder
from toolwatch.model import CallStatus
from toolwatch.model_traces import ToolCall, ToolTrace
from toolwatch.sinks.findings import json_default
from toolwatch.sinks.linefile import TextOutput, write_lines

__all__ = [
    "TOOLTRACE_FORMAT",
    "ToolTraceWriter",
    "read_tooltraces",
    "tooltrace_from_dict",
    "tooltrace_to_dict",
]

#: The ``format`` key of every ``--dump-tooltraces`` line.
TOOLTRACE_FORMAT = "toolwatch.tooltrace/v1"

# ASCII only: text may hold U+2028, U+0085, ... which some line splitters split on.
_to_ascii_json = compact_encoder(json_default, ascii_only=True)


class ToolTraceWriter:
    """Writes each ToolTrace it is given as one JSON line (``--dump-tooltraces``).

    Flushes after every line so the file can be followed live; the stream's owner closes it.
    ``serve`` writes to a ``background.BackgroundOutput``, which counts and logs failed writes
    by outage itself, and never raises.
    """

    def __init__(self, stream: TextOutput) -> None:
        self.stream = stream

    def write(self, trace: ToolTrace) -> None:
        """One line; a write that fails raises ``OSError``."""
        write_lines(self.stream, _to_ascii_json(tooltrace_to_dict(trace)) + "\n", None)

    def close(self) -> None:
        self.stream.flush()


def tooltrace_to_dict(trace: ToolTrace) -> dict[str, Any]:
    """``trace`` as a JSON-ready dict in the ``--dump-tooltraces`` format."""
    return {
        "format": TOOLTRACE_FORMAT,
        "trace_id": trace.trace_id,
        "run_span_id": trace.run_span_id,
        "service": trace.service,
        "agent": trace.agent,
        "model": trace.model,
        "calls": [_call_to_dict(call) for call in trace.calls],
        "final_text": trace.final_text,
        "refusal": trace.refusal,
        "refusal_reason": trace.refusal_reason,
        "error_count": trace.error_count,
        "complete": trace.complete,
        "incomplete_reason": trace.incomplete_reason,
        "start_ns": trace.start_ns,
        "end_ns": trace.end_ns,
        "span_count": trace.span_count,
        "conversation_id": trace.conversation_id,
        "reference_keys": dict(trace.reference_keys),
        "agents": list(trace.agents),
        "shared_keys": dict(trace.shared_keys),
    }


def _call_to_dict(call: ToolCall) -> dict[str, Any]:
    return {
        "tool_name": call.tool_name,
        "raw_name": call.raw_name,
        "arguments": call.arguments,
        "arguments_error": call.arguments_error,
        "call_id": call.call_id,
        "parent_call_id": call.parent_call_id,
        "sequence_index": call.sequence_index,
        "parallel_group": call.parallel_group,
        "status": str(call.status),
        "error_type": call.error_type,
        "agent": call.agent,
        "span_id": call.span_id,
        "start_ns": call.start_ns,
        "end_ns": call.end_ns,
        "result": call.result,
        "hosted": call.hosted,
        "handoff": call.handoff,
        "rerun": call.rerun,
        "service": call.service,
    }


def tooltrace_from_dict(data: Mapping[str, Any]) -> ToolTrace:
    """The ToolTrace ``tooltrace_to_dict`` made ``data`` from.

    Raises ``ValueError`` naming the problem when ``data`` is not in the format.
    """
    if not isinstance(data, Mapping):
        raise ValueError(f"expected a ToolTrace object, got {type(data).__name__}")
    if "format" not in data:
        raise ValueError(
            f'no "format" field: every --dump-tooltraces line has "format": "{TOOLTRACE_FORMAT}"'
        )
    fmt = data["format"]
    if fmt != TOOLTRACE_FORMAT:
        raise ValueError(f"unsupported format {fmt!r:.60}, expected {TOOLTRACE_FORMAT!r}")
    fields = _checked_fields(ToolTrace, {k: v for k, v in data.items() if k != "format"})
    _check_types(fields, _TRACE_TYPES, "")
    if not _HEX_TRACE_ID.fullmatch(fields["trace_id"]):
        raise ValueError(f"trace_id must be 32 hex digits, got {fields['trace_id']!r:.40}")
    for name in ("reference_keys", "shared_keys"):  # shared_keys: absent in earlier dumps
        keys = fields.get(name, {})
        if not all(type(k) is str and type(v) is str for k, v in keys.items()):
            raise ValueError(f"{name} must map names to strings, got {keys!r:.60}")
        fields[name] = dict(keys)
    try:
        fields["calls"] = tuple(_call_from_dict(c, i) for i, c in enumerate(fields["calls"]))
        fields["agents"] = _names(fields.get("agents", []))  # absent in earlier dumps
        return ToolTrace(**fields)
    except TypeError as e:
        raise ValueError(str(e)) from None


def _names(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"agents must be a list of agent names, got {value!r:.80}")
    return tuple(value)


def _call_from_dict(data: Mapping[str, Any], index: int) -> ToolCall:
    if isinstance(data, Mapping):  # earlier dumps: no call hosted, a handoff or a rerun, no service
        data = {"hosted": False, "handoff": False, "rerun": False, "service": None, **data}
    fields = _checked_fields(ToolCall, data, " in a call")
    _check_types(fields, _CALL_TYPES, f"calls[{index}].")
    fields["status"] = CallStatus(fields["status"])
    return ToolCall(**fields)


_HEX_TRACE_ID: Final = re.compile(r"[0-9a-fA-F]{32}")
_TEXT: Final = (str,)
_MAYBE_TEXT: Final = (str, type(None))
_COUNT: Final = (int,)
_MAYBE_COUNT: Final = (int, type(None))
_FLAG: Final = (bool,)
#: The JSON types of the dump format's fields (``arguments`` and ``result`` take any value).
_CALL_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "tool_name": _TEXT,
    "raw_name": _TEXT,
    "arguments_error": _MAYBE_TEXT,
    "call_id": _MAYBE_TEXT,
    "parent_call_id": _MAYBE_TEXT,
    "sequence_index": _COUNT,
    "parallel_group": _MAYBE_COUNT,
    "status": _TEXT,
    "error_type": _MAYBE_TEXT,
    "agent": _MAYBE_TEXT,
    "span_id": _MAYBE_TEXT,
    "start_ns": _MAYBE_COUNT,
    "end_ns": _MAYBE_COUNT,
    "hosted": _FLAG,
    "handoff": _FLAG,
    "rerun": _FLAG,
    "service": _MAYBE_TEXT,
}
_TRACE_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "trace_id": _TEXT,
    "run_span_id": _MAYBE_TEXT,
    "service": _MAYBE_TEXT,
    "agent": _MAYBE_TEXT,
    "model": _MAYBE_TEXT,
    "calls": (list,),
    "final_text": _MAYBE_TEXT,
    "refusal": _FLAG,
    "refusal_reason": _MAYBE_TEXT,
    "error_count": _COUNT,
    "complete": _FLAG,
    "incomplete_reason": _MAYBE_TEXT,
    "start_ns": _COUNT,
    "end_ns": _COUNT,
    "span_count": _COUNT,
    "conversation_id": _MAYBE_TEXT,
    "reference_keys": (dict,),
    "agents": (list,),
    "shared_keys": (dict,),
}
_TYPE_NAMES: Final = {
    str: "a string",
    int: "an integer",
    bool: "true or false",
    list: "a list",
    dict: "an object",
    type(None): "null",
}


def _check_types(fields: Mapping[str, Any], types: Mapping[str, tuple[type, ...]], at: str) -> None:
    """Raises ``ValueError`` naming the first field whose value has the wrong JSON type
    (a boolean is no integer)."""
    for name, allowed in types.items():
        if name not in fields:
            continue
        value = fields[name]
        kind = type(value)
        if kind not in allowed:
            wanted = " or ".join(_TYPE_NAMES[t] for t in allowed)
            raise ValueError(f"{at}{name} must be {wanted}, got {value!r:.40}")


def _checked_fields(record: type[Any], data: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    """``data`` as keyword arguments of ``record``'s constructor; ``ValueError`` naming the
    first unknown or missing field. (The compiled constructors' own errors do not name it.)"""
    if not isinstance(data, Mapping):
        raise ValueError(f"expected an object{where}, got {type(data).__name__}")
    known = dataclasses.fields(record)
    names = {f.name for f in known}
    unknown = sorted(k for k in data if k not in names)
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r}{where}")
    for f in known:
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and f.name not in data:
            raise ValueError(f"missing field {f.name!r}{where}")
    return dict(data)


def read_tooltraces(lines: Iterable[str]) -> Iterator[ToolTrace]:
    """Parses ``--dump-tooltraces`` lines, skipping blank ones.

    Raises ``ValueError`` naming the 1-based line number of the first bad line.
    """
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield tooltrace_from_dict(json.loads(line))
        except ValueError as e:  # json.JSONDecodeError is a ValueError
            raise ValueError(f"line {number}: {e}") from e
