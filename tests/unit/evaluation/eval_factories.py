"""Builders and Hypothesis strategies for evaluator tests: ToolCalls, ToolTraces, cases."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from typing import Any

from hypothesis import strategies as st

from tests import factories
from toolwatch.model import CallStatus
from toolwatch.model_evaluation import ExpectedCall, GoldenCase
from toolwatch.model_traces import ToolCall, ToolTrace

__all__ = [
    "A1",
    "A2",
    "POLICY",
    "block_lcs",
    "call",
    "case",
    "every_order",
    "grouped",
    "json_values",
    "quadratic_lcs",
    "rerun",
    "tool_traces",
    "trace",
]

#: A policy under which every policy evaluator has something to judge in ``tool_traces``.
POLICY: dict[str, Any] = {
    "dangerous_tools": ["issue_refund"],
    "verification_tools": ["lookup_order"],
    "bindings": {"issue_refund.a": "lookup_order.a"},
    "allowed_tools": {"*": ["lookup_order", "issue_refund", "search"]},
    "repeat_limit": 0,
    "invariants": [
        {"kind": "forbidden", "tool": "send_email"},
        {"kind": "order", "before": "lookup_order", "after": "issue_refund"},
        {"kind": "arguments", "tool": "search", "schema": {"type": "object"}},
    ],
}
#: Two orders' arguments, for calls of one request and of another.
A1, A2 = {"order_id": "A-1"}, {"order_id": "A-2"}


def call(
    name: str,
    arguments: Any = None,
    *,
    index: int = 0,
    ok: bool = True,
    group: int | None = None,
    span: str | None = None,
    agent: str | None = "support",
    executed: bool = True,
    parent: int | None = None,
    hosted: bool = False,
) -> ToolCall:
    """A ToolCall; ``index`` is its sequence index, the span id defaults to ``s<index>``
    (``None`` when not ``executed``: a call seen only in the model's output). ``parent`` is
    the index of the call it is nested in (an agent used as a tool), by that call's id;
    ``hosted``: the model output marks it as run by the provider."""
    return factories.tool_call(
        tool_name=name,
        arguments=arguments,
        call_id=f"c{index}",
        parent_call_id=None if parent is None else f"c{parent}",
        sequence_index=index,
        parallel_group=group,
        status=CallStatus.OK if ok else CallStatus.ERROR,
        error_type=None if ok else "ToolError",
        agent=agent,
        span_id=(span or f"s{index}") if executed else None,
        start_ns=index * 10,
        end_ns=index * 10 + 5,
        hosted=hosted,
    )


def rerun(
    name: str,
    arguments: Any,
    *,
    index: int,
    call_id: str,
    ok: bool = True,
    agent: str | None = "support",
    parent: str | None = None,
) -> ToolCall:
    """A span that ran again the request an earlier call asked under ``call_id``
    (``call`` names the call at index ``i`` ``c<i>``), as assembly marks it."""
    return factories.tool_call(
        tool_name=name,
        arguments=arguments,
        call_id=call_id,
        parent_call_id=parent,
        sequence_index=index,
        status=CallStatus.OK if ok else CallStatus.ERROR,
        error_type=None if ok else "Timeout",
        agent=agent,
        span_id=f"s{index}",
        start_ns=index * 10,
        end_ns=index * 10 + 5,
        rerun=True,
    )


def trace(
    *calls: str | tuple[str, Any] | ToolCall,
    refusal: bool = False,
    agent: str | None = "support",
    trace_id: str = "ab" * 16,
    final_text: str | None = None,
) -> ToolTrace:
    """A ToolTrace of ``calls``: names, ``(name, arguments)`` pairs or ready ToolCalls
    (sequence indexes are reassigned in order unless the ToolCall already differs)."""
    built = tuple(_as_call(c, i, agent) for i, c in enumerate(calls))
    return factories.tool_trace(
        trace_id=trace_id,
        run_span_id="r0",
        service="svc",
        agent=agent,
        model="m",
        calls=built,
        refusal=refusal,
        refusal_reason="content_filter" if refusal else None,
        final_text=final_text,
        error_count=sum(1 for c in built if c.status is CallStatus.ERROR),
        end_ns=1_000,
        span_count=len(built) + 1,
    )


def grouped(*parts: str | tuple[str, ...]) -> ToolTrace:
    """A ToolTrace of named calls in which each tuple is one parallel group (the model asked
    for its calls at once), started in the order written: ``grouped("a", ("b", "c"))``."""
    calls: list[ToolCall] = []
    for number, part in enumerate(parts):
        names, group = (part, number) if isinstance(part, tuple) else ((part,), None)
        start = len(calls)
        calls.extend(call(name, index=start + k, group=group) for k, name in enumerate(names))
    return trace(*calls)


def _as_call(value: str | tuple[str, Any] | ToolCall, index: int, agent: str | None) -> ToolCall:
    """Calls given by name are the run's agent's own, as the timeline sets them."""
    if isinstance(value, ToolCall):
        return value
    if isinstance(value, str):
        return call(value, index=index, agent=agent)
    return call(value[0], value[1], index=index, agent=agent)


def case(
    *expected: str | tuple[str, Mapping[str, Any] | None] | ExpectedCall,
    **fields: Any,
) -> GoldenCase:
    """A GoldenCase expecting ``expected`` (names, ``(name, arguments)`` or ExpectedCalls)."""
    calls = tuple(_as_expected(e) for e in expected)
    return GoldenCase(case_id=fields.pop("case_id", "case-1"), expected_tools=calls, **fields)


def _as_expected(value: str | tuple[str, Mapping[str, Any] | None] | ExpectedCall) -> ExpectedCall:
    if isinstance(value, ExpectedCall):
        return value
    if isinstance(value, str):
        return ExpectedCall(value)
    return ExpectedCall(value[0], value[1])


def as_case(source: ToolTrace, **fields: Any) -> GoldenCase:
    """The golden case a run would satisfy exactly: its calls, with their object arguments."""
    return case(*(_expected_of(c) for c in source.calls), **fields)


def _expected_of(c: ToolCall) -> ExpectedCall:
    arguments = c.arguments if isinstance(c.arguments, Mapping) else None
    return ExpectedCall(c.tool_name, arguments)


TOOLS = ("lookup_order", "issue_refund", "search", "send_email")

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(max_size=8),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
arguments = st.one_of(st.none(), st.dictionaries(st.sampled_from("abcd"), json_values, max_size=3))


@st.composite
def tool_traces(draw: st.DrawFn, max_calls: int = 6, tools: Iterable[str] = TOOLS) -> ToolTrace:
    """Runs of up to ``max_calls`` calls of ``tools`` with random arguments, outcomes and
    parallel groups, and a random refusal flag."""
    names = draw(st.lists(st.sampled_from(tuple(tools)), max_size=max_calls))
    calls = [
        call(
            name,
            draw(arguments),
            index=i,
            ok=draw(st.booleans()),
            group=draw(st.one_of(st.none(), st.integers(0, 2))),
        )
        for i, name in enumerate(names)
    ]
    return trace(*calls, refusal=draw(st.booleans()))


def quadratic_lcs(a: Sequence[str], b: Sequence[str]) -> int:
    """The textbook quadratic table, to check the bit-parallel LCS against."""
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            table[i + 1][j + 1] = (
                table[i][j] + 1 if x == y else max(table[i][j + 1], table[i + 1][j])
            )
    return table[-1][-1]


def block_lcs(a: Sequence[Sequence[str]], b: Sequence[Sequence[str]]) -> int:
    """The rule over sides cut into blocks (groups whose members stand together, or one call),
    computed apart from ``lcs``: the most pairs of equal names such that no two pairs cross
    block-wise, by a table over (block, members used) on both sides. Quick for a few dozen
    blocks of up to four calls."""

    @cache
    def best(i: int, used_a: int, j: int, used_b: int) -> int:
        if i == len(a) or j == len(b):
            return 0
        value = max(best(i + 1, 0, j, used_b), best(i, used_a, j + 1, 0))
        for x, name in enumerate(a[i]):
            if used_a >> x & 1:
                continue
            for y, other in enumerate(b[j]):
                if not used_b >> y & 1 and other == name:
                    value = max(value, 1 + best(i, used_a | 1 << x, j, used_b | 1 << y))
                    break
        return value

    return best(0, 0, 0, 0)


def every_order(names: Sequence[str], groups: Sequence[int | None]) -> set[tuple[str, ...]]:
    """Every sequence ``names`` reads as, by brute force: each group's members in any order
    among the places they hold (the order rule's statement)."""
    places: dict[int, list[int]] = {}
    for i, group in enumerate(groups):
        if group is not None:
            places.setdefault(group, []).append(i)
    found = set()
    for moves in itertools.product(*(itertools.permutations(p) for p in places.values())):
        order = list(range(len(names)))
        for held, moved in zip(places.values(), moves, strict=True):
            for place, i in zip(held, moved, strict=True):
                order[place] = i
        found.add(tuple(names[i] for i in order))
    return found


#: A run that did what its reference does (look order A-1 up, refund it), but had to ask the
#: order service three times: twice it failed and was asked again with the same arguments.
ORDER = {"order_id": "A-1"}
FLAKY = trace(
    call("lookup_order", ORDER, index=0, ok=False),
    call("lookup_order", ORDER, index=1, ok=False),
    call("lookup_order", ORDER, index=2),
    call("issue_refund", ORDER, index=3),
)
STEADY = trace(call("lookup_order", ORDER, index=0), call("issue_refund", ORDER, index=1))
