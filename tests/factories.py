"""Builders for the project's records in tests: ``tool_trace``, ``tool_call`` and ``finding``.

Each builder starts from a neutral record and replaces the fields a test names, so a test
spells out only the values it is about. The neutral values are the empty ones: ``None``
for optional fields, zero for counts and times, ``()`` and ``{}`` for collections, ``False``
for flags. The exceptions are listed in each builder's docstring. The keyword arguments are
typed (``Unpack`` of a ``TypedDict``), so a misspelt field or a wrong type is a type error,
and ``dataclasses.replace`` refuses an unknown field at run time.

Import as ``from tests.factories import tool_trace`` (``pythonpath = ["."]`` in the pytest
settings puts the repository root on the path for the unit test directories).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypedDict, Unpack

from toolwatch.model import CallStatus, Category, ReferenceKind, Severity
from toolwatch.model_evaluation import Finding
from toolwatch.model_traces import ToolCall, ToolTrace

__all__ = [
    "DEFAULT_TRACE_ID",
    "FindingFields",
    "ToolCallFields",
    "ToolTraceFields",
    "finding",
    "tool_call",
    "tool_trace",
]

#: The trace id of a default ToolTrace and Finding. Not all zeros: W3C Trace Context
#: (``traceparent`` trace-id) makes the all-zero trace id invalid.
DEFAULT_TRACE_ID = "0" * 31 + "1"


class ToolCallFields(TypedDict, total=False):
    """The fields of ``ToolCall``, each optional, for ``tool_call``."""

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


class ToolTraceFields(TypedDict, total=False):
    """The fields of ``ToolTrace``, each optional, for ``tool_trace``."""

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
    conversation_id: str | None
    reference_keys: Mapping[str, str]
    agents: tuple[str, ...]
    shared_keys: Mapping[str, str]


class FindingFields(TypedDict, total=False):
    """The fields of ``Finding``, each optional, for ``finding``."""

    category: Category
    severity: Severity
    evaluator: str
    reference: ReferenceKind
    score: float | None
    explanation: str
    trace_id: str
    span_id: str | None
    tool: str | None
    field: str | None
    agent: str | None
    details: Mapping[str, Any]
    case_id: str | None
    source_trace_id: str | None
    pair_key: str | None


_NEUTRAL_CALL = ToolCall(
    tool_name="tool",
    raw_name="tool",
    arguments=None,
    arguments_error=None,
    call_id=None,
    parent_call_id=None,
    sequence_index=0,
    parallel_group=None,
    status=CallStatus.OK,
    error_type=None,
    agent=None,
    span_id=None,
    start_ns=None,
    end_ns=None,
)

_NEUTRAL_TRACE = ToolTrace(
    trace_id=DEFAULT_TRACE_ID,
    run_span_id=None,
    service=None,
    agent=None,
    model=None,
    calls=(),
    final_text=None,
    refusal=False,
    refusal_reason=None,
    error_count=0,
    complete=True,
    incomplete_reason=None,
    start_ns=0,
    end_ns=0,
    span_count=0,
)

_NEUTRAL_FINDING = Finding(
    category=Category.TOOL_SELECTION_DRIFT,
    severity=Severity.LOW,
    evaluator="evaluator",
    reference=ReferenceKind.POLICY,
    score=None,
    explanation="finding",
    trace_id=DEFAULT_TRACE_ID,
)


def tool_call(**overrides: Unpack[ToolCallFields]) -> ToolCall:
    """A successful ToolCall of a tool named ``"tool"``, first in its run, with every
    optional field ``None``, changed by ``overrides``.

    ``raw_name`` follows ``tool_name`` unless given: a name that needed no normalizing.
    """
    call = dataclasses.replace(_NEUTRAL_CALL, **overrides)
    if "raw_name" in overrides:
        return call
    return dataclasses.replace(call, raw_name=call.tool_name)


def tool_trace(**overrides: Unpack[ToolTraceFields]) -> ToolTrace:
    """A complete ToolTrace with no calls, no spans and no reference keys, trace id
    ``DEFAULT_TRACE_ID``, every optional field ``None``, changed by ``overrides``.

    Nothing is derived: ``error_count`` and ``span_count`` do not follow ``calls``, and
    ``complete`` does not follow ``incomplete_reason``; a test that needs them consistent
    passes them.
    """
    return dataclasses.replace(_NEUTRAL_TRACE, **overrides)


def finding(**overrides: Unpack[FindingFields]) -> Finding:
    """A low-severity TOOL_SELECTION_DRIFT Finding of the policy reference, with no score,
    evaluator ``"evaluator"``, explanation ``"finding"`` and trace id ``DEFAULT_TRACE_ID``,
    every optional field ``None``, changed by ``overrides``.
    """
    return dataclasses.replace(_NEUTRAL_FINDING, **overrides)
